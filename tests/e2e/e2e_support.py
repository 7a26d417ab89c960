"""Shared by the end-to-end test modules (imported by name: tests/e2e is on sys.path)."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

from local_stack import wait_until

WORKFLOW = "mnist"
MODEL = "mnist_cnn"
NIGHTLY_DATE = "2026-11-29"
NIGHTLY_PARTITION = "2026-11-28"  # the run of the 29th processes the day before
NIGHTLY_ROWS = 5000
# The first retry delay of the DAGs the scheduler-driven tests run (ML_RETRY_DELAY_SECONDS;
# the DAGs' default is 60 s): Airflow waits between this and twice this before try 2.
RETRY_DELAY_S = 30


def nightly_table(stack, dataset: str, columns: list[str] | None = None, partition: str = NIGHTLY_PARTITION):
    """The nightly's partition of ``dataset`` (``curated``, ``predictions``) as an Arrow table."""
    import pyarrow.dataset as pads

    from ml_contract.layout import partition_path

    path = partition_path(stack.storage_root / dataset / WORKFLOW, partition)
    assert Path(path).is_dir(), f"{path} was not written"
    return pads.dataset(path, format="parquet").to_table(columns=columns)


def run_nightly(stack) -> str:
    """One ``airflow dags test`` of the nightly DAG; returns its output (fails the test if it fails)."""
    if not (stack.storage_root / "raw" / "mnist" / f"ds={NIGHTLY_PARTITION}").exists():
        stack.generate_drops([NIGHTLY_PARTITION], rows=NIGHTLY_ROWS)
    completed = stack.dags_test("mnist_nightly_retrain", NIGHTLY_DATE, check=False, capture_output=True)
    assert completed.returncode == 0, completed.stdout[-5000:] + completed.stderr[-5000:]
    return completed.stdout + completed.stderr


def wait_for(predicate, timeout: float, interval: float = 1, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value; that value is returned."""
    return wait_until(predicate, timeout, interval, what)


def backfill(stack, dag_id: str, first_ds: str, last_ds: str, *extra: str, timeout: float = 1800) -> dict[str, str]:
    """``airflow backfill create`` for dag_id's runs of first_ds..last_ds (logical dates);
    waits for the backfill to complete and asserts that each of its days has a run and that
    every run succeeded; returns {run_id: state}."""
    backfill_id = create_backfill(stack, dag_id, first_ds, last_ds, *extra)
    return completed_backfill(stack, dag_id, backfill_id, first_ds, last_ds, timeout)


def backfills_done(stack, dag_id: str, timeout: float = 300) -> None:
    """Wait until no backfill of ``dag_id`` is running. Airflow runs one per DAG at a time, and
    marks one completed a scheduler loop or more after its last run ended."""

    def running() -> list[dict]:
        listing = stack.api("GET", f"/backfills?dag_id={dag_id}&limit=100")[1]["backfills"]
        return [backfill for backfill in listing if not backfill["completed_at"]]

    wait_for(
        lambda: not running(),
        timeout,
        1,
        f"the running backfill of {dag_id} completed",
    )


def create_backfill(stack, dag_id: str, first_ds: str, last_ds: str, *extra: str) -> int:
    """``airflow backfill create`` for dag_id's runs of first_ds..last_ds (once an earlier
    backfill of the DAG, an earlier test's, has completed); returns its id."""
    backfills_done(stack, dag_id)
    created = stack.airflow(
        "backfill",
        "create",
        "--dag-id",
        dag_id,
        "--from-date",
        first_ds,
        "--to-date",
        last_ds,
        "--max-active-runs",
        "2",
        *extra,
        check=False,
        capture_output=True,
    )
    assert created.returncode == 0, created.stdout[-3000:] + created.stderr[-3000:]
    _, listing = stack.api("GET", f"/backfills?dag_id={dag_id}&limit=100")
    return max(b["id"] for b in listing["backfills"])


def completed_backfill(
    stack, dag_id: str, backfill_id: int, first_ds: str, last_ds: str, timeout: float = 1800
) -> dict[str, str]:
    """Waits for the backfill to complete; asserts one run per day, all successful; returns
    {run_id: state}. The runs are picked by logical date: Airflow's run listing does not
    name the backfill a run belongs to, and a reprocessed run keeps its run id."""
    wait_for(lambda: stack.api("GET", f"/backfills/{backfill_id}")[1].get("completed_at"), timeout, 1, "backfill done")
    _, runs = stack.api("GET", f"/dags/{dag_id}/dagRuns?limit=100&run_type=backfill")
    mine = [r for r in runs["dag_runs"] if first_ds <= r["logical_date"][:10] <= last_ds]
    days = {r["logical_date"][:10] for r in mine}
    expected = (date.fromisoformat(last_ds) - date.fromisoformat(first_ds)).days + 1
    assert len(days) == expected, f"backfill {backfill_id}: runs for {sorted(days)}, {expected} days asked"
    failed = [(r["dag_run_id"], r["state"]) for r in mine if r["state"] != "success"]
    assert not failed, f"backfill {backfill_id} runs not successful: {failed}"
    return {r["dag_run_id"]: r["state"] for r in mine}


TERMINAL = ("success", "failed")


def finished_run(stack, dag_id: str, run_id: str, timeout: float = 900) -> dict:
    """The run once it is in a terminal state."""
    return wait_for(
        lambda: (r := stack.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")[1]).get("state") in TERMINAL and r,
        timeout,
        1,
        f"{dag_id} run {run_id}",
    )


def task_instances(stack, dag_id: str, run_id: str) -> dict[str, dict]:
    _, listing = stack.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100")
    return {ti["task_id"]: ti for ti in listing["task_instances"]}


def task_log(stack, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
    """The task's log as the UI shows it (read by the API server from the log folder)."""
    status, body = stack.api(
        "GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}?full_content=true"
    )
    assert status == 200, body
    return json.dumps(body)
