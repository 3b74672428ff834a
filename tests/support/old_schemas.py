"""Database stores as a jobq with schema version 1 left them, for the
migration tests: that version's DDL (``MIGRATIONS[1]`` of each store's
schema module, which new schemas still start from) and jobs written with its
columns only."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

from jobq.stores.postgres.schema import MIGRATIONS as POSTGRES_MIGRATIONS
from jobq.stores.postgres.statements import Statements
from jobq.stores.sqlite.schema import MIGRATIONS as SQLITE_MIGRATIONS

T0 = 1_800_000_000.0

COLUMNS = (
    "state, payload, key, priority, run_at, created_at, max_attempts, task, "
    "attempts, last_error, errors, buried"
)

#: One job per row, in ``COLUMNS`` order: ids 1, 2 and 3.
JOBS: list[tuple[Any, ...]] = [
    ("ready", '"due"', "k", 3, T0, T0, 5, None, 0, None, "[]", None),
    ("scheduled", '{"n":1}', None, 0, T0 + 60, T0, 5, "mail.send", 1,
     "ValueError: x", f'[["ValueError","x","tb",{T0 + 1}]]', None),
    ("dead", '"dead"', None, 0, T0, T0, 1, None, 1,
     "Fatal: no", f'[["Fatal","no","",{T0 + 2}]]', 1),
]  # fmt: skip


def sqlite_v1(path: Path) -> None:
    """A SQLite file at schema version 1 holding ``JOBS``."""
    sqlite_at(path, 1)


def sqlite_at(path: Path, version: int) -> None:
    """A SQLite file at schema ``version`` holding ``JOBS`` (written with the
    columns of version 1 only)."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN")
        for step in range(1, version + 1):
            for statement in SQLITE_MIGRATIONS[step]:
                conn.execute(statement)
        conn.execute("INSERT INTO jobq_meta VALUES ('schema_version', ?)", (version,))
        conn.executemany(
            f"INSERT INTO jobq_jobs ({COLUMNS}) VALUES ({', '.join('?' * 12)})",  # noqa: S608
            JOBS,
        )
        conn.execute("COMMIT")


def postgres_v1(url: str, schema: str, queue: str) -> None:
    """A PostgreSQL schema at version 1 holding ``JOBS`` in ``queue``."""
    postgres_at(url, schema, queue, 1)


def postgres_at(url: str, schema: str, queue: str, version: int) -> None:
    """A PostgreSQL schema at ``version`` holding ``JOBS`` in ``queue``
    (written with the columns of version 1 only)."""
    import psycopg

    sql = Statements(schema)
    insert = sql.render(
        f"INSERT INTO {{jobs}} (queue, {COLUMNS}) VALUES (%s, %s, %s::json, %s, %s, "  # noqa: S608
        "%s, %s, %s, %s, %s, %s, %s::jsonb, %s)"
    )
    with psycopg.connect(url) as conn:
        conn.execute(sql.render("CREATE SCHEMA {schema}"))
        for step in range(1, version + 1):
            for statement in POSTGRES_MIGRATIONS[step]:
                conn.execute(sql.render(statement))
        conn.execute(
            sql.render("INSERT INTO {meta} VALUES ('schema_version', %s)"), (version,)
        )
        conn.cursor().executemany(insert, [(queue, *job) for job in JOBS])
