"""The champion's promotion history: written by the register job (spark_jobs/promotion.py),
read back by the gate's ``as_of`` policy (plugins/ml_registry/alias_history.py), on real
MLflow stores, SQLite and PostgreSQL (whose ``registered_model_tags.value`` is VARCHAR(5000))."""

from __future__ import annotations

import datetime as dt
import json
import random
import time
import uuid
from dataclasses import replace

from ml_registry.alias_history import read_history as gate_history
from ml_registry.alias_history import version_as_of
from spark_jobs.promotion import DONE, next_entry, promote_to_champion, read_history

UTC = dt.UTC
NIGHTLY = dt.datetime(2026, 11, 29, 2, 0, tzinfo=UTC)  # logical time of the nightly that scores 11-28
MICRO = dt.timedelta(microseconds=1)


def at(when: dt.datetime):
    """A register job's clock reading ``when``."""
    return lambda: when


def new_model(client, versions: int) -> str:
    name = f"history_{uuid.uuid4().hex[:8]}"
    client.create_registered_model(name)
    for _ in range(versions):
        client.create_model_version(name, source="/nonexistent")
    return name


def as_of(client, model: str, when: dt.datetime) -> str | None:
    """What the gate answers for ``when``, read the way the gate reads it."""
    registered = client.get_registered_model(model)
    return version_as_of(gate_history(registered.tags, "champion", registered.aliases.get("champion")), when)


def test_promoting_past_the_legacy_single_tag_limit_still_records_the_move(registry_client):
    """89 promotions in the legacy single tag (about three months of nightlies, 4,984
    characters): the next promotion must not need a longer value. On PostgreSQL, writing
    the whole list back failed with "value too long for type character varying(5000)"."""
    model = new_model(registry_client, 3)
    start = dt.datetime(2026, 8, 1, 2, 0, tzinfo=UTC)
    legacy = [{"version": str(1 + i % 2), "since": (start + dt.timedelta(days=i)).isoformat()} for i in range(89)]
    registry_client.set_registered_model_tag(model, "champion_history", json.dumps(legacy))
    registry_client.set_registered_model_alias(model, "champion", legacy[-1]["version"])
    assert len(json.dumps(legacy)) <= 5000 < len(json.dumps(legacy + legacy[-1:]))  # one more does not fit

    outcome = promote_to_champion(
        registry_client, model, "3", logical_time=NIGHTLY, clock=at(NIGHTLY + dt.timedelta(minutes=5))
    )

    assert outcome.moved
    registered = registry_client.get_registered_model(model)
    assert str(registered.aliases["champion"]) == "3"
    assert json.loads(registered.tags["champion_history"]) == legacy  # never written again
    assert max(len(value) for value in registered.tags.values()) <= 5000
    # as_of stays exact for the legacy entries and answers the new one.
    for i in (0, 40, 88):
        since = dt.datetime.fromisoformat(legacy[i]["since"])
        assert as_of(registry_client, model, since) == legacy[i]["version"]
        assert as_of(registry_client, model, since - MICRO) == (legacy[i - 1]["version"] if i else None)
    assert as_of(registry_client, model, NIGHTLY) == "3"


def test_a_run_with_a_logical_date_in_2099_does_not_rewrite_history(registry_client):
    model = new_model(registry_client, 3)
    promote_to_champion(registry_client, model, "1", logical_time=NIGHTLY, clock=at(NIGHTLY.replace(minute=5)))
    triggered = dt.datetime(2026, 11, 29, 10, 0, tzinfo=UTC)  # a REST trigger with logical_date 2099-01-01
    promote_to_champion(
        registry_client, model, "2", logical_time=dt.datetime(2099, 1, 1, tzinfo=UTC), clock=at(triggered)
    )
    next_night = NIGHTLY + dt.timedelta(days=1)
    promote_to_champion(registry_client, model, "3", logical_time=next_night, clock=at(next_night.replace(minute=5)))

    entries = read_history(registry_client.get_registered_model(model).tags)
    assert [e.moved_at for e in entries] == [NIGHTLY.replace(minute=5), triggered, next_night.replace(minute=5)]
    assert all(e.effective <= e.moved_at for e in entries)  # never a time after the real move
    assert as_of(registry_client, model, triggered - MICRO) == "1"
    assert as_of(registry_client, model, triggered) == "2"
    assert as_of(registry_client, model, next_night) == "3"
    assert as_of(registry_client, model, dt.datetime(2099, 6, 1, tzinfo=UTC)) == "3"


def test_as_of_at_the_nightly_boundary(registry_client):
    """The nightly with logical time 02:00 promotes at 02:05 and scores its day at 02:10:
    re-scoring that day (as_of 02:00) and anything at 02:10 pick the new champion. A
    promotion at 02:05 by another run whose logical time is 02:05 does not count at 02:00."""
    nightly = new_model(registry_client, 2)
    promote_to_champion(
        registry_client,
        nightly,
        "1",
        logical_time=NIGHTLY - dt.timedelta(days=1),
        clock=at(NIGHTLY - dt.timedelta(days=1)),
    )
    promote_to_champion(registry_client, nightly, "2", logical_time=NIGHTLY, clock=at(NIGHTLY.replace(minute=5)))
    assert as_of(registry_client, nightly, NIGHTLY - MICRO) == "1"
    assert as_of(registry_client, nightly, NIGHTLY) == "2"
    assert as_of(registry_client, nightly, NIGHTLY.replace(minute=10)) == "2"

    other = new_model(registry_client, 2)
    promote_to_champion(
        registry_client,
        other,
        "1",
        logical_time=NIGHTLY - dt.timedelta(days=1),
        clock=at(NIGHTLY - dt.timedelta(days=1)),
    )
    promote_to_champion(
        registry_client, other, "2", logical_time=NIGHTLY.replace(minute=5), clock=at(NIGHTLY.replace(minute=5))
    )
    assert as_of(registry_client, other, NIGHTLY) == "1"
    assert as_of(registry_client, other, NIGHTLY.replace(minute=10)) == "2"


def test_a_late_promotion_with_an_old_logical_date_keeps_what_the_night_scored(registry_client):
    """A manual run with yesterday's logical date promotes at 10:00: the day the nightly
    scored at 02:10 (with its own 02:05 promotion) still re-scores with that version."""
    model = new_model(registry_client, 3)
    promote_to_champion(
        registry_client,
        model,
        "1",
        logical_time=NIGHTLY - dt.timedelta(days=1),
        clock=at(NIGHTLY - dt.timedelta(days=1)),
    )
    promote_to_champion(registry_client, model, "2", logical_time=NIGHTLY, clock=at(NIGHTLY.replace(minute=5)))
    promote_to_champion(
        registry_client, model, "3", logical_time=NIGHTLY - dt.timedelta(days=1), clock=at(NIGHTLY.replace(hour=10))
    )
    assert as_of(registry_client, model, NIGHTLY) == "2"
    assert as_of(registry_client, model, NIGHTLY.replace(minute=5) - MICRO) == "2"
    assert as_of(registry_client, model, NIGHTLY.replace(minute=5)) == "3"


def seed_history(client, model: str, count: int, first_night: dt.datetime) -> list:
    """``count`` nightly promotions cycling through versions 1..3 (rolled forward and back),
    encoded by the job's own writer and inserted in one statement (through the API each
    write is a round trip of its own)."""
    import sqlalchemy

    history = []
    for i in range(count):
        night = first_night + dt.timedelta(days=i)
        entry = next_entry(
            history,
            str(1 + i % 3),
            moved_at=night + dt.timedelta(minutes=5),
            logical_time=night,
            run=f"scheduled__{night.isoformat()}",
        )
        history.append(replace(entry, state=DONE))
    engine = sqlalchemy.create_engine(client.tracking_uri)
    with engine.begin() as conn:
        conn.execute(
            sqlalchemy.text("INSERT INTO registered_model_tags (name, key, value) VALUES (:name, :key, :value)"),
            [{"name": model, "key": entry.tag, "value": entry.value()} for entry in history],
        )
    engine.dispose()
    return history


def test_years_of_promotions_answer_as_of_exactly_and_fast(registry_client):
    count = 1200  # more than three years of nightly promotions
    model = new_model(registry_client, 4)
    first_night = dt.datetime(2023, 1, 1, 2, 0, tzinfo=UTC)
    history = seed_history(registry_client, model, count, first_night)
    registry_client.set_registered_model_alias(model, "champion", history[-1].version)
    night = first_night + dt.timedelta(days=count)

    assert promote_to_champion(
        registry_client, model, "4", logical_time=night, clock=at(night + dt.timedelta(minutes=5))
    ).moved

    started = time.monotonic()
    registered = registry_client.get_registered_model(model)
    promotions = gate_history(registered.tags, "champion", registered.aliases["champion"])
    read_s = time.monotonic() - started
    assert read_s < 2, f"reading {len(promotions)} promotions took {read_s:.2f} s"
    # The gate reads exactly what the job wrote (the shared round trip of the format).
    written = read_history(registered.tags)
    assert [(p.version, p.effective) for p in promotions] == [(e.version, e.effective) for e in written]
    assert len(written) == count + 1 and written[-1].seq == count + 1
    for i in random.Random(7).sample(range(count), 50) + [0, count - 1]:
        entry = history[i]
        assert version_as_of(promotions, entry.effective) == entry.version
        assert version_as_of(promotions, entry.effective + dt.timedelta(hours=23)) == entry.version
        assert version_as_of(promotions, entry.effective - MICRO) == (history[i - 1].version if i else None)
    assert version_as_of(promotions, night) == "4"
