"""Registration under faults: the register job (real spark-submit, real MLflow server).

One registered model (fresh name) and three training runs A, B, C with a model each:

1. the MLflow server is stopped, register(A) starts, the server comes back while the
   job's client is retrying with backoff: the job succeeds, A has one complete version;
2. register(A) again (a retried task) reuses that version;
3. register(B) and register(C) run at the same time: two more distinct versions, and
   ``champion`` and its promotion history (``champion_history.*`` tags) agree.

Promotion thresholds are opened (``--min-accuracy 0``, tolerance 1) so that every
candidate is promoted: the runs' models are untrained, and the point is the bookkeeping.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from faults_support import BASE_DS, log_untrained_model
from spark_jobs.promotion import read_history

# MLflow's client retries refused connections with exponential backoff (default: 7 retries,
# factor 2). Factor 1 (sleeps of 2, 4, 8, 16, 32, 64, 120, 120 s) keeps the wait after the
# server is back short; 9 retries leave a loaded machine minutes to restart the server.
RETRY_ENV = {"MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "9"}
CANDIDATES = ("A", "B", "C")


@pytest.fixture(scope="module")
def registry(faults_stack, base_partition, mlflow_client):
    model = f"faults_reg_{uuid.uuid4().hex[:8]}"
    runs = {}
    for seed, name in enumerate(CANDIDATES):
        run_id, model_uri = log_untrained_model(faults_stack.stack.tracking_uri, {"candidate": name}, seed=seed)
        run_dir = faults_stack.root / "_runs" / "faults" / f"{model}-{name}"
        run_dir.mkdir(parents=True)
        (run_dir / "train.json").write_text(json.dumps({"run_id": run_id, "model_uri": model_uri}))
        runs[name] = {"run_id": run_id, "dir": run_dir}
    return {"model": model, "runs": runs, "curated_root": str(faults_stack.dataset("curated"))}


def register_args(registry, name: str, logical_time: str) -> list[str]:
    run_dir = registry["runs"][name]["dir"]
    return [
        "--train-manifest",
        str(run_dir / "train.json"),
        "--output-manifest",
        str(run_dir / "register.json"),
        "--curated-root",
        registry["curated_root"],
        "--start-ds",
        BASE_DS,
        "--end-ds",
        BASE_DS,
        "--model-name",
        registry["model"],
        "--min-accuracy",
        "0",
        "--champion-tolerance",
        "1",
        "--git-revision",
        "faults",
        "--airflow-run-id",
        f"faults__{name}",
        "--logical-time",
        logical_time,
    ]


def versions_of(client, model: str, run_id: str | None = None) -> list:
    query = f"name = '{model}'" + (f" and run_id = '{run_id}'" if run_id else "")
    return client.search_model_versions(query)


@pytest.fixture(scope="module")
def outage(faults_stack, registry, mlflow_client):
    """register(A) started while the server is down; the server restarted mid-job."""
    stack, jobs = faults_stack.stack, faults_stack.jobs
    stack.stop_mlflow()
    try:
        job = jobs.start("register", register_args(registry, "A", "2026-10-02T02:00:00+00:00"), env=RETRY_ENV)
        deadline = time.monotonic() + 300
        while "Retrying (Retry(" not in job.output and job.returncode is None and time.monotonic() < deadline:
            time.sleep(0.5)
        saw_retry_while_down = "Retrying (Retry(" in job.output
    finally:
        stack.start_mlflow()
    job.wait()
    run_id = registry["runs"]["A"]["run_id"]
    return {
        "saw_retry_while_down": saw_retry_while_down,
        "rc": job.returncode,
        "output": job.output,
        "versions": versions_of(mlflow_client, registry["model"], run_id),
    }


def test_register_started_while_mlflow_is_down_retries_then_succeeds(outage, registry, mlflow_client):
    assert outage["saw_retry_while_down"], outage["output"][-3000:]
    assert outage["rc"] == 0, outage["output"][-5000:]
    (version,) = outage["versions"]
    assert version.status == "READY"
    # Complete: every tag the gate reads, and the aliases.
    assert version.tags["validation_status"] == "passed"
    assert float(version.tags["holdout_accuracy"]) >= 0
    assert version.tags["airflow_run_id"] == "faults__A"
    model = mlflow_client.get_registered_model(registry["model"])
    assert model.aliases["challenger"] == version.version
    assert model.aliases["champion"] == version.version
    assert [e.version for e in read_history(model.tags)] == [version.version]
    manifest = json.loads((registry["runs"]["A"]["dir"] / "register.json").read_text())
    assert manifest["version"] == version.version and manifest["promoted"]


@pytest.fixture(scope="module")
def retried(faults_stack, registry, outage, mlflow_client):
    job = faults_stack.jobs.run("register", register_args(registry, "A", "2026-10-02T02:00:00+00:00"))
    return {"rc": job.returncode, "output": job.output, "versions": versions_of(mlflow_client, registry["model"])}


def test_retried_registration_reuses_its_version(retried, outage, registry, mlflow_client):
    assert retried["rc"] == 0, retried["output"][-5000:]
    assert [v.version for v in retried["versions"]] == [outage["versions"][0].version]
    assert "reusing version" in retried["output"]
    history = read_history(mlflow_client.get_registered_model(registry["model"]).tags)
    assert len(history) == 1  # a retry does not record a second promotion


@pytest.fixture(scope="module")
def concurrent(faults_stack, registry, retried, mlflow_client):
    jobs = [
        faults_stack.jobs.start("register", register_args(registry, "B", "2026-10-03T02:00:00+00:00")),
        faults_stack.jobs.start("register", register_args(registry, "C", "2026-10-03T02:00:00+00:00")),
    ]
    for job in jobs:
        job.wait()
    model = mlflow_client.get_registered_model(registry["model"])
    return {
        "rcs": [job.returncode for job in jobs],
        "outputs": [job.output for job in jobs],
        "versions": versions_of(mlflow_client, registry["model"]),
        "aliases": model.aliases,
        "history": read_history(model.tags),
    }


def test_two_registrations_at_once_get_distinct_versions(concurrent, registry):
    assert concurrent["rcs"] == [0, 0], "\n\n".join(o[-3000:] for o in concurrent["outputs"])
    versions = concurrent["versions"]
    assert len(versions) == 3
    assert len({v.version for v in versions}) == 3
    by_run = {v.run_id: v for v in versions}
    assert set(by_run) == {run["run_id"] for run in registry["runs"].values()}  # one per run, none twice
    assert all(v.status == "READY" and v.tags["validation_status"] == "passed" for v in versions)


def test_champion_alias_and_history_stay_consistent(concurrent, registry):
    history, aliases = concurrent["history"], concurrent["aliases"]
    versions = {v.run_id: v.version for v in concurrent["versions"]}
    a, b, c = (versions[registry["runs"][name]["run_id"]] for name in CANDIDATES)
    assert history[0].version == a
    assert {e.version for e in history} == {a, b, c}
    assert aliases["champion"] == history[-1].version
    assert aliases["champion"] in (b, c)
    assert all(x.version != y.version for x, y in zip(history, history[1:], strict=False))
    assert all(e.state == "done" for e in history)
    assert [e.moved_at for e in history] == sorted(e.moved_at for e in history)
    assert [e.effective for e in history] == sorted(e.effective for e in history)
