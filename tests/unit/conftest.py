from __future__ import annotations

import logging
import os
import sys

import pytest

from registry_stores import STORES, registry_store


@pytest.fixture(scope="session")
def spark():
    """One local[2] session for all unit tests, configured like the jobs' own."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # py4j logs at INFO while the interpreter shuts down, after pytest closed the streams.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from spark_jobs.session import build_spark_session

    session = build_spark_session(
        "unit-tests",
        master="local[2]",
        extra_conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
            "spark.pyspark.python": sys.executable,
        },
    )
    yield session
    session.stop()


@pytest.fixture(scope="session", params=STORES)
def registry_client(request, tmp_path_factory):
    """An ``MlflowClient`` on a fresh registry store, SQLite and PostgreSQL in turn (the
    SQLAlchemy store in this process: the same store code an MLflow server runs)."""
    from mlflow import MlflowClient

    with registry_store(request.param, tmp_path_factory.mktemp(f"registry-{request.param}")) as uri:
        yield MlflowClient(tracking_uri=uri, registry_uri=uri)
