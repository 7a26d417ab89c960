"""
### Daily batch scoring, backfillable: ingest -> gate -> score for one partition

One DAG per workflow (`<workflow>_batch_scoring`), built by `batch_scoring(cfg)`.

One run per UTC day, with Airflow's data-interval semantics: the run whose interval is
2026-11-01 00:00 -> 2026-11-02 00:00 (logical date 2026-11-01, started just after
midnight) scores `ds=2026-11-01`. Re-running or backfilling a day replaces its curated and
predictions partitions: counts never double; a writer of the day waits for any other run's
writer of it (partition locks, `claim_*`/`release_*`). A late raw drop is waited for by the
`wait_for_raw_drop` sensor (reschedule mode: no worker slot between looks): in the storage
root's raw partition until `ML_RAW_DROP_DEADLINE_HOURS` (24) after the day ends, then it is
skipped with the reason and so is the rest of the run (no failure, no retry); with a landing
zone (`ML_LANDING_CONTAINER`) in that blob container, before `stage_raw_drop` copies it in.

Backfill days D1..D2 (one run per day, scored with the model `model_policy` picks):

    airflow backfill create --dag-id mnist_batch_scoring --from-date D1 --to-date D2 \
        --reprocess-behavior completed

**Params**
- `model_policy`: `current` scores every day with today's `champion`; `as_of` scores each
  day D with the version that scored D when it was first scored on schedule: the champion
  as of the nightly run that scores D (logical time D+1 02:00 UTC, after that night's
  promotion), from the promotion history the register step records.
"""

from __future__ import annotations

from airflow.sdk import DAG, CronDataIntervalTimetable, Param, chain

from ml_platform import tasks
from ml_platform.config import PlatformConfig, load_configs
from ml_platform.partitions import NIGHTLY_HOUR_UTC, PARTITION_DS


def batch_scoring(cfg: PlatformConfig) -> DAG:
    with tasks.workflow_dag(
        cfg,
        "batch_scoring",
        description="daily ingest and scoring with the champion; backfillable, as_of policy",
        doc_md=__doc__,
        schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
        max_active_runs=2,
        params={
            "model_policy": Param(
                "current",
                type="string",
                enum=["current", "as_of"],
                title="Model policy",
                description="current: today's champion; as_of: the version the nightly scored the day with",
            ),
        },
        tags=["ml", cfg.workflow, "scoring", "backfill", "spark"],
    ) as dag:
        check = tasks.check_conf()
        receive = tasks.receive_raw_drop(cfg, PARTITION_DS)
        ingest = tasks.ingest(cfg, PARTITION_DS)
        gate = tasks.gate(
            cfg,
            dataset_path=cfg.partition_path(cfg.curated_root, PARTITION_DS),
            policy="{{ params.model_policy }}",
            # The logical time of the nightly that first scored this day (NIGHTLY_CRON in
            # <workflow>_nightly_retrain, which scores the day before its logical date).
            as_of=f"{{{{ macros.ds_add(partition_ds(dag_run), 1) }}}}T{NIGHTLY_HOUR_UTC:02d}:00:00+00:00",
        )
        score = tasks.score(cfg, model_uri=gate.output["uri"], start_ds=PARTITION_DS)  # type: ignore[index]  # .output: a PlainXComArg, typed XComArg

        chain(check, *receive, ingest, gate, score)
    return dag


for _cfg in load_configs():
    globals()[f"{_cfg.workflow}_batch_scoring"] = batch_scoring(_cfg)
