"""Run a workflow's nightly DAG once, for real, on the embedded single-machine stack.

Starts an MLflow tracking server on 127.0.0.1 (SQLite store, local artifacts), prepares
the SQLite Airflow metadata DB under var/airflow, writes the sample raw drops the run
needs (unless they exist), runs ``airflow dags test <workflow>_nightly_retrain <date>``
with spark-submit on local[2], and prints the registered version, its held-out metric and
the scored partition. ``--workflow all`` runs every declared workflow's nightly in turn.

    scripts/run_nightly.py [--workflow mnist|diabetes|all] [--date YYYY-MM-DD] [--rows N] [--keep-mlflow]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "dags"))

from local_stack import REPO, LocalStack  # noqa: E402
from ml_platform.config import PlatformConfig, load_config  # noqa: E402
from ml_platform.workflows import declared  # noqa: E402


def summarize(stack: LocalStack, workflow: str, ds: str) -> dict:
    """Champion version and the scored partition, read back from MLflow and storage."""
    import pyarrow.dataset as pads
    from mlflow import MlflowClient

    model = load_config(workflow).model_name
    client = MlflowClient(tracking_uri=stack.tracking_uri)
    champion = client.get_model_version_by_alias(model, "champion")
    scored_dir = PlatformConfig.partition_path(str(stack.storage_root / "predictions" / workflow), ds)
    scored = pads.dataset(str(scored_dir), format="parquet").to_table(columns=["model_version"])
    metric = champion.tags.get("holdout_metric", "accuracy")
    return {
        "workflow": workflow,
        "partition": ds,
        "model": f"models:/{model}/{champion.version}",
        f"holdout_{metric}": champion.tags.get(f"holdout_{metric}"),
        "model_page": f"{stack.tracking_uri}/#/models/{model}/versions/{champion.version}",
        "scored_partition": str(scored_dir),
        "scored_rows": scored.num_rows,
        "scored_versions": sorted(set(scored.column("model_version").to_pylist())),
    }


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
            result = stack.dags_test(dag_id, args.date, check=False)
            if result.returncode != 0:
                print(f"[nightly] {dag_id} failed (exit {result.returncode}); task logs: {stack.airflow_home / 'logs'}")
                return result.returncode
            summary = summarize(stack, workflow, ds)
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
