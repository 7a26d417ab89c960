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

A trigger's ``logical_date`` is checked at the same door, for every DAG:

- beyond now (more than :data:`MAX_CLOCK_SKEW` ahead), it is refused with 400 naming
  ``logical_date``: the scheduler starts no run before its logical date, so such a run would
  sit "running" with no task started, holding the DAG's active-run slot, for as long as the
  date is ahead (Airflow 3.3 accepts it and logs "Logical date is in future" every loop);
- already the logical date of a run of that DAG, it is refused with 409 naming the run that
  holds it (its id, type and state), where Airflow answers "Unique constraint violation".

Only a caller Airflow would let in is answered (a valid token, or a deployment that lets
everyone in as admin): this middleware runs before Airflow's authentication, and its answers
name params and runs, so any other request is passed on for Airflow to refuse (401/403).

A backfill of future dates is refused by Airflow itself ("Backfill cannot be executed for
future dates"); a run the CLI writes without the API meets the future-date rule where it is
written (:mod:`ml_platform_api.run_guard`).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

TRIGGER_ROUTE = re.compile(r"^/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/?$")
BACKFILL_ROUTE = re.compile(r"^/api/v2/backfills(?:/dry_run)?/?$")
# How far ahead of this server's clock a trigger's logical date may be (the caller's clock
# may run a little ahead): a run that early starts as soon as its date is reached.
MAX_CLOCK_SKEW = dt.timedelta(minutes=5)


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


def requested_logical_date(payload: Any) -> dt.datetime | None:
    """A trigger body's ``logical_date`` as an aware datetime; None when it is absent, null or
    not an aware ISO 8601 time (the endpoint gives its own 422 for those)."""
    value = payload.get("logical_date") if isinstance(payload, dict) else None
    if not isinstance(value, str):
        return None
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def future_date_refusal(logical_date: dt.datetime, now: dt.datetime) -> str | None:
    """Why a trigger for ``logical_date`` is refused at ``now``, or None when it is not ahead."""
    if logical_date <= now + MAX_CLOCK_SKEW:
        return None
    return (
        f"logical_date {logical_date.isoformat()} is in the future (now {now.isoformat(timespec='seconds')}, "
        f"{MAX_CLOCK_SKEW.total_seconds() / 60:g} minutes of clock skew allowed): the scheduler starts no run "
        "before its logical date, so the run would wait holding the DAG's active-run slot; give a logical "
        "date up to now, or none (the run then takes the trigger time)"
    )


def run_holding(dag_id: str, logical_date: dt.datetime) -> dict | None:
    """The run of ``dag_id`` whose logical date is ``logical_date``: its id, type and state."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalars(
            select(DagRun).where(DagRun.dag_id == dag_id, DagRun.logical_date == logical_date)
        ).first()
        if run is None:
            return None
        return {"run_id": run.run_id, "run_type": _value(run.run_type), "state": _value(run.state)}


def _value(member: Any) -> str:
    return str(getattr(member, "value", member))


def duplicate_date_refusal(dag_id: str, logical_date: dt.datetime, holder: dict) -> str:
    return (
        f"logical_date {logical_date.isoformat()} of dag {dag_id} is held by run {holder['run_id']!r} "
        f"({holder['run_type']}, {holder['state']}): a DAG has one run per logical date; clear that run "
        "to process its day again, or trigger with another logical date"
    )


def request_token(scope: dict) -> str | None:
    """The caller's JWT as Airflow reads it: ``Authorization: Bearer``, else the ``_token`` cookie."""
    from http.cookies import SimpleCookie

    headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope.get("headers", [])}
    scheme, _, credentials = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    cookie = SimpleCookie()
    try:
        cookie.load(headers.get("cookie", ""))
    except Exception:  # a malformed Cookie header: no token
        return None
    return cookie["_token"].value if "_token" in cookie else None


async def authenticated(scope: dict) -> bool:
    """Whether Airflow's authentication would let this request in."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.configuration import conf

    manager = get_auth_manager()
    if isinstance(manager, SimpleAuthManager) and conf.getboolean("core", "simple_auth_manager_all_admins"):
        return True
    if (token := request_token(scope)) is None:
        return False
    try:
        await manager.get_user_from_token(token)
    except Exception:  # expired, invalid or revoked: Airflow answers it
        return False
    return True


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
        if target is None or not await authenticated(scope):
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
            payload, conf = None, None  # malformed bodies are the endpoint's own 4xx to give
        refusal = await self.refusal(dag_id, conf, payload if conf_key == "conf" else None)
        if refusal is not None:
            status, detail = refusal
            answer = json.dumps({"detail": detail}).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())],
                }
            )
            await send({"type": "http.response.body", "body": answer})
            return

        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def refusal(self, dag_id: Any, conf: Any, trigger: Any) -> tuple[int, str] | None:
        """``(status, detail)`` refusing the request, or None to pass it on. ``trigger`` is the
        body of a trigger (None for a backfill): its logical date is checked too."""
        if not isinstance(dag_id, str):
            return None
        from starlette.concurrency import run_in_threadpool

        if conf:
            declared = await run_in_threadpool(declared_params, dag_id)
            if unknown := unknown_conf_keys(conf, declared):
                return 400, f"unknown parameter(s) {unknown} for dag {dag_id}; allowed: {sorted(declared)}"
        logical_date = requested_logical_date(trigger)
        if logical_date is None:
            return None
        if future := future_date_refusal(logical_date, dt.datetime.now(dt.UTC)):
            return 400, future
        if holder := await run_in_threadpool(run_holding, dag_id, logical_date):
            return 409, duplicate_date_refusal(dag_id, logical_date, holder)
        return None
