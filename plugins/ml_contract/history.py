"""The alias history's format: written by the register job, read by the registry gate.

MLflow only knows where an alias points *now*. The register job (``spark_jobs.promotion``,
the only writer) records every move of ``champion`` in its own registered-model tag
``champion_history.<8-digit sequence number>`` (:func:`history_entry_tag`), a small JSON
value (:meth:`HistoryEntry.value`)::

    {"version": "7", "moved_at": "2026-11-29T02:05:13.402118+00:00",
     "logical_time": "2026-11-29T02:00:00+00:00", "effective": "2026-11-29T02:00:00+00:00",
     "state": "done", "run": "scheduled__2026-11-29T02:00:00+00:00"}

Older releases kept the whole history in one tag ``champion_history`` (a JSON list of
``{"version", "since"}``, :func:`legacy_history_tag`); it is still read, before the
per-promotion entries. What the fields mean, and how the entries are kept consistent with
the alias, is the writer's (``spark_jobs/promotion.py``); how ``as_of`` reads them, the
gate's (``plugins/ml_registry/alias_history.py``). Both parse with :func:`read_history`.
Standard library only.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass

CHAMPION = "champion"
PENDING, DONE = "pending", "done"
SEQ_DIGITS = 8


def legacy_history_tag(alias: str = CHAMPION) -> str:
    """The single registered-model tag older releases kept the whole history in (read only),
    and the prefix of the per-promotion tags."""
    return f"{alias}_history"


def history_entry_tag(seq: int, alias: str = CHAMPION) -> str:
    """The registered-model tag of promotion number ``seq`` of ``alias``."""
    return f"{legacy_history_tag(alias)}.{seq:0{SEQ_DIGITS}d}"


@dataclass(frozen=True)
class HistoryEntry:
    """One move of the alias. Legacy entries have no ``tag``, ``moved_at`` or ``logical_time``."""

    version: str
    effective: dt.datetime
    moved_at: dt.datetime | None = None
    logical_time: dt.datetime | None = None
    state: str = DONE
    run: str | None = None
    tag: str | None = None
    seq: int = 0

    def value(self) -> str:
        """The tag value (small: a few hundred characters at most)."""
        return json.dumps(
            {
                "version": self.version,
                "moved_at": iso(self.moved_at),
                "logical_time": iso(self.logical_time),
                "effective": iso(self.effective),
                "state": self.state,
                "run": self.run,
            }
        )


def iso(when: dt.datetime | None) -> str | None:
    return None if when is None else when.astimezone(dt.UTC).isoformat()


def utc(value: object, what: str) -> dt.datetime:
    """An ISO time with its offset, in UTC; a naive one is refused (it would be read in
    whatever zone the reading machine is in)."""
    parsed = dt.datetime.fromisoformat(str(value))
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise ValueError(f"{what} {value!r} has no UTC offset")
    return parsed.astimezone(dt.UTC)


def _legacy(value: str, tag: str) -> list[HistoryEntry]:
    try:
        items = json.loads(value)
    except json.JSONDecodeError as err:
        raise ValueError(f"tag {tag!r} is not JSON: {err}") from err
    if not isinstance(items, list):
        raise ValueError(f"tag {tag!r} must be a JSON list, got {type(items).__name__}")
    history = []
    for item in items:
        try:
            history.append(HistoryEntry(version=str(item["version"]), effective=utc(item["since"], "'since'")))
        except (TypeError, KeyError, ValueError) as err:
            raise ValueError(f"malformed entry {item!r} in tag {tag!r}: {err}") from err
    # Stable sort: a hand-edited list with entries out of order still reads right.
    return sorted(history, key=lambda entry: entry.effective)


def read_history(tags: Mapping[str, str] | None, alias: str = CHAMPION) -> list[HistoryEntry]:
    """Every recorded move of ``alias``, oldest first: the legacy list, then one tag each.

    Malformed entries raise ``ValueError`` naming the tag: a guess would pin the wrong model.
    """
    tags = tags or {}
    prefix = legacy_history_tag(alias)
    history = _legacy(tags[prefix], prefix) if (tags.get(prefix) or "").strip() else []
    for key in sorted(k for k in tags if k.startswith(f"{prefix}.") and k[len(prefix) + 1 :].isdigit()):
        try:
            item = json.loads(tags[key])
            history.append(
                HistoryEntry(
                    version=str(item["version"]),
                    effective=utc(item["effective"], "effective"),
                    moved_at=utc(item["moved_at"], "moved_at"),
                    logical_time=utc(item["logical_time"], "logical_time") if item.get("logical_time") else None,
                    state=item["state"],
                    run=item.get("run"),
                    tag=key,
                    seq=int(key[len(prefix) + 1 :]),
                )
            )
        except (TypeError, KeyError, ValueError) as err:
            raise ValueError(f"registered-model tag {key!r} is not a promotion entry: {err}") from err
    return history
