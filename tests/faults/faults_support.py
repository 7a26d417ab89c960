"""Helpers of the fault-and-bad-input suite (imported by name: tests/faults is on sys.path).

Jobs run exactly as the DAGs run them: ``spark-submit`` of ``spark_jobs/entrypoints/<job>.py``
with the ``--py-files`` archive, on ``local[2]``. Every process a test starts carries
``FAULTS_MARKER=<token>`` in its environment, which every descendant inherits (the Python
driver, pyspark daemon and workers, Horovod's launchers and ranks), so an orphan is found
by its environment even after it was re-parented or moved to a session of its own: any
live process with the marker counts, whatever its command line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
from quick_models import briefly_trained_cnn, log_cnn_run

import process_markers
from local_stack import REPO, VENV_BIN, job_spark_conf, wait_until
from process_markers import describe

MARKER_VAR = "FAULTS_MARKER"
EXPERIMENT = "faults"
WORKFLOW = "mnist"  # of every job the suite runs
BASE_DS = "2026-10-01"  # the clean partition shared by the training and registry tests
BASE_ROWS = 300
BASE_SEED = 11  # of the generated rows in the base partition


def new_marker() -> str:
    return uuid.uuid4().hex


def spark_conf() -> dict[str, str]:
    """The DAGs' Spark settings (``PlatformConfig.spark_conf``), as the stack's jobs get them."""
    return job_spark_conf()


def spark_submit_command(job: str, args: list[str], archive: Path) -> list[str]:
    cmd = [str(VENV_BIN / "spark-submit"), "--master", "local[2]", "--name", f"faults-{job}"]
    for key, value in spark_conf().items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, "--py-files", str(archive), str(REPO / "spark_jobs" / "entrypoints" / f"{job}.py"), *args]


@dataclass
class Job:
    """One spark-submit started by a test, in its own session, output in a log file."""

    proc: subprocess.Popen
    log_path: Path
    marker: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float = 600) -> int:
        return self.proc.wait(timeout=timeout)

    @property
    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


@dataclass
class JobRunner:
    """Starts ``spark_jobs`` entry points with spark-submit, like the DAGs' operator does."""

    env: dict[str, str]
    archive: Path
    log_dir: Path

    def start(self, job: str, args: list[str], *, marker: str | None = None, env: dict[str, str] | None = None) -> Job:
        marker = marker or new_marker()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{job}-{time.strftime('%H%M%S')}-{marker[:8]}.log"
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(
                spark_submit_command(job, args, self.archive),
                cwd=REPO,
                env={**self.env, **(env or {}), MARKER_VAR: marker},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return Job(proc, log_path, marker)

    def run(self, job: str, args: list[str], **kwargs) -> Job:
        started = self.start(job, args, **kwargs)
        started.wait()
        return started


def marked_processes(marker: str) -> list[psutil.Process]:
    """Every live process whose environment carries ``marker`` (zombies do not count)."""
    return process_markers.marked_processes(MARKER_VAR, marker)


def wait_for_no_orphans(marker: str, timeout: float = 30) -> list[str]:
    """Descriptions of the processes carrying ``marker`` still alive after ``timeout`` seconds."""
    return process_markers.wait_for_no_marked_processes(MARKER_VAR, marker, timeout)


def sigkill_tree(marker: str) -> list[str]:
    """SIGKILL, at once, every process carrying ``marker``: a crash of the whole job, where no
    handler runs and nothing cleans up. Returns what was killed (a process forked meanwhile
    is not: whatever outlives the crash is an orphan)."""
    procs = marked_processes(marker)
    killed = describe(procs)
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            continue
    return killed


def wait_for_process(
    marker: str, pattern: str, timeout: float = 300, job: Job | None = None, matches=None
) -> psutil.Process:
    """The first process carrying ``marker`` whose command line contains ``pattern`` (and for
    which ``matches(proc)`` holds, if given); fails at once if ``job`` ends before it appears."""

    def found() -> psutil.Process | None:
        if job is not None and job.proc.poll() is not None:
            raise AssertionError(f"{job.log_path.name} ended before {pattern!r} appeared:\n{job.output[-3000:]}")

        def wanted(proc: psutil.Process) -> bool:
            return pattern in " ".join(proc.cmdline()) and (matches is None or matches(proc))

        return process_markers.first_marked_process(MARKER_VAR, marker, wanted)

    return wait_until(found, timeout, 0.2, f"a process matching {pattern!r}")


@contextmanager
def mlflow_client_env(tracking_uri: str):
    """Point this process's MLflow at ``tracking_uri`` for a block, then restore."""
    saved = {
        name: os.environ.get(name)
        for name in (
            "MLFLOW_TRACKING_URI",
            "MLFLOW_TRACKING_USERNAME",
            "MLFLOW_TRACKING_PASSWORD",
            "MLFLOW_TRACKING_TOKEN",
        )
    }
    for name in saved:
        os.environ.pop(name, None)
    os.environ["MLFLOW_TRACKING_URI"] = tracking_uri
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def log_untrained_model(tracking_uri: str, tags: dict[str, str], seed: int = 0) -> tuple[str, str]:
    """An MLflow run with the MNIST workflow's CNN, untrained, logged the way the train job
    logs it (``spark_jobs.training.model_logging``: TorchScript serving form, tensor
    signature uint8 ``[-1, 28, 28]``, input example, the workflow in its metadata).

    The registry tests need distinct training runs with a model, not a good model; this
    costs seconds instead of a Horovod job. Returns (run id, model URI).
    """
    import torch

    from spark_jobs.workflows.mnist import MnistNet

    torch.manual_seed(seed)
    return _log_cnn_run(tracking_uri, tags, MnistNet().state_dict())


def log_briefly_trained_model(
    tracking_uri: str, tags: dict[str, str], steps: int = 150, rows: int = 2000
) -> tuple[str, str]:
    """Like :func:`log_untrained_model`, with the CNN first trained in this process for
    ``steps`` SGD steps (a few seconds) on generated rows of the base day that are not the
    base partition's (another seed): about 0.75 held-out accuracy where an untrained one has
    about 0.1, so a registry test has a champion that is really better on the same rows."""
    return _log_cnn_run(tracking_uri, tags, briefly_trained_cnn(BASE_DS, rows, steps, seed=BASE_SEED + 1))


def _log_cnn_run(tracking_uri: str, tags: dict[str, str], state_dict) -> tuple[str, str]:
    with mlflow_client_env(tracking_uri):  # no other server's credentials in reach
        return log_cnn_run(tracking_uri, EXPERIMENT, tags, state_dict)
