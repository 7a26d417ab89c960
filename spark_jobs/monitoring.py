"""What watches a model once it scores: its reference profile and each scored day's drift report.

The statistics are :mod:`spark_jobs.drift`'s; this module moves the data (Spark on the
executors, MLflow and storage on the driver):

- **The reference profile** of a version, written by the register job before its alias can
  move (:func:`reference_profile`, :func:`log_reference`): the declared statistics
  (``[monitoring] statistics``: a tabular layout's columns, a tensor layout's row summaries)
  of every row of the training window, and the candidate's predictions on the held-out rows.
  It is the JSON artifact ``monitoring/reference.json`` of the version's training run: a few
  kilobytes whatever the window's size (quantiles, not rows).
- **The drift report** of each scored day, made by the score job after it wrote the day
  (:func:`check_days`): the same statistics of the day's rows, computed while they were
  scored and gathered with a sample of their predictions in the same pass
  (:func:`scoring_sample`: no second pass over the rows, nothing cached), against the pinned
  version's reference, with the workflow's false-alarm rate.
  ``drift.json`` and ``drift.png`` (the most-shifted distributions against the reference)
  go to ``<monitoring root>/ds=<day>/``, and the same files, with metrics per day
  (``drift_detected``, ``drift_statistics_moved``, ``drift_rows``, step ``yyyymmdd``), to the
  version's training run under ``monitoring/drift/ds=<day>/``.

- **Shadow scoring** (``[monitoring] shadow``): the ``challenger`` scores the same rows in
  the same pass as the pinned version (:func:`shadow_of`, :func:`compare_shadow`); their
  agreement and the gap between their prediction distributions go to ``shadow.json``
  beside the drift report and to the challenger's run. Nothing of it is written to the
  predictions.

A version registered before profiles existed has none: its days get a report with outcome
``no_reference`` and scoring goes on.

Statistics are computed on at most ``MAX_ROWS`` rows per day (and per window): of a larger
scored day the rows of smallest ``row_id`` (a content hash: :mod:`spark_jobs.row_sample`), of
a larger window a seeded sample; the tests are calibrated for the sizes they get.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ml_contract.layout import PARTITION_COL
from spark_jobs import drift, row_sample
from spark_jobs.features import FEATURES_COL, decode
from spark_jobs.inference import PREDICTION_COL, SHADOW_PREDICTION_COL, PinnedModel, RowSampling, RowStatistics
from spark_jobs.storage import copy_from_local, write_json

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    import pyarrow as pa
    from pyspark.sql import DataFrame

    from spark_jobs.workflows import Workflow

log = logging.getLogger(__name__)

REFERENCE_ARTIFACT = "monitoring/reference.json"
DRIFT_ARTIFACT_DIR = "monitoring/drift"
REPORT_FILE, PLOT_FILE = "drift.json", "drift.png"
# The statistic name of the model's predictions in a profile and a report.
PREDICTIONS = PREDICTION_COL
MAX_ROWS = 200_000
SAMPLE_SEED = 11
NO_REFERENCE = "no_reference"
STATISTIC_PREFIX = "_drift_"


def row_statistics(features: np.ndarray, workflow: Workflow) -> dict[str, np.ndarray]:
    """The declared statistics of each row of ``features`` ``[n, *shape]``."""
    names = workflow.monitoring.statistics
    if workflow.features.layout == "tabular":
        columns = drift.tabular_columns(features, workflow.features.raw_fields)
        return {name: columns[name] for name in names}
    return drift.row_summaries(features, names)


def _statistics_of_rows(df: DataFrame, workflow: Workflow) -> DataFrame:
    """One double column per declared statistic of each of ``df``'s rows (executors)."""
    from pyspark.sql import types as T

    names = list(workflow.monitoring.statistics)
    schema = T.StructType([T.StructField(n, T.DoubleType(), nullable=False) for n in names])

    def statistics(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        for batch in batches:
            values = row_statistics(decode(batch.column(FEATURES_COL), workflow.features), workflow)
            yield pa.RecordBatch.from_arrays([pa.array(values[n], pa.float64()) for n in names], names=names)

    return df.select(FEATURES_COL).mapInArrow(statistics, schema)


def reference_profile(window_df: DataFrame, predicted_df: DataFrame, workflow: Workflow) -> drift.ReferenceProfile:
    """The reference of a candidate: the declared statistics of the training window's rows
    (``window_df``: curated rows, ``features`` and ``ds``) and its predictions on the held-out
    rows (``predicted_df``)."""
    names = list(workflow.monitoring.statistics)
    rows = window_df.count()
    sample = window_df if rows <= MAX_ROWS else window_df.sample(fraction=MAX_ROWS / rows, seed=SAMPLE_SEED)
    table = _statistics_of_rows(sample, workflow).toArrow()
    values = {name: table.column(name).to_numpy() for name in names}
    predictions = predicted_df.select(PREDICTION_COL)
    held_out = predictions.count()
    if held_out > MAX_ROWS:
        predictions = predictions.sample(fraction=MAX_ROWS / held_out, seed=SAMPLE_SEED)
    values[PREDICTIONS] = predictions.toArrow().column(PREDICTION_COL).to_numpy()
    return drift.build_reference(values, categorical=_categorical(workflow))


def _categorical(workflow: Workflow) -> dict[str, int]:
    """A classifier's predictions are classes: compared as counts, not as a distribution of values."""
    return {PREDICTIONS: workflow.output.classes} if workflow.output.is_classifier else {}


def log_reference(client, run_id: str, profile: drift.ReferenceProfile) -> None:
    """The profile as the training run's artifact ``monitoring/reference.json``."""
    client.log_dict(run_id, profile.to_json(), REFERENCE_ARTIFACT)


def load_reference(run_id: str) -> drift.ReferenceProfile | None:
    """The reference profile of the version trained by ``run_id``; None when it has none."""
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
        payload = mlflow.artifacts.load_dict(f"runs:/{run_id}/{REFERENCE_ARTIFACT}")
    except (MlflowException, OSError) as err:
        log.warning("run %s has no reference profile (%s): its days are not checked for drift", run_id, err)
        return None
    return drift.ReferenceProfile.from_json(payload)


def day_step(ds: str) -> int:
    """A day as an MLflow metric step: ``2026-12-04`` -> ``20261204``."""
    return int(ds.replace("-", ""))


def day_timestamp_ms(ds: str) -> int:
    """A day's start (UTC) as an MLflow metric timestamp: the day a metric is about, not when it was logged."""
    return int(dt.datetime.fromisoformat(ds).replace(tzinfo=dt.UTC).timestamp() * 1000)


def scoring_statistics(workflow: Workflow) -> RowStatistics:
    """The declared statistics as the values the score job computes from the batches it
    scores (one pass over the features, :func:`spark_jobs.inference.with_predictions`),
    named ``_drift_<statistic>``: no clash with the sample's own names (``row_id``,
    ``prediction``, ``shadow_prediction``)."""
    names = list(workflow.monitoring.statistics)

    def compute(features: np.ndarray) -> dict[str, np.ndarray]:
        values = row_statistics(features, workflow)
        return {f"{STATISTIC_PREFIX}{name}": np.asarray(values[name], dtype=np.float64) for name in names}

    return compute


def scoring_sample(spark, workflow: Workflow, *, watched: bool) -> RowSampling:
    """What the score job gathers while it scores, for the drift check (``watched``: the
    declared statistics) and shadow scoring (the predictions of both): at most
    :data:`MAX_ROWS` rows a day (:func:`day_samples` once the job is done)."""
    statistics = scoring_statistics(workflow) if watched else None
    return RowSampling(row_sample.accumulator(spark.sparkContext), MAX_ROWS, statistics)


def day_samples(sampling: RowSampling) -> dict[str, dict[str, np.ndarray]]:
    """Per scored day, the sampled rows' ``prediction``, ``shadow_prediction`` and
    statistics (by the statistic's own name): read once the scoring job is done."""
    days = row_sample.day_samples(sampling.accumulator.value, sampling.max_rows)
    return {ds: {name.removeprefix(STATISTIC_PREFIX): v for name, v in day.items()} for ds, day in days.items()}


@dataclass(frozen=True)
class CheckInputs:
    """What the check of a version's days needs besides the days' rows: the version's
    training run, its experiment and its reference profile (None: it has none)."""

    run_id: str
    experiment_id: str
    reference: drift.ReferenceProfile | None


def prepare_check(model: PinnedModel) -> CheckInputs:
    """Read from MLflow what the check of ``model``'s days needs and import the libraries of
    the check and its plot: no Spark, so the score job runs it on a thread of its driver
    while the executors score (:func:`prepare_in_background`) instead of after."""
    from mlflow import MlflowClient

    client = MlflowClient()
    run_id = str(client.get_model_version(model.name, model.version).run_id)
    experiment_id = client.get_run(run_id).info.experiment_id
    reference = load_reference(run_id)
    drift.load_libraries()
    return CheckInputs(run_id, experiment_id, reference)


def prepare_in_background(model: PinnedModel) -> Future[CheckInputs]:
    """:func:`prepare_check` on a thread of its own; its result (or error) when asked for."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drift-check-inputs")
    try:
        return pool.submit(prepare_check, model)
    finally:
        pool.shutdown(wait=False)  # the thread ends with its one task


def check_days(
    spark,
    samples: Mapping[str, Mapping[str, np.ndarray]],
    counts: Mapping[str, int],
    workflow: Workflow,
    *,
    model_name: str,
    model_version: str,
    inputs: CheckInputs,
    monitoring_root: str,
) -> dict[str, dict[str, Any]]:
    """Each scored day (``counts``: rows per day) against the version's reference: its report
    written to storage and to the version's run. ``samples``: per day, the sampled rows'
    ``prediction`` and statistics (:func:`day_samples`); ``inputs``: the version's run and
    reference (:func:`prepare_check`). Returns ``{ds: summary}``."""
    from mlflow import MlflowClient

    run_id, experiment_id, reference = inputs.run_id, inputs.experiment_id, inputs.reference
    names = [*workflow.monitoring.statistics, PREDICTIONS]
    days: dict[str, dict[str, np.ndarray]] = {ds: {} for ds in counts if counts[ds]}
    if reference is not None:
        for ds in days:
            day = samples.get(ds, {})
            days[ds] = {name: day.get(name, np.zeros(0)) for name in names}
    summaries = {}
    for ds, day in sorted(days.items()):
        folder = f"{monitoring_root.rstrip('/')}/{PARTITION_COL}={ds}"
        artifact_dir = f"{DRIFT_ARTIFACT_DIR}/{PARTITION_COL}={ds}"
        summary: dict[str, Any] = {
            "ds": ds,
            "model": f"models:/{model_name}/{model_version}",
            "run_id": run_id,
            "experiment_id": experiment_id,
            "rows": counts[ds],
            "report": f"{folder}/{REPORT_FILE}",
        }
        report = None
        if reference is None:
            summary.update(outcome=NO_REFERENCE, moved=[], artifact=f"{artifact_dir}/{REPORT_FILE}")
            payload = dict(summary)
        else:
            report = drift.compare(reference, day, false_alarm_rate=workflow.monitoring.false_alarm_rate)
            summary.update(outcome=report.outcome, moved=list(report.moved), artifact=f"{artifact_dir}/{PLOT_FILE}")
            payload = {**report.to_json(), **summary}
        write_json(spark, f"{folder}/{REPORT_FILE}", payload)
        MlflowClient().log_dict(run_id, payload, f"{artifact_dir}/{REPORT_FILE}")
        _log_metrics(run_id, ds, payload)
        if report is not None and reference is not None:
            with tempfile.TemporaryDirectory() as tmp:
                plot = os.path.join(tmp, PLOT_FILE)
                drift.plot_report(report, reference, day, plot, title=f"{ds} scored by {summary['model']}")
                MlflowClient().log_artifact(run_id, plot, artifact_dir)
                copy_from_local(spark, plot, f"{folder}/{PLOT_FILE}")
        moved = f" ({', '.join(summary['moved'])} moved)" if summary["moved"] else ""
        log.info("drift check of %s with %s: %s%s", ds, summary["model"], summary["outcome"], moved)
        summaries[ds] = summary
    return summaries


def _log_metrics(run_id: str, ds: str, payload: dict[str, Any]) -> None:
    """The day's outcome as the version's run metrics, at step ``yyyymmdd`` and the day's time."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    step, timestamp = day_step(ds), day_timestamp_ms(ds)
    values = {"drift_rows": float(payload["rows"])}
    if payload["outcome"] in (drift.DRIFT, drift.NO_DRIFT):
        values["drift_detected"] = float(payload["outcome"] == drift.DRIFT)
        values["drift_statistics_moved"] = float(len(payload["moved"]))
    MlflowClient().log_batch(run_id, metrics=[Metric(k, v, timestamp, step) for k, v in values.items()])


# -- shadow scoring ------------------------------------------------------------------------

SHADOW_FILE = "shadow.json"
SHADOW_ARTIFACT_DIR = "monitoring/shadow"


def shadow_of(model: PinnedModel, alias: str) -> PinnedModel | None:
    """The version ``alias`` names on ``model``'s registered model, when it is another one
    than ``model`` (a challenger that became champion has nothing to be compared with)."""
    from mlflow.exceptions import MlflowException

    from spark_jobs.inference import pin_model

    try:
        shadow = pin_model(f"models:/{model.name}@{alias}")
    except MlflowException as err:
        log.info("no %s of %s to score beside version %s (%s)", alias, model.name, model.version, err)
        return None
    if shadow.version == model.version:
        log.info("the %s of %s is the scored version %s: no shadow", alias, model.name, model.version)
        return None
    return shadow


def agreement(scored: np.ndarray, shadow: np.ndarray, workflow: Workflow) -> dict[str, float]:
    """How two versions' predictions of the same rows compare: the share of rows they agree
    on (the same class; a value within the promotion tolerance) and the gap between their
    prediction distributions (total variation between the class shares; the KS distance
    between the values), with the mean absolute difference of a regression."""
    if len(scored) == 0:
        return {"agreement": math.nan, "distribution_gap": math.nan}
    if workflow.output.is_classifier:
        classes = workflow.output.classes
        shares = [np.bincount(p.astype(np.int64), minlength=classes)[:classes] / len(p) for p in (scored, shadow)]
        return {
            "agreement": float(np.mean(scored == shadow)),
            "distribution_gap": float(0.5 * np.abs(shares[0] - shares[1]).sum()),
        }
    difference = np.abs(scored.astype(np.float64) - shadow.astype(np.float64))
    return {
        "agreement": float(np.mean(difference <= workflow.promotion.tolerance)),
        "distribution_gap": drift.ks_distance(scored, shadow),
        "mean_abs_difference": float(difference.mean()),
    }


def compare_shadow(
    spark,
    samples: Mapping[str, Mapping[str, np.ndarray]],
    counts: Mapping[str, int],
    workflow: Workflow,
    *,
    scored: PinnedModel,
    shadow: PinnedModel,
    monitoring_root: str,
) -> dict[str, dict[str, Any]]:
    """Each day's agreement of ``shadow`` with ``scored`` (``samples``: per day, the sampled
    rows' ``prediction`` and ``shadow_prediction``, :func:`day_samples`): ``shadow.json``
    beside the day's drift report, and on the shadow's run (artifact and metrics
    ``shadow_agreement``, ``shadow_distribution_gap`` at step ``yyyymmdd``): evidence for or
    against promoting it."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    client = MlflowClient()
    run_id = str(client.get_model_version(shadow.name, shadow.version).run_id)
    summaries = {}
    for ds in sorted(ds for ds, n in counts.items() if n):
        day = samples.get(ds, {})
        predictions, shadowed = (day.get(name, np.zeros(0)) for name in (PREDICTION_COL, SHADOW_PREDICTION_COL))
        summary: dict[str, Any] = {
            "ds": ds,
            "model": scored.uri,
            "shadow": shadow.uri,
            "rows": counts[ds],
            "compared_rows": len(predictions),
            **agreement(predictions, shadowed, workflow),
        }
        write_json(spark, f"{monitoring_root.rstrip('/')}/{PARTITION_COL}={ds}/{SHADOW_FILE}", summary)
        client.log_dict(run_id, summary, f"{SHADOW_ARTIFACT_DIR}/{PARTITION_COL}={ds}/{SHADOW_FILE}")
        step, timestamp = day_step(ds), day_timestamp_ms(ds)
        metrics = [
            Metric(f"shadow_{key}", float(summary[key]), timestamp, step)
            for key in ("agreement", "distribution_gap", "mean_abs_difference")
            if key in summary and math.isfinite(summary[key])
        ]
        client.log_batch(run_id, metrics=metrics)
        log.info(
            "shadow %s beside %s on %s: agreement %.4f, distribution gap %.4f",
            shadow.uri,
            scored.uri,
            ds,
            summary["agreement"],
            summary["distribution_gap"],
        )
        summaries[ds] = summary
    return summaries
