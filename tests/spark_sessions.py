"""The in-process SparkSession of the unit and fault tests (imported by name: tests/ is on
sys.path): local[2] with the Spark settings every DAG task passes (``job_spark_conf``, from
``PlatformConfig.spark_conf``: the driver JVM's options, log configuration, SQL settings),
this interpreter for the Python workers, and two shuffle partitions instead of the jobs'
eight (the tests' frames are a few rows; the jobs' tests under spark-submit keep eight).
Spark keeps one active session per process, so the folders share it."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

# Settings only the in-process test session differs in (see the module docstring).
TEST_SESSION_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.pyspark.python": sys.executable,
    "spark.pyspark.driver.python": sys.executable,
}


def local_session(name: str):
    from local_stack import job_spark_conf
    from spark_jobs.session import build_spark_session

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # The Python workers unpickle the contract's classes (a Workflow in a closure) before
    # anything imports spark_jobs, which would put plugins/ on their path: put it there first
    # (a job's workers find ml_contract in the --py-files archive instead).
    plugins = str(Path(__file__).resolve().parents[1] / "plugins")
    if plugins not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [plugins, os.environ.get("PYTHONPATH")]))
    # py4j logs at INFO while the interpreter shuts down, after pytest closed the streams.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    return build_spark_session(name, master="local[2]", extra_conf={**job_spark_conf(), **TEST_SESSION_CONF})
