"""A Spark job that prints the MLflow credentials it was given shows them as ``***`` in its
task log: the operator registers the password and the token with Airflow's secrets masker
before spark-submit starts, and the worker's task supervisor masks every line it writes,
spark-submit's output included.

The task runs under the scheduler (``airflow_services``): only a supervised task writes the
log the UI shows (``airflow dags test`` prints log lines unmasked, and it is not a task log).
The connection is created through the REST API, as a platform team would, with a password
and a token in its extra. Airflow masks a connection's password by itself when a task reads
the connection; it masks the token (an extra under a sensitive name) only while
``hide_sensitive_var_conn_fields`` is on, and the services run with it off: there the token
is masked only because the operator registers it.
"""

from __future__ import annotations

import json
import uuid

import pytest

from e2e_support import finished_run, task_log, wait_for

DAG_ID, DAG_FILE = "e2e_print_credentials", "e2e_print_credentials.py"  # in tests/e2e/dags
MLFLOW_CONN_ID = "e2e_mlflow_with_credentials"  # the connection that DAG's task reads
TASK_ID = "print_credentials"
LOGIN = "e2e-user"


@pytest.fixture(scope="module")
def printed(airflow_services):
    """One run of the DAG with a fresh password and token: their values, the run's state,
    its task log as the REST API serves it, and the task's log files as written."""
    stack = airflow_services
    assert stack.env()["AIRFLOW__CORE__HIDE_SENSITIVE_VAR_CONN_FIELDS"] == "False", "Airflow would mask the token"
    password, token = f"pw-{uuid.uuid4().hex}", f"tok-{uuid.uuid4().hex}"
    connection = {
        "connection_id": MLFLOW_CONN_ID,
        "conn_type": "http",
        "host": "127.0.0.1",
        "port": stack.mlflow_port,
        "schema": "http",
        "login": LOGIN,
        "password": password,
        "extra": json.dumps({"token": token}),
    }
    status, body = stack.api("POST", "/connections", connection)
    assert status == 201, body

    def parsed() -> bool:
        if stack.api("GET", f"/dags/{DAG_ID}")[0] == 200:
            return True
        _, listing = stack.api("GET", "/importErrors?limit=100")
        errors = [e["stack_trace"] for e in listing.get("import_errors", []) if e["filename"].endswith(DAG_FILE)]
        assert not errors, errors[0][-3000:]
        return False

    wait_for(parsed, 120, 2, f"{DAG_ID} parsed")
    status, run = stack.api("POST", f"/dags/{DAG_ID}/dagRuns", {"logical_date": None})
    assert status == 200, run
    state = finished_run(stack, DAG_ID, run["dag_run_id"], timeout=300)["state"]
    log = task_log(stack, DAG_ID, run["dag_run_id"], TASK_ID)
    log_files = sorted((stack.airflow_home / "logs" / f"dag_id={DAG_ID}").rglob("*.log"))
    return {
        "password": password,
        "token": token,
        "state": state,
        "log": log,
        "files": {str(p): p.read_text(errors="replace") for p in log_files},
    }


def test_a_job_that_prints_the_credentials_shows_them_masked_in_the_task_log(printed):
    log = printed["log"]
    assert printed["state"] == "success", log[-3000:]
    # Not vacuous: the job received and printed them, and its output reached the log.
    assert f"MLFLOW_TRACKING_USERNAME={LOGIN}" in log, log[-3000:]
    assert "MLFLOW_TRACKING_PASSWORD=***" in log and "MLFLOW_TRACKING_TOKEN=***" in log, log[-3000:]
    assert printed["password"] not in log
    assert printed["token"] not in log


def test_the_task_log_files_hold_no_credential(printed):
    """What the API serves is what the supervisor wrote: masked on write, not on read."""
    files = printed["files"]
    assert files and any("MLFLOW_TRACKING_TOKEN=***" in text for text in files.values()), sorted(files)
    leaks = [p for p, text in files.items() if printed["password"] in text or printed["token"] in text]
    assert leaks == []
