"""SQLite claims made to run out on purpose: their leases follow the host's
clock, not the queue's ``clock=`` a test moves, so a test that leaves a claim
behind (a process killed, paused or starved past its lease) expires it in the
file, as the PostgreSQL tests set ``lease_until`` on the server. (A test that
times leases to the second sets the host's clock: conftest's ``host_time``.)"""

from __future__ import annotations

import contextlib
import os
import sqlite3

EXPIRE = "UPDATE jobq_jobs SET lease_until = 0 WHERE state = 'running'"


def expire_sqlite_claims(path: str | os.PathLike[str]) -> None:
    """Every running claim in the SQLite file at ``path``: its lease ran out."""
    conn = sqlite3.connect(path)
    with contextlib.closing(conn), conn:
        conn.execute(EXPIRE)
