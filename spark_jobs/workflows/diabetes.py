"""The diabetes workflow's model and sample data (declared in ``diabetes.toml``).

The data is scikit-learn's bundled diabetes set (442 patients, ten unscaled measurements,
a disease-progression score one year later), augmented for volume: each generated row is
a real patient with every measurement jittered by 5 % of its spread and the target by the
same share of its own, so any number of distinct, realistic rows can be made offline.
"""

from __future__ import annotations

import datetime as dt
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

# Per-feature mean and standard deviation of the bundled set, and the target's: the
# network sees standardised inputs and predicts a standardised target. Literals, not
# module constants read at run time: TorchScript cannot close over Python globals.
FEATURE_MEAN = [48.518, 1.468, 26.376, 94.647, 189.14, 115.439, 49.788, 4.07, 4.641, 91.26]
FEATURE_STD = [13.094, 0.499, 4.413, 13.816, 34.569, 30.379, 12.92, 1.289, 0.522, 11.483]
TARGET_MEAN, TARGET_STD = 152.133, 77.006
JITTER = 0.05


class DiabetesNet(nn.Module):
    """A small MLP (10 -> 32 -> 16 -> 1) from raw measurements to the progression score."""

    if TYPE_CHECKING:  # the buffers registered in __init__ (no class annotations: TorchScript would read them)
        mean: torch.Tensor
        std: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(FEATURE_MEAN))
        self.register_buffer("std", torch.tensor(FEATURE_STD))
        self.layers = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = (features.float() - self.mean) / self.std
        return self.layers(x).squeeze(1) * 77.006 + 152.133


@lru_cache(maxsize=1)
def _bundled() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_diabetes

    data = load_diabetes(scaled=False)
    return data.target.astype(np.float64), data.data.astype(np.float64)


def sample_rows(ds: str, rows: int, *, seed: int = 0, augment: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` (targets float32 [rows], features float32 [rows, 10]) for day ``ds``,
    the same for the same inputs."""
    targets, features = _bundled()
    rng = np.random.default_rng([seed, dt.date.fromisoformat(ds).toordinal(), 442])
    if not augment:
        if rows > len(targets):
            raise ValueError(f"only {len(targets)} rows exist without augmentation, asked for {rows}")
        picks = rng.permutation(len(targets))[:rows]
        return targets[picks].astype(np.float32), features[picks].astype(np.float32)
    picks = rng.integers(0, len(targets), size=rows)
    x = features[picks] + rng.normal(0.0, JITTER, size=(rows, features.shape[1])) * features.std(axis=0)
    x[:, 1] = features[picks, 1]  # sex stays 1 or 2
    y = targets[picks] + rng.normal(0.0, JITTER * targets.std(), size=rows)
    x = np.clip(x, 0.0, None)
    return np.round(y, 2).astype(np.float32), np.round(x, 3).astype(np.float32)
