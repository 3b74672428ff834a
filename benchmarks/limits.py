"""What limits cost the jobs under none: no-op jobs drained by 4 workers,
one of which runs a job that holds a limit's only slot until the drain ends,
with no job and with 1,000 jobs held back by that limit, on the memory and
SQLite stores (and PostgreSQL, given a DSN).

With no head-of-line blocking the two rates match: a held job is looked at
once, when it is held, never again by the claims that pass it (the clock
starts once all of them are held: holding them is a one-time cost). The
three-process figures (concurrency and rate across processes on SQLite and
PostgreSQL) are printed by ``tests/test_key_limits_processes.py`` (``-s``).

Run: ``python -m benchmarks.limits [JOBS] [POSTGRES_DSN]`` (with a DSN, also
on PostgreSQL, in a schema of its own dropped at the end).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import jobq
from jobq.stores import SqliteStore

HELD = 1_000


def drain_rate(store: Any, jobs: int, held: int) -> float:
    """Jobs per second 3 workers drain ``jobs`` no-op jobs at (a fourth runs
    the job that takes a limit's one slot meanwhile), with ``held`` jobs
    waiting on that limit."""
    release, blocking = threading.Event(), threading.Event()
    done = threading.Semaphore(0)

    def handler(job: jobq.Job[Any]) -> None:
        if job.payload == "slot":
            blocking.set()
            release.wait()
        elif job.payload is None:
            done.release()

    with jobq.JobQueue(handler, store=store) as queue:
        queue.limit("full", concurrency=1)
        queue.start(workers=4)
        # The slot's job takes one worker in both runs, so that the drains
        # compare like with like: 3 workers free, with or without held jobs.
        queue.enqueue("slot", limits=["full"], priority=9)
        blocking.wait()
        if held:
            queue.enqueue_many(["held"] * held, limits=["full"], priority=9)
            while queue.limits()[0].waiting < held:  # every one held once:
                time.sleep(0.01)  # then only the claims that pass them count
        started = time.perf_counter()
        queue.enqueue_many([None] * jobs)
        for _ in range(jobs):
            done.acquire()
        took = time.perf_counter() - started
        release.set()
        queue.join()
    return jobs / took


SCHEMA = "jobq_bench_limits"


def store_of(name: str, directory: str, dsn: str | None) -> Any:
    if name == "memory":
        return None
    if name == "SQLite":
        return SqliteStore(Path(directory) / "jobs.db")
    from jobq.stores import PostgresStore

    return PostgresStore(dsn or "", schema=SCHEMA)


def main(jobs: int = 20_000, dsn: str | None = None) -> None:
    kinds = [("memory", jobs), ("SQLite", jobs // 10)]
    if dsn:
        kinds.append(("PostgreSQL", jobs // 10))
    try:
        for name, sizes in kinds:
            for held in (0, HELD):
                rates = []
                for _ in range(3):
                    with tempfile.TemporaryDirectory() as directory:
                        store = store_of(name, directory, dsn)
                        rates.append(drain_rate(store, sizes, held))
                print(
                    f"{name}: {sizes} unlimited no-op jobs, {held} held jobs "
                    f"waiting: {statistics.median(rates):,.0f} jobs/s (median of 3)",
                    flush=True,
                )
    finally:
        if dsn:
            import psycopg

            with psycopg.connect(dsn, autocommit=True) as connection:
                connection.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:2]), *sys.argv[2:3])
