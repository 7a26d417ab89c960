"""Secrets: an MLflow password in the connection reaches the jobs only through their
environment, never a spark-submit command line, a task log or anything the run writes.

``ml_batch_scoring`` runs through ``airflow dags test`` (ingest, gate, score: two
spark-submits and the gate talk to MLflow) with ``login``/``password`` in
``AIRFLOW_CONN_MLFLOW_DEFAULT`` (the local server has no auth and ignores them). While it
runs, a thread reads the command line of every process of the run; afterwards every file
under the stack's state folder (task logs, Airflow's database, manifests, data, MLflow's
store) and the command's output (``dags test`` prints the task logs there) are searched
for the password.
"""

from __future__ import annotations

import json
import subprocess
import threading
import uuid
from pathlib import Path

import psutil
import pyarrow.dataset as pads
import pytest

from faults_support import MARKER_VAR, log_untrained_model, marked_processes, mlflow_client_env, new_marker
from local_stack import VENV_BIN

LOGICAL_DATE, PARTITION = "2026-10-11", "2026-10-10"
ROWS = 200


class CommandLineWatch:
    """Polls the processes carrying ``marker``: their command lines, and whether a
    spark-submit among them received the secret in its environment."""

    def __init__(self, marker: str, secret: str) -> None:
        self.marker, self.secret = marker, secret
        self.command_lines: dict[int, str] = {}
        self.submit_envs_with_secret: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> CommandLineWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while not self._stop.wait(0.1):
            for proc in marked_processes(self.marker):
                try:
                    cmdline = " ".join(proc.cmdline())
                    self.command_lines.setdefault(proc.pid, cmdline)
                    if "SparkSubmit" in cmdline and proc.environ().get("MLFLOW_TRACKING_PASSWORD") == self.secret:
                        self.submit_envs_with_secret.add(proc.pid)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue

    @property
    def spark_submits(self) -> list[str]:
        return [c for c in self.command_lines.values() if "SparkSubmit" in c]


def files_containing(folder: Path, needle: bytes) -> list[str]:
    hits = []
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if needle in path.read_bytes():
                    hits.append(str(path))
            except OSError:
                continue
    return hits


@pytest.fixture(scope="module")
def secret_run(faults_stack, mlflow_client):
    from spark_jobs.sample_data import write_drop

    stack = faults_stack.stack
    secret = f"pw-{uuid.uuid4().hex}"
    model = f"faults_secret_{uuid.uuid4().hex[:8]}"
    run_id, model_uri = log_untrained_model(stack.tracking_uri, {"purpose": "secrets"})
    with mlflow_client_env(stack.tracking_uri):
        import mlflow

        version = mlflow.register_model(model_uri, model).version
    mlflow_client.set_model_version_tag(model, version, "validation_status", "passed")
    mlflow_client.set_registered_model_alias(model, "champion", version)
    write_drop(faults_stack.dataset("raw"), PARTITION, ROWS, seed=9)
    stack.migrate()

    marker = new_marker()
    connection = {
        "conn_type": "http", "host": "127.0.0.1", "port": stack.mlflow_port, "schema": "http",
        "login": "faults-user", "password": secret,
    }
    env = {
        **stack.env(),
        "AIRFLOW_CONN_MLFLOW_DEFAULT": json.dumps(connection),
        "ML_MODEL_NAME": model,
        MARKER_VAR: marker,
    }
    with CommandLineWatch(marker, secret) as watch:
        completed = subprocess.run(
            [str(VENV_BIN / "airflow"), "dags", "test", "ml_batch_scoring", LOGICAL_DATE],
            env=env, capture_output=True, text=True, timeout=1200,
        )
    scored = faults_stack.dataset("predictions") / f"ds={PARTITION}"
    return {
        "secret": secret,
        "version": str(version),
        "completed": completed,
        "watch": watch,
        "file_hits": files_containing(stack.state_dir, secret.encode()),
        "scored": pads.dataset(str(scored), format="parquet").to_table() if scored.exists() else None,
    }


def test_the_dag_ran_with_the_secret_in_the_jobs_environment(secret_run):
    completed = secret_run["completed"]
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    scored = secret_run["scored"]
    assert scored is not None and scored.num_rows == ROWS
    assert set(scored.column("model_version").to_pylist()) == {secret_run["version"]}
    watch = secret_run["watch"]
    assert len(watch.spark_submits) >= 2, "the watch missed the ingest and score jobs"
    # Not vacuous: the password did reach the jobs, through their environment.
    assert watch.submit_envs_with_secret


def test_no_command_line_holds_the_secret(secret_run):
    secret = secret_run["secret"]
    leaks = [c for c in secret_run["watch"].command_lines.values() if secret in c]
    assert leaks == []


def test_no_log_or_file_holds_the_secret(secret_run):
    completed, secret = secret_run["completed"], secret_run["secret"]
    output = completed.stdout + completed.stderr
    # `dags test` prints the task logs; they include what the jobs printed.
    assert output.count("Spark-Submit cmd:") == 2 and "ingest report:" in output and "score report:" in output
    assert secret not in output
    assert secret_run["file_hits"] == []


def test_credentials_are_refused_where_env_vars_become_command_line_conf(monkeypatch):
    """YARN (and Kubernetes) turn env_vars into --conf arguments: no credentials there."""
    from airflow.sdk.exceptions import AirflowFailException

    from ml_registry.spark_submit import MlflowSparkSubmitOperator

    secret = f"pw-{uuid.uuid4().hex}"
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", json.dumps({"conn_type": "spark", "host": "yarn"}))
    monkeypatch.setenv(
        "AIRFLOW_CONN_MLFLOW_REMOTE",
        json.dumps({"conn_type": "http", "host": "mlflow.example.com", "schema": "https", "login": "svc", "password": secret}),
    )

    def operator(**kwargs) -> MlflowSparkSubmitOperator:
        return MlflowSparkSubmitOperator(
            task_id="t", application="job.py", conn_id="spark_yarn", mlflow_conn_id="mlflow_remote", **kwargs
        )

    refusing = operator()
    with pytest.raises(AirflowFailException, match="cluster secret.*pass_mlflow_credentials=False"):
        refusing.mlflow_env(refusing._get_hook())

    uri_only = operator(pass_mlflow_credentials=False)
    env = uri_only.mlflow_env(uri_only._get_hook())
    assert env == {"MLFLOW_TRACKING_URI": "https://mlflow.example.com"}
    uri_only.env_vars = env
    command = " ".join(uri_only._get_hook()._build_spark_submit_command("job.py"))
    assert "spark.yarn.appMasterEnv.MLFLOW_TRACKING_URI=https://mlflow.example.com" in command
    assert secret not in command


@pytest.mark.parametrize(("setting", "passed"), [("true", True), ("false", False)])
def test_every_spark_task_follows_the_credentials_setting(parse_dags, setting, passed):
    """``ML_PASS_MLFLOW_CREDENTIALS=false`` (a cluster that gives the driver a secret of its
    own) reaches every Spark task of every DAG."""
    from ml_registry.spark_submit import MlflowSparkSubmitOperator

    bag = parse_dags(ML_PASS_MLFLOW_CREDENTIALS=setting)
    spark_tasks = [t for dag in bag.dags.values() for t in dag.tasks if isinstance(t, MlflowSparkSubmitOperator)]
    assert len(spark_tasks) >= 8
    assert {t.pass_mlflow_credentials for t in spark_tasks} == {passed}
