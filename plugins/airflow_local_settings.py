"""Airflow's local settings for this package's deployments: every Airflow process whose
plugins folder is this one (the CLI, scheduler, API server, DAG processor, task runners)
imports it on start-up. It declares no cluster policy; it installs the guard that refuses a
manual run dated in the future however the run is created (``ml_platform_api.run_guard``).
A deployment with an ``airflow_local_settings.py`` of its own calls ``install()`` there."""

from ml_platform_api.run_guard import install

__all__: list[str] = []  # no policy functions, nothing copied into airflow.settings

install()
