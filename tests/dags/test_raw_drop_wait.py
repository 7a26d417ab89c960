"""The nightly and batch scoring wait for their day's raw drop (``wait_for_raw_drop``) instead
of failing at ingest when it has not arrived: the sensor the DAG builds for the embedded default
(no landing zone), rendered for a run and executed as a worker would, against a real storage
root. Before its deadline it reschedules (no worker slot held); a file done; past the deadline
it ends as skipped with its reason, calls the alert hook, and so skips the run's other tasks
instead of failing and retrying them."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pendulum
import pytest

from ml_platform.tasks import raw_drop_deadline

DS = "2026-11-28"  # the partition of the nightly run of 2026-11-29 02:00 UTC
LOGICAL_DATE = pendulum.datetime(2026, 11, 29, 2, tz="UTC")


def render(task):
    """The context a worker gives ``task`` in the nightly run of LOGICAL_DATE (templates rendered)."""
    dag = task.dag
    context = {
        "dag": dag,
        "dag_run": SimpleNamespace(
            logical_date=LOGICAL_DATE,
            run_after=LOGICAL_DATE,
            data_interval_start=LOGICAL_DATE,
            data_interval_end=LOGICAL_DATE,
            conf={},
        ),
        "run_id": f"scheduled__{LOGICAL_DATE.isoformat()}",
        "ds": LOGICAL_DATE.to_date_string(),  # Airflow's own context keys: no task argument may take them
        "logical_date": LOGICAL_DATE,
        "params": {},
        "ti": SimpleNamespace(xcom_push=lambda **_: None, get_first_reschedule_date=lambda _context: None),
    }
    task.render_template_fields(context)
    return context


@pytest.fixture
def sensor(parse_dags, tmp_path, monkeypatch):
    """``sensor(**env)``: the nightly's wait_for_raw_drop on a storage root of its own, and that root."""
    monkeypatch.delenv("ML_LANDING_CONTAINER", raising=False)
    monkeypatch.delenv("ML_STORAGE_CONN_ID", raising=False)
    root = tmp_path / "data"

    def parse(**env: str):
        dag = parse_dags(ML_STORAGE_ROOT=str(root), **env).dags["mnist_nightly_retrain"]
        return dag.get_task("wait_for_raw_drop"), root / "raw" / "mnist" / f"ds={DS}"

    return parse


def test_the_wait_comes_first_frees_its_slot_and_skips_rather_than_fails(parse_dags, sensor):
    wait, _ = sensor()
    assert wait.mode == "reschedule" and wait.soft_fail is True
    assert wait.poke_interval == 300
    assert wait.downstream_task_ids == {"claim_curated"} and not wait.upstream_task_ids
    scoring = parse_dags().dags["mnist_batch_scoring"].get_task("wait_for_raw_drop")
    assert scoring.upstream_task_ids == {"check_conf"} and scoring.downstream_task_ids == {"claim_curated"}


def test_before_the_deadline_it_reschedules_until_a_file_of_the_day_lands(sensor):
    from airflow.sdk.exceptions import AirflowRescheduleException

    # 720 hours after the day: the deadline is still ahead (the clock decides only how long to wait).
    wait, partition = sensor(ML_RAW_DROP_DEADLINE_HOURS="720")
    context = render(wait)
    with pytest.raises(AirflowRescheduleException):  # frees the worker slot until the next look
        wait.execute(context)
    partition.mkdir(parents=True)
    (partition / "_COPYING_").write_text("a writer's marker")  # not a file ingest reads
    (partition / ".part-0.csv.crc").write_text("")
    with pytest.raises(AirflowRescheduleException):
        wait.execute(context)
    (partition.parent / "ds=2026-11-27").mkdir()
    (partition.parent / "ds=2026-11-27" / "part-0.csv").write_text("5,0,0\n")  # another day's drop
    with pytest.raises(AirflowRescheduleException):
        wait.execute(context)
    (partition / "part-0.csv").write_text("5,0,0\n")
    wait.execute(context)  # done: the run goes on to ingest


def test_past_the_deadline_it_is_skipped_naming_the_day_the_path_and_the_deadline(sensor, monkeypatch):
    from airflow.sdk.exceptions import AirflowSkipException

    pages = []
    monkeypatch.setitem(sys.modules, "drop_alerts", SimpleNamespace(page=pages.append))
    wait, partition = sensor(ML_RAW_DROP_DEADLINE_HOURS="24", ML_RAW_DROP_ALERT="drop_alerts:page")
    context = render(wait)
    with pytest.raises(AirflowSkipException) as skipped:
        wait.execute(context)
    reason = str(skipped.value)
    assert reason.startswith(f"no raw drop for ds={DS} at {partition}"), reason
    assert "by its deadline 2026-11-30T00:00:00+00:00 (ML_RAW_DROP_DEADLINE_HOURS=24 after the day)" in reason
    for callback in wait.on_skipped_callback:
        callback({**context, "exception": skipped.value})
    assert [page["exception"] for page in pages] == [skipped.value]


@pytest.mark.parametrize(
    ("ds", "hours", "deadline"),
    [("2026-11-28", 24, "2026-11-30T00:00:00+00:00"), ("2024-02-28", 1.5, "2024-02-29T01:30:00+00:00")],
)
def test_the_deadline_counts_from_the_end_of_the_day(ds, hours, deadline):
    assert raw_drop_deadline(ds, hours).isoformat() == deadline
