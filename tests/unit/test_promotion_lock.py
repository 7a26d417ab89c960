"""The promotion lock, concurrent promotions and crashes mid-promotion, on real MLflow
registry stores (SQLite and PostgreSQL, the SQLAlchemy store in this process; the register
job talks to a server running the same store code)."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import uuid

import pytest

from local_stack import wait_until
from spark_jobs.promotion import (
    LOCK_STALE_AFTER_S,
    LOCK_TIMEOUT_S,
    PENDING,
    PROMOTION_LOCK_SUFFIX,
    promote_to_champion,
    promotion_lock,
    read_history,
    release_lock,
)

UTC = dt.UTC
NIGHT = dt.datetime(2026, 11, 3, 2, tzinfo=UTC)
FAST = {"timeout_s": 10, "stale_after_s": 5, "poll_s": 0.1}


def new_model(client, versions: int = 4) -> str:
    name = f"lock_{uuid.uuid4().hex[:8]}"
    client.create_registered_model(name)
    for _ in range(versions):
        client.create_model_version(name, source="/nonexistent")
    return name


def lock_holder(client, model: str) -> str | None:
    found = client.search_registered_models(f"name = '{model}{PROMOTION_LOCK_SUFFIX}'")
    return found[0].tags.get("holder") if found else None


def history_versions(client, model: str) -> list[str]:
    return [entry.version for entry in read_history(client.get_registered_model(model).tags)]


def test_a_waiter_gets_the_lock_once_the_holder_releases_it(registry_client, caplog):
    model = new_model(registry_client, 0)
    acquired, errors = threading.Event(), []

    def wait_for_lock() -> None:
        try:
            # Patient: the holder's lock must not turn stale (and be broken) while the test
            # waits for this waiter's log line, however slow the machine.
            with promotion_lock(registry_client, model, timeout_s=120, stale_after_s=60, poll_s=0.1):
                acquired.set()
        except Exception as err:  # reported below
            errors.append(err)

    caplog.set_level(logging.INFO, logger="spark_jobs.promotion")
    with promotion_lock(registry_client, model, **FAST) as holder:
        waiter = threading.Thread(target=wait_for_lock)
        waiter.start()
        wait_until(
            lambda: any("waiting for the promotion lock" in r.getMessage() for r in caplog.records),
            60,
            0.05,
            "the second holder waiting",
        )
        assert not acquired.is_set() and lock_holder(registry_client, model) == holder
    waiter.join(timeout=30)
    assert not errors and acquired.is_set()
    assert lock_holder(registry_client, model) is None


def test_the_lock_is_released_when_the_body_fails(registry_client):
    model = new_model(registry_client, 0)
    with pytest.raises(RuntimeError, match="boom"):
        with promotion_lock(registry_client, model, **FAST):
            raise RuntimeError("boom")
    assert lock_holder(registry_client, model) is None


def test_a_lock_left_by_a_dead_holder_is_broken_once_stale(registry_client):
    model = new_model(registry_client, 0)
    registry_client.create_registered_model(f"{model}{PROMOTION_LOCK_SUFFIX}", tags={"holder": "gone:1:dead"})
    with promotion_lock(registry_client, model, timeout_s=5, stale_after_s=0.05, poll_s=0.05) as holder:
        assert lock_holder(registry_client, model) == holder != "gone:1:dead"
    assert lock_holder(registry_client, model) is None


def test_releasing_never_deletes_another_holders_lock(registry_client):
    """Held past stale_after, a lock is broken and taken by the next job; when the first one
    finally releases, the second one's lock must stay."""
    model = new_model(registry_client, 0)
    lock_name = f"{model}{PROMOTION_LOCK_SUFFIX}"
    with promotion_lock(registry_client, model, **FAST):
        registry_client.delete_registered_model(lock_name)  # broken as stale by a waiter...
        registry_client.create_registered_model(lock_name, tags={"holder": "next:2:alive"})  # ...which holds it now
    assert lock_holder(registry_client, model) == "next:2:alive"


def test_breaking_a_stale_lock_leaves_a_newer_holders_lock(registry_client):
    """A waiter that judged holder A's lock stale deletes it only while A still holds it."""
    model = new_model(registry_client, 0)
    lock_name = f"{model}{PROMOTION_LOCK_SUFFIX}"
    registry_client.create_registered_model(lock_name, tags={"holder": "B:2:fresh"})
    assert release_lock(registry_client, lock_name, "A:1:stale") is False
    assert lock_holder(registry_client, model) == "B:2:fresh"
    assert release_lock(registry_client, lock_name, "B:2:fresh") is True
    assert lock_holder(registry_client, model) is None


def test_a_dead_holders_lock_is_broken_before_a_waiter_times_out(registry_client):
    assert 0 < LOCK_STALE_AFTER_S < LOCK_TIMEOUT_S
    model = new_model(registry_client, 0)
    with pytest.raises(ValueError, match="below timeout_s"):
        with promotion_lock(registry_client, model, timeout_s=600, stale_after_s=900):
            pass
    assert lock_holder(registry_client, model) is None


def test_concurrent_promotions_keep_every_move_in_the_history(registry_client):
    model = new_model(registry_client)
    errors = []

    def promote(version: str) -> None:
        try:
            promote_to_champion(registry_client, model, version, logical_time=NIGHT)
        except Exception as err:  # reported below with the version
            errors.append((version, repr(err)))

    threads = [threading.Thread(target=promote, args=(str(v),)) for v in (2, 3, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    registered = registry_client.get_registered_model(model)
    history = read_history(registered.tags)
    assert sorted(e.version for e in history) == ["2", "3", "4"]
    assert str(registered.aliases["champion"]) == history[-1].version
    assert [e.effective for e in history] == sorted(e.effective for e in history)
    assert lock_holder(registry_client, model) is None


def test_a_version_replaced_as_champion_is_not_moved_back(registry_client):
    model = new_model(registry_client, 2)
    day = dt.timedelta(days=1)
    assert promote_to_champion(registry_client, model, "1", logical_time=NIGHT).moved
    retried = promote_to_champion(registry_client, model, "1", logical_time=NIGHT)  # retried while still champion
    assert (retried.moved, retried.refusal) == (False, None)
    assert promote_to_champion(registry_client, model, "2", logical_time=NIGHT + day).moved
    late = promote_to_champion(
        registry_client, model, "1", logical_time=NIGHT + 2 * day
    )  # retried after being replaced
    assert late.refusal == "version 1 was champion before and no longer is (champion now: 2); not moved back"
    assert str(registry_client.get_registered_model(model).aliases["champion"]) == "2"
    assert history_versions(registry_client, model) == ["1", "2"]
    # An operator rolls champion back to 1 by hand; a retry of 2's registration keeps that,
    # and the history records the hand move.
    registry_client.set_registered_model_alias(model, "champion", "1")
    refused = promote_to_champion(registry_client, model, "2", logical_time=NIGHT + 3 * day)
    assert refused.refusal == "version 2 was champion before and no longer is (champion now: 1); not moved back"
    assert str(registry_client.get_registered_model(model).aliases["champion"]) == "1"
    assert history_versions(registry_client, model) == ["1", "2", "1"]


def test_the_promotion_rule_is_applied_to_the_champion_found_holding_the_lock(registry_client):
    """The job evaluated its candidate (3) against champion 1; version 2 became champion
    before the job got the lock. The rule is applied to 2, and 3 is worse than 2."""
    model = new_model(registry_client, 3)
    promote_to_champion(registry_client, model, "1", logical_time=NIGHT)
    promote_to_champion(registry_client, model, "2", logical_time=NIGHT + dt.timedelta(hours=1))
    accuracy = {"1": 0.90, "2": 0.99}
    seen = []

    def rule(champion: str | None) -> tuple[bool, str]:
        seen.append(champion)
        return 0.95 >= accuracy[champion] - 0.01, f"compared with version {champion}"

    outcome = promote_to_champion(registry_client, model, "3", logical_time=NIGHT + dt.timedelta(hours=2), rule=rule)
    assert seen == ["2"]
    assert (outcome.moved, outcome.refusal, outcome.champion_before) == (False, "compared with version 2", "2")
    assert str(registry_client.get_registered_model(model).aliases["champion"]) == "2"
    assert history_versions(registry_client, model) == ["1", "2"]


class CrashingClient:
    """An MlflowClient whose process dies (here: raises) at one chosen registry call."""

    def __init__(self, client, crash_on: str, when=lambda *args: True) -> None:
        self._client, self._crash_on, self._when = client, crash_on, when

    def __getattr__(self, name: str):
        method = getattr(self._client, name)
        if name != self._crash_on:
            return method

        def crashing(*args, **kwargs):
            if self._when(*args):
                raise SystemExit(f"killed during {name}")
            return method(*args, **kwargs)

        return crashing


def test_a_crash_between_recording_and_moving_the_alias_is_repaired(registry_client):
    from ml_registry.alias_history import read_history as gate_history
    from ml_registry.alias_history import version_as_of

    model = new_model(registry_client, 3)
    promote_to_champion(registry_client, model, "1", logical_time=NIGHT)
    crashing = CrashingClient(registry_client, "set_registered_model_alias")
    with pytest.raises(SystemExit):
        promote_to_champion(crashing, model, "2", logical_time=NIGHT + dt.timedelta(days=1))
    registered = registry_client.get_registered_model(model)
    assert str(registered.aliases["champion"]) == "1"
    assert [e.state for e in read_history(registered.tags)] == ["done", PENDING]
    # Until repaired, the gate ignores the move that never happened.
    history = gate_history(registered.tags, "champion", "1")
    assert version_as_of(history, NIGHT + dt.timedelta(days=30)) == "1"

    assert promote_to_champion(registry_client, model, "3", logical_time=NIGHT + dt.timedelta(days=2)).moved
    entries = read_history(registry_client.get_registered_model(model).tags)
    assert [(e.version, e.state) for e in entries] == [("1", "done"), ("3", "done")]


def test_a_crash_between_moving_the_alias_and_marking_it_done_is_repaired(registry_client):
    from ml_registry.alias_history import read_history as gate_history
    from ml_registry.alias_history import version_as_of

    model = new_model(registry_client, 3)
    promote_to_champion(registry_client, model, "1", logical_time=NIGHT)
    crashing = CrashingClient(
        registry_client, "set_registered_model_tag", when=lambda name, key, value: '"state": "done"' in value
    )
    with pytest.raises(SystemExit):
        promote_to_champion(crashing, model, "2", logical_time=NIGHT + dt.timedelta(days=1))
    registered = registry_client.get_registered_model(model)
    assert str(registered.aliases["champion"]) == "2"
    pending = read_history(registered.tags)[-1]
    assert (pending.version, pending.state) == ("2", PENDING)
    # The alias did move: the gate counts the entry already.
    history = gate_history(registered.tags, "champion", "2")
    assert version_as_of(history, pending.effective) == "2"

    assert promote_to_champion(registry_client, model, "3", logical_time=NIGHT + dt.timedelta(days=2)).moved
    entries = read_history(registry_client.get_registered_model(model).tags)
    assert [(e.version, e.state) for e in entries] == [("1", "done"), ("2", "done"), ("3", "done")]
    assert entries[1].moved_at == pending.moved_at  # repaired, not re-dated
