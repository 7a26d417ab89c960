"""Registers the API-server middleware that refuses undeclared trigger ``conf`` keys."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from ml_platform_api.strict_conf import StrictConfMiddleware


class MlPlatformPlugin(AirflowPlugin):
    name = "ml_platform"
    fastapi_root_middlewares = [
        {"middleware": StrictConfMiddleware, "args": [], "kwargs": {}, "name": "Strict trigger conf"}
    ]
