"""The per-rank training loop on real ranks: two torch.distributed (Gloo) processes on this
machine, as TorchDistributor starts them, training the MNIST workflow's CNN on its sample
rows. The best epoch's weights are what every rank returns, identical across ranks; a run
whose every epoch is broken returns no weights and the job's one clear error; a resumed run
keeps the best epoch found before the restart."""

from __future__ import annotations

import math
import os
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest

RANKS = 2
ROWS_PER_RANK = 300
VAL_ROWS_PER_RANK = 100


def _rank(local_rank: int, port: int, config_fields: dict, files: list[str], val_files: list[str], out: str) -> None:
    """One rank, in the environment torchrun gives it; writes its result to ``out``."""
    os.environ.update(
        RANK=str(local_rank),
        LOCAL_RANK=str(local_rank),
        WORLD_SIZE=str(RANKS),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    import torch

    from spark_jobs.training.launch import torch_distributor_rank

    result = torch_distributor_rank(config_fields, files, None, val_files)
    torch.save(result, f"{out}.{local_rank}")


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> dict[str, list[str]]:
    """A training and a validation file per rank of the MNIST workflow's sample rows."""
    import pyarrow.parquet as pq

    from spark_jobs import workflows
    from spark_jobs.sample_data import make_rows
    from spark_jobs.schema import curated_arrow_table
    from spark_jobs.training.shards import SHARD_COLS

    folder = tmp_path_factory.mktemp("loop-shards")
    wf = workflows.load("mnist")
    files: dict[str, list[str]] = {"train": [], "val": []}
    for context, rows, seed in (("train", ROWS_PER_RANK, 0), ("val", VAL_ROWS_PER_RANK, 100)):
        for rank in range(RANKS):
            labels, features = make_rows(wf, "2026-11-28", rows, seed=seed + rank)
            table = curated_arrow_table(wf, np.arange(rows), labels, features).select(list(SHARD_COLS))
            path = folder / f"{context}-{rank}.parquet"
            pq.write_table(table, path)
            files[context].append(str(path))
    return files


def train_on_ranks(config, shards: dict[str, list[str]], out: Path) -> list[dict]:
    """Every rank's result, in rank order."""
    import torch
    import torch.multiprocessing as mp

    from local_stack import free_port

    for attempt in range(3):
        # free_port's port can be taken by another process before rank 0's store binds it
        # (seen beside a Spark job on a fresh clone): a new port then, not a failed test.
        try:
            mp.spawn(
                _rank,
                args=(free_port(), asdict(config), shards["train"], shards["val"], str(out)),
                nprocs=RANKS,
                join=True,
            )
            break
        except mp.ProcessRaisedException as err:
            if "EADDRINUSE" not in str(err) or attempt == 2:
                raise
    return [torch.load(f"{out}.{rank}", weights_only=False) for rank in range(RANKS)]


def config(**overrides):
    from spark_jobs import workflows
    from spark_jobs.training.loop import TrainConfig

    return TrainConfig.for_workflow(workflows.load("mnist"), seed=3, threads_per_rank=1, **overrides)


def val_metrics(state_dict) -> tuple[float, float]:
    """(val_loss, val_accuracy) of these weights over both ranks' validation rows."""
    import torch

    from spark_jobs import workflows
    from spark_jobs.training.loop import NllObjective, evaluate_rows
    from spark_jobs.training.shards import read_rank_shard

    wf = workflows.load("mnist")
    net = workflows.model_factory(wf)()
    net.load_state_dict({key: torch.as_tensor(value) for key, value in state_dict.items()})
    loss_sum, hits, seen = 0.0, 0, 0
    for path in SHARDS["val"]:
        features, labels = read_rank_shard([path], wf)
        x, y = torch.from_numpy(np.array(features)), torch.from_numpy(labels)
        part = evaluate_rows(net, NllObjective(), x, y, 256)
        loss_sum, hits, seen = loss_sum + part[0], hits + part[1], seen + part[2]
    return loss_sum / seen, hits / seen


def learned(history: list[dict]) -> list[dict]:
    """The history without the throughput (each rank times its own steps)."""
    return [{k: v for k, v in entry.items() if k != "samples_per_second"} for entry in history]


SHARDS: dict[str, list[str]] = {}


@pytest.fixture(autouse=True)
def _shards(shards):
    SHARDS.update(shards)


def test_the_best_epoch_not_the_last_is_restored_identically_on_every_rank(shards, tmp_path):
    """At a constant, too-high rate (SGD at 0.1 per rank, momentum 0.9: no warm-up, no
    clipping) the curve rises, then falls apart: the weights every rank returns are the
    best epoch's, the same on both ranks, and reproduce that epoch's validation figures."""
    cfg = replace(
        config(),
        epochs=6,
        optimizer="sgd",
        learning_rate=0.1,
        momentum=0.9,
        clip_grad_norm=0.0,
        warmup_epochs=0.0,
        schedule="constant",
        early_stopping_patience=0,
        divergence_factor=1e9,
    )
    results = train_on_ranks(cfg, shards, tmp_path / "rank")
    history = results[0]["history"]
    accuracies = [entry["val_accuracy"] for entry in history]
    best = results[0]["best_epoch"]
    assert best == accuracies.index(max(accuracies)) + 1
    assert best < len(history), f"the curve {accuracies} did not fall after its best epoch: the test proves nothing"
    assert [learned(r["history"]) for r in results[1:]] == [learned(history)] * (RANKS - 1)
    assert all(r["best_epoch"] == best for r in results)
    for key, array in results[0]["state_dict"].items():
        assert all(np.array_equal(r["state_dict"][key], array) for r in results[1:]), key
    loss, accuracy = val_metrics(results[0]["state_dict"])
    assert accuracy == history[best - 1]["val_accuracy"]
    assert loss == pytest.approx(history[best - 1]["val_loss"], rel=1e-6)
    assert loss != pytest.approx(history[-1]["val_loss"], rel=1e-3)


def test_a_ranks_result_unpickles_without_importing_torch(shards, tmp_path):
    """Horovod's task service in each Spark task unpickles its rank's result before the
    driver gets it: weights as torch tensors imported torch into every such PySpark worker
    (2-5 CPU s each, half the training job's PySpark CPU in a ``make demo``)."""
    import pickle
    import subprocess
    import sys

    (result, *_) = train_on_ranks(replace(config(), epochs=1), shards, tmp_path / "rank")
    assert result["state_dict"], "the run kept no weights: the test proves nothing"
    check = (
        "import pickle, sys; pickle.loads(sys.stdin.buffer.read()); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    )
    unpickled = subprocess.run(
        [sys.executable, "-c", check], input=pickle.dumps(result), capture_output=True, check=True
    )
    assert unpickled.stdout.decode().strip() == "[]", unpickled.stdout.decode()[:300]


def test_a_run_with_no_usable_epoch_returns_no_weights_and_the_job_fails_in_one_line(shards, tmp_path):
    from spark_jobs.train import TrainingDiverged, best_epoch_or_fail

    cfg = replace(config(), epochs=3, optimizer="sgd", learning_rate=1e4, momentum=0.0, clip_grad_norm=0.0)
    results = train_on_ranks(cfg, shards, tmp_path / "rank")
    for result in results:
        assert (result["best_epoch"], result["stop_reason"], result["state_dict"]) == (0, "diverged", None)
        assert len(result["history"]) == 1, "training stops at the first non-finite loss"
        assert not math.isfinite(result["history"][0]["train_loss"])
    with pytest.raises(TrainingDiverged, match=r"no usable epoch \(epoch 1: non-finite loss") as raised:
        best_epoch_or_fail(results[0], cfg)
    assert "\n" not in str(raised.value) and "lower the learning rate" in str(raised.value)


def test_a_resumed_run_keeps_the_best_epoch_found_before_the_restart(shards, tmp_path):
    """A try trains 3 epochs with checkpoints and stops (as if killed after epoch 3); the
    retry resumes after epoch 3 at a rate that breaks everything after it: the best epoch
    and its weights are those of the first try."""
    checkpoints = str(tmp_path / "checkpoints")
    steady = replace(config(), epochs=3, schedule="constant", checkpoint_dir=checkpoints)
    first = train_on_ranks(steady, shards, tmp_path / "first")[0]
    assert first["stop_reason"] == "completed" and first["best_epoch"] >= 1

    broken = replace(steady, epochs=5, learning_rate=50.0, clip_grad_norm=0.0)
    resumed = train_on_ranks(broken, shards, tmp_path / "resumed")
    for result in resumed:
        assert result["resumed_from_epoch"] == 3
        assert learned(result["history"][:3]) == learned(first["history"])
        assert result["best_epoch"] == first["best_epoch"]
        for key, tensor in first["state_dict"].items():
            assert np.array_equal(result["state_dict"][key], tensor), key
    assert len(resumed[0]["history"]) > 3, "the retry trained on after the checkpoint"


def test_the_same_rows_seed_and_ranks_train_the_same_model(shards, tmp_path):
    """Reproducible: two runs of the declared training on the same shards with the same seed
    and ranks give the same curve, the same best epoch and the same weights, to the bit."""
    cfg = replace(config(), epochs=2)
    first, again = (train_on_ranks(cfg, shards, tmp_path / name)[0] for name in ("first", "again"))
    assert learned(again["history"]) == learned(first["history"])
    assert again["best_epoch"] == first["best_epoch"] >= 1
    for key, tensor in first["state_dict"].items():
        assert np.array_equal(again["state_dict"][key], tensor), key
