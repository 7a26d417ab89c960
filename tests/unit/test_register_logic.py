from __future__ import annotations

from spark_jobs.register import promotion_decision


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


def test_promotion_history_appends_and_is_idempotent_for_retries():
    import datetime as dt
    import json

    from spark_jobs.register import appended_history

    t1 = dt.datetime(2026, 11, 20, 2, 0, tzinfo=dt.timezone.utc)
    t2 = dt.datetime(2026, 11, 25, 2, 0, tzinfo=dt.timezone.utc)
    once = appended_history(None, "1", t1)
    twice = appended_history(appended_history(once, "2", t2), "2", t2 + dt.timedelta(hours=1))
    assert json.loads(twice) == [
        {"version": "1", "since": "2026-11-20T02:00:00+00:00"},
        {"version": "2", "since": "2026-11-25T02:00:00+00:00"},
    ]


def test_history_written_by_register_is_read_by_the_gate():
    import datetime as dt

    from ml_registry.alias_history import version_as_of
    from spark_jobs.register import appended_history

    t1 = dt.datetime(2026, 11, 20, tzinfo=dt.timezone.utc)
    history = appended_history(appended_history(None, "1", t1), "2", t1 + dt.timedelta(days=5))
    assert version_as_of(history, t1 - dt.timedelta(days=1)) is None
    assert version_as_of(history, t1 + dt.timedelta(days=2)) == "1"
    assert version_as_of(history, t1 + dt.timedelta(days=6)) == "2"


def test_history_never_goes_back_in_time():
    import datetime as dt
    import json

    from spark_jobs.register import appended_history

    late = dt.datetime(2026, 11, 25, tzinfo=dt.timezone.utc)
    history = appended_history(appended_history(None, "1", late), "2", late - dt.timedelta(days=3))
    assert [e["since"] for e in json.loads(history)] == [late.isoformat(), late.isoformat()]
