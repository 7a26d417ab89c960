"""Train: data-parallel training of the MNIST CNN over a curated window, on Spark.

The driver materialises the window's training rows as one Parquet shard set (a file per
rank), then starts N ranks on Spark executors with one of two backends:

- ``horovod``: ``horovod.spark.run``; gradients averaged by ``hvd.DistributedOptimizer``.
- ``torch_distributor``: Spark's maintained ``TorchDistributor`` (torchrun inside barrier
  tasks); ``torch.distributed`` (gloo on CPU, NCCL on CUDA) with ``DistributedDataParallel``.

Both run the same per-rank loop (:func:`train_rank`) through a small :class:`Collective`:
each rank reads its own files, pins its device (CUDA by local rank when present, else CPU
with the task's threads), starts from rank 0's initial state and runs the same number of
steps as every other rank. Rank 0 logs per-epoch metrics to the MLflow run as it goes; the
driver logs the model (signature and input example) only after every rank has finished,
so a failed rank never leaves a partial model behind.

With ``--checkpoint-dir`` (any fsspec URL: a local path, ``abfs://container/path`` through
adlfs, ...) rank 0 also writes a checkpoint after every epoch, and a restarted job (an
Airflow retry) resumes from the latest one instead of epoch 1; once the model is logged,
the driver removes them, so a run cleared after success trains again. Credentials for remote
storage come from the environment (adlfs reads ``AZURE_STORAGE_CONNECTION_STRING``),
never from the command line.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import os
import posixpath
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlparse

from pyspark.sql import SparkSession

from spark_jobs.dataset import filter_training_rows
from spark_jobs.partitions import parse_ds, read_partitions
from spark_jobs.schema import LABEL_COL, PIXEL_COLS
from spark_jobs.session import build_spark_session, configure_job_logging
from spark_jobs.storage import delete_path, list_files, write_json

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

BACKENDS = ("horovod", "torch_distributor")
# What the driver hands the rank processes from its environment, with either backend. The
# values cross the network (Horovod's task RPC, unencrypted; the closure TorchDistributor
# ships with each task), so only what a rank needs: where the job's modules are, thread
# and collective (Horovod, Gloo, NCCL) settings, and the MLflow endpoint with its
# credentials, because rank 0 logs each epoch's metrics to the run. Never the Airflow
# connections, the metadata-DB URL or any other secret of the driver.
RANK_ENV_NAMES = ("PYTHONPATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
RANK_ENV_PREFIXES = ("MLFLOW_", "HOROVOD_", "GLOO_", "NCCL_")
# Storage credentials only with checkpoints on that storage (rank 0 writes them, every
# rank reads the one it resumes from): adlfs reads these for abfs[s]:// and az:// URLs.
CHECKPOINT_ENV_PREFIXES = {"abfs": ("AZURE_STORAGE_",), "abfss": ("AZURE_STORAGE_",), "az": ("AZURE_STORAGE_",)}


def rank_environment(environ: Mapping[str, str], checkpoint_dir: str | None) -> dict[str, str]:
    """The part of the driver's ``environ`` a rank gets (the allow-list above)."""
    prefixes = RANK_ENV_PREFIXES
    if checkpoint_dir:
        prefixes += CHECKPOINT_ENV_PREFIXES.get(urlparse(checkpoint_dir).scheme, ())
    return {k: v for k, v in environ.items() if k in RANK_ENV_NAMES or k.startswith(prefixes)}


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 10
    # Base rate, scaled by the number of ranks. Above the tutorial's 0.01 because a
    # nightly window holds thousands of rows, not 60k: it reaches >= 0.93 in 10 epochs.
    learning_rate: float = 0.05
    batch_size: int = 32
    momentum: float = 0.5
    seed: int = 42
    threads_per_rank: int = 1
    checkpoint_dir: str | None = None


def _parse_tag(value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {value!r}")
    return key, val


def write_training_shards(train_df, shard_dir: str, num_ranks: int) -> list[str]:
    """Write the training rows as ``num_ranks`` Parquet files; return their paths, sorted."""
    (train_df.select(LABEL_COL, *PIXEL_COLS).repartition(num_ranks).write.mode("overwrite").parquet(shard_dir))
    return list_files(train_df.sparkSession, shard_dir, suffix=".parquet")


def read_rank_shard(files: list[str]):
    """(pixels float32 [n, 784], labels int64 [n]) from this rank's Parquet files."""
    import numpy as np
    import pyarrow.parquet as pq

    tables = [pq.read_table(f.removeprefix("file:")) for f in files]
    if not tables:
        return np.zeros((0, len(PIXEL_COLS)), dtype=np.float32), np.zeros(0, dtype=np.int64)
    import pyarrow as pa

    table = pa.concat_tables(tables)
    pixels = np.column_stack([table.column(c).to_numpy() for c in PIXEL_COLS]).astype(np.float32)
    return pixels, table.column(LABEL_COL).to_numpy().astype(np.int64)


# --- checkpoints -------------------------------------------------------------------------


class Checkpoints:
    """Training state after each epoch, ``epoch-<n>.pt`` under an fsspec URL.

    A checkpoint holds the model and optimizer state, the epoch and the metrics history so
    far. It is written under a temporary name and then moved into place, so a job killed
    while writing leaves the previous checkpoint as the latest; older ones are removed.
    They serve the retries of one unfinished run only: once its model is logged, the job
    removes them all (:meth:`remove_all`).
    """

    NAME = re.compile(r"^epoch-(\d+)\.pt$")

    def __init__(self, url: str) -> None:
        import fsspec

        self.url = url
        self.fs, self.root = fsspec.core.url_to_fs(url)

    def _path(self, epoch: int) -> str:
        return posixpath.join(self.root, f"epoch-{epoch:04d}.pt")

    def epochs(self) -> list[int]:
        try:
            names = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for name in names if (m := self.NAME.match(posixpath.basename(name.rstrip("/")))))

    def latest_epoch(self) -> int:
        """The last epoch with a checkpoint; 0 when there is none."""
        return max(self.epochs(), default=0)

    def load(self, epoch: int) -> dict[str, Any]:
        import torch

        with self.fs.open(self._path(epoch), "rb") as stream:
            return torch.load(io.BytesIO(stream.read()), map_location="cpu", weights_only=True)

    def save(self, epoch: int, state: dict[str, Any]) -> None:
        import torch

        buffer = io.BytesIO()
        torch.save(state, buffer)
        if not self.fs.exists(self.root):
            self.fs.mkdir(self.root, create_parents=True)  # adlfs: creates the container if needed
        partial = f"{self._path(epoch)}.partial"
        self.fs.pipe_file(partial, buffer.getvalue())
        self.fs.mv(partial, self._path(epoch))
        for older in self.epochs():
            if older < epoch:
                self.fs.rm(self._path(older))

    def remove_all(self) -> list[int]:
        """Remove this run's checkpoints and partial writes; return the epochs removed.

        A run cleared after success then trains from scratch instead of resuming after its
        last epoch and logging the old weights as a new model. Only files this class writes
        are removed, never the folder with anything else in it (a URL given by hand may
        name a container); an emptied local folder goes too.
        """
        epochs = self.epochs()
        try:
            names = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return epochs
        for name in names:
            base = posixpath.basename(name.rstrip("/"))
            if self.NAME.match(base) or self.NAME.match(base.removesuffix(".partial")):
                self.fs.rm(name)
        if "file" in self.fs.protocol and not self.fs.ls(self.root, detail=False):
            self.fs.rmdir(self.root)
        return epochs


# --- the per-rank loop and the collectives it needs -------------------------------------


class Collective(Protocol):
    """The few collective operations the training loop needs, whatever the backend.

    Values cross as plain Python numbers so the loop never cares where a backend wants
    its communication tensors (NCCL: on the GPU; Gloo, Horovod's CPU ops: on the host).
    """

    rank: int
    size: int
    local_rank: int

    def allreduce_sum(self, values: list[float]) -> list[float]: ...

    def allreduce_min(self, value: int) -> int: ...

    def distribute(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[Any, Any]:
        """Give every rank rank 0's initial state; return (model to call, optimizer to step)
        such that each step applies the gradients averaged over all ranks."""
        ...

    def close(self) -> None: ...


class HorovodCollective:
    """Horovod: broadcast parameters and optimizer state, ``hvd.DistributedOptimizer``."""

    def __init__(self) -> None:
        import horovod.torch as hvd

        hvd.init()
        self._hvd = hvd
        self.rank, self.size, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()

    def allreduce_sum(self, values: list[float]) -> list[float]:
        import torch

        tensor = torch.tensor(values, dtype=torch.float64)
        return self._hvd.allreduce(tensor, op=self._hvd.Sum).tolist()

    def allreduce_min(self, value: int) -> int:
        import torch

        return int(self._hvd.allreduce(torch.tensor(value), op=self._hvd.Min))

    def distribute(self, model, optimizer):
        self._hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        self._hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        return model, self._hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    def close(self) -> None:
        """Nothing to do: ``horovod.spark.run`` tears the ranks down."""


class TorchCollective:
    """``torch.distributed`` from torchrun's environment (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``MASTER_ADDR``/``PORT``): NCCL on CUDA, Gloo on CPU, and
    ``DistributedDataParallel``, which overlaps the gradient all-reduce with backward."""

    def __init__(self) -> None:
        import torch
        import torch.distributed as dist

        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if torch.cuda.is_available():
            self._device = torch.device("cuda", self.local_rank)
            torch.cuda.set_device(self._device)
            dist.init_process_group("nccl", device_id=self._device)
        else:
            self._device = torch.device("cpu")
            dist.init_process_group("gloo")
        self._dist = dist
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def _allreduce(self, tensor: torch.Tensor, op) -> torch.Tensor:
        tensor = tensor.to(self._device)
        self._dist.all_reduce(tensor, op=op)
        return tensor.cpu()

    def allreduce_sum(self, values: list[float]) -> list[float]:
        import torch

        return self._allreduce(torch.tensor(values, dtype=torch.float64), self._dist.ReduceOp.SUM).tolist()

    def allreduce_min(self, value: int) -> int:
        import torch

        return int(self._allreduce(torch.tensor(value), self._dist.ReduceOp.MIN))

    def distribute(self, model, optimizer):
        from torch.nn.parallel import DistributedDataParallel

        # One explicit broadcast of rank 0's parameters and buffers (init_sync=False stops
        # DDP from doing it again). SGD has no optimizer state before its first step.
        for tensor in model.state_dict().values():
            self._dist.broadcast(tensor, src=0)
        device_ids = [self._device] if self._device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids, init_sync=False), optimizer

    def close(self) -> None:
        if self._dist.is_initialized():
            self._dist.destroy_process_group()


def rank_device(local_rank: int, threads_per_rank: int) -> torch.device:
    """CUDA by local rank when this process sees GPUs (Spark gives each task its own, so
    local ranks index them), else the CPU, held to the task's cores."""
    import torch

    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        return device
    torch.set_num_threads(threads_per_rank)
    return torch.device("cpu")


def train_rank(collective: Collective, config: TrainConfig, shard_files: list[str], mlflow_run_id: str | None) -> dict:
    """Body of one rank, the same for every backend.

    Returns the rank's row count, the per-epoch history (identical on every rank: it is
    all-reduced) and the trained weights. Every rank returns the weights, which are equal
    after synchronous updates, because TorchDistributor keeps the output of whichever
    process of its first task finishes last, not necessarily rank 0's.

    With checkpoints, every rank starts from the latest one (the same file, so the same
    state on every rank) and skips the epochs it covers; rank 0 writes one per epoch.
    """
    import torch
    import torch.nn.functional as F

    from spark_jobs.model import MnistNet

    rank, size = collective.rank, collective.size
    device = rank_device(collective.local_rank, config.threads_per_rank)
    torch.manual_seed(config.seed)

    pixels, labels = read_rank_shard(shard_files[rank::size])
    x_all = torch.from_numpy(pixels).to(device)
    y_all = torch.from_numpy(labels).to(device)
    # Every rank must run the same number of steps or an all-reduce would wait forever.
    steps = collective.allreduce_min(math.ceil(len(labels) / config.batch_size))
    if steps == 0:
        raise ValueError(f"rank {rank} has no training rows: too few rows for {size} ranks")

    net = MnistNet().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=config.learning_rate * size, momentum=config.momentum)
    checkpoints = Checkpoints(config.checkpoint_dir) if config.checkpoint_dir else None
    start_epoch, history = 0, []
    if checkpoints is not None:
        # Every rank must resume from the same epoch, whatever its listing showed.
        start_epoch = collective.allreduce_min(checkpoints.latest_epoch())
        if start_epoch:
            state = checkpoints.load(start_epoch)
            net.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            history = state["history"]
            if rank == 0:
                print(f"[rank 0] resuming after epoch {start_epoch} from {checkpoints.url}", flush=True)
    model, optimizer = collective.distribute(net, optimizer)

    client = None
    if rank == 0 and mlflow_run_id:
        from mlflow import MlflowClient

        client = MlflowClient()
    generator = torch.Generator().manual_seed(config.seed + rank)
    for _ in range(start_epoch):  # the shuffles of the epochs done, as an unbroken run drew them
        torch.randperm(len(labels), generator=generator)
    started = time.perf_counter()
    for epoch in range(start_epoch + 1, config.epochs + 1):
        model.train()
        order = torch.randperm(len(labels), generator=generator).to(device)
        loss_sum, correct, seen = 0.0, 0, 0
        for step in range(steps):
            idx = order[step * config.batch_size : (step + 1) * config.batch_size]
            optimizer.zero_grad()
            output = model(x_all[idx])
            loss = F.nll_loss(output, y_all[idx])
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(idx)
            correct += int((output.argmax(dim=1) == y_all[idx]).sum())
            seen += len(idx)
        total_loss, total_correct, total_seen = collective.allreduce_sum([loss_sum, correct, seen])
        metrics = {
            "train_loss": total_loss / total_seen,
            "train_accuracy": total_correct / total_seen,
            "samples_per_second": total_seen * (epoch - start_epoch) / (time.perf_counter() - started),
        }
        history.append({"epoch": epoch, **metrics})
        if client is not None:
            for key, value in metrics.items():
                client.log_metric(mlflow_run_id, key, value, step=epoch)
            print(f"[rank 0] epoch {epoch}/{config.epochs} {metrics}", flush=True)
        if checkpoints is not None and rank == 0:
            state = {"epoch": epoch, "model": net.state_dict(), "optimizer": optimizer.state_dict(), "history": history}
            checkpoints.save(epoch, state)

    return {
        "rank": rank,
        "rows": len(labels),
        "steps_per_epoch": steps,
        "resumed_from_epoch": start_epoch,
        "history": history,
        "state_dict": {k: v.detach().cpu() for k, v in net.state_dict().items()},
    }


def horovod_rank(config: TrainConfig, shard_files: list[str], mlflow_run_id: str | None) -> dict:
    """Entry of one Horovod rank."""
    collective = HorovodCollective()
    try:
        return train_rank(collective, config, shard_files, mlflow_run_id)
    finally:
        collective.close()


def torch_distributor_rank(config_fields: dict[str, Any], shard_files: list[str], mlflow_run_id: str | None) -> dict:
    """Entry of one torchrun process. Takes the config as a plain dict: the arguments are
    unpickled before this package is importable (see :func:`_torchrun_entry`)."""
    collective = TorchCollective()
    try:
        return train_rank(collective, TrainConfig(**config_fields), shard_files, mlflow_run_id)
    finally:
        collective.close()


# --- launching the ranks -----------------------------------------------------------------


def run_horovod(
    spark: SparkSession, config: TrainConfig, shard_files: list[str], num_ranks: int, run_id: str | None
) -> dict:
    """Ranks as Spark tasks through ``horovod.spark.run`` (on loopback when Spark is, see
    :mod:`spark_jobs.horovod_launch`); returns rank 0's result."""
    from spark_jobs import horovod_launch

    results = horovod_launch.run(
        spark,
        horovod_rank,
        args=(config, shard_files, run_id),
        num_proc=num_ranks,
        env=rank_environment(os.environ, config.checkpoint_dir),
    )
    return next(r for r in results if r["rank"] == 0)


def _job_archives(spark: SparkSession) -> list[str]:
    """The driver-side paths of the ``--py-files`` archives (``spark_jobs.zip``)."""
    listed = spark.sparkContext.getConf().get("spark.submit.pyFiles", "") or ""
    return [urlparse(uri).path if uri.startswith("file:") else uri for uri in listed.split(",") if uri]


def _torchrun_entry(archives: list[str], environment: dict[str, str]) -> Callable[..., dict]:
    """The function TorchDistributor runs in each rank process.

    torchrun starts fresh interpreters: they neither have the ``--py-files`` archive the
    Spark worker put on its ``sys.path`` nor, on a cluster, the driver's environment
    (MLflow endpoint and credentials, storage credentials for checkpoints). A closure is
    pickled by value, so it can run before ``spark_jobs`` is importable: it puts the archive
    on the path (the driver's copy on one host, the copy Spark fetched into the executor's
    working directory on a cluster), applies the driver's settings, then imports the real
    entry point.
    """

    def run_rank(config_fields: dict[str, Any], shard_files: list[str], mlflow_run_id: str | None) -> dict:
        import os
        import sys

        for archive in archives:
            for candidate in (archive, os.path.join(os.getcwd(), os.path.basename(archive))):
                if os.path.exists(candidate):
                    if candidate not in sys.path:
                        sys.path.insert(1, candidate)
                    break
        os.environ.update(environment)
        from spark_jobs.train import torch_distributor_rank

        return torch_distributor_rank(config_fields, shard_files, mlflow_run_id)

    return run_rank


def run_torch_distributor(
    spark: SparkSession, config: TrainConfig, shard_files: list[str], num_ranks: int, run_id: str
) -> dict:
    """Ranks as torchrun processes inside Spark barrier tasks; returns rank 0's result
    (TorchDistributor returns only that). GPUs when Spark assigns them to tasks."""
    from pyspark.ml.torch.distributor import TorchDistributor

    use_gpu = float(spark.conf.get("spark.task.resource.gpu.amount", "0") or 0) > 0
    rank_env = rank_environment(os.environ, config.checkpoint_dir)
    distributor = TorchDistributor(num_processes=num_ranks, local_mode=False, use_gpu=use_gpu)
    return distributor.run(_torchrun_entry(_job_archives(spark), rank_env), asdict(config), shard_files, run_id)


def run_ranks(
    backend: str, spark: SparkSession, config: TrainConfig, shard_files: list[str], num_ranks: int, run_id: str
) -> dict:
    """Train with the chosen backend; rank 0's result (history and weights)."""
    launchers = {"horovod": run_horovod, "torch_distributor": run_torch_distributor}
    return launchers[backend](spark, config, shard_files, num_ranks, run_id)


def log_trained_model(state_dict, input_df) -> str:
    """Log the scripted classifier with its signature and five rows of ``input_df`` as the
    input example; return its URI."""
    return log_classifier(state_dict, input_df.select(*PIXEL_COLS).limit(5).toPandas())


def log_classifier(state_dict, example) -> str:
    """Log the scripted classifier to the active MLflow run: TorchScript (pickle format),
    signature over the pixel columns of ``example`` (a pandas DataFrame) and its outputs."""
    import mlflow
    import numpy as np
    import torch
    from mlflow.models import infer_signature

    from spark_jobs.model import scripted_classifier

    classifier = scripted_classifier(state_dict)
    with torch.no_grad():
        probs = classifier(torch.from_numpy(example.to_numpy(dtype=np.float32))).numpy()
    info = mlflow.pytorch.log_model(
        classifier,
        name="model",
        signature=infer_signature(example, probs),
        input_example=example,
        serialization_format="pickle",
        pip_requirements=[f"torch=={torch.__version__.split('+')[0]}", f"mlflow=={mlflow.__version__}"],
    )
    return info.model_uri


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--curated-root", required=True)
    parser.add_argument("--start-ds", type=parse_ds, required=True, help="first day of the window")
    parser.add_argument("--end-ds", type=parse_ds, required=True, help="last day of the window")
    parser.add_argument("--work-dir", required=True, help="scratch folder for the rank shards")
    parser.add_argument("--output-manifest", required=True, help="JSON file describing the run")
    parser.add_argument("--experiment-name", required=True)
    parser.add_argument("--backend", choices=BACKENDS, default="horovod", help="how ranks are started and synchronised")
    parser.add_argument("--epochs", type=int, default=TrainConfig.epochs)
    parser.add_argument("--learning-rate", type=float, default=TrainConfig.learning_rate)
    parser.add_argument("--batch-size", type=int, default=TrainConfig.batch_size)
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

    spark = build_spark_session(f"train {args.start_ds}..{args.end_ds}")
    try:
        num_ranks = args.num_ranks or spark.sparkContext.defaultParallelism
        threads = int(spark.conf.get("spark.task.cpus", "1"))
        config = TrainConfig(
            epochs=args.epochs,
            learning_rate=args.learning_rate,
            batch_size=args.batch_size,
            seed=args.seed,
            threads_per_rank=threads,
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
            "training on %d rows in %d files with %d ranks (%s)", train_rows, len(shard_files), num_ranks, args.backend
        )

        mlflow.set_experiment(args.experiment_name)
        try:
            run, rank0, model_uri = train_and_log(spark, args, config, train_df, shard_files, num_ranks, train_rows)
        finally:
            delete_path(spark, shard_dir)
        manifest = {
            "run_id": run.info.run_id,
            "model_uri": model_uri,
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
        model_uri = log_trained_model(rank0["state_dict"], train_df)
    if config.checkpoint_dir:
        removed = Checkpoints(config.checkpoint_dir).remove_all()
        log.info("model logged; removed the checkpoints of epochs %s from %s", removed, config.checkpoint_dir)
    return run, rank0, model_uri
