from __future__ import annotations

import pytest
from spark_sessions import local_session

from registry_stores import STORES, registry_store


@pytest.fixture(scope="session")
def spark():
    """One local[2] session for all unit tests, configured like the jobs' own."""
    session = local_session("unit-tests")
    yield session
    session.stop()


@pytest.fixture
def spark_submit():
    """``spark-submit`` of this checkout's environment on local[2], as scripts/spark_cds.py
    runs it: ``(job, args, driver JVM options) -> CompletedProcess`` (the tier: integration)."""
    import spark_cds

    return spark_cds.submit


@pytest.fixture(scope="session", params=STORES)
def registry_client(request, tmp_path_factory):
    """An ``MlflowClient`` on a fresh registry store, SQLite and PostgreSQL in turn (the
    SQLAlchemy store in this process: the same store code an MLflow server runs)."""
    from mlflow import MlflowClient

    with registry_store(request.param, tmp_path_factory.mktemp(f"registry-{request.param}"), request) as uri:
        yield MlflowClient(tracking_uri=uri, registry_uri=uri)


@pytest.fixture(scope="module", params=STORES)
def mlflow_experiment(request, tmp_path_factory):
    """An experiment on a fresh MLflow store of each kind (SQLite, then PostgreSQL), with
    that store as this process's tracking URI for the module: the jobs' code reaches it
    through the environment, as under spark-submit. Yields the experiment id."""
    import mlflow

    folder = tmp_path_factory.mktemp(f"mlflow-{request.param}")
    with registry_store(request.param, folder, request) as uri:
        mp = pytest.MonkeyPatch()
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mlflow.set_tracking_uri(uri)
        try:
            yield mlflow.create_experiment(request.module.__name__, artifact_location=(folder / "artifacts").as_uri())
        finally:
            mlflow.set_tracking_uri(None)
            mp.undo()
