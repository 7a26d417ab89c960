"""What ``spark_jobs.horovod_launch`` changes in Horovod's Spark launch, against Horovod's
own services.

A Horovod Spark task ends when its rank's command does, not 3 s later
(``command_lifetime_counted_from_start``).

Horovod 0.28.1's ``SparkTaskService`` keeps a task alive for a minimum time "after the
command started" so that the driver can still ask for a short command's exit code, but
starts that timer when the command has ended: ``horovod.spark.run`` then returned 3 s after
every Gloo run's ranks exited. The task service here is Horovod's own, on loopback, running
real shell commands; the minimum lifetime is 1 s instead of 3 to keep the test short.

The Gloo check is answered in the driver's process (``gloo_built_in_process``) instead of
in forked children that import every framework extension; it must give Horovod's answer.
"""

from __future__ import annotations

import os
import time

import pytest

from spark_jobs.horovod_launch import command_lifetime_counted_from_start, gloo_built_in_process, services_bound_to

MINIMUM_S = 1.0


def command_and_task_end(command: str) -> tuple[float, float]:
    """Seconds from starting ``command`` in a task service to its end and to the end of
    the task's ``wait_for_command_termination`` (what the Spark task waits for)."""
    from horovod.runner.common.util import secret
    from horovod.spark.task.task_service import SparkTaskClient, SparkTaskService

    key = secret.make_secret_key()
    with services_bound_to("127.0.0.1"):
        service = SparkTaskService(0, key, None, MINIMUM_S, 0)
    try:
        client = SparkTaskClient(0, service.addresses(), key, 0)
        started = time.monotonic()
        client.run_command(command, {"PATH": os.environ["PATH"]})
        service.wait_for_command_start(10)
        service._command_thread.join()
        command_ended = time.monotonic() - started
        service.wait_for_command_termination()
        return command_ended, time.monotonic() - started
    finally:
        service.shutdown()


@pytest.fixture(scope="module")
def counted_from_start():
    from horovod.spark.task.task_service import SparkTaskService

    original = SparkTaskService._run_command
    command_lifetime_counted_from_start()
    command_lifetime_counted_from_start()  # twice, as a reused Spark worker does: no double wrap
    yield
    SparkTaskService._run_command = original


def test_a_command_longer_than_the_minimum_ends_its_task_at_once(counted_from_start):
    command_ended, task_ended = command_and_task_end("sleep 1.5")
    assert command_ended >= 1.5
    assert task_ended - command_ended < 0.5, (command_ended, task_ended)  # Horovod's own: + 1 s


def test_a_short_command_still_keeps_its_task_for_the_minimum_from_its_start(counted_from_start):
    command_ended, task_ended = command_and_task_end("true")
    assert command_ended < MINIMUM_S
    assert MINIMUM_S - 0.05 <= task_ended < MINIMUM_S + 0.5, (command_ended, task_ended)


def test_the_in_process_gloo_check_gives_horovods_own_answer():
    from horovod.common.util import gloo_built

    assert gloo_built_in_process() is True  # the project's build: Gloo, no MPI
    assert gloo_built_in_process() == gloo_built()
