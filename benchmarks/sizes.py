"""How big each benchmark runs: presets (``--size``) and per-field overrides (CLI flags)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class Sizes:
    # Repetitions: in-process measurements / measurements that each pay a spark-submit /
    # end-to-end spark-submits of the scoring and ingest jobs (0: in-session only; the
    # backfill and the DAG run submit those jobs anyway).
    repeats: int = 3
    submit_repeats: int = 2
    e2e_repeats: int = 1
    # Scoring: the measured partition, the partition the settings are tuned on, the
    # partition for the per-batch-load and closure UDFs (slow by design), Parquet files.
    score_rows: int = 200_000
    score_tune_rows: int = 20_000
    score_naive_rows: int = 10_000
    score_files: int = 8
    score_tuning: str = "on"  # "off": Spark's defaults, no tuning grid
    # Training: curated rows in the window (20 % are held out), epochs per run.
    train_rows: int = 8_000
    train_epochs: int = 2
    # Training cost (benchmarks.scaling): curated rows and ranks of the job's table, rows
    # and per-rank batches of the batch sweep (at train_epochs).
    scaling_rows: str = "8000,16000,32000,64000"
    scaling_ranks: str = "1,2"
    sweep_rows: int = 12_800
    sweep_batches: str = "16,32,64,128,256"
    # Ingest: rows of the raw CSV drop the target is judged at (200k MNIST rows are 400 MB
    # of CSV), and of a small drop reported beside it (where the job's fixed cost shows).
    ingest_rows: int = 200_000
    ingest_small_rows: int = 5000
    # Orchestration: the DAG timed per task, rows per daily drop it processes.
    orchestration_dag: str = "mnist_nightly_retrain"
    orchestration_rows: int = 5000
    # Backfill: ranges to score, rows per day, how many daily submits are timed (the
    # per-day median times N gives the daily wall time of longer ranges).
    backfill_days: str = "1,7,30"
    backfill_rows_per_day: int = 2000
    backfill_daily_submits: int = 3
    # Robustness: nightly training runs per workflow (a different day and seed each), rows per day.
    robustness_runs: int = 10
    robustness_rows: int = 5000
    # Drift check: day sizes, fresh references per size, same-distribution days per
    # reference, rows of a reference's training window.
    drift_rows: str = "100,1000,100000"
    drift_references: int = 20
    drift_days: int = 10
    drift_reference_rows: int = 20_000


PRESETS = {
    "default": Sizes(),
    # Every benchmark end to end in a few minutes: for the test suite, not for numbers.
    "tiny": Sizes(
        repeats=1,
        submit_repeats=1,
        e2e_repeats=0,
        score_rows=6000,
        score_tune_rows=3000,
        score_naive_rows=2000,
        score_files=2,
        score_tuning="off",
        train_rows=1000,
        train_epochs=1,
        scaling_rows="600",
        scaling_ranks="2",
        sweep_rows=800,
        sweep_batches="32",
        ingest_rows=1500,
        ingest_small_rows=300,
        orchestration_dag="mnist_batch_scoring",
        orchestration_rows=500,
        backfill_days="1,3",
        backfill_rows_per_day=200,
        backfill_daily_submits=1,
        robustness_runs=1,
        robustness_rows=400,
        drift_rows="100,1000",
        drift_references=2,
        drift_days=3,
        drift_reference_rows=2000,
    ),
}


def add_size_arguments(parser: argparse.ArgumentParser) -> None:
    """``--size`` plus one flag per field (``--score-rows 100000``) overriding the preset."""
    parser.add_argument("--size", choices=sorted(PRESETS), default="default", help="preset (default: default)")
    for f in fields(Sizes):
        parser.add_argument(
            f"--{f.name.replace('_', '-')}",
            type=type(PRESETS["default"].__getattribute__(f.name)),
            default=None,
            help=f"override the preset (default preset: {getattr(PRESETS['default'], f.name)})",
        )


def sizes_from_args(args: argparse.Namespace) -> Sizes:
    overrides = {f.name: getattr(args, f.name) for f in fields(Sizes) if getattr(args, f.name) is not None}
    return replace(PRESETS[args.size], **overrides)


def int_list(text: str) -> list[int]:
    """A comma-separated size field (``"1,7,30"``) as sorted distinct integers."""
    return sorted({int(item) for item in text.split(",") if item.strip()})


def backfill_ranges(sizes: Sizes) -> list[int]:
    return int_list(sizes.backfill_days)
