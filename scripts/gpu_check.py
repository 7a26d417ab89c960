"""GPU check: train a workflow's model on CUDA through the training job's per-rank code, then score.

Run on a host with NVIDIA GPUs (and a CUDA build of torch in .venv):

    .venv/bin/python scripts/gpu_check.py                 # MNIST, one rank per visible GPU
    .venv/bin/python scripts/gpu_check.py --gpus 1 --steps-per-epoch 200 --epochs 2
    .venv/bin/python scripts/gpu_check.py --workflow diabetes

Each rank runs ``spark_jobs.training.loop.train_rank``, the loop both Spark backends run,
on the GPU of its local rank, over shards in the job's layout (``label`` and the dense
``features`` column of the workflow's sample rows). The collective is Horovod's when Horovod was built with
``HOROVOD_GPU_OPERATIONS=NCCL``, else ``torch.distributed`` with NCCL (the
``torch_distributor`` backend's); ``--backend`` forces one. Ranks are started here
directly (``horovod.run`` / one process per GPU with torchrun's environment) rather than
through Spark, so the figures measure training and scoring, not Spark's start-up.
Prints one JSON object: training samples/s and scoring rows/s. Exits 2 without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

EXIT_NO_GPU = 2


def horovod_has_nccl() -> bool:
    """Whether the installed Horovod averages CUDA tensors with NCCL."""
    try:
        import horovod.torch as hvd
    except ImportError:
        return False
    return bool(hvd.nccl_built())


def write_rank_shards(folder: Path, num_ranks: int, rows_per_rank: int, workflow: str = "mnist") -> list[str]:
    """One Parquet file per rank of ``workflow``'s sample rows, in the layout
    ``spark_jobs.training.shards.write_training_shards`` produces."""
    import numpy as np
    import pyarrow.parquet as pq

    from spark_jobs import workflows
    from spark_jobs.sample_data import make_rows
    from spark_jobs.schema import curated_arrow_table
    from spark_jobs.training.shards import SHARD_COLS

    wf = workflows.load(workflow)
    files = []
    for rank in range(num_ranks):
        labels, features = make_rows(wf, "2026-11-28", rows_per_rank, seed=rank)
        table = curated_arrow_table(wf, np.arange(rows_per_rank), labels, features).select(list(SHARD_COLS))
        path = folder / f"part-{rank:05d}.parquet"
        pq.write_table(table, path)
        files.append(str(path))
    return files


def _torch_rank(local_rank: int, world_size: int, port: int, config_fields: dict, files: list[str], out: str) -> None:
    """One torch.distributed rank, given the environment torchrun would give it."""
    os.environ.update(
        RANK=str(local_rank),
        LOCAL_RANK=str(local_rank),
        WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    import torch

    from spark_jobs.training.launch import torch_distributor_rank

    result = torch_distributor_rank(config_fields, files, None)
    if local_rank == 0:
        torch.save(result, out)


def train_on_gpus(backend: str, num_ranks: int, config, files: list[str], scratch: Path) -> dict:
    """Rank 0's result (history and weights) from ``num_ranks`` GPU ranks."""
    from dataclasses import asdict

    if backend == "horovod":
        import horovod

        from spark_jobs.training.launch import horovod_rank

        # Rank processes unpickle horovod_rank: they must find spark_jobs.
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        results = horovod.run(horovod_rank, args=(config, files, None), num_proc=num_ranks, use_gloo=True)
        return next(r for r in results if r["rank"] == 0)

    import torch
    import torch.multiprocessing as mp

    from local_stack import free_port

    out = scratch / "rank0.pt"
    mp.spawn(_torch_rank, args=(num_ranks, free_port(), asdict(config), files, str(out)), nprocs=num_ranks)
    return torch.load(out, weights_only=False)


def score_on_gpu(workflow: str, state_dict: dict, rows: int, repeats: int) -> dict:
    """Rows/s of the serving model (the TorchScript module the job logs) on cuda:0, fed the
    features as the curated table decodes them (MNIST: uint8 [n, 28, 28])."""
    import torch

    from spark_jobs import workflows
    from spark_jobs.sample_data import make_rows
    from spark_jobs.serving import output_shape, scripted_serving

    wf = workflows.load(workflow)
    device = torch.device("cuda", 0)
    serving = scripted_serving(wf, state_dict).to(device)
    _, features = make_rows(wf, "2026-11-29", rows, seed=99)
    batch = torch.from_numpy(features).to(device)
    with torch.no_grad():
        serving(batch)  # warm-up: CUDA context, cuDNN algorithm choice
        torch.cuda.synchronize(device)
        started = time.perf_counter()
        for _ in range(repeats):
            predicted = serving(batch)
        torch.cuda.synchronize(device)
        seconds = time.perf_counter() - started
    if tuple(predicted.shape) != (rows, *output_shape(wf)[1:]):
        raise RuntimeError(f"scored {tuple(predicted.shape)} for {rows} rows, expected {output_shape(wf)}")
    if wf.output.is_classifier:
        sums = predicted.sum(dim=1)
        if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
            raise RuntimeError("scored probabilities do not sum to 1")
    elif not torch.isfinite(predicted).all():
        raise RuntimeError("scored values are not all finite")
    return {"score_rows": rows * repeats, "score_seconds": seconds, "score_rows_per_second": rows * repeats / seconds}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backend",
        choices=("auto", "horovod", "torch_distributor"),
        default="auto",
        help="auto: horovod if built with NCCL, else torch_distributor",
    )
    parser.add_argument("--workflow", default="mnist", help="spark_jobs/workflows/<NAME>.toml (default mnist)")
    parser.add_argument("--gpus", type=int, default=0, help="ranks, one per GPU (0: every visible GPU)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps-per-epoch", type=int, default=100, help="steps per rank and epoch")
    parser.add_argument("--batch-size", type=int, default=64, help="per rank (not the workflow's default)")
    parser.add_argument("--score-rows", type=int, default=65536, help="rows in one scoring batch")
    parser.add_argument("--score-repeats", type=int, default=10)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch

    if not torch.cuda.is_available():
        print(
            f"gpu_check: no CUDA device visible to torch {torch.__version__} "
            f"(CUDA build: {torch.version.cuda or 'no'}). Run it on a GPU host with a CUDA build of torch.",
            file=sys.stderr,
        )
        return EXIT_NO_GPU
    visible = torch.cuda.device_count()
    num_ranks = args.gpus or visible
    if num_ranks > visible:
        print(f"gpu_check: --gpus {num_ranks} but only {visible} GPU(s) visible", file=sys.stderr)
        return EXIT_NO_GPU
    nccl = horovod_has_nccl()
    backend = args.backend if args.backend != "auto" else ("horovod" if nccl else "torch_distributor")
    if backend == "horovod" and not nccl:
        print(
            "gpu_check: Horovod was not built with HOROVOD_GPU_OPERATIONS=NCCL; "
            "rebuild it or use --backend torch_distributor",
            file=sys.stderr,
        )
        return EXIT_NO_GPU

    from spark_jobs import workflows
    from spark_jobs.training.loop import TrainConfig

    config = TrainConfig.for_workflow(workflows.load(args.workflow), epochs=args.epochs, batch_size=args.batch_size)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        files = write_rank_shards(Path(scratch), num_ranks, args.steps_per_epoch * args.batch_size, args.workflow)
        started = time.perf_counter()
        rank0 = train_on_gpus(backend, num_ranks, config, files, Path(scratch))
        train_seconds = time.perf_counter() - started
    final = rank0["history"][-1]
    report = {
        "workflow": args.workflow,
        "gpu": torch.cuda.get_device_name(0),
        "gpus": num_ranks,
        "backend": backend,
        "horovod_nccl": nccl,
        "torch": torch.__version__,
        "steps_per_rank": rank0["steps_per_epoch"] * args.epochs,
        "batch_size_per_rank": args.batch_size,
        "train_samples_per_second": final["samples_per_second"],
        "train_seconds_with_startup": train_seconds,
        # train_loss and the workflow's metric (train_accuracy or train_rmse).
        **{f"final_{key}": value for key, value in final.items() if key not in ("epoch", "samples_per_second")},
        **score_on_gpu(args.workflow, rank0["state_dict"], args.score_rows, args.score_repeats),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
