"""The production profile: Postgres metadata DB and CeleryExecutor with a Redis broker and
a Celery worker (all on loopback). ``mnist_batch_scoring``, unchanged, backfills a day to
success: only Airflow's own configuration differs from the embedded default."""

from __future__ import annotations

import uuid

import pyarrow.dataset as pads
import pytest
from quick_models import register_quick_champion

from e2e_support import postgres_database, service_missing, wait_for
from local_stack import LocalStack, free_port

DAY = "2026-11-10"
ROWS = 800
BROKER_DB = 7


@pytest.fixture(scope="module")
def celery_stack(tmp_path_factory):
    if reason := service_missing("PostgreSQL", "Redis"):
        pytest.skip(f"production profile needs {reason}")
    with postgres_database() as database:
        sql_conn = f"postgresql+psycopg2://postgres@127.0.0.1:5432/{database}"
        stack = LocalStack(
            state_dir=tmp_path_factory.mktemp("celery-stack"),
            mlflow_port=free_port(),
            api_port=free_port(),
            extra_env={
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sql_conn,
                "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
                "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:6379/{BROKER_DB}",
                "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{sql_conn}",
                "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
                # A queue of this stack's own: a Celery worker left running by an earlier
                # (killed) session on the same broker would otherwise take its tasks.
                "AIRFLOW__OPERATORS__DEFAULT_QUEUE": f"e2e-{uuid.uuid4().hex[:8]}",
            },
        )
        try:
            stack.migrate()
            stack.start_mlflow()
            stack.start_airflow_services(extra_components=[["celery", "worker"]])
            yield stack
        finally:
            stack.stop_services()
            stack.stop_mlflow()


def test_batch_scoring_backfill_succeeds_under_celery_and_postgres(celery_stack):
    stack = celery_stack
    version = register_quick_champion(stack.tracking_uri)
    stack.generate_drops([DAY], rows=ROWS, seed=5)
    wait_for(lambda: stack.api("GET", "/dags/mnist_batch_scoring")[0] == 200, 180, 2, "DAG parsed")
    stack.airflow("dags", "unpause", "mnist_batch_scoring", capture_output=True)
    stack.airflow(
        "backfill",
        "create",
        "--dag-id",
        "mnist_batch_scoring",
        "--from-date",
        DAY,
        "--to-date",
        DAY,
        capture_output=True,
    )
    run = wait_for(
        lambda: next(
            (
                r
                for r in stack.api("GET", "/dags/mnist_batch_scoring/dagRuns?run_type=backfill")[1]["dag_runs"]
                if r["state"] in ("success", "failed")
            ),
            None,
        ),
        900,
        5,
        "backfill run finished",
    )
    assert run["state"] == "success", run
    _, tis = stack.api("GET", f"/dags/mnist_batch_scoring/dagRuns/{run['dag_run_id']}/taskInstances")
    assert {ti["state"] for ti in tis["task_instances"]} == {"success"}
    # The tasks ran in the Celery worker process, not in the scheduler.
    worker_log = (stack.airflow_home / "service-logs" / "celery-worker.log").read_text()
    assert "score_partition" in worker_log
    scored = pads.dataset(str(stack.storage_root / "predictions" / "mnist" / f"ds={DAY}"), format="parquet").to_table()
    assert scored.num_rows == ROWS
    assert set(scored.column("model_version").to_pylist()) == {version}
