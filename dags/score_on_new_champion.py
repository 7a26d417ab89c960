"""
### Re-score the latest partition when a new champion is promoted

One DAG per workflow (`<workflow>_score_on_new_champion`), built by `score_on_new_champion(cfg)`.

Scheduled on the champion Asset (updated by `publish_champion` in the training DAGs).
Asset-triggered runs have no logical date, so the partition is not derived from one:
`latest_partition` picks the newest curated `ds` and says so in its log and XCom.
"""

from __future__ import annotations

import re

import pendulum
from airflow.sdk import DAG, task
from airflow.sdk.exceptions import AirflowFailException

from ml_platform import tasks
from ml_platform.config import DEFAULT_ARGS, PlatformConfig, load_configs
from ml_platform.partitions import MACROS
from ml_registry.operators import ModelRegistryGateOperator

PARTITION = re.compile(r"^ds=(\d{4}-\d{2}-\d{2})$")


def score_on_new_champion(cfg: PlatformConfig) -> DAG:
    @task(task_id="latest_partition")
    def latest_partition(curated_uri: str) -> str:
        """The newest ``ds`` of the curated dataset (a listing, not the wall clock)."""
        root = tasks.storage_path(cfg, curated_uri)
        days = sorted(m.group(1) for p in (root.iterdir() if root.exists() else []) if (m := PARTITION.match(p.name)))
        if not days:
            raise AirflowFailException(f"no curated partitions under {curated_uri}")
        print(f"re-scoring the latest curated partition ds={days[-1]}")
        return days[-1]

    with DAG(
        dag_id=f"{cfg.workflow}_score_on_new_champion",
        description=f"{cfg.workflow}: re-score the newest curated day when champion moves (Asset-triggered)",
        doc_md=__doc__,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        schedule=[tasks.champion_asset(cfg)],
        catchup=False,
        max_active_runs=1,
        default_args=DEFAULT_ARGS,
        user_defined_macros=MACROS,
        tags=["ml", cfg.workflow, "scoring", "assets", "spark"],
    ) as dag:
        latest = latest_partition(cfg.storage_uri(cfg.curated_root))
        latest_ds = "{{ ti.xcom_pull(task_ids='latest_partition') }}"
        gate = ModelRegistryGateOperator(
            task_id="gate_model",
            model_name=cfg.model_name,
            alias="champion",
            required_tags=tasks.REQUIRED_TAGS,
            dataset_path=cfg.partition_path(cfg.curated_root, latest_ds),
            mlflow_conn_id=cfg.mlflow_conn_id,
        )
        score = tasks.score(cfg, start_ds=latest_ds)

        latest >> gate >> score
    return dag


for _cfg in load_configs():
    globals()[f"{_cfg.workflow}_score_on_new_champion"] = score_on_new_champion(_cfg)
