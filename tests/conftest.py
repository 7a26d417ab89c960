"""Make the three top-level trees importable the way Airflow and spark-submit see them:
``dags/`` and ``plugins/`` are on Airflow's sys.path, ``spark_jobs`` is a package."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "dags", REPO / "plugins", REPO / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

# Airflow reads its configuration at import; without this it would create ~/airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

_FIGURES: list[str] = []


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
