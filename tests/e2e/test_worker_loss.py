"""Worker loss under the real scheduler: the Airflow task process SIGKILLed while its
Spark job runs (what the out-of-memory killer, a lost node or an evicted pod do), so the
operator's ``on_kill`` never runs.

One nightly run of ``mnist_nightly_retrain`` on LocalExecutor, its ``train_model`` task
SIGKILLed while the two Horovod ranks train and its ``score_partition`` task SIGKILLed
while the pyspark workers score. The lost attempt's job must stop (it watches the task
process that submitted it) instead of running on to log a model or write the day; the
retry must find nothing of it: after the run, no process of a first attempt is alive, and
there is one MLflow run with a model, one registry version, and one scoring of the day.
(Before the job watched its submitter, the SIGKILLed training's job ran on for another
37 s: the worker's supervisor waited that long for the job to close the task's sockets.)

Only ``local[2]`` (client deploy mode) here: Spark's standalone cluster runs no Python
application in cluster deploy mode ("Cluster deploy mode is currently not supported for
python applications on standalone clusters"), so the provider's re-attaching ``durable``
mode has no PySpark job to re-attach to there.
"""

from __future__ import annotations

import signal
import time

import psutil
import pyarrow.dataset as pads
import pytest

from e2e_support import MODEL, RETRY_DELAY_S, finished_run, task_instances, task_log, wait_for
from ml_registry.job_processes import JOB_VAR, job_key, job_processes
from process_markers import describe

DAG_ID = "mnist_nightly_retrain"
LOGICAL_DATE = "2026-11-16T02:00:00Z"
PARTITION = "2026-11-15"  # a day no other test writes
ROWS = 1500


def job_root(key: str, attempt: int) -> psutil.Process | None:
    """The spark-submit JVM of the attempt's job (its parent is the Airflow task process)."""
    for proc in job_processes(key, attempt):
        try:
            if "org.apache.spark.deploy.SparkSubmit" in proc.cmdline():
                return proc
        except psutil.NoSuchProcess:
            continue
    return None


def running_job_of(key: str, attempt: int, worker_pattern: str, timeout: float = 600) -> list[psutil.Process]:
    """The attempt's job once a process matching ``worker_pattern`` (its real work) runs."""

    def working():
        procs = job_processes(key, attempt)
        try:
            return procs if any(worker_pattern in " ".join(p.cmdline()) for p in procs) else None
        except psutil.NoSuchProcess:
            return None

    return wait_for(working, timeout, 1, f"{key} attempt {attempt} running {worker_pattern}")


def lose_the_worker(key: str) -> dict:
    """SIGKILL the Airflow task process that runs the job of ``key`` (attempt 1): the parent
    of its spark-submit. Returns what was running then."""
    root = wait_for(lambda: job_root(key, 1), 60, 1, f"spark-submit of {key}")
    task_process = root.parent()
    assert task_process is not None and JOB_VAR not in _environ(task_process), "the task process is not marked"
    left = job_processes(key, 1)
    task_process.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    lost = {"task_pid": task_process.pid, "job": describe(left), "pids": {p.pid: p.create_time() for p in left}}
    # The job notices that its task is gone and stops itself, well before the retry.
    try:
        wait_for(lambda: not alive(lost["pids"]), 120, 0.5, f"the lost attempt's job of {key} stopped")
    except TimeoutError:
        pass
    lost["stopped_after_s"] = time.monotonic() - killed
    lost["still_running"] = describe([psutil.Process(pid) for pid in alive(lost["pids"])])
    return lost


def _environ(proc: psutil.Process) -> dict:
    try:
        return proc.environ()
    except (psutil.AccessDenied, psutil.NoSuchProcess):
        return {}


def alive(pids: dict[int, float]) -> list[int]:
    """Which of the processes (pid -> create time) still run (a reused pid is not one of them)."""
    still = []
    for pid, created in pids.items():
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                still.append(pid)
        except psutil.NoSuchProcess:
            continue
    return still


@pytest.fixture(scope="module")
def lost_workers(airflow_services, scoring_champion):
    """The nightly run with both workers lost, once it has finished."""
    stack = airflow_services
    stack.generate_drops([PARTITION], rows=ROWS, seed=11)
    wait_for(lambda: stack.api("GET", f"/dags/{DAG_ID}")[0] == 200, 120, 2, f"{DAG_ID} parsed")
    status, run = stack.api("POST", f"/dags/{DAG_ID}/dagRuns", {"logical_date": LOGICAL_DATE})
    assert status == 200, run
    run_id = run["dag_run_id"]
    stack.airflow("dags", "unpause", DAG_ID, capture_output=True)
    seen: dict = {"run_id": run_id}
    try:
        # Unpausing also creates the latest scheduled run (no drop for its day), which would
        # take the DAG's one active-run slot: out of the way as soon as it appears.
        try:
            wait_for(lambda: _fail_other_runs(stack, run_id), 90, 1, "the run created by unpausing")
        except TimeoutError:
            pass
        train, score = (job_key(DAG_ID, task, run_id) for task in ("train_model", "score_partition"))

        running_job_of(train, 1, "gloo_exec_fn")  # both ranks are launched: they train
        seen["train_lost"] = lose_the_worker(train)
        # The retry's job at work: what the first attempt left must be gone by then.
        running_job_of(train, 2, "gloo_exec_fn", timeout=900)
        seen["train_left_during_retry"] = alive(seen["train_lost"]["pids"])

        running_job_of(score, 1, "pyspark.daemon", timeout=900)
        seen["score_lost"] = lose_the_worker(score)
        running_job_of(score, 2, "pyspark.daemon", timeout=900)
        seen["score_left_during_retry"] = alive(seen["score_lost"]["pids"])

        seen["run"] = finished_run(stack, DAG_ID, run_id, timeout=900)
        seen["tis"] = task_instances(stack, DAG_ID, run_id)
        seen["logs"] = {t: task_log(stack, DAG_ID, run_id, t, 2) for t in ("train_model", "score_partition")}
        seen["left_after"] = {
            task: describe(job_processes(job_key(DAG_ID, task, run_id))) for task in ("train_model", "score_partition")
        }
    finally:
        stack.airflow("dags", "pause", DAG_ID, capture_output=True)
        _fail_other_runs(stack, None)
    return seen


def _fail_other_runs(stack, keep: str | None) -> list[str]:
    """Mark failed every queued or running run of the DAG but ``keep``; returns their ids."""
    _, active = stack.api("GET", f"/dags/{DAG_ID}/dagRuns?state=queued&state=running&limit=100")
    failed = [other["dag_run_id"] for other in active["dag_runs"] if other["dag_run_id"] != keep]
    for other in failed:
        stack.api("PATCH", f"/dags/{DAG_ID}/dagRuns/{other}", {"state": "failed"})
    return failed


def test_the_run_completes_after_both_workers_were_lost(lost_workers):
    assert lost_workers["run"]["state"] == "success", lost_workers["run"]
    tis = lost_workers["tis"]
    assert tis["train_model"]["try_number"] == 2 and tis["train_model"]["state"] == "success"
    assert tis["score_partition"]["try_number"] == 2 and tis["score_partition"]["state"] == "success"


@pytest.mark.parametrize("task", ["train", "score"])
def test_the_lost_attempts_job_stops_itself_before_the_retry(lost_workers, task, report_figure):
    """No orphan: the job of the SIGKILLed task stops within seconds (its driver watches
    the task process), not when it has finished its work, and before the retry starts."""
    lost = lost_workers[f"{task}_lost"]
    assert len(lost["pids"]) >= 3, lost  # spark-submit, the Python driver, its workers or ranks
    assert lost["still_running"] == [], lost["job"]
    report_figure(f"worker loss: the {task} job stopped {lost['stopped_after_s']:.1f} s after its task was SIGKILLed")
    assert lost["stopped_after_s"] < RETRY_DELAY_S, lost  # the retry never meets it
    assert lost_workers[f"{task}_left_during_retry"] == [], lost["job"]


def test_nothing_of_either_job_outlives_the_run(lost_workers):
    assert lost_workers["left_after"] == {"train_model": [], "score_partition": []}


def test_one_model_one_version_and_the_day_scored_once(lost_workers, airflow_services, mlflow_client):
    run_id = lost_workers["run_id"]
    experiment = mlflow_client.get_experiment_by_name(MODEL).experiment_id
    runs = mlflow_client.search_runs(
        [experiment], f"tags.airflow_run_id = '{run_id}' and tags.airflow_dag_id = '{DAG_ID}'"
    )
    models = {
        r.info.run_id: mlflow_client.search_logged_models([experiment], f"source_run_id = '{r.info.run_id}'")
        for r in runs
    }
    with_model = [run for run, logged in models.items() if logged]
    assert len(with_model) == 1, [(r.info.run_id, r.info.status) for r in runs]
    assert all(r.info.status == "KILLED" for r in runs if r.info.run_id not in with_model), [
        (r.info.run_id, r.info.status) for r in runs
    ]
    versions = [
        v for r in runs for v in mlflow_client.search_model_versions(f"name = '{MODEL}' and run_id = '{r.info.run_id}'")
    ]
    assert len(versions) == 1, [(v.version, v.run_id) for v in versions]

    scored = pads.dataset(
        str(airflow_services.storage_root / "predictions" / "mnist" / f"ds={PARTITION}"), format="parquet"
    ).to_table(columns=["row_id", "model_version"])
    assert scored.num_rows == ROWS
    assert len(set(scored.column("row_id").to_pylist())) == ROWS
    assert len(set(scored.column("model_version").to_pylist())) == 1
