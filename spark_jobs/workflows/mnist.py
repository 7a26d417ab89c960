"""The MNIST workflow's model, the PyTorch MNIST tutorial's CNN (declared in ``mnist.toml``),
and its offline sample data (:func:`sample_rows`).

Its serving form (class probabilities) is the generic one of :mod:`spark_jobs.serving`.
"""

from __future__ import annotations

import datetime as dt
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class MnistNet(nn.Module):
    """Two 5x5 conv layers (10, 20 channels, dropout), two linear layers, log-softmax.

    Takes the curated table's raw 0..255 pixels as stored, ``[batch, 28, 28]`` uint8 (any
    shape with 784 elements per row and any numeric dtype), so the model is scored straight
    from the decoded ``features`` column.
    """

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        # Literals, not module constants: TorchScript cannot close over Python globals.
        # 0.1307 / 0.3081 are the tutorial's MNIST mean / std on 0..1 pixels.
        x = pixels.reshape(-1, 1, 28, 28).float()
        x = (x / 255.0 - 0.1307) / 0.3081
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.flatten(1)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


# --- sample data ------------------------------------------------------------------------
# There is no internet at run time, so MNIST is stood in for by the 1,797 digits
# scikit-learn ships, upscaled to MNIST's geometry: a 20x20 digit centred in a 28x28 frame,
# pixels 0..255. With augmentation (random shifts of up to 2 pixels and Gaussian noise on
# the ink) any number of distinct rows can be made, for scale tests; without it, rows are
# the upscaled digits themselves.
IMAGE_SIDE = 28
DIGIT_SIDE = 20
MAX_SHIFT = 2
NOISE_STD = 12.0


@lru_cache(maxsize=1)
def mnist_like_digits() -> tuple[np.ndarray, np.ndarray]:
    """All bundled digits as (labels int32 [n], images uint8 [n, 28, 28])."""
    from scipy.ndimage import zoom
    from sklearn.datasets import load_digits

    digits = load_digits()
    scaled = digits.images / 16.0 * 255.0
    big = zoom(scaled, (1, DIGIT_SIDE / 8, DIGIT_SIDE / 8), order=1)
    pad = (IMAGE_SIDE - DIGIT_SIDE) // 2
    frames = np.zeros((len(big), IMAGE_SIDE, IMAGE_SIDE), dtype=np.float64)
    frames[:, pad : pad + DIGIT_SIDE, pad : pad + DIGIT_SIDE] = big
    return digits.target.astype(np.int32), np.clip(np.rint(frames), 0, 255).astype(np.uint8)


def sample_rows(ds: str, rows: int, *, seed: int = 0, augment: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` (labels int32 [rows], images uint8 [rows, 28, 28]) for day ``ds``, the same
    for the same inputs."""
    labels, images = mnist_like_digits()
    rng = np.random.default_rng([seed, dt.date.fromisoformat(ds).toordinal()])
    if not augment:
        if rows > len(labels):
            raise ValueError(f"only {len(labels)} rows exist without augmentation, asked for {rows}")
        picks = rng.permutation(len(labels))[:rows]
        return labels[picks], images[picks]
    picks = rng.integers(0, len(labels), size=rows)
    out = images[picks].astype(np.float64)
    shifts = rng.integers(-MAX_SHIFT, MAX_SHIFT + 1, size=(rows, 2))
    for dy, dx in np.unique(shifts, axis=0):
        sel = np.all(shifts == (dy, dx), axis=1)
        # The 4-pixel border is empty, so rolling by <= 2 pixels never wraps ink around.
        out[sel] = np.roll(out[sel], shift=(dy, dx), axis=(1, 2))
    out += rng.normal(0.0, NOISE_STD, size=out.shape) * (out > 0)
    return labels[picks], np.clip(np.rint(out), 0, 255).astype(np.uint8)
