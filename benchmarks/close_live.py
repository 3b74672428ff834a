"""Closing a queue under a handler that still uses its store, many times
per store: how many runs crashed the process.

Each run is a child process (``tests/support/close_live.py``, the test's
own child): a task enqueues children in a loop while two workers run them,
the queue is closed with ``close(timeout=0.2)`` while that handler still
runs, and the handler must then get ``QueueClosed`` or ``StoreError``.
Before issue 30 the SQLite store closed a connection under a thread still
inside it, and the child segfaulted (rc -11) in about one run of three.

Run: ``python -m benchmarks.close_live [RUNS] [ROUNDS] [STORE...]`` (200
runs of 1 round on every store by default; PostgreSQL from
``$JOBQ_BENCH_POSTGRES``, skipped when no server answers). A run that
failed otherwise than by a crash (its return code positive) is shown with
the last line it wrote to stderr.
"""

from __future__ import annotations

import secrets
import sys
import tempfile
from collections import Counter
from pathlib import Path

from benchmarks.common import POSTGRES_URL, postgres_unavailable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from close_live import run_child

STORES = ("memory", "json", "sqlite", "postgres")


def runs_of(kind: str, where: str, runs: int, rounds: int) -> Counter[str]:
    """What each of ``runs`` children ended with: ``ok``, or its return
    code (and, for a failure that is no crash, why)."""
    ends: Counter[str] = Counter()
    for _ in range(runs):
        done = run_child(kind, where, rounds)
        end = "ok" if done.returncode == 0 else f"rc {done.returncode}"
        if done.returncode > 0:
            lines = done.stderr.strip().splitlines() or [""]
            end += f": {lines[-1][:160]}"
        ends[end] += 1
    return ends


def main(runs: int = 200, rounds: int = 1, *stores: str) -> None:
    for kind in stores or STORES:
        if kind == "postgres":
            why = postgres_unavailable()
            if why is not None:
                print(f"postgres: skipped ({why})")
                continue
            schema = f"jobq_bench_{secrets.token_hex(4)}"
            ends = runs_of(kind, f"{POSTGRES_URL} {schema}", runs, rounds)
            drop_schema(schema)
        else:
            with tempfile.TemporaryDirectory() as directory:
                ends = runs_of(kind, directory, runs, rounds)
        crashed = sum(n for end, n in ends.items() if end.startswith("rc -"))
        print(
            f"{kind}: {runs} runs of {rounds} round(s), {crashed} crashed "
            f"({dict(ends)})",
            flush=True,
        )


def drop_schema(schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:3]), *sys.argv[3:])
