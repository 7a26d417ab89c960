"""Run the nightly DAG once, for real, on the embedded single-machine stack.

Starts an MLflow tracking server on 127.0.0.1 (SQLite store, local artifacts), prepares
the SQLite Airflow metadata DB under var/airflow, writes the sample raw drops the run
needs (unless they exist), runs ``airflow dags test ml_nightly_retrain <date>`` with
spark-submit on local[2], and prints where the model version and scored partition are.

    scripts/run_nightly.py [--date YYYY-MM-DD] [--rows N] [--keep-mlflow]
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
from ml_platform.partitions import window_start_ds  # noqa: E402

DAG_ID = "ml_nightly_retrain"


def summarize(stack: LocalStack, ds: str) -> dict:
    """Champion version and the scored partition, read back from MLflow and storage."""
    import pyarrow.dataset as pads
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=stack.tracking_uri)
    champion = client.get_model_version_by_alias("mnist_cnn", "champion")
    scored_dir = stack.storage_root / "predictions" / "mnist" / f"ds={ds}"
    scored = pads.dataset(str(scored_dir), format="parquet").to_table(columns=["model_version"])
    return {
        "partition": ds,
        "model": f"models:/mnist_cnn/{champion.version}",
        "holdout_accuracy": champion.tags.get("holdout_accuracy"),
        "model_page": f"{stack.tracking_uri}/#/models/mnist_cnn/versions/{champion.version}",
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
    parser.add_argument("--rows", type=int, default=5000, help="rows per generated daily drop")
    parser.add_argument("--keep-mlflow", action="store_true", help="leave the MLflow server running")
    args = parser.parse_args()

    ds = (dt.date.fromisoformat(args.date) - dt.timedelta(days=1)).isoformat()
    stack = LocalStack(state_dir=REPO / "var")
    missing = [d for d in [window_start_ds(ds, 1)] if not (stack.storage_root / "raw" / "mnist" / f"ds={d}").exists()]
    if missing:
        stack.generate_drops(missing, rows=args.rows)
    stack.migrate()
    stack.start_mlflow()
    print(f"[nightly] MLflow tracking server on {stack.tracking_uri}")
    started = time.monotonic()
    try:
        result = stack.dags_test(DAG_ID, args.date, check=False)
        if result.returncode != 0:
            print(f"[nightly] {DAG_ID} failed (exit {result.returncode}); task logs: {stack.airflow_home / 'logs'}")
            return result.returncode
        summary = summarize(stack, ds)
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
