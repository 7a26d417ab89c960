"""Where data lives and which rows are held out, the same for the DAGs and the jobs.

- **Partitions**: a dataset is ``<root>/ds=YYYY-MM-DD``, one folder per day
  (:func:`partition_path`, :data:`PARTITION_COL`); the DAGs build the paths they hand to
  the jobs, the jobs, the sample data and the scripts read and write them, all here
  (:func:`days_between` the days of a range).
- **The held-out split**: :data:`HOLDOUT_PCT` percent of a window's rows, chosen by a hash of
  the row id with :data:`SPLIT_SEED`, are never trained on: training evaluates them after
  every epoch, registration gates on them. The DAGs pass both to the train and register jobs,
  whose defaults they are too (``spark_jobs.dataset`` applies the split).
- **The nightly's time**: :data:`NIGHTLY_HOUR_UTC` (its cron :data:`NIGHTLY_CRON`); batch
  scoring's ``as_of`` model policy derives the logical time of the nightly of a day from it.
"""

from __future__ import annotations

import datetime as dt
import os

PARTITION_COL = "ds"
HOLDOUT_PCT = 20
SPLIT_SEED = 7
NIGHTLY_HOUR_UTC = 2
NIGHTLY_CRON = f"0 {NIGHTLY_HOUR_UTC} * * *"


def partition_path(root: str | os.PathLike, ds: str) -> str:
    """Location of one day's partition under a dataset root: ``<root>/ds=<ds>``."""
    return f"{os.fspath(root).rstrip('/')}/{PARTITION_COL}={ds}"


def days_between(start_ds: str, end_ds: str) -> list[str]:
    """The days ``start_ds..end_ds``, both included, as ``YYYY-MM-DD``."""
    start, end = dt.date.fromisoformat(start_ds), dt.date.fromisoformat(end_ds)
    if end < start:
        raise ValueError(f"end {end_ds} is before start {start_ds}")
    return [(start + dt.timedelta(days=i)).isoformat() for i in range((end - start).days + 1)]
