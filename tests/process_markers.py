"""Processes found by a marker in their environment (imported by name: tests/ is on sys.path).

A test that starts a job puts ``<VAR>=<token>`` in its environment; every descendant
inherits it (the Python driver, pyspark daemon and workers, Horovod's launchers and ranks),
so an orphan is found by its environment even after it was re-parented or moved to a
session of its own: any live process with the marker counts, whatever its command line.
"""

from __future__ import annotations

import os

import psutil

from local_stack import marked_processes, wait_until


def describe(procs: list[psutil.Process]) -> list[str]:
    lines = []
    for proc in procs:
        try:
            lines.append(
                f"{proc.pid} (ppid {proc.ppid()}, sid {os.getsid(proc.pid)}): {' '.join(proc.cmdline())[:200]}"
            )
        except (psutil.NoSuchProcess, ProcessLookupError):
            continue
    return lines


def wait_for_no_marked_processes(var: str, marker: str, timeout: float = 30) -> list[str]:
    """Descriptions of the processes carrying the marker still alive after ``timeout`` seconds."""
    try:
        wait_until(lambda: not marked_processes(var, marker), timeout, 0.5)
    except TimeoutError:
        pass
    return describe(marked_processes(var, marker))


def first_marked_process(var: str, marker: str, matches) -> psutil.Process | None:
    """A live process carrying the marker for which ``matches(proc)`` holds, or None."""
    for proc in marked_processes(var, marker):
        try:
            if matches(proc):
                return proc
        except psutil.NoSuchProcess:
            continue
    return None


def wait_for_marked_process(
    var: str, marker: str, pattern: str, timeout: float = 300, matches=None, interval: float = 0.5
) -> psutil.Process:
    """The first process carrying the marker whose command line contains ``pattern`` (and,
    given ``matches``, for which ``matches(proc)`` also holds)."""

    def wanted(proc: psutil.Process) -> bool:
        return pattern in " ".join(proc.cmdline()) and (matches is None or matches(proc))

    return wait_until(
        lambda: first_marked_process(var, marker, wanted),
        timeout,
        interval,
        f"a process with {var}={marker} matching {pattern!r}",
    )
