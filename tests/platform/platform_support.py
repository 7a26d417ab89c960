"""The platform of ``make up`` as the tests drive it: ``scripts/platform_stack.py`` on a state
folder of the test's own and free ports, its REST API, and what ``down`` would stop."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
from platform_stack import (
    AIRFLOW_PORT_VAR,
    DATABASE_URI_VAR,
    MARKER_VAR,
    MLFLOW_PORT_VAR,
    PASSWORD_VAR,
    USER_VAR,
    Platform,
)
from quiet_airflow import QUIET_AIRFLOW_ENV

from local_stack import REPO, free_port, wait_until

SCRIPT = REPO / "scripts" / "platform_stack.py"
# The curated MNIST day the tests' platform has to train on (conftest.py).
CURATED_DS = "2026-11-28"
CURATED_ROWS = 1500


class PlatformCli:
    def __init__(self, state: Path) -> None:
        self.state = state
        self.env = {k: v for k, v in os.environ.items() if k not in (DATABASE_URI_VAR, MARKER_VAR)}
        self.env.update({AIRFLOW_PORT_VAR: str(free_port()), MLFLOW_PORT_VAR: str(free_port())})
        # The platform's services inherit it (for the 25 minutes they serve the tests).
        self.env.update(QUIET_AIRFLOW_ENV)
        self._token: str | None = None

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

    def login(self) -> tuple[str, str]:
        """The user and password ``make up`` wrote to the state folder's ``platform.env``."""
        exported = dict(
            shlex.split(line.removeprefix("export "))[0].split("=", 1)
            for line in (self.state / "platform.env").read_text().splitlines()
            if line.startswith("export ")
        )
        return exported[USER_VAR], exported[PASSWORD_VAR]

    def token(self) -> str:
        """An access token of the login (``POST /auth/token``), as a REST client gets one."""
        if self._token is None:
            user, password = self.login()
            request = urllib.request.Request(
                f"{self.record['airflow_url']}/auth/token",
                data=json.dumps({"username": user, "password": password}).encode(),
                method="POST",
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=30) as resp:
                self._token = json.load(resp)["access_token"]
        return self._token

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        request = urllib.request.Request(
            f"{self.record['airflow_url']}/api/v2{path}",
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.token()}"},
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            return json.load(resp)

    def mark_run_failed(self, dag_id: str, run_id: str, tries: int = 3) -> dict:
        """A run marked failed through the REST API, as a person stops it. The API's update of
        the run can meet the scheduler's of its task instances in PostgreSQL, which then
        aborts one of them as a deadlock: the API answers 500 (seen 2026-12-06: "deadlock
        detected" between ``UPDATE dag_run`` and the scheduler's ``UPDATE task_instance``), and
        asking again is what a person does. Anything else fails at once."""
        for attempt in range(1, tries + 1):
            try:
                return self.api("PATCH", f"/dags/{dag_id}/dagRuns/{run_id}", {"state": "failed"})
            except urllib.error.HTTPError as err:
                if err.code != 500 or attempt == tries:
                    raise
                time.sleep(2)
        raise AssertionError("unreachable")


def output(result: subprocess.CompletedProcess) -> str:
    return result.stdout[-4000:] + result.stderr[-4000:]


# The on-demand flow of tests/platform (conftest.py `promoted_run`).
ON_DEMAND, ON_NEW_CHAMPION = "mnist_train_on_demand", "mnist_score_on_new_champion"
MODEL = "mnist_cnn"
# Newer than every other curated day of the platform, so the newest is the last of them.
DAYS = ["2026-12-01", "2026-12-02", "2026-12-03"]
# 3,600 training rows for 15 epochs: about 0.97 held-out accuracy, clear of the 0.93 floor.
ROWS_PER_DAY = 1500
CONF = {"epochs": 15, "end_ds": DAYS[-1], "window_days": len(DAYS), "promote": True}
RUN_TIMEOUT_S = 900


def finished(cli, dag_id: str, run_id: str) -> dict:
    return wait_until(
        lambda: (r := cli.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}"))["state"] in ("success", "failed") and r,
        RUN_TIMEOUT_S,
        1,
        f"{dag_id} run {run_id} finished",
    )


def task_states(cli, dag_id: str, run_id: str) -> dict[str, str]:
    tis = cli.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
    return {t["task_id"]: t["state"] for t in tis}


# --- the browser (Playwright driving Debian's Chromium) ---------------------------------

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = REPO / "var" / "screenshots"
UI_TIMEOUT_MS = 60_000
# MLflow's assistant panel opens by itself on a first visit to a local server and covers a
# third of the page: the browser is told it has been shown (MLflow's local-storage key).
ASSISTANT_SHOWN = "localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true')"


def new_page(browser, signed_in: PlatformCli | None = None):
    """A page in a fresh context: no cookies, no local storage but the assistant's (a first
    visit); ``signed_in``: with that platform's login already made (the token cookie Airflow's
    sign-in page sets; ``test_the_platform_asks_for_a_login`` signs in through the page)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(ASSISTANT_SHOWN)
    if signed_in is not None:
        context.add_cookies([{"name": "_token", "value": signed_in.token(), "url": signed_in.record["airflow_url"]}])
    page = context.new_page()
    page.set_default_timeout(UI_TIMEOUT_MS)
    return page


def expect(target):
    """Playwright's ``expect`` with the pages' patience: its own default (5 s) is too short
    for a UI answering while the machine runs the rest of the suite (a triggered run's
    dialog once took longer than that to close)."""
    from playwright.sync_api import expect as playwright_expect

    playwright_expect.set_options(timeout=UI_TIMEOUT_MS)
    return playwright_expect(target)
