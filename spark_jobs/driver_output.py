"""Keep a driver's last lines: wait at exit until spark-submit has read what it printed.

spark-submit runs a Python application as a child of its JVM and copies the child's
stdout (stderr merged into it) to its own from a daemon thread (``PythonRunner``'s
``RedirectThread``) that nothing waits for: once the child exits, the JVM exits too, and
whatever that thread had not yet read from the pipe is gone. On a busy machine the last
lines of a job (its error message, its traceback, a short job's whole output) can so be
missing from the Airflow task log although the job printed them.

:func:`wait_until_output_read` closes that window from the child's side: at exit it
flushes and waits (up to a timeout) until the pipe behind stdout and stderr holds no
unread byte, i.e. until the JVM's thread has read all of it. It needs no SparkSession and
imports nothing heavy, so any driver can call :func:`drain_output_at_exit`; every job of
this project does (``spark_jobs.session.configure_job_logging``).
"""

from __future__ import annotations

import atexit
import fcntl
import os
import stat
import struct
import sys
import termios
import time

# Long enough for a starved reader thread, short enough not to hold a job whose reader is
# gone (a pipe nobody reads any more never empties).
DEFAULT_TIMEOUT_S = 5.0
_POLL_S = 0.01
# Set by spark-submit's PythonRunner in the environment of the Python application it runs.
GATEWAY_VAR = "PYSPARK_GATEWAY_PORT"
_registered = False


def unread_bytes(fd: int) -> int | None:
    """Bytes written to the pipe behind ``fd`` and not yet read from it; None when ``fd`` is
    not a pipe (a terminal, a file: nothing is lost there) or cannot be asked."""
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return None


def wait_until_output_read(timeout: float = DEFAULT_TIMEOUT_S, fds: tuple[int, ...] = (1, 2)) -> bool:
    """Flush ``sys.stdout`` and ``sys.stderr``, then wait until the pipes behind ``fds`` are
    read empty, at most ``timeout`` seconds. True when nothing is left unread."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # closed or broken: nothing more can reach the reader
            pass
    deadline = time.monotonic() + timeout
    while True:
        pending = [n for n in (unread_bytes(fd) for fd in fds) if n]
        if not pending:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)


def drain_output_at_exit(timeout: float = DEFAULT_TIMEOUT_S) -> None:
    """Register :func:`wait_until_output_read` to run when this interpreter exits (after an
    uncaught exception's traceback is printed, and on ``SystemExit``), once per process and
    only in a driver that spark-submit runs (``PythonRunner`` sets ``GATEWAY_VAR``): a test
    or notebook process that builds its own session has no such reader to wait for."""
    global _registered
    if not _registered and GATEWAY_VAR in os.environ:
        atexit.register(wait_until_output_read, timeout)
        _registered = True
