"""The nightly DAG, unchanged, against a real Spark standalone cluster (a master and two
one-core workers on loopback): only the ``spark_default`` connection differs. Job code
reaches the executors as the ``--py-files`` archive, and the two Horovod ranks run as
tasks on the two workers' executors. It is the first nightly of the session's stack: it
ingests the day, trains, registers, promotes and scores every row once with that version.
(The nightly on ``local[2]``, as ``make demo`` runs it: test_nightly_retrain.py.)"""

from __future__ import annotations

import json
import urllib.request

import pytest

from e2e_support import MODEL, NIGHTLY_ROWS, nightly_table, run_nightly


@pytest.fixture(scope="module")
def cluster_run(stack, mlflow_client):
    """The nightly, every step an application of the cluster. (Another test of this process
    may have registered a version before, when the suite runs in fewer processes.)"""
    before = {v.version for v in mlflow_client.search_model_versions(f"name = '{MODEL}'")}
    stack.start_spark_cluster(workers=2, cores_per_worker=1)
    try:
        master = stack.spark_master
        log = run_nightly(stack)
        with urllib.request.urlopen(f"{stack.spark_master_ui}/json/", timeout=10) as resp:
            apps = json.load(resp)["completedapps"]
    finally:
        stack.stop_spark_cluster()
    versions = [v for v in mlflow_client.search_model_versions(f"name = '{MODEL}'") if v.version not in before]
    return {
        "master": master,
        "log": log,
        "apps": apps,
        "versions": versions,
        "champion": mlflow_client.get_model_version_by_alias(MODEL, "champion"),
        "curated_rows": nightly_table(stack, "curated", ["row_id"]).num_rows,
        "scored": nightly_table(stack, "predictions", ["model_version"]),
    }


def test_nightly_dag_runs_on_the_standalone_cluster(cluster_run, mlflow_client):
    assert cluster_run["master"].startswith("spark://")
    assert f"--master {cluster_run['master']}" in cluster_run["log"]
    (version,) = cluster_run["versions"]
    run = mlflow_client.get_run(version.run_id)
    assert run.data.params["num_ranks"] == "2"
    # Every epoch it trained logged (early stopping may end it before the declared last).
    trained = sorted(m.step for m in mlflow_client.get_metric_history(run.info.run_id, "train_loss"))
    assert trained == list(range(1, len(trained) + 1)) and len(trained) <= int(run.data.params["epochs"]), trained
    # Every step ran as an application of the cluster, using both workers' cores
    # (the train application's two Horovod ranks ran as tasks on those executors).
    apps = cluster_run["apps"]
    assert len(apps) >= 4, [a["name"] for a in apps]
    assert all(app["cores"] == 2 for app in apps), [(a["name"], a["cores"]) for a in apps]


def test_the_version_trained_on_the_cluster_is_promoted_and_scores_every_row_once(cluster_run):
    (version,) = cluster_run["versions"]  # the one it registered
    assert cluster_run["champion"].version == version.version
    assert version.tags["validation_status"] == "passed", version.tags
    assert cluster_run["curated_rows"] == NIGHTLY_ROWS
    scored = cluster_run["scored"]
    assert scored.num_rows == NIGHTLY_ROWS
    # Scored with what the gate pinned: the new champion, one version for every row.
    assert set(scored.column("model_version").to_pylist()) == {version.version}
