"""Where Horovod's time goes on one machine: a probe beside ``make bench``, not part of it.

    python -m benchmarks.horovod_probe                   # the default settings
    HOROVOD_CYCLE_TIME=0.1 python -m benchmarks.horovod_probe --only allreduce

Three measurements, each with the training job's own per-rank loop
(``spark_jobs.training.loop.train_rank``) or Horovod's own ops, launched by
``horovod.runner.run`` (2 ranks, Gloo, this host) instead of ``horovod.spark.run``, so
that a setting can be tried in seconds:

- **independent**: two single-thread processes each training on its own shard at the
  per-rank batch, at the same time, with no communication: what the 2 cores give when
  nothing is exchanged;
- **allreduce**: the time of one synchronous ``hvd.allreduce`` of 1,000 to 220,000 floats
  (the CNN has about 22,000 parameters);
- **loop**: the loop's samples/s with 2 Horovod ranks against one process with 2 threads
  at the same global batch.

``HOROVOD_*`` variables in the environment reach the ranks.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.env import REPO, SingleProcess

WORKFLOW = "mnist"
PARTS = ("independent", "allreduce", "loop")


def ranks_import_repository() -> None:
    """Put the repository on the path of the ranks ``horovod.runner.run`` starts from here:
    they unpickle this package's functions."""
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), str(REPO / "scripts"), *filter(None, [os.environ.get("PYTHONPATH")])]
    )


def loop_samples_per_second(files: list[str], batch: int, threads: int, epochs: int, collective=None) -> float:
    from spark_jobs import workflows
    from spark_jobs.training.loop import TrainConfig, train_rank

    config = TrainConfig.for_workflow(
        workflows.load(WORKFLOW), epochs=epochs, batch_size=batch, threads_per_rank=threads
    )
    history = train_rank(collective or SingleProcess(), config, files, None)["history"]
    return history[-1]["samples_per_second"]


def _independent(shard: str, batch: int, epochs: int, out) -> None:
    out.put(loop_samples_per_second([shard], batch, 1, epochs))


def horovod_loop_samples_per_second(files: list[str], batch: int, epochs: int) -> float:
    from spark_jobs.training.collectives import HorovodCollective

    return loop_samples_per_second(files, batch, 1, epochs, HorovodCollective())


def _allreduce_ms(sizes: list[int], repeats: int) -> dict[int, float]:
    import horovod.torch as hvd
    import torch

    hvd.init()
    torch.set_num_threads(1)
    times = {}
    for size in sizes:
        tensor = torch.randn(size)
        for _ in range(20):  # warm-up: the response cache, Gloo's buffers
            hvd.allreduce(tensor, name=f"probe{size}")
        started = time.perf_counter()
        for _ in range(repeats):
            hvd.allreduce(tensor, name=f"probe{size}")
        times[size] = (time.perf_counter() - started) / repeats * 1000
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=6400, help="training rows, split over 2 shards")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--global-batch", type=int, default=64, help="rows per optimizer step, all ranks together")
    parser.add_argument("--only", default=",".join(PARTS), help=f"a subset of {','.join(PARTS)}")
    args = parser.parse_args(argv)
    from gpu_check import write_rank_shards
    from horovod.runner import run

    ranks_import_repository()
    parts = args.only.split(",")
    per_rank = args.global_batch // 2
    with tempfile.TemporaryDirectory() as folder:
        files = write_rank_shards(Path(folder), 2, args.rows // 2, WORKFLOW)
        if "independent" in parts:
            out = multiprocessing.get_context("spawn").Queue()
            procs = [
                multiprocessing.get_context("spawn").Process(
                    target=_independent, args=(shard, per_rank, args.epochs, out)
                )
                for shard in files
            ]
            for proc in procs:
                proc.start()
            rates = [out.get() for _ in procs]
            for proc in procs:
                proc.join()
            single = loop_samples_per_second(files, args.global_batch, 2, args.epochs)
            print(
                f"independent: 2 processes x 1 thread, batch {per_rank}: {[round(r) for r in rates]} samples/s, "
                f"together {sum(rates) / single:.2f}x one process (2 threads, batch {args.global_batch}: "
                f"{single:,.0f} samples/s)"
            )
        if "allreduce" in parts:
            sizes = [1000, 22000, 220000]
            times = run(_allreduce_ms, args=(sizes, 300), np=2, use_gloo=True, hosts="localhost:2")[0]
            print("allreduce: " + ", ".join(f"{size:,} floats {ms:.2f} ms" for size, ms in times.items()))
        if "loop" in parts:
            ranks = run(
                horovod_loop_samples_per_second,
                args=(files, per_rank, args.epochs),
                np=2,
                use_gloo=True,
                hosts="localhost:2",
            )
            single = loop_samples_per_second(files, args.global_batch, 2, args.epochs)
            print(
                f"loop: Horovod 2 ranks x {per_rank} rows {ranks[0]:,.0f} samples/s, one process "
                f"{args.global_batch} rows {single:,.0f} samples/s: {ranks[0] / single:.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
