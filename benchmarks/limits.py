"""What limits cost the jobs under none: no-op jobs drained by 4 workers,
alone and with 1,000 jobs held back by a full limit (one job holds its only
slot until the drain ends), on the memory and SQLite stores.

With no head-of-line blocking the two rates match: a held job is looked at
once, when it is held, never again by the claims that pass it (the clock
starts once all of them are held: holding them is a one-time cost). The
three-process figures (concurrency and rate across processes on SQLite and
PostgreSQL) are printed by ``tests/test_key_limits_processes.py`` (``-s``).

Run: ``python -m benchmarks.limits [JOBS]``.
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
    """Jobs per second 4 workers drain ``jobs`` no-op jobs at, with ``held``
    jobs waiting on a limit whose one slot is taken meanwhile."""
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
        if held:
            queue.enqueue("slot", limits=["full"], priority=9)
            queue.enqueue_many(["held"] * held, limits=["full"], priority=9)
            blocking.wait()
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


def main(jobs: int = 20_000) -> None:
    for name, sizes in (("memory", jobs), ("SQLite", jobs // 10)):
        for held in (0, HELD):
            rates = []
            for _ in range(3):
                with tempfile.TemporaryDirectory() as directory:
                    store = (
                        None
                        if name == "memory"
                        else SqliteStore(Path(directory) / "jobs.db")
                    )
                    rates.append(drain_rate(store, sizes, held))
            print(
                f"{name}: {sizes} unlimited no-op jobs, {held} held jobs waiting: "
                f"{statistics.median(rates):,.0f} jobs/s (median of 3)",
                flush=True,
            )


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:2]))
