"""MNIST-format daily raw drops generated from scikit-learn's bundled 8x8 digits.

There is no internet at run time, so the seed workload's MNIST data is stood in for by the
1,797 digits scikit-learn ships, upscaled to MNIST's geometry (a 20x20 digit centred in a
28x28 frame, pixels 0..255). Output is deterministic for a (seed, ds) pair. With
augmentation (random shifts of up to 2 pixels and Gaussian noise) any number of distinct
rows can be made, for scale tests; without it, rows are the upscaled digits themselves.

    python -m spark_jobs.sample_data --ds 2026-11-28 --rows 5000 --out var/data/raw/mnist
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

from spark_jobs.schema import IMAGE_SIDE, RAW_COLS

DIGIT_SIDE = 20
MAX_SHIFT = 2
NOISE_STD = 12.0


@lru_cache(maxsize=1)
def mnist_like_digits() -> tuple[np.ndarray, np.ndarray]:
    """All bundled digits as (labels int64 [n], images uint8 [n, 28, 28])."""
    from scipy.ndimage import zoom
    from sklearn.datasets import load_digits

    digits = load_digits()
    scaled = digits.images / 16.0 * 255.0
    big = zoom(scaled, (1, DIGIT_SIDE / 8, DIGIT_SIDE / 8), order=1)
    pad = (IMAGE_SIDE - DIGIT_SIDE) // 2
    frames = np.zeros((len(big), IMAGE_SIDE, IMAGE_SIDE), dtype=np.float64)
    frames[:, pad : pad + DIGIT_SIDE, pad : pad + DIGIT_SIDE] = big
    return digits.target.astype(np.int64), np.clip(np.rint(frames), 0, 255).astype(np.uint8)


def make_rows(ds: str, rows: int, *, seed: int = 0, augment: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` (labels [rows], pixels uint8 [rows, 784]) for day ``ds``, same for same inputs."""
    labels, images = mnist_like_digits()
    day = dt.date.fromisoformat(ds).toordinal()
    rng = np.random.default_rng([seed, day])
    if not augment:
        if rows > len(labels):
            raise ValueError(f"only {len(labels)} rows exist without augmentation, asked for {rows}")
        picks = rng.permutation(len(labels))[:rows]
        return labels[picks], images[picks].reshape(rows, -1)
    picks = rng.integers(0, len(labels), size=rows)
    out = images[picks].astype(np.float64)
    shifts = rng.integers(-MAX_SHIFT, MAX_SHIFT + 1, size=(rows, 2))
    for dy, dx in np.unique(shifts, axis=0):
        sel = np.all(shifts == (dy, dx), axis=1)
        # The 4-pixel border is empty, so rolling by <= 2 pixels never wraps ink around.
        out[sel] = np.roll(out[sel], shift=(dy, dx), axis=(1, 2))
    out += rng.normal(0.0, NOISE_STD, size=out.shape) * (out > 0)
    pixels = np.clip(np.rint(out), 0, 255).astype(np.uint8).reshape(rows, -1)
    return labels[picks], pixels


def write_drop(out_dir: Path, ds: str, rows: int, *, seed: int = 0, augment: bool = True) -> Path:
    """Write ``<out_dir>/ds=<ds>/mnist.csv`` (Kaggle header) atomically; return its path."""
    labels, pixels = make_rows(ds, rows, seed=seed, augment=augment)
    target_dir = out_dir / f"ds={ds}"
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / "mnist.csv"
    tmp = target_dir / ".mnist.csv.tmp"
    table = np.column_stack([labels, pixels]).astype(np.int64)
    np.savetxt(tmp, table, fmt="%d", delimiter=",", header=",".join(RAW_COLS), comments="")
    os.replace(tmp, target)
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ds", action="append", required=True, help="day YYYY-MM-DD (repeatable)")
    parser.add_argument("--rows", type=int, default=5000, help="rows per day (default 5000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-augment", dest="augment", action="store_false")
    parser.add_argument("--out", type=Path, required=True, help="raw drop root")
    args = parser.parse_args(argv)
    for ds in args.ds:
        path = write_drop(args.out, ds, args.rows, seed=args.seed, augment=args.augment)
        print(f"wrote {args.rows} rows to {path}")


if __name__ == "__main__":
    main()
