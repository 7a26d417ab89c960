"""The trigger-conf middleware, driven through a real ASGI stack (Starlette test client)."""

from __future__ import annotations

import datetime as dt

import pytest
from fastapi import FastAPI, Request
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from ml_platform_api import strict_conf
from ml_platform_api.strict_conf import StrictConfMiddleware, unknown_conf_keys


def test_unknown_keys_are_those_not_declared():
    assert unknown_conf_keys({"epochs": 1, "learnig_rate": 0.1}, {"epochs", "learning_rate"}) == ["learnig_rate"]
    assert unknown_conf_keys({"anything": 1}, set()) == []  # DAGs without params: not ours to police
    assert unknown_conf_keys(None, {"epochs"}) == []


@pytest.fixture(autouse=True)
def signed_in(monkeypatch):
    """Every request of these tests comes from a caller Airflow lets in (its auth manager is
    not running here); ``signed_in(False)`` makes them anonymous."""

    def set_caller(valid: bool) -> None:
        async def authenticated(scope: dict) -> bool:
            return valid

        monkeypatch.setattr(strict_conf, "authenticated", authenticated)

    set_caller(True)
    return set_caller


def test_an_anonymous_request_is_passed_on_unread_for_airflow_to_refuse(client, signed_in):
    """Airflow authenticates after this middleware: an answer here would tell anyone the
    DAG's params (or a run's id), so an anonymous request goes on to Airflow's own 401."""
    signed_in(False)
    response = client.post("/api/v2/dags/train/dagRuns", json={"conf": {"epochs": 2, "jars": "evil.jar"}})
    assert response.status_code == 200 and response.json() == {"received": {"epochs": 2, "jars": "evil.jar"}}


@pytest.mark.parametrize(
    ("headers", "token"),
    [
        ({"Authorization": "Bearer abc.def"}, "abc.def"),
        ({"authorization": "bearer  abc.def "}, "abc.def"),
        ({"Cookie": "theme=dark; _token=abc.def"}, "abc.def"),
        ({"Authorization": "Bearer abc", "Cookie": "_token=xyz"}, "abc"),  # the explicit one wins
        ({"Authorization": "Basic dXNlcjpwdw=="}, None),
        ({"Cookie": "theme=dark"}, None),
        ({"Cookie": '_token="unterminated'}, None),
        ({}, None),
    ],
)
def test_the_callers_token_is_read_as_airflow_reads_it(headers, token):
    scope = {"headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}
    assert strict_conf.request_token(scope) == token


@pytest.fixture()
def client(monkeypatch):
    monkeypatch.setattr(
        strict_conf, "declared_params", lambda dag_id: {"epochs", "promote"} if dag_id == "train" else set()
    )

    async def trigger(request):
        return JSONResponse({"received": (await request.json()).get("conf")})

    app = Starlette(routes=[Route("/api/v2/dags/{dag_id}/dagRuns", trigger, methods=["POST"])])
    return TestClient(StrictConfMiddleware(app))


def test_unknown_key_is_refused_with_400_naming_it(client):
    response = client.post("/api/v2/dags/train/dagRuns", json={"conf": {"epochs": 2, "jars": "evil.jar"}})
    assert response.status_code == 400
    assert "'jars'" in response.json()["detail"] and "epochs" in response.json()["detail"]


def test_declared_keys_pass_through_with_the_body_intact(client):
    response = client.post("/api/v2/dags/train/dagRuns", json={"conf": {"epochs": 2}})
    assert response.status_code == 200 and response.json() == {"received": {"epochs": 2}}


def test_dags_without_params_and_other_routes_are_untouched(client):
    assert client.post("/api/v2/dags/other/dagRuns", json={"conf": {"x": 1}}).status_code == 200


def airflow_like_app(root_path: str) -> TestClient:
    """A FastAPI app built the way Airflow builds its API server.

    Airflow passes the path of ``[api] base_url`` as FastAPI's ``root_path`` and adds plugin
    middlewares to that app, so the middleware sees ``scope["path"]`` with the prefix and
    ``scope["root_path"]`` set to it. (``Request`` is imported at module level: FastAPI
    resolves the endpoints' string annotations in this module's globals.)
    """
    app = FastAPI(root_path=root_path)

    @app.post("/api/v2/dags/{dag_id}/dagRuns")
    async def trigger(dag_id: str, request: Request) -> dict:
        return {"dag_id": dag_id, "received": (await request.json()).get("conf")}

    @app.post("/api/v2/backfills")
    @app.post("/api/v2/backfills/dry_run")
    async def backfill(request: Request) -> dict:
        return {"received": (await request.json()).get("dag_run_conf")}

    app.add_middleware(StrictConfMiddleware)
    return TestClient(app)


@pytest.fixture()
def declared(monkeypatch):
    monkeypatch.setattr(
        strict_conf, "declared_params", lambda dag_id: {"epochs", "promote"} if dag_id == "train" else set()
    )


@pytest.mark.parametrize("root_path", ["", "/airflow", "/team-a/airflow"])
@pytest.mark.parametrize(
    "route",
    ["/api/v2/dags/train/dagRuns", "/api/v2/dags/train/dagRuns/", "/api/v2/dags/tr%61in/dagRuns"],
)
def test_unknown_key_is_refused_under_any_deployment_prefix(declared, root_path, route):
    client = airflow_like_app(root_path)
    response = client.post(root_path + route, json={"conf": {"epochs": 2, "jars": "evil.jar"}})
    assert response.status_code == 400, response.text
    assert "'jars'" in response.json()["detail"]


def test_prefix_stripped_by_a_proxy_is_still_the_trigger_route(declared):
    client = airflow_like_app("/airflow")
    response = client.post("/api/v2/dags/train/dagRuns", json={"conf": {"jars": "evil.jar"}})
    assert response.status_code == 400


@pytest.mark.parametrize("root_path", ["", "/airflow"])
@pytest.mark.parametrize("route", ["/api/v2/backfills", "/api/v2/backfills/dry_run"])
def test_backfill_conf_meets_the_same_rule(declared, root_path, route):
    client = airflow_like_app(root_path)
    body = {"dag_id": "train", "from_date": "2024-01-01T00:00:00Z", "to_date": "2024-01-02T00:00:00Z"}
    refused = client.post(root_path + route, json={**body, "dag_run_conf": {"epochs": 1, "packages": "x"}})
    assert refused.status_code == 400 and "'packages'" in refused.json()["detail"]
    accepted = client.post(root_path + route, json={**body, "dag_run_conf": {"epochs": 1}})
    assert accepted.status_code == 200 and accepted.json() == {"received": {"epochs": 1}}


def test_prefixed_declared_keys_and_other_routes_pass_through(declared):
    client = airflow_like_app("/airflow")
    accepted = client.post("/airflow/api/v2/dags/train/dagRuns", json={"conf": {"epochs": 2}})
    assert accepted.status_code == 200 and accepted.json() == {"dag_id": "train", "received": {"epochs": 2}}
    assert client.post("/airflow/api/v2/dags/other/dagRuns", json={"conf": {"x": 1}}).status_code == 200


@pytest.fixture()
def no_runs(monkeypatch):
    """No run holds any logical date (the real lookup runs in the platform's API server:
    tests/platform/test_platform_flows.py)."""
    monkeypatch.setattr(strict_conf, "run_holding", lambda dag_id, logical_date: None)


def iso(when: dt.datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize("dag_id", ["train", "other"])  # with and without declared params
def test_a_future_logical_date_is_refused_with_400_naming_it(declared, no_runs, dag_id):
    client = airflow_like_app("")
    for ahead in (strict_conf.MAX_CLOCK_SKEW + dt.timedelta(minutes=1), dt.timedelta(days=365 * 70)):
        when = dt.datetime.now(dt.UTC) + ahead
        response = client.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": iso(when), "conf": {}})
        assert response.status_code == 400, response.text
        detail = response.json()["detail"]
        assert detail.startswith(f"logical_date {when.isoformat()} is in the future"), detail


def test_now_a_little_skew_the_past_and_no_date_pass(declared, no_runs):
    client = airflow_like_app("")
    now = dt.datetime.now(dt.UTC)
    for body in (
        {"logical_date": iso(now + strict_conf.MAX_CLOCK_SKEW - dt.timedelta(seconds=30))},
        {"logical_date": iso(now - dt.timedelta(days=400))},
        {"logical_date": None},
        {},
    ):
        response = client.post("/api/v2/dags/train/dagRuns", json={**body, "conf": {"epochs": 1}})
        assert response.status_code == 200 and response.json()["received"] == {"epochs": 1}, (body, response.text)


def test_a_taken_logical_date_is_refused_with_409_naming_the_run_that_holds_it(declared, monkeypatch):
    taken = dt.datetime(2026, 12, 1, 2, tzinfo=dt.UTC)
    holder = {"run_id": "scheduled__2026-12-01T02:00:00+00:00", "run_type": "scheduled", "state": "success"}
    asked = []

    def run_holding(dag_id, logical_date):
        asked.append((dag_id, logical_date))
        return holder if logical_date == taken else None

    monkeypatch.setattr(strict_conf, "run_holding", run_holding)
    client = airflow_like_app("")
    refused = client.post("/api/v2/dags/train/dagRuns", json={"logical_date": "2026-12-01T02:00:00Z"})
    assert refused.status_code == 409, refused.text
    detail = refused.json()["detail"]
    assert "logical_date 2026-12-01T02:00:00+00:00 of dag train" in detail and repr(holder["run_id"]) in detail
    assert "scheduled, success" in detail
    other = client.post("/api/v2/dags/train/dagRuns", json={"logical_date": "2026-12-02T02:00:00+00:00"})
    assert other.status_code == 200
    assert asked == [("train", taken), ("train", dt.datetime(2026, 12, 2, 2, tzinfo=dt.UTC))]


@given(st.text(max_size=40) | st.integers() | st.none() | st.datetimes().map(dt.datetime.isoformat))
def test_any_logical_date_value_is_read_or_left_to_the_endpoint(value):
    """Untrusted body values: a date is read, anything else is None (never an error here)."""
    when = strict_conf.requested_logical_date({"logical_date": value})
    assert when is None or when.tzinfo is not None


# -- the same rule where runs are written without the API (airflow dags trigger / test) ----


@pytest.fixture()
def guarded_session():
    """A session on an empty in-memory database, with the guard the platform's processes install
    (``plugins/airflow_local_settings.py``): the guard runs before any SQL is sent."""
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from ml_platform_api import run_guard

    run_guard.install()
    run_guard.install()  # idempotent: the listener is registered once
    with Session(create_engine("sqlite://")) as session:
        yield session


def dag_run(logical_date: dt.datetime, run_type: str):
    from airflow.models.dagrun import DagRun

    return DagRun(dag_id="train", run_id=f"{run_type}__x", logical_date=logical_date, run_type=run_type)


def test_a_manual_run_dated_ahead_is_refused_when_written_naming_logical_date(guarded_session):
    from ml_platform_api.run_guard import FutureLogicalDate

    guarded_session.add(dag_run(dt.datetime(2099, 1, 1, tzinfo=dt.UTC), "manual"))
    with pytest.raises(FutureLogicalDate, match=r"dag train: logical_date 2099-01-01T00:00:00\+00:00 is in the future"):
        guarded_session.flush()


@pytest.mark.parametrize(
    ("ahead", "run_type"),
    [(dt.timedelta(minutes=-1), "manual"), (dt.timedelta(minutes=4), "manual"), (dt.timedelta(days=1), "scheduled")],
)
def test_runs_the_rule_allows_reach_the_database(guarded_session, ahead, run_type):
    """Past, within the clock skew, or not manual: the flush goes on to SQL (here an empty
    database, so it stops there: at the missing table, not at the guard)."""
    from sqlalchemy.exc import OperationalError

    guarded_session.add(dag_run(dt.datetime.now(dt.UTC) + ahead, run_type))
    with pytest.raises(OperationalError, match="no such table: dag_run"):
        guarded_session.flush()
