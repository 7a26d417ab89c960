from __future__ import annotations

import pytest

from spark_jobs.register import parse_args, promotion_decision


def test_first_model_above_floor_is_promoted():
    passed, reason = promotion_decision(0.95, None, min_accuracy=0.93, tolerance=0.01)
    assert passed and "no champion yet" in reason


def test_below_floor_is_never_promoted():
    passed, reason = promotion_decision(0.92, None, min_accuracy=0.93, tolerance=0.01)
    assert not passed and "below the floor" in reason


def test_slightly_worse_than_champion_within_tolerance_passes():
    assert promotion_decision(0.955, 0.96, min_accuracy=0.93, tolerance=0.01)[0]


def test_worse_than_champion_beyond_tolerance_fails():
    passed, reason = promotion_decision(0.94, 0.97, min_accuracy=0.93, tolerance=0.01)
    assert not passed and "worse than champion" in reason


REQUIRED = [
    "--train-manifest",
    "t.json",
    "--output-manifest",
    "r.json",
    "--curated-root",
    "/c",
    "--start-ds",
    "2026-11-01",
    "--end-ds",
    "2026-11-28",
    "--model-name",
    "m",
    "--logical-time",
    "2026-11-29T02:00:00+00:00",
]


def test_the_lock_is_presumed_dead_before_a_waiter_gives_up_by_default():
    args = parse_args(REQUIRED)
    assert 0 < args.lock_stale_after < args.lock_timeout


def test_a_stale_after_at_or_above_the_timeout_is_refused(capsys):
    with pytest.raises(SystemExit):
        parse_args([*REQUIRED, "--lock-timeout", "600", "--lock-stale-after", "900"])
    assert "--lock-stale-after (900) must be positive and below --lock-timeout (600)" in capsys.readouterr().err


def test_the_logical_time_needs_a_utc_offset(capsys):
    with pytest.raises(SystemExit):
        parse_args([*REQUIRED[:-1], "2026-11-29T02:00:00"])
    assert "needs a UTC offset" in capsys.readouterr().err
