"""One real embedded stack for all end-to-end tests: an MLflow tracking server on
loopback (SQLite store), a SQLite Airflow metadata DB, spark-submit on local[2]; the
scheduler-driven tests add the Airflow API server, scheduler and DAG processor, on a
Postgres metadata DB on the session's embedded PostgreSQL (see :func:`airflow_services`)."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from quick_models import register_quick_champion
from quiet_airflow import REPARSE_S, REPARSE_VAR
from reader_shell import bash, block_after, commands, copy_of_checkout, readers_env

from e2e_support import MODEL, RETRY_DELAY_S
from local_stack import REPO, LocalStack, SocketWatch, free_port, fresh_database
from package_jobs import package_jobs

# The end-to-end tests' own DAGs (tests/e2e/dags), a second DAG bundle beside the project's.
LOCAL_BUNDLE = "airflow.dag_processing.bundles.local.LocalDagBundle"
DAG_BUNDLES = [
    {"name": "dags-folder", "classpath": LOCAL_BUNDLE, "kwargs": {}},
    {"name": "e2e-tests", "classpath": LOCAL_BUNDLE, "kwargs": {"path": str(Path(__file__).parent / "dags")}},
]


@pytest.fixture(scope="session")
def stack(tmp_path_factory):
    package_jobs()  # the --py-files archive must match the code under test
    local = LocalStack(state_dir=tmp_path_factory.mktemp("stack"), mlflow_port=free_port(), api_port=free_port())
    local.migrate()
    local.start_mlflow()
    yield local
    local.stop_services()
    local.stop_mlflow()


@pytest.fixture(scope="session")
def mlflow_client(stack):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=stack.tracking_uri)


@dataclass
class Demo:
    """``make demo`` as a newcomer runs it, and what it left in its checkout."""

    root: Path  # the copy of the checkout it ran in
    ran: subprocess.CompletedProcess
    listeners: SocketWatch  # every listening socket of its processes while it ran
    summary: dict  # the JSON summary it printed last

    @property
    def state(self) -> Path:
        return self.root / "var"

    def airflow_log(self) -> str:
        """Airflow's whole output of the nightly (the file the demo names)."""
        return Path(re.search(r"Airflow's output: (\S+)", self.ran.stdout)[1]).read_text()


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> Demo:
    """The README's first command, exactly as written (read from the Markdown), run once with
    bash in a copy of the checkout with a reader's environment: the nightly for today, for
    real (MLflow server, spark-submit, two Horovod ranks), on the default ports. The tests of
    the nightly (test_nightly_retrain.py) and of the README (test_readme_commands.py) read
    what it printed and what it left in the copy's ``var``."""
    command = commands(block_after(REPO / "README.md", "## The two commands"))[0]
    assert command.split()[:2] == ["make", "demo"]
    root = copy_of_checkout(tmp_path_factory.mktemp("demo") / "checkout")
    with SocketWatch(interval=0.5) as listeners:
        ran = bash(command, root, readers_env(), timeout=1500)
    assert ran.returncode == 0, ran.stdout[-6000:] + ran.stderr[-3000:]
    summary = json.loads(re.search(r"^\[nightly\] (\{.*?\n\})", ran.stdout, flags=re.DOTALL | re.MULTILINE)[1])
    return Demo(root, ran, listeners, summary)


@pytest.fixture(scope="session")
def scoring_champion(stack, mlflow_client):
    """A registered champion for tests whose subject is scoring, not training: the nightly's
    if a test of this process made one, else the CNN briefly trained in-process (seconds,
    where a nightly takes minutes)."""
    from mlflow.exceptions import MlflowException

    try:
        return mlflow_client.get_model_version_by_alias(MODEL, "champion")
    except MlflowException:
        register_quick_champion(stack.tracking_uri)
        return mlflow_client.get_model_version_by_alias(MODEL, "champion")


@pytest.fixture(scope="session")
def airflow_services(stack, postgres_server):
    """API server, scheduler and DAG processor (LocalExecutor) on a fresh Postgres metadata DB
    (a database of its own on the session's embedded PostgreSQL, ``postgres_server``).

    Not on the embedded SQLite DB: there, ``airflow backfill create`` fails at once with
    "database is locked" whenever the scheduler writes while it creates a run, and Airflow's
    clean-up of that partial backfill deletes the reprocessed runs and crashes the scheduler
    (``ObjectDeletedError``; Airflow 3.3.2). MLflow, Spark and the storage root stay the
    embedded ones. The tests' own DAGs (``tests/e2e/dags``) are a second DAG bundle.

    Airflow's masking of values by their names (connection extras, variables) is off
    (``hide_sensitive_var_conn_fields``): the platform's own masking must not depend on it,
    and with it on it would hide whether the operator registers what it hands a job.
    Failed tasks retry after ``RETRY_DELAY_S`` (the tests of lost tasks wait for retries).
    No DAG file changes while they run: the DAG processor re-parses each file every
    ``REPARSE_S`` instead of Airflow's 30 s (tests/quiet_airflow.py).

    The services stop after the last test of this process that uses them (see
    :func:`pytest_runtest_teardown`); a later one starts them again.
    """
    with fresh_database(postgres_server.uri, "airflow") as sql_conn:
        stack.extra_env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = sql_conn
        stack.extra_env["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"] = json.dumps(DAG_BUNDLES)
        stack.extra_env["AIRFLOW__CORE__HIDE_SENSITIVE_VAR_CONN_FIELDS"] = "False"
        stack.extra_env["ML_RETRY_DELAY_SECONDS"] = str(RETRY_DELAY_S)
        stack.extra_env[REPARSE_VAR] = str(REPARSE_S)
        try:
            stack.migrate()
            stack.start_airflow_services()
            yield stack
        finally:
            stack.stop_airflow_services()
            del stack.extra_env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
            del stack.extra_env["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"]
            del stack.extra_env["AIRFLOW__CORE__HIDE_SENSITIVE_VAR_CONN_FIELDS"]
            del stack.extra_env["ML_RETRY_DELAY_SECONDS"]
            del stack.extra_env[REPARSE_VAR]


@pytest.fixture(autouse=True)
def _airflow_services_running(request):
    """The services of a test that uses them run, also after an earlier test's process
    stopped them when it seemed to need them no more."""
    if "airflow_services" in request.fixturenames:
        stack = request.getfixturevalue("airflow_services")
        if not stack.service_pids():
            stack.start_airflow_services()


@pytest.hookimpl(trylast=True)  # after the test's own fixtures are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the Airflow services once the next test of this process does not use them: the
    scheduler, DAG processor and API server would otherwise idle on the 2 cores, re-parsing
    the DAGs, beside every test that follows until the session ends."""
    uses = "airflow_services" in item.fixturenames
    if uses and (nextitem is None or "airflow_services" not in nextitem.fixturenames):
        if stack := item.funcargs.get("airflow_services"):
            stack.stop_airflow_services()
