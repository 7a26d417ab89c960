"""Prints the MLflow credentials this process received, as a careless job might, one line
per variable (``<unset>`` when absent, so a test can tell a masked value from a missing one).
Runs as spark-submit's Python application; it needs no SparkSession for that.

Like every job of the project it waits at exit until spark-submit has read its output
(``spark_jobs.driver_output``): a job this short would otherwise exit, and take the JVM with
it, before spark-submit has passed its three lines on to the task log on a busy machine."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository: spark_jobs

from spark_jobs.driver_output import drain_output_at_exit  # noqa: E402

drain_output_at_exit()
for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
    print(f"{name}={os.environ.get(name, '<unset>')}", flush=True)
