"""What the training loop decides between steps and epochs, as plain functions of numbers.

- :func:`rate_factor`: the learning-rate schedule a workflow declares, as a multiple of the
  rank-scaled rate at each optimizer step: a linear warm-up, then constant, cosine or step
  decay;
- :class:`EpochMonitor`: after each epoch, which epoch is the best so far (the model kept),
  and whether training stops early: early stopping on the validation metric, or the
  divergence guard (a non-finite loss, or a validation loss far above the lowest so far for
  several epochs).

Every rank sees the same all-reduced metrics, so every rank takes the same decisions. No
torch here: these are unit-tested on numbers, and the monitor's state is a plain dict that
travels in the checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

# Why training ended (the ``stop_reason`` tag of the MLflow run and the manifest's).
COMPLETED = "completed"
EARLY_STOPPED = "early_stopping"
DIVERGED = "diverged"


def rate_factor(
    step: int,
    steps_per_epoch: int,
    epochs: int,
    *,
    warmup_epochs: float = 0.0,
    schedule: str = "constant",
    step_epochs: int = 1,
    gamma: float = 0.1,
) -> float:
    """The multiple of the rank-scaled learning rate for optimizer step ``step`` (0-based,
    counted over the whole run, resumed epochs included).

    Warm-up: ``(step + 1) / warmup_steps`` over the first ``warmup_epochs * steps_per_epoch``
    steps (Goyal et al.'s gradual warm-up of a large-batch rate). Then ``constant``: 1;
    ``cosine``: half a cosine from 1 to 0 over the remaining steps; ``step``: ``gamma`` to the
    power of the number of whole ``step_epochs`` periods since the warm-up ended.
    """
    total = max(1, steps_per_epoch * epochs)
    warmup = min(total - 1, round(warmup_epochs * steps_per_epoch)) if warmup_epochs > 0 else 0
    if step < warmup:
        return (step + 1) / (warmup + 1)
    after = step - warmup
    if schedule == "constant":
        return 1.0
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * after / max(1, total - warmup)))
    if schedule == "step":
        return gamma ** (after // max(1, step_epochs * steps_per_epoch))
    raise ValueError(f"unknown schedule {schedule!r}")


@dataclass
class EpochMonitor:
    """The best epoch so far and whether to stop, from each epoch's all-reduced metrics.

    ``metric`` is the workflow's validation metric key (``val_accuracy``, ``val_rmse``) and
    ``higher_is_better`` its direction. An epoch is *usable* when its training and validation
    losses and its metric are finite; only usable epochs can be the best. The best epoch is
    the usable one with the strictly best metric (the earliest on a tie).

    Stops: ``diverged`` on a non-finite loss, or when the validation loss stays above
    ``divergence_factor`` times the lowest validation loss so far for ``divergence_patience``
    epochs in a row; ``early_stopping`` (when ``patience`` > 0) after ``patience`` epochs in a
    row whose metric did not beat the reference by more than ``min_delta`` (the reference
    moves only on such an improvement, as Keras' EarlyStopping does).
    """

    metric: str
    higher_is_better: bool
    patience: int = 0
    min_delta: float = 0.0
    divergence_factor: float = 4.0
    divergence_patience: int = 2
    best_epoch: int = 0
    best_value: float | None = None
    lowest_val_loss: float | None = None
    reference: float | None = None
    epochs_without_improvement: int = 0
    epochs_above: int = 0
    stop_reason: str | None = None
    notes: list[str] = field(default_factory=list)

    def better(self, a: float, b: float | None, by: float = 0.0) -> bool:
        if b is None:
            return True
        return a > b + by if self.higher_is_better else a < b - by

    def observe(self, epoch: int, metrics: dict[str, float]) -> bool:
        """Take epoch ``epoch``'s metrics; return whether it is the new best epoch. Sets
        :attr:`stop_reason` when training should stop after it."""
        train_loss = metrics.get("train_loss", math.nan)
        val_loss = metrics.get("val_loss", train_loss)
        value = metrics.get(self.metric, math.nan)
        if not (math.isfinite(train_loss) and math.isfinite(val_loss) and math.isfinite(value)):
            self.stop_reason = DIVERGED
            self.notes.append(f"epoch {epoch}: non-finite loss (train {train_loss}, validation {val_loss})")
            return False
        if self.lowest_val_loss is not None and val_loss > self.divergence_factor * self.lowest_val_loss:
            self.epochs_above += 1
            if self.epochs_above >= self.divergence_patience:
                self.stop_reason = DIVERGED
                self.notes.append(
                    f"epoch {epoch}: validation loss {val_loss:.4g} above {self.divergence_factor:g} x the lowest "
                    f"({self.lowest_val_loss:.4g}) for {self.epochs_above} epochs"
                )
        else:
            self.epochs_above = 0
        self.lowest_val_loss = val_loss if self.lowest_val_loss is None else min(self.lowest_val_loss, val_loss)
        is_best = self.better(value, self.best_value)
        if is_best:
            self.best_epoch, self.best_value = epoch, value
        if self.better(value, self.reference, self.min_delta):
            self.reference, self.epochs_without_improvement = value, 0
        else:
            self.epochs_without_improvement += 1
            if self.patience and self.epochs_without_improvement >= self.patience and self.stop_reason is None:
                self.stop_reason = EARLY_STOPPED
                self.notes.append(
                    f"epoch {epoch}: {self.metric} not better than {self.reference:.4g} by more than "
                    f"{self.min_delta:g} for {self.patience} epochs"
                )
        return is_best

    def state(self) -> dict[str, Any]:
        """Everything, as plain values (for the checkpoint)."""
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> EpochMonitor:
        return cls(**state)
