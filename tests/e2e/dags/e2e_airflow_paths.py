"""DAGs of the end-to-end tests only, in a DAG bundle of their own next to the project's
(``e2e-tests``, added by the scheduler tests' stack): ways into the project's DAGs and
kills of a running Spark task that only Airflow's own code paths produce.

- ``e2e_trigger_with_unknown_key``: TriggerDagRunOperator creates a run of
  ``mnist_train_on_demand`` with a key that is not a param; that run goes through the
  execution API, not the public API's conf check, so its ``check_conf`` must refuse it.
- ``e2e_spark_kill``: two Spark tasks of the project's operator, with the project's Spark
  settings, each holding its Python workers: ``held`` runs until the test marks it failed
  through the REST API, ``timed_out`` until its ``execution_timeout``. Every process of
  each job carries ``E2E_MARKER=<run id>/<task id>`` in its environment.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG

# Airflow puts a bundle's own folder on sys.path, not the project's dags folder.
sys.path.append(str(Path(__file__).resolve().parents[3] / "dags"))
from ml_platform.config import load_config  # noqa: E402
from ml_registry.spark_submit import MlflowSparkSubmitOperator  # noqa: E402

cfg = load_config()
HOLD_JOB = Path(__file__).resolve().parents[1] / "jobs" / "hold_workers.py"
MARKER_VAR = "E2E_MARKER"
TIMED_OUT_AFTER = timedelta(seconds=90)
UNKNOWN_KEY = "unknown_key"

with DAG(
    dag_id="e2e_trigger_with_unknown_key",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    default_args={"retries": 0},
    tags=["e2e"],
):
    TriggerDagRunOperator(
        task_id="trigger",
        trigger_dag_id="mnist_train_on_demand",
        trigger_run_id="{{ run_id }}__triggered",
        conf={UNKNOWN_KEY: 1},
    )

with DAG(
    dag_id="e2e_spark_kill",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    default_args={"retries": 0},
    tags=["e2e"],
):
    for task_id, timeout in (("held", None), ("timed_out", TIMED_OUT_AFTER)):
        MlflowSparkSubmitOperator(
            task_id=task_id,
            application=str(HOLD_JOB),
            conn_id=cfg.spark_conn_id,
            mlflow_conn_id=cfg.mlflow_conn_id,
            conf=cfg.spark_conf(),
            name=f"e2e-{task_id}",
            env_vars={MARKER_VAR: "{{ run_id }}/{{ ti.task_id }}"},
            execution_timeout=timeout,
        )
