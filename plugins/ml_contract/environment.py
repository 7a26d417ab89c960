"""The environment variables an MLflow client reads, and which of them are secrets.

The Airflow side sets them from the MLflow connection (``ml_registry.hooks``) and hands them
to the jobs as environment, never as arguments (``ml_registry.spark_submit``,
``ml_registry.synapse``); a job's driver passes them on to its training ranks
(``spark_jobs.training.launch``, the ``MLFLOW_`` prefix of its allow-list).
"""

from __future__ import annotations

MLFLOW_URI_VAR = "MLFLOW_TRACKING_URI"
# The credentials: masked in logs, never on a command line.
MLFLOW_CREDENTIAL_VARS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")
# Everything an MLflow client reads to reach and authenticate to the server.
MLFLOW_CLIENT_VARS = (MLFLOW_URI_VAR, *MLFLOW_CREDENTIAL_VARS)
