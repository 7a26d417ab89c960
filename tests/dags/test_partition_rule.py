"""One partition rule, whatever made the run: for every scheduled DAG, the run the scheduler
makes for a date, the run a backfill of that date makes (Airflow's own backfill planner) and
a run a person triggers with that logical date (the data interval Airflow's REST API infers
for it) process the same day: the day before the logical date for the nightly's
``CronTriggerTimetable``, the logical date's own day for batch scoring's data intervals.

(A hand trigger of ``mnist_batch_scoring`` for 2026-12-01 used to score 2026-11-30 while the
backfill of 2026-12-01 scored 2026-12-01: the inferred interval of a manual run ends at its
logical date.)"""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

from ml_platform.partitions import partition_ds

UTC = dt.UTC
DAYS = ["2026-12-01", "2026-03-01", "2024-02-29", "2026-11-15"]


def scheduled_dags(serialized: dict) -> list[str]:
    """The DAGs on a time schedule (a cron timetable, not an Asset or none)."""
    return sorted(dag_id for dag_id, dag in serialized.items() if dag.timetable.periodic)


def as_run(logical_date, run_after, interval) -> SimpleNamespace:
    return SimpleNamespace(
        logical_date=logical_date,
        run_after=run_after,
        data_interval_start=interval.start,
        data_interval_end=interval.end,
    )


@pytest.fixture(scope="module")
def serialized(dagbag):
    from airflow.serialization.serialized_objects import DagSerialization

    return {dag_id: DagSerialization.from_dict(DagSerialization.to_dict(dagbag.dags[dag_id])) for dag_id in dagbag.dags}


def test_the_scheduled_dags_are_the_nightly_and_batch_scoring_of_each_workflow(serialized):
    scheduled = scheduled_dags(serialized)
    nightly = [dag_id for dag_id in scheduled if dag_id.endswith("_nightly_retrain")]
    scoring = [dag_id for dag_id in scheduled if dag_id.endswith("_batch_scoring")]
    assert nightly and len(nightly) == len(scoring) and len(scheduled) == 2 * len(nightly), scheduled


@pytest.mark.parametrize("day", DAYS)
def test_a_scheduled_run_a_backfill_and_a_manual_trigger_of_a_date_process_the_same_day(serialized, day):
    from airflow.models.backfill import _get_info_list

    start = dt.datetime.fromisoformat(day).replace(tzinfo=UTC)
    scheduled = scheduled_dags(serialized)
    assert scheduled
    for dag_id in scheduled:
        dag = serialized[dag_id]
        (info,) = dag.iter_dagrun_infos_between(start, start + dt.timedelta(days=1) - dt.timedelta(seconds=1))
        logical_date = info.data_interval.start  # a scheduled run's logical date is its interval's start
        scheduled = as_run(logical_date, info.run_after, info.data_interval)
        (planned,) = _get_info_list(from_date=logical_date, to_date=logical_date, reverse=False, dag=dag)
        backfilled = as_run(planned.data_interval.start, planned.run_after, planned.data_interval)
        inferred = dag.timetable.infer_manual_data_interval(run_after=logical_date)  # as the REST API does
        triggered = as_run(logical_date, dt.datetime.now(UTC), inferred)

        days = {"scheduled": partition_ds(scheduled), "backfill": partition_ds(backfilled)}
        days["manual"] = partition_ds(triggered)
        has_interval = info.data_interval.end > info.data_interval.start
        expected = logical_date.date() if has_interval else logical_date.date() - dt.timedelta(days=1)
        assert days == dict.fromkeys(days, expected.isoformat()), (dag_id, str(logical_date), days)
