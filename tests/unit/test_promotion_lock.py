"""The promotion lock and concurrent promotions, on a real MLflow registry (SQLAlchemy store
on a SQLite file, in this process; the register job talks to a server, same store code)."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time

import pytest

from spark_jobs.register import CHAMPION_HISTORY_TAG, PROMOTION_LOCK_SUFFIX, promote_to_champion, promotion_lock

MODEL = "lock_test_model"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    from mlflow import MlflowClient

    root = tmp_path_factory.mktemp("registry")
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.create_registered_model(MODEL)
    for _ in range(4):
        client.create_model_version(MODEL, source=str(root / "artifacts"))
    return client


def lock_exists(client) -> bool:
    return bool(client.search_registered_models(f"name = '{MODEL}{PROMOTION_LOCK_SUFFIX}'"))


def test_a_held_lock_makes_the_next_holder_wait_then_time_out_naming_the_lock(client):
    with promotion_lock(client, MODEL):
        assert lock_exists(client)
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=rf"{MODEL}\.promotion-lock.*still held by"):
            with promotion_lock(client, MODEL, timeout_s=1.5, poll_s=0.2):
                pytest.fail("a second holder got the lock")
        assert time.monotonic() - started >= 1.5
    assert not lock_exists(client)
    with promotion_lock(client, MODEL, timeout_s=1):  # free again once released
        pass


def test_the_lock_is_released_when_the_body_fails(client):
    with pytest.raises(RuntimeError, match="boom"):
        with promotion_lock(client, MODEL):
            raise RuntimeError("boom")
    assert not lock_exists(client)


def test_a_lock_left_by_a_dead_holder_is_broken_once_stale(client):
    client.create_registered_model(f"{MODEL}{PROMOTION_LOCK_SUFFIX}", tags={"holder": "gone:1:dead"})
    time.sleep(0.1)
    with pytest.raises(TimeoutError, match="gone:1:dead"):
        with promotion_lock(client, MODEL, timeout_s=0.5, poll_s=0.1, stale_after_s=600):
            pass
    with promotion_lock(client, MODEL, timeout_s=5, stale_after_s=0.05):
        holder = client.get_registered_model(f"{MODEL}{PROMOTION_LOCK_SUFFIX}").tags["holder"]
        assert holder != "gone:1:dead"
    assert not lock_exists(client)


def test_concurrent_promotions_keep_every_move_in_the_history(client):
    since = dt.datetime(2026, 11, 3, 2, tzinfo=dt.timezone.utc)
    errors = []

    def promote(version: str) -> None:
        try:
            promote_to_champion(client, MODEL, version, since)
        except Exception as err:  # reported below with the version
            errors.append((version, repr(err)))

    threads = [threading.Thread(target=promote, args=(str(v),)) for v in (2, 3, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    model = client.get_registered_model(MODEL)
    history = json.loads(model.tags[CHAMPION_HISTORY_TAG])
    assert sorted(e["version"] for e in history) == ["2", "3", "4"]
    assert str(model.aliases["champion"]) == history[-1]["version"]
    assert not lock_exists(client)


def test_a_version_replaced_as_champion_is_not_moved_back(client):
    model = "rollback_test_model"
    client.create_registered_model(model)
    for _ in range(2):
        client.create_model_version(model, source="/nonexistent")
    day = dt.datetime(2026, 11, 1, 2, tzinfo=dt.timezone.utc)
    assert promote_to_champion(client, model, "1", day) is None
    assert promote_to_champion(client, model, "1", day) is None  # retried while still champion
    assert promote_to_champion(client, model, "2", day + dt.timedelta(days=1)) is None
    refusal = promote_to_champion(client, model, "1", day + dt.timedelta(days=2))  # retried after being replaced
    assert refusal == "version 1 was champion before and no longer is (champion now: 2); not moved back"
    registered = client.get_registered_model(model)
    assert str(registered.aliases["champion"]) == "2"
    assert [e["version"] for e in json.loads(registered.tags[CHAMPION_HISTORY_TAG])] == ["1", "2"]
    # An operator rolls champion back to 1 by hand; a retry of 2's registration keeps that.
    client.set_registered_model_alias(model, "champion", "1")
    refusal = promote_to_champion(client, model, "2", day + dt.timedelta(days=3))
    assert refusal == "version 2 was champion before and no longer is (champion now: 1); not moved back"
    assert str(client.get_registered_model(model).aliases["champion"]) == "1"
