"""Training checkpoints on blob storage (Azurite, through fsspec/adlfs): rank 0 writes one
per epoch and keeps the latest; a restarted job resumes from it; a run that logged its
model leaves none behind.

The interrupted try asks for EPOCHS epochs with TorchDistributor and has its whole process
group SIGKILLed once the checkpoint of epoch 3 (or later) is in the container, as a lost
worker would; the retry asks for the same epochs with Horovod and trains only the rest.
Both backends write and read the same checkpoints. The storage account key reaches the jobs
through their environment only.
"""

from __future__ import annotations

import pytest

from azure_support import CHECKPOINTS_URL, EPOCHS, KILL_AT, checkpoints


def test_each_epoch_is_checkpointed_and_the_latest_kept(interrupted_training):
    from spark_jobs.workflows.mnist import MnistNet

    assert interrupted_training["orphans"] == []
    by_epoch = {state["epoch"]: (name, state) for name, state in interrupted_training["checkpoints"].items()}
    latest = max(by_epoch)
    assert KILL_AT <= latest < EPOCHS
    # Older ones are removed once a newer one is written; the kill may land between the two.
    assert sorted(by_epoch) in ([latest], [latest - 1, latest])
    name, state = by_epoch[latest]
    assert name.endswith(f"/epoch-{latest:04d}.pt")
    assert [h["epoch"] for h in state["history"]] == list(range(1, latest + 1))
    assert state["model"].keys() == MnistNet().state_dict().keys()
    assert state["optimizer"]["state"], "the optimizer's state (Adam's moments) is in the checkpoint"
    assert state["monitor"]["best_epoch"] >= 1 and state["best_model"].keys() == state["model"].keys()


def test_a_restart_resumes_after_the_latest_checkpoint(interrupted_training, resumed_training, azure_stack):
    from mlflow import MlflowClient

    latest = max(state["epoch"] for state in interrupted_training["checkpoints"].values())
    retry, output = resumed_training

    assert retry["resumed_from_epoch"] == latest
    assert f"[rank 0] resuming after epoch {latest} from {CHECKPOINTS_URL}" in output
    # The retry trains on to the last epoch, or until early stopping (its state is in the checkpoint).
    last = retry["final_metrics"]["epoch"]
    assert latest <= last <= EPOCHS
    assert last == EPOCHS or retry["stop_reason"] == "early_stopping", retry["stop_reason"]
    assert 1 <= retry["best_epoch"] <= last
    # The retry's MLflow run has the metrics of the epochs it trained, and no more.
    history = MlflowClient(tracking_uri=azure_stack.tracking_uri).get_metric_history(retry["run_id"], "train_loss")
    assert [m.step for m in history] == list(range(latest + 1, last + 1))


def test_a_run_that_logs_its_model_leaves_no_checkpoint(resumed_training, blob_service):
    # Clearing the run in Airflow then trains afresh instead of resuming after its last epoch.
    _, output = resumed_training
    assert "model logged; removed the checkpoints of epochs" in output
    assert checkpoints(blob_service, CHECKPOINTS_URL) == {}


def test_the_storage_key_is_on_no_command_line_and_in_no_output(interrupted_training, resumed_training, azurite):
    for output in (interrupted_training["output"], resumed_training[1]):
        assert "--checkpoint-dir abfs://" in output  # the command line is part of the output
        assert azurite.key not in output
        assert "AccountKey=" not in output


@pytest.mark.parametrize("form", ["abfss", "abfs", "local"])
def test_checkpoint_dir_takes_each_url_form(form, azurite, monkeypatch, tmp_path):
    """The forms the README and the tests use: Spark's ``abfss://container@account…``,
    adlfs's ``abfs://container/path``, and a local folder."""
    from spark_jobs.training.checkpoints import Checkpoints

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
