"""The platform of ``make up`` as the tests drive it: ``scripts/platform_stack.py`` on a state
folder of the test's own and free ports, its REST API, and what ``down`` would stop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
from platform_stack import AIRFLOW_PORT_VAR, DATABASE_URI_VAR, MARKER_VAR, MLFLOW_PORT_VAR, Platform

from local_stack import REPO, free_port

SCRIPT = REPO / "scripts" / "platform_stack.py"
# The curated MNIST day the tests' platform has to train on (conftest.py).
CURATED_DS = "2026-11-28"
CURATED_ROWS = 1500


class PlatformCli:
    def __init__(self, state: Path) -> None:
        self.state = state
        self.env = {k: v for k, v in os.environ.items() if k not in (DATABASE_URI_VAR, MARKER_VAR)}
        self.env.update({AIRFLOW_PORT_VAR: str(free_port()), MLFLOW_PORT_VAR: str(free_port())})

    def __call__(self, command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(SCRIPT), command, "--state-dir", str(self.state)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    @property
    def record(self) -> dict:
        return json.loads((self.state / "platform.json").read_text())

    @property
    def processes(self) -> list[psutil.Process]:
        """The platform's processes as ``down`` finds them (by session and by marker)."""
        return Platform(self.state.resolve()).processes()

    def postgres_pid(self) -> int | None:
        pid_file = self.state / "postgres" / "postmaster.pid"
        return int(pid_file.read_text().split()[0]) if pid_file.exists() else None

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        request = urllib.request.Request(
            f"{self.record['airflow_url']}/api/v2{path}",
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            return json.load(resp)


def output(result: subprocess.CompletedProcess) -> str:
    return result.stdout[-4000:] + result.stderr[-4000:]
