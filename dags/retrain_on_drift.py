"""
### Retraining on evidence: a drifted day -> train -> register -> the rule decides

One DAG per workflow (`<workflow>_retrain_on_drift`), built by `retrain_on_drift(cfg)` and
scheduled on the workflow's **retraining evidence** Asset (`<model>.retraining_evidence`):
a scoring run whose drift check flagged a day (`check_drift` -> `signal_drift`, in every
DAG that scores) updates it, with the days and what moved in the event's extra.

1. **check_evidence**: the latest day of the triggering events. Skipped, with the reason,
   when a retraining on evidence of a day less than `[monitoring] cooldown_days` from it
   has registered a version already (the registry remembers: versions tagged
   `retraining_evidence_ds`): a week of drift starts one retraining, not seven.
2. **train_model**: Horovod training on the `[monitoring] retrain_window_days` (default: the
   nightly's window) ending on that day.
3. **register_model**: held-out evaluation, a new version tagged with the evidence
   (`retraining_evidence_ds`, `retraining_reason`), alias `challenger`, and the promotion
   rule as always: `champion` only at the floor and within the tolerance of the champion.
4. **publish_champion**: the champion Asset when promoted (`score_on_new_champion` rescores
   the newest day with it, through the registry gate).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import DAG, task
from airflow.sdk.exceptions import AirflowSkipException

from ml_platform import tasks
from ml_platform.config import PlatformConfig, load_configs
from ml_platform.workflows import workflow as workflow_info

EVIDENCE_DS_TAG, EVIDENCE_REASON_TAG = "retraining_evidence_ds", "retraining_reason"
EVIDENCE = "ti.xcom_pull(task_ids='check_evidence')"
END_DS = f"{{{{ {EVIDENCE}['end_ds'] }}}}"


def evidence_days(extras: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The days and the reasons the triggering events' extras give."""
    days = sorted({str(ds) for extra in extras for ds in extra.get("days", [])})
    reasons = sorted({str(extra["reason"]) for extra in extras if extra.get("reason")})
    return days, reasons


def recent_retraining(tagged: dict[str, str], end_ds: str, cooldown_days: int) -> tuple[str, str] | None:
    """A version (and its evidence day) retrained on evidence less than ``cooldown_days``
    from ``end_ds``; ``tagged``: version -> its ``retraining_evidence_ds``."""
    end = dt.date.fromisoformat(end_ds)
    for version, ds in sorted(tagged.items(), key=lambda item: int(item[0]), reverse=True):
        try:
            if abs((dt.date.fromisoformat(ds) - end).days) < cooldown_days:
                return version, ds
        except ValueError:
            continue
    return None


def retrain_on_drift(cfg: PlatformConfig) -> DAG:
    defaults = cfg.training_defaults
    monitoring = workflow_info(cfg.workflow).monitoring
    window_days = monitoring.retrain_window_days or defaults.window_days
    window_start = f"{{{{ window_start_ds({EVIDENCE}['end_ds'], {window_days}) }}}}"

    @task(task_id="check_evidence", multiple_outputs=False)
    def check_evidence(**context: Any) -> dict[str, Any]:
        from ml_registry.hooks import MlflowRegistryHook

        events = context["triggering_asset_events"].get(tasks.evidence_asset(cfg), [])
        days, reasons = evidence_days([event.extra or {} for event in events])
        if not days:
            raise AirflowSkipException("no evidence day in the triggering events: this DAG retrains on evidence")
        end_ds = days[-1]
        client = MlflowRegistryHook(cfg.mlflow_conn_id).get_conn()
        tagged = {
            str(v.version): v.tags[EVIDENCE_DS_TAG]
            for v in client.search_model_versions(f"name = '{cfg.model_name}'")
            if EVIDENCE_DS_TAG in (v.tags or {})
        }
        recent = recent_retraining(tagged, end_ds, monitoring.cooldown_days)
        if recent is not None:
            raise AirflowSkipException(
                f"cooldown: version {recent[0]} was retrained on evidence of {recent[1]}, less than "
                f"{monitoring.cooldown_days} days from {end_ds}; evidence of {', '.join(days)} starts no retraining"
            )
        print(f"retraining on evidence ({', '.join(reasons)}) of {', '.join(days)}: window ending {end_ds}")
        return {"end_ds": end_ds, "days": days, "reasons": reasons}

    with tasks.workflow_dag(
        cfg,
        "retrain_on_drift",
        description="retrain when a scored day drifted (Asset-triggered), with a cooldown",
        doc_md=__doc__,
        schedule=[tasks.evidence_asset(cfg)],
        max_active_runs=1,
        tags=["ml", cfg.workflow, "training", "monitoring", "assets", "spark", "horovod"],
    ) as dag:
        evidence = check_evidence()
        train = tasks.train(
            cfg,
            start_ds=window_start,
            end_ds=END_DS,
            epochs=defaults.epochs,
            learning_rate=defaults.learning_rate,
            batch_size=defaults.batch_size,
            num_ranks=defaults.num_ranks,
            backend=defaults.backend,
        )
        register = tasks.register(
            cfg,
            start_ds=window_start,
            end_ds=END_DS,
            tags=(
                f"{EVIDENCE_DS_TAG}={END_DS}",
                f"{EVIDENCE_REASON_TAG}={{{{ {EVIDENCE}['reasons'] | join(',') }}}}",
            ),
        )
        evidence >> train >> register >> tasks.publish_champion(cfg)
    return dag


for _cfg in load_configs():
    globals()[f"{_cfg.workflow}_retrain_on_drift"] = retrain_on_drift(_cfg)
