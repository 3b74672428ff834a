"""A fresh PostgreSQL schema for one round of a benchmark, dropped after it
(jobq's tables in it, created before the clock starts). Imported only where
PostgreSQL is measured: it needs psycopg."""

from __future__ import annotations

import secrets

import psycopg
from psycopg import sql

from jobq.stores import PostgresStore


class Schema:
    """``with Schema(url) as schema``: ``schema.name`` exists, with jobq's
    tables, until the block ends."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = f"jobq_bench_{secrets.token_hex(4)}"

    def __enter__(self) -> Schema:
        PostgresStore(self.url, schema=self.name).migrate()
        return self

    def __exit__(self, *exc: object) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(self.name))
            )
