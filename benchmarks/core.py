"""What every benchmark reports: repeated measurements, ratios between them, targets.

A benchmark returns a :class:`BenchResult`; the report (``benchmarks.report``) turns the
results into Markdown, JSON and plots. Numbers are medians of repetitions with their
spread (min-max and the quartiles); comparisons are ratios of medians, with the range a
ratio can take given the spread of both sides.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def summarize(values: list[float]) -> dict[str, Any]:
    """Median, min, max and quartiles of repeated measurements."""
    ordered = sorted(values)
    q1, q3 = statistics.quantiles(ordered, n=4, method="inclusive")[::2] if len(ordered) > 1 else (ordered[0],) * 2
    return {
        "median": statistics.median(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "q1": q1,
        "q3": q3,
        "n": len(ordered),
        "values": values,
    }


@dataclass
class Measurement:
    """One quantity measured ``n`` times (a rate or a duration)."""

    label: str
    unit: str
    values: list[float]
    note: str = ""

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"{self.label}: no values measured")

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "unit": self.unit, "note": self.note, **summarize(self.values)}


@dataclass(frozen=True)
class Ratio:
    """``numerator / denominator`` (names of measurements), as a ratio of medians."""

    numerator: str
    denominator: str
    label: str

    def evaluate(self, measurements: dict[str, Measurement]) -> dict[str, Any]:
        num, den = measurements[self.numerator], measurements[self.denominator]
        return {
            "label": self.label,
            "numerator": self.numerator,
            "denominator": self.denominator,
            "value": num.median / den.median,
            # The widest the ratio gets with both sides anywhere in their measured range.
            "low": min(num.values) / max(den.values),
            "high": max(num.values) / min(den.values),
        }


@dataclass(frozen=True)
class Target:
    """A goal on a ratio (or on a measurement's median): ``value op threshold``."""

    label: str
    metric: str  # a ratio label or a measurement name
    op: str  # ">=" or "<="
    threshold: float

    def evaluate(self, value: float, unit: str) -> dict[str, Any]:
        met = value >= self.threshold if self.op == ">=" else value <= self.threshold
        return {
            "label": self.label,
            "metric": self.metric,
            "op": self.op,
            "threshold": self.threshold,
            "measured": value,
            "unit": unit,
            "met": met,
        }


@dataclass
class BenchResult:
    """Everything one benchmark found: measurements, ratios, targets and how it ran."""

    name: str
    title: str
    method: str
    measurements: dict[str, Measurement] = field(default_factory=dict)
    ratios: list[Ratio] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # Extra tables: name -> list of rows (dicts with the same keys), e.g. per-task times.
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Series for plots: name -> {"x": [...], "y": [...], "xlabel", "ylabel", ...}.
    series: dict[str, dict[str, Any]] = field(default_factory=dict)
    wall_seconds: float = 0.0

    def add(self, name: str, label: str, unit: str, values: list[float], note: str = "") -> Measurement:
        self.measurements[name] = Measurement(label, unit, [float(v) for v in values], note)
        return self.measurements[name]

    def to_json(self) -> dict[str, Any]:
        ratios = [r.evaluate(self.measurements) for r in self.ratios]
        by_label = {r["label"]: r["value"] for r in ratios}
        targets = []
        for target in self.targets:
            if target.metric in by_label:
                targets.append(target.evaluate(by_label[target.metric], "x"))
            else:
                measured = self.measurements[target.metric]
                targets.append(target.evaluate(measured.median, measured.unit))
        return {
            "title": self.title,
            "method": self.method,
            "wall_seconds": self.wall_seconds,
            "measurements": {name: m.to_json() for name, m in self.measurements.items()},
            "ratios": ratios,
            "targets": targets,
            "settings": self.settings,
            "notes": self.notes,
            "tables": self.tables,
            "series": self.series,
        }


def repeat(times: int, run: Callable[[], float]) -> list[float]:
    """``run()`` ``times`` times; its return values (each run measures itself)."""
    return [run() for _ in range(times)]


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)
