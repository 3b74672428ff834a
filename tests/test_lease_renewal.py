"""Lease renewal in one statement: the watchdog renews every running job of
its process with one ``renew`` call, which each database store runs as one
statement (SQLite: a join on a VALUES list, one per 499 claims; PostgreSQL:
a join on ``unnest`` of two arrays), extending current claims only.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from postgres_url import POSTGRES_URL

from jobq.stores import PostgresStore, SqliteStore
from jobq.stores.base import Claim, NewJob, Signal
from jobq.stores.sqlite.statements import RENEW_CHUNK

T0 = 1_800_000_000.0
LEASE = 30.0
URL = POSTGRES_URL


def jobs(n: int) -> list[NewJob]:
    return [NewJob(json.dumps(i), T0, None, 0, 5) for i in range(n)]


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqliteStore]:
    store = SqliteStore(tmp_path / "jobs.db", lease_seconds=LEASE)
    store.open(Signal(), dead_letter_limit=10)
    yield store
    store.close()


def leases(path: str, ids: list[int]) -> list[float]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        rows = dict(conn.execute("SELECT id, lease_until FROM jobq_jobs").fetchall())
    return [rows[i] for i in ids]


def test_sqlite_renews_all_claims_with_one_statement_per_chunk(
    sqlite_store: SqliteStore, host_time: Callable[[float], float]
) -> None:
    n = 2 * RENEW_CHUNK + 5  # three statements
    sqlite_store.add(jobs(n + 1), T0)
    claims = sqlite_store.claim_many(T0, n + 1)
    kept, left = claims[:n], claims[n]
    stale = left._replace(token=left.token - 1)
    statements: list[str] = []
    with sqlite_store._connection() as conn:  # this thread's: renew runs on it
        pass
    conn.set_trace_callback(statements.append)
    try:
        sqlite_store.renew([*kept, stale], host_time(T0 + 10))
    finally:
        conn.set_trace_callback(None)

    updates = [s for s in statements if s.lstrip().startswith("UPDATE")]
    assert len(updates) == 3
    assert [s.strip() for s in statements if not s.lstrip().startswith("UPDATE")] == [
        "BEGIN IMMEDIATE",
        "COMMIT",
    ]
    ids = [c.id for c in kept]
    assert leases(sqlite_store.path, ids) == [T0 + 10 + LEASE] * n
    assert leases(sqlite_store.path, [left.id]) == [T0 + LEASE]  # stale token
    assert sqlite_store.recover(host_time(T0 + LEASE)) == 1  # only ``left`` expired


def test_sqlite_renewing_nothing_and_one_claim(
    sqlite_store: SqliteStore, host_time: Callable[[float], float]
) -> None:
    sqlite_store.renew([], T0)
    sqlite_store.add(jobs(1), T0)
    [claim] = sqlite_store.claim_many(T0, 1)

    sqlite_store.renew([claim, claim], host_time(T0 + 5))  # the same claim twice

    assert leases(sqlite_store.path, [claim.id]) == [T0 + 5 + LEASE]


@pytest.fixture
def postgres_store(postgres_schema: str) -> Iterator[PostgresStore]:
    store = PostgresStore(
        URL,
        schema=postgres_schema,
        queue=f"renew-{secrets.token_hex(4)}",
        lease_seconds=LEASE,
        listen=False,
    )
    store.open(Signal(), dead_letter_limit=10)
    yield store
    store.close()


def test_postgres_renews_all_claims_with_one_statement(
    postgres_store: PostgresStore,
) -> None:
    import psycopg

    n = 1_000
    postgres_store.add(jobs(n + 1), T0)
    claims = postgres_store.claim_many(T0, n + 1)
    kept, left = claims[:n], claims[n]
    stale = left._replace(token=left.token - 1)
    before = lease_ends(postgres_store, claims)
    executed: list[Any] = []
    original = psycopg.Connection.execute

    def counting(
        self: psycopg.Connection[Any], query: Any, *args: Any, **kw: Any
    ) -> Any:
        executed.append(query)
        return original(self, query, *args, **kw)

    psycopg.Connection.execute = counting  # type: ignore[method-assign]
    try:
        postgres_store.renew([*kept, stale], T0)
    finally:
        psycopg.Connection.execute = original  # type: ignore[method-assign]

    assert len(executed) == 1
    after = lease_ends(postgres_store, claims)
    assert all(after[c.id] > before[c.id] for c in kept)
    assert after[left.id] == before[left.id]


def lease_ends(store: PostgresStore, claims: list[Claim]) -> dict[int, float]:
    import psycopg
    from psycopg import sql

    query = sql.SQL("SELECT id, lease_until FROM {} WHERE id = ANY(%s)").format(
        sql.Identifier(store.schema, "jobs")
    )
    with psycopg.connect(URL) as conn:
        rows = conn.execute(query, ([c.id for c in claims],)).fetchall()
    return dict(rows)
