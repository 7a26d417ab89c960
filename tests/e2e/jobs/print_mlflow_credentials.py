"""Prints the MLflow credentials this process received, as a careless job might, one line
per variable (``<unset>`` when absent, so a test can tell a masked value from a missing one).
Runs as spark-submit's Python application; it needs no SparkSession for that."""

from __future__ import annotations

import os

for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
    print(f"{name}={os.environ.get(name, '<unset>')}", flush=True)
