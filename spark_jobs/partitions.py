"""Reading and replacing ``ds=YYYY-MM-DD`` partitions: the only place that knows the layout."""

from __future__ import annotations

import argparse
import datetime as dt

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.schema import PARTITION_COL
from spark_jobs.storage import path_exists


def parse_ds(value: str) -> str:
    """argparse type for a partition date: strict ``YYYY-MM-DD``."""
    try:
        parsed = dt.date.fromisoformat(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected a date YYYY-MM-DD, got {value!r}") from err
    if parsed.isoformat() != value:
        raise argparse.ArgumentTypeError(f"expected a date YYYY-MM-DD, got {value!r}")
    return value


def partition_path(root: str, ds: str) -> str:
    """Location of one day's partition under a dataset root."""
    return f"{root.rstrip('/')}/{PARTITION_COL}={ds}"


def read_partitions(spark: SparkSession, root: str, start_ds: str, end_ds: str) -> DataFrame:
    """Rows of the partitions ``start_ds <= ds <= end_ds``, ``ds`` as a ``YYYY-MM-DD`` string.

    Partition discovery prunes to the requested days; an absent dataset is an error that
    names the root rather than Spark's generic "path does not exist".
    """
    if not path_exists(spark, root):
        raise FileNotFoundError(f"dataset {root} does not exist (nothing ingested yet?)")
    df = spark.read.option("basePath", root).parquet(root)
    return df.where(F.col(PARTITION_COL).between(start_ds, end_ds))


def replace_partitions(df: DataFrame, root: str) -> None:
    """Write ``df`` partitioned by ``ds``, replacing exactly the days it contains.

    Relies on ``spark.sql.sources.partitionOverwriteMode=dynamic`` (set by
    :func:`spark_jobs.session.build_spark_session`): Spark stages the new files and swaps
    each partition in at commit, so a job that dies mid-write leaves the old one readable.
    """
    df.write.mode("overwrite").partitionBy(PARTITION_COL).parquet(root)
