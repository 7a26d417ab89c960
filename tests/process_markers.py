"""Processes found by a marker in their environment (imported by name: tests/ is on sys.path).

A test that starts a job puts ``<VAR>=<token>`` in its environment; every descendant
inherits it (the Python driver, pyspark daemon and workers, Horovod's launchers and ranks),
so an orphan is found by its environment even after it was re-parented or moved to a
session of its own: any live process with the marker counts, whatever its command line.
"""

from __future__ import annotations

import os
import time

import psutil


def marked_processes(var: str, marker: str) -> list[psutil.Process]:
    """Every live process whose environment has ``var=marker`` (zombies do not count)."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(var) == marker:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


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
    deadline = time.monotonic() + timeout
    while True:
        left = marked_processes(var, marker)
        if not left or time.monotonic() > deadline:
            return describe(left)
        time.sleep(0.5)


def wait_for_marked_process(var: str, marker: str, pattern: str, timeout: float = 300) -> psutil.Process:
    """The first process carrying the marker whose command line contains ``pattern``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in marked_processes(var, marker):
            try:
                if pattern in " ".join(proc.cmdline()):
                    return proc
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.5)
    raise TimeoutError(f"no process with {var}={marker} matching {pattern!r} after {timeout:.0f} s")
