"""
### Re-score the latest partition when a new champion is promoted

One DAG per workflow (`<workflow>_score_on_new_champion`), built by `score_on_new_champion(cfg)`.

Scheduled on the champion Asset (updated by `publish_champion` in the training DAGs).
Asset-triggered runs have no logical date, so the partition is not derived from one:
`latest_partition` picks the newest curated `ds` and says so in its log and XCom.
"""

from __future__ import annotations

import re

from airflow.sdk import DAG, task
from airflow.sdk.exceptions import AirflowFailException

from ml_platform import tasks
from ml_platform.config import PlatformConfig, load_configs

PARTITION = re.compile(r"^ds=(\d{4}-\d{2}-\d{2})$")


def score_on_new_champion(cfg: PlatformConfig) -> DAG:
    @task(task_id="latest_partition", multiple_outputs=True)
    def latest_partition(curated_uri: str) -> dict[str, str]:
        """The newest ``ds`` of the curated dataset (a listing, not the wall clock) and its
        partition's path, each its own XCom for the gate and the scoring task."""
        root = tasks.storage_path(cfg, curated_uri)
        days = sorted(m.group(1) for p in (root.iterdir() if root.exists() else []) if (m := PARTITION.match(p.name)))
        if not days:
            raise AirflowFailException(f"no curated partitions under {curated_uri}")
        print(f"re-scoring the latest curated partition ds={days[-1]}")
        return {"ds": days[-1], "path": cfg.partition_path(cfg.curated_root, days[-1])}

    with tasks.workflow_dag(
        cfg,
        "score_on_new_champion",
        description="re-score the newest curated day when champion moves (Asset-triggered)",
        doc_md=__doc__,
        schedule=[tasks.champion_asset(cfg)],
        max_active_runs=1,
        tags=["ml", cfg.workflow, "scoring", "assets", "spark"],
    ) as dag:
        latest = latest_partition(cfg.storage_uri(cfg.curated_root))
        gate = tasks.gate(cfg, dataset_path=latest["path"])  # type: ignore[index]  # @task result: a PlainXComArg, typed XComArg
        score = tasks.score(cfg, model_uri=gate.output["uri"], start_ds=latest["ds"])  # type: ignore[index]  # both PlainXComArgs, typed XComArg

        latest >> gate >> score
    return dag


for _cfg in load_configs():
    globals()[f"{_cfg.workflow}_score_on_new_champion"] = score_on_new_champion(_cfg)
