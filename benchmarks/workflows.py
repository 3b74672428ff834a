"""Workflows: what a step costs next to an independent job, and the cost of
wide fan-out and fan-in.

    python -m benchmarks.workflows [--postgres DSN] [--chains 200] [--wide 10000]

- chain: the time from enqueueing a 5-step chain (each step ``after=`` the
  one before) to its last step's end, against 5 independent jobs enqueued
  at once (4 workers), median of ``--chains`` rounds, memory and SQLite;
- fan-out: the time ``finish_many`` takes for a parent with ``--wide``
  waiting children (releasing them all), on each store;
- fan-in: adding a child after 1,000 parents, and the parents' finishes
  that release it (each counts the parent; the last releases it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import jobq
from jobq.stores import JsonFileStore, MemoryStore, SqliteStore, Store
from jobq.stores.base import Done, NewJob, Signal

PAYLOAD = "null"


def stores(directory: str, postgres: str | None) -> dict[str, Callable[[], Store]]:
    made: dict[str, Callable[[], Store]] = {
        "memory": MemoryStore,
        "json": lambda: JsonFileStore(os.path.join(directory, "jobs.json")),
        "sqlite": lambda: SqliteStore(os.path.join(directory, "jobs.db")),
    }
    if postgres:
        from jobq.stores import PostgresStore

        made["postgres"] = lambda: PostgresStore(
            postgres, schema="jobq_bench_workflows"
        )
    return made


def chain_against_independent(make: Callable[[], Store], rounds: int) -> str:
    """Median seconds from enqueue to the end of the last of 5 steps."""
    done = threading.Event()

    def handler(job: jobq.Job[Any]) -> None:
        if job.payload == "last":
            done.set()

    queue: jobq.JobQueue[Any] = jobq.JobQueue(handler, store=make())
    queue.start(workers=4)
    chained: list[float] = []
    independent: list[float] = []
    try:
        for _ in range(rounds):
            done.clear()
            began = time.perf_counter()
            step = queue.enqueue(0)
            for n in range(1, 4):
                step = queue.enqueue(n, after=[step])
            queue.enqueue("last", after=[step])
            _check(done.wait(30), "a chain's last step never ran")
            chained.append(time.perf_counter() - began)
            began = time.perf_counter()
            queue.enqueue_many([0, 1, 2, 3, 4])
            _check(queue.join(timeout=30), "independent jobs never ran")
            independent.append(time.perf_counter() - began)
    finally:
        queue.close()
    c, i = statistics.median(chained), statistics.median(independent)
    return f"chain of 5 {c * 1e3:7.2f} ms, 5 independent {i * 1e3:7.2f} ms"


def fan_out(make: Callable[[], Store], width: int) -> str:
    """Seconds ``finish_many`` takes for a parent with ``width`` children."""
    store = make()
    store.open(Signal(), dead_letter_limit=1000)
    try:
        now = time.time()
        parent = store.add([NewJob(PAYLOAD, now, None, 0, 3)], now)[0]
        for start in range(0, width, 1000):
            child = NewJob(PAYLOAD, now, None, 0, 3, after=(parent.id,))
            store.add([child] * min(1000, width - start), now)
        claim = store.claim_many(now, 1)[0]
        began = time.perf_counter()
        store.finish_many([Done(claim, '"result"')], None, now)
        took = time.perf_counter() - began
        _check(store.stats().waiting == 0, "children left waiting")
    finally:
        store.close()
    return f"finishing a parent of {width:,} children {took * 1e3:8.1f} ms"


def fan_in(make: Callable[[], Store], parents: int) -> str:
    """Seconds to add a child after ``parents`` jobs, and to finish them."""
    store = make()
    store.open(Signal(), dead_letter_limit=1000)
    try:
        now = time.time()
        added = store.add([NewJob(PAYLOAD, now, None, 0, 3)] * parents, now)
        began = time.perf_counter()
        child = NewJob(PAYLOAD, now, None, 0, 3, after=tuple(a.id for a in added))
        store.add([child], now)
        adding = time.perf_counter() - began
        began = time.perf_counter()
        for _ in range(parents):
            claim = store.claim_many(now, 1)[0]
            store.finish_many([Done(claim, "1")], None, now)
        finishing = time.perf_counter() - began
        claim = store.claim_many(now, 1)[0]
        _check(len(claim.parents) == parents, "the child lost parents")
    finally:
        store.close()
    return (
        f"adding a child of {parents:,} parents {adding * 1e3:6.1f} ms, "
        f"claiming and finishing the parents {finishing / parents * 1e6:6.0f} µs each"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", help="a DSN: measure PostgreSQL too")
    parser.add_argument("--chains", type=int, default=200)
    parser.add_argument("--wide", type=int, default=10_000)
    args = parser.parse_args()
    for name in ("memory", "json", "sqlite", "postgres"):
        if name == "postgres" and not args.postgres:
            continue
        print(f"{name}:")
        measures: list[Callable[[Callable[[], Store]], str]] = [
            lambda make: fan_out(make, args.wide),
            lambda make: fan_in(make, 1_000),
        ]
        if name in ("memory", "sqlite"):
            measures.insert(
                0, lambda make: chain_against_independent(make, args.chains)
            )
        for measure in measures:  # each on a store of its own
            with tempfile.TemporaryDirectory() as directory:
                print("  " + measure(stores(directory, args.postgres)[name]))
            if name == "postgres":
                _drop(args.postgres)


def _check(ok: bool, problem: str) -> None:
    """Stop the run if a measure went wrong: its figure would mean nothing."""
    if not ok:
        raise RuntimeError(problem)


def _drop(dsn: str | None) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("DROP SCHEMA IF EXISTS jobq_bench_workflows CASCADE")


if __name__ == "__main__":
    main()
