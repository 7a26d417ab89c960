"""The trigger-conf middleware, driven through a real ASGI stack (Starlette test client)."""

from __future__ import annotations

import pytest
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


@pytest.fixture()
def client(monkeypatch):
    monkeypatch.setattr(strict_conf, "declared_params", lambda dag_id: {"epochs", "promote"} if dag_id == "train" else set())

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
