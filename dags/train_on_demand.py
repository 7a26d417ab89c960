"""
### On-demand training with typed parameters

One DAG per workflow (`<workflow>_train_on_demand`), built by `train_on_demand(cfg)`.

Trigger from the UI form, the REST API or the CLI; every parameter is a JSON-schema typed
and bounded `Param` checked when the run is created, and keys that are not parameters
are refused. Defaults equal the nightly settings.

    airflow dags trigger mnist_train_on_demand --conf '{"epochs": 5, "promote": false}'

The window is the `window_days` partitions ending on `end_ds` (default: the day before
the run). Registration shares the one-slot `ml_registry` pool with the nightly DAG.
"""

from __future__ import annotations

from airflow.sdk import DAG, Param

from ml_platform import tasks
from ml_platform.config import PlatformConfig, load_configs

END_DS = "{{ params.end_ds or partition_ds(dag_run) }}"
WINDOW_START = "{{ window_start_ds(params.end_ds or partition_ds(dag_run), params.window_days) }}"


def train_on_demand(cfg: PlatformConfig) -> DAG:
    defaults = cfg.training_defaults
    with tasks.workflow_dag(
        cfg,
        "train_on_demand",
        description="train on demand with typed parameters; register, promote if it passes",
        doc_md=__doc__,
        schedule=None,
        max_active_runs=1,
        params={
            "epochs": Param(defaults.epochs, type="integer", minimum=1, maximum=100, title="Epochs"),
            "learning_rate": Param(
                defaults.learning_rate,
                type="number",
                # `minimum`, not `exclusiveMinimum: 0`: the trigger form enforces only the former.
                minimum=1e-6,
                maximum=1,
                title="Learning rate",
                description="base rate, scaled by the number of ranks",
            ),
            "batch_size": Param(defaults.batch_size, type="integer", minimum=8, maximum=1024, title="Batch size"),
            "num_ranks": Param(
                defaults.num_ranks,
                type="integer",
                minimum=0,
                maximum=64,
                title="Horovod ranks",
                description="0: one per Spark slot",
            ),
            "window_days": Param(
                defaults.window_days, type="integer", minimum=1, maximum=90, title="Training window (days)"
            ),
            "end_ds": Param(
                None,
                type=["null", "string"],
                format="date",
                pattern=r"^\d{4}-\d{2}-\d{2}$",
                title="Last day of the window",
                description="empty: the day before the run",
            ),
            "backend": Param(
                defaults.backend,
                type="string",
                enum=["horovod", "torch_distributor"],
                title="Distributed backend",
                description="horovod, or Spark's TorchDistributor",
            ),
            "promote": Param(True, type="boolean", title="Promote to champion if it passes"),
        },
        tags=["ml", cfg.workflow, "training", "on-demand", "spark", "horovod"],
    ) as dag:
        check = tasks.check_conf()
        train = tasks.train(
            cfg,
            start_ds=WINDOW_START,
            end_ds=END_DS,
            epochs="{{ params.epochs }}",
            learning_rate="{{ params.learning_rate }}",
            batch_size="{{ params.batch_size }}",
            num_ranks="{{ params.num_ranks }}",
            backend="{{ params.backend }}",
        )
        register = tasks.register(
            cfg,
            start_ds=WINDOW_START,
            end_ds=END_DS,
            promote="{{ '--promote' if params.promote else '--no-promote' }}",
        )

        check >> train >> register >> tasks.publish_champion(cfg)
    return dag


for _cfg in load_configs():
    globals()[f"{_cfg.workflow}_train_on_demand"] = train_on_demand(_cfg)
