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

The scheduler cannot import ``spark_jobs`` (only ``dags/`` and ``plugins/`` are on its
path), so this reader follows the format documented in ``docs/registry_gate.md``; a round-trip
test writes with the job's module and reads with this one. Standard library only.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Promotion:
    """A move of the alias: ``version`` answers ``as_of`` from ``effective`` on."""

    version: str
    effective: dt.datetime
    pending: bool = False


def history_tag(alias: str) -> str:
    """Prefix of ``alias``'s history tags (and the name of the legacy single-tag history)."""
    return f"{alias}_history"


def _utc(value: object, what: str) -> dt.datetime:
    # A naive timestamp would be read in whatever zone the reading machine is in.
    when = dt.datetime.fromisoformat(str(value))
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"{what} {value!r} has no UTC offset")
    return when.astimezone(dt.UTC)


def _legacy(value: str, tag: str) -> list[Promotion]:
    try:
        entries = json.loads(value)
    except json.JSONDecodeError as err:
        raise ValueError(f"tag {tag!r} is not JSON: {err}") from err
    if not isinstance(entries, list):
        raise ValueError(f"tag {tag!r} must be a JSON list, got {type(entries).__name__}")
    history = []
    for entry in entries:
        try:
            history.append(Promotion(str(entry["version"]), _utc(entry["since"], f"'since' of {entry!r}")))
        except (TypeError, KeyError, ValueError) as err:
            raise ValueError(f"malformed entry {entry!r} in tag {tag!r}: {err}") from err
    # Stable sort: a hand-edited list with entries out of order still reads right.
    return sorted(history, key=lambda promotion: promotion.effective)


def read_history(tags: Mapping[str, str] | None, alias: str, alias_version: str | None) -> list[Promotion]:
    """``alias``'s moves, oldest first, from a registered model's tags and current alias target.

    Malformed entries raise ``ValueError`` naming the tag: a guess would pin the wrong model.
    """
    tags = tags or {}
    prefix = history_tag(alias)
    history = _legacy(tags[prefix], prefix) if (tags.get(prefix) or "").strip() else []
    keys = sorted(key for key in tags if key.startswith(f"{prefix}.") and key[len(prefix) + 1 :].isdigit())
    for key in keys:
        try:
            entry = json.loads(tags[key])
            history.append(
                Promotion(str(entry["version"]), _utc(entry["effective"], "effective"), entry["state"] == "pending")
            )
        except (TypeError, KeyError, ValueError) as err:
            raise ValueError(f"tag {key!r} is not a promotion entry: {err}") from err
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
