"""The benchmarks' world: the embedded stack, the job archive, spark-submit, one model.

Everything runs the way the DAGs run it: ``scripts/local_stack.py`` provides the MLflow
tracking server and the Airflow environment, jobs are submitted with the Spark settings
of ``dags/ml_platform/tasks.py`` and the ``--py-files`` archive of ``spark_jobs``, and the
model is logged by the training job's own ``log_trained_model``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for _path in (REPO / "dags", REPO / "plugins", REPO / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from benchmarks.core import BenchResult, log  # noqa: E402
from benchmarks.sizes import Sizes  # noqa: E402
from local_stack import VENV_BIN, LocalStack, free_port  # noqa: E402
from ml_platform.config import PlatformConfig  # noqa: E402
from package_jobs import package_jobs  # noqa: E402

SPARK_MASTER = "local[2]"
# Spark's default thread count for the Python workers (spark.task.cpus) made explicit, so a
# benchmark asking for it explicitly reuses the running session instead of restarting it.
IN_PROCESS_CONF = {"spark.ui.enabled": "false", "spark.executorEnv.OMP_NUM_THREADS": "1"}
SUBMIT_TIMEOUT_S = 900
# The workflow of the model every scoring benchmark uses.
MODEL_WORKFLOW = "mnist"


@dataclass
class Submitted:
    """One finished spark-submit: exit status, output, and when it ran (wall clock)."""

    returncode: int
    stdout: str
    stderr: str
    started_at: float  # time.time() just before the process started
    seconds: float

    def check(self, what: str) -> Submitted:
        if self.returncode != 0:
            raise RuntimeError(f"{what} failed (exit {self.returncode}):\n{self.stdout[-3000:]}\n{self.stderr[-6000:]}")
        return self


class SingleProcess:
    """The :class:`spark_jobs.training.collectives.Collective` of one process: nothing to communicate.

    Lets the training job's own per-rank loop run as a plain single-process torch loop.
    """

    rank = 0
    size = 1
    local_rank = 0

    def allreduce_sum(self, values: list[float]) -> list[float]:
        return list(values)

    def allreduce_min(self, value: int) -> int:
        return value

    def distribute(self, model, optimizer):
        return model, optimizer

    def step(self, optimizer, parameters, max_norm):
        from spark_jobs.training.collectives import clipped_step

        clipped_step(optimizer, parameters, max_norm)

    def close(self) -> None:
        """Nothing to tear down."""


class BenchEnv:
    """A work folder, an MLflow server, a registered model, spark-submit and a session."""

    def __init__(self, work_dir: Path) -> None:
        self.work = work_dir
        self.work.mkdir(parents=True, exist_ok=True)
        self.stack = LocalStack(state_dir=work_dir / "stack", mlflow_port=free_port(), api_port=free_port())
        # Its own archive: build/spark_jobs.zip may be rebuilt by a test run meanwhile.
        self.archive = package_jobs(work_dir / "spark_jobs.zip")
        self.cfg = PlatformConfig(
            storage_root=str(self.stack.storage_root),
            jobs_archive=str(self.archive),
            pyspark_python=str(VENV_BIN / "python"),
        )
        self._spark = None
        self._spark_conf: dict[str, str] = {}
        self._model_uris: dict[str, str] = {}

    # --- lifecycle ----------------------------------------------------------------
    def start(self) -> None:
        log(f"MLflow tracking server on port {self.stack.mlflow_port}, work folder {self.work}")
        self.stack.start_mlflow()
        # In-process Spark (the driver here, its Python workers) and MLflow calls see these.
        os.environ.update(
            MLFLOW_TRACKING_URI=self.stack.tracking_uri,
            SPARK_LOCAL_IP="127.0.0.1",
            PYSPARK_PYTHON=str(VENV_BIN / "python"),
            AIRFLOW_HOME=str(self.stack.airflow_home),
        )

    def stop(self) -> None:
        try:
            self.stop_spark()
        finally:
            self.stack.stop_mlflow()

    # --- spark-submit, as the DAG's SparkSubmitOperator does it -----------------------
    def job_spark_conf(self) -> dict[str, str]:
        """The Spark settings every DAG task passes (``PlatformConfig.spark_conf``)."""
        return self.cfg.spark_conf()

    def submit_env(self, **extra: str) -> dict[str, str]:
        """The stack's environment plus what the operator adds at execute time (MLflow)."""
        return {
            **self.stack.env(),
            "MLFLOW_TRACKING_URI": self.stack.tracking_uri,
            "ML_JOBS_ARCHIVE": str(self.archive),
            **extra,
        }

    def spark_submit(self, application: str | Path, args: list[Any], conf: dict[str, str] | None = None) -> Submitted:
        """Run one ``spark-submit`` on local[2]; returns its output and wall time."""
        cmd = [str(VENV_BIN / "spark-submit"), "--master", SPARK_MASTER]
        for key, value in {**self.job_spark_conf(), **(conf or {})}.items():
            cmd += ["--conf", f"{key}={value}"]
        cmd += ["--py-files", str(self.archive), str(application), *[str(a) for a in args]]
        started_at, started = time.time(), time.perf_counter()
        proc = subprocess.run(
            cmd, cwd=self.work, env=self.submit_env(), capture_output=True, text=True, timeout=SUBMIT_TIMEOUT_S
        )
        return Submitted(proc.returncode, proc.stdout, proc.stderr, started_at, time.perf_counter() - started)

    def submit_job(self, job: str, args: list[Any], conf: dict[str, str] | None = None) -> Submitted:
        """spark-submit ``spark_jobs/entrypoints/<job>.py``; fails loudly if the job fails."""
        return self.spark_submit(self.cfg.application(job), args, conf).check(f"spark-submit {job}")

    # --- an in-process session with the same settings --------------------------------
    def spark(self, extra_conf: dict[str, str] | None = None):
        """A local[2] session configured like the jobs' (restarted when ``extra_conf`` changes,
        so settings that only apply at start, such as executor environment, take effect)."""
        wanted = {**self.job_spark_conf(), **IN_PROCESS_CONF, **(extra_conf or {})}
        if self._spark is not None and wanted != self._spark_conf:
            self.stop_spark()
        if self._spark is None:
            from spark_jobs.session import build_spark_session

            forget_dead_jvm()

            self._spark = build_spark_session("benchmarks", master=SPARK_MASTER, extra_conf=wanted)
            self._spark.sparkContext.addPyFile(str(self.archive))
            self._spark_conf = wanted
        return self._spark

    def stop_spark(self) -> None:
        """Stop the in-process session; after a JVM that died (out of memory, say), forget
        its gateway so the next session starts a new JVM."""
        if self._spark is None:
            return
        try:
            self._spark.stop()
        except Exception:  # the JVM is gone: nothing left to stop
            forget_dead_jvm()
        self._spark = None

    # --- the models the scoring benchmarks use ------------------------------------
    def model_uri(self, workflow: str = MODEL_WORKFLOW) -> str:
        """``models:/<name>/<version>`` of a briefly trained model of ``workflow`` (MNIST's
        CNN by default), logged and registered once per workflow.

        Logged by the training job's ``log_trained_model`` (TorchScript, tensor signature,
        input example, the workflow in its metadata) and made a passed ``champion``, so the
        DAGs' gates accept it too.
        """
        if workflow not in self._model_uris:
            self._model_uris[workflow] = self._register_model(workflow)
        return self._model_uris[workflow]

    def _register_model(self, workflow_name: str) -> str:
        import mlflow
        from gpu_check import write_rank_shards
        from mlflow import MlflowClient

        from spark_jobs import workflows
        from spark_jobs.training.loop import TrainConfig, train_rank
        from spark_jobs.training.model_logging import log_trained_model

        workflow = workflows.load(workflow_name)
        shard_dir = self.work / "model-shards" / workflow.name
        shard_dir.mkdir(parents=True, exist_ok=True)
        files = write_rank_shards(shard_dir, 1, 1000, workflow.name)
        config = TrainConfig.for_workflow(workflow, epochs=1, threads_per_rank=2)
        trained = train_rank(SingleProcess(), config, files, None)
        spark = self._spark or self.spark()
        mlflow.set_experiment("benchmarks")
        with mlflow.start_run(run_name=f"benchmark model ({workflow.name})"):
            logged_uri = log_trained_model(workflow, trained["state_dict"], spark.read.parquet(files[0]))
        name = PlatformConfig(workflow=workflow.name).model_name
        version = mlflow.register_model(logged_uri, name).version
        client = MlflowClient()
        client.set_model_version_tag(name, version, "validation_status", "passed")
        client.set_registered_model_alias(name, "champion", version)
        final = {k: round(v, 3) for k, v in trained["history"][-1].items() if k.startswith("train_")}
        log(f"registered models:/{name}/{version} ({final})")
        return f"models:/{name}/{version}"


def forget_dead_jvm() -> None:
    """PySpark keeps one JVM gateway per process; when that JVM has died (out of memory, say)
    forget it, so the next session starts a new JVM instead of failing to connect."""
    from pyspark import SparkContext

    if SparkContext._gateway is None:
        return
    try:
        SparkContext._gateway.jvm.java.lang.System.currentTimeMillis()
    except Exception:
        SparkContext._gateway = None
        SparkContext._jvm = None
        SparkContext._active_spark_context = None


class Benchmark:
    """One benchmark: a folder of its own in the work folder and the result it fills in,
    described by its module's docstring (from the second paragraph on)."""

    name: str
    title: str

    def __init__(self, env: BenchEnv, sizes: Sizes) -> None:
        self.env, self.sizes = env, sizes
        self.root = env.work / self.name
        method = sys.modules[type(self).__module__].__doc__.split("\n\n", 1)[1].strip()
        self.result = BenchResult(self.name, self.title, method)

    def run(self) -> BenchResult:
        raise NotImplementedError
