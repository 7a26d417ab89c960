"""The one waiting helper of the scripts and tests (``local_stack.wait_until``)."""

from __future__ import annotations

import time

import pytest

from local_stack import answers, wait_until


def test_returns_the_first_truthy_value():
    calls = iter([None, 0, "", "ready", "later"])
    assert wait_until(lambda: next(calls), timeout=5, interval=0.01) == "ready"


def test_times_out_naming_what_it_waited_for():
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="the scheduler not reached after 0 s"):
        wait_until(lambda: False, timeout=0.3, interval=0.05, what="the scheduler")
    assert 0.3 <= time.monotonic() - started < 3


def test_an_exception_of_the_predicate_is_raised_at_once():
    calls = []

    def dead() -> bool:
        calls.append(1)
        raise RuntimeError("service exited")

    with pytest.raises(RuntimeError, match="service exited"):
        wait_until(dead, timeout=30, interval=0.01)
    assert len(calls) == 1


def test_answers_counts_an_oserror_as_not_yet():
    attempts = iter([ConnectionRefusedError(), TimeoutError(), "up"])

    def probe() -> str:
        value = next(attempts)
        if isinstance(value, Exception):
            raise value
        return value

    assert wait_until(answers(probe), timeout=5, interval=0.01) == "up"
