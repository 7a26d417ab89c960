"""Hook for an MLflow tracking server / model registry described by an Airflow connection."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from airflow.sdk import BaseHook

from ml_contract.environment import MLFLOW_CLIENT_VARS

if TYPE_CHECKING:
    from airflow.sdk import Connection
    from mlflow import MlflowClient

# Everything MLflow clients read to reach and authenticate to the server. ``get_conn`` clears
# the ones a connection does not set, so credentials of another connection never linger.
CLIENT_ENV_VARS = MLFLOW_CLIENT_VARS


class MlflowServerUnavailableError(ConnectionError):
    """The tracking server did not answer (refused, timed out, 5xx): a retry may succeed."""


class MlflowRegistryHook(BaseHook):
    """
    Interact with an MLflow tracking server and its model registry.

    The connection (type ``http``) names the server: ``host`` with or without a scheme
    (``127.0.0.1`` + ``port`` 5000 + ``schema`` ``http``, or ``http://127.0.0.1:5000``), and
    optionally basic-auth ``login``/``password``, or a bearer token given as ``password``
    without a login or as extra ``{"token": "..."}``. Extra ``{"ui_url": "..."}`` overrides
    the base URL of the MLflow UI used in links (defaults to the tracking URI).

    The same settings reach Spark jobs as environment variables (:meth:`client_env`), so
    secrets never travel on a spark-submit command line.

    :param mlflow_conn_id: Airflow connection id of the MLflow tracking server.
    """

    conn_name_attr = "mlflow_conn_id"
    default_conn_name = "mlflow_default"
    conn_type = "http"
    hook_name = "MLflow"

    def __init__(
        self, mlflow_conn_id: str = default_conn_name, connection: Connection | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.mlflow_conn_id = mlflow_conn_id
        if connection is not None:  # fetched already (a trigger reads it asynchronously)
            self.__dict__["connection"] = connection

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": [],
            "relabeling": {
                "host": "Tracking server host or URL",
                "schema": "Scheme (http/https, when host has none)",
                "login": "Username (basic auth)",
                "password": "Password, or token when no username",
            },
            "placeholders": {
                "host": "127.0.0.1 or https://mlflow.example.com",
                "extra": '{"token": "...", "ui_url": "https://mlflow.example.com"}',
            },
        }

    @cached_property
    def connection(self) -> Connection:
        return self.get_connection(self.mlflow_conn_id)

    @cached_property
    def tracking_uri(self) -> str:
        """``scheme://host[:port][/path]`` of the tracking server, without credentials."""
        conn = self.connection
        host = (conn.host or "").strip().rstrip("/")
        if not host:
            raise ValueError(f"connection {self.mlflow_conn_id!r} has no host for the MLflow tracking server")
        if "://" not in host:
            # URI-form connections (AIRFLOW_CONN_X='https://host:443') carry the scheme as type.
            scheme = conn.schema or ("https" if conn.conn_type == "https" else "http")
            host = f"{scheme}://{host}"
        parts = urlsplit(host)
        netloc = parts.hostname or ""
        if ":" in netloc:  # an IPv6 literal
            netloc = f"[{netloc}]"
        port = parts.port or conn.port
        if port:
            netloc = f"{netloc}:{port}"
        # Credentials belong in login/password; a URI with them would end up in logs and links.
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))

    @cached_property
    def ui_url(self) -> str:
        """Base URL of the MLflow UI, safe to show (no credentials)."""
        return str(self.connection.extra_dejson.get("ui_url") or self.tracking_uri).rstrip("/")

    def client_env(self) -> dict[str, str]:
        """Environment variables that point an MLflow client (here or in a Spark job) at the server."""
        conn = self.connection
        env = {"MLFLOW_TRACKING_URI": self.tracking_uri}
        token = conn.extra_dejson.get("token")
        if conn.login:
            env["MLFLOW_TRACKING_USERNAME"] = conn.login
            if conn.password:
                env["MLFLOW_TRACKING_PASSWORD"] = conn.password
        elif conn.password and not token:
            token = conn.password
        if token:
            env["MLFLOW_TRACKING_TOKEN"] = str(token)
        return env

    def http_auth(self) -> dict[str, Any]:
        """Keyword arguments for an HTTP client that calls the server's REST API with the
        connection's credentials (``auth`` for basic auth, an ``Authorization`` header for a
        token), without touching this process's environment."""
        env = self.client_env()
        if "MLFLOW_TRACKING_USERNAME" in env:
            return {"auth": (env["MLFLOW_TRACKING_USERNAME"], env.get("MLFLOW_TRACKING_PASSWORD", ""))}
        if "MLFLOW_TRACKING_TOKEN" in env:
            return {"headers": {"Authorization": f"Bearer {env['MLFLOW_TRACKING_TOKEN']}"}}
        return {}

    def get_conn(self) -> MlflowClient:
        """An ``MlflowClient`` for the server; also points this process's MLflow at it.

        The environment is set (not only the client's URI) because module-level MLflow calls
        such as ``mlflow.models.get_model_info`` find the server and credentials there.
        """
        from mlflow import MlflowClient

        env = self.client_env()
        for name in CLIENT_ENV_VARS:
            if name in env:
                os.environ[name] = env[name]
            else:
                os.environ.pop(name, None)
        return MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri)

    @contextmanager
    def unavailable_as_retryable(self, doing: str) -> Iterator[None]:
        """Turn "no answer from the server" into :class:`MlflowServerUnavailableError`.

        Answers of the server (``RestException``: not found, invalid parameter, ...) and
        client-side validation errors pass through unchanged, for the caller to judge. MLflow
        raises connection failures and non-JSON 5xx replies as a bare ``MlflowException``
        with ``INTERNAL_ERROR`` after its own HTTP retries (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``).
        """
        from mlflow.exceptions import MlflowException, RestException

        try:
            yield
        except RestException:
            raise
        except MlflowException as err:
            if err.error_code != "INTERNAL_ERROR":
                raise
            raise MlflowServerUnavailableError(
                f"MLflow tracking server {self.tracking_uri} (connection {self.mlflow_conn_id!r}) "
                f"did not answer while {doing}: {err.message}"
            ) from err
