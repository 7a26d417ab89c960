"""Run the benchmarks and write benchmarks/results/ (results.md, results.json, *.png).

    python -m benchmarks                      # default sizes, about 20 minutes on 2 cores
    python -m benchmarks --size tiny          # every benchmark end to end, small (a test)
    python -m benchmarks --only scoring,backfill --score-rows 100000

Each benchmark generates its own data in the work folder (removed afterwards unless
``--keep-work``), runs beside its baselines, and reports medians, spreads and ratios.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

from benchmarks.backfill import BackfillBench
from benchmarks.core import log
from benchmarks.drift import DriftBench
from benchmarks.env import REPO, BenchEnv
from benchmarks.ingest import IngestBench
from benchmarks.orchestration import OrchestrationBench
from benchmarks.report import machine_info, write_report
from benchmarks.robustness import RobustnessBench
from benchmarks.scaling import ScalingBench
from benchmarks.scoring import ScoringBench
from benchmarks.sizes import add_size_arguments, sizes_from_args
from benchmarks.training import TrainingBench

BENCHMARKS = {
    bench.name: bench
    for bench in (
        ScoringBench,
        TrainingBench,
        ScalingBench,
        RobustnessBench,
        IngestBench,
        BackfillBench,
        OrchestrationBench,
        DriftBench,
    )
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", default=",".join(BENCHMARKS), help=f"comma-separated subset of {', '.join(BENCHMARKS)}"
    )
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results", help="where the report goes")
    parser.add_argument("--work-dir", type=Path, default=REPO / "var" / "bench", help="generated data and scratch")
    parser.add_argument("--keep-work", action="store_true", help="leave the work folder (data, logs) in place")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the other benchmarks of an existing --out report (rerun some, update the rest)",
    )
    add_size_arguments(parser)
    args = parser.parse_args(argv)
    args.selected = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(args.selected) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # A plain SIGTERM would skip the clean-up below and leave the MLflow server running.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    sizes = sizes_from_args(args)
    command = " ".join(["python -m benchmarks", *(sys.argv[1:] if argv is None else argv)])
    shutil.rmtree(args.work_dir, ignore_errors=True)
    meta = {
        "command": command,
        "size": args.size,
        "sizes": asdict(sizes),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine_info(),
        "load_start": os.getloadavg()[0],
    }
    started = time.perf_counter()
    results, errors = {}, {}
    env = BenchEnv(args.work_dir)
    try:
        env.start()
        for name in args.selected:
            log(f"== {name}")
            bench_started = time.perf_counter()
            try:
                result = BENCHMARKS[name](env, sizes).run()
            except Exception:  # report the others; the run still fails at the end
                errors[name] = traceback.format_exc()
                log(f"{name} FAILED:\n{errors[name]}")
                env.stop_spark()
                continue
            result.wall_seconds = time.perf_counter() - bench_started
            results[name] = result.to_json()
            log(f"{name} done in {result.wall_seconds:.0f} s")
    finally:
        env.stop()
        if not args.keep_work:
            shutil.rmtree(args.work_dir, ignore_errors=True)
    meta.update(wall_seconds=time.perf_counter() - started, load_end=os.getloadavg()[0])
    if args.merge and (args.out / "results.json").exists():
        meta, results, errors = merge_reports(
            json.loads((args.out / "results.json").read_text()), meta, results, errors
        )
    write_report(args.out, meta, results, errors)
    log(f"report: {args.out / 'results.md'} ({meta['wall_seconds'] / 60:.1f} min)")
    return 1 if errors else 0


def merge_reports(earlier: dict, meta: dict, results: dict, errors: dict) -> tuple[dict, dict, dict]:
    """This run's benchmarks replace the earlier report's; the others stay, and the meta
    lists every run that contributed (command, date, load)."""
    runs = earlier["meta"].get("runs") or [
        {k: earlier["meta"][k] for k in ("command", "date", "load_start", "load_end")}
    ]
    runs.append({k: meta[k] for k in ("command", "date", "load_start", "load_end")})
    merged_results = {**{k: v for k, v in earlier["benchmarks"].items() if k not in results}, **results}
    merged_errors = {**{k: v for k, v in earlier["errors"].items() if k not in results and k not in errors}, **errors}
    merged_meta = {
        **earlier["meta"],
        "runs": runs,
        "wall_seconds": earlier["meta"]["wall_seconds"] + meta["wall_seconds"],
    }
    return merged_meta, merged_results, merged_errors


if __name__ == "__main__":
    sys.exit(main())
