"""The in-process SparkSession of the unit and fault tests (imported by name: tests/ is on
sys.path): local[2], configured like the jobs' own, with this interpreter for the Python
workers. Spark keeps one active session per process, so the folders share it."""

from __future__ import annotations

import logging
import os
import sys


def local_session(name: str):
    from spark_jobs.session import build_spark_session

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # py4j logs at INFO while the interpreter shuts down, after pytest closed the streams.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    return build_spark_session(
        name,
        master="local[2]",
        extra_conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
            "spark.pyspark.python": sys.executable,
        },
    )
