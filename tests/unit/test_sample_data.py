from __future__ import annotations

import hashlib

import numpy as np
import pytest

from spark_jobs import workflows
from spark_jobs.sample_data import csv_lines, main, make_rows, write_drop

MNIST = workflows.load("mnist")
DIABETES = workflows.load("diabetes")
# The bytes `python -m spark_jobs.sample_data --rows 300 --seed 3 --ds 2026-11-28` wrote
# before workflows existed: the generator moved, the demo's data did not change.
MNIST_DROP_MD5 = "3f006a98f6ed8a891b940f68bdcec186"


@pytest.mark.parametrize("workflow", ["mnist", "diabetes"])
def test_same_seed_and_day_give_the_same_rows(workflow):
    a_labels, a_features = make_rows(workflow, "2026-11-28", 300, seed=1)
    b_labels, b_features = make_rows(workflow, "2026-11-28", 300, seed=1)
    assert np.array_equal(a_labels, b_labels) and np.array_equal(a_features, b_features)


@pytest.mark.parametrize("workflow", ["mnist", "diabetes"])
def test_other_day_or_seed_gives_other_rows(workflow):
    _, base = make_rows(workflow, "2026-11-28", 300, seed=1)
    assert not np.array_equal(base, make_rows(workflow, "2026-11-29", 300, seed=1)[1])
    assert not np.array_equal(base, make_rows(workflow, "2026-11-28", 300, seed=2)[1])


def test_rows_have_mnist_geometry_and_ranges():
    labels, images = make_rows(MNIST, "2026-11-28", 1000)
    assert images.shape == (1000, 28, 28) and images.dtype == np.uint8
    assert labels.dtype == np.int32 and set(np.unique(labels)) == set(range(10))
    # The digit sits inside a 20x20 box shifted by at most 2: two outer rows stay empty.
    assert images[:, :2, :].max() == 0 and images[:, -2:, :].max() == 0
    assert images.max() > 200


def test_diabetes_rows_are_float32_within_the_declared_ranges():
    labels, features = make_rows(DIABETES, "2026-11-28", 5000)
    assert labels.dtype == np.float32 and features.dtype == np.float32 and features.shape == (5000, 10)
    assert DIABETES.label.min <= labels.min() and labels.max() <= DIABETES.label.max
    assert (features >= DIABETES.features.mins).all() and (features <= DIABETES.features.maxs).all()


@pytest.mark.parametrize(("workflow", "bundled"), [("mnist", 1797), ("diabetes", 442)])
def test_augmentation_makes_any_number_of_rows_and_plain_mode_is_bounded(workflow, bundled):
    assert make_rows(workflow, "2026-11-28", 5000)[1].shape[0] == 5000
    assert make_rows(workflow, "2026-11-28", 100, augment=False)[1].shape[0] == 100
    with pytest.raises(ValueError, match="without augmentation"):
        make_rows(workflow, "2026-11-28", bundled + 1, augment=False)


def test_written_mnist_drop_is_kaggle_mnist_csv_as_before(tmp_path):
    path = write_drop(MNIST, tmp_path, "2026-11-28", 10)
    lines = path.read_text().splitlines()
    assert path.parent.name == "ds=2026-11-28" and path.name == "mnist.csv"
    assert lines[0] == ",".join(MNIST.raw_fields) and len(lines) == 11
    assert len(lines[1].split(",")) == 785
    same = write_drop("mnist", tmp_path / "again", "2026-11-28", 300, seed=3)
    assert hashlib.md5(same.read_bytes()).hexdigest() == MNIST_DROP_MD5


def test_written_diabetes_drop_reads_back_as_the_same_float32(tmp_path):
    path = write_drop(DIABETES, tmp_path, "2026-11-28", 200, seed=4)
    lines = path.read_text().splitlines()
    assert path.name == "diabetes.csv" and lines[0] == ",".join(DIABETES.raw_fields) and len(lines) == 201
    parsed = np.array([[float(v) for v in line.split(",")] for line in lines[1:]])  # decimal -> double
    labels, features = make_rows(DIABETES, "2026-11-28", 200, seed=4)
    assert np.array_equal(parsed[:, 0].astype(np.float32), labels)
    assert np.array_equal(parsed[:, 1:].astype(np.float32), features)
    assert max(len(v) for line in lines[1:] for v in line.split(",")) <= 9  # shortest, not 17 digits


def test_awkward_float32_values_round_trip_through_a_double():
    values = np.array(
        [[0.1, 1e-7, 3.4028235e38, 16777216.0, 2.0**-126, 1 / 3, 1e10, 123456.789, 1e-45, -0.0]], dtype=np.float32
    )
    tokens = csv_lines(DIABETES, np.array([1.5], dtype=np.float32), values)[0].split(",")
    assert tokens[0] == "1.5" and len(tokens) == 11
    read_back = np.array([float(t) for t in tokens[1:]]).astype(np.float32)  # decimal -> double -> float32
    assert read_back.tobytes() == values.tobytes()


def test_cli_writes_the_named_workflow_and_defaults_to_mnist(tmp_path, capsys):
    main(["--workflow", "diabetes", "--ds", "2026-11-28", "--rows", "3", "--out", str(tmp_path)])
    main(["--ds", "2026-11-28", "--rows", "3", "--out", str(tmp_path)])
    assert sorted(p.name for p in (tmp_path / "ds=2026-11-28").iterdir()) == ["diabetes.csv", "mnist.csv"]
    with pytest.raises(SystemExit):
        main(["--workflow", "nope", "--ds", "2026-11-28", "--out", str(tmp_path)])
    assert "no workflow 'nope'" in capsys.readouterr().err
