"""The gate's reader of the promotion history (the register job writes it: see
tests/unit/test_promotion_history.py for the round trip on real stores)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from ml_registry.alias_history import Promotion, history_tag, read_history, version_as_of

UTC = dt.UTC
NOV_1 = dt.datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
NOV_15 = dt.datetime(2026, 11, 15, 2, 0, tzinfo=UTC)


def entry(version: str, effective: dt.datetime, state: str = "done") -> str:
    return json.dumps(
        {
            "version": version,
            "moved_at": (effective + dt.timedelta(minutes=5)).isoformat(),
            "logical_time": effective.isoformat(),
            "effective": effective.isoformat(),
            "state": state,
            "run": "scheduled__x",
        }
    )


def test_tag_prefix_is_per_alias():
    assert history_tag("champion") == "champion_history"


def test_legacy_list_then_one_tag_per_promotion_in_sequence_order():
    tags = {
        "champion_history": json.dumps(
            [
                {"version": "2", "since": "2026-10-15T02:00:00+00:00"},
                {"version": "1", "since": "2026-10-01T03:00:00+01:00"},
            ]
        ),
        "champion_history.00000002": entry("4", NOV_15),
        "champion_history.00000001": entry("3", NOV_1),
        "champion_history_note": "not an entry",
        "other": "x",
    }
    assert read_history(tags, "champion", "4") == [
        Promotion("1", dt.datetime(2026, 10, 1, 2, 0, tzinfo=UTC)),
        Promotion("2", dt.datetime(2026, 10, 15, 2, 0, tzinfo=UTC)),
        Promotion("3", NOV_1),
        Promotion("4", NOV_15),
    ]


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        (NOV_1 - dt.timedelta(microseconds=1), None),
        (NOV_1, "1"),
        (NOV_15 - dt.timedelta(microseconds=1), "1"),
        (NOV_15, "2"),
        (dt.datetime(2027, 1, 1, tzinfo=UTC), "2"),
    ],
)
def test_version_as_of_is_the_last_entry_effective_by_then(when, expected):
    history = read_history(
        {"champion_history.00000001": entry("1", NOV_1), "champion_history.00000002": entry("2", NOV_15)},
        "champion",
        "2",
    )
    assert version_as_of(history, when) == expected


def test_a_pending_last_entry_counts_only_when_the_alias_moved():
    tags = {"champion_history.00000001": entry("1", NOV_1), "champion_history.00000002": entry("2", NOV_15, "pending")}
    assert version_as_of(read_history(tags, "champion", "1"), NOV_15) == "1"  # the move never happened
    assert version_as_of(read_history(tags, "champion", "2"), NOV_15) == "2"  # it did, not yet marked done


def test_no_history_answers_nothing():
    assert read_history(None, "champion", None) == []
    assert read_history({"champion_history": ""}, "champion", None) == []
    assert version_as_of([], NOV_1) is None


def test_as_of_needs_an_aware_time():
    with pytest.raises(ValueError, match="timezone-aware"):
        version_as_of([], dt.datetime(2026, 11, 1))


@pytest.mark.parametrize(
    "tags",
    [
        {"champion_history": "not json"},
        {"champion_history": '{"version": "1"}'},
        {"champion_history": '[{"version": "1"}]'},
        {"champion_history": '[{"version": "1", "since": "yesterday"}]'},
        {"champion_history": '[{"version": "1", "since": "2026-11-01T00:00:00"}]'},  # naive: which zone?
        {"champion_history.00000001": "not json"},
        {"champion_history.00000001": '{"version": "1", "state": "done"}'},
        {"champion_history.00000001": '{"version": "1", "effective": "2026-11-01T00:00:00", "state": "done"}'},
    ],
)
def test_a_malformed_history_is_an_error_not_a_guess(tags):
    with pytest.raises(ValueError, match="champion_history"):
        read_history(tags, "champion", "1")
