"""The README's first command and its platform commands, and the on-demand trigger of
docs/scheduling.md, run exactly as written (read from the Markdown) with bash in a copy of
the checkout, as a newcomer runs them: ``make demo`` (the nightly for today, for real; the
``demo`` fixture of conftest.py), then
``make up`` on its default ports, ``. var/platform.env``, the CLI and REST triggers with
the printed login, ``make down``. (The backfill recipe runs on the platform of
tests/platform; ``make test`` is what CI runs.)

In the e2e group: one process runs it after the guide's ``make demo``, so the default ports
(Airflow 8080, MLflow 5000) are not taken by another test meanwhile."""

from __future__ import annotations

import json
import re
import urllib.request

import psutil
from reader_shell import bash, block_after, commands, copy_of_checkout, readers_env

from local_stack import AIRFLOW_API_PORT, REPO, wait_until

README = REPO / "README.md"
SCHEDULING = REPO / "docs" / "scheduling.md"
ON_DEMAND = "mnist_train_on_demand"


def api_runs(user: str, password: str) -> list[dict]:
    """The on-demand DAG's runs, read through the platform's REST API with the printed login."""
    base = f"http://127.0.0.1:{AIRFLOW_API_PORT}"
    request = urllib.request.Request(
        f"{base}/auth/token",
        data=json.dumps({"username": user, "password": password}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        token = json.load(resp)["access_token"]
    request = urllib.request.Request(
        f"{base}/api/v2/dags/{ON_DEMAND}/dagRuns", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.load(resp)["dag_runs"]


def test_make_demo_as_written_trains_promotes_scores_and_checks_the_day(demo):
    """What the README says ``make demo`` ends with: the registered version, its held-out
    accuracy, the scored partition, every row scored once by it, and the day's drift check
    (the ``demo`` fixture ran it as written; test_nightly_retrain.py looks closer)."""
    tasks = {
        line.split()[1]: line.split()[2] for line in demo.ran.stdout.splitlines() if line.startswith("[nightly]   ")
    }
    assert tasks["score_partition"] == "success" and tasks["check_drift"] == "success", tasks
    summary = demo.summary
    assert summary["workflow"] == "mnist" and float(summary["holdout_accuracy"]) >= 0.93, summary
    assert summary["scored_rows"] == 5000 and summary["scored_versions"] == [summary["model"].rsplit("/", 1)[1]]
    assert summary["drift_check"] == "no_drift" and summary["drift_report"].startswith(str(demo.state))


def test_make_up_the_cli_and_rest_triggers_and_make_down_as_written(tmp_path):
    platform = block_after(README, "## The platform: `make up`, `make down`")
    up, source, down = commands(platform)
    assert (up.split()[:2], source.split()[:2], down.split()[:2]) == (
        ["make", "up"],
        [".", "var/platform.env"],
        ["make", "down"],
    )
    triggers = block_after(SCHEDULING, "## On-demand training with parameters")
    root = copy_of_checkout(tmp_path / "checkout")
    env = readers_env()

    started = bash(up, root, env)
    try:
        assert started.returncode == 0, started.stdout[-4000:] + started.stderr[-4000:]
        login = re.search(r"\(user (\S+), password (\S+)\)", started.stdout)
        assert login, started.stdout
        exported = bash(f"{source}\nenv", root, env).stdout
        assert f"ML_PLATFORM_USER={login[1]}" in exported and f"ML_PLATFORM_PASSWORD={login[2]}" in exported
        # What the text promises: the user's own airflow commands reach the platform, once
        # the DAG processor has parsed the DAGs.
        wait_until(
            lambda: ON_DEMAND in bash(f"{source}\nairflow dags list -o plain", root, env).stdout,
            180,
            3,
            f"{ON_DEMAND} listed by the platform's airflow",
        )
        triggered = bash(f"{source}\n{triggers}", root, env)
        assert triggered.returncode == 0, triggered.stdout[-4000:] + triggered.stderr[-4000:]
        rest = json.loads(triggered.stdout.strip().splitlines()[-1])
        assert rest["dag_id"] == ON_DEMAND and rest["conf"] == {"epochs": 5}, rest
        runs = api_runs(login[1], login[2])
        assert sorted(json.dumps(run["conf"], sort_keys=True) for run in runs) == sorted(
            [json.dumps({"epochs": 5, "promote": False}, sort_keys=True), json.dumps({"epochs": 5}, sort_keys=True)]
        ), runs
    finally:
        stopped = bash(down, root, env)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    marker = str(root / "var")
    left = [
        p.pid
        for p in psutil.process_iter(["environ"])
        if (p.info["environ"] or {}).get("ML_PLATFORM_INSTANCE", "").startswith(marker)
    ]
    assert left == [], left
