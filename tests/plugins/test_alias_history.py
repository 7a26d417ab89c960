"""The promotion-history helpers the register job copies and the gate's ``as_of`` policy reads."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from ml_registry.alias_history import (
    MAX_HISTORY_CHARS,
    append_promotion,
    history_tag,
    parse_history,
    version_as_of,
)

UTC = dt.timezone.utc
NOV_1 = dt.datetime(2026, 11, 1, 2, 30, tzinfo=UTC)
NOV_15 = dt.datetime(2026, 11, 15, 2, 30, tzinfo=UTC)


def test_tag_name_is_per_alias():
    assert history_tag("champion") == "champion_history"


def test_append_to_empty_history_writes_one_utc_entry():
    since = dt.datetime(2026, 11, 1, 3, 30, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    value = append_promotion(None, 3, since)
    assert json.loads(value) == [{"version": "3", "since": "2026-11-01T02:30:00+00:00"}]
    assert append_promotion("", "3", since) == value


def test_append_keeps_oldest_first():
    value = append_promotion(append_promotion(None, "1", NOV_1), "2", NOV_15)
    assert [entry["version"] for entry in json.loads(value)] == ["1", "2"]


def test_append_is_idempotent_for_a_retried_promotion():
    once = append_promotion(None, "1", NOV_1)
    assert append_promotion(once, "1", NOV_15) == once


def test_append_after_rollback_records_the_old_version_again():
    value = None
    for version, since in (("1", NOV_1), ("2", NOV_15), ("1", NOV_15 + dt.timedelta(days=1))):
        value = append_promotion(value, version, since)
    assert [entry["version"] for entry in json.loads(value)] == ["1", "2", "1"]
    assert version_as_of(value, NOV_15 + dt.timedelta(days=2)) == "1"


def test_append_refuses_naive_and_backwards_times():
    with pytest.raises(ValueError, match="timezone-aware"):
        append_promotion(None, "1", dt.datetime(2026, 11, 1))
    with pytest.raises(ValueError, match="precedes the latest"):
        append_promotion(append_promotion(None, "1", NOV_15), "2", NOV_1)


def test_append_refuses_to_outgrow_the_tag_limit():
    # Some 1,750 promotions (about five years of nightly ones), as many as still fit.
    one = append_promotion(None, "1", NOV_1)
    entry_chars = len(json.dumps(json.loads(one) * 2)) - len(one)
    count = (MAX_HISTORY_CHARS - 2) // entry_chars
    entries = [{"version": str(i % 2), "since": (NOV_1 + dt.timedelta(hours=i)).isoformat()} for i in range(count)]
    history = json.dumps(entries)
    assert MAX_HISTORY_CHARS - entry_chars < len(history) <= MAX_HISTORY_CHARS
    with pytest.raises(ValueError, match="tag limit"):
        append_promotion(history, "7", NOV_1 + dt.timedelta(days=365))


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        (NOV_1 - dt.timedelta(seconds=1), None),
        (NOV_1, "1"),
        (NOV_15 - dt.timedelta(microseconds=1), "1"),
        (NOV_15, "2"),
        (dt.datetime(2027, 1, 1, tzinfo=UTC), "2"),
    ],
)
def test_version_as_of_picks_the_holder_at_that_instant(when, expected):
    history = append_promotion(append_promotion(None, "1", NOV_1), "2", NOV_15)
    assert version_as_of(history, when) == expected


def test_version_as_of_without_history_is_none():
    assert version_as_of(None, NOV_1) is None
    assert version_as_of("[]", NOV_1) is None


def test_reading_tolerates_entries_out_of_order():
    history = json.dumps([{"version": "2", "since": NOV_15.isoformat()}, {"version": "1", "since": NOV_1.isoformat()}])
    assert version_as_of(history, NOV_15 - dt.timedelta(days=1)) == "1"


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        '{"version": "1"}',
        '[{"version": "1"}]',
        '[{"version": "1", "since": "yesterday"}]',
        '[{"version": "1", "since": "2026-11-01T00:00:00"}]',  # naive: which zone?
    ],
)
def test_malformed_history_is_an_error_not_a_guess(bad):
    with pytest.raises(ValueError):
        parse_history(bad)
