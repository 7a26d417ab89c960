"""Refuse trigger requests whose ``conf`` carries keys the DAG does not declare as params.

Airflow validates each declared ``Param`` against its JSON schema when a run is created,
but an undeclared key is merged in unchecked. For a DAG that declares params, an unknown
key is almost always a typo (``learnig_rate``) or an attempt to steer a job; this ASGI
middleware answers such a ``POST /api/v2/dags/<dag_id>/dagRuns`` (the UI's trigger form
uses the same endpoint) with 400 naming the keys, before any run exists. DAGs without
params are left alone. Runs created other ways (CLI, TriggerDagRunOperator) meet the same
rule in each DAG's first task, ``check_conf``.
"""

from __future__ import annotations

import json
import re
from typing import Any

TRIGGER_PATH = re.compile(r"^/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/?$")


def unknown_conf_keys(conf: Any, declared: set[str]) -> list[str]:
    """Keys of ``conf`` that are not declared params (none when the DAG declares none)."""
    if not declared or not isinstance(conf, dict):
        return []
    return sorted(set(conf) - declared)


def declared_params(dag_id: str) -> set[str]:
    from airflow.models.serialized_dag import SerializedDagModel

    dag = SerializedDagModel.get_dag(dag_id)
    return set(dag.params.keys()) if dag is not None else set()


class StrictConfMiddleware:
    """Pure ASGI middleware: reads the trigger body once and replays it downstream."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        match = TRIGGER_PATH.match(scope.get("path", "")) if scope["type"] == "http" else None
        if not match or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            conf = json.loads(body or b"{}").get("conf")
        except (ValueError, AttributeError):
            conf = None  # malformed bodies are the endpoint's own 4xx to give
        if conf:
            from starlette.concurrency import run_in_threadpool

            dag_id = match["dag_id"]
            declared = await run_in_threadpool(declared_params, dag_id)
            unknown = unknown_conf_keys(conf, declared)
            if unknown:
                detail = f"unknown parameter(s) {unknown} for dag {dag_id}; allowed: {sorted(declared)}"
                payload = json.dumps({"detail": detail}).encode()
                await send({
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
                })
                await send({"type": "http.response.body", "body": payload})
                return

        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
