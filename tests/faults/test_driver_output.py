"""A job's last lines reach whoever reads spark-submit's output, even a slow reader.

spark-submit copies its Python driver's output from a daemon thread that nothing waits for,
so once the driver exits the JVM exits with whatever that thread had not yet passed on. A
reader that falls behind (the Airflow task writing each line to its log, on a busy machine)
lost a job's last lines that way: its error, its traceback, a short job's whole output.
Every job of this project waits at exit until its output has been read
(``spark_jobs.driver_output``, set up by ``configure_job_logging``).

Here a driver that sets up its logging as every job does prints 100 numbered lines of 1 KB
(about what the pipes between it and the reader hold without blocking it) and then fails
with a traceback, while the test reads nothing for its first seconds. Without the wait the
driver and the JVM exit while most of it is still in the pipes, and the numbered lines'
tail and the traceback never arrive.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
import time

import psutil

from local_stack import REPO, VENV_BIN, job_spark_conf, wait_until

LINES = 100
PAUSE_S = 2.0  # the reader's delay once the driver runs: less than the drain's timeout (5 s)
DRIVER = textwrap.dedent(
    f"""
    from spark_jobs.session import configure_job_logging

    configure_job_logging()
    for i in range({LINES}):
        print(f"line {{i:03d}} " + "x" * 990)
    raise RuntimeError("the job's last words")
    """
)


def test_a_failing_jobs_output_and_traceback_reach_a_slow_reader(tmp_path):
    script = tmp_path / "print_then_fail.py"
    script.write_text(DRIVER)
    cmd = [str(VENV_BIN / "spark-submit"), "--master", "local[1]"]
    for key, value in job_spark_conf().items():
        cmd += ["--conf", f"{key}={value}"]
    env = {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": str(VENV_BIN / "python"),
        "PYTHONPATH": str(REPO),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    proc = subprocess.Popen([*cmd, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:

        def driver() -> psutil.Process | None:
            for child in psutil.Process(proc.pid).children(recursive=True):
                try:
                    if str(script) in child.cmdline():
                        return child
                except psutil.NoSuchProcess:
                    pass
            return None

        wait_until(lambda: driver() is not None or proc.poll() is not None, 120, 0.1, "the Python driver started")
        time.sleep(PAUSE_S)  # the slow reader: nothing read yet
        output = proc.stdout.read().decode(errors="replace")
        returncode = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    numbered = [line for line in output.splitlines() if line.startswith("line ")]
    assert returncode != 0, output[-2000:]
    assert len(numbered) == LINES, f"{len(numbered)} of {LINES} lines arrived, the last {numbered[-1][:8]!r}"
    assert "RuntimeError: the job's last words" in output, output[-2000:]
