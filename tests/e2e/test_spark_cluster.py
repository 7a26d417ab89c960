"""The nightly DAG, unchanged, against a real Spark standalone cluster (a master and two
one-core workers on loopback): only the ``spark_default`` connection differs. Job code
reaches the executors as the ``--py-files`` archive, and the two Horovod ranks run as
tasks on the two workers' executors.

It is the rerun of the nightly's date on the session's stack (the ``champion`` fixture
runs the nightly on ``local[2]`` first, as test_nightly_retrain.py does): a rerun must add a
version but no rows, wherever it runs."""

from __future__ import annotations

import json
import urllib.request

import pytest

from e2e_support import MODEL, NIGHTLY_ROWS, nightly_table, run_nightly


@pytest.fixture(scope="module")
def cluster_rerun(stack, champion, mlflow_client):
    """The nightly's date once more, every step an application of the cluster."""
    versions_before = mlflow_client.search_model_versions(f"name = '{MODEL}'")
    stack.start_spark_cluster(workers=2, cores_per_worker=1)
    try:
        master = stack.spark_master
        log = run_nightly(stack)
        with urllib.request.urlopen(f"{stack.spark_master_ui}/json/", timeout=10) as resp:
            apps = json.load(resp)["completedapps"]
    finally:
        stack.stop_spark_cluster()
    versions = mlflow_client.search_model_versions(f"name = '{MODEL}'")
    return {
        "master": master,
        "log": log,
        "apps": apps,
        "versions_before": versions_before,
        "versions": versions,
        "new_version": max(versions, key=lambda v: int(v.version)),
        "champion": mlflow_client.get_model_version_by_alias(MODEL, "champion"),
        "curated_rows": nightly_table(stack, "curated", ["row_id"]).num_rows,
        "scored": nightly_table(stack, "predictions", ["model_version"]),
    }


def test_nightly_dag_runs_on_the_standalone_cluster(cluster_rerun, mlflow_client):
    assert cluster_rerun["master"].startswith("spark://")
    assert f"--master {cluster_rerun['master']}" in cluster_rerun["log"]
    run = mlflow_client.get_run(cluster_rerun["new_version"].run_id)
    assert run.data.params["num_ranks"] == "2"
    assert len(mlflow_client.get_metric_history(run.info.run_id, "train_loss")) == int(run.data.params["epochs"])
    # Every step ran as an application of the cluster, using both workers' cores
    # (the train application's two Horovod ranks ran as tasks on those executors).
    apps = cluster_rerun["apps"]
    assert len(apps) >= 4, [a["name"] for a in apps]
    assert all(app["cores"] == 2 for app in apps), [(a["name"], a["cores"]) for a in apps]


def test_rerun_for_the_same_day_adds_a_version_but_no_rows(cluster_rerun):
    assert len(cluster_rerun["versions"]) == len(cluster_rerun["versions_before"]) + 1
    assert cluster_rerun["curated_rows"] == NIGHTLY_ROWS
    scored = cluster_rerun["scored"]
    assert scored.num_rows == NIGHTLY_ROWS
    # The rerun scores with whatever the gate pinned: one version for every row.
    assert set(scored.column("model_version").to_pylist()) == {cluster_rerun["champion"].version}
