"""Train: data-parallel training of a workflow's model over a curated window, on Spark.

The driver materialises the window's training rows as one Parquet shard set (a file per
rank), then starts N ranks on Spark executors with one of two backends:

- ``horovod``: ``horovod.spark.run``; gradients averaged by ``hvd.DistributedOptimizer``.
- ``torch_distributor``: Spark's maintained ``TorchDistributor`` (torchrun inside barrier
  tasks); ``torch.distributed`` (gloo on CPU, NCCL on CUDA) with ``DistributedDataParallel``.

Both run the same per-rank loop (:mod:`spark_jobs.training.loop`) on the model, loss and
training defaults the workflow declares (``--workflow``; ``--epochs`` etc. override its
defaults). The window's held-out rows (:mod:`spark_jobs.dataset`), which no rank trains on,
are the validation rows: evaluated after every epoch, they give the validation curve, choose
the model (the epoch with the best validation metric, restored on every rank), and drive
early stopping and the divergence guard (:mod:`spark_jobs.training.policy`); the register
job gates on the same rows and weights. Rank 0 logs per-epoch training and validation
metrics to the MLflow run as it goes; the driver logs the best epoch's model (tensor
signature, input example, the workflow in its metadata) only after every rank has finished,
so a failed rank never leaves a partial model behind, and tags the run with ``best_epoch``
and ``stop_reason``. A run in which no epoch was usable (a non-finite loss from the first
epoch) fails with :class:`TrainingDiverged`, logging no model: nothing can be registered.
The run is named after the DAG run and window that made it, with the training and
validation rows as its datasets (:mod:`spark_jobs.tracking`).

With ``--checkpoint-dir`` (any fsspec URL: a local path, ``abfs://container/path`` through
adlfs, ...) rank 0 also writes a checkpoint after every epoch, and a restarted job (an
Airflow retry) resumes from the latest one instead of epoch 1; once the model is logged,
the driver removes them, so a run cleared after success trains again. Credentials for remote
storage come from the environment (adlfs reads ``AZURE_STORAGE_CONNECTION_STRING``),
never from the command line.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import threading
import time
from dataclasses import asdict

from ml_contract.exit_codes import EXIT_NOT_RETRYABLE
from ml_contract.layout import HOLDOUT_PCT, SPLIT_SEED
from spark_jobs import tracking, workflows
from spark_jobs.dataset import filter_holdout_rows, filter_training_rows
from spark_jobs.partitions import parse_ds, read_partitions
from spark_jobs.session import build_spark_session, configure_job_logging
from spark_jobs.storage import delete_path, write_json
from spark_jobs.training.checkpoints import Checkpoints
from spark_jobs.training.launch import BACKENDS, run_ranks
from spark_jobs.training.loop import TrainConfig
from spark_jobs.training.model_logging import log_trained_model
from spark_jobs.training.shards import write_training_shards

log = logging.getLogger(__name__)

# The manifest's ``timeline``: wall-clock times (time.time()) from the driver's start to
# rank 0's first optimizer step, in order; each phase is the gap to the one before.
# Rank times are rank 0's (on a cluster, its host's clock).
TIMELINE = {
    "driver_started": "spark-submit's JVM started the Python driver",
    "job_imported": "the job's modules imported",
    "session_ready": "the Spark session built",
    "data_staged": "the window read, split and written as rank shards; rows counted",
    "ranks_launched": "the MLflow run started, its datasets logged; ranks launched",
    "rank_process_started": "rank 0's process created (Spark tasks, Horovod's services, the spawn)",
    "rank_started": "rank 0's process running the rank entry (its interpreter's imports)",
    "rank_ready": "rank 0 joined the collective (rendezvous)",
    "data_loaded": "rank 0's shard in tensors, model built and broadcast",
    "first_step": "rank 0's first optimizer step done",
}


# Run tags (and manifest keys) naming the epoch whose weights were logged, and why training ended.
TAG_BEST_EPOCH = "best_epoch"
TAG_STOP_REASON = "stop_reason"


class TrainingDiverged(RuntimeError):
    """No epoch of the run was usable: nothing was logged, nothing can be registered."""


def best_epoch_or_fail(rank0: dict, config: TrainConfig) -> dict:
    """The history entry of the best epoch; :class:`TrainingDiverged`, in one line saying
    what to change, when no epoch was usable."""
    if rank0["state_dict"] is None or not rank0["best_epoch"]:
        notes = "; ".join(rank0.get("stop_notes") or []) or "no epoch finished"
        raise TrainingDiverged(
            f"training diverged with no usable epoch ({notes}); no model was logged and nothing will be "
            f"registered: lower the learning rate (it was {config.learning_rate:g} per rank, "
            f"{config.optimizer}), add a warm-up or clip_grad_norm in [model.training]"
        )
    return next(entry for entry in rank0["history"] if entry["epoch"] == rank0["best_epoch"])


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
    parser.add_argument(
        "--holdout-pct",
        type=int,
        default=HOLDOUT_PCT,
        help="share of the window (%%) held out: validation, then registration",
    )
    parser.add_argument(
        "--bind-cores",
        choices=("on", "off"),
        default="on",
        help="on: each Horovod rank bound to cores of its own where a host's ranks fill its cores "
        "exactly (spark_jobs.training.launch.rank_cores); off: scheduling left to the OS",
    )
    parser.add_argument("--split-seed", type=int, default=SPLIT_SEED)
    parser.add_argument("--seed", type=int, default=TrainConfig.seed)
    parser.add_argument(
        "--checkpoint-dir",
        help="fsspec URL for per-epoch checkpoints; a restart resumes from the latest "
        "(credentials from the environment)",
    )
    parser.add_argument("--tag", type=tracking.parse_tag, action="append", default=[], help="KEY=VALUE run tag")
    return parser.parse_args(argv)


# What the driver imports after the data is staged (the MLflow run; Horovod's Gloo check and
# the model's logging need torch): imported meanwhile, while the driver waits on Spark.
DRIVER_MODULES = {"horovod": ("mlflow", "torch", "horovod.torch"), "torch_distributor": ("mlflow", "torch")}


def preload(modules: tuple[str, ...]) -> threading.Thread:
    """Import ``modules`` in a daemon thread, while the driver's main thread waits on the
    JVM (data staging): about 2 s of imports off the training's start-up on 2
    cores. A module that fails to import here is imported, and fails, where it is used."""

    def load() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - raised again where the module is needed
                log.debug("preloading %s failed", name, exc_info=True)

    thread = threading.Thread(target=load, name="preload-modules", daemon=True)
    thread.start()
    return thread


def main(argv: list[str] | None = None, started_at: float | None = None) -> None:
    """The job; ``started_at``: when the driver started (wall clock), for the manifest's
    start-up timeline (:data:`TIMELINE`)."""
    timeline = {"driver_started": started_at or time.time(), "job_imported": time.time()}
    configure_job_logging()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    spark = build_spark_session(f"train {args.workflow.name} {args.start_ds}..{args.end_ds}")
    timeline["session_ready"] = time.time()
    preload(DRIVER_MODULES[args.backend])
    try:
        num_ranks = args.num_ranks or spark.sparkContext.defaultParallelism
        config = TrainConfig.for_workflow(
            args.workflow,
            epochs=args.epochs,
            learning_rate=args.learning_rate,
            batch_size=args.batch_size,
            momentum=args.momentum,
            seed=args.seed,
            threads_per_rank=int(spark.conf.get("spark.task.cpus", "1")),  # type: ignore[arg-type]  # get() with a str default returns str
            checkpoint_dir=args.checkpoint_dir,
            bind_cores=args.bind_cores == "on",
        )
        window_df = read_partitions(spark, args.curated_root, args.start_ds, args.end_ds)
        datasets = {
            "training": filter_training_rows(window_df, args.holdout_pct, args.split_seed),
            "validation": filter_holdout_rows(window_df, args.holdout_pct, args.split_seed),
        }
        work_dir = args.work_dir.rstrip("/")
        shards = {
            context: write_training_shards(df, f"{work_dir}/{context}", num_ranks) for context, df in datasets.items()
        }
        rows = {context: spark.read.parquet(f"{work_dir}/{context}").count() for context in datasets}
        timeline["data_staged"] = time.time()
        train_rows = rows["training"]
        if train_rows == 0:
            raise ValueError(f"no training rows in {args.curated_root} for {args.start_ds}..{args.end_ds}")
        if rows["validation"] == 0:
            log.warning("no held-out rows in the window: no val_* metrics")
        log.info(
            "training %s on %d rows (validation %d) in %d files with %d ranks (%s)",
            args.workflow.name,
            train_rows,
            rows["validation"],
            len(shards["training"]),
            num_ranks,
            args.backend,
        )

        tracking.set_up_experiment(args.experiment_name)
        try:
            run, rank0, model_uri = train_and_log(spark, args, config, datasets, shards, num_ranks, rows, timeline)
        finally:
            for context in datasets:
                delete_path(spark, f"{work_dir}/{context}")
        manifest = {
            "run_id": run.info.run_id,
            "model_uri": model_uri,
            "workflow": args.workflow.name,
            "backend": args.backend,
            "train_rows": train_rows,
            "validation_rows": rows["validation"],
            "num_ranks": num_ranks,
            "resumed_from_epoch": rank0["resumed_from_epoch"],
            "best_epoch": rank0["best_epoch"],
            "stop_reason": rank0["stop_reason"],
            "best_metrics": best_epoch_or_fail(rank0, config),
            "final_metrics": rank0["history"][-1],
            "timeline": {**timeline, **rank0["timeline"]},
            "rank0_cores": rank0["cores"],
            "data_start_ds": args.start_ds,
            "data_end_ds": args.end_ds,
        }
        write_json(spark, args.output_manifest, manifest)
        log.info("training manifest: %s", json.dumps(manifest))
    except TrainingDiverged as err:
        # The run's rate or data, not the machine: the same arguments diverge again, so the
        # task that submitted this job fails without retrying (ml_contract.exit_codes).
        log.error("TrainingDiverged: %s", err)
        raise SystemExit(EXIT_NOT_RETRYABLE) from None
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


def train_and_log(spark, args, config, datasets, shards, num_ranks, rows, timeline):
    """One MLflow run, named after the DAG run and window: params, the training and
    validation rows as datasets, distributed training (metrics from rank 0), then the model.
    Records in ``timeline`` when the ranks were launched."""
    import mlflow

    tags = dict(args.tag)
    close_abandoned_runs(mlflow.get_experiment_by_name(args.experiment_name).experiment_id, tags)
    name = args.workflow.name
    description = tracking.run_description(
        name,
        args.start_ds,
        args.end_ds,
        tags,
        curated_root=args.curated_root,
        rows=rows,
        backend=args.backend,
        num_ranks=num_ranks,
        epochs=config.epochs,
    )
    run_name = tracking.run_name(name, args.start_ds, args.end_ds, tags)
    with mlflow.start_run(run_name=run_name, tags=tags, description=description) as run:
        mlflow.log_params(
            {
                **asdict(config),
                "num_ranks": num_ranks,
                "backend": args.backend,
                "data_start_ds": args.start_ds,
                "data_end_ds": args.end_ds,
                "train_rows": rows["training"],
                "validation_rows": rows["validation"],
                "holdout_pct": args.holdout_pct,
                "split_seed": args.split_seed,
            }
        )
        tracking.log_training_data(
            datasets,
            rows,
            workflow=name,
            curated_root=args.curated_root,
            start_ds=args.start_ds,
            end_ds=args.end_ds,
        )
        timeline["ranks_launched"] = time.time()
        rank0 = run_ranks(
            args.backend, spark, config, shards["training"], num_ranks, run.info.run_id, shards["validation"]
        )
        mlflow.set_tag(TAG_STOP_REASON, rank0["stop_reason"])
        best = best_epoch_or_fail(rank0, config)  # raises: the run ends FAILED, with no model
        mlflow.set_tag(TAG_BEST_EPOCH, str(rank0["best_epoch"]))
        log.info(
            "best epoch %d of %d (%s): %s",
            rank0["best_epoch"],
            len(rank0["history"]),
            rank0["stop_reason"],
            {k: v for k, v in best.items() if k.startswith("val_")},
        )
        model_uri = log_trained_model(args.workflow, rank0["state_dict"], datasets["training"])
    if config.checkpoint_dir:
        removed = Checkpoints(config.checkpoint_dir).remove_all()
        log.info("model logged; removed the checkpoints of epochs %s from %s", removed, config.checkpoint_dir)
    return run, rank0, model_uri
