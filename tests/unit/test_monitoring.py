"""The drift check as the jobs run it: a version's reference profile logged by the register
step's code, then the score job's code checking each day it writes against it, with Spark
(local) and a real MLflow store (SQLite and PostgreSQL, ``tests/registry_stores.py``).

The statistics themselves are tested in ``test_drift.py``; here: the right rows reach them,
a shifted day is flagged naming what moved, a day from the training distribution is not,
and the report lands where the DAG's check and a person look (storage and the version's run).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from spark_jobs import monitoring, workflows
from spark_jobs.dataset import filter_holdout_rows
from spark_jobs.inference import pin_model, with_predictions
from spark_jobs.partitions import read_partitions
from spark_jobs.sample_data import make_rows
from spark_jobs.schema import curated_arrow_table
from spark_jobs.score import score_partitions

DIABETES, MNIST = workflows.load("diabetes"), workflows.load("mnist")
WINDOW = ("2026-11-01", "2026-11-02", "2026-11-03")
SAME, SHIFTED = "2026-11-04", "2026-11-05"
PNG = b"\x89PNG\r\n\x1a\n"


def write_day(root: Path, workflow: workflows.Workflow, ds: str, rows: int, shift=None) -> None:
    labels, features = make_rows(workflow, ds, rows, seed=3)
    if shift is not None:
        features = shift(features)
    partition = root / f"ds={ds}"
    partition.mkdir(parents=True)
    table = curated_arrow_table(workflow, np.arange(rows) + int(ds.replace("-", "")) * 10**4, labels, features)
    pq.write_table(table, partition / "part-00000.parquet")


def registered_version(experiment_id: str, workflow: workflows.Workflow, name: str, seed: int = 0) -> tuple[str, str]:
    """A freshly initialised model of ``workflow`` (weights from ``seed``) logged as the
    train job logs it and registered; (run id, ``models:/name/version``)."""
    import mlflow
    import torch

    from spark_jobs.training.model_logging import log_serving_model

    torch.manual_seed(seed)
    example = np.zeros((2, *workflow.features.shape), dtype=workflow.features.dtype)
    with mlflow.start_run(experiment_id=experiment_id) as run:
        model_uri = log_serving_model(workflow, workflows.model_factory(workflow)().state_dict(), example)
    version = mlflow.register_model(model_uri, name)
    return run.info.run_id, f"models:/{name}/{version.version}"


def profiled_version(spark, experiment_id, workflow, curated_root: str, name: str) -> tuple[str, str]:
    """A registered version with the reference profile the register job logs (its window
    and its held-out predictions)."""
    from mlflow import MlflowClient

    run_id, uri = registered_version(experiment_id, workflow, name)
    window_df = read_partitions(spark, curated_root, WINDOW[0], WINDOW[-1])
    predicted_df = with_predictions(filter_holdout_rows(window_df, 20, 7), uri, workflow)
    profile = monitoring.reference_profile(window_df, predicted_df, workflow)
    monitoring.log_reference(MlflowClient(), run_id, profile)
    return run_id, uri


def invert(images: np.ndarray) -> np.ndarray:
    return 255 - images


def bmi_rescaled(rows: np.ndarray) -> np.ndarray:
    rows = rows.copy()
    bmi = DIABETES.features.raw_fields.index("bmi")
    rows[:, bmi] = np.minimum(rows[:, bmi] * 1.3, 80)
    return rows


@pytest.mark.parametrize(
    ("workflow", "rows", "shift", "moved"),
    [(DIABETES, 600, bmi_rescaled, "bmi"), (MNIST, 300, invert, "mean")],
    ids=["diabetes-bmi-rescaled", "mnist-inverted"],
)
def test_a_shifted_day_is_flagged_naming_what_moved_and_a_day_like_the_window_is_not(
    spark, tmp_path, mlflow_experiment, workflow, rows, shift, moved
):
    from mlflow import MlflowClient

    curated = tmp_path / "curated"
    for ds in WINDOW:
        write_day(curated, workflow, ds, rows)
    write_day(curated, workflow, SAME, rows)
    write_day(curated, workflow, SHIFTED, rows, shift)
    run_id, uri = profiled_version(spark, mlflow_experiment, workflow, str(curated), f"watched_{workflow.name}")
    reference = MlflowClient().download_artifacts(run_id, monitoring.REFERENCE_ARTIFACT, str(tmp_path))
    assert Path(reference).stat().st_size < 100_000  # kilobytes, whatever the window's rows

    monitoring_root = tmp_path / "monitoring"
    report = score_partitions(
        spark, pin_model(uri), workflow, str(curated), str(tmp_path / "scored"), SAME, SHIFTED,
        monitoring_root=str(monitoring_root),
    )  # fmt: skip

    assert report["written"] == {SAME: rows, SHIFTED: rows}
    same, shifted = report["drift"][SAME], report["drift"][SHIFTED]
    assert (same["outcome"], same["moved"]) == ("no_drift", [])
    assert shifted["outcome"] == "drift" and moved in shifted["moved"], shifted
    for ds in (SAME, SHIFTED):
        on_disk = json.loads((monitoring_root / f"ds={ds}" / "drift.json").read_text())
        assert on_disk["outcome"] == report["drift"][ds]["outcome"] and on_disk["model"] == uri
        assert on_disk["rows"] == rows and on_disk["run_id"] == run_id
        assert {t["name"] for t in on_disk["tests"]} == {*workflow.monitoring.statistics, "prediction"}
        assert (monitoring_root / f"ds={ds}" / "drift.png").read_bytes()[:8] == PNG
    client = MlflowClient()
    logged = {a.path for a in client.list_artifacts(run_id, f"monitoring/drift/ds={SHIFTED}")}
    assert logged == {f"monitoring/drift/ds={SHIFTED}/drift.json", f"monitoring/drift/ds={SHIFTED}/drift.png"}
    history = {m.step: m.value for m in client.get_metric_history(run_id, "drift_detected")}
    assert history == {monitoring.day_step(SAME): 0.0, monitoring.day_step(SHIFTED): 1.0}


def test_a_version_without_a_reference_scores_and_says_so(spark, tmp_path, mlflow_experiment):
    """A version registered before profiles existed: its days are scored as always, and
    reported as unchecked (``no_reference``), not as drift."""
    curated = tmp_path / "curated"
    write_day(curated, DIABETES, SAME, 50)
    _, uri = registered_version(mlflow_experiment, DIABETES, "unprofiled_diabetes")
    monitoring_root = tmp_path / "monitoring"
    report = score_partitions(
        spark, pin_model(uri), DIABETES, str(curated), str(tmp_path / "scored"), SAME, SAME,
        monitoring_root=str(monitoring_root),
    )  # fmt: skip
    assert report["written"] == {SAME: 50}
    assert report["drift"][SAME]["outcome"] == monitoring.NO_REFERENCE
    assert json.loads((monitoring_root / f"ds={SAME}" / "drift.json").read_text())["outcome"] == "no_reference"


def test_without_a_monitoring_root_nothing_is_checked(spark, tmp_path, mlflow_experiment):
    curated = tmp_path / "curated"
    write_day(curated, DIABETES, SAME, 20)
    _, uri = registered_version(mlflow_experiment, DIABETES, "unwatched_diabetes")
    report = score_partitions(spark, pin_model(uri), DIABETES, str(curated), str(tmp_path / "scored"), SAME, SAME)
    assert "drift" not in report and report["written"] == {SAME: 20}


@pytest.mark.parametrize("workflow", [DIABETES, MNIST], ids=["diabetes", "mnist"])
def test_the_challenger_scores_the_same_rows_in_the_shadow_of_the_champion(
    spark, tmp_path, mlflow_experiment, workflow
):
    """Two versions of different weights: the challenger's predictions of the day are
    compared with the pinned version's row by row (agreement) and as distributions (gap),
    logged on the challenger's run; the predictions table holds the pinned version's only.
    When the challenger is the pinned version, nothing is compared."""
    import pyarrow.dataset as pads
    from mlflow import MlflowClient

    from spark_jobs import monitoring as watch

    name = f"shadowed_{workflow.name}"
    curated = tmp_path / "curated"
    write_day(curated, workflow, SAME, 300)
    _, champion = registered_version(mlflow_experiment, workflow, name, seed=0)
    challenger_run, challenger = registered_version(mlflow_experiment, workflow, name, seed=1)
    client = MlflowClient()
    client.set_registered_model_alias(name, "challenger", challenger.rsplit("/", 1)[1])
    scored, monitoring_root = tmp_path / "scored", tmp_path / "monitoring"

    report = score_partitions(
        spark, pin_model(champion), workflow, str(curated), str(scored), SAME, SAME,
        monitoring_root=str(monitoring_root), shadow_alias="challenger",
    )  # fmt: skip

    day = report["shadow"][SAME]
    assert (day["model"], day["shadow"], day["rows"], day["compared_rows"]) == (champion, challenger, 300, 300)
    assert 0 <= day["agreement"] < 1 and 0 < day["distribution_gap"] <= 1, day
    assert json.loads((monitoring_root / f"ds={SAME}" / "shadow.json").read_text()) == day
    written = pads.dataset(str(scored), format="parquet").to_table()
    assert "shadow_prediction" not in written.column_names and set(written.column("model_version").to_pylist()) == {
        champion.rsplit("/", 1)[1]
    }
    (agreement,) = client.get_metric_history(challenger_run, "shadow_agreement")
    assert agreement.step == watch.day_step(SAME) and agreement.value == pytest.approx(day["agreement"])

    client.set_registered_model_alias(name, "challenger", champion.rsplit("/", 1)[1])
    report = score_partitions(
        spark, pin_model(champion), workflow, str(curated), str(scored), SAME, SAME,
        monitoring_root=str(monitoring_root), shadow_alias="challenger",
    )  # fmt: skip
    assert report["shadow"] == {} and report["written"] == {SAME: 300}


@pytest.mark.parametrize(
    ("workflow", "scored", "shadow", "expected"),
    [
        (MNIST, [1, 1, 2, 3], [1, 1, 2, 3], {"agreement": 1.0, "distribution_gap": 0.0}),
        (MNIST, [1, 1, 2, 3], [1, 2, 2, 4], {"agreement": 0.5, "distribution_gap": 0.5}),
        (
            DIABETES,
            [100.0, 150.0],
            [101.0, 160.0],
            {"agreement": 0.5, "distribution_gap": 0.5, "mean_abs_difference": 5.5},
        ),
    ],
)
def test_agreement_of_two_versions_predictions(workflow, scored, shadow, expected):
    from spark_jobs import monitoring as watch

    measured = watch.agreement(np.asarray(scored), np.asarray(shadow), workflow)
    assert measured == pytest.approx(expected)
