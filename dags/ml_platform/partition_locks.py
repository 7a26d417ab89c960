"""One writer per dataset partition at a time, across DAGs and runs.

Several DAGs write the same partition: the nightly for day D+1 and ``mnist_batch_scoring``
for day D both stage and ingest D; the nightly, ``mnist_batch_scoring``,
``mnist_score_on_new_champion`` (after any promotion) and ``mnist_bulk_backfill_scoring`` all
write predictions. Airflow pools are global (a one-slot pool would serialise every day
of a backfill behind every other), so the platform keeps one lock object per
``(dataset, ds)`` under ``<storage root>/_locks``: different days proceed in parallel,
writers of the same day take turns.

A lock is taken by an exclusive create (``O_EXCL`` locally, ``If-None-Match: *`` on Azure
Blob/ADLS), so two claimers can never both hold it; it names its holder (DAG, run, claim
task). The holder releases it as a teardown, which Airflow runs whether its writers
succeeded or failed. A lock whose holder run is no longer running (killed, marked failed
by hand) is stale and is broken; a break token (itself an exclusive create) makes sure
only one claimer breaks a given stale lock, so a fresh lock is never deleted by mistake.

Paths here are ``ObjectStoragePath``-like (``pathlib.Path`` in unit tests).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

log = logging.getLogger(__name__)

# A run in one of these states may still be writing, or about to: its locks are live.
LIVE_RUN_STATES = frozenset({"queued", "running"})


@dataclass(frozen=True)
class Holder:
    """Who holds a lock: one claim task of one DAG run."""

    dag_id: str
    run_id: str
    claim: str

    def to_text(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_text(cls, text: str) -> Holder:
        try:
            return cls(**json.loads(text))
        except (ValueError, TypeError):
            # Created but not yet written (a local create is not atomic with its content), or
            # foreign: held, by someone unknown; never broken automatically.
            return UNKNOWN

    def token(self) -> str:
        return hashlib.sha256(self.to_text().encode()).hexdigest()[:16]


UNKNOWN = Holder("?", "?", "?")


def lock_names(datasets: Iterable[str], days: Iterable[str]) -> list[str]:
    """The lock objects for ``datasets`` x ``days``, in the one order every claimer takes them."""
    return sorted(f"{dataset}/ds={day}.lock" for dataset in set(datasets) for day in set(days))


def _create(path: Any, holder: Holder) -> bool:
    """Exclusive create: True when this call made the object, False when it existed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with path.open("xb") as out:
            out.write(holder.to_text().encode())
    except FileExistsError:
        return False
    return True


def _read(path: Any) -> Holder | None:
    """The holder named in ``path``; None when there is no lock."""
    try:
        return Holder.from_text(path.read_text())
    except FileNotFoundError:
        return None


def _delete(path: Any) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def _break(path: Any, stale: Holder) -> None:
    """Delete ``path`` if it still names ``stale``; only the creator of the break token may."""
    token = path.parent / f"{path.name}.break-{stale.token()}"
    if not _create(token, Holder("", "", "break")):
        return  # another claimer is breaking it
    try:
        if _read(path) == stale:
            log.warning("breaking stale partition lock %s held by %s", path, stale)
            _delete(path)
    finally:
        _delete(token)


def _take(path: Any, holder: Holder, is_live: Callable[[Holder], bool]) -> Holder | None:
    """Take one lock; None when ``holder`` now holds it, else the holder that keeps it."""
    for _ in range(3):
        if _create(path, holder):
            return None
        current = _read(path)
        if current is None:
            continue  # released in between: try again
        if current == holder:
            return None  # a retried claim of the same run
        if current == UNKNOWN or is_live(current):
            return current
        _break(path, current)
    return _read(path) or UNKNOWN


def try_claim(
    lock_dir: Any, names: list[str], holder: Holder, is_live: Callable[[Holder], bool]
) -> list[tuple[str, Holder]]:
    """Take every lock in ``names`` or none (all-or-nothing, in order: no deadlock, nothing
    held while waiting). Returns ``[(name, other holder)]`` when busy, ``[]`` when taken."""
    taken: list[str] = []
    for name in names:
        other = _take(lock_dir / name, holder, is_live)
        if other is not None:
            release(lock_dir, taken, holder)
            return [(name, other)]
        taken.append(name)
    return []


def release(lock_dir: Any, names: list[str], holder: Holder) -> int:
    """Delete the locks in ``names`` that ``holder`` holds; returns how many.

    A lock held by someone else is left alone: while this holder's run is running (it
    is, during its teardown), nobody breaks its locks, so such a lock was never its own.
    """
    released = 0
    for name in names:
        path = lock_dir / name
        if _read(path) == holder:
            _delete(path)
            released += 1
    return released
