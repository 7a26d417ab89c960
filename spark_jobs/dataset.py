"""The deterministic train / held-out split shared by training and evaluation."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.schema import ROW_ID_COL


def _is_holdout(holdout_pct: int, seed: int) -> Column:
    # A hash of the stable row id, not rand(): the same row is held out on every run.
    return F.pmod(F.xxhash64(F.col(ROW_ID_COL), F.lit(seed)), F.lit(100)) < holdout_pct


def filter_training_rows(curated_df: DataFrame, holdout_pct: int, seed: int) -> DataFrame:
    return curated_df.where(~_is_holdout(holdout_pct, seed))


def filter_holdout_rows(curated_df: DataFrame, holdout_pct: int, seed: int) -> DataFrame:
    return curated_df.where(_is_holdout(holdout_pct, seed))
