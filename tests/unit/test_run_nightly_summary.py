"""What ``make demo`` (scripts/run_nightly.py) says at the end of a nightly, read back from a
real registry store (SQLite, in this process): the champion's summary when the nightly's
version was promoted; otherwise one line naming the version, its metric, the promotion
rule's reason and what scored the day, and no traceback."""

from __future__ import annotations

import json
import types

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import run_nightly

DS = "2026-12-02"
MODEL = "mnist_cnn"


@pytest.fixture
def registry(tmp_path):
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'registry.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.create_registered_model(MODEL)
    stack = types.SimpleNamespace(tracking_uri=uri, storage_root=tmp_path / "storage")
    return client, stack


def version(client, end_ds: str, accuracy: float, status: str, reason: str) -> str:
    tags = {
        "data_end_ds": end_ds,
        "holdout_metric": "accuracy",
        "holdout_accuracy": f"{accuracy:.6f}",
        "validation_status": status,
        "validation_reason": reason,
        "best_epoch": "6",
    }
    return client.create_model_version(MODEL, source="file:///nowhere/model", tags=tags).version


def scored_by(stack, versions: list[str]) -> None:
    folder = stack.storage_root / "predictions" / "mnist" / f"ds={DS}"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"model_version": [str(v) for v in versions]}), folder / "part-0.parquet")


def test_a_promoted_nightly_is_summarised(registry):
    client, stack = registry
    mine = version(client, DS, 0.97, "passed", "accuracy 0.97 >= floor 0.93; no champion yet")
    client.set_registered_model_alias(MODEL, "champion", mine)
    scored_by(stack, [mine] * 3)
    summary = run_nightly.summarize(stack, "mnist", DS)
    assert summary["model"] == f"models:/{MODEL}/{mine}"
    assert (summary["holdout_accuracy"], summary["best_epoch"], summary["scored_rows"]) == ("0.970000", "6", 3)
    assert summary["drift_check"] == "not checked"
    report = stack.storage_root / "monitoring" / "mnist" / f"ds={DS}" / "drift.json"
    report.parent.mkdir(parents=True)
    report.write_text(json.dumps({"outcome": "drift", "moved": ["mean", "prediction"]}))
    summary = run_nightly.summarize(stack, "mnist", DS)
    assert (summary["drift_check"], summary["drift_report"]) == ("drift: mean, prediction moved", str(report))


def test_a_refused_version_without_a_champion_is_one_line_naming_version_metric_and_reason(registry):
    client, stack = registry
    mine = version(client, DS, 0.165, "failed", "accuracy 0.165 below the floor 0.93")
    with pytest.raises(run_nightly.NotPromoted) as refused:
        run_nightly.summarize(stack, "mnist", DS)
    line = str(refused.value)
    assert line == (
        f"mnist: version {mine} (accuracy 0.165000) was not promoted: accuracy 0.165 below the floor 0.93; "
        f"there is no champion, so ds {DS} was not scored"
    )


def test_a_refused_version_says_the_older_champion_scored_the_day(registry):
    client, stack = registry
    older = version(client, "2026-12-01", 0.96, "passed", "accuracy 0.96 >= floor 0.93")
    client.set_registered_model_alias(MODEL, "champion", older)
    mine = version(client, DS, 0.5, "failed", "accuracy 0.5 below the floor 0.93")
    scored_by(stack, [older] * 2)
    with pytest.raises(
        run_nightly.NotPromoted,
        match=f"version {mine} .*below the floor 0.93; ds {DS} was scored with the older champion, version {older}$",
    ):
        run_nightly.summarize(stack, "mnist", DS)


def test_the_first_job_error_is_found_in_airflows_output(tmp_path):
    log = tmp_path / "nightly.log"
    log.write_text(
        "INFO starting\n[spark] spark_jobs.train.TrainingDiverged: training diverged with no usable epoch "
        "(epoch 1: non-finite loss (train nan, validation nan)); no model was logged\nTraceback ...\n"
    )
    assert run_nightly.first_job_error(log) == (
        "TrainingDiverged: training diverged with no usable epoch (epoch 1: non-finite loss (train nan, "
        "validation nan)); no model was logged"
    )
