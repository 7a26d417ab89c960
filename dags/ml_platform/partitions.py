"""Which partition a DAG run processes: explicit, documented and unit-tested.

- A run with a data interval (``CronDataIntervalTimetable``, e.g. ``mnist_batch_scoring``)
  processes the UTC day of its logical date: the scheduled or backfilled run of the interval
  2026-11-01 00:00 -> 2026-11-02 00:00 (logical date 2026-11-01) is ``ds=2026-11-01``, so a
  backfill from 2026-11-01 to 2026-11-03 scores exactly those three days, and so does a run
  triggered by hand with logical date 2026-11-01, whose interval Airflow infers as the one
  *ending* then (2026-10-31 -> 2026-11-01). A manual run with no logical date processes the
  start of its inferred interval: the last complete day.
- A run without one (Airflow 3's default ``CronTriggerTimetable``: logical date = run
  time, empty interval; or an asset-triggered / date-less manual run) processes the UTC
  day *before* its logical date, or before the time it was queued when it has none: the
  02:00 UTC nightly run of 2026-11-29 handles ``ds=2026-11-28``, the day that just ended.

Nothing here reads the wall clock.
"""

from __future__ import annotations

import hashlib
from datetime import date, datetime, timedelta
from typing import Any

from ml_contract import layout


def partition_ds(dag_run: Any) -> str:
    """``YYYY-MM-DD`` of the day a run processes (DAG macro ``partition_ds(dag_run)``)."""
    start = getattr(dag_run, "data_interval_start", None)
    end = getattr(dag_run, "data_interval_end", None)
    if start is not None and end is not None and end > start:
        return (dag_run.logical_date or start).date().isoformat()
    anchor: datetime = dag_run.logical_date or dag_run.run_after
    return (anchor.date() - timedelta(days=1)).isoformat()


def run_time(dag_run: Any) -> str:
    """ISO-8601 time a run stands for: its logical date, else when it was queued to run."""
    return (dag_run.logical_date or dag_run.run_after).isoformat()


def window_start_ds(end_ds: str, days: int) -> str:
    """First day of a window of ``days`` days ending on ``end_ds`` (inclusive)."""
    if days < 1:
        raise ValueError(f"window must span at least one day, got {days}")
    return (date.fromisoformat(end_ds) - timedelta(days=days - 1)).isoformat()


# Room for the hash and a file system's 255-byte limit on one name.
_RUN_KEY_READABLE_MAX = 200


def run_key(run_id: str) -> str:
    """One path segment per run id (its scratch folder, checkpoints, Spark app name).

    The readable part keeps ASCII letters, digits, ``-``, ``_`` and ``.``; anything else
    (``:``, ``+``, ``/``, spaces) becomes ``_``, so different run ids can read the same
    (``a+b``, ``a_b``). A hash of the whole run id follows it, so distinct runs never share
    a folder: a cleared run must not resume another run's checkpoints.
    """
    readable = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "-_.") else "_" for ch in run_id)
    readable = readable.strip("._-")[:_RUN_KEY_READABLE_MAX] or "run"
    digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{readable}-{digest}"


MACROS = {"partition_ds": partition_ds, "run_time": run_time, "window_start_ds": window_start_ds, "run_key": run_key}

# When the nightly retraining runs (UTC); batch scoring's ``as_of`` policy derives from it.
NIGHTLY_CRON, NIGHTLY_HOUR_UTC = layout.NIGHTLY_CRON, layout.NIGHTLY_HOUR_UTC

PARTITION_DS = "{{ partition_ds(dag_run) }}"
RUN_KEY = "{{ run_key(run_id) }}"
RUN_TIME = "{{ run_time(dag_run) }}"
