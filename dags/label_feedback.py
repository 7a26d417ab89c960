"""
### Label feedback: late labels -> realised metric per day and version -> retraining evidence

One DAG per workflow (`<workflow>_label_feedback`), built by `label_feedback(cfg)`.
Triggered when the true labels of scored days have arrived (REST API, UI form or CLI), for
a range of days:

    airflow dags trigger diabetes_label_feedback --conf '{"start_ds": "2026-11-20", "end_ds": "2026-11-26"}'

A labels drop is CSV under `<storage>/labels/<workflow>/ds=<day>/`: a header
`row_id,<label name>`, then a scored row's `row_id` (from the predictions) and its true
label per line.

1. **realised_metric**: each day's labels joined with its predictions (a Spark job): every
   line counted (rejected with its reason, unmatched, matched), the workflow's metric per
   model version that scored the day, logged on the version's run (`realised_<metric>` at
   step `yyyymmdd`); a version worse than its held-out metric by more than
   `[monitoring] tolerance`, on at least `[monitoring] min_labels` rows, degraded the day.
2. **check_labels**: reads the days' `labels.json` (extra link: the report in MLflow).
3. **signal_degradation**: the retraining evidence Asset event when a day degraded (skipped
   otherwise); `<workflow>_retrain_on_drift` retrains on it, with its cooldown.
"""

from __future__ import annotations

from airflow.sdk import DAG, Param, chain

from ml_platform import tasks
from ml_platform.config import PlatformConfig, load_configs


def label_feedback(cfg: PlatformConfig) -> DAG:
    with tasks.workflow_dag(
        cfg,
        "label_feedback",
        description="late labels of scored days: realised metric per version, evidence when degraded",
        doc_md=__doc__,
        schedule=None,
        max_active_runs=1,
        params={
            "start_ds": Param("2026-01-01", **tasks.DATE_PARAM, title="First labelled day (YYYY-MM-DD)"),
            "end_ds": Param("2026-01-01", **tasks.DATE_PARAM, title="Last labelled day (YYYY-MM-DD)"),
        },
        tags=["ml", cfg.workflow, "monitoring", "labels", "spark"],
    ) as dag:
        check = tasks.check_conf()
        span = tasks.check_range("{{ params.start_ds }}", "{{ params.end_ds }}")
        feedback = tasks.label_feedback(cfg, start_ds="{{ params.start_ds }}", end_ds="{{ params.end_ds }}")
        chain(check, span, *feedback)
    return dag


for _cfg in load_configs():
    globals()[f"{_cfg.workflow}_label_feedback"] = label_feedback(_cfg)
