"""
### Nightly retraining: ingest -> train (Horovod) -> register -> gate -> score

One DAG per workflow (`<workflow>_nightly_retrain`, e.g. `mnist_nightly_retrain`), all
built by `nightly_retrain(cfg)` from the workflow's declaration
(`spark_jobs/workflows/<workflow>.toml`).

Runs at 02:00 UTC and processes the UTC day that has just ended: the run of 2026-11-29
handles partition `ds=2026-11-28` (see `ml_platform/partitions.py`).

1. **wait_for_raw_drop**: waits for the day's raw drop (reschedule mode, no worker slot
   between looks) until `ML_RAW_DROP_DEADLINE_HOURS` (24) after the day ends; a drop that never
   came skips it, with the reason, and the rest of the run (nothing fails or retries).
   **ingest_raw_drop**: the day's raw CSV drop (the workflow's fields) becomes a validated curated Parquet
   partition; rejected rows go to quarantine with their reason. Updates the curated Asset.
   With a landing zone (`ML_LANDING_CONTAINER`), the wait is for the drop in that blob
   container and **stage_raw_drop** copies it into the storage root.
2. **train_model**: Horovod data-parallel training of the workflow's model over the last
   `window_days` curated partitions, one rank per Spark slot; metrics and model go to MLflow.
3. **register_model**: held-out evaluation, a new registry version with alias
   `challenger`, promoted to `champion` only when it passes the workflow's metric floor (pool
   `ml_registry`, one slot: never two registrations at once).
4. **publish_champion**: updates the champion Asset when (and only when) step 3 promoted.
5. **gate_model**: resolves `champion` once, checks it, and pins `models:/<name>/<version>`.
6. **score_partition**: batch predictions for the day with exactly that version;
   **check_drift** / **signal_drift**: the day against the version's reference profile,
   the retraining evidence when it drifted (docs/monitoring.md).

Every computing step is a `spark-submit` through the `spark_default` connection (or an
Azure Synapse Spark batch job, `ML_SPARK_SUBMIT_TARGET=synapse`); MLflow is reached through
the `mlflow_default` connection.
"""

from __future__ import annotations

from airflow.sdk import DAG, CronTriggerTimetable, chain

from ml_platform import tasks
from ml_platform.config import PlatformConfig, load_configs
from ml_platform.partitions import NIGHTLY_CRON, PARTITION_DS
from ml_platform.workflows import workflow as workflow_info


def nightly_retrain(cfg: PlatformConfig) -> DAG:
    info = workflow_info(cfg.workflow)
    defaults = cfg.training_defaults
    window_start = f"{{{{ window_start_ds(partition_ds(dag_run), {defaults.window_days}) }}}}"
    with tasks.workflow_dag(
        cfg,
        "nightly_retrain",
        description=f"nightly ingest, train, register ({info.metric_goal}), gate and score",
        doc_md=__doc__,
        schedule=CronTriggerTimetable(NIGHTLY_CRON, timezone="UTC"),
        # Two: a run still waiting for its day's drop (up to the deadline) never holds back a
        # run whose drop is there, a hand-triggered one or the next night's.
        max_active_runs=2,
        tags=["ml", cfg.workflow, "training", "scoring", "spark", "horovod"],
    ) as dag:
        receive = tasks.receive_raw_drop(cfg, PARTITION_DS)
        ingest = tasks.ingest(cfg, PARTITION_DS)
        train = tasks.train(
            cfg,
            start_ds=window_start,
            end_ds=PARTITION_DS,
            epochs=defaults.epochs,
            learning_rate=defaults.learning_rate,
            batch_size=defaults.batch_size,
            num_ranks=defaults.num_ranks,
            backend=defaults.backend,
        )
        register = tasks.register(cfg, start_ds=window_start, end_ds=PARTITION_DS)
        gate = tasks.gate(
            cfg,
            dataset_path=cfg.partition_path(cfg.curated_root, PARTITION_DS),
            # No champion yet (the first runs' models missed the floor): skip scoring. Any other
            # refusal (failed validation, schema mismatch) fails the run.
            skip_if_no_model=True,
        )
        score = tasks.score(cfg, model_uri=gate.output["uri"], start_ds=PARTITION_DS)  # type: ignore[index]  # .output: a PlainXComArg, typed XComArg

        chain(*receive, ingest, train, register, gate, score)
        register >> tasks.publish_champion(cfg)
    return dag


for _cfg in load_configs():
    globals()[f"{_cfg.workflow}_nightly_retrain"] = nightly_retrain(_cfg)
