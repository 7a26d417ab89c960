"""close_abandoned_runs on a real MLflow tracking store (SQLAlchemy on a SQLite file)."""

from __future__ import annotations

import pytest

from spark_jobs.train import close_abandoned_runs


@pytest.fixture
def client(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return MlflowClient(tracking_uri=uri)


def test_running_runs_of_earlier_tries_of_the_same_task_are_closed_as_killed(client):
    experiment_id = client.create_experiment("abandoned")
    task = {"airflow_run_id": "scheduled__2026-11-29", "airflow_dag_id": "ml_nightly_retrain"}
    stale = client.create_run(experiment_id, tags=task).info.run_id
    ended = client.create_run(experiment_id, tags=task).info.run_id
    client.set_terminated(ended, status="FAILED")
    other_run = client.create_run(experiment_id, tags={**task, "airflow_run_id": "manual__x"}).info.run_id
    other_dag = client.create_run(experiment_id, tags={**task, "airflow_dag_id": "ml_train_on_demand"}).info.run_id

    assert close_abandoned_runs(experiment_id, task) == [stale]
    status = {run_id: client.get_run(run_id).info.status for run_id in (stale, ended, other_run, other_dag)}
    assert status == {stale: "KILLED", ended: "FAILED", other_run: "RUNNING", other_dag: "RUNNING"}


def test_a_job_started_by_hand_touches_nothing(client):
    experiment_id = client.create_experiment("by-hand")
    running = client.create_run(experiment_id).info.run_id
    assert close_abandoned_runs(experiment_id, {}) == []
    assert client.get_run(running).info.status == "RUNNING"
