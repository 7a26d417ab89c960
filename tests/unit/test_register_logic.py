"""The register job's promotion rule (both metric directions) and its arguments."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs import workflows
from spark_jobs.register import parse_args, promotion_decision
from spark_jobs.workflows import Metric

ACCURACY = Metric("accuracy", "max")
RMSE = Metric("rmse", "min")


def accuracy_decision(candidate, champion, floor=0.93, tolerance=0.01):
    return promotion_decision(candidate, champion, metric=ACCURACY, floor=floor, tolerance=tolerance)


def rmse_decision(candidate, champion, floor=70.0, tolerance=2.0):
    return promotion_decision(candidate, champion, metric=RMSE, floor=floor, tolerance=tolerance)


# -- listed cases: accuracy, higher is better -------------------------------------------------


def test_first_model_above_floor_is_promoted():
    passed, reason = accuracy_decision(0.95, None)
    assert passed and reason == "accuracy 0.95 >= floor 0.93; no champion yet"


def test_below_floor_is_never_promoted():
    passed, reason = accuracy_decision(0.92, None)
    assert not passed and reason == "accuracy 0.92 below the floor 0.93"


def test_slightly_worse_than_champion_within_tolerance_passes():
    passed, reason = accuracy_decision(0.955, 0.96)
    assert passed and reason == "accuracy 0.955 >= floor 0.93 and within 0.01 of champion's 0.96"


def test_worse_than_champion_beyond_tolerance_fails():
    passed, reason = accuracy_decision(0.94, 0.97)
    assert not passed and reason == "accuracy 0.94 worse than champion's 0.97 beyond tolerance 0.01"


def test_accuracy_exactly_at_the_floor_passes():
    assert accuracy_decision(0.93, None)[0]


# -- listed cases: RMSE, lower is better ------------------------------------------------------


def test_rmse_at_or_below_the_floor_is_promoted():
    passed, reason = rmse_decision(54.2, None)
    assert passed and reason == "rmse 54.2 <= floor 70.0; no champion yet"
    assert rmse_decision(70.0, None)[0]


def test_rmse_above_the_floor_is_refused():
    passed, reason = rmse_decision(71.25, None)
    assert not passed and reason == "rmse 71.25 above the floor 70.0"


def test_rmse_slightly_above_the_champion_within_tolerance_passes():
    passed, reason = rmse_decision(55.5, 54.0)
    assert passed and reason == "rmse 55.5 <= floor 70.0 and within 2.0 of champion's 54.0"


def test_rmse_above_the_champion_beyond_tolerance_fails():
    passed, reason = rmse_decision(57.0, 54.0)
    assert not passed and reason == "rmse 57.0 worse than champion's 54.0 beyond tolerance 2.0"


def test_a_nan_candidate_never_passes():
    for decision in (accuracy_decision(math.nan, None), rmse_decision(math.nan, 54.0)):
        assert not decision[0] and "is nan" in decision[1]


def test_a_nan_champion_is_not_compared_with():
    passed, reason = rmse_decision(60.0, math.nan)
    assert passed and "champion's rmse is nan on the same rows, not compared" in reason


# -- properties ---------------------------------------------------------------------------------

values = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
tolerances = st.floats(min_value=0, max_value=1e3, allow_nan=False)
metrics = st.sampled_from([ACCURACY, RMSE])


@given(metric=metrics, champion=values, margin=st.floats(min_value=0, max_value=1e6), floor=values, tol=tolerances)
def test_a_candidate_better_than_the_champion_is_never_refused_for_the_comparison(metric, champion, margin, floor, tol):
    candidate = champion + margin if metric.direction == "max" else champion - margin
    passed, reason = promotion_decision(candidate, champion, metric=metric, floor=floor, tolerance=tol)
    assert "worse than champion" not in reason
    meets_floor = candidate >= floor if metric.direction == "max" else candidate <= floor
    assert passed == meets_floor


@given(metric=metrics, candidate=values, champion=st.one_of(st.none(), values), floor=values, tol=tolerances)
def test_a_candidate_missing_the_floor_is_always_refused(metric, candidate, champion, floor, tol):
    passed, reason = promotion_decision(candidate, champion, metric=metric, floor=floor, tolerance=tol)
    if (candidate < floor) if metric.direction == "max" else (candidate > floor):
        assert not passed and "the floor" in reason and metric.name in reason


@given(candidate=values, champion=st.one_of(st.none(), values), floor=values, tol=tolerances)
def test_lower_is_better_is_higher_is_better_mirrored(candidate, champion, floor, tol):
    """RMSE's rule is accuracy's on negated values: one rule, two directions."""
    as_min = promotion_decision(candidate, champion, metric=RMSE, floor=floor, tolerance=tol)[0]
    mirrored = None if champion is None else -champion
    as_max = promotion_decision(-candidate, mirrored, metric=ACCURACY, floor=-floor, tolerance=tol)[0]
    assert as_min == as_max


@given(metric=metrics, candidate=values, champion=values, floor=values, tol=tolerances)
def test_a_passed_candidate_is_within_the_tolerance_of_the_champion(metric, candidate, champion, floor, tol):
    passed, _ = promotion_decision(candidate, champion, metric=metric, floor=floor, tolerance=tol)
    if passed:
        assert (candidate >= champion - tol) if metric.direction == "max" else (candidate <= champion + tol)


# -- arguments -----------------------------------------------------------------------------------

REQUIRED = [
    "--workflow",
    "mnist",
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


@pytest.mark.parametrize("name", ["mnist", "diabetes"])
def test_floor_and_tolerance_default_to_the_workflows_promotion(name):
    args = parse_args([*REQUIRED[2:], "--workflow", name])
    promotion = workflows.load(name).promotion
    assert (args.workflow, args.floor, args.tolerance) == (name, promotion.floor, promotion.tolerance)


def test_floor_and_tolerance_flags_override_the_workflow():
    args = parse_args([*REQUIRED, "--floor", "0", "--tolerance", "1"])
    assert (args.floor, args.tolerance) == (0.0, 1.0)


def test_the_workflow_is_required(capsys):
    with pytest.raises(SystemExit):
        parse_args(REQUIRED[2:])
    assert "--workflow" in capsys.readouterr().err


def test_an_unknown_workflow_is_refused_naming_the_declared_ones(capsys):
    with pytest.raises(SystemExit):
        parse_args([*REQUIRED[2:], "--workflow", "cifar"])
    err = capsys.readouterr().err
    assert "no workflow 'cifar'" in err and "mnist" in err


@pytest.mark.parametrize(("flag", "value"), [("--tolerance", "-0.1"), ("--tolerance", "nan"), ("--floor", "inf")])
def test_a_negative_or_non_finite_threshold_is_refused(capsys, flag, value):
    with pytest.raises(SystemExit):
        parse_args([*REQUIRED, flag, value])
    assert f"{flag} must be a finite number" in capsys.readouterr().err


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
