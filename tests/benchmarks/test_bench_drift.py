"""The drift benchmark at its tiny size, in this process (it needs no Spark or MLflow): every
workflow x day size has its false-alarm row, every declared shift its detection rows, and
the report's measurements and ratios are positive. The numbers themselves mean nothing
at this size; ``python -m benchmarks.drift`` gives the real ones."""

from __future__ import annotations

import math
from types import SimpleNamespace

from benchmarks.drift import DriftBench
from benchmarks.sizes import PRESETS, int_list

TINY = PRESETS["tiny"]


def test_the_tiny_drift_benchmark_reports_every_cell(tmp_path):
    result = DriftBench(SimpleNamespace(work=tmp_path), TINY).run().to_json()
    sizes = [f"{rows:,}" for rows in int_list(TINY.drift_rows)]
    alarms, detections = result["tables"].values()
    assert [(row["workflow"], row["day rows"]) for row in alarms] == [
        (workflow, rows) for workflow in ("diabetes", "mnist") for rows in sizes
    ]
    days = TINY.drift_references * TINY.drift_days
    assert all(row["days"] == days and 0 <= row["false alarms"] <= days for row in alarms)
    shifts = {(row["workflow"], row["shift"]) for row in detections}
    assert shifts == {("diabetes", "bmi x 1.3"), ("mnist", "inverted"), ("mnist", "shifted 2 px")}
    assert len(detections) == len(shifts) * len(sizes)
    for name, measured in result["measurements"].items():
        if measured["unit"] == "share of days":  # the worst false-alarm rate, the fewest detections
            assert all(0 <= v <= 1 for v in measured["values"]), (name, measured)
        else:
            assert all(v > 0 and math.isfinite(v) for v in measured["values"]), (name, measured)
    targets = {t["label"]: t for t in result["targets"]}
    assert sorted(targets) == sorted(
        f"{w}: {what}"
        for w in ("diabetes", "mnist")
        for what in (
            "false alarms <= declared 0.05 + 3 s.e. at every day size",
            "declared shifts flagged at every day size",
        )
    )
    worst = max(row["false alarms"] / row["days"] for row in alarms if row["workflow"] == "mnist")
    assert targets["mnist: false alarms <= declared 0.05 + 3 s.e. at every day size"]["measured"] == worst
    assert len(result["ratios"]) == 2 and all(0 < r["low"] <= r["value"] <= r["high"] for r in result["ratios"])
    assert "false alarms" in result["method"].lower() and result["settings"]["declared_rate"] == 0.05
