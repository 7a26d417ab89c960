"""Starting the ranks on Spark executors, with either backend, and what they get.

- ``horovod``: ``horovod.spark.run`` (on loopback when Spark is, see
  :mod:`spark_jobs.horovod_launch`); Horovod pickles :func:`horovod_rank` by reference, so
  the rank imports this module from the ``--py-files`` archive.
- ``torch_distributor``: Spark's ``TorchDistributor`` (torchrun inside barrier tasks),
  which runs a closure pickled by value (:func:`_torchrun_entry`) that imports
  :func:`torch_distributor_rank` from here once the archive is on the path.

Both run :func:`spark_jobs.training.loop.train_rank` through their
:mod:`~spark_jobs.training.collectives`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from spark_jobs.training.collectives import HorovodCollective, TorchCollective
from spark_jobs.training.loop import TrainConfig, train_rank

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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
    prefixes: tuple[str, ...] = RANK_ENV_PREFIXES
    if checkpoint_dir:
        prefixes += CHECKPOINT_ENV_PREFIXES.get(urlparse(checkpoint_dir).scheme, ())
    return {k: v for k, v in environ.items() if k in RANK_ENV_NAMES or k.startswith(prefixes)}


def rank_cores(local_rank: int, local_size: int, threads_per_rank: int, allowed: list[int]) -> set[int]:
    """The cores a rank is bound to (empty: none), as ``mpirun --bind-to core`` binds its ranks.

    Local rank ``i`` gets the ``i``-th block of ``threads_per_rank`` of the ``allowed`` cores
    (those the process may run on), and only when the host's ranks fill exactly those cores
    (``local[N]`` with N ranks, an executor per cpuset): on a host shared with other
    executors or jobs, whose ranks would number their cores from 0 too, none.
    """
    allowed = sorted(allowed)
    if local_size * threads_per_rank != len(allowed) or not 0 <= local_rank < local_size:
        return set()
    return set(allowed[local_rank * threads_per_rank : (local_rank + 1) * threads_per_rank])


def process_started_at() -> float | None:
    """When this process was created, as a ``time.time()`` value to within 10 ms, or None
    where ``/proc`` does not say (not Linux). From the process's start in clock ticks since
    boot and the seconds since boot (``/proc/uptime``); psutil's ``create_time`` adds the
    boot time, which Linux gives in whole seconds, so it can be off by up to a second."""
    try:
        with open("/proc/self/stat") as stat:
            # Field 22 (starttime); the command name (field 2) may hold spaces, so count after ')'.
            start_ticks = int(stat.read().rpartition(")")[2].split()[19])
        with open("/proc/uptime") as uptime:
            since_boot = float(uptime.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - (since_boot - start_ticks / os.sysconf("SC_CLK_TCK"))


def _bind_horovod_rank(config: TrainConfig) -> None:
    """Bind this rank to its cores (:func:`rank_cores`) before the collective starts its
    threads (Horovod's background thread, Gloo's transport loop), which inherit the binding:
    a rank's compute and communication threads then hand over on one core instead of waking
    each other across cores (on 2 cores, the same job unbound and bound side by side: 0.54x
    -> 0.67x of one process, docs/performance.md). Not with a GPU, nor with ``TrainConfig.bind_cores`` off.

    Horovod only: TorchDistributor starts each rank as a torchrun node of one process in a
    Spark task of its own, so no rank knows the others on its host."""
    import torch

    if not config.bind_cores or torch.cuda.is_available():
        return
    local_rank, local_size = int(os.environ["HOROVOD_LOCAL_RANK"]), int(os.environ["HOROVOD_LOCAL_SIZE"])
    if cores := rank_cores(local_rank, local_size, config.threads_per_rank, list(os.sched_getaffinity(0))):
        os.sched_setaffinity(0, cores)
        print(f"[local rank {local_rank}] bound to cores {sorted(cores)}", flush=True)


def horovod_rank(
    config: TrainConfig, shard_files: list[str], mlflow_run_id: str | None, validation_files: Sequence[str] = ()
) -> dict:
    """Entry of one Horovod rank (bound to its cores before ``hvd.init``, see :func:`_bind_horovod_rank`)."""
    started = {"rank_process_started": process_started_at(), "rank_started": time.time()}
    _bind_horovod_rank(config)
    collective = HorovodCollective()
    try:
        return train_rank(collective, config, shard_files, mlflow_run_id, validation_files, started)
    finally:
        collective.close()


def torch_distributor_rank(
    config_fields: dict[str, Any],
    shard_files: list[str],
    mlflow_run_id: str | None,
    validation_files: Sequence[str] = (),
) -> dict:
    """Entry of one torchrun process. Takes the config as a plain dict: the arguments are
    unpickled before this package is importable (see :func:`_torchrun_entry`)."""
    started = {"rank_process_started": process_started_at(), "rank_started": time.time()}
    collective = TorchCollective()
    try:
        return train_rank(
            collective, TrainConfig(**config_fields), shard_files, mlflow_run_id, validation_files, started
        )
    finally:
        collective.close()


def run_horovod(
    spark: SparkSession,
    config: TrainConfig,
    shard_files: list[str],
    num_ranks: int,
    run_id: str | None,
    validation_files: Sequence[str] = (),
) -> dict:
    """Ranks as Spark tasks through ``horovod.spark.run`` (on loopback when Spark is, see
    :mod:`spark_jobs.horovod_launch`); returns rank 0's result."""
    from spark_jobs import horovod_launch

    results = horovod_launch.run(
        spark,
        horovod_rank,
        args=(config, shard_files, run_id, list(validation_files)),
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

    def run_rank(
        config_fields: dict[str, Any], shard_files: list[str], mlflow_run_id: str | None, validation_files: list[str]
    ) -> dict:
        import os
        import sys

        for archive in archives:
            for candidate in (archive, os.path.join(os.getcwd(), os.path.basename(archive))):
                if os.path.exists(candidate):
                    if candidate not in sys.path:
                        sys.path.insert(1, candidate)
                    break
        os.environ.update(environment)
        from spark_jobs.training.launch import torch_distributor_rank

        return torch_distributor_rank(config_fields, shard_files, mlflow_run_id, validation_files)

    return run_rank


def run_torch_distributor(
    spark: SparkSession,
    config: TrainConfig,
    shard_files: list[str],
    num_ranks: int,
    run_id: str,
    validation_files: Sequence[str] = (),
) -> dict:
    """Ranks as torchrun processes inside Spark barrier tasks; returns rank 0's result
    (TorchDistributor returns only that). GPUs when Spark assigns them to tasks."""
    from pyspark.ml.torch.distributor import TorchDistributor

    use_gpu = float(spark.conf.get("spark.task.resource.gpu.amount", "0") or 0) > 0
    rank_env = rank_environment(os.environ, config.checkpoint_dir)
    distributor = TorchDistributor(num_processes=num_ranks, local_mode=False, use_gpu=use_gpu)
    result = distributor.run(
        _torchrun_entry(_job_archives(spark), rank_env), asdict(config), shard_files, run_id, list(validation_files)
    )
    assert result is not None  # rank 0's dict (run() is typed Optional: a function may return None)
    return result


def run_ranks(
    backend: str,
    spark: SparkSession,
    config: TrainConfig,
    shard_files: list[str],
    num_ranks: int,
    run_id: str,
    validation_files: Sequence[str] = (),
) -> dict:
    """Train with the chosen backend (the validation files evaluated after each epoch);
    rank 0's result (history and weights)."""
    launchers = {"horovod": run_horovod, "torch_distributor": run_torch_distributor}
    return launchers[backend](spark, config, shard_files, num_ranks, run_id, validation_files)
