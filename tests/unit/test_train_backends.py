"""Both training backends, end to end through spark-submit, as the DAG runs them.

``spark_jobs.train.main`` stops its SparkSession, so each run is a real ``spark-submit``
on ``local[2]`` with the job archive on ``--py-files``, logging to a real MLflow server.
Each backend must give the same outputs: a manifest naming the backend, an MLflow run
with its params and per-epoch metrics from rank 0, and a model that loads and predicts;
and, once the model is logged, no checkpoint left behind.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import package_jobs
from local_stack import LocalStack, free_port, write_curated_partition
from spark_jobs.sample_data import make_rows
from spark_jobs.schema import PIXEL_COLS

DS = "2026-11-28"
ROWS = 600
EPOCHS = 2
SUBMIT_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def training_stack(tmp_path_factory):
    """The job archive, one small curated partition and an MLflow server, made once."""
    root = tmp_path_factory.mktemp("train-backends")
    # Its own archive: the shared build/spark_jobs.zip may be in use by other runs.
    archive = package_jobs.package_jobs(root / "spark_jobs.zip")
    write_curated_partition(root / "curated", DS, ROWS)
    stack = LocalStack(state_dir=root / "stack", mlflow_port=free_port())
    stack.start_mlflow()
    try:
        yield {
            "root": root,
            "archive": archive,
            "curated": root / "curated",
            "stack": stack,
            "tracking_uri": stack.tracking_uri,
        }
    finally:
        stack.stop_mlflow()


def submit_training(stack: dict, backend: str) -> tuple[subprocess.CompletedProcess, Path, float]:
    """spark-submit the train entry point the way the DAG does; returns (process, manifest, seconds)."""
    work = stack["root"] / backend
    work.mkdir()
    manifest = work / "train.json"
    args = [
        "--curated-root",
        str(stack["curated"]),
        "--start-ds",
        DS,
        "--end-ds",
        DS,
        "--work-dir",
        str(work / "scratch"),
        "--output-manifest",
        str(manifest),
        "--experiment-name",
        "train-backends",
        "--backend",
        backend,
        "--epochs",
        str(EPOCHS),
        "--num-ranks",
        "2",
        "--checkpoint-dir",
        str(work / "checkpoints"),
    ]
    started = time.monotonic()
    proc = stack["stack"].spark_submit("train", args, archive=stack["archive"], cwd=work, timeout=SUBMIT_TIMEOUT_S)
    return proc, manifest, time.monotonic() - started


@pytest.fixture(scope="module")
def trained(training_stack):
    """``trained(backend)``: that backend's finished run, submitted once per module."""
    runs: dict[str, tuple[subprocess.CompletedProcess, dict]] = {}

    def run(backend: str) -> tuple[subprocess.CompletedProcess, dict]:
        if backend not in runs:
            proc, manifest_path, seconds = submit_training(training_stack, backend)
            print(f"\n[train-backends] {backend}: spark-submit took {seconds:.1f} s")
            assert proc.returncode == 0, f"{backend} training failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
            runs[backend] = proc, json.loads(manifest_path.read_text())
        return runs[backend]

    return run


@pytest.mark.parametrize("backend", ["torch_distributor", "horovod"])
def test_backend_trains_logs_and_registers_a_loadable_model(training_stack, trained, backend):
    import mlflow
    from mlflow import MlflowClient

    _, manifest = trained(backend)
    assert manifest["backend"] == backend
    assert manifest["num_ranks"] == 2
    assert 0 < manifest["train_rows"] < ROWS
    assert manifest["final_metrics"]["epoch"] == EPOCHS

    client = MlflowClient(tracking_uri=training_stack["tracking_uri"])
    run = client.get_run(manifest["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.params["backend"] == backend
    assert run.data.params["num_ranks"] == "2"
    for metric in ("train_loss", "train_accuracy", "samples_per_second"):
        history = client.get_metric_history(run.info.run_id, metric)
        assert sorted(m.step for m in history) == list(range(1, EPOCHS + 1)), metric

    mlflow.set_tracking_uri(training_stack["tracking_uri"])
    try:
        model = mlflow.pyfunc.load_model(manifest["model_uri"])
    finally:
        mlflow.set_tracking_uri(None)
    _, pixels = make_rows(DS, 8, seed=1)
    # The curated table's integer pixels, as the logged signature expects them.
    features = pd.DataFrame(pixels.astype(np.int32), columns=PIXEL_COLS)
    probs = np.asarray(model.predict(features))
    assert probs.shape == (8, 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-4)


def test_backends_run_the_same_training(training_stack, trained):
    """Same shards, seeds, thread count and loop: the backends differ only in how ranks
    talk, and with two ranks that changes no bit. A sum of two floats does not depend on
    their order, and halving one is exact (subnormals aside), whether the gradients are
    halved before the all-reduce (DistributedDataParallel) or after it (Horovod). So every
    epoch's loss and accuracy are equal, not only close: any difference means the backends
    did not train alike (other shards, seeds, learning rate or gradient averaging)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=training_stack["tracking_uri"])
    manifests = [trained(backend)[1] for backend in ("torch_distributor", "horovod")]
    assert manifests[0]["train_rows"] == manifests[1]["train_rows"]
    for key in ("train_loss", "train_accuracy"):
        per_epoch = [
            [m.value for m in sorted(client.get_metric_history(manifest["run_id"], key), key=lambda m: m.step)]
            for manifest in manifests
        ]
        assert len(per_epoch[0]) == EPOCHS and per_epoch[0] == per_epoch[1], key
        assert manifests[0]["final_metrics"][key] == manifests[1]["final_metrics"][key], key


@pytest.mark.parametrize("backend", ["torch_distributor", "horovod"])
def test_a_finished_run_leaves_no_checkpoint_to_resume_from(training_stack, trained, backend):
    """A successful run cleared in Airflow must train again: with its last checkpoint left
    behind it would resume after the last epoch, train nothing and register the old weights
    as a new version."""
    from spark_jobs.train import Checkpoints

    proc, manifest = trained(backend)
    assert manifest["resumed_from_epoch"] == 0
    checkpoint_dir = training_stack["root"] / backend / "checkpoints"
    assert Checkpoints(str(checkpoint_dir)).latest_epoch() == 0
    assert not checkpoint_dir.exists()
    # Not vacuous: rank 0 did checkpoint; the driver removed them after logging the model.
    assert f"removed the checkpoints of epochs [{EPOCHS}]" in proc.stdout + proc.stderr
