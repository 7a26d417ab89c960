"""A DAG of the end-to-end tests only, in their DAG bundle (``e2e-tests``).

``e2e_print_credentials``: one task of the project's Spark operator whose job prints the
MLflow credentials it received from the connection ``e2e_mlflow_with_credentials`` (which
the test creates through the REST API), so that the test can read what the task log shows
of them. The job starts no SparkSession, so it needs none of the project's Spark settings;
``dags/`` is not imported (it is not on the path of this bundle's parser).
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from ml_registry.spark_submit import MlflowSparkSubmitOperator

PRINT_JOB = Path(__file__).resolve().parents[1] / "jobs" / "print_mlflow_credentials.py"
MLFLOW_CONN_ID = "e2e_mlflow_with_credentials"

with DAG(
    dag_id="e2e_print_credentials",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    schedule=None,
    catchup=False,
    is_paused_upon_creation=False,
    default_args={"retries": 0},
    tags=["e2e"],
):
    MlflowSparkSubmitOperator(
        task_id="print_credentials",
        application=str(PRINT_JOB),
        conn_id="spark_default",
        mlflow_conn_id=MLFLOW_CONN_ID,
        name="e2e-print-credentials",
    )
