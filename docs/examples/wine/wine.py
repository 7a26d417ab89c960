"""The wine workflow's model and sample data (declared in ``wine.toml``).

The model is ``WineNet`` from ``train_single_node.py``, unchanged: the platform trains it
with Horovod or TorchDistributor, logs it, registers it, gates and scores it. The sample
data stands in for a daily feed: each row is a real wine of scikit-learn's bundled set
with every measurement jittered by 3 % of its spread, so any number of rows can be made
offline.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

MEAN = [13.001, 2.336, 2.367, 19.495, 99.742, 2.295, 2.029, 0.362, 1.591, 5.058, 0.957, 2.612, 746.893]
STD = [0.81, 1.114, 0.274, 3.33, 14.242, 0.624, 0.996, 0.124, 0.571, 2.312, 0.228, 0.708, 314.022]


class WineNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(MEAN))
        self.register_buffer("std", torch.tensor(STD))
        self.layers = nn.Sequential(nn.Linear(13, 32), nn.ReLU(), nn.Linear(32, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.layers((x.float() - self.mean) / self.std), dim=1)


def sample_rows(ds: str, rows: int, *, seed: int = 0, augment: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` (cultivars int32 [rows], measurements float32 [rows, 13]) for day ``ds``."""
    from sklearn.datasets import load_wine

    data = load_wine()
    rng = np.random.default_rng([seed, dt.date.fromisoformat(ds).toordinal()])
    picks = rng.integers(0, len(data.target), size=rows)
    x = data.data[picks]
    if augment:
        x = np.clip(x + rng.normal(0.0, 0.03, size=x.shape) * data.data.std(axis=0), 0.0, None)
    return data.target[picks].astype(np.int32), np.round(x, 4).astype(np.float32)
