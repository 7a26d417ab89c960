"""Run a workflow's nightly DAG once, for real, on the embedded single-machine stack.

Starts an MLflow tracking server on 127.0.0.1 (SQLite store, local artifacts), prepares
the SQLite Airflow metadata DB under var/airflow, writes the sample raw drops the run
needs (unless they exist), runs ``airflow dags test <workflow>_nightly_retrain <date>``
with spark-submit on local[2] (one line per task as it ends, with its state and seconds;
Airflow's whole output goes to a file under var/logs/), and prints
the registered version, its held-out metric and the scored partition. ``--workflow all``
runs every declared workflow's nightly in turn.

    scripts/run_nightly.py [--workflow mnist|diabetes|all] [--date YYYY-MM-DD] [--rows N] [--keep-mlflow]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "dags"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins"))

from local_stack import REPO, VENV_BIN, LocalStack  # noqa: E402
from ml_platform.config import PlatformConfig, load_config  # noqa: E402
from ml_platform.workflows import declared  # noqa: E402


class NotPromoted(Exception):
    """The nightly ran, but its version did not become champion: the one line to print."""


def summarize(stack: LocalStack, workflow: str, ds: str) -> dict:
    """The version this nightly registered, the champion and the scored partition, read back
    from MLflow and storage; :class:`NotPromoted` (one line: the version, its metric, the
    rule's reason, and what scored the day) when the nightly's version is not champion."""
    import pyarrow.dataset as pads
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    model = load_config(workflow).model_name
    client = MlflowClient(tracking_uri=stack.tracking_uri)
    mine = [v for v in client.search_model_versions(f"name = '{model}'") if v.tags.get("data_end_ds") == ds]
    candidate = max(mine, key=lambda v: int(v.version), default=None)
    try:
        champion = client.get_model_version_by_alias(model, "champion")
    except MlflowException:
        champion = None
    scored_dir = PlatformConfig.partition_path(str(stack.storage_root / "predictions" / workflow), ds)
    scored_versions, scored_rows = [], 0
    if Path(scored_dir).exists():
        scored = pads.dataset(str(scored_dir), format="parquet").to_table(columns=["model_version"])
        scored_versions, scored_rows = sorted(set(scored.column("model_version").to_pylist())), scored.num_rows
    if candidate is None or champion is None or champion.version != candidate.version:
        metric = candidate.tags.get("holdout_metric", "metric") if candidate is not None else "metric"
        about = (
            f"version {candidate.version} ({metric} {candidate.tags.get(f'holdout_{metric}', '?')}) was not promoted: "
            f"{candidate.tags.get('validation_reason', 'no reason recorded')}"
            if candidate is not None
            else "no version was registered"
        )
        if champion is not None and scored_versions:
            outcome = f"ds {ds} was scored with the older champion, version {', '.join(map(str, scored_versions))}"
        elif champion is not None:
            outcome = f"the champion is still version {champion.version}; ds {ds} was not scored"
        else:
            outcome = f"there is no champion, so ds {ds} was not scored"
        raise NotPromoted(f"{workflow}: {about}; {outcome}")
    metric = champion.tags.get("holdout_metric", "accuracy")
    drift_report = (
        Path(PlatformConfig.partition_path(str(stack.storage_root / "monitoring" / workflow), ds)) / "drift.json"
    )
    drift = json.loads(drift_report.read_text()) if drift_report.exists() else {"outcome": "not checked", "moved": []}
    return {
        "workflow": workflow,
        "partition": ds,
        "model": f"models:/{model}/{champion.version}",
        f"holdout_{metric}": champion.tags.get(f"holdout_{metric}"),
        "best_epoch": champion.tags.get("best_epoch"),
        "model_page": f"{stack.tracking_uri}/#/models/{model}/versions/{champion.version}",
        "scored_partition": str(scored_dir),
        "scored_rows": scored_rows,
        "scored_versions": scored_versions,
        "drift_check": drift["outcome"] + (f": {', '.join(drift['moved'])} moved" if drift["moved"] else ""),
        "drift_report": str(drift_report),
    }


# The one-line errors of the jobs worth showing when a nightly fails (the rest is in the log).
JOB_ERRORS = re.compile(r"(TrainingDiverged|WorkflowError|ValueError): ([^\n\\]+)")


def first_job_error(log_path: Path) -> str | None:
    """The first job error in Airflow's output, for the one line printed on failure."""
    try:
        match = JOB_ERRORS.search(log_path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
    return f"{match[1]}: {match[2].strip()}" if match else None


# What ``airflow dags test`` logs around each task it runs.
TASK_STARTS = re.compile(r"\[DAG TEST\] starting task_id=(\S+)")
TASK_ENDS = re.compile(r"\[DAG TEST\] end task task_id=(\S+)")
TASK_STATE = (
    "SELECT state FROM task_instance WHERE dag_id = :dag AND task_id = :task AND run_id = "
    "(SELECT run_id FROM dag_run WHERE dag_id = :dag ORDER BY id DESC LIMIT 1)"
)


def dags_test_with_progress(stack: LocalStack, dag_id: str, logical_date: str, log_path: Path) -> int:
    """``airflow dags test``, its whole output written to ``log_path``; prints one line per
    task as it ends: its name, state (read from the metadata DB) and seconds. Returns the
    exit code."""
    import sqlalchemy

    log_path.parent.mkdir(parents=True, exist_ok=True)
    engine = sqlalchemy.create_engine(stack.env()["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    started: dict[str, float] = {}
    try:
        with (
            open(log_path, "w", encoding="utf-8") as log,
            subprocess.Popen(
                [str(VENV_BIN / "airflow"), "dags", "test", dag_id, logical_date],
                env=stack.env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
            ) as proc,
        ):
            for line in proc.stdout:
                log.write(line)
                if match := TASK_STARTS.search(line):
                    started[match[1]] = time.monotonic()
                elif (match := TASK_ENDS.search(line)) and match[1] in started:
                    seconds = time.monotonic() - started.pop(match[1])
                    with engine.connect() as conn:
                        state = conn.execute(sqlalchemy.text(TASK_STATE), {"dag": dag_id, "task": match[1]}).scalar()
                    print(f"[nightly]   {match[1]:<20} {state or 'none':<12} {seconds:6.1f} s", flush=True)
    finally:
        engine.dispose()
    return proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--date",
        default=dt.datetime.now(dt.UTC).date().isoformat(),
        help="logical date of the run (default: today, UTC); it processes the day before",
    )
    parser.add_argument(
        "--workflow", default="mnist", choices=[*declared(), "all"], help="whose nightly to run (default mnist)"
    )
    parser.add_argument("--rows", type=int, default=5000, help="rows per generated daily drop")
    parser.add_argument("--keep-mlflow", action="store_true", help="leave the MLflow server running")
    args = parser.parse_args()

    ds = (dt.date.fromisoformat(args.date) - dt.timedelta(days=1)).isoformat()
    workflows = declared() if args.workflow == "all" else [args.workflow]
    stack = LocalStack(state_dir=REPO / "var")
    for workflow in workflows:
        if not Path(PlatformConfig.partition_path(str(stack.storage_root / "raw" / workflow), ds)).exists():
            stack.generate_drops([ds], rows=args.rows, workflow=workflow)
    stack.migrate()
    stack.start_mlflow()
    print(f"[nightly] MLflow tracking server on {stack.tracking_uri}")
    try:
        for workflow in workflows:
            dag_id = f"{workflow}_nightly_retrain"
            started = time.monotonic()
            log_path = REPO / "var" / "logs" / f"{dag_id}-{args.date}.log"
            print(f"[nightly] {dag_id} for {args.date} (partition {ds}); Airflow's output: {log_path}")
            returncode = dags_test_with_progress(stack, dag_id, args.date, log_path)
            if returncode != 0:
                error = first_job_error(log_path)
                print(f"[nightly] {dag_id} failed (exit {returncode}){': ' + error if error else ''}; see {log_path}")
                return returncode
            try:
                summary = summarize(stack, workflow, ds)
            except NotPromoted as not_promoted:
                print(f"[nightly] {not_promoted}; see {log_path}")
                return 1
            summary["wall_seconds"] = round(time.monotonic() - started, 1)
            print("[nightly] " + json.dumps(summary, indent=2))
        if args.keep_mlflow:
            print(f"[nightly] MLflow UI stays at {stack.tracking_uri} (stop it with: pkill -f 'mlflow server')")
            stack._mlflow = None
        return 0
    finally:
        stack.stop_mlflow()


if __name__ == "__main__":
    sys.exit(main())
