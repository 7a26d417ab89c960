"""Refuse run-creating requests whose ``conf`` carries keys the DAG does not declare as params.

Airflow validates each declared ``Param`` against its JSON schema when a run is created,
but an undeclared key is merged in unchecked. For a DAG that declares params, an unknown
key is almost always a typo (``learnig_rate``) or an attempt to steer a job; this ASGI
middleware answers such a request with 400 naming the keys, before any run exists:
``POST /api/v2/dags/<dag_id>/dagRuns`` (the UI's trigger form uses the same endpoint) and
``POST /api/v2/backfills`` (and its ``/dry_run``), whose ``dag_run_conf`` becomes every
backfilled run's conf. Routes are matched the way the app's router matches them: on the
path below the deployment's prefix (``[api] base_url`` with a path becomes the ASGI
``root_path``), so a prefixed deployment is policed like an unprefixed one. DAGs without
params are left alone. Runs created other ways (CLI, TriggerDagRunOperator, asset
materialisation) meet the same rule in each DAG's first task, ``check_conf``.
"""

from __future__ import annotations

import json
import re
from typing import Any

TRIGGER_ROUTE = re.compile(r"^/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/?$")
BACKFILL_ROUTE = re.compile(r"^/api/v2/backfills(?:/dry_run)?/?$")


def route_path(scope: dict) -> str:
    """The path the router matches: ``scope["path"]`` without the deployment's prefix.

    ASGI puts the prefix in both ``path`` and ``root_path`` when the request arrives with
    it, and only in ``root_path`` when a proxy has already stripped it; Starlette's router
    strips it in the first case only, and so do we. ``path`` is already percent-decoded by
    the server; decoding it again would let ``%2561`` mean one thing here and another to
    the router.
    """
    path, root_path = scope.get("path", ""), scope.get("root_path", "").rstrip("/")
    if root_path and path.startswith(root_path + "/"):
        return path[len(root_path) :]
    return path


def conf_target(scope: dict) -> tuple[str | None, str] | None:
    """For a run-creating request: where its DAG id comes from and which body key holds conf.

    Returns ``(dag_id, conf_key)`` for a trigger (the id is in the path) and
    ``(None, conf_key)`` for a backfill (the id is the body's ``dag_id``); None otherwise.
    """
    if scope["type"] != "http" or scope.get("method") != "POST":
        return None
    path = route_path(scope)
    if match := TRIGGER_ROUTE.match(path):
        return match["dag_id"], "conf"
    if BACKFILL_ROUTE.match(path):
        return None, "dag_run_conf"
    return None


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
    """Pure ASGI middleware: reads a run-creating request's body once and replays it downstream."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        target = conf_target(scope)
        if target is None:
            await self.app(scope, receive, send)
            return
        dag_id, conf_key = target
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            payload = json.loads(body or b"{}")
            conf = payload.get(conf_key)
            dag_id = dag_id if dag_id is not None else payload.get("dag_id")
        except (ValueError, AttributeError):
            conf = None  # malformed bodies are the endpoint's own 4xx to give
        if conf and isinstance(dag_id, str):
            from starlette.concurrency import run_in_threadpool

            declared = await run_in_threadpool(declared_params, dag_id)
            unknown = unknown_conf_keys(conf, declared)
            if unknown:
                detail = f"unknown parameter(s) {unknown} for dag {dag_id}; allowed: {sorted(declared)}"
                refusal = json.dumps({"detail": detail}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 400,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(refusal)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": refusal})
                return

        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
