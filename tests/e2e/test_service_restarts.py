"""Restarts of Airflow's own services in the middle of a backfill, under the real
scheduler (LocalExecutor): the scheduler crashing with its executor's workers and their
running tasks (all in its process group), and separately the API server (the execution
API that every running task reports to) restarted. Each backfill of
``mnist_batch_scoring`` (one day around the scheduler crash, one around the API server's
restart) must complete after the restart with every day scored once, and no task's Spark
job may ever run in two copies at the same time (a sampler watches every job process's
identity for the whole backfill)."""

from __future__ import annotations

import threading
from collections import defaultdict

import pyarrow.dataset as pads
import pytest

from e2e_support import completed_backfill, create_backfill, wait_for
from ml_registry.job_processes import ATTEMPT_VAR, JOB_VAR

DAG_ID = "mnist_batch_scoring"
ROWS = 500
CONF = '{"model_policy": "current"}'
RESTARTS = {
    # service -> the first and last day its backfill covers (days no other test writes)
    "scheduler": ("2026-11-22", "2026-11-22"),
    "api-server": ("2026-11-25", "2026-11-25"),
}
# The scheduler crashes (SIGKILL to it, its executor's workers and their tasks: a lost node,
# an out-of-memory kill of its container); its tasks' Spark jobs stop themselves, and the new
# scheduler takes over the orphaned task instances. (SIGTERM would run each task's on_kill
# and fail it for good: Airflow 3 does not retry a task it terminated.) The API server is
# restarted as a deployment does, SIGTERM then SIGKILL after a grace period.
CRASH = {"scheduler": True, "api-server": False}


class JobSampler:
    """Every second, the attempts of every task's job that have a live process; records each
    moment two attempts of one task's job ran at once."""

    def __init__(self) -> None:
        self.overlaps: list[dict] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        import psutil

        while not self._stop.wait(1):
            attempts = defaultdict(set)
            for proc in psutil.process_iter(["pid"]):
                try:
                    env = proc.environ()
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
                if JOB_VAR in env and env[JOB_VAR].startswith(f"{DAG_ID}/"):
                    attempts[env[JOB_VAR]].add(env.get(ATTEMPT_VAR))
            self.samples += 1
            self.overlaps += [{"job": job, "attempts": sorted(a)} for job, a in attempts.items() if len(a) > 1]


def running_task_of(stack, dag_id: str, first: str, last: str):
    """A task instance of the backfill's runs in state running (for a restart mid-task)."""
    _, runs = stack.api("GET", f"/dags/{dag_id}/dagRuns?limit=100&run_type=backfill")
    for run in runs["dag_runs"]:
        if first <= run["logical_date"][:10] <= last and run["state"] == "running":
            _, tis = stack.api("GET", f"/dags/{dag_id}/dagRuns/{run['dag_run_id']}/taskInstances")
            running = [ti for ti in tis["task_instances"] if ti["state"] == "running"]
            if any(ti["task_id"] in ("ingest_raw_drop", "score_partition") for ti in running):
                return running
    return None


@pytest.fixture(scope="module")
def restarted(airflow_services, scoring_champion):
    stack = airflow_services
    for first, last in RESTARTS.values():
        days = [f"{first[:8]}{day:02d}" for day in range(int(first[8:]), int(last[8:]) + 1)]
        stack.generate_drops(days, rows=ROWS, seed=17)
    wait_for(lambda: stack.api("GET", f"/dags/{DAG_ID}")[0] == 200, 120, 2, f"{DAG_ID} parsed")
    stack.airflow("dags", "unpause", DAG_ID, capture_output=True)
    outcome = {}
    for service, (first, last) in RESTARTS.items():
        with JobSampler() as sampler:
            backfill_id = create_backfill(stack, DAG_ID, first, last, "--dag-run-conf", CONF)
            during = wait_for(
                lambda first=first, last=last: running_task_of(stack, DAG_ID, first, last), 600, 1, "a task running"
            )
            stack.restart_airflow_service(service, crash=CRASH[service])
            runs = completed_backfill(stack, DAG_ID, backfill_id, first, last, timeout=1200)
        outcome[service] = {"runs": runs, "during": during, "overlaps": sampler.overlaps, "samples": sampler.samples}
    return outcome


@pytest.mark.parametrize("service", list(RESTARTS))
def test_the_backfill_completes_after_a_restart_mid_task(restarted, service):
    outcome = restarted[service]
    assert outcome["during"], "the restart did not happen while a task ran"
    first, last = RESTARTS[service]
    days = int(last[8:]) - int(first[8:]) + 1
    assert len(outcome["runs"]) == days and set(outcome["runs"].values()) == {"success"}, outcome["runs"]


@pytest.mark.parametrize("service", list(RESTARTS))
def test_every_day_is_scored_once(restarted, airflow_services, service):
    first, last = RESTARTS[service]
    for day in range(int(first[8:]), int(last[8:]) + 1):
        ds = f"{first[:8]}{day:02d}"
        scored = pads.dataset(
            str(airflow_services.storage_root / "predictions" / "mnist" / f"ds={ds}"), format="parquet"
        ).to_table(columns=["row_id", "model_version"])
        assert scored.num_rows == ROWS, ds
        assert len(set(scored.column("row_id").to_pylist())) == ROWS, ds


@pytest.mark.parametrize("service", list(RESTARTS))
def test_no_task_ran_two_copies_of_its_job_at_once(restarted, service):
    outcome = restarted[service]
    assert outcome["samples"] > 10
    assert outcome["overlaps"] == []
