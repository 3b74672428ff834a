"""Periodic jobs: what a schedule costs an idle queue, and exactly-once across
processes.

- ``idle``: CPU seconds per minute of an idle queue (4 workers, SQLite) with
  0 schedules and with 10 (hourly, so no slot falls due while measured: the
  cost of looking, not of running jobs), alternating rounds of ``SPELL``
  seconds, scaled to a minute (median round of each).
- ``exactly-once``: three processes on one SQLite file, and three on one
  PostgreSQL queue, run the same 1-second schedule for 20 s (the test's
  code, ``tests/support/periodic_processes.py``): slots expected (every
  second from the first enqueued to the last), jobs enqueued, duplicates.

Run: ``python -m benchmarks.periodic [SPELL_SECONDS] [ROUNDS]`` (PostgreSQL
from ``$JOBQ_TEST_POSTGRES``, default ``postgresql://postgres@127.0.0.1/test``).
"""

from __future__ import annotations

import os
import secrets
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import jobq
from jobq.stores import SqliteStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from periodic_processes import run_processes

POSTGRES = os.environ.get(
    "JOBQ_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
)
SECONDS = 20.0


def idle_cpu_per_minute(schedules: int, spell: float) -> float:
    """CPU seconds a minute of an idle queue with ``schedules`` hourly schedules."""
    with tempfile.TemporaryDirectory() as directory:
        queue: jobq.JobQueue[None] = jobq.JobQueue(
            store=SqliteStore(Path(directory) / "jobs.db")
        )
        queue.task(name="noop")(lambda: None)
        for n in range(schedules):
            queue.periodic(every=3600, name=f"hourly-{n}")(lambda: None)
        queue.start(workers=4)
        try:
            threading.Event().wait(1.0)  # settle: the first look is done
            cpu = time.process_time()
            threading.Event().wait(spell)
            used = time.process_time() - cpu
        finally:
            queue.close(timeout=5)
    return used * 60 / spell


def main(spell: float = 15.0, rounds: int = 3) -> None:
    none: list[float] = []
    ten: list[float] = []
    for _ in range(rounds):
        none.append(idle_cpu_per_minute(0, spell))
        ten.append(idle_cpu_per_minute(10, spell))
    print(f"idle queue, 4 workers, SQLite, {rounds} rounds of {spell:g} s:")
    print(f"  0 schedules:  {statistics.median(none) * 1000:7.1f} ms CPU per minute")
    print(f"  10 schedules: {statistics.median(ten) * 1000:7.1f} ms CPU per minute")
    print("3 processes, one 1-second schedule, 20 s:")
    print(f"  {'store':<11} {'expected':>8} {'enqueued':>8} {'duplicates':>10}")
    with tempfile.TemporaryDirectory() as directory:
        sqlite = run_processes(
            str(Path(directory) / "jobs.db"), processes=3, seconds=SECONDS
        )
    schema = f"jobq_bench_{secrets.token_hex(4)}"
    try:
        postgres = run_processes(
            POSTGRES, schema=schema, queue="periodic", processes=3, seconds=SECONDS
        )
    finally:
        drop_schema(schema)
    for name, count in (("SQLite", sqlite), ("PostgreSQL", postgres)):
        print(
            f"  {name:<11} {count.expected:>8} {count.enqueued:>8} "
            f"{count.duplicates:>10}"
        )


def drop_schema(schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


if __name__ == "__main__":
    main(*(float(arg) for arg in sys.argv[1:2]), *(int(a) for a in sys.argv[2:3]))
