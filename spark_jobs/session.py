"""The one SparkSession builder (and log set-up) every job uses."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time

from pyspark.sql import SparkSession

from spark_jobs.driver_output import drain_output_at_exit

log = logging.getLogger(__name__)

# Set by the Airflow operator on the jobs it submits: ``<host>:<pid>:<start time>`` of the
# Airflow task process that runs spark-submit (see :func:`watch_submitter`).
SUBMITTER_VAR = "ML_SPARK_JOB_SUBMITTER"


def configure_job_logging() -> None:
    """Progress from our own code at INFO; third-party Python logging (Horovod's
    rendezvous, py4j) only from WARNING, so task logs stay readable. The job's last lines
    (its error, its traceback) reach the task log: it waits at exit until spark-submit has
    read them (:mod:`spark_jobs.driver_output`)."""
    drain_output_at_exit()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("spark_jobs").setLevel(logging.INFO)


def build_spark_session(
    app_name: str, *, master: str | None = None, extra_conf: dict[str, str] | None = None
) -> SparkSession:
    """Return the session for a job; master and resources come from spark-submit.

    Jobs replace partitions only through :func:`spark_jobs.partitions.replace_partitions`
    (staged, then swapped in atomically). Dynamic partition overwrite stays on as a guard:
    a stray ``mode("overwrite").partitionBy("ds")`` then replaces only the days it writes
    instead of wiping the dataset. ``master`` and ``extra_conf`` are for tests and notebooks.
    """
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.sources.partitionOverwriteMode", "dynamic")
        .config("spark.sql.session.timeZone", "UTC")
        # ``ds`` stays the string it is in the path, not a DateType guessed from it.
        .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    )
    if master:
        builder = builder.master(master)
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    watch_submitter()
    return builder.getOrCreate()


def watch_submitter(interval: float = 2.0) -> threading.Thread | None:
    """Stop this job when the Airflow task that submitted it is gone.

    A task process SIGKILLed (the out-of-memory killer, a lost node) never runs its
    ``on_kill``, and its job would go on to log a model or write a partition that the
    task's retry then writes again. When the driver runs on the submitting machine (local
    and client deploy modes: ``SUBMITTER_VAR`` names this host) a daemon thread checks
    every ``interval`` seconds that the task process (pid and start time) still runs; once
    it does not, it SIGKILLs spark-submit (this driver's parent JVM, whose executors and
    Python workers end with it) and this process. What a worker left behind regardless (a
    Horovod rank in a session of its own) is stopped by the retry before it submits.
    Returns the thread, or None when there is nothing to watch.
    """
    host, _, rest = os.environ.get(SUBMITTER_VAR, "").partition(":")
    if host != socket.gethostname() or not rest:
        return None
    try:
        import psutil
    except ImportError:
        log.warning("psutil is not installed: this job does not stop if its Airflow task is lost")
        return None
    pid, _, created = rest.partition(":")
    thread = threading.Thread(
        target=_watch, args=(psutil, int(pid), float(created), interval), name="watch-submitter", daemon=True
    )
    thread.start()
    return thread


def _watch(psutil, pid: int, created: float, interval: float) -> None:
    while _runs(psutil, pid, created):
        time.sleep(interval)
    log.error("the Airflow task process %d that submitted this job is gone: stopping the job", pid)
    parent = os.getppid()
    try:
        if "org.apache.spark.deploy.SparkSubmit" in psutil.Process(parent).cmdline():
            os.kill(parent, signal.SIGKILL)
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        pass
    os._exit(1)


def _runs(psutil, pid: int, created: float) -> bool:
    try:
        return abs(psutil.Process(pid).create_time() - created) < 0.01
    except psutil.NoSuchProcess:
        return False
