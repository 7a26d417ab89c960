"""A job stops itself once the Airflow task process that submitted it is gone
(``spark_jobs.session.watch_submitter``), as when the task was SIGKILLed and its
``on_kill`` never ran; it goes on while that process runs, and watches nothing when its
driver runs on another machine."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import psutil
import pytest

from local_stack import REPO
from ml_registry.job_processes import SUBMITTER_VAR
from spark_jobs import session

# A stand-in driver: watches its submitter every 0.2 s, then waits to be stopped.
DRIVER = textwrap.dedent(
    """
    import sys, time
    from spark_jobs.session import watch_submitter
    print("watching" if watch_submitter(interval=0.2) else "not watching", flush=True)
    time.sleep(60)
    """
)


def start_driver(submitter: str, stderr=None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), SUBMITTER_VAR: submitter}
    return subprocess.Popen([sys.executable, "-c", DRIVER], env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)


def identity(proc: subprocess.Popen, host: str | None = None) -> str:
    return f"{host or socket.gethostname()}:{proc.pid}:{psutil.Process(proc.pid).create_time()!r}"


def test_the_operator_and_the_jobs_name_the_same_variable():
    assert session.SUBMITTER_VAR == SUBMITTER_VAR


def test_the_job_stops_once_its_submitter_is_gone():
    submitter = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    driver = start_driver(identity(submitter))
    try:
        assert driver.stdout.readline().strip() == "watching"
        # While the submitter runs, so does the job.
        with pytest.raises(subprocess.TimeoutExpired):
            driver.wait(timeout=1.5)
        submitter.kill()
        submitter.wait(5)
        assert driver.wait(timeout=30) == 1
    finally:
        for proc in (submitter, driver):
            proc.kill()
            proc.wait(5)


def test_a_reused_pid_is_not_the_submitter():
    # The right pid with another start time: a different process that got the same pid.
    submitter = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    created = psutil.Process(submitter.pid).create_time()
    driver = start_driver(f"{socket.gethostname()}:{submitter.pid}:{created - 100!r}", stderr=subprocess.PIPE)
    try:
        # The watch may stop the driver before it prints "watching": only its exit and its
        # reason are certain.
        assert driver.wait(timeout=30) == 1
        assert f"the Airflow task process {submitter.pid} that submitted this job is gone" in driver.stderr.read()
    finally:
        for proc in (submitter, driver):
            proc.kill()
            proc.wait(5)


@pytest.mark.parametrize("submitter", ["other-host.example:1:1.0", ""])
def test_nothing_is_watched_for_a_driver_on_another_machine_or_without_a_submitter(submitter):
    driver = start_driver(submitter)
    try:
        assert driver.stdout.readline().strip() == "not watching"
    finally:
        driver.kill()
        driver.wait(5)
