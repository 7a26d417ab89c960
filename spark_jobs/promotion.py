"""Moving a registered model's ``champion`` alias, and the alias's promotion history.

MLflow knows only where an alias points *now*. Re-scoring a past day with the version that
scored it (the gate's ``as_of`` policy) needs every move, so each promotion is recorded in
its own registered-model tag, ``champion_history.<8-digit sequence number>``, with a small
JSON value::

    {"version": "7", "moved_at": "2026-11-29T02:05:13.402118+00:00",
     "logical_time": "2026-11-29T02:00:00+00:00", "effective": "2026-11-29T02:00:00+00:00",
     "state": "done", "run": "scheduled__2026-11-29T02:00:00+00:00"}

- ``moved_at``: when the register job moved the alias, by its own clock; never the run's
  logical date, so a run triggered with a logical date in 2099 cannot rewrite history.
- ``logical_time``: the promoting run's logical time (``null`` for a move made outside the
  register job and found by :func:`reconcile`).
- ``effective``: from when ``as_of`` answers this version: the logical time clamped into
  [previous entry's ``moved_at``, this ``moved_at``]. The nightly run of 02:00 that promotes
  at 02:05 and then scores its day is effective from 02:00, so a re-score of that day picks
  what the night scored with; a clamp below keeps every version that really held the alias
  visible for some interval, and above keeps it out of the future. Never decreasing.
- ``state``: ``pending`` between the history write and the alias move, then ``done``.

One tag per promotion keeps every value small: a single tag holding the whole list (the
legacy ``champion_history`` JSON list, still read here and by the gate) outgrows
``registered_model_tags.value``, ``VARCHAR(5000)`` on PostgreSQL and MySQL, after some 88
nightly promotions.

Consistency: the entry is written (``pending``) before the alias moves and marked ``done``
after, all under the model's :func:`promotion_lock`; the next holder of the lock repairs
what a crash in between left (:func:`reconcile`), so the alias and the history agree.

This module is the only writer of the history. The gate (``plugins/ml_registry/
alias_history.py``) only reads it; the tags' names and values are the contract's
(:mod:`ml_contract.history`), which both import, and a round-trip test writes through this
module and reads through the plugin, on SQLite and PostgreSQL stores. Standard library and
MLflow only.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from ml_contract.history import (
    CHAMPION,
    DONE,
    PENDING,
    HistoryEntry,
    history_entry_tag,
    iso,
    legacy_history_tag,
    read_history,
)

__all__ = ["CHAMPION", "DONE", "PENDING", "HistoryEntry", "history_entry_tag", "legacy_history_tag", "read_history"]

log = logging.getLogger(__name__)

# Version tag: when the version last became champion (the real move time).
TAG_PROMOTED_AT = "champion_promoted_at"
# A registered model of this name exists while a job moves ``champion`` (promotion_lock).
PROMOTION_LOCK_SUFFIX = ".promotion-lock"
# A holder that died is presumed after LOCK_STALE_AFTER_S; a waiter gives up after
# LOCK_TIMEOUT_S. Stale must come first, or the first retry after a crash always times out.
LOCK_TIMEOUT_S = 600.0
LOCK_STALE_AFTER_S = 300.0


def utc_now() -> dt.datetime:
    """When the alias moves (a history entry's ``moved_at``): the one wall-clock read here, on
    purpose. It decides no partition or data window; it caps ``effective`` so a run's logical
    date (e.g. a trigger dated 2099) cannot record a promotion in the future."""
    return dt.datetime.now(dt.UTC)


def next_entry(
    history: list[HistoryEntry],
    version: str,
    *,
    moved_at: dt.datetime,
    logical_time: dt.datetime | None,
    run: str | None,
    alias: str = CHAMPION,
) -> HistoryEntry:
    """The pending entry recording ``version``'s move at ``moved_at`` after ``history``.

    ``moved_at`` never goes below the previous real move (a skewed clock on another host);
    ``effective`` is ``logical_time`` clamped into [previous move, this move].
    """
    previous_moves = [entry.moved_at for entry in history if entry.moved_at is not None]
    if previous_moves:
        moved_at = max(moved_at, previous_moves[-1])
    floor = min(history[-1].moved_at or history[-1].effective, moved_at) if history else None
    effective = moved_at if logical_time is None else min(logical_time, moved_at)
    if floor is not None:
        effective = max(effective, floor)
    seq = max((entry.seq for entry in history), default=0) + 1
    return HistoryEntry(
        version=str(version),
        effective=effective,
        moved_at=moved_at,
        logical_time=logical_time,
        state=PENDING,
        run=run,
        tag=history_entry_tag(seq, alias),
        seq=seq,
    )


def reconcile(
    client,
    model_name: str,
    history: list[HistoryEntry],
    alias_version: str | None,
    *,
    clock: Callable[[], dt.datetime] = utc_now,
) -> list[HistoryEntry]:
    """Make the history agree with where the alias points; call it holding the lock.

    - A ``pending`` last entry whose version holds the alias: the move happened and the
      job died before marking it; it is marked ``done``.
    - A ``pending`` last entry whose version does not: the alias never moved; the entry
      is deleted (the retried registration decides again).
    - The alias on a version the history does not end with (moved by hand, or by an older
      release whose history write failed): a ``done`` entry is added, moved now, without a
      logical time; ``as_of`` answers it from now on, since the real move time is unknown.
    """
    history = list(history)
    if history and history[-1].state == PENDING:
        last = history.pop()
        if last.version == alias_version:
            log.warning("%s: promotion of version %s was not marked done; marking it now", model_name, last.version)
            last = replace(last, state=DONE)
            client.set_registered_model_tag(model_name, last.tag, last.value())
            history.append(last)
        else:
            log.warning(
                "%s: promotion of version %s never moved the alias (it points to %s); removing %s",
                model_name,
                last.version,
                alias_version,
                last.tag,
            )
            client.delete_registered_model_tag(model_name, last.tag)
    if alias_version is not None and (not history or history[-1].version != alias_version):
        log.warning(
            "%s: %s points to version %s, which the history does not record; recording it now",
            model_name,
            CHAMPION,
            alias_version,
        )
        found = next_entry(history, alias_version, moved_at=clock(), logical_time=None, run=None)
        found = replace(found, state=DONE)
        client.set_registered_model_tag(model_name, found.tag, found.value())
        history.append(found)
    return history


def superseded_by(history: list[HistoryEntry], version: str, champion_now: str | None) -> str | None:
    """Why ``version`` must not become champion again, or ``None``.

    A version that held ``champion`` before (it is in the history) and no longer holds it
    was replaced or rolled back on purpose: a retried (or re-run) registration of its
    training run must not move the alias back to it.
    """
    if str(version) == str(champion_now) or all(entry.version != str(version) for entry in history):
        return None
    return (
        f"version {version} was champion before and no longer is (champion now: {champion_now or 'none'}); "
        "not moved back"
    )


@contextlib.contextmanager
def promotion_lock(
    client,
    model_name: str,
    *,
    timeout_s: float = LOCK_TIMEOUT_S,
    stale_after_s: float = LOCK_STALE_AFTER_S,
    poll_s: float = 1.0,
) -> Iterator[str]:
    """Hold the model's promotion lock: one job at a time moves ``champion``. Yields the holder id.

    Recording a move is a read-modify-write that MLflow cannot do atomically. Creating a
    registered model is atomic in the registry's database (its name is unique), so the job
    that creates ``<model>.promotion-lock`` holds the lock. A lock older than
    ``stale_after_s`` (its holder died) is broken; waiting longer than ``timeout_s`` fails.
    Breaking and releasing delete the lock only while it names the expected holder, read
    just before: a waiter never deletes a lock a newer holder took meanwhile (MLflow has no
    conditional delete, so what remains is the moment between that read and the delete).
    """
    from mlflow.exceptions import MlflowException

    if not 0 < stale_after_s < timeout_s:
        raise ValueError(
            f"stale_after_s ({stale_after_s}) must be positive and below timeout_s ({timeout_s}): "
            "otherwise a waiter gives up before a dead holder's lock can be broken"
        )
    lock_name = f"{model_name}{PROMOTION_LOCK_SUFFIX}"
    holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.create_registered_model(
                lock_name, tags={"holder": holder}, description=f"promotion lock of {model_name}, held by {holder}"
            )
            break
        except MlflowException as err:
            # On a name clash the store reads the existing model back; released in between,
            # the create fails with "does not exist": the lock is free, try again.
            if err.error_code == "RESOURCE_DOES_NOT_EXIST":
                continue
            if err.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        try:
            held = client.get_registered_model(lock_name)
        except MlflowException:
            continue  # released meanwhile: try again at once
        held_by = held.tags.get("holder")
        if held_by == holder:
            break  # our create went through but its reply was lost, and the client retried it
        age_s = time.time() - held.creation_timestamp / 1000
        if age_s > stale_after_s:
            log.warning("breaking the promotion lock of %s held by %s for %.0f s", model_name, held_by, age_s)
            release_lock(client, lock_name, held_by)
            continue
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"promotion lock {lock_name!r} still held by {held_by} after {timeout_s:.0f} s; "
                f"delete that registered model if its holder is gone"
            )
        log.info("waiting for the promotion lock of %s (held by %s)", model_name, held_by)
        time.sleep(poll_s)
    try:
        yield holder
    finally:
        release_lock(client, lock_name, holder)


def release_lock(client, lock_name: str, holder: str | None) -> bool:
    """Delete the lock ``lock_name`` if (and only if) ``holder`` holds it; whether it did."""
    from mlflow.exceptions import MlflowException

    try:
        held_by = client.get_registered_model(lock_name).tags.get("holder")
    except MlflowException:
        return False  # already gone
    if held_by != holder:
        log.warning("promotion lock %s is held by %s, not %s: left in place", lock_name, held_by, holder)
        return False
    with contextlib.suppress(MlflowException):  # deleted by someone else meanwhile
        client.delete_registered_model(lock_name)
    return True


@dataclass(frozen=True)
class PromotionOutcome:
    """What :func:`promote_to_champion` did: ``refusal`` says why the alias did not move."""

    moved: bool
    refusal: str | None
    champion_before: str | None


def promote_to_champion(
    client,
    model_name: str,
    version: str,
    *,
    logical_time: dt.datetime,
    run: str | None = None,
    rule: Callable[[str | None], tuple[bool, str]] | None = None,
    lock_timeout_s: float = LOCK_TIMEOUT_S,
    lock_stale_after_s: float = LOCK_STALE_AFTER_S,
    clock: Callable[[], dt.datetime] = utc_now,
) -> PromotionOutcome:
    """Move ``champion`` to ``version`` and record it, under the model's promotion lock.

    Holding the lock: the history is reconciled with the alias, the champion is read, and
    ``rule(champion)`` (the promotion rule against that champion) decides; a caller that
    evaluated against an earlier champion gets the decision for the one that is there
    now. Then the entry is written ``pending``, the alias moves, the entry is marked
    ``done``. Promoting the current champion again is a no-op.
    """
    version = str(version)
    with promotion_lock(client, model_name, timeout_s=lock_timeout_s, stale_after_s=lock_stale_after_s):
        model = client.get_registered_model(model_name)
        champion_now = model.aliases.get(CHAMPION)
        champion_now = None if champion_now is None else str(champion_now)
        history = reconcile(client, model_name, read_history(model.tags), champion_now, clock=clock)
        if champion_now == version:
            return PromotionOutcome(moved=False, refusal=None, champion_before=champion_now)
        if refusal := superseded_by(history, version, champion_now):
            log.warning("%s %s", model_name, refusal)
            return PromotionOutcome(moved=False, refusal=refusal, champion_before=champion_now)
        if rule is not None:
            passed, reason = rule(champion_now)
            if not passed:
                return PromotionOutcome(moved=False, refusal=reason, champion_before=champion_now)
        entry = next_entry(history, version, moved_at=clock(), logical_time=logical_time.astimezone(dt.UTC), run=run)
        client.set_registered_model_tag(model_name, entry.tag, entry.value())
        client.set_registered_model_alias(model_name, CHAMPION, version)
        client.set_registered_model_tag(model_name, entry.tag, replace(entry, state=DONE).value())
    client.set_model_version_tag(model_name, version, TAG_PROMOTED_AT, iso(entry.moved_at))
    return PromotionOutcome(moved=True, refusal=None, champion_before=champion_now)
