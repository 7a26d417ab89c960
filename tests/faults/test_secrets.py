"""Secrets: an MLflow password in the connection reaches the jobs only through their
environment, never a spark-submit command line, a task log or anything the run writes.

``mnist_batch_scoring`` runs through ``airflow dags test`` (ingest, gate, score: two
spark-submits and the gate talk to MLflow) with ``login``/``password`` in
``AIRFLOW_CONN_MLFLOW_DEFAULT`` (the local server has no auth and ignores them). While it
runs, a thread reads the command line of every process of the run; afterwards every file
under the stack's state folder (task logs, Airflow's database, manifests, data, MLflow's
store) and the command's output (``dags test`` prints the task logs there) are searched
for the password.

Training: ``horovod.spark.run`` sends the environment it is given to every rank over
Horovod's unencrypted task RPC. Two Horovod ranks train in this process's local[2] session
with sentinel secrets (Airflow connections, the metadata-DB URL, a storage connection
string, an unrelated secret) planted in the driver's environment after the session's JVM
started, so a rank that has one received it from the driver. A thread reads each rank's
environment and the listening sockets of this process and its descendants meanwhile.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import uuid
from pathlib import Path
from types import SimpleNamespace

import psutil
import pyarrow.dataset as pads
import pytest

from faults_support import MARKER_VAR, WORKFLOW, log_untrained_model, marked_processes, mlflow_client_env, new_marker
from local_stack import VENV_BIN, SocketWatch

LOGICAL_DATE = PARTITION = "2026-10-10"  # batch scoring processes the day of its logical date
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
    write_drop(WORKFLOW, faults_stack.dataset("raw"), PARTITION, ROWS, seed=9)
    stack.migrate()

    marker = new_marker()
    connection = {
        "conn_type": "http",
        "host": "127.0.0.1",
        "port": stack.mlflow_port,
        "schema": "http",
        "login": "faults-user",
        "password": secret,
    }
    env = {
        **stack.env(),
        "AIRFLOW_CONN_MLFLOW_DEFAULT": json.dumps(connection),
        "ML_MNIST_MODEL_NAME": model,
        MARKER_VAR: marker,
    }
    with CommandLineWatch(marker, secret) as watch:
        completed = subprocess.run(
            [str(VENV_BIN / "airflow"), "dags", "test", "mnist_batch_scoring", LOGICAL_DATE],
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
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


@pytest.mark.parametrize(
    ("master", "conf_prefix"),
    [("yarn", "spark.yarn.appMasterEnv."), ("k8s://https://k8s.example.com:6443", "spark.kubernetes.driverEnv.")],
    ids=["yarn", "kubernetes"],
)
def test_credentials_are_refused_where_env_vars_become_command_line_conf(monkeypatch, master, conf_prefix):
    """YARN and Kubernetes turn env_vars into --conf arguments: no credentials there."""
    from airflow.providers.apache.spark.hooks import spark_submit as spark_submit_hook
    from airflow.sdk.exceptions import AirflowFailException

    from ml_registry.spark_submit import MLFLOW_CREDENTIAL_VARS, MlflowSparkSubmitOperator

    # The Spark hook needs the Kubernetes provider's client module for any k8s:// master; a
    # Kubernetes deployment installs that provider, this environment does not, and building
    # a command never calls the client.
    monkeypatch.setattr(spark_submit_hook, "kube_client", SimpleNamespace(), raising=False)
    secret = f"pw-{uuid.uuid4().hex}"
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER", json.dumps({"conn_type": "spark", "host": master}))
    monkeypatch.setenv(
        "AIRFLOW_CONN_MLFLOW_REMOTE",
        json.dumps(
            {"conn_type": "http", "host": "mlflow.example.com", "schema": "https", "login": "svc", "password": secret}
        ),
    )

    def operator(**kwargs) -> MlflowSparkSubmitOperator:
        return MlflowSparkSubmitOperator(
            task_id="t", application="job.py", conn_id="spark_cluster", mlflow_conn_id="mlflow_remote", **kwargs
        )

    refusing = operator()
    with pytest.raises(
        AirflowFailException, match="MLflow connection 'mlflow_remote' has credentials.*pass_mlflow_credentials=False"
    ):
        refusing.mlflow_env()

    uri_only = operator(pass_mlflow_credentials=False)
    env = uri_only.mlflow_env()
    assert env == {"MLFLOW_TRACKING_URI": "https://mlflow.example.com"}
    uri_only.env_vars = env
    command = uri_only._get_hook()._build_spark_submit_command("job.py")
    assert command[command.index("--master") + 1] == master
    assert f"{conf_prefix}MLFLOW_TRACKING_URI=https://mlflow.example.com" in command
    assert secret not in " ".join(command)
    assert not any(name in " ".join(command) for name in MLFLOW_CREDENTIAL_VARS)


@pytest.mark.parametrize(("setting", "passed"), [("true", True), ("false", False)])
def test_every_spark_task_follows_the_credentials_setting(parse_dags, setting, passed):
    """``ML_PASS_MLFLOW_CREDENTIALS=false`` (a cluster that gives the driver a secret of its
    own) reaches every Spark task of every DAG."""
    from ml_registry.spark_submit import MlflowSparkSubmitOperator

    bag = parse_dags(ML_PASS_MLFLOW_CREDENTIALS=setting)
    spark_tasks = [t for dag in bag.dags.values() for t in dag.tasks if isinstance(t, MlflowSparkSubmitOperator)]
    assert len(spark_tasks) >= 8
    assert {t.pass_mlflow_credentials for t in spark_tasks} == {passed}


# Planted in the training driver's environment; none may reach a rank.
DRIVER_SECRETS = {
    "AIRFLOW_CONN_WAREHOUSE": "postgresql://svc:sentinel-conn-pw@warehouse.internal/db",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://airflow:sentinel-db-pw@db.internal/airflow",
    "AZURE_STORAGE_CONNECTION_STRING": "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=sentinel-key",
    "PAYMENTS_API_SECRET": "sentinel-unrelated-secret",
}
# What rank 0 needs to log metrics: it must arrive (so the test sees what the RPC carries).
RANK_SETTING = ("MLFLOW_TRACKING_URI", "http://127.0.0.1:9/sentinel-tracking-uri")


class RankWatch(SocketWatch):
    """Listening sockets of this process and its descendants, and each Horovod rank's
    environment (by rank)."""

    def __init__(self) -> None:
        super().__init__(interval=0.1)
        self.rank_envs: dict[str, dict[str, str]] = {}

    def observe(self, proc, cmdline: str) -> None:
        if "gloo_exec_fn" in cmdline:
            env = proc.environ()
            if "HOROVOD_RANK" in env:
                self.rank_envs.setdefault(env["HOROVOD_RANK"], env)


@pytest.fixture(scope="module")
def horovod_training(ingest_spark, base_partition, faults_stack, tmp_path_factory):
    """Two Horovod ranks, one epoch, through ``run_horovod`` as the train job calls it."""
    from spark_jobs import workflows
    from spark_jobs.dataset import filter_training_rows
    from spark_jobs.partitions import read_partitions
    from spark_jobs.training.launch import run_horovod
    from spark_jobs.training.loop import TrainConfig
    from spark_jobs.training.shards import write_training_shards

    window_df = read_partitions(ingest_spark, str(faults_stack.dataset("curated")), base_partition, base_partition)
    shard_dir = tmp_path_factory.mktemp("horovod-env") / "shards"
    shard_files = write_training_shards(filter_training_rows(window_df, 20, 7), str(shard_dir), 2)
    # Horovod's launcher installs its own SIGINT/SIGTERM handlers in the driver.
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in [*DRIVER_SECRETS.items(), RANK_SETTING]:
            patch.setenv(name, value)
        with RankWatch() as watch:
            rank0 = run_horovod(
                ingest_spark, TrainConfig.for_workflow(workflows.load("mnist"), epochs=1), shard_files, 2, None
            )
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
    return {"rank0": rank0, "watch": watch}


def test_horovod_ranks_receive_no_secret_of_the_driver(horovod_training):
    rank0, watch = horovod_training["rank0"], horovod_training["watch"]
    assert rank0["rank"] == 0 and [h["epoch"] for h in rank0["history"]] == [1]
    assert sorted(watch.rank_envs) == ["0", "1"], "the watch missed a rank"
    for rank, env in watch.rank_envs.items():
        leaked = sorted(set(DRIVER_SECRETS) & set(env))
        assert leaked == [], f"rank {rank} received {leaked}"
        assert not any(value in env.values() for value in DRIVER_SECRETS.values())
        # Not vacuous: what the driver sends does arrive.
        name, value = RANK_SETTING
        assert env.get(name) == value, f"rank {rank} did not get {name} from the driver"


def test_horovod_listens_on_loopback_only(horovod_training):
    """Driver service, task services, Gloo rendezvous and the ranks' Gloo pairs: all on
    127.0.0.1, as the local[2] Spark driver is (SPARK_LOCAL_IP)."""
    watch = horovod_training["watch"]
    assert watch.exposed() == []
    # Not vacuous: the watch saw the long-lived Horovod listeners.
    # By pid: pytest-xdist retitles its worker processes, so their command line changes.
    assert os.getpid() in watch.listener_pids, "driver service, rendezvous (this process)"
    assert watch.holders("pyspark.daemon"), "a task service (in a Spark Python worker)"
    # Gloo's pair listeners live only while the ranks connect, too briefly to sample
    # reliably: each binds the address of the interface its rank was given.
    from spark_jobs.horovod_launch import interface_of

    loopback = interface_of("127.0.0.1")
    assert sorted(watch.rank_envs) == ["0", "1"], "the watch missed a rank"
    for rank, env in watch.rank_envs.items():
        assert env.get("HOROVOD_GLOO_IFACE") == loopback, f"rank {rank}: {env.get('HOROVOD_GLOO_IFACE')}"
