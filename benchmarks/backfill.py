"""Backfill growth: wall time to score 1..N days, one job per day vs. one bulk job.

What is timed is the score job, not Airflow runs: **daily** is one ``spark-submit
score.py --ds D`` per day (what each ``<workflow>_batch_scoring`` run's scoring task does),
**bulk** is one ``spark-submit score.py --start-ds D1 --end-ds DN`` (the
``<workflow>_bulk_backfill_scoring`` task). A scheduler-driven daily backfill adds each run's
ingest, gate and scheduling on top, so the daily figures here are a lower bound.
Daily submits are timed for the first days; the daily wall time of a longer range is
that per-day median times the days (marked as extrapolated).
"""

from __future__ import annotations

import datetime as dt

from benchmarks.core import BenchResult, Ratio, Target, log
from benchmarks.data import write_curated_days
from benchmarks.env import MODEL_WORKFLOW, BenchEnv, Benchmark
from benchmarks.sizes import Sizes, backfill_ranges
from ml_platform.job_arguments import ScoreArguments

FIRST_DAY = dt.date(2026, 8, 1)


class BackfillBench(Benchmark):
    name, title = "backfill", "Backfill growth: daily jobs vs. one bulk job"

    def __init__(self, env: BenchEnv, sizes: Sizes) -> None:
        super().__init__(env, sizes)
        self.curated = self.root / "curated"
        self.scored = self.root / "predictions"

    def score_seconds(self, days: list[str]) -> float:
        span = {"ds": days[0]} if len(days) == 1 else {"start_ds": days[0], "end_ds": days[-1]}
        arguments = ScoreArguments(
            workflow=MODEL_WORKFLOW,
            model=self.env.model_uri(),
            input_data=self.curated,
            scored_data=self.scored,
            **span,
        )
        return self.env.submit_job("score", arguments.argv()).seconds

    def run(self) -> BenchResult:
        s, r = self.sizes, self.result
        ranges = backfill_ranges(s)
        days = [(FIRST_DAY + dt.timedelta(days=i)).isoformat() for i in range(max(ranges))]
        write_curated_days(self.curated, days, s.backfill_rows_per_day)
        measured = max(1, s.backfill_daily_submits)
        per_day = [self.score_seconds([ds]) for ds in days[:measured]]
        log(f"backfill: daily submits {[round(t, 1) for t in per_day]} s")
        r.add("one_day", "one day's score job (spark-submit)", "s", per_day, note=f"{measured} daily submits")
        daily_x, daily_y, bulk_x, bulk_y = [], [], [], []
        for n in ranges:
            kind = "measured" if n <= measured else "extrapolated"
            r.add(f"daily_{n}", f"daily, {n} day(s): {n} x one day ({kind})", "s", [n * t for t in per_day])
            daily_x.append(n)
            daily_y.append(r.measurements[f"daily_{n}"].median)
            if n == 1:
                bulk = per_day  # a one-day range is the same job as one daily run
            else:
                # Repeated for the longest range (the target); once for the others.
                bulk = [self.score_seconds(days[:n]) for _ in range(s.submit_repeats if n == max(ranges) else 1)]
                log(f"backfill: bulk {n} days {[round(t, 1) for t in bulk]} s")
            r.add(f"bulk_{n}", f"bulk, {n} day(s): one score job over the range", "s", bulk)
            bulk_x.append(n)
            bulk_y.append(r.measurements[f"bulk_{n}"].median)
            r.ratios.append(Ratio(f"bulk_{n}", "one_day", f"bulk {n} days / one day"))
            if n > 1:
                r.ratios.append(Ratio(f"daily_{n}", f"bulk_{n}", f"daily / bulk, {n} days"))
        longest = max(ranges)
        r.targets.append(
            Target(
                f"bulk {longest}-day backfill <= 4x one day's scoring wall time",
                f"bulk {longest} days / one day",
                "<=",
                4.0,
            )
        )
        r.series["wall_vs_days"] = {
            "title": "Backfill wall time vs. days scored",
            "xlabel": "days",
            "ylabel": "wall time (s)",
            "lines": {
                f"daily: one spark-submit per day ({measured} measured, rest extrapolated)": {
                    "x": daily_x,
                    "y": daily_y,
                },
                "bulk: one spark-submit for the range": {"x": bulk_x, "y": bulk_y},
            },
        }
        r.settings = {
            "rows_per_day": s.backfill_rows_per_day,
            "ranges_days": ranges,
            "daily_submits_timed": measured,
            "model": self.env.model_uri(),
            "what_is_timed": "the score job via spark-submit, not Airflow runs",
        }
        return r
