"""Which ``ds`` a DAG run processes: the contract of ml_platform.partitions."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pendulum
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ml_platform.partitions import partition_ds, run_key, window_start_ds


def run(logical_date=None, run_after=None, interval=None):
    start, end = interval or (logical_date, logical_date)
    return SimpleNamespace(
        logical_date=logical_date, run_after=run_after, data_interval_start=start, data_interval_end=end
    )


def test_nightly_0200_run_processes_the_day_that_just_ended():
    assert partition_ds(run(pendulum.datetime(2026, 11, 29, 2, 0, tz="UTC"))) == "2026-11-28"


def test_day_boundaries_and_month_rollover():
    assert partition_ds(run(pendulum.datetime(2026, 12, 1, 0, 0, tz="UTC"))) == "2026-11-30"
    assert partition_ds(run(pendulum.datetime(2026, 3, 1, 23, 59, tz="UTC"))) == "2026-02-28"


def test_run_without_logical_date_uses_run_after():
    assert partition_ds(run(None, pendulum.datetime(2026, 11, 29, 13, 5, tz="UTC"))) == "2026-11-28"


def test_run_with_a_data_interval_processes_the_day_it_starts():
    day = pendulum.datetime(2026, 11, 1, tz="UTC")
    assert partition_ds(run(day, interval=(day, day.add(days=1)))) == "2026-11-01"


def test_window_start():
    assert window_start_ds("2026-11-28", 3) == "2026-11-26"
    assert window_start_ds("2026-11-28", 1) == "2026-11-28"
    with pytest.raises(ValueError):
        window_start_ds("2026-11-28", 0)


SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def assert_safe_segment(key: str) -> None:
    assert SAFE_SEGMENT.match(key), key
    assert len(key.encode()) <= 255 and key not in (".", "..")


def test_run_key_is_a_readable_safe_path_segment():
    key = run_key("scheduled__2026-11-29T02:00:00+00:00")
    assert key.startswith("scheduled__2026-11-29T02_00_00_00_00-")
    assert_safe_segment(key)


def test_run_ids_that_sanitize_alike_get_different_keys():
    """A cleared run must never find another run's checkpoints or scratch files."""
    assert len({run_key("a+b"), run_key("a_b"), run_key("a:b"), run_key("a b")}) == 4
    assert run_key("manual__2026-11-29T02:00:00+00:00") != run_key("manual__2026-11-29T02_00_00_00_00")


@settings(max_examples=300, deadline=None)
@given(st.text(), st.text())
def test_distinct_run_ids_give_distinct_safe_keys(first, second):
    assume(first != second)
    assert run_key(first) != run_key(second)
    assert_safe_segment(run_key(first))
    assert_safe_segment(run_key(second))
    assert run_key(first) == run_key(first)


@given(st.text(alphabet="._-:+/ ", max_size=300) | st.text(min_size=240, max_size=400))
def test_degenerate_and_long_run_ids_give_safe_keys(run_id):
    assert_safe_segment(run_key(run_id))


def test_run_time_is_the_logical_date_else_run_after():
    from ml_platform.partitions import run_time

    assert run_time(run(pendulum.datetime(2026, 11, 29, 2, tz="UTC"))) == "2026-11-29T02:00:00+00:00"
    assert run_time(run(None, pendulum.datetime(2026, 11, 29, 13, 5, tz="UTC"))) == "2026-11-29T13:05:00+00:00"


def test_storage_uri_keeps_templates_renderable():
    from ml_platform.config import PlatformConfig

    assert (
        PlatformConfig.storage_uri("/data/_runs/{{ dag.dag_id }}/x.json")
        == "file:///data/_runs/{{ dag.dag_id }}/x.json"
    )
    assert (
        PlatformConfig.storage_uri("abfss://c@acct.dfs.core.windows.net/x") == "abfss://c@acct.dfs.core.windows.net/x"
    )
