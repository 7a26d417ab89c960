"""Train: data-parallel training of a workflow's model over a curated window, on Spark.

The driver materialises the window's training rows as one Parquet shard set (a file per
rank), then starts N ranks on Spark executors with one of two backends:

- ``horovod``: ``horovod.spark.run``; gradients averaged by ``hvd.DistributedOptimizer``.
- ``torch_distributor``: Spark's maintained ``TorchDistributor`` (torchrun inside barrier
  tasks); ``torch.distributed`` (gloo on CPU, NCCL on CUDA) with ``DistributedDataParallel``.

Both run the same per-rank loop (:mod:`spark_jobs.training.loop`) on the model, loss and
training defaults the workflow declares (``--workflow``; ``--epochs`` etc. override its
defaults). Rank 0 logs per-epoch metrics to the MLflow run as it goes; the driver logs the
model (tensor signature, input example, the workflow in its metadata) only after every rank
has finished, so a failed rank never leaves a partial model behind.

With ``--checkpoint-dir`` (any fsspec URL: a local path, ``abfs://container/path`` through
adlfs, ...) rank 0 also writes a checkpoint after every epoch, and a restarted job (an
Airflow retry) resumes from the latest one instead of epoch 1; once the model is logged,
the driver removes them, so a run cleared after success trains again. Credentials for remote
storage come from the environment (adlfs reads ``AZURE_STORAGE_CONNECTION_STRING``),
never from the command line.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict

from spark_jobs import workflows
from spark_jobs.dataset import filter_training_rows
from spark_jobs.partitions import parse_ds, read_partitions
from spark_jobs.session import build_spark_session, configure_job_logging
from spark_jobs.storage import delete_path, write_json
from spark_jobs.training.checkpoints import Checkpoints
from spark_jobs.training.launch import BACKENDS, run_ranks
from spark_jobs.training.loop import TrainConfig
from spark_jobs.training.model_logging import log_trained_model
from spark_jobs.training.shards import write_training_shards

log = logging.getLogger(__name__)


def _parse_tag(value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {value!r}")
    return key, val


def _parse_workflow(name: str) -> workflows.Workflow:
    try:
        return workflows.load(name)
    except workflows.WorkflowError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflow", type=_parse_workflow, required=True, help="spark_jobs/workflows/<NAME>.toml")
    parser.add_argument("--curated-root", required=True)
    parser.add_argument("--start-ds", type=parse_ds, required=True, help="first day of the window")
    parser.add_argument("--end-ds", type=parse_ds, required=True, help="last day of the window")
    parser.add_argument("--work-dir", required=True, help="scratch folder for the rank shards")
    parser.add_argument("--output-manifest", required=True, help="JSON file describing the run")
    parser.add_argument("--experiment-name", required=True)
    parser.add_argument("--backend", choices=BACKENDS, default="horovod", help="how ranks are started and synchronised")
    training = "default: the workflow's [model.training]"
    parser.add_argument("--epochs", type=int, help=training)
    parser.add_argument("--learning-rate", type=float, help=f"base rate, scaled by the ranks ({training})")
    parser.add_argument("--batch-size", type=int, help=f"per rank ({training})")
    parser.add_argument("--momentum", type=float, help=training)
    parser.add_argument("--num-ranks", type=int, default=0, help="0: one per Spark slot")
    parser.add_argument("--holdout-pct", type=int, default=20)
    parser.add_argument("--split-seed", type=int, default=7)
    parser.add_argument("--seed", type=int, default=TrainConfig.seed)
    parser.add_argument(
        "--checkpoint-dir",
        help="fsspec URL for per-epoch checkpoints; a restart resumes from the latest "
        "(credentials from the environment)",
    )
    parser.add_argument("--tag", type=_parse_tag, action="append", default=[], help="KEY=VALUE run tag")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    configure_job_logging()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import mlflow

    spark = build_spark_session(f"train {args.workflow.name} {args.start_ds}..{args.end_ds}")
    try:
        num_ranks = args.num_ranks or spark.sparkContext.defaultParallelism
        config = TrainConfig.for_workflow(
            args.workflow,
            epochs=args.epochs,
            learning_rate=args.learning_rate,
            batch_size=args.batch_size,
            momentum=args.momentum,
            seed=args.seed,
            threads_per_rank=int(spark.conf.get("spark.task.cpus", "1")),
            checkpoint_dir=args.checkpoint_dir,
        )
        window_df = read_partitions(spark, args.curated_root, args.start_ds, args.end_ds)
        train_df = filter_training_rows(window_df, args.holdout_pct, args.split_seed)
        shard_dir = f"{args.work_dir.rstrip('/')}/shards"
        shard_files = write_training_shards(train_df, shard_dir, num_ranks)
        train_rows = spark.read.parquet(shard_dir).count()
        if train_rows == 0:
            raise ValueError(f"no training rows in {args.curated_root} for {args.start_ds}..{args.end_ds}")
        log.info(
            "training %s on %d rows in %d files with %d ranks (%s)",
            args.workflow.name,
            train_rows,
            len(shard_files),
            num_ranks,
            args.backend,
        )

        mlflow.set_experiment(args.experiment_name)
        try:
            run, rank0, model_uri = train_and_log(spark, args, config, train_df, shard_files, num_ranks, train_rows)
        finally:
            delete_path(spark, shard_dir)
        manifest = {
            "run_id": run.info.run_id,
            "model_uri": model_uri,
            "workflow": args.workflow.name,
            "backend": args.backend,
            "train_rows": train_rows,
            "num_ranks": num_ranks,
            "resumed_from_epoch": rank0["resumed_from_epoch"],
            "final_metrics": rank0["history"][-1],
            "data_start_ds": args.start_ds,
            "data_end_ds": args.end_ds,
        }
        write_json(spark, args.output_manifest, manifest)
        log.info("training manifest: %s", json.dumps(manifest))
    finally:
        spark.stop()


def close_abandoned_runs(experiment_id: str, tags: dict[str, str]) -> list[str]:
    """Mark KILLED the runs of earlier tries of this Airflow task that are still RUNNING.

    A try whose driver was killed (the task killed, the machine lost) never ends its MLflow
    run; the retry, which carries the same ``airflow_run_id`` tag, closes it so the UI does
    not show a run training forever. Without that tag (a job started by hand) nothing is
    touched. Returns the run ids closed.
    """
    from mlflow import MlflowClient

    airflow_run_id = tags.get("airflow_run_id")
    if not airflow_run_id:
        return []
    conditions = [f"tags.airflow_run_id = '{airflow_run_id}'", "attributes.status = 'RUNNING'"]
    if tags.get("airflow_dag_id"):
        conditions.append(f"tags.airflow_dag_id = '{tags['airflow_dag_id']}'")
    client = MlflowClient()
    closed = []
    for stale in client.search_runs([experiment_id], " and ".join(conditions)):
        client.set_terminated(stale.info.run_id, status="KILLED")
        log.warning("closed run %s of an earlier try of this task as KILLED", stale.info.run_id)
        closed.append(stale.info.run_id)
    return closed


def train_and_log(spark, args, config, train_df, shard_files, num_ranks, train_rows):
    """One MLflow run: params, distributed training (metrics from rank 0), then the model."""
    import mlflow

    tags = dict(args.tag)
    close_abandoned_runs(mlflow.get_experiment_by_name(args.experiment_name).experiment_id, tags)
    with mlflow.start_run(tags=tags) as run:
        mlflow.log_params(
            {
                **asdict(config),
                "num_ranks": num_ranks,
                "backend": args.backend,
                "data_start_ds": args.start_ds,
                "data_end_ds": args.end_ds,
                "train_rows": train_rows,
                "holdout_pct": args.holdout_pct,
                "split_seed": args.split_seed,
            }
        )
        rank0 = run_ranks(args.backend, spark, config, shard_files, num_ranks, run.info.run_id)
        model_uri = log_trained_model(args.workflow, rank0["state_dict"], train_df)
    if config.checkpoint_dir:
        removed = Checkpoints(config.checkpoint_dir).remove_all()
        log.info("model logged; removed the checkpoints of epochs %s from %s", removed, config.checkpoint_dir)
    return run, rank0, model_uri
