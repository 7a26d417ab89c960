"""Reading an alias's promotion history, for the gate's ``as_of`` policy.

MLflow only knows where an alias points *now*. The register job (``spark_jobs/
promotion.py``, the only writer) records every move of ``champion`` in its own
registered-model tag ``champion_history.<8-digit sequence number>``, a small JSON value::

    {"version": "7", "moved_at": "...", "logical_time": "...", "effective": "...",
     "state": "done", "run": "..."}

Older releases kept the whole history in one tag ``champion_history`` (a JSON list of
``{"version", "since"}``); it is still read, before the per-promotion entries, so ``as_of``
stays exact for what was recorded then.

``as_of(T)`` is the version of the last entry whose ``effective`` time is at or before ``T``.
An entry still ``pending`` (the writer died between recording a move and making it) counts
only when the alias does point to its version; the next promotion repairs it either way.

The tags' names and values are the contract's (:mod:`ml_contract.history`), parsed here by
its reader, the writer's own; a round-trip test writes with the job's module and reads with
this one. Standard library only.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from ml_contract.history import PENDING, legacy_history_tag
from ml_contract.history import read_history as read_entries


@dataclass(frozen=True)
class Promotion:
    """A move of the alias: ``version`` answers ``as_of`` from ``effective`` on."""

    version: str
    effective: dt.datetime
    pending: bool = False


def history_tag(alias: str) -> str:
    """Prefix of ``alias``'s history tags (and the name of the legacy single-tag history)."""
    return legacy_history_tag(alias)


def read_history(tags: Mapping[str, str] | None, alias: str, alias_version: str | None) -> list[Promotion]:
    """``alias``'s moves, oldest first, from a registered model's tags and current alias target.

    Malformed entries raise ``ValueError`` naming the tag: a guess would pin the wrong model.
    """
    history = [Promotion(e.version, e.effective, e.state == PENDING) for e in read_entries(tags, alias)]
    if (
        history
        and history[-1].pending
        and history[-1].version != (None if alias_version is None else str(alias_version))
    ):
        history.pop()  # recorded, but the alias never moved
    return history


def version_as_of(history: list[Promotion], when: dt.datetime) -> str | None:
    """The version that answers for ``when``; None when ``when`` precedes every promotion."""
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"when must be timezone-aware, got naive {when.isoformat()}")
    held = None
    for promotion in history:
        if promotion.effective <= when:
            held = promotion.version
    return held
