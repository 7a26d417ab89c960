"""The nightly DAG, unchanged, against a real Spark standalone cluster (a master and two
one-core workers on loopback): only the ``spark_default`` connection differs. Job code
reaches the executors as the ``--py-files`` archive, and the two Horovod ranks run as
tasks on the two workers' executors."""

from __future__ import annotations

import json
import urllib.request

import pyarrow.dataset as pads
import pytest

from e2e_support import MODEL, NIGHTLY_PARTITION, NIGHTLY_ROWS, run_nightly
from local_stack import LocalStack, free_port


@pytest.fixture(scope="module")
def cluster_stack(tmp_path_factory):
    stack = LocalStack(
        state_dir=tmp_path_factory.mktemp("cluster-stack"), mlflow_port=free_port(), api_port=free_port()
    )
    stack.migrate()
    stack.start_mlflow()
    try:
        stack.start_spark_cluster(workers=2, cores_per_worker=1)
        yield stack
    finally:
        stack.stop_services()
        stack.stop_mlflow()


def test_nightly_dag_runs_on_the_standalone_cluster(cluster_stack):
    from mlflow import MlflowClient

    log = run_nightly(cluster_stack)
    assert f"--master {cluster_stack.spark_master}" in log
    client = MlflowClient(tracking_uri=cluster_stack.tracking_uri)
    champion = client.get_model_version_by_alias(MODEL, "champion")
    run = client.get_run(champion.run_id)
    assert run.data.params["num_ranks"] == "2"
    assert len(client.get_metric_history(run.info.run_id, "train_loss")) == int(run.data.params["epochs"])
    scored = pads.dataset(
        str(cluster_stack.storage_root / "predictions" / "mnist" / f"ds={NIGHTLY_PARTITION}"), format="parquet"
    ).to_table(columns=["model_version"])
    assert scored.num_rows == NIGHTLY_ROWS
    assert set(scored.column("model_version").to_pylist()) == {champion.version}
    # Every step ran as an application of the cluster, using both workers' cores
    # (the train application's two Horovod ranks ran as tasks on those executors).
    with urllib.request.urlopen(f"{cluster_stack.spark_master_ui}/json/", timeout=10) as resp:
        apps = json.load(resp)["completedapps"]
    assert len(apps) >= 4, [a["name"] for a in apps]
    assert all(app["cores"] == 2 for app in apps), [(a["name"], a["cores"]) for a in apps]
