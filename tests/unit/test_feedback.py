"""Label feedback (``spark_jobs/feedback.py``): late labels joined with what was scored, every
line counted, the realised metric per version judged against its held-out metric, with Spark
(local) and a real MLflow store (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_jobs import feedback, monitoring, workflows

MNIST, DIABETES = workflows.load("mnist"), workflows.load("diabetes")
DS = "2026-11-20"


def version_with_holdout(experiment_id: str, name: str, metric: str, value: float) -> tuple[str, str]:
    """A registered version whose ``holdout_<metric>`` tag is ``value`` (as register sets it)."""
    from mlflow import MlflowClient

    client = MlflowClient()
    run_id = client.create_run(experiment_id).info.run_id
    try:
        client.create_registered_model(name)
    except Exception:  # registered by an earlier test of this store
        pass
    version = client.create_model_version(name, f"runs:/{run_id}/model", run_id=run_id).version
    client.set_model_version_tag(name, version, f"holdout_{metric}", f"{value:.6f}")
    return run_id, str(version)


def write_predictions(root, ds: str, row_ids, predictions, name: str, version: str, workflow) -> None:
    partition = root / f"ds={ds}"
    partition.mkdir(parents=True, exist_ok=True)
    prediction = pa.array(predictions, pa.int32() if workflow.output.is_classifier else pa.float64())
    table = pa.table(
        {
            "row_id": pa.array(row_ids, pa.int64()),
            "prediction": prediction,
            "model_name": pa.array([name] * len(row_ids)),
            "model_version": pa.array([version] * len(row_ids)),
        }
    )
    pq.write_table(table, partition / f"part-{version}.parquet")


def write_labels(root, ds: str, lines: list[str], workflow) -> None:
    partition = root / f"ds={ds}"
    partition.mkdir(parents=True, exist_ok=True)
    (partition / "labels.csv").write_text("\n".join([feedback.header(workflow), *lines]) + "\n", encoding="utf-8")


def test_every_label_line_is_counted_and_the_realised_accuracy_is_per_version(spark, tmp_path, mlflow_experiment):
    """Two versions scored parts of the day; 150 rows of one are predicted right 140 times,
    120 of the other 60 times: version 2 (held-out 0.95, tolerance 0.03) degraded the day.
    Malformed lines are rejected with their reason, labels of unscored rows are unmatched."""
    from mlflow import MlflowClient

    run_a, a = version_with_holdout(mlflow_experiment, "fb_mnist", "accuracy", 0.95)
    run_b, b = version_with_holdout(mlflow_experiment, "fb_mnist", "accuracy", 0.95)
    scored, labels, watched = tmp_path / "scored", tmp_path / "labels", tmp_path / "monitoring"
    rng = np.random.default_rng(0)
    truth_a, truth_b = rng.integers(0, 10, 150), rng.integers(0, 10, 120)
    pred_a = np.where(np.arange(150) < 140, truth_a, (truth_a + 1) % 10)
    pred_b = np.where(np.arange(120) < 60, truth_b, (truth_b + 1) % 10)
    write_predictions(scored, DS, np.arange(150), pred_a, "fb_mnist", a, MNIST)
    write_predictions(scored, DS, np.arange(1000, 1120), pred_b, "fb_mnist", b, MNIST)
    good = [f"{i},{t}" for i, t in zip(range(150), truth_a, strict=True)]
    good += [f" {i} , {t} " for i, t in zip(range(1000, 1120), truth_b, strict=True)]
    # Refused with their reasons; row 14 keeps its valid label beside the out-of-range one.
    bad = ["x12,3", "3013,seven", "14,11", "3015,2.5", "3016,1,2", "3017", "3000,nan"]
    twice = ["5000,1", "5000,2"]  # one unscored row labelled twice: both refused
    unmatched = ["9000,3", "9001,4"]
    write_labels(labels, DS, [*good, "", *bad, *twice, *unmatched], MNIST)

    report = feedback.judge_day(spark, MNIST, DS, str(labels), str(scored), str(watched))

    assert report["labels_in"] == len(good) + len(bad) + len(twice) + len(unmatched)
    assert (report["rejected"], report["unmatched"], report["matched"]) == (9, 2, 270)
    assert report["rejected_reasons"] == {
        "row_id is not an integer": 1,
        "label is not a number": 2,
        "label is outside 0..9": 1,
        "label is not a class": 1,
        "expected 2 fields: row_id,label": 2,
        "row_id labelled more than once": 2,
    }
    realised = {v["model"]: (v["realised_accuracy"], v["rows"], v["outcome"]) for v in report["versions"]}
    assert realised == {
        f"models:/fb_mnist/{a}": (pytest.approx(140 / 150), 150, "within_tolerance"),
        f"models:/fb_mnist/{b}": (pytest.approx(60 / 120), 120, "degraded"),
    }
    assert report["outcome"] == "degraded" and report["moved"] == ["realised accuracy"]
    on_disk = json.loads((watched / f"ds={DS}" / "labels.json").read_text())
    assert on_disk["outcome"] == "degraded" and on_disk["matched"] == 270
    rejected = [
        json.loads(line)
        for f in (watched / f"ds={DS}" / "labels_rejected").glob("*.json")
        for line in f.read_text().splitlines()
    ]
    assert sorted(r["line"] for r in rejected) == sorted([*bad, *twice])
    client = MlflowClient()
    for run_id, value in ((run_a, 140 / 150), (run_b, 0.5)):
        (metric,) = client.get_metric_history(run_id, "realised_accuracy")
        assert metric.step == monitoring.day_step(DS) and metric.value == pytest.approx(value)


def test_a_regression_day_is_judged_by_rmse_and_few_labels_judge_nothing(spark, tmp_path, mlflow_experiment):
    _, version = version_with_holdout(mlflow_experiment, "fb_diabetes", "rmse", 40.0)
    scored, labels, watched = tmp_path / "scored", tmp_path / "labels", tmp_path / "monitoring"
    predictions = np.full(200, 150.0)
    truth = predictions + np.where(np.arange(200) % 2 == 0, 45.0, -45.0)  # RMSE 45: 5 above 40, within 10
    write_predictions(scored, DS, np.arange(200), predictions, "fb_diabetes", version, DIABETES)
    write_labels(labels, DS, [f"{i},{t}" for i, t in enumerate(truth)], DIABETES)
    report = feedback.judge_day(spark, DIABETES, DS, str(labels), str(scored), str(watched))
    ((value, outcome),) = [(v["realised_rmse"], v["outcome"]) for v in report["versions"]]
    assert value == pytest.approx(45.0) and outcome == "within_tolerance" and report["outcome"] == "within_tolerance"

    few = "2026-11-21"
    write_predictions(scored, few, np.arange(20), np.full(20, 150.0), "fb_diabetes", version, DIABETES)
    write_labels(labels, few, [f"{i},400" for i in range(20)], DIABETES)  # far off, but 20 < min_labels
    report = feedback.judge_day(spark, DIABETES, few, str(labels), str(scored), str(watched))
    assert report["outcome"] == "too_few_labels" and report["versions"][0]["realised_rmse"] == pytest.approx(250.0)


@pytest.mark.parametrize(
    ("value", "holdout", "rows", "expected"),
    [
        (0.91, 0.95, 500, "degraded"),
        (0.93, 0.95, 500, "within_tolerance"),
        (0.50, 0.95, 99, "too_few_labels"),
        (0.50, None, 500, "within_tolerance"),
        (0.50, math.nan, 500, "within_tolerance"),
    ],
)
def test_judging_a_classifier_day(value, holdout, rows, expected):
    assert feedback.judge(value, holdout, rows, MNIST) == expected  # tolerance 0.03, min_labels 100


LINE = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=20)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(st.one_of(LINE, st.builds("{},{}".format, st.integers(-5, 40), st.integers(-2, 12))), max_size=30)
)
def test_any_labels_drop_is_counted_whole_and_never_crashes(spark, tmp_path_factory, lines):
    """Fuzzed label lines (any Unicode, any field count): each one is matched, unmatched or
    rejected with a reason, never lost and never a crash."""
    root = tmp_path_factory.mktemp("fuzz")
    labels = root / "labels" / f"ds={DS}"
    labels.mkdir(parents=True)
    (labels / "labels.csv").write_text("\n".join([feedback.header(MNIST), *lines]), encoding="utf-8")
    parsed = feedback.parse_labels(spark.read.text(str(labels)), MNIST).collect()
    # Blank lines and the header are not rows; the parse trims spaces (Spark's trim) and a BOM.
    texts = [(line[1:] if line.startswith("\ufeff") else line).strip(" ") for line in lines]
    assert len(parsed) == len([text for text in texts if text not in ("", feedback.header(MNIST))])
    for row in parsed:
        if row["reason"] is None:
            assert row["row_id"] is not None and 0 <= row["label"] <= 9 and row["label"] == int(row["label"])
        else:
            assert row["reason"] and isinstance(row["reason"], str)
