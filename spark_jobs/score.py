"""Score: batch predictions for a curated partition with one pinned registry model version.

Works from Airflow (the gate hands over ``models:/<name>/<version>``) and standalone like
the seed's ``score.py``::

    spark-submit spark_jobs/entrypoints/score.py --model models:/mnist_cnn@champion \
        --input-data var/data/curated/mnist --ds 2026-11-28 --scored-data var/data/predictions/mnist

An alias is resolved once, on the driver, before any executor loads the model. The
workflow (``--workflow``, else the one the model was logged for: its MLmodel metadata
``workflow``) says what the curated rows hold and which output columns a scored row gets:
``row_id``, ``prediction`` (and ``prob_<c>`` for a classifier), ``model_name``,
``model_version``, ``ds``.

With ``--monitoring-data`` (and ``[monitoring] drift`` on, the default), each day written is
then checked for drift against the pinned version's reference profile, and its report
written there (``ds=<day>/drift.json``, ``drift.png``) and to the version's MLflow run
(:mod:`spark_jobs.monitoring`); the job's report lists each day's outcome. With
``--shadow-alias challenger`` too, the challenger (when it is another version) scores the
same rows in the same pass, and its agreement with the pinned version is reported
(``ds=<day>/shadow.json`` and the challenger's run); its predictions are never written.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ml_contract.layout import PARTITION_COL, days_between
from spark_jobs import monitoring, workflows
from spark_jobs.features import FEATURES_COL
from spark_jobs.inference import (
    MODEL_NAME_COL,
    MODEL_VERSION_COL,
    WORKFLOW_METADATA_KEY,
    PinnedModel,
    RowSampling,
    pin_model,
    with_predictions,
)
from spark_jobs.partitions import add_days_arguments, read_partitions, replace_partitions, resolve_days
from spark_jobs.schema import ROW_ID_COL
from spark_jobs.session import build_spark_session, configure_job_logging

log = logging.getLogger(__name__)


def prediction_columns(workflow: workflows.Workflow) -> list[str]:
    """The predictions table's columns, in order (``ds`` last: the partition column)."""
    return [ROW_ID_COL, *workflow.output.columns, MODEL_NAME_COL, MODEL_VERSION_COL, PARTITION_COL]


def score_partition(
    curated_df: DataFrame,
    model: PinnedModel,
    workflow: workflows.Workflow,
    sampling: RowSampling | None = None,
    shadow: PinnedModel | None = None,
) -> DataFrame:
    """Predictions in the output schema; every row names the model version that made it.
    With ``sampling``, a sample of the rows with their statistics (for the drift check) is
    gathered in the same pass, and with ``shadow`` that version's prediction of them
    (never written)."""
    selected = curated_df.select(ROW_ID_COL, FEATURES_COL, PARTITION_COL)
    return (
        with_predictions(selected, model.uri, workflow, shadow.uri if shadow else None, sampling)
        .withColumn(MODEL_NAME_COL, F.lit(model.name))
        .withColumn(MODEL_VERSION_COL, F.lit(model.version))
        .select(*prediction_columns(workflow))
    )


def workflow_of(model: PinnedModel, name: str | None) -> workflows.Workflow:
    """The workflow ``name``, else the one ``model`` was logged for (its MLmodel metadata)."""
    if name is not None:
        return workflows.load(name)
    from mlflow.models import get_model_info

    logged_for = (get_model_info(model.uri).metadata or {}).get(WORKFLOW_METADATA_KEY)
    if not logged_for:
        raise ValueError(
            f"model {model.uri} names no workflow (no {WORKFLOW_METADATA_KEY!r} in its MLmodel metadata): "
            f"pass --workflow, one of {', '.join(workflows.available())}"
        )
    return workflows.load(logged_for)


def score_partitions(
    spark,
    model: PinnedModel,
    workflow: workflows.Workflow,
    input_root: str,
    scored_root: str,
    start_ds: str,
    end_ds: str,
    monitoring_root: str | None = None,
    shadow_alias: str | None = None,
) -> dict:
    """Score every curated partition in ``start_ds..end_ds`` with one model, in one job.

    With ``monitoring_root``, each day written is checked for drift, and with
    ``shadow_alias`` the version it names (another than ``model``) is scored beside it and
    their agreement reported (:mod:`spark_jobs.monitoring`).

    All partitions are committed together by ``replace_partitions`` (one commit, so readers
    see every new day at once), each replacing its previous version; days without a curated
    partition are reported, the others still written. Returns the per-partition counts read back from the output.
    """
    watched = bool(monitoring_root) and workflow.monitoring.drift
    # The check's inputs from MLflow and its libraries, read while the executors score.
    check_inputs = monitoring.prepare_in_background(model) if watched else None
    curated_df = read_partitions(spark, input_root, start_ds, end_ds)
    rows_in = {r[PARTITION_COL]: r["count"] for r in curated_df.groupBy(PARTITION_COL).count().collect()}
    expected = days_between(start_ds, end_ds)
    missing = [ds for ds in expected if ds not in rows_in]
    rows_out: dict[str, int] = {}
    shadow = monitoring.shadow_of(model, shadow_alias) if monitoring_root and shadow_alias else None
    drift: dict[str, dict] = {}
    shadowed: dict[str, dict] = {}
    if rows_in:
        log.info("scoring %d rows in %d partitions with %s", sum(rows_in.values()), len(rows_in), model.uri)
        # The drift check's and the shadow's rows, gathered while the rows are scored.
        sampling = monitoring.scoring_sample(spark, workflow, watched=watched) if watched or shadow else None
        replace_partitions(score_partition(curated_df, model, workflow, sampling, shadow), scored_root)
        samples = monitoring.day_samples(sampling) if sampling is not None else {}
        read_back = read_partitions(spark, scored_root, start_ds, end_ds)
        rows_out = {r[PARTITION_COL]: r["count"] for r in read_back.groupBy(PARTITION_COL).count().collect()}
        if check_inputs is not None:
            drift = monitoring.check_days(
                spark,
                samples,
                rows_out,
                workflow,
                model_name=model.name,
                model_version=model.version,
                inputs=check_inputs.result(),
                monitoring_root=str(monitoring_root),
            )
        if shadow is not None:
            shadowed = monitoring.compare_shadow(
                spark, samples, rows_out, workflow, scored=model, shadow=shadow, monitoring_root=str(monitoring_root)
            )
    report = {
        "model": model.uri,
        "workflow": workflow.name,
        "written": {ds: rows_out.get(ds, 0) for ds in sorted(rows_in)},
        "rows_in": dict(sorted(rows_in.items())),
        "missing_curated": missing,
    }
    if watched:
        report["drift"] = drift
    if shadow_alias and monitoring_root:
        report["shadow"] = shadowed
    return report


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="models:/<name>/<version> or models:/<name>@<alias>")
    parser.add_argument(
        "--workflow",
        help="workflow of the curated data and the model (spark_jobs/workflows/<name>.toml); "
        "default: the model's MLmodel metadata 'workflow'",
    )
    parser.add_argument("--input-data", required=True, help="curated dataset root")
    parser.add_argument("--scored-data", required=True, help="predictions dataset root")
    parser.add_argument(
        "--monitoring-data",
        help="drift reports root: each scored day checked against the version's reference (default: no check)",
    )
    parser.add_argument(
        "--shadow-alias",
        help="with --monitoring-data: the version this alias names (e.g. challenger) scored beside the model, "
        "its agreement reported; nothing of it is written to the predictions",
    )
    add_days_arguments(parser)
    args = parser.parse_args(argv)
    resolve_days(parser, args)
    if args.workflow is not None:
        try:
            workflows.load(args.workflow)
        except workflows.WorkflowError as err:
            parser.error(str(err))
    return args


def main(argv: list[str] | None = None) -> None:
    configure_job_logging()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    spark = build_spark_session(f"score {args.start_ds}..{args.end_ds}")
    try:
        model = pin_model(args.model)
        workflow = workflow_of(model, args.workflow)
        report = score_partitions(
            spark,
            model,
            workflow,
            args.input_data,
            args.scored_data,
            args.start_ds,
            args.end_ds,
            monitoring_root=args.monitoring_data,
            shadow_alias=args.shadow_alias,
        )
    finally:
        spark.stop()
    log.info("score report: %s", json.dumps(report))
    short = [ds for ds, n in report["written"].items() if n != report["rows_in"][ds]]
    if report["missing_curated"] or short:
        raise RuntimeError(
            f"partitions written: {sorted(report['written'])}; "
            f"no curated partition for: {report['missing_curated']}; row count mismatch in: {short}"
        )
