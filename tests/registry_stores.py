"""MLflow registry stores the registry tests run on: a SQLite file and a fresh database on
the session's embedded PostgreSQL (the documented production store; the ``postgres_server``
fixture of tests/conftest.py, which the tests start themselves).

SQLite does not enforce column lengths; PostgreSQL does (``registered_model_tags.value`` is
``VARCHAR(5000)``), so what a registry test proves holds on production only when it runs on
both. Imported by name (``tests/`` is on ``sys.path`` through its conftest).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from local_stack import fresh_database

STORES = ("sqlite", "postgresql")


@contextmanager
def registry_store(kind: str, directory: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """The SQLAlchemy store URI of a fresh, empty MLflow store of ``kind`` (one of ``STORES``);
    PostgreSQL is started for the session on first use (``request``'s ``postgres_server``)."""
    if kind == "sqlite":
        yield f"sqlite:///{directory / 'mlflow.db'}"
    elif kind == "postgresql":
        with fresh_database(request.getfixturevalue("postgres_server").uri, "mlflow") as uri:
            yield uri
    else:
        raise ValueError(f"unknown store {kind!r}; one of {STORES}")
