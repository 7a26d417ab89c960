"""The local processes of one task's Spark job, found by the job's identity.

Every process a Spark task starts on this machine (spark-submit, the Python driver, the
pyspark daemon and workers, Horovod's rank launchers and ranks) inherits two variables
from spark-submit's environment:

- ``ML_SPARK_JOB``: the task instance the job belongs to, ``<dag_id>/<task_id>/<run_id>/<map_index>``;
- ``ML_SPARK_JOB_ATTEMPT``: the task's try number that submitted it.

So a job is found whole, whatever became of its parent: re-parented after the Airflow
task process was SIGKILLed, or moved to a session of its own (Horovod calls ``setsid``).
The operator kills its own attempt's processes when Airflow kills the task, and a retry
stops whatever an earlier attempt of the same task left running before it submits again.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import psutil

JOB_VAR = "ML_SPARK_JOB"
ATTEMPT_VAR = "ML_SPARK_JOB_ATTEMPT"
# Read by the jobs (``spark_jobs.session.SUBMITTER_VAR``): the task process that submitted
# the job, ``<host>:<pid>:<start time>``; the job stops itself once that process is gone.
SUBMITTER_VAR = "ML_SPARK_JOB_SUBMITTER"


class Log(Protocol):
    """Where the terminations are logged: a :class:`logging.Logger`, or an operator's ``log``
    (Airflow's structlog logger), which take the same ``%``-style calls."""

    def info(self, msg: str, /, *args: object) -> object: ...

    def warning(self, msg: str, /, *args: object) -> object: ...


def job_key(dag_id: str, task_id: str, run_id: str, map_index: int | None = -1) -> str:
    """The identity of one task instance's job, the same in every attempt."""
    return f"{dag_id}/{task_id}/{run_id}/{map_index}"


def job_env(key: str, attempt: int) -> dict[str, str]:
    """The variables that mark every process of the job of ``key``'s attempt ``attempt``
    submitted from this process."""
    import psutil

    submitter = f"{socket.gethostname()}:{os.getpid()}:{psutil.Process().create_time()!r}"
    return {JOB_VAR: key, ATTEMPT_VAR: str(attempt), SUBMITTER_VAR: submitter}


def job_processes(key: str, attempt: int | None = None) -> list[psutil.Process]:
    """Live processes of the job ``key`` (only those of ``attempt``, when given), this one
    excluded."""
    return marked_processes(JOB_VAR, key, **({ATTEMPT_VAR: str(attempt)} if attempt is not None else {}))


def marked_processes(var: str, value: str, **also: str) -> list[psutil.Process]:
    """Every live process whose environment has ``var=value`` (and each of ``also``), but
    this one, zombies and processes of other users. A variable set on a process is inherited
    by all it starts, so this finds a whole tree, also the parts that were re-parented or
    moved to a session of their own."""
    import psutil

    wanted = {var: value, **also}
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if all(env.get(name) == expected for name, expected in wanted.items()):
            found.append(proc)
    return found


def attempts_of(procs: Iterable[psutil.Process]) -> list[str]:
    """The attempts (try numbers) the processes belong to, sorted."""
    import psutil

    attempts = set()
    for proc in procs:
        try:
            attempts.add(proc.environ().get(ATTEMPT_VAR, "?"))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return sorted(attempts)


def terminate_process_tree(root_pid: int, *, grace_period: float, log: Log) -> list[int]:
    """SIGTERM, then SIGKILL after ``grace_period``, a process, its descendants and their groups.

    The tree is read before any signal is sent: once a parent dies its children are
    re-parented and can no longer be found from ``root_pid``. Returns the pids found.
    """
    import psutil

    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    return terminate_processes(procs, grace_period=grace_period, log=log, what=f"spark-submit {root_pid}")


# How long the processes are waited for after SIGKILL (they die as soon as the kernel runs them).
REAP_S = 1.0


def terminate_processes(
    procs: list[psutil.Process], *, grace_period: float, log: Log, what: str, deadline: float | None = None
) -> list[int]:
    """SIGTERM, then SIGKILL after ``grace_period``, the processes, their descendants and
    every process group among them but the caller's own (a group also reaches a member
    that was not yet visible, such as a pyspark worker being forked). Returns the pids found.

    With ``deadline`` (a :func:`time.monotonic` value) the call returns by then: the grace
    period is cut short by the time finding the processes took (seconds on a loaded
    machine), so that the SIGKILL and its wait still fit."""
    procs = _with_descendants(procs)
    if not procs:
        return []
    own_group = os.getpgrp()
    groups = {pgid for pgid in (_pgid(p) for p in procs) if pgid is not None and pgid != own_group}
    log.info("Terminating %s: %d processes in %d process groups", what, len(procs), len(groups))
    _signal_all(procs, groups, signal.SIGTERM)
    grace = grace_period if deadline is None else min(grace_period, max(0.0, deadline - time.monotonic() - REAP_S))
    alive = _wait_gone(procs, timeout=grace)
    if alive:
        log.warning("Killing %d processes still alive after %.1f s: %s", len(alive), grace, [p.pid for p in alive])
    # The groups get SIGKILL in any case: it also reaches a process that joined one during
    # the grace period.
    _signal_all(alive, groups, signal.SIGKILL)
    _wait_gone(alive, timeout=REAP_S if deadline is None else min(REAP_S, max(0.0, deadline - time.monotonic())))
    return [p.pid for p in procs]


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to ``timeout`` until every process has exited; returns those still running.

    A process that exited is not reaped (``psutil.wait_procs`` would reap this process's own
    children): spark-submit is the task's child, and the Spark provider reads its exit status
    with ``Popen.wait``. Reaped first, it reads 0 (CPython's answer when the status is gone),
    and a job killed mid-run counts as a job that succeeded."""
    import psutil

    def running(proc: psutil.Process) -> bool:
        try:  # is_running: also False once the pid is another process's
            return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    end = time.monotonic() + timeout
    alive = [proc for proc in procs if running(proc)]
    while alive and time.monotonic() < end:
        time.sleep(0.05)
        alive = [proc for proc in alive if running(proc)]
    return alive


def _with_descendants(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    import psutil

    seen: dict[int, psutil.Process] = {}
    for proc in procs:
        try:
            for member in (proc, *proc.children(recursive=True)):
                seen.setdefault(member.pid, member)
        except psutil.NoSuchProcess:
            continue
    return list(seen.values())


def _pgid(proc: psutil.Process) -> int | None:
    try:
        return os.getpgid(proc.pid)
    except (ProcessLookupError, PermissionError):
        return None


def _signal_all(procs: Iterable[psutil.Process], groups: Iterable[int], sig: signal.Signals) -> None:
    import psutil

    for pgid in groups:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
