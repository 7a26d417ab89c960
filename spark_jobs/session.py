"""The one SparkSession builder (and log set-up) every job uses."""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession


def configure_job_logging() -> None:
    """Progress from our own code at INFO; third-party Python logging (Horovod's
    rendezvous, py4j) only from WARNING, so task logs stay readable."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("spark_jobs").setLevel(logging.INFO)


def build_spark_session(
    app_name: str, *, master: str | None = None, extra_conf: dict[str, str] | None = None
) -> SparkSession:
    """Return the session for a job; master and resources come from spark-submit.

    Jobs replace partitions only through :func:`spark_jobs.partitions.replace_partitions`
    (staged, then swapped in atomically). Dynamic partition overwrite stays on as a guard:
    a stray ``mode("overwrite").partitionBy("ds")`` then replaces only the days it writes
    instead of wiping the dataset. ``master`` and ``extra_conf`` are for tests and notebooks.
    """
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.sources.partitionOverwriteMode", "dynamic")
        .config("spark.sql.session.timeZone", "UTC")
        # ``ds`` stays the string it is in the path, not a DateType guessed from it.
        .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    )
    if master:
        builder = builder.master(master)
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
