"""Promotion history of a registry alias, kept as JSON in a registered-model tag.

MLflow only knows where an alias points *now*. Re-scoring history with the model that was
champion *back then* needs the moves, so the register job appends one entry per move to the
tag ``<alias>_history`` (``champion_history``) and the gate's ``as_of`` policy reads it back.

The value is a JSON list, oldest first::

    [{"version": "3", "since": "2026-11-20T02:14:05.123456+00:00"}, ...]

Pure functions and the standard library only: the Spark job copies ``append_promotion``
(``spark_jobs/`` never imports ``plugins/``) and the scheduler may import this module.
"""

from __future__ import annotations

import datetime as dt
import json

# MLflow refuses registered-model tag values longer than this (MAX_MODEL_REGISTRY_TAG_VALUE_LENGTH).
MAX_HISTORY_CHARS = 100_000


def history_tag(alias: str) -> str:
    """The registered-model tag holding ``alias``'s promotion history."""
    return f"{alias}_history"


def _utc(when: dt.datetime, what: str) -> dt.datetime:
    # A naive timestamp would be read in whatever zone the reading machine is in.
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware, got naive {when.isoformat()}")
    return when.astimezone(dt.timezone.utc)


def parse_history(history_json: str | None) -> list[tuple[dt.datetime, str]]:
    """``(since, version)`` pairs sorted by time; an absent or empty tag is an empty history."""
    if history_json is None or not history_json.strip():
        return []
    try:
        entries = json.loads(history_json)
    except json.JSONDecodeError as err:
        raise ValueError(f"promotion history is not JSON: {err}") from err
    if not isinstance(entries, list):
        raise ValueError(f"promotion history must be a JSON list, got {type(entries).__name__}")
    history = []
    for entry in entries:
        try:
            version, since = str(entry["version"]), dt.datetime.fromisoformat(entry["since"])
        except (TypeError, KeyError, ValueError) as err:
            raise ValueError(f"malformed promotion history entry {entry!r}: {err}") from err
        history.append((_utc(since, f"'since' of entry {entry!r}"), version))
    # Stable sort: a hand-edited tag with entries out of order still reads right.
    return sorted(history, key=lambda item: item[0])


def append_promotion(history_json: str | None, version: str | int, since: dt.datetime) -> str:
    """The history with ``version`` holding the alias from ``since`` on, as the new tag value.

    Idempotent for retries: when the latest entry already names ``version`` the history is
    returned unchanged, so re-running a register step does not move the promotion time.
    """
    history = parse_history(history_json)
    version = str(version)
    if history and history[-1][1] == version:
        return _dump(history)
    since = _utc(since, "since")
    if history and since < history[-1][0]:
        # A history that goes back in time would make as_of pick the wrong version.
        raise ValueError(
            f"promotion of version {version} at {since.isoformat()} precedes the latest recorded "
            f"promotion (version {history[-1][1]} at {history[-1][0].isoformat()})"
        )
    history.append((since, version))
    value = _dump(history)
    if len(value) > MAX_HISTORY_CHARS:
        raise ValueError(
            f"promotion history would be {len(value)} characters, over MLflow's tag limit of "
            f"{MAX_HISTORY_CHARS}; archive the oldest entries before promoting version {version}"
        )
    return value


def version_as_of(history_json: str | None, when: dt.datetime) -> str | None:
    """The version that held the alias at ``when``; None when ``when`` precedes every promotion."""
    when = _utc(when, "when")
    held = None
    for since, version in parse_history(history_json):
        if since > when:
            break
        held = version
    return held


def _dump(history: list[tuple[dt.datetime, str]]) -> str:
    return json.dumps([{"version": version, "since": since.isoformat()} for since, version in history])
