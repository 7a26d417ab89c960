from __future__ import annotations

import numpy as np
import pytest

from spark_jobs.sample_data import make_rows, write_drop
from spark_jobs.schema import NUM_PIXELS, RAW_COLS


def test_same_seed_and_day_give_the_same_rows():
    a_labels, a_pixels = make_rows("2026-11-28", 300, seed=1)
    b_labels, b_pixels = make_rows("2026-11-28", 300, seed=1)
    assert np.array_equal(a_labels, b_labels) and np.array_equal(a_pixels, b_pixels)


def test_other_day_or_seed_gives_other_rows():
    _, base = make_rows("2026-11-28", 300, seed=1)
    assert not np.array_equal(base, make_rows("2026-11-29", 300, seed=1)[1])
    assert not np.array_equal(base, make_rows("2026-11-28", 300, seed=2)[1])


def test_rows_have_mnist_geometry_and_ranges():
    labels, pixels = make_rows("2026-11-28", 1000)
    assert pixels.shape == (1000, NUM_PIXELS) and pixels.dtype == np.uint8
    assert set(np.unique(labels)) == set(range(10))
    frames = pixels.reshape(-1, 28, 28)
    # The digit sits inside a 20x20 box shifted by at most 2: two outer rows stay empty.
    assert frames[:, :2, :].max() == 0 and frames[:, -2:, :].max() == 0
    assert pixels.max() > 200


def test_augmentation_makes_any_number_of_rows_and_plain_mode_is_bounded():
    assert make_rows("2026-11-28", 5000)[1].shape[0] == 5000
    assert make_rows("2026-11-28", 100, augment=False)[1].shape[0] == 100
    with pytest.raises(ValueError, match="without augmentation"):
        make_rows("2026-11-28", 5000, augment=False)


def test_written_drop_is_kaggle_mnist_csv(tmp_path):
    path = write_drop(tmp_path, "2026-11-28", 10)
    lines = path.read_text().splitlines()
    assert path.parent.name == "ds=2026-11-28"
    assert lines[0] == ",".join(RAW_COLS) and len(lines) == 11
    assert len(lines[1].split(",")) == len(RAW_COLS)
