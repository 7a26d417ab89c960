"""Registers the model-registry gate's extra link with Airflow.

The gate operator declares the link itself (``operator_extra_links``), which is what Airflow 3
serializes (link name -> XCom key) and what the UI reads back. Registering it here as well, as
Airflow's "define an operator extra link" guide does, lists it under ``airflow plugins``.
The link deliberately binds to no operator class (see ``MlflowModelVersionLink``).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from ml_registry.links import MlflowModelVersionLink


class MlRegistryPlugin(AirflowPlugin):
    """The ``ml_registry`` plugin: extra link "MLflow model version"."""

    name = "ml_registry"
    operator_extra_links = [MlflowModelVersionLink()]
