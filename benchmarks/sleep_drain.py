"""Jobs queued first, then drained by N workers with a 5 ms handler: what the
dispatcher gives a store when no producer bounds it (the suite's ``sleep4``
and ``sleep32`` tables enqueue while the workers run).

``python -m benchmarks.sleep_drain [WORKERS [JOBS]]`` prints jobs/s per store.
"""

from __future__ import annotations

import secrets
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import jobq
from benchmarks.common import POSTGRES_URL, SLEEP, postgres_unavailable
from jobq.stores import PostgresStore, SqliteStore, Store


def drain_rate(store: Store | str | None, workers: int, jobs: int) -> float:
    """Jobs/s from starting ``workers`` until ``jobs`` queued jobs have run."""
    lock = threading.Lock()
    ran = 0
    done = threading.Event()

    def handler(job: jobq.Job[Any]) -> None:
        nonlocal ran
        time.sleep(SLEEP)
        with lock:
            ran += 1
            if ran == jobs:
                done.set()

    with jobq.JobQueue(handler, store=store) as queue:
        queue.enqueue_many(range(jobs))
        started = time.perf_counter()
        queue.start(workers=workers)
        if not done.wait(600):
            raise RuntimeError(f"only {ran} of {jobs} jobs ran in 600 s")
        return jobs / (time.perf_counter() - started)


def main(argv: list[str]) -> None:
    workers = int(argv[0]) if argv else 32
    jobs = int(argv[1]) if len(argv) > 1 else 3_000
    with tempfile.TemporaryDirectory() as tmp:
        stores: dict[str, Store | str | None] = {
            "memory": None,
            "JSON": str(Path(tmp) / "jobs.json"),
            "SQLite": SqliteStore(Path(tmp) / "jobs.db"),
        }
        if not postgres_unavailable():
            queue = f"drain-{secrets.token_hex(4)}"
            stores["PostgreSQL"] = PostgresStore(POSTGRES_URL, queue=queue)
        for name, store in stores.items():
            rate = drain_rate(store, workers, jobs)
            print(f"{name}: {rate:,.0f} jobs/s ({workers} workers, {jobs:,} jobs)")


if __name__ == "__main__":
    main(sys.argv[1:])
