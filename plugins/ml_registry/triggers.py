"""Deferrable wait of the registry gate: a model version's status polled in the triggerer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ml_registry.hooks import MlflowRegistryHook

PENDING = "PENDING_REGISTRATION"


class ModelVersionReadyTrigger(BaseTrigger):
    """
    Poll a registered model version until it leaves ``PENDING_REGISTRATION`` or ``timeout``
    seconds have passed, then fire once with ``{"status", "waited_s"}``. The gate resumes on
    that event and decides (it checks the version again itself): the trigger only waits, in
    the triggerer, without holding a worker slot.

    The server is reached through the Airflow connection ``mlflow_conn_id`` (resolved in the
    triggerer, so no credential is serialized with the trigger) with MLflow's REST API.
    """

    def __init__(
        self, *, mlflow_conn_id: str, model_name: str, version: str, poke_interval: float, timeout: float
    ) -> None:
        super().__init__()
        self.mlflow_conn_id = mlflow_conn_id
        self.model_name = model_name
        self.version = str(version)
        self.poke_interval = float(poke_interval)
        self.timeout = float(timeout)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "mlflow_conn_id": self.mlflow_conn_id,
                "model_name": self.model_name,
                "version": self.version,
                "poke_interval": self.poke_interval,
                "timeout": self.timeout,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        import httpx

        connection = await MlflowRegistryHook.aget_connection(self.mlflow_conn_id)
        hook = MlflowRegistryHook(self.mlflow_conn_id, connection=connection)
        started = time.monotonic()
        async with httpx.AsyncClient(timeout=30, **hook.http_auth()) as client:
            while True:
                status = await self._status(client, hook.tracking_uri)
                waited = time.monotonic() - started
                if status != PENDING or waited >= self.timeout:
                    yield TriggerEvent({"status": status, "waited_s": round(waited, 3)})
                    return
                self.log.info(
                    "%s version %s is %s; checking again in %ss",
                    self.model_name,
                    self.version,
                    status,
                    self.poke_interval,
                )
                await asyncio.sleep(min(self.poke_interval, max(0.0, self.timeout - waited)))

    async def _status(self, client: Any, tracking_uri: str) -> str:
        response = await client.get(
            f"{tracking_uri}/api/2.0/mlflow/model-versions/get",
            params={"name": self.model_name, "version": self.version},
        )
        response.raise_for_status()
        return response.json()["model_version"]["status"]
