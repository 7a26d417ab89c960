"""Make the three top-level trees importable the way Airflow and spark-submit see them:
``dags/`` and ``plugins/`` are on Airflow's sys.path, ``spark_jobs`` is a package."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "dags", REPO / "plugins", REPO / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

# Airflow reads its configuration at import; without this it would create ~/airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

_FIGURES: list[str] = []

# Test tiers (markers, registered in pytest.ini), given by what a test needs, so that no
# test has to be marked by hand and none is left out of a tier:
# - e2e: the DAGs, jobs and services together (tests/e2e, tests/faults, tests/azure, and
#   the whole benchmark suite at tiny size);
# - integration: a server this process starts or reaches (an MLflow tracking server,
#   PostgreSQL, spark-submit on an embedded stack);
# - unit: everything else, in-process (local SparkSession, SQLite stores, DagBag).
E2E_FOLDERS = {"e2e", "faults", "azure"}
E2E_FILES = {"test_bench_tiny.py"}
SERVER_FIXTURES = {"mlflow_server", "training_stack"}


def tier(item: pytest.Item) -> str:
    path = Path(str(item.path)).relative_to(REPO / "tests")
    if path.parts[0] in E2E_FOLDERS or path.name in E2E_FILES:
        return "e2e"
    params = getattr(getattr(item, "callspec", None), "params", {})
    if SERVER_FIXTURES & set(item.fixturenames) or "postgresql" in params.values():
        return "integration"
    return "unit"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(tier(item))


@pytest.fixture(scope="session")
def report_figure():
    """Record a measured figure (parse time, wall-time ratio) for the end-of-run summary."""
    return _FIGURES.append


def pytest_terminal_summary(terminalreporter):
    if _FIGURES:
        terminalreporter.section("measured figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)


@pytest.fixture
def parse_dags(monkeypatch: pytest.MonkeyPatch):
    """``parse_dags(**env)``: every DAG parsed with these settings (ML_* variables), as the
    DAG processor of a deployment with that environment would parse them."""

    def parse(**env: str):
        from airflow.dag_processing.dagbag import DagBag

        for name, value in env.items():
            monkeypatch.setenv(name, value)
        bag = DagBag(dag_folder=str(REPO / "dags"))
        assert bag.import_errors == {}
        return bag

    return parse
