"""Fixtures for the registry gate: a real MLflow tracking server (local artifacts) on a
SQLite store, and for the tests marked ``both_stores`` also on a PostgreSQL store (a
database of its own on the session's embedded PostgreSQL, ``postgres_server``).

One server per store and test session (it takes a few seconds to start); every test
registers its own model under a fresh name, so tests do not see each other's aliases, tags
or versions.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd  # module level: MLflow resolves predict's type hints in these globals
import pytest

from local_stack import LocalStack, free_port, fresh_database
from registry_stores import STORES

MLFLOW_ENV_VARS = (
    "MLFLOW_TRACKING_URI",
    "MLFLOW_REGISTRY_URI",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_TOKEN",
)
SIGNATURE_COLUMNS = {"pixel0": "integer", "pixel1": "integer"}
# The tensor signature every workflow's model has (here MNIST's): input "features", [-1, *shape].
SIGNATURE_TENSOR = {"dtype": "uint8", "shape": [28, 28]}


@dataclass(frozen=True)
class MlflowServer:
    uri: str
    port: int
    db_path: Path | None  # the SQLite store; None on PostgreSQL
    store: str = "sqlite"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "both_stores: run against MLflow on SQLite and on PostgreSQL")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests marked ``both_stores`` run once per store; the others on SQLite only."""
    if "mlflow_server" in metafunc.fixturenames:
        stores = STORES if metafunc.definition.get_closest_marker("both_stores") else ("sqlite",)
        metafunc.parametrize("mlflow_server", stores, indirect=True, scope="session")


@pytest.fixture(scope="session")
def mlflow_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """``mlflow server`` on a free loopback port, on the store the test asks for."""
    state_dir = tmp_path_factory.mktemp(f"gate-stack-{request.param}")
    stack = LocalStack(state_dir=state_dir, mlflow_port=free_port())
    if request.param == "sqlite":  # the embedded stack's own store
        stack.start_mlflow()
        try:
            yield MlflowServer(uri=stack.tracking_uri, port=stack.mlflow_port, db_path=stack.mlflow_db)
        finally:
            stack.stop_mlflow()
        return
    with fresh_database(request.getfixturevalue("postgres_server").uri, "gate") as store_uri:
        stack.mlflow_store_uri = store_uri  # the same launcher, on the production store
        stack.start_mlflow()
        try:
            yield MlflowServer(uri=stack.tracking_uri, port=stack.mlflow_port, db_path=None, store="postgresql")
        finally:
            stack.stop_mlflow()


@pytest.fixture(autouse=True)
def _restore_mlflow_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook writes MLFLOW_* into os.environ (by design); undo it after every test."""
    for name in MLFLOW_ENV_VARS:
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:
            monkeypatch.delenv(name, raising=False)


@dataclass(frozen=True)
class LoggedModel:
    """A pyfunc model logged once per session; registering it again is cheap."""

    model_uri: str
    model_id: str
    run_id: str
    answer: int


@pytest.fixture(scope="session")
def logged_models(mlflow_server: MlflowServer) -> list[LoggedModel]:
    """Two tiny pyfunc models with the signature ``pixel0: integer, pixel1: integer``.

    They answer 0 and 1 for every row, so loading a version tells which model it is.
    """
    import mlflow
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    class ConstantModel(mlflow.pyfunc.PythonModel):
        def __init__(self, answer: int) -> None:
            self.answer = answer

        def predict(self, context: Any, model_input: pd.DataFrame, params: Any = None) -> list[int]:
            return [self.answer] * len(model_input)

    signature = ModelSignature(inputs=Schema([ColSpec(t, name) for name, t in SIGNATURE_COLUMNS.items()]))
    input_example = pd.DataFrame({name: [0, 255] for name in SIGNATURE_COLUMNS}, dtype="int32")
    previous = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = mlflow_server.uri
    try:
        mlflow.set_experiment("registry-gate-tests")
        models = []
        for answer in (0, 1):
            with mlflow.start_run() as run:
                info = mlflow.pyfunc.log_model(
                    name="model", python_model=ConstantModel(answer), signature=signature, input_example=input_example
                )
            models.append(LoggedModel(info.model_uri, info.model_id, run.info.run_id, answer))
        return models
    finally:
        if previous is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = previous


@pytest.fixture(scope="session")
def logged_tensor_model(mlflow_server: MlflowServer) -> LoggedModel:
    """A tiny pyfunc model with the tensor signature the train job logs: ``features``
    uint8 ``[-1, 28, 28]`` in, float32 ``[-1, 10]`` out (answers 0 everywhere)."""
    import mlflow
    import numpy as np
    from mlflow.models import ModelSignature
    from mlflow.types import Schema, TensorSpec

    class Uniform(mlflow.pyfunc.PythonModel):
        def predict(self, context: Any, model_input: np.ndarray, params: Any = None) -> np.ndarray:
            return np.full((len(model_input), 10), 0.1, dtype=np.float32)

    dtype, shape = np.dtype(SIGNATURE_TENSOR["dtype"]), tuple(SIGNATURE_TENSOR["shape"])
    signature = ModelSignature(
        inputs=Schema([TensorSpec(dtype, (-1, *shape), name="features")]),
        outputs=Schema([TensorSpec(np.dtype("float32"), (-1, 10))]),
    )
    previous = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = mlflow_server.uri
    try:
        mlflow.set_experiment("registry-gate-tests")
        with mlflow.start_run() as run:
            info = mlflow.pyfunc.log_model(
                name="model", python_model=Uniform(), signature=signature, metadata={"workflow": "mnist"}
            )
        return LoggedModel(info.model_uri, info.model_id, run.info.run_id, 0)
    finally:
        if previous is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = previous


@pytest.fixture
def make_tensor_model(client, logged_tensor_model: LoggedModel) -> Callable[[], str]:
    """Register a fresh model whose version 1 (champion) has the tensor signature."""

    def make() -> str:
        name = f"gate-tensor-{uuid.uuid4().hex[:10]}"
        client.create_registered_model(name)
        logged = logged_tensor_model
        client.create_model_version(name, source=logged.model_uri, run_id=logged.run_id, model_id=logged.model_id)
        client.set_registered_model_alias(name, "champion", "1")
        return name

    return make


@pytest.fixture
def client(mlflow_server: MlflowServer):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=mlflow_server.uri, registry_uri=mlflow_server.uri)


@pytest.fixture
def mlflow_conn(monkeypatch: pytest.MonkeyPatch, mlflow_server: MlflowServer) -> str:
    """``mlflow_default`` pointing at the test server, given the way deployments do: an env var."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_MLFLOW_DEFAULT",
        json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": mlflow_server.port, "schema": "http"}),
    )
    return "mlflow_default"


@pytest.fixture
def make_model(client, logged_models: list[LoggedModel]) -> Callable[..., str]:
    """Register a fresh model with one version per entry of ``answers`` (0 or 1), in order.

    Returns the registered model name; versions are numbered 1, 2, ... like the answers.
    """

    def make(
        answers: tuple[int, ...] = (0, 1), *, champion: int | None = None, tags: dict[str, str] | None = None
    ) -> str:
        name = f"gate-{uuid.uuid4().hex[:10]}"
        client.create_registered_model(name)
        for answer in answers:
            logged = logged_models[answer]
            version = client.create_model_version(
                name, source=logged.model_uri, run_id=logged.run_id, model_id=logged.model_id, tags=tags
            )
            assert version.status == "READY"
        if champion is not None:
            client.set_registered_model_alias(name, "champion", str(champion))
        return name

    return make


@dataclass(frozen=True)
class UnreachableConn:
    conn_id: str
    uri: str


@pytest.fixture
def unreachable_conn(monkeypatch: pytest.MonkeyPatch) -> UnreachableConn:
    """A connection to a loopback port nothing listens on, with MLflow's HTTP retries off.

    MLflow retries a refused connection for minutes by default; with Airflow retrying the
    task, the test needs only the first refusal.
    """
    port = free_port()
    monkeypatch.setenv(
        "AIRFLOW_CONN_MLFLOW_DOWN",
        json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": port, "schema": "http"}),
    )
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    return UnreachableConn(conn_id="mlflow_down", uri=f"http://127.0.0.1:{port}")
