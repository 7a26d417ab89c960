"""Label feedback: the realised metric of scored days, once their true labels arrive.

A labels drop is CSV under ``<labels root>/ds=<day>/``: a header ``row_id,<label name>``
(the workflow's label, e.g. ``row_id,progression``), then one scored row's id (the
``row_id`` of the predictions table) and its true label per line::

    spark-submit spark_jobs/entrypoints/feedback.py --workflow diabetes \\
        --labels-data var/data/labels/diabetes --scored-data var/data/predictions/diabetes \\
        --monitoring-data var/data/monitoring/diabetes --ds 2026-11-28

For each day, every line is counted: a line that is not a row id and a label in the
workflow's range (or names a row twice) is rejected with its reason, and the rejected lines
go to ``<monitoring root>/ds=<day>/labels_rejected/`` (JSON lines, with the reason); a valid
label naming no row scored that day is counted as unmatched. The matched rows give the
workflow's metric per model version that scored them (accuracy, RMSE), compared with the
version's held-out metric (its ``holdout_<metric>`` tag): a version whose realised metric is
worse by more than ``[monitoring] tolerance``, on at least ``[monitoring] min_labels`` rows,
**degraded** the day. The day's report, ``labels.json``, goes beside its drift report and to
each version's run (``monitoring/labels/ds=<day>/``), with metrics ``realised_<metric>`` and
``labelled_rows`` at step ``yyyymmdd``. The label-feedback DAG's check reads it; a degraded
day is evidence for a retraining.

A day without a labels drop, or without predictions, is listed and fails the job after the
other days were judged.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F
from pyspark.sql.window import Window

from ml_contract.layout import PARTITION_COL, days_between
from spark_jobs import monitoring, workflows
from spark_jobs.inference import MODEL_NAME_COL, MODEL_VERSION_COL, PREDICTION_COL
from spark_jobs.partitions import add_days_arguments, read_partitions, resolve_days
from spark_jobs.schema import LABEL_COL, ROW_ID_COL
from spark_jobs.session import build_spark_session, configure_job_logging
from spark_jobs.storage import path_exists, write_json

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from spark_jobs.workflows import Workflow

log = logging.getLogger(__name__)

REPORT_FILE = "labels.json"
REJECTED_DIR = "labels_rejected"
LABELS_ARTIFACT_DIR = "monitoring/labels"
DEGRADED, WITHIN, TOO_FEW = "degraded", "within_tolerance", "too_few_labels"
REASON_COL, LINE_COL = "reason", "line"
EXAMPLES = 5


def header(workflow: Workflow) -> str:
    return f"{ROW_ID_COL},{workflow.label.name}"


def _reason(workflow: Workflow) -> Column:
    """Why a label line is refused (null: it is a row id and a label in the workflow's range)."""
    fields = F.split(F.col(LINE_COL), ",", -1)
    row_id = F.expr(f"try_cast(trim(get({LINE_COL}_fields, 0)) as bigint)")
    label = F.expr(f"try_cast(trim(get({LINE_COL}_fields, 1)) as double)")
    low, high = workflow.label.min, workflow.label.max
    reason = (
        F.when(F.size(fields) != 2, F.lit(f"expected 2 fields: {header(workflow)}"))
        .when(row_id.isNull(), F.lit(f"{ROW_ID_COL} is not an integer"))
        .when(label.isNull() | F.isnan(label), F.lit(f"{workflow.label.name} is not a number"))
        .when((label < low) | (label > high), F.lit(f"{workflow.label.name} is outside {low:g}..{high:g}"))
    )
    if workflow.output.is_classifier:
        reason = reason.when(label != F.floor(label), F.lit(f"{workflow.label.name} is not a class"))
    return reason


def parse_labels(lines: DataFrame, workflow: Workflow) -> DataFrame:
    """Each data line of a labels drop (``value``) as ``row_id``, ``label`` and ``reason``
    (null when valid); blank lines and the header are dropped, a row id that two valid lines
    label is refused on both (which is true cannot be told)."""
    text = F.trim(F.regexp_replace(F.col("value"), "^\ufeff", ""))
    data = lines.select(text.alias(LINE_COL)).filter((F.col(LINE_COL) != "") & (F.col(LINE_COL) != header(workflow)))
    data = data.withColumn(f"{LINE_COL}_fields", F.split(F.col(LINE_COL), ",", -1))
    parsed = data.select(
        F.col(LINE_COL),
        F.expr(f"try_cast(trim(get({LINE_COL}_fields, 0)) as bigint)").alias(ROW_ID_COL),
        F.expr(f"try_cast(trim(get({LINE_COL}_fields, 1)) as double)").alias(LABEL_COL),
        _reason(workflow).alias(REASON_COL),
    )
    valid = F.col(REASON_COL).isNull()
    repeats = F.sum(valid.cast("int")).over(Window.partitionBy(ROW_ID_COL))
    return parsed.withColumn(
        REASON_COL,
        F.when(valid & (repeats > 1), F.lit(f"{ROW_ID_COL} labelled more than once")).otherwise(F.col(REASON_COL)),
    )


def realised(matched: DataFrame, workflow: Workflow) -> DataFrame:
    """The workflow's metric of the matched rows (``prediction``, ``label``) per model version."""
    prediction, label = F.col(PREDICTION_COL).cast("double"), F.col(LABEL_COL)
    value = (
        F.avg((prediction == label).cast("double"))
        if workflow.metric.name == "accuracy"
        else F.sqrt(F.avg((prediction - label) * (prediction - label)))
    )
    return matched.groupBy(MODEL_NAME_COL, MODEL_VERSION_COL).agg(F.count(F.lit(1)).alias("rows"), value.alias("value"))


def judge(value: float, holdout: float | None, rows: int, workflow: Workflow) -> str:
    """``degraded`` when ``value`` is worse than ``holdout`` by more than the tolerance, on
    at least ``min_labels`` rows; ``too_few_labels`` below that; else ``within_tolerance``."""
    watch = workflow.monitoring
    if rows < watch.min_labels:
        return TOO_FEW
    if holdout is None or math.isnan(holdout):
        return WITHIN
    worse = holdout - value if workflow.metric.direction == "max" else value - holdout
    return DEGRADED if worse > watch.tolerance else WITHIN


def _holdout(client, name: str, version: str, metric: str) -> tuple[float | None, str]:
    """The version's held-out metric (its ``holdout_<metric>`` tag) and its training run."""
    found = client.get_model_version(name, version)
    tag = (found.tags or {}).get(f"holdout_{metric}")
    return (float(tag) if tag is not None else None), str(found.run_id)


def judge_day(
    spark: SparkSession, workflow: Workflow, ds: str, labels_root: str, scored_root: str, monitoring_root: str
) -> dict[str, Any]:
    """One day's labels against what was scored: its report, written to storage and to the
    versions' runs."""
    from mlflow import MlflowClient

    folder = f"{monitoring_root.rstrip('/')}/{PARTITION_COL}={ds}"
    labels = parse_labels(spark.read.text(f"{labels_root.rstrip('/')}/{PARTITION_COL}={ds}"), workflow).cache()
    reasons = {r[REASON_COL]: r["count"] for r in labels.groupBy(REASON_COL).count().collect()}
    valid = reasons.pop(None, 0)
    rejected = labels.filter(F.col(REASON_COL).isNotNull())
    examples = [{"line": r[LINE_COL], "reason": r[REASON_COL]} for r in rejected.limit(EXAMPLES).collect()]
    if reasons:
        rejected.select(LINE_COL, REASON_COL).coalesce(1).write.mode("overwrite").json(f"{folder}/{REJECTED_DIR}")
    scored = read_partitions(spark, scored_root, ds, ds).select(
        ROW_ID_COL, PREDICTION_COL, MODEL_NAME_COL, MODEL_VERSION_COL
    )
    matched = labels.filter(F.col(REASON_COL).isNull()).select(ROW_ID_COL, LABEL_COL).join(scored, ROW_ID_COL)
    client = MlflowClient()
    metric = workflow.metric.name
    versions = []
    for row in realised(matched, workflow).orderBy(MODEL_VERSION_COL).collect():
        holdout, run_id = _holdout(client, row[MODEL_NAME_COL], row[MODEL_VERSION_COL], metric)
        versions.append(
            {
                "model": f"models:/{row[MODEL_NAME_COL]}/{row[MODEL_VERSION_COL]}",
                "run_id": run_id,
                "rows": row["rows"],
                f"realised_{metric}": row["value"],
                f"holdout_{metric}": holdout,
                "outcome": judge(row["value"], holdout, row["rows"], workflow),
            }
        )
    labels.unpersist()
    matched_rows = sum(v["rows"] for v in versions)
    outcomes = {v["outcome"] for v in versions}
    outcome = DEGRADED if DEGRADED in outcomes else WITHIN if WITHIN in outcomes else TOO_FEW
    report = {
        "ds": ds,
        "metric": metric,
        "direction": workflow.metric.direction,
        "tolerance": workflow.monitoring.tolerance,
        "min_labels": workflow.monitoring.min_labels,
        "labels_in": valid + sum(reasons.values()),
        "rejected": sum(reasons.values()),
        "rejected_reasons": dict(sorted(reasons.items())),
        "rejected_examples": examples,
        "unmatched": valid - matched_rows,
        "matched": matched_rows,
        "versions": versions,
        "outcome": outcome,
        "moved": [f"realised {metric}"] if outcome == DEGRADED else [],
        "report": f"{folder}/{REPORT_FILE}",
    }
    if versions:  # where the check's link points: the first version's run
        report.update(
            model=versions[0]["model"],
            run_id=versions[0]["run_id"],
            experiment_id=client.get_run(versions[0]["run_id"]).info.experiment_id,
            artifact=f"{LABELS_ARTIFACT_DIR}/{PARTITION_COL}={ds}/{REPORT_FILE}",
            rows=matched_rows,
        )
    write_json(spark, report["report"], report)
    for version in versions:
        client.log_dict(version["run_id"], report, f"{LABELS_ARTIFACT_DIR}/{PARTITION_COL}={ds}/{REPORT_FILE}")
        step, timestamp = monitoring.day_step(ds), monitoring.day_timestamp_ms(ds)
        client.log_metric(
            version["run_id"], f"realised_{metric}", float(version[f"realised_{metric}"]), timestamp, step
        )
        client.log_metric(version["run_id"], "labelled_rows", float(version["rows"]), timestamp, step)
    log.info(
        "labels of %s: %d in, %d rejected, %d unmatched, %d matched; %s",
        ds,
        report["labels_in"],
        report["rejected"],
        report["unmatched"],
        matched_rows,
        "; ".join(
            f"{v['model']} {metric} {v[f'realised_{metric}']:.4f} on {v['rows']} rows: {v['outcome']}" for v in versions
        )
        or "no scored row labelled",
    )
    return report


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflow", required=True, help="the workflow (spark_jobs/workflows/<name>.toml)")
    parser.add_argument("--labels-data", required=True, help="labels drops root (ds=<day>/ folders of CSV)")
    parser.add_argument("--scored-data", required=True, help="predictions dataset root")
    parser.add_argument("--monitoring-data", required=True, help="where the day's labels.json goes")
    add_days_arguments(parser, "day")
    args = parser.parse_args(argv)
    resolve_days(parser, args)
    try:
        args.workflow = workflows.load(args.workflow)
    except workflows.WorkflowError as err:
        parser.error(str(err))
    return args


def main(argv: list[str] | None = None) -> None:
    configure_job_logging()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    spark = build_spark_session(f"label feedback {args.start_ds}..{args.end_ds}")
    reports, missing = {}, []
    try:
        for ds in days_between(args.start_ds, args.end_ds):
            if not path_exists(spark, f"{args.labels_data.rstrip('/')}/{PARTITION_COL}={ds}"):
                missing.append(f"{ds} (no labels drop)")
                continue
            if not path_exists(spark, f"{args.scored_data.rstrip('/')}/{PARTITION_COL}={ds}"):
                missing.append(f"{ds} (never scored)")
                continue
            reports[ds] = judge_day(spark, args.workflow, ds, args.labels_data, args.scored_data, args.monitoring_data)
    finally:
        spark.stop()
    log.info("label feedback: %s", json.dumps({ds: r["outcome"] for ds, r in reports.items()}))
    if missing:
        raise RuntimeError(f"days judged: {sorted(reports)}; not judged: {', '.join(missing)}")
