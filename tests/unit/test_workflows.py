"""Workflow declarations: both shipped ones load, and a wrong one fails naming what is wrong."""

from __future__ import annotations

import copy
import tomllib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ml_contract.workflows import DTYPE_LIMITS, FEATURE_DTYPES, ROW_SUMMARIES
from spark_jobs import features, workflows
from spark_jobs.workflows import WorkflowError, parse_workflow


def declaration(name: str) -> dict:
    return tomllib.loads((workflows.WORKFLOWS_DIR / f"{name}.toml").read_text())


def test_mnist_is_a_28x28_uint8_classifier():
    wf = workflows.load("mnist")
    assert wf.features.shape == (28, 28) and wf.features.dtype == "uint8" and wf.features.item_bytes == 784
    assert wf.raw_fields == ["label", *[f"pixel{i}" for i in range(784)]]
    assert wf.output.columns == ["prediction", *[f"prob_{c}" for c in range(10)]]
    assert (wf.metric.name, wf.metric.direction, wf.promotion.floor) == ("accuracy", "max", 0.93)
    assert workflows.model_factory(wf)().__class__.__name__ == "MnistNet"


def test_diabetes_is_a_tabular_float32_regression_where_lower_is_better():
    wf = workflows.load("diabetes")
    assert wf.features.layout == "tabular" and wf.features.shape == (10,) and wf.features.item_bytes == 40
    assert wf.raw_fields[:4] == ["progression", "age", "sex", "bmi"]
    assert wf.output.columns == ["prediction"] and not wf.output.is_classifier
    assert (wf.metric.name, wf.metric.direction) == ("rmse", "min")
    assert wf.metric.better(50.0, 60.0) and not wf.metric.better(60.0, 50.0)
    labels, values = workflows.sample_factory(wf)("2026-11-28", 300, seed=1)
    assert values.shape == (300, 10) and values.dtype == np.float32 and labels.dtype == np.float32
    assert (values >= wf.features.mins).all() and (values <= wf.features.maxs).all()
    assert ((labels >= wf.label.min) & (labels <= wf.label.max)).all()


def test_an_unknown_workflow_names_the_declared_ones():
    with pytest.raises(WorkflowError, match=rf"no workflow 'nope': declared are {', '.join(workflows.available())}$"):
        workflows.load("nope")
    with pytest.raises(WorkflowError, match="must match"):
        workflows.load("../mnist")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.pop("metric"), r"missing table \[metric\]"),
        (lambda d: d["metric"].update(direction="up"), r"'direction' is 'up', allowed: max, min"),
        (lambda d: d["metric"].update(direction="min"), "metric accuracy has direction 'max'"),
        (lambda d: d["model"].update(loss="mse"), "needs loss 'nll'"),
        (lambda d: d["features"].update(max=300), "range 0..300 must be ordered and fit uint8"),
        (lambda d: d["features"].update(shape=[28, 0]), r"'shape' is \[28, 0\], allowed: a list of positive integers"),
        (lambda d: d["output"].update(classes=3), "labels 0..classes-1"),
        (lambda d: d["model"]["training"].update(epochs="ten"), "'epochs' must be"),
        (lambda d: d["dataset"].update(raw_format="xml"), "'raw_format' is 'xml', allowed: csv"),
        (lambda d: d["dataset"]["label"].update(name="1st"), r"\[dataset.label\]: name '1st' is not a CSV field"),
        (lambda d: d["features"].update(raw_field_prefix="px-"), "name 'px-' is not a CSV field name"),
    ],
)
def test_a_wrong_declaration_is_refused_naming_the_key(edit, message):
    data = copy.deepcopy(declaration("mnist"))
    edit(data)
    with pytest.raises(WorkflowError, match=message):
        parse_workflow(data, "workflow mnist.toml")


@pytest.mark.parametrize(
    ("name", "edit", "message"),
    [
        ("mnist", lambda d: d["metric"].update(colour="red"), r"mnist.toml \[metric\]: unknown key 'colour'"),
        ("mnist", lambda d: d["dataset"]["label"].update(unit="cm"), r"\[dataset.label\]: unknown key 'unit'"),
        ("mnist", lambda d: d.update(owner="ml"), r"mnist.toml: unknown key 'owner', allowed: name, dataset, features"),
        ("mnist", lambda d: d["features"].update(columns=[]), r"\[features\]: unknown key 'columns'"),
        ("diabetes", lambda d: d["features"]["columns"][0].update(unit="y"), r"\[features\] columns\[0\]: unknown key"),
        ("diabetes", lambda d: d["output"].update(classes=2), r"\[output\]: 'classes' applies to kind 'class_prob"),
    ],
)
def test_an_unknown_key_in_any_table_is_refused_naming_it_and_the_table(name, edit, message):
    """Every table's keys are checked, not only [model.training]'s: a misspelt or stray key is
    an error, not a setting silently ignored."""
    data = copy.deepcopy(declaration(name))
    edit(data)
    with pytest.raises(WorkflowError, match=message):
        parse_workflow(data, f"workflow {name}.toml")


def test_monitoring_defaults_follow_the_layout_and_the_promotion_rule():
    """Without a [monitoring] table: every column (tabular) or every row summary (tensor)
    is compared, at a 1 % false-alarm rate, and late labels may fall the promotion tolerance
    short of the held-out metric."""
    columns = tuple(workflows.load("diabetes").features.raw_fields)
    for name, statistics in (("diabetes", columns), ("mnist", ROW_SUMMARIES)):
        data = copy.deepcopy(declaration(name))
        data.pop("monitoring", None)
        monitoring = parse_workflow(data, f"workflow {name}.toml").monitoring
        assert monitoring.drift and monitoring.statistics == statistics
        assert (monitoring.false_alarm_rate, monitoring.cooldown_days, monitoring.shadow) == (0.01, 7, False)
        assert monitoring.tolerance == data["promotion"]["tolerance"] and monitoring.retrain_window_days is None
        assert monitoring.min_labels == 100


@pytest.mark.parametrize(
    ("name", "monitoring", "message"),
    [
        ("diabetes", {"statistics": ["bmi", "glucose"]}, r"'statistics' names 'glucose'; allowed .* sex"),
        ("diabetes", {"statistics": ["bmi", "bmi"]}, r"'statistics' repeats 'bmi'"),
        ("mnist", {"statistics": ["bmi"]}, r"'statistics' names 'bmi'; allowed for a tensor layout, each once: mean"),
        ("mnist", {"statistics": []}, r"'statistics' is \[\], allowed: a non-empty list of names"),
        ("mnist", {"false_alarm_rate": 0.5}, r"'false_alarm_rate' is 0.5, allowed: > 0 and <= 0.2"),
        ("mnist", {"false_alarm_rate": 0}, r"'false_alarm_rate' is 0, allowed: > 0 and <= 0.2"),
        ("mnist", {"drift": "yes"}, r"'drift' must be true or false, got 'yes'"),
        ("mnist", {"shadow": 1}, r"'shadow' must be true or false, got 1"),
        ("mnist", {"cooldown_days": -1}, r"'cooldown_days' is -1, allowed: >= 0 and <= 365"),
        ("mnist", {"min_labels": 0}, r"'min_labels' is 0, allowed: >= 1"),
        ("mnist", {"retrain_window_days": 0}, r"'retrain_window_days' is 0, allowed: >= 1 and <= 90"),
        ("mnist", {"tolerance": float("nan")}, r"'tolerance' is nan, allowed: >= 0"),
        ("mnist", {"cooldown": 3}, r"\[monitoring\]: unknown key 'cooldown', allowed: drift, false_alarm_rate"),
    ],
)
def test_a_wrong_monitoring_table_is_refused_naming_the_key(name, monitoring, message):
    data = copy.deepcopy(declaration(name))
    data["monitoring"] = monitoring
    with pytest.raises(WorkflowError, match=message):
        parse_workflow(data, f"workflow {name}.toml")


def test_the_shipped_workflows_declare_how_they_are_watched():
    for name in workflows.available():
        monitoring = workflows.load(name).monitoring
        assert "monitoring" in declaration(name), f"{name}.toml has no [monitoring] table"
        assert monitoring.drift and 0 < monitoring.false_alarm_rate <= 0.05 and monitoring.cooldown_days >= 1


def test_a_tabular_declaration_refuses_repeated_columns():
    data = copy.deepcopy(declaration("diabetes"))
    data["features"]["columns"][1]["name"] = "age"
    with pytest.raises(WorkflowError, match="column names repeat"):
        parse_workflow(data, "workflow diabetes.toml")


@pytest.mark.parametrize("name", ["blood pressure", "bp/mmHg", "2nd", "", "s\u00e9rum"])
def test_a_column_a_csv_header_could_not_name_is_refused(name):
    """Ingest tells a header from a row by its field names (letters, digits, '_'): a declared
    name outside them would make the header a quarantined row, so the declaration is refused."""
    data = copy.deepcopy(declaration("diabetes"))
    data["features"]["columns"][3]["name"] = name
    with pytest.raises(WorkflowError, match=r"columns\[3\]: name .* is not a CSV field name"):
        parse_workflow(data, "workflow diabetes.toml")


def test_the_jobs_archive_carries_the_declarations(tmp_path):
    import subprocess
    import sys
    import zipfile

    from package_jobs import package_jobs

    archive = package_jobs(tmp_path / "spark_jobs.zip")
    assert {"spark_jobs/workflows/mnist.toml", "spark_jobs/workflows/diabetes.toml"} <= set(
        zipfile.ZipFile(archive).namelist()
    )
    # Loaded from the zip alone, as an executor imports the package from --py-files.
    probe = "from spark_jobs import workflows; print(workflows.load('diabetes').features.shape)"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env={"PYTHONPATH": str(archive)}, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(10,)"


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["mnist", "diabetes"]),
    rows=st.integers(0, 40),
    start=st.integers(0, 5),
    seed=st.integers(0, 2**32 - 1),
)
def test_dense_values_decode_to_what_was_encoded(name, rows, start, seed):
    layout = workflows.load(name).features
    rng = np.random.default_rng(seed)
    values = rng.uniform(layout.mins, layout.maxs, size=(rows + start, layout.size)).astype(layout.numpy_dtype)
    encoded = features.encode(values, layout).slice(start)  # an offset into the buffers, as Arrow slices
    decoded = features.decode(encoded, layout)
    assert decoded.shape == (rows, *layout.shape)
    assert np.array_equal(decoded.reshape(rows, layout.size), values[start:])


def test_a_value_of_the_wrong_length_is_refused_naming_it():
    import pyarrow as pa

    layout = workflows.load("diabetes").features
    column = pa.array([b"\x00" * 40, b"\x00" * 36], type=pa.binary())
    with pytest.raises(ValueError, match=r"features value 1 is 36 bytes, expected 40 \(float32 \[10\]\)"):
        features.decode(column, layout)
    with pytest.raises(ValueError, match="1 null features values"):
        features.decode(pa.array([b"\x00" * 40, None], type=pa.binary()), layout)


@pytest.mark.parametrize("dtype", FEATURE_DTYPES)
def test_the_contracts_dtype_limits_are_numpys(dtype):
    """The contract checks declared ranges against limits written out (no numpy at DAG parse)."""
    info = np.iinfo(dtype) if np.issubdtype(np.dtype(dtype), np.integer) else np.finfo(dtype)
    assert DTYPE_LIMITS[dtype] == (info.min, info.max)
