"""Training checkpoints on blob storage (Azurite, through fsspec/adlfs): rank 0 writes one
per epoch and keeps the latest; a restarted job resumes from it.

The first try trains 2 of the run's epochs with TorchDistributor, leaving what a try that
died after its second epoch leaves; the retry asks for all 3 epochs with Horovod and trains
only the third. Both backends write and read the same checkpoints, so two spark-submits
cover both. The storage account key reaches the jobs through their environment only.
"""

from __future__ import annotations

import io

import pytest

from azure_support import CHECKPOINTS_CONTAINER, CHECKPOINTS_URL

RUN_PREFIX = CHECKPOINTS_URL.removeprefix(f"abfs://{CHECKPOINTS_CONTAINER}/") + "/"


def checkpoints(blob_service) -> dict[str, dict]:
    """The run's checkpoints by blob name, loaded."""
    import torch

    container = blob_service.get_container_client(CHECKPOINTS_CONTAINER)
    return {
        blob.name: torch.load(io.BytesIO(container.download_blob(blob.name).readall()), weights_only=True)
        for blob in container.list_blobs(name_starts_with=RUN_PREFIX)
    }


def test_each_epoch_is_checkpointed_and_the_latest_kept(first_training, blob_service):
    from spark_jobs.model import MnistNet

    manifest, _ = first_training
    assert (manifest["resumed_from_epoch"], manifest["final_metrics"]["epoch"]) == (0, 2)
    (name, state), = checkpoints(blob_service).items()
    assert name == f"{RUN_PREFIX}epoch-0002.pt"
    assert state["epoch"] == 2
    assert [h["epoch"] for h in state["history"]] == [1, 2]
    assert state["history"][-1] == manifest["final_metrics"]
    assert state["model"].keys() == MnistNet().state_dict().keys()
    assert state["optimizer"]["state"], "SGD momentum buffers belong to the optimizer state"


def test_a_restart_resumes_after_the_latest_checkpoint(first_training, train_job, azure_stack, blob_service):
    from mlflow import MlflowClient

    (before,) = checkpoints(blob_service).values()
    retry, output = train_job("retry", "horovod", 3, CHECKPOINTS_URL)

    assert retry["resumed_from_epoch"] == 2
    assert f"[rank 0] resuming after epoch 2 from {CHECKPOINTS_URL}" in output
    assert retry["final_metrics"]["epoch"] == 3
    (name, after), = checkpoints(blob_service).items()
    assert name == f"{RUN_PREFIX}epoch-0003.pt"
    assert after["history"][:2] == before["history"]
    # The retry's MLflow run has the metrics of the one epoch it trained.
    history = MlflowClient(tracking_uri=azure_stack.tracking_uri).get_metric_history(retry["run_id"], "train_loss")
    assert [m.step for m in history] == [3]


def test_the_storage_key_is_on_no_command_line_and_in_no_output(first_training, train_job, azurite):
    for _, output in (first_training, train_job("retry", "horovod", 3, CHECKPOINTS_URL)):
        assert "--checkpoint-dir abfs://" in output  # the command line is part of the output
        assert azurite.key not in output
        assert "AccountKey=" not in output


@pytest.mark.parametrize("form", ["abfss", "abfs", "local"])
def test_checkpoint_dir_takes_each_url_form(form, azurite, monkeypatch, tmp_path):
    """The forms the README and the tests use: Spark's ``abfss://container@account…``,
    adlfs's ``abfs://container/path``, and a local folder."""
    from spark_jobs.train import Checkpoints

    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    url = {
        "abfss": f"abfss://forms@{azurite.account}.dfs.core.windows.net/run-1",
        "abfs": "abfs://forms/run-2",
        "local": str(tmp_path / "run-3"),
    }[form]
    store = Checkpoints(url)
    assert store.latest_epoch() == 0
    for epoch in (1, 2):
        store.save(epoch, {"epoch": epoch, "history": [epoch]})
    assert store.epochs() == [2]
    assert store.load(2) == {"epoch": 2, "history": [2]}
    assert Checkpoints(url).latest_epoch() == 2  # as a restarted job sees it
