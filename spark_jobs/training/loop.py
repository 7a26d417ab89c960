"""The per-rank training loop, the same for every backend and every workflow.

Each rank reads its own shard files, pins its device (CUDA by local rank when present,
else CPU with the task's threads), starts from rank 0's initial state (or from the latest
checkpoint) and runs the same number of steps as every other rank. The workflow declares
the model (``[model] factory``), the loss and the training defaults; the loop knows two
losses:

- ``nll``: ``F.nll_loss`` of the module's log-probabilities on int64 class labels;
  per-epoch ``train_loss`` and ``train_accuracy``.
- ``mse``: ``F.mse_loss`` of the module's ``[batch]`` values on float32 labels; per-epoch
  ``train_loss`` (the MSE, in the label's units squared) and ``train_rmse``. The loss is
  not rescaled: a regressor whose output is in the label's units declares a learning rate
  to match (diabetes: 1e-5 for a spread of about 77).

After each epoch the ranks evaluate the validation rows (the window's held-out rows, which
no rank trains on, see :mod:`spark_jobs.train`), each its own files of them, and all-reduce
the sums: ``val_loss`` and ``val_accuracy`` / ``val_rmse`` beside the training metrics, the
same value on every rank, logged by rank 0 with ``step=epoch``, with the learning rate
(``learning_rate``, at the epoch's last step).

The optimizer, the schedule of the rank-scaled rate, gradient clipping, early stopping and
the divergence guard are the workflow's ``[model.training]`` (:class:`TrainConfig`,
:mod:`spark_jobs.training.policy`). The weights returned are those of the **best epoch** by
the validation metric, never simply the last: every rank keeps a copy of them (the same on
every rank: the updates are synchronous) and restores it at the end, checked across ranks.
A run with no usable epoch (every epoch's loss non-finite) returns no weights.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ml_contract.workflows import Training
from spark_jobs.training.policy import COMPLETED, EpochMonitor, rate_factor

if TYPE_CHECKING:
    import numpy as np
    import torch

    from spark_jobs.training.collectives import Collective
    from spark_jobs.workflows import Workflow


@dataclass(frozen=True, kw_only=True)
class TrainConfig(Training):
    """What every rank needs to know besides its files: the workflow's ``[model.training]``
    (:class:`ml_contract.workflows.Training`: epochs, the base rate scaled by the number of
    ranks, the per-rank batch, optimizer, schedule, clipping, stopping) and how this run
    trains it. Plain values only (it crosses to the ranks pickled, or as a dict, see
    :mod:`spark_jobs.training.launch`)."""

    workflow: str
    seed: int = 42
    threads_per_rank: int = 1
    checkpoint_dir: str | None = None
    # Each rank bound to cores of its own where the host's ranks fill its cores exactly
    # (spark_jobs.training.launch.rank_cores); False leaves the scheduling to the OS.
    bind_cores: bool = True

    @classmethod
    def for_workflow(cls, workflow: Workflow, **overrides) -> TrainConfig:
        """The workflow's ``[model.training]``, with the ``overrides`` that are not None."""
        defaults = asdict(workflow.model.training)
        given = {key: value for key, value in overrides.items() if value is not None}
        return cls(workflow=workflow.name, **{**defaults, **given})

    def build_optimizer(self, parameters, size: int) -> torch.optim.Optimizer:
        """The declared optimizer at the rank-scaled rate (``learning_rate * size``)."""
        import torch

        rate = self.learning_rate * size
        if self.optimizer == "sgd":
            return torch.optim.SGD(parameters, lr=rate, momentum=self.momentum, weight_decay=self.weight_decay)
        kind = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[self.optimizer]
        return kind(parameters, lr=rate, betas=tuple(self.betas), weight_decay=self.weight_decay)

    def rate_factor(self, step: int, steps_per_epoch: int) -> float:
        """The schedule's multiple of the rank-scaled rate at global step ``step``."""
        return rate_factor(
            step,
            steps_per_epoch,
            self.epochs,
            warmup_epochs=self.warmup_epochs,
            schedule=self.schedule,
            step_epochs=self.step_epochs,
            gamma=self.gamma,
        )

    def monitor(self, workflow: Workflow) -> EpochMonitor:
        """The best-epoch and stopping policy on the workflow's validation metric."""
        return EpochMonitor(
            metric=f"val_{workflow.metric.name}",
            higher_is_better=workflow.metric.direction == "max",
            patience=self.early_stopping_patience,
            min_delta=self.early_stopping_min_delta,
            divergence_factor=self.divergence_factor,
            divergence_patience=self.divergence_patience,
        )


def rank_device(local_rank: int, threads_per_rank: int) -> torch.device:
    """CUDA by local rank when this process sees GPUs (Spark gives each task its own, so
    local ranks index them), else the CPU, held to the task's cores."""
    import torch

    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        return device
    torch.set_num_threads(threads_per_rank)
    return torch.device("cpu")


class Objective:
    """The loss a workflow declares and the metric that goes with it (see the module docstring)."""

    metric: str

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The declared loss, the mean over the batch."""
        raise NotImplementedError

    def hits(self, output: torch.Tensor, target: torch.Tensor) -> int:
        """What the metric counts in a batch (correct predictions), 0 if nothing."""
        return 0

    def metrics(self, loss_sum: float, hits: float, seen: float, prefix: str = "train") -> dict[str, float]:
        """``<prefix>_loss`` and ``<prefix>_<metric>`` over ``seen`` rows."""
        raise NotImplementedError


class NllObjective(Objective):
    metric = "accuracy"

    def loss(self, output, target):
        import torch.nn.functional as F

        return F.nll_loss(output, target)

    def hits(self, output, target):
        return int((output.argmax(dim=1) == target).sum())

    def metrics(self, loss_sum, hits, seen, prefix="train"):
        return {f"{prefix}_loss": loss_sum / seen, f"{prefix}_{self.metric}": hits / seen}


class MseObjective(Objective):
    metric = "rmse"

    def loss(self, output, target):
        import torch.nn.functional as F

        return F.mse_loss(output.reshape(-1), target)

    def metrics(self, loss_sum, hits, seen, prefix="train"):
        return {f"{prefix}_loss": loss_sum / seen, f"{prefix}_{self.metric}": math.sqrt(loss_sum / seen)}


OBJECTIVES: dict[str, type[Objective]] = {"nll": NllObjective, "mse": MseObjective}


def evaluate_rows(
    net: torch.nn.Module, objective: Objective, features: torch.Tensor, labels: torch.Tensor, batch_size: int
) -> tuple[float, int, int]:
    """(loss sum, hits, rows) of ``net`` over these rows, in eval mode and without gradients.

    Called on the bare module, not the backend's wrapper: DistributedDataParallel's forward
    may synchronise buffers with the other ranks, which evaluate a different number of rows.
    """
    import torch

    net.eval()
    loss_sum, hits = 0.0, 0
    with torch.no_grad():
        for first in range(0, len(labels), batch_size):
            output = net(features[first : first + batch_size])
            target = labels[first : first + batch_size]
            loss_sum += objective.loss(output, target).item() * len(target)
            hits += objective.hits(output, target)
    net.train()
    return loss_sum, hits, len(labels)


def train_rank(
    collective: Collective,
    config: TrainConfig,
    shard_files: list[str],
    mlflow_run_id: str | None,
    validation_files: Sequence[str] = (),
    started: dict[str, float | None] | None = None,
) -> dict:
    """Body of one rank, the same for every backend.

    Returns the rank's row count, the per-epoch history (identical on every rank: it is
    all-reduced), the best epoch (``best_epoch``, 0 when no epoch was usable), why training
    ended (``stop_reason``, with ``stop_notes``), the best epoch's weights (``state_dict``,
    as numpy arrays, :func:`weights_as_arrays`; None when no epoch was usable) and its
    start-up ``timeline`` (wall-clock times: the marks of ``started``, those the rank entry
    took before the collective was joined, then ``rank_ready``, ``data_loaded`` and
    ``first_step``; see ``spark_jobs.train.TIMELINE``).
    Every rank returns the weights, which are equal after synchronous updates (checked),
    because TorchDistributor keeps the output of whichever process of its first task
    finishes last, not necessarily rank 0's.

    With checkpoints, every rank starts from the latest one (the same file, so the same
    state on every rank: weights, optimizer, the best epoch so far and the stopping
    policy's state) and skips the epochs it covers; rank 0 writes one per epoch.
    """
    import numpy as np
    import torch

    from spark_jobs import workflows
    from spark_jobs.training.checkpoints import Checkpoints
    from spark_jobs.training.shards import read_rank_shard

    timeline = {mark: at for mark, at in (started or {}).items() if at is not None}
    timeline["rank_ready"] = time.time()
    workflow = workflows.load(config.workflow)
    rank, size = collective.rank, collective.size
    device = rank_device(collective.local_rank, config.threads_per_rank)
    torch.manual_seed(config.seed)

    features, labels = read_rank_shard(shard_files[rank::size], workflow)
    # torch wants a writable array; the decoded column is a read-only view of Arrow's buffer.
    x_all = torch.from_numpy(np.array(features)).to(device)
    y_all = torch.from_numpy(labels).to(device)
    val_features, val_labels = read_rank_shard(list(validation_files)[rank::size], workflow)
    x_val = torch.from_numpy(np.array(val_features)).to(device)
    y_val = torch.from_numpy(val_labels).to(device)
    # Every rank must run the same number of steps or an all-reduce would wait forever.
    steps = collective.allreduce_min(math.ceil(len(labels) / config.batch_size))
    if steps == 0:
        raise ValueError(f"rank {rank} has no training rows: too few rows for {size} ranks")
    objective = OBJECTIVES[workflow.model.loss]()

    net = workflows.model_factory(workflow)().to(device)
    optimizer = config.build_optimizer(net.parameters(), size)
    base_rates = [group["lr"] for group in optimizer.param_groups]
    monitor = config.monitor(workflow)
    best_state = None
    checkpoints = Checkpoints(config.checkpoint_dir) if config.checkpoint_dir else None
    start_epoch, history = 0, []
    if checkpoints is not None:
        # Every rank must resume from the same epoch, whatever its listing showed.
        start_epoch = collective.allreduce_min(checkpoints.latest_epoch())
        if start_epoch:
            state = checkpoints.load(start_epoch)
            net.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            history = state["history"]
            if "monitor" in state:  # checkpoints of older versions have no best epoch
                monitor = EpochMonitor.from_state(state["monitor"])
                best_state = state["best_model"]
            if rank == 0:
                print(
                    f"[rank 0] resuming after epoch {start_epoch} from {checkpoints.url} "
                    f"(best epoch so far {monitor.best_epoch})",
                    flush=True,
                )
    model, optimizer = collective.distribute(net, optimizer)
    timeline["data_loaded"] = time.time()

    client = None
    if rank == 0 and mlflow_run_id:
        from mlflow import MlflowClient

        client = MlflowClient()
    generator = torch.Generator().manual_seed(config.seed + rank)
    for _ in range(start_epoch):  # the shuffles of the epochs done, as an unbroken run drew them
        torch.randperm(len(labels), generator=generator)
    parameters = list(net.parameters())
    training_seconds = 0.0
    epoch = start_epoch
    while monitor.stop_reason is None and epoch < config.epochs:
        epoch += 1
        epoch_started = time.perf_counter()
        model.train()
        order = torch.randperm(len(labels), generator=generator).to(device)
        loss_sum, hits, seen = 0.0, 0, 0
        for step in range(steps):
            factor = config.rate_factor((epoch - 1) * steps + step, steps)
            for group, base in zip(optimizer.param_groups, base_rates, strict=True):
                group["lr"] = base * factor
            idx = order[step * config.batch_size : (step + 1) * config.batch_size]
            optimizer.zero_grad()
            output = model(x_all[idx])
            loss = objective.loss(output, y_all[idx])
            loss.backward()
            collective.step(optimizer, parameters, config.clip_grad_norm)
            if "first_step" not in timeline:
                timeline["first_step"] = time.time()
            loss_sum += loss.item() * len(idx)
            hits += objective.hits(output, y_all[idx])
            seen += len(idx)
        training_seconds += time.perf_counter() - epoch_started  # throughput without the validation pass
        val_sums = evaluate_rows(net, objective, x_val, y_val, max(config.batch_size, 256))
        total_loss, total_hits, total_seen, val_loss, val_hits, val_seen = collective.allreduce_sum(
            [loss_sum, hits, seen, *val_sums]
        )
        metrics = objective.metrics(total_loss, total_hits, total_seen)
        if val_seen:
            metrics.update(objective.metrics(val_loss, val_hits, val_seen, prefix="val"))
        metrics["learning_rate"] = optimizer.param_groups[0]["lr"]
        metrics["samples_per_second"] = total_seen * (epoch - start_epoch) / training_seconds
        history.append({"epoch": epoch, **metrics})
        # No held-out rows (the driver warned): the training metrics choose the epoch.
        observed = metrics if val_seen else {**metrics, **objective.metrics(total_loss, total_hits, total_seen, "val")}
        if monitor.observe(epoch, observed):
            best_state = {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}
        if client is not None:
            assert mlflow_run_id  # a client is made only with a run id (above)
            for key, value in metrics.items():
                if math.isfinite(value):  # MLflow stores no NaN on every store; the guard says why
                    client.log_metric(mlflow_run_id, key, value, step=epoch)
            best = f"best epoch {monitor.best_epoch}" + (
                f", stopping: {monitor.stop_reason}" if monitor.stop_reason else ""
            )
            print(f"[rank 0] epoch {epoch}/{config.epochs} {metrics} ({best})", flush=True)
        if checkpoints is not None and rank == 0:
            state = {
                "epoch": epoch,
                "model": net.state_dict(),
                "optimizer": optimizer.state_dict(),
                "history": history,
                "monitor": monitor.state(),
                "best_model": best_state,
            }
            checkpoints.save(epoch, state)

    if best_state is not None:
        net.load_state_dict(best_state)
        check_same_weights(collective, net)
    return {
        "rank": rank,
        "rows": len(labels),
        "steps_per_epoch": steps,
        "resumed_from_epoch": start_epoch,
        "history": history,
        "best_epoch": monitor.best_epoch,
        "stop_reason": monitor.stop_reason or COMPLETED,
        "stop_notes": list(monitor.notes),
        "timeline": timeline,
        "cores": sorted(os.sched_getaffinity(0)),  # the CPU cores this rank ran on
        "state_dict": None if best_state is None else weights_as_arrays(net),
    }


def weights_as_arrays(net: torch.nn.Module) -> dict[str, np.ndarray]:
    """``net``'s weights as numpy arrays, by state-dict key: a rank's result is unpickled by
    Horovod's task service in its Spark task, and torch tensors there would import torch
    into that PySpark worker, which needs nothing of it (2-5 CPU s a task: half the
    training job's PySpark CPU in a ``make demo``). ``load_state_dict`` takes them back
    through ``torch.as_tensor`` (:func:`spark_jobs.serving.scripted_serving`)."""
    return {key: tensor.detach().cpu().numpy().copy() for key, tensor in net.state_dict().items()}


def weights_checksum(net: torch.nn.Module) -> float:
    """A float64 sum of every weight, position-weighted, so that a swap of values changes it."""
    import torch

    total = 0.0
    for index, tensor in enumerate(net.state_dict().values()):
        values = tensor.detach().double().flatten()
        positions = torch.arange(1, len(values) + 1, dtype=torch.float64, device=values.device)
        total += (index + 1) * float((values * positions.sin()).sum())
    return total


def check_same_weights(collective: Collective, net: torch.nn.Module) -> None:
    """Raise when the restored best weights differ between ranks: the sum over the ranks of
    each rank's checksum must be ``size`` times this rank's."""
    mine = weights_checksum(net)
    (total,) = collective.allreduce_sum([mine])
    if not math.isclose(total, collective.size * mine, rel_tol=1e-9, abs_tol=1e-9):
        raise RuntimeError(
            f"rank {collective.rank}: the best epoch's weights differ between ranks "
            f"(checksum {mine!r}, mean over ranks {total / collective.size!r})"
        )
