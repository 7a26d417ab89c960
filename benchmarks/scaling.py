"""Training cost on one machine: how it grows with rows and ranks, and samples/s by per-rank batch.

- **rows x ranks**: the Horovod training job (spark-submit, as the DAGs run it) with 1 and
  2 ranks (1 torch thread each) over one curated day of 8k to 64k rows (20 % held out), one
  epoch: wall time, start-up (submit to rank 0's first step), the training loop's seconds
  and the job's own samples/s, as a table. What one machine can show: with 2 cores, 2
  ranks can at best halve the training loop, and the fixed start-up is paid once per job.
- **per-rank batch**: the job's own per-rank loop (``spark_jobs.training.loop.train_rank``)
  on 2 Horovod ranks (Gloo, this host) against one process with 2 torch threads at the
  same global batch (2 x the per-rank batch), for per-rank batches of 16 to 256. The ranks
  are launched by ``horovod.runner.run`` instead of ``horovod.spark.run`` (see
  ``benchmarks/horovod_probe.py``), so a point costs seconds, not a spark-submit; the
  loop, the collective and the shards are the job's. Plotted as samples/s against the
  per-rank batch.
"""

from __future__ import annotations

from benchmarks.core import BenchResult, Ratio, log
from benchmarks.data import write_curated_day
from benchmarks.env import BenchEnv, Benchmark
from benchmarks.horovod_probe import (
    horovod_loop_samples_per_second,
    loop_samples_per_second,
    ranks_import_repository,
)
from benchmarks.sizes import Sizes, int_list
from benchmarks.training import train_job

DAYS = "2026-09-{:02d}"
EPOCHS = 1


class ScalingBench(Benchmark):
    name, title = "training_scaling", "Training cost by rows, ranks and per-rank batch"

    def __init__(self, env: BenchEnv, sizes: Sizes) -> None:
        super().__init__(env, sizes)
        self.curated = self.root / "curated"

    def rows_by_ranks(self) -> list[dict]:
        table = []
        for index, rows in enumerate(int_list(self.sizes.scaling_rows), start=1):
            ds = DAYS.format(index)
            write_curated_day(self.curated, ds, rows, files=2)
            for ranks in int_list(self.sizes.scaling_ranks):
                work = self.root / f"rows{rows}-ranks{ranks}"
                job = train_job(self.env, work, self.curated, ds, "horovod", ranks, EPOCHS)
                table.append(
                    {
                        "curated rows": rows,
                        "training rows": job["rows"],
                        "ranks": ranks,
                        "samples/s": round(job["sps"]),
                        "training loop s": round(job["rows"] * EPOCHS / job["sps"], 1),
                        "start-up s": round(job["startup"], 1),
                        "wall s": round(job["wall"], 1),
                    }
                )
        return table

    def batch_sweep(self) -> dict[int, tuple[float, float]]:
        """Per-rank batch -> (2 Horovod ranks' samples/s, one process's at the same global batch)."""
        from gpu_check import write_rank_shards
        from horovod.runner import run

        ranks_import_repository()
        shards = self.root / "sweep-shards"
        shards.mkdir(parents=True, exist_ok=True)
        files = write_rank_shards(shards, 2, self.sizes.sweep_rows // 2)
        points = {}
        for batch in int_list(self.sizes.sweep_batches):
            ranks = run(
                horovod_loop_samples_per_second,
                args=(files, batch, self.sizes.train_epochs),
                np=2,
                use_gloo=True,
                hosts="localhost:2",
            )
            single = loop_samples_per_second(files, 2 * batch, 2, self.sizes.train_epochs)
            points[batch] = ranks[0], single
            log(f"per-rank batch {batch}: Horovod 2 ranks {ranks[0]:,.0f} samples/s, one process {single:,.0f}")
        return points

    def run(self) -> BenchResult:
        r = self.result
        table = self.rows_by_ranks()
        r.tables["Horovod training job by rows and ranks (1 epoch)"] = table
        self.env.stop_spark()
        sweep = self.batch_sweep()
        batches = list(sweep)
        r.series["samples_vs_batch"] = {
            "title": "Training samples/s vs. per-rank batch (2 cores)",
            "xlabel": "per-rank batch (rows per optimizer step per rank)",
            "ylabel": "samples/s",
            "lines": {
                "Horovod, 2 ranks x 1 thread": {"x": batches, "y": [sweep[b][0] for b in batches]},
                "one process, 2 threads, same global batch": {"x": batches, "y": [sweep[b][1] for b in batches]},
            },
        }
        for batch, (horovod, single) in sweep.items():
            r.add(f"sweep_horovod_{batch}", f"Horovod 2 ranks, per-rank batch {batch}", "samples/s", [horovod])
            r.add(f"sweep_single_{batch}", f"one process, batch {2 * batch}", "samples/s", [single])
            label = f"Horovod / one process, per-rank batch {batch}"
            r.ratios.append(Ratio(f"sweep_horovod_{batch}", f"sweep_single_{batch}", label))
        largest = max(int_list(self.sizes.scaling_rows))
        by_ranks = {row["ranks"]: row for row in table if row["curated rows"] == largest}
        if {1, 2} <= set(by_ranks):
            r.notes.append(
                f"At {largest:,} rows, 2 ranks train {by_ranks[2]['samples/s'] / by_ranks[1]['samples/s']:.2f}x "
                f"the samples/s of 1 rank; the job's wall time is {by_ranks[2]['wall s'] / by_ranks[1]['wall s']:.2f}x."
            )
        r.settings = {
            "epochs": EPOCHS,
            "scaling_rows": self.sizes.scaling_rows,
            "sweep_rows": self.sizes.sweep_rows,
            "sweep_epochs": self.sizes.train_epochs,
        }
        return r
