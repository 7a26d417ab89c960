"""Drift: the drift check's false alarms, detections and cost at 100 to 100,000 rows a day.

For each shipped workflow's shape, ``spark_jobs.drift`` (the statistics the score job's
drift check runs, without Spark or MLflow) compares days with a reference profile built
the way registration builds it: the features' statistics over a training window of
``drift_reference_rows`` rows, the predictions over its last 20 % (the held-out rows).

- **diabetes**: the workflow's offline sample rows (scikit-learn's bundled patients,
  jittered by 5 % of each measurement's spread); statistics: the ten columns and a
  regression prediction. The prediction is a least-squares linear stand-in for the
  workflow's MLP, fitted once to the bundled set (the check sees only its outputs).
- **mnist**: the workflow's offline sample images (bundled digits upscaled to 28x28, shifted
  by up to 2 pixels, noise on the ink); statistics: the row summaries mean, std and
  nonzero, and a 10-class prediction from a nearest-centroid stand-in (class means of the
  bundled digits). Images cost 70 us a row to generate, so rows are drawn with
  replacement from one pool of generated images, their statistics computed once: each
  reference and day is then an i.i.d. sample of the pool's distribution.

**False alarms**: at each day size, ``drift_references`` references, each a fresh draw,
compared with ``drift_days`` same-distribution days each, at the declared family-wise rate
0.05. With a single fixed reference the days would not be independent trials (a reference
that happens to sit off the population alarms on many of them); with fresh references the
alarmed share estimates the rate a model version sees, with binomial standard error
sqrt(0.05 * 0.95 / days) (slightly optimistic, as days share references).

**Detections**: one shifted day per reference at each size: diabetes with ``bmi`` rescaled
by 1.3; mnist with images inverted (255 - x, 1 - x in [0, 1] units) and, separately, shifted
2 pixels to the right (row summaries do not change under a shift, so only the predictions
can show it). Reported: days detected and what moved most often.

**Cost**: the seconds one ``compare`` takes per day (rows/s in the measurements; the
statistics of the rows are computed before it: for mnist the row summaries, timed apart).
"""

from __future__ import annotations

import collections
import datetime as dt
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.core import BenchResult, Ratio, Target, log
from benchmarks.env import Benchmark
from benchmarks.sizes import Sizes, int_list
from spark_jobs import drift, workflows
from spark_jobs.sample_data import make_rows

RATE = 0.05
# A declared shift counts as found at a day size when at least this share of its days is flagged.
DETECTED_SHARE = 0.95
HELD_OUT_SHARE = 0.2
FIRST_DAY = dt.date(2026, 10, 1)
PREDICTION = "prediction"
POOL_CHUNK_ROWS = 25_000  # MNIST's generator holds a chunk as float64 images (160 MB)
SHIFT_PIXELS = 2
BMI_SCALE = 1.3

Statistics = dict[str, np.ndarray]


def day_of(index: int) -> str:
    return (FIRST_DAY + dt.timedelta(days=index)).isoformat()


# --- the shapes of the two workflows ----------------------------------------------------
class DiabetesDays:
    """Diabetes rows and their statistics: ten columns and a linear stand-in's prediction."""

    name = "diabetes"
    shifts = {f"bmi x {BMI_SCALE:g}": "bmi"}
    categorical: dict[str, int] = {}

    def __init__(self, reference_rows: int) -> None:
        from sklearn.datasets import load_diabetes

        self.workflow = workflows.load("diabetes")
        self.columns = list(self.workflow.features.raw_fields)
        bundled = load_diabetes(scaled=False)
        design = np.column_stack([bundled.data, np.ones(len(bundled.data))])
        self.coefficients = np.linalg.lstsq(design, bundled.target, rcond=None)[0]
        self.reference_rows = reference_rows
        self.draws = 0

    def rows(self, count: int) -> np.ndarray:
        """``count`` fresh rows (a new day and seed each call)."""
        self.draws += 1
        _, features = make_rows(self.workflow, day_of(self.draws), count, seed=self.draws)
        return features

    def statistics(self, features: np.ndarray) -> Statistics:
        values = dict(drift.tabular_columns(features, self.columns))
        values[PREDICTION] = features.astype(np.float64) @ self.coefficients[:-1] + self.coefficients[-1]
        return values

    def reference(self) -> Statistics:
        values = self.statistics(self.rows(self.reference_rows))
        values[PREDICTION] = values[PREDICTION][-round(self.reference_rows * HELD_OUT_SHARE) :]
        return values

    def day(self, count: int) -> Statistics:
        return self.statistics(self.rows(count))

    def shifted_day(self, shift: str, count: int) -> Statistics:
        features = self.rows(count)
        features[:, self.columns.index(self.shifts[shift])] *= BMI_SCALE
        return self.statistics(features)


class MnistDays:
    """MNIST-like images drawn from one generated pool; row summaries and a nearest-centroid class."""

    name = "mnist"
    shifts = {"inverted": "invert", f"shifted {SHIFT_PIXELS} px": "shift"}
    categorical = {PREDICTION: 10}

    def __init__(self, reference_rows: int, pool_rows: int, rng: np.random.Generator) -> None:
        from spark_jobs.workflows.mnist import mnist_like_digits

        self.workflow = workflows.load("mnist")
        labels, digits = mnist_like_digits()
        flat = digits.reshape(len(digits), -1).astype(np.float32)
        self.centroids = np.stack([flat[labels == c].mean(axis=0) for c in range(10)])
        self.reference_rows, self.rng = reference_rows, rng
        started = time.perf_counter()
        chunks = [
            make_rows(self.workflow, day_of(0), min(POOL_CHUNK_ROWS, pool_rows - first), seed=first)[1]
            for first in range(0, pool_rows, POOL_CHUNK_ROWS)
        ]
        self.pool = np.concatenate(chunks)
        self.pool_statistics = self.statistics(self.pool)
        log(f"drift: a pool of {pool_rows:,} mnist images in {time.perf_counter() - started:.1f} s")

    def predict(self, images: np.ndarray) -> np.ndarray:
        """The nearest class mean of each image (squared distance, in chunks of float32)."""
        flat = images.reshape(len(images), -1)
        offsets = 0.5 * (self.centroids**2).sum(axis=1)
        out = np.empty(len(flat), dtype=np.int64)
        for start in range(0, len(flat), POOL_CHUNK_ROWS):
            chunk = flat[start : start + POOL_CHUNK_ROWS].astype(np.float32)
            out[start : start + len(chunk)] = np.argmax(chunk @ self.centroids.T - offsets, axis=1)
        return out

    def statistics(self, images: np.ndarray) -> Statistics:
        values = drift.row_summaries(images, drift.SUMMARIES)
        values[PREDICTION] = self.predict(images)
        return values

    def picks(self, count: int) -> np.ndarray:
        return self.rng.integers(0, len(self.pool), size=count)

    def reference(self) -> Statistics:
        picks = self.picks(self.reference_rows)
        values = {name: column[picks] for name, column in self.pool_statistics.items()}
        values[PREDICTION] = values[PREDICTION][-round(self.reference_rows * HELD_OUT_SHARE) :]
        return values

    def day(self, count: int) -> Statistics:
        picks = self.picks(count)
        return {name: column[picks] for name, column in self.pool_statistics.items()}

    def shifted_day(self, shift: str, count: int) -> Statistics:
        images = self.pool[self.picks(count)]
        if self.shifts[shift] == "invert":
            images = 255 - images
        else:  # the pool's border of 4 empty pixels takes a 2-pixel shift on top of its own
            images = np.roll(images, SHIFT_PIXELS, axis=2)
        return self.statistics(images)

    def summaries_seconds(self, count: int) -> float:
        images = self.pool[self.picks(count)]
        started = time.perf_counter()
        drift.row_summaries(images, drift.SUMMARIES)
        return time.perf_counter() - started


# --- the measurements -------------------------------------------------------------------
def binomial_error(rate: float, days: int) -> float:
    return math.sqrt(rate * (1 - rate) / days)


def most_named(counter: collections.Counter, top: int = 3) -> str:
    return ", ".join(f"{name} {count}" for name, count in counter.most_common(top)) or "-"


def timed_compare(reference: drift.ReferenceProfile, day: Statistics) -> tuple[drift.DriftReport, float]:
    started = time.perf_counter()
    report = drift.compare(reference, day, false_alarm_rate=RATE)
    return report, time.perf_counter() - started


def measure_workflow(source: DiabetesDays | MnistDays, sizes: Sizes, result: BenchResult) -> None:
    """False alarms, detections and compare cost of one workflow at every day size."""
    rows_list = int_list(sizes.drift_rows)
    worst_rate, fewest_found = 0.0, 1.0
    references = [
        drift.build_reference(source.reference(), categorical=source.categorical) for _ in range(sizes.drift_references)
    ]
    for rows in rows_list:
        started = time.perf_counter()
        alarms, seconds, named = 0, [], collections.Counter()
        for reference in references:
            for _ in range(sizes.drift_days):
                report, elapsed = timed_compare(reference, source.day(rows))
                alarms += report.outcome == drift.DRIFT
                named.update(report.moved)
                seconds.append(elapsed)
        days = len(seconds)
        rate, error = alarms / days, binomial_error(RATE, days)
        worst_rate = max(worst_rate, rate)
        result.tables["false alarms on same-distribution days (declared rate 0.05)"].append(
            {
                "workflow": source.name,
                "day rows": f"{rows:,}",
                "days": days,
                "references": len(references),
                "false alarms": alarms,
                "rate": f"{rate:.3f}",
                "s.e.": f"{error:.3f}",
                "<= 0.05 + 3 s.e.": "yes" if rate <= RATE + 3 * error else "**no**",
                "named": most_named(named),
                "compare ms/day": f"{1000 * float(np.median(seconds)):.2f}",
            }
        )
        result.add(
            f"{source.name}_compare_{rows}",
            f"{source.name}: compare, {rows:,}-row days",
            "rows/s",
            [rows / s for s in seconds],
            note=f"{len(references[0].statistics)} statistics",
        )
        for shift in source.shifts:
            detected, moved = 0, collections.Counter()
            for reference in references:
                report, _ = timed_compare(reference, source.shifted_day(shift, rows))
                detected += report.outcome == drift.DRIFT
                moved.update(report.moved)
            fewest_found = min(fewest_found, detected / len(references))
            result.tables["detections of declared shifts (declared rate 0.05)"].append(
                {
                    "workflow": source.name,
                    "shift": shift,
                    "day rows": f"{rows:,}",
                    "days": len(references),
                    "detected": detected,
                    "share": f"{detected / len(references):.2f}",
                    "moved (days)": most_named(moved),
                }
            )
        if isinstance(source, MnistDays):
            result.add(
                f"mnist_summaries_{rows}",
                f"mnist: row summaries, {rows:,}-row days",
                "rows/s",
                [rows / source.summaries_seconds(rows) for _ in range(sizes.repeats)],
            )
        log(f"drift {source.name} {rows:,} rows: {alarms}/{days} false alarms ({time.perf_counter() - started:.1f} s)")
    sizes_text = ", ".join(f"{rows:,}" for rows in rows_list)
    error = binomial_error(RATE, len(references) * sizes.drift_days)
    result.add(
        f"{source.name}_worst_false_alarm_rate",
        f"{source.name}: highest false-alarm rate over day sizes {sizes_text}",
        "share of days",
        [worst_rate],
    )
    result.add(
        f"{source.name}_fewest_detected",
        f"{source.name}: lowest share of shifted days flagged ({', '.join(source.shifts)}; {sizes_text} rows)",
        "share of days",
        [fewest_found],
    )
    result.targets += [
        Target(
            f"{source.name}: false alarms <= declared {RATE} + 3 s.e. at every day size",
            f"{source.name}_worst_false_alarm_rate",
            "<=",
            round(RATE + 3 * error, 4),
        ),
        Target(
            f"{source.name}: declared shifts flagged at every day size",
            f"{source.name}_fewest_detected",
            ">=",
            DETECTED_SHARE,
        ),
    ]
    smallest, largest = rows_list[0], rows_list[-1]
    if largest != smallest:
        result.ratios.append(
            Ratio(
                f"{source.name}_compare_{largest}",
                f"{source.name}_compare_{smallest}",
                f"{source.name}: compare rows/s, {largest:,}-row days / {smallest:,}-row days",
            )
        )


def measure(sizes: Sizes, result: BenchResult, seed: int = 0) -> BenchResult:
    """Every workflow's figures into ``result`` (the benchmark without its environment)."""
    result.tables.update(
        {
            "false alarms on same-distribution days (declared rate 0.05)": [],
            "detections of declared shifts (declared rate 0.05)": [],
        }
    )
    rng = np.random.default_rng(seed)
    pool_rows = max(sizes.drift_reference_rows, *int_list(sizes.drift_rows))
    sources: list[Callable[[], DiabetesDays | MnistDays]] = [
        lambda: DiabetesDays(sizes.drift_reference_rows),
        lambda: MnistDays(sizes.drift_reference_rows, pool_rows, rng),
    ]
    for make in sources:
        measure_workflow(make(), sizes, result)
    alarms = result.tables["false alarms on same-distribution days (declared rate 0.05)"]
    result.notes.append(
        f"false alarms within 0.05 + 3 s.e. at {sum(row['<= 0.05 + 3 s.e.'] == 'yes' for row in alarms)} "
        f"of {len(alarms)} workflow x day-size cells"
    )
    settings: dict[str, Any] = {
        "declared_rate": RATE,
        "day_rows": int_list(sizes.drift_rows),
        "references": sizes.drift_references,
        "days_per_reference": sizes.drift_days,
        "reference_rows": sizes.drift_reference_rows,
        "held_out_share": HELD_OUT_SHARE,
        "quantiles": drift.DEFAULT_QUANTILES,
        "mnist_pool_rows": pool_rows,
    }
    result.settings = settings
    return result


class DriftBench(Benchmark):
    name, title = "drift", "Drift check: false alarms, detections and cost by day size"

    def run(self) -> BenchResult:
        return measure(self.sizes, self.result)


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.drift [--size tiny] [--drift-rows ...]``: the tables, printed."""
    import argparse

    from benchmarks.report import benchmark_tables
    from benchmarks.sizes import add_size_arguments, sizes_from_args

    parser = argparse.ArgumentParser(prog="python -m benchmarks.drift", description=__doc__.splitlines()[0])
    add_size_arguments(parser)
    sizes = sizes_from_args(parser.parse_args(argv))
    started = time.perf_counter()
    result = measure(sizes, BenchResult(DriftBench.name, DriftBench.title, ""))
    result.wall_seconds = time.perf_counter() - started
    print("\n".join(benchmark_tables(result.to_json())))
    print(f"\n{result.wall_seconds:.0f} s; settings {result.settings}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
