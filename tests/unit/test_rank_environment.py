"""What the training driver hands its ranks from its environment (both backends): the
allow-list of spark_jobs.training.launch, never the driver's other secrets."""

from __future__ import annotations

import pytest

from spark_jobs.training.launch import rank_environment

DRIVER_ENV = {
    "PATH": "/usr/bin",
    "PYTHONPATH": "/tmp/spark_jobs.zip",
    "OMP_NUM_THREADS": "1",
    "MLFLOW_TRACKING_URI": "https://mlflow.example.com",
    "MLFLOW_TRACKING_PASSWORD": "mlflow-pw",
    "HOROVOD_GLOO_TIMEOUT_SECONDS": "10",
    "NCCL_SOCKET_IFNAME": "eth0",
    "AIRFLOW_CONN_MLFLOW_DEFAULT": '{"password": "mlflow-pw"}',
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://airflow:pw@db/airflow",
    "AIRFLOW__CORE__FERNET_KEY": "fernet",
    "AZURE_STORAGE_CONNECTION_STRING": "AccountKey=key",
    "AWS_SECRET_ACCESS_KEY": "aws",
    "PAYMENTS_API_SECRET": "secret",
}
RANK_NEEDS = {
    "PYTHONPATH",
    "OMP_NUM_THREADS",
    "MLFLOW_TRACKING_URI",
    "MLFLOW_TRACKING_PASSWORD",
    "HOROVOD_GLOO_TIMEOUT_SECONDS",
    "NCCL_SOCKET_IFNAME",
}


@pytest.mark.parametrize("checkpoint_dir", [None, "", "/data/checkpoints/run", "file:///data/checkpoints/run"])
def test_ranks_get_only_what_they_need(checkpoint_dir):
    env = rank_environment(DRIVER_ENV, checkpoint_dir)
    assert set(env) == RANK_NEEDS
    assert env == {k: DRIVER_ENV[k] for k in RANK_NEEDS}


@pytest.mark.parametrize("url", ["abfss://ml@acct.dfs.core.windows.net/checkpoints/run", "abfs://checkpoints/run"])
def test_storage_credentials_only_with_checkpoints_on_that_storage(url):
    env = rank_environment(DRIVER_ENV, url)
    assert set(env) == RANK_NEEDS | {"AZURE_STORAGE_CONNECTION_STRING"}
