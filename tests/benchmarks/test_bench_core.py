"""The arithmetic behind every benchmark row: medians, spreads, ratios, targets, sizes."""

from __future__ import annotations

import argparse

import pytest

from benchmarks.core import BenchResult, Ratio, Target, summarize
from benchmarks.sizes import PRESETS, add_size_arguments, backfill_ranges, sizes_from_args


def test_summary_has_median_and_spread():
    summary = summarize([3.0, 1.0, 2.0, 10.0])
    assert summary["median"] == 2.5
    assert (summary["min"], summary["max"], summary["n"]) == (1.0, 10.0, 4)
    assert summary["q1"] <= summary["median"] <= summary["q3"]
    assert summarize([4.0])["q1"] == summarize([4.0])["q3"] == 4.0


def test_ratio_is_of_medians_with_the_widest_range():
    result = BenchResult("x", "X", "")
    result.add("fast", "fast", "rows/s", [90, 100, 110])
    result.add("slow", "slow", "rows/s", [40, 50, 60])
    ratio = Ratio("fast", "slow", "fast / slow").evaluate(result.measurements)
    assert ratio["value"] == pytest.approx(2.0)
    assert ratio["low"] == pytest.approx(90 / 60) and ratio["high"] == pytest.approx(110 / 40)


def test_targets_on_ratios_and_on_measurements():
    result = BenchResult("x", "X", "")
    result.add("job", "job", "rows/s", [60])
    result.add("ceiling", "ceiling", "rows/s", [100])
    result.add("parse", "parse", "s", [0.25, 0.5, 0.4])
    result.ratios.append(Ratio("job", "ceiling", "job / ceiling"))
    result.targets += [Target("job >= 0.7x", "job / ceiling", ">=", 0.7), Target("parse <= 0.3 s", "parse", "<=", 0.3)]
    by_label = {t["label"]: t for t in result.to_json()["targets"]}
    assert by_label["job >= 0.7x"]["measured"] == pytest.approx(0.6) and by_label["job >= 0.7x"]["met"] is False
    assert by_label["job >= 0.7x"]["unit"] == "x"
    assert by_label["parse <= 0.3 s"]["measured"] == 0.4 and by_label["parse <= 0.3 s"]["met"] is False
    assert by_label["parse <= 0.3 s"]["unit"] == "s"


def test_a_measurement_needs_values():
    with pytest.raises(ValueError, match="no values"):
        BenchResult("x", "X", "").add("m", "m", "s", [])


def test_size_flags_override_the_preset():
    parser = argparse.ArgumentParser()
    add_size_arguments(parser)
    sizes = sizes_from_args(parser.parse_args(["--size", "tiny", "--score-rows", "1234", "--backfill-days", "30,1,7"]))
    assert sizes.score_rows == 1234
    assert sizes.train_rows == PRESETS["tiny"].train_rows
    assert backfill_ranges(sizes) == [1, 7, 30]
    assert sizes_from_args(parser.parse_args([])) == PRESETS["default"]
    assert PRESETS["default"].score_rows >= 200_000


def test_merge_keeps_other_benchmarks_and_lists_every_run():
    from benchmarks.__main__ import merge_reports

    run = {"command": "python -m benchmarks", "date": "d1", "load_start": 1.0, "load_end": 2.0, "wall_seconds": 60.0}
    earlier = {"meta": run, "benchmarks": {"scoring": {"old": 1}, "ingest": {"old": 2}}, "errors": {"training": "boom"}}
    meta = {**run, "command": "python -m benchmarks --only training", "date": "d2", "wall_seconds": 30.0}
    merged_meta, results, errors = merge_reports(earlier, meta, {"training": {"new": 3}}, {})
    assert results == {"scoring": {"old": 1}, "ingest": {"old": 2}, "training": {"new": 3}}
    assert errors == {}
    assert [r["date"] for r in merged_meta["runs"]] == ["d1", "d2"] and merged_meta["wall_seconds"] == 90.0


def test_event_logs_with_unicode_line_separators_in_a_plan_are_read(tmp_path):
    """Ingest's plans name U+2028, U+2029 and U+0085; Spark writes them raw into the event log."""
    import json

    from benchmarks.orchestration import spark_applications

    events = [
        {"Event": "SparkListenerApplicationStart", "Timestamp": 1_000},
        {"Event": "SparkListenerSQLExecutionStart", "physicalPlanDescription": "rlike('[\u2028\u2029\u0085]')"},
        {"Event": "SparkListenerJobStart", "Submission Time": 2_500},
        {"Event": "SparkListenerApplicationEnd", "Timestamp": 4_000},
    ]
    (tmp_path / "local-1").write_text(
        "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events), encoding="utf-8"
    )
    assert spark_applications(tmp_path) == [{"start": 1.0, "first_job": 2.5, "end": 4.0}]


def test_a_share_of_days_is_shown_as_the_rate_not_rounded_to_zero():
    """The drift benchmark's false-alarm rates (0.045, 0.07) were published as "0 share of days"."""
    from benchmarks.report import fmt

    assert fmt(0.045, "share of days") == "0.045 share of days"
    assert fmt(1.0, "share of days") == "1.000 share of days"
    assert fmt(34_145.0, "rows/s") == "34,145 rows/s"
