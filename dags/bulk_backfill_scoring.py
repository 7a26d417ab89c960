"""
### Bulk backfill: score a whole date range with one model version in one Spark job

One DAG per workflow (`<workflow>_bulk_backfill_scoring`), built by `bulk_backfill_scoring(cfg)`.

For re-scoring many days when one spark-submit per day costs too much. The gate runs
once (today's `champion`, or an explicit `model_version`), then one job scores every
curated partition in `start_ds..end_ds` and replaces each predictions partition, exactly
as the daily runs would. Days without a curated partition are reported (the task fails
after the others are written, listing both). Nothing is ingested here.

    airflow dags trigger mnist_bulk_backfill_scoring \
        --conf '{"start_ds": "2026-11-01", "end_ds": "2026-11-07"}'
"""

from __future__ import annotations

from airflow.sdk import DAG, Param

from ml_platform import tasks
from ml_platform.config import PlatformConfig, load_configs


def bulk_backfill_scoring(cfg: PlatformConfig) -> DAG:
    with tasks.workflow_dag(
        cfg,
        "bulk_backfill_scoring",
        description="re-score a date range with one model version in one Spark job",
        doc_md=__doc__,
        schedule=None,
        max_active_runs=1,
        params={
            "start_ds": Param("2026-01-01", **tasks.DATE_PARAM, title="First day (YYYY-MM-DD)"),
            "end_ds": Param("2026-01-07", **tasks.DATE_PARAM, title="Last day (YYYY-MM-DD)"),
            "model_version": Param(
                None,
                type=["null", "integer"],
                minimum=1,
                # The registry's SQL store keeps version numbers in a 32-bit INTEGER column.
                maximum=2**31 - 1,
                title="Model version",
                description="empty: the current champion",
            ),
        },
        tags=["ml", cfg.workflow, "scoring", "backfill", "spark"],
    ) as dag:
        check = tasks.check_conf()
        span = tasks.check_range("{{ params.start_ds }}", "{{ params.end_ds }}")
        gate = tasks.gate(cfg, version="{{ params.model_version or '' }}")
        score = tasks.score(
            cfg,
            model_uri=gate.output["uri"],  # type: ignore[index]  # .output: a PlainXComArg, typed XComArg
            start_ds="{{ params.start_ds }}",
            end_ds="{{ params.end_ds }}",
            task_id="score_range",
        )

        check >> span >> gate >> score
    return dag


for _cfg in load_configs():
    globals()[f"{_cfg.workflow}_bulk_backfill_scoring"] = bulk_backfill_scoring(_cfg)
