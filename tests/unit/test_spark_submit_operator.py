"""The operator's reading of the Spark connection and its use of the provider, held to
the installed provider: a provider upgrade that changes either fails here, not silently
in a deployment (credentials on a command line, a kill or a retry that stops nothing)."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

CONNECTIONS = {
    "local": {"conn_type": "spark", "host": "local[2]"},
    "standalone": {"conn_type": "spark", "host": "spark://master", "port": 7077},
    "standalone-cluster": {"conn_type": "spark", "host": "spark://master:7077", "extra": {"deploy-mode": "cluster"}},
    "yarn": {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster", "queue": "ml"}},
    "yarn-client": {"conn_type": "spark", "host": "yarn"},
    "kubernetes": {"conn_type": "spark", "host": "k8s://https://api:6443", "extra": {"deploy-mode": "cluster"}},
    "kubernetes-uri": {"conn_type": "k8s", "host": "https://api", "port": 6443},
}


@pytest.mark.parametrize("name", [*CONNECTIONS, "missing"])
def test_env_vars_reach_the_command_line_exactly_where_the_provider_puts_them_there(monkeypatch, name):
    from airflow.providers.apache.spark.hooks import spark_submit as spark_submit_hook
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.sdk.exceptions import AirflowException

    from ml_registry.spark_submit import env_vars_reach_command_line

    # Building a hook for a k8s:// master needs only the module attribute, not a cluster.
    monkeypatch.setattr(spark_submit_hook, "kube_client", SimpleNamespace(), raising=False)
    if name != "missing":
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_UNDER_TEST", json.dumps(CONNECTIONS[name]))
    hook = SparkSubmitHook(conn_id="spark_under_test", env_vars={"PROBE": "value"})
    try:
        command = " ".join(hook._build_spark_submit_command("job.py"))
    except AirflowException as refused:  # standalone-cluster mode: no env_vars at all
        assert "env_vars is not supported" in str(refused)
        command = ""
    assert env_vars_reach_command_line("spark_under_test") == ("PROBE=value" in command), command


@pytest.mark.parametrize("deploy_mode", [None, "client", "cluster"])
@pytest.mark.parametrize("name", [*CONNECTIONS, "missing"])
def test_standalone_cluster_mode_is_recognised_exactly_where_the_provider_refuses_env_vars(
    monkeypatch, name, deploy_mode
):
    """The operator refuses what the provider would refuse once the command is built: a
    standalone master in cluster deploy mode, by the connection's extra or the operator's
    ``deploy_mode``."""
    from airflow.providers.apache.spark.hooks import spark_submit as spark_submit_hook
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.sdk.exceptions import AirflowException

    from ml_registry.spark_submit import standalone_cluster_mode

    monkeypatch.setattr(spark_submit_hook, "kube_client", SimpleNamespace(), raising=False)
    if name in CONNECTIONS:
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_UNDER_TEST", json.dumps(CONNECTIONS[name]))
    hook = SparkSubmitHook(conn_id="spark_under_test", deploy_mode=deploy_mode, env_vars={"PROBE": "value"})
    try:
        hook._build_spark_submit_command("job.py")
        refused = False
    except AirflowException as error:
        refused = "not supported in standalone-cluster mode" in str(error)
    assert standalone_cluster_mode("spark_under_test", deploy_mode) == refused


def test_the_operator_refuses_standalone_cluster_mode_before_it_submits(monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from ml_registry.spark_submit import MlflowSparkSubmitOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_UNDER_TEST", json.dumps(CONNECTIONS["standalone"]))
    operator = MlflowSparkSubmitOperator(
        task_id="score", application="job.py", conn_id="spark_under_test", deploy_mode="cluster"
    )
    ti = SimpleNamespace(dag_id="d", task_id="score", run_id="r", map_index=-1, try_number=1)
    with pytest.raises(AirflowFailException, match="standalone master in cluster deploy mode") as refused:
        operator.execute({"ti": ti})
    assert "client deploy mode" in str(refused.value)
    assert operator.job_key is None  # refused before the job had an identity or a process


def test_env_vars_reach_spark_submits_environment_on_a_local_master(monkeypatch, tmp_path):
    """The job's identity reaches its processes through ``env_vars``: the provider must pass
    them to spark-submit as its environment. A stand-in spark-submit records what it got."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    seen = tmp_path / "env.json"
    fake = tmp_path / "bin" / "spark-submit"
    fake.parent.mkdir()
    fake.write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        f"json.dump({{'env': dict(os.environ), 'argv': sys.argv}}, open({str(seen)!r}, 'w'))\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_UNDER_TEST", json.dumps(CONNECTIONS["local"]))
    SparkSubmitHook(conn_id="spark_under_test", env_vars={"ML_SPARK_JOB": "d/t/r/-1"}).submit("job.py")
    got = json.loads(seen.read_text())
    assert got["env"]["ML_SPARK_JOB"] == "d/t/r/-1"
    assert not any("ML_SPARK_JOB" in arg for arg in got["argv"])


@pytest.fixture
def spark_submit(monkeypatch, tmp_path):
    """The real ``spark-submit`` of this environment on a local master, as the operator's
    hook runs it (the test's tier: integration); an MLflow connection the job never calls."""
    import sys
    from pathlib import Path

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_UNDER_TEST", json.dumps(CONNECTIONS["local"]))
    monkeypatch.setenv("AIRFLOW_CONN_MLFLOW_UNDER_TEST", json.dumps({"conn_type": "http", "host": "127.0.0.1"}))

    def submit(status: int) -> None:
        from ml_registry.spark_submit import MlflowSparkSubmitOperator

        job = tmp_path / f"exit_{status}.py"
        job.write_text(f"print('the job fails with status {status}')\nraise SystemExit({status})\n")
        operator = MlflowSparkSubmitOperator(
            task_id="train", application=str(job), conn_id="spark_under_test", mlflow_conn_id="mlflow_under_test"
        )
        ti = SimpleNamespace(dag_id="d", task_id="train", run_id="r", map_index=-1, try_number=1)
        operator.execute({"ti": ti})

    return submit


def test_a_job_exiting_not_retryable_fails_the_task_without_retries_others_retry(spark_submit):
    """spark-submit passes its driver's exit status on (client deploy mode): a job that exits
    with EXIT_NOT_RETRYABLE (a diverged training) fails the task at once, any other status
    stays an ordinary failure that Airflow retries."""
    from airflow.sdk.exceptions import AirflowFailException

    from ml_contract.exit_codes import EXIT_NOT_RETRYABLE

    with pytest.raises(AirflowFailException, match=f"exited with status {EXIT_NOT_RETRYABLE}.*without retrying"):
        spark_submit(EXIT_NOT_RETRYABLE)
    with pytest.raises(Exception, match="Error code is: 1") as retried:
        spark_submit(1)
    assert not isinstance(retried.value, AirflowFailException)


def test_a_job_killed_by_on_kill_fails_its_task(monkeypatch, tmp_path):
    """``on_kill`` waits for the job's processes to end without reaping spark-submit, the
    task's own child, so that the provider reads its real exit status and the attempt fails.
    (Reaped by that wait, CPython reports status 0: a job killed mid-run passed as a success,
    seen on a loaded machine, 2026-12-07.) The stand-in spark-submit's child ignores SIGTERM
    and holds its output open until the SIGKILL, as a slow Spark worker does, so the wait
    always comes first."""
    import sys
    import threading
    import time

    from ml_registry.spark_submit import MlflowSparkSubmitOperator

    started = tmp_path / "started"
    child = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    fake = tmp_path / "bin" / "spark-submit"
    fake.parent.mkdir()
    fake.write_text(
        f"#!{sys.executable}\nimport pathlib, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {child!r}])\n"
        f"pathlib.Path({str(started)!r}).touch()\ntime.sleep(120)\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_UNDER_TEST", json.dumps(CONNECTIONS["local"]))
    monkeypatch.setenv("AIRFLOW_CONN_MLFLOW_UNDER_TEST", json.dumps({"conn_type": "http", "host": "127.0.0.1"}))
    operator = MlflowSparkSubmitOperator(
        task_id="train", application="job.py", conn_id="spark_under_test", mlflow_conn_id="mlflow_under_test"
    )
    ti = SimpleNamespace(dag_id="d", task_id="train", run_id="r", map_index=-1, try_number=1)
    outcome: dict = {}

    def attempt() -> None:
        try:
            operator.execute({"ti": ti})
            outcome["error"] = None
        except Exception as err:  # noqa: BLE001 - the outcome is what the test inspects
            outcome["error"] = err

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not started.exists():
        assert time.monotonic() < deadline, "the stand-in spark-submit did not start"
        time.sleep(0.05)
    time.sleep(0.5)  # its child started too
    operator.on_kill()
    thread.join(30)
    assert not thread.is_alive(), "execute did not return"
    assert "Error code is: -15" in str(outcome["error"]), outcome
