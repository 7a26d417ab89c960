"""``terminate_process_tree``, the operator's kill, on a small tree that behaves like a
Spark job's: a child in the same group, a grandchild that moved to a session of its own
(as Horovod's rank launcher does with ``setsid``), and one process that ignores SIGTERM."""

from __future__ import annotations

import inspect
import logging
import os
import subprocess
import sys
import textwrap
import time

from faults_support import MARKER_VAR, describe, marked_processes, new_marker
from ml_registry.spark_submit import terminate_process_tree

# The root starts a child (same group) which starts a grandchild in a new session; the
# grandchild ignores SIGTERM. Each prints its pid, then they all sleep.
TREE = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    depth = int(sys.argv[1])
    if depth == 2:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if depth < 2:
        subprocess.Popen([sys.executable, "-c", sys.argv[2], str(depth + 1), sys.argv[2]],
                         start_new_session=(depth == 1))
    print(os.getpid(), flush=True)
    time.sleep(600)
    """
)


def start_tree(marker: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    root = subprocess.Popen(
        [sys.executable, "-c", TREE, "0", TREE],
        env={**os.environ, **(env or {}), MARKER_VAR: marker},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while len(marked_processes(marker)) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    return root


def test_kills_the_whole_tree_including_other_sessions_and_sigterm_ignorers(caplog):
    marker = new_marker()
    root = start_tree(marker)
    tree = marked_processes(marker)
    assert len(tree) == 3
    assert len({os.getsid(p.pid) for p in tree}) == 2, "the grandchild should have escaped the session"
    grandchild = next(p for p in tree if os.getsid(p.pid) != os.getsid(root.pid))
    with caplog.at_level(logging.INFO):
        found = terminate_process_tree(root.pid, grace_period=1.0, log=logging.getLogger(__name__))
    root.wait(5)
    assert sorted(found) == sorted(p.pid for p in tree)
    assert describe(marked_processes(marker)) == []
    # The SIGTERM-ignoring grandchild outlived the grace period: it needed the SIGKILL.
    # (Its parent may be listed too: a zombie until something reaps it.)
    killed = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(killed) == 1 and str(grandchild.pid) in killed[0].rsplit(":", 1)[1], killed


def test_a_process_that_is_already_gone_is_not_an_error():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert terminate_process_tree(proc.pid, grace_period=0.1, log=logging.getLogger(__name__)) == []


def test_a_retry_stops_what_an_earlier_attempt_left_running(capfd):
    """A worker SIGKILLed mid-job leaves its job running (``on_kill`` never ran). The next
    attempt of the same task finds every process of it by the job's identity, whatever
    became of their parent, and stops them before it submits; another task's job stays."""
    from types import SimpleNamespace

    from ml_registry.job_processes import job_env, job_key, job_processes
    from ml_registry.spark_submit import MlflowSparkSubmitOperator

    run_id = f"manual__{new_marker()}"
    key, other = job_key("d", "train_model", run_id), job_key("d", "score_partition", run_id)
    left = start_tree(new_marker(), job_env(key, 1))
    unrelated = start_tree(new_marker(), job_env(other, 1))
    try:
        assert len(job_processes(key)) == 3 and len(job_processes(other)) == 3
        left.kill()  # the tree's root gone too: its children are re-parented, found all the same
        left.wait(5)

        operator = MlflowSparkSubmitOperator(task_id="train_model", application="job.py")
        operator.job_key, operator.attempt = key, 2
        operator.stop_earlier_attempts({"ti": SimpleNamespace()})
        assert describe(job_processes(key)) == []
        assert len(job_processes(other)) == 3
        out = capfd.readouterr()
        assert "Attempt(s) 1 of this task left 2 processes" in out.out + out.err, out
    finally:
        for proc in job_processes(key) + job_processes(other):
            proc.kill()
        unrelated.wait(5)


def test_on_kill_ends_before_airflow_escalates_even_when_finding_the_job_is_slow(monkeypatch):
    """On a loaded machine finding a job's processes takes seconds; the operator's kill must
    still end before Airflow's supervisor SIGKILLs the task process (5 s after its SIGTERM),
    and the SIGTERM-ignoring grandchild still dies: the SIGKILL comes sooner than the grace
    period. (Before the deadline, 2 s of search + the 3 s grace period overran it.)"""
    from airflow.sdk.execution_time.supervisor import ActivitySubprocess

    from ml_registry import spark_submit
    from ml_registry.job_processes import job_env, job_key, job_processes
    from ml_registry.spark_submit import ON_KILL_BUDGET_S, MlflowSparkSubmitOperator

    escalation = inspect.signature(ActivitySubprocess.kill).parameters["escalation_delay"].default
    key = job_key("d", "train_model", f"manual__{new_marker()}")
    root = start_tree(new_marker(), job_env(key, 1))
    search_s = 2.0

    def slow_search(*args):
        time.sleep(search_s)
        return job_processes(*args)

    monkeypatch.setattr(spark_submit, "job_processes", slow_search)
    operator = MlflowSparkSubmitOperator(task_id="train_model", application="job.py")
    operator.job_key, operator.attempt = key, 1
    try:
        started = time.monotonic()
        operator.on_kill()
        took = time.monotonic() - started
        root.wait(5)
        assert ON_KILL_BUDGET_S < escalation and took < escalation, took
        assert describe(job_processes(key)) == []
    finally:
        for proc in job_processes(key):
            proc.kill()
