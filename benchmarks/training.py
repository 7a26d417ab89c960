"""Training: samples/s of the Horovod job (2 ranks) vs. a single-process torch loop.

- **Horovod job**: ``spark-submit spark_jobs/entrypoints/train.py --workflow mnist
  --backend horovod --num-ranks 2`` on local[2], each rank on 1 torch thread; samples/s is
  the job's own figure (all ranks' samples over the training loop's time, from the manifest).
- **TorchDistributor job**: the same with ``--backend torch_distributor``.
- **single process**: the job's own per-rank loop (``spark_jobs.training.loop.train_rank``)
  in this process with a one-process collective, 2 torch threads, over the same shards
  (``label`` and the dense ``features`` column) the job trains on; once with the same
  global batch as 2 ranks (2 x the workflow's per-rank batch) and once with the per-rank
  batch. The faster one is the baseline.
- **start-up**: submit to rank 0's first optimizer step (wall clock), and what each second
  goes to, from the job manifest's ``timeline`` (``spark_jobs.train.TIMELINE``): the JVM
  starting the driver, imports, the Spark session, data staging, the MLflow run, rank launch,
  rendezvous, the rank's data and model, the first step.
"""

from __future__ import annotations

import json

from benchmarks.core import BenchResult, Ratio, Target, log, repeat
from benchmarks.data import write_curated_day
from benchmarks.env import BenchEnv, Benchmark, SingleProcess, Submitted
from benchmarks.sizes import Sizes
from ml_platform.job_arguments import TrainArguments
from spark_jobs import workflows
from spark_jobs.train import TIMELINE

DS = "2026-09-01"
WORKFLOW = "mnist"
RANKS = 2
# The per-rank batch the workflow declares (spark_jobs/workflows/mnist.toml): what the nightly trains with.
BATCH = workflows.load(WORKFLOW).model.training.batch_size
SAME_BATCH = {
    "horovod": "Horovod / single process, same global batch",
    "torch_distributor": "TorchDistributor / single process, same global batch",
}


def start_up_phases(submitted_at: float, timeline: dict[str, float]) -> dict[str, float]:
    """Seconds of each start-up phase: from the previous mark of the job's ``timeline`` (the
    first from the submit) to this one, in ``TIMELINE`` order; they add up to submit ->
    first step."""
    phases, previous = {}, submitted_at
    for mark in TIMELINE:
        if mark in timeline:
            phases[mark] = timeline[mark] - previous
            previous = timeline[mark]
    return phases


def train_job(
    env: BenchEnv,
    work,
    curated,
    ds: str,
    backend: str,
    num_ranks: int,
    epochs: int,
    batch: int = BATCH,
    bind_cores: str = "on",
) -> dict[str, float]:
    """spark-submit the training job over ``ds`` of ``curated``; its samples/s (the job's own
    figure), start-up (submit to first step) and its phases, wall seconds and training rows."""
    manifest_path = work / "train.json"
    submitted: Submitted = env.submit_job(
        "train",
        TrainArguments(
            workflow=WORKFLOW,
            curated_root=curated,
            start_ds=ds,
            end_ds=ds,
            work_dir=work / "scratch",
            output_manifest=manifest_path,
            experiment_name="benchmarks-training",
            backend=backend,
            epochs=epochs,
            batch_size=batch,
            num_ranks=num_ranks,
            bind_cores=bind_cores,
        ).argv(),
    )
    manifest = json.loads(manifest_path.read_text())
    final = manifest["final_metrics"]
    phases = start_up_phases(submitted.started_at, manifest["timeline"])
    startup = sum(phases.values())
    log(
        f"training {backend} {num_ranks} rank(s) (cores bound: {bind_cores}), {manifest['train_rows']} rows: "
        f"{final['samples_per_second']:,.0f} samples/s, start-up {startup:.1f} s "
        f"({', '.join(f'{k} {v:.1f}' for k, v in phases.items())}), wall {submitted.seconds:.1f} s"
    )
    return {
        "sps": final["samples_per_second"],
        "startup": startup,
        "phases": phases,
        "wall": submitted.seconds,
        "rows": manifest["train_rows"],
    }


class TrainingBench(Benchmark):
    name, title = "training", "Training: Horovod 2 ranks vs. single-process torch"

    def __init__(self, env: BenchEnv, sizes: Sizes) -> None:
        super().__init__(env, sizes)
        self.curated = self.root / "curated"
        self.submits = 0

    def submit(self, backend: str, bind_cores: str = "on") -> dict[str, float]:
        """One training job; its samples/s, start-up seconds and wall seconds."""
        self.submits += 1
        work = self.root / f"{backend}-{self.submits}"
        return train_job(
            self.env, work, self.curated, DS, backend, RANKS, self.sizes.train_epochs, bind_cores=bind_cores
        )

    def shards(self) -> list[str]:
        """The shards the job trains on: same split, same files (written here by Spark)."""
        from spark_jobs.dataset import filter_training_rows
        from spark_jobs.partitions import read_partitions
        from spark_jobs.training.shards import write_training_shards

        spark = self.env.spark()
        window_df = read_partitions(spark, str(self.curated), DS, DS)
        train_df = filter_training_rows(window_df, self.env.cfg.training.holdout_pct, self.env.cfg.training.split_seed)
        return write_training_shards(train_df, str(self.root / "shards"), RANKS)

    def single_process_sps(self, files: list[str], batch: int) -> float:
        from spark_jobs.training.loop import TrainConfig, train_rank

        config = TrainConfig.for_workflow(
            workflows.load(WORKFLOW), epochs=self.sizes.train_epochs, batch_size=batch, threads_per_rank=RANKS
        )
        return train_rank(SingleProcess(), config, files, None)["history"][-1]["samples_per_second"]

    def run(self) -> BenchResult:
        s, r = self.sizes, self.result
        write_curated_day(self.curated, DS, s.train_rows, files=2)
        files = [f.removeprefix("file:") for f in self.shards()]
        self.env.stop_spark()
        r.add(
            "single_global_batch",
            f"single process, batch {RANKS * BATCH}, {RANKS} threads",
            "samples/s",
            repeat(s.repeats, lambda: self.single_process_sps(files, RANKS * BATCH)),
        )
        r.add(
            "single_rank_batch",
            f"single process, batch {BATCH}, {RANKS} threads",
            "samples/s",
            repeat(s.repeats, lambda: self.single_process_sps(files, BATCH)),
        )
        best = max(("single_global_batch", "single_rank_batch"), key=lambda n: r.measurements[n].median)
        r.add(
            "single_best",
            f"single-process torch (best: {r.measurements[best].label})",
            "samples/s",
            r.measurements[best].values,
        )

        # The target is on Horovod; TorchDistributor, for comparison, runs one time fewer.
        runs = {
            "horovod": [self.submit("horovod") for _ in range(s.submit_repeats)],
            "torch_distributor": [self.submit("torch_distributor") for _ in range(max(1, s.submit_repeats - 1))],
            # What binding each rank to a core of its own gives (--bind-cores, the job's default on).
            "horovod_unbound": [self.submit("horovod", bind_cores="off") for _ in range(max(1, s.submit_repeats - 1))],
        }
        r.add(
            "horovod_unbound",
            f"Horovod job, ranks not bound to cores (--bind-cores off), batch {BATCH} per rank",
            "samples/s",
            [run["sps"] for run in runs["horovod_unbound"]],
        )
        for backend, label in (("horovod", "Horovod job"), ("torch_distributor", "TorchDistributor job")):
            r.add(
                backend,
                f"{label}, {RANKS} ranks x 1 thread, batch {BATCH} per rank",
                "samples/s",
                [run["sps"] for run in runs[backend]],
            )
            r.add(
                f"{backend}_startup", f"{label}: submit to first step", "s", [run["startup"] for run in runs[backend]]
            )
            r.add(f"{backend}_wall", f"{label}: spark-submit wall time", "s", [run["wall"] for run in runs[backend]])
        for phase, what in TIMELINE.items():  # where the Horovod job's start-up goes, phase by phase
            r.add(
                f"horovod_startup_{phase}",
                f"Horovod start-up, until {what}",
                "s",
                [run["phases"].get(phase, 0.0) for run in runs["horovod"]],
            )
        r.ratios += [
            Ratio("horovod", "single_best", "Horovod / single-process torch"),
            Ratio("horovod", "single_global_batch", SAME_BATCH["horovod"]),
            Ratio("horovod_unbound", "single_global_batch", "Horovod, ranks not bound to cores / single process"),
            Ratio("horovod", "horovod_unbound", "Horovod, ranks bound / not bound to cores"),
            Ratio("torch_distributor", "single_best", "TorchDistributor / single-process torch"),
            Ratio("torch_distributor", "single_global_batch", SAME_BATCH["torch_distributor"]),
            Ratio("horovod_startup", "horovod_wall", "Horovod start-up / job wall time"),
            Ratio("torch_distributor_startup", "horovod_startup", "TorchDistributor start-up / Horovod start-up"),
        ]
        # Compared at the same global batch (RANKS ranks x BATCH against one process at RANKS * BATCH):
        # the same optimizer steps per epoch.
        r.targets += [
            Target(
                "Horovod 2-rank training >= 0.8x of single-process torch (same global batch)",
                SAME_BATCH["horovod"],
                ">=",
                0.8,
            ),
            Target(
                "TorchDistributor 2-rank training >= 0.9x of single-process torch (same global batch)",
                SAME_BATCH["torch_distributor"],
                ">=",
                0.9,
            ),
            Target("training start-up (submit to first step, Horovod) <= 10 s", "horovod_startup", "<=", 10.0),
        ]
        r.settings = {
            "train_rows": runs["horovod"][0]["rows"],
            "epochs": s.train_epochs,
            "ranks": RANKS,
            "batch_per_rank": BATCH,
            "threads_per_rank": 1,
            "single_process_threads": RANKS,
        }
        return r
