"""MLflow registry stores the registry tests run on: a SQLite file and a fresh PostgreSQL
database on 127.0.0.1:5432 (the documented production store).

SQLite does not enforce column lengths; PostgreSQL does (``registered_model_tags.value`` is
``VARCHAR(5000)``), so what a registry test proves holds on production only when it runs on
both. Imported by name (``tests/`` is on ``sys.path`` through its conftest).
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

POSTGRES_HOST, POSTGRES_PORT, POSTGRES_USER = "127.0.0.1", 5432, "postgres"
STORES = ("sqlite", "postgresql")


def postgres_listening() -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((POSTGRES_HOST, POSTGRES_PORT)) == 0


def _admin(statement: str) -> None:
    import psycopg2

    conn = psycopg2.connect(host=POSTGRES_HOST, port=POSTGRES_PORT, user=POSTGRES_USER, dbname="postgres")
    conn.autocommit = True  # CREATE/DROP DATABASE cannot run in a transaction
    try:
        with conn.cursor() as cursor:
            cursor.execute(statement)
    finally:
        conn.close()


@contextmanager
def postgres_database(prefix: str = "mlflow") -> Iterator[str]:
    """A fresh database (dropped afterwards); skips the test when PostgreSQL is not listening."""
    if not postgres_listening():
        pytest.skip(f"PostgreSQL is not listening on {POSTGRES_HOST}:{POSTGRES_PORT}")
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    _admin(f"CREATE DATABASE {name}")
    # A throw-away database: commits need not wait for the disk (several times faster here).
    _admin(f"ALTER DATABASE {name} SET synchronous_commit = off")
    try:
        yield f"postgresql+psycopg2://{POSTGRES_USER}@{POSTGRES_HOST}:{POSTGRES_PORT}/{name}"
    finally:
        _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def registry_store(kind: str, directory: Path) -> Iterator[str]:
    """The SQLAlchemy store URI of a fresh, empty MLflow store of ``kind`` (one of ``STORES``)."""
    if kind == "sqlite":
        yield f"sqlite:///{directory / 'mlflow.db'}"
    elif kind == "postgresql":
        with postgres_database() as uri:
            yield uri
    else:
        raise ValueError(f"unknown store {kind!r}; one of {STORES}")
