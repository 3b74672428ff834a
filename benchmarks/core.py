"""Core figures: no-op throughput against a bare ThreadPoolExecutor in the same run,
memory per pending job, and JSON snapshot time.

Run: ``python -m benchmarks.core [N]``. Prints medians and min-max of 5 rounds
(the throughput contenders are those of ``benchmarks.throughput``).
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import jobq
from benchmarks import throughput
from benchmarks.harness import (
    IN_MEMORY,
    PAYLOAD,
    REFERENCE,
    STDLIB,
    Contender,
    Table,
    measure,
    noop,
)
from jobq.stores import JsonFileStore

ROUNDS = 5


def memory_per_job(n: int) -> tuple[float, float]:
    """Bytes per pending job in jobq's memory store and in a plain queue.Queue."""
    import queue as stdlib_queue

    def traced(fill: Callable[[], object]) -> float:
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        keep = fill()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        del keep
        return (after - before) / n

    def fill_jobq() -> object:
        queue: jobq.JobQueue[Any] = jobq.JobQueue(noop)
        for i in range(n):
            queue.enqueue(
                {"to": "ann@example.com", "template": "welcome", "user_id": i}
            )
        return queue

    def fill_plain() -> object:
        queue: stdlib_queue.Queue[Any] = stdlib_queue.Queue()
        for i in range(n):
            queue.put({"to": "ann@example.com", "template": "welcome", "user_id": i})
        return queue

    return traced(fill_jobq), traced(fill_plain)


def snapshot_seconds(n: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        store = JsonFileStore(os.path.join(directory, "jobs.json"), save_interval=3600)
        queue: jobq.JobQueue[Any] = jobq.JobQueue(noop, store=store)
        queue.enqueue_many([PAYLOAD] * n)
        start = time.perf_counter()
        queue.save()
        elapsed = time.perf_counter() - start
        queue.close()
        return elapsed


def load_seconds(n: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "jobs.json")
        with jobq.JobQueue(noop, store=path) as queue:
            queue.enqueue_many([PAYLOAD] * n)
        start = time.perf_counter()
        with jobq.JobQueue(noop, store=path) as queue:
            queue.stats()
            return time.perf_counter() - start


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpus,"
        f" N={n}, {ROUNDS} rounds"
    )
    contenders = [
        Contender(throughput.REFERENCE_NAME, REFERENCE, throughput.thread_pool, STDLIB),
        Contender("jobq memory, end-to-end", IN_MEMORY, throughput.end_to_end),
        Contender("jobq memory, drain", IN_MEMORY, throughput.drain),
    ]
    results = measure(contenders, n, ROUNDS, progress=False)
    print()
    print(
        Table(
            "no-op jobs/s, 4 workers",
            "",
            "jobs/s",
            n,
            ROUNDS,
            results,
            throughput.REFERENCE_NAME,
        ).console()
    )
    per_job, plain = memory_per_job(100_000)
    print(
        f"\nmemory per pending job: jobq {per_job:.0f} B, queue.Queue {plain:.0f} B "
        f"({per_job / plain:.2f}x)"
    )
    for size in (10_000, 100_000):
        times = [snapshot_seconds(size) for _ in range(3)]
        print(
            f"JSON snapshot of {size:,} jobs: {statistics.median(times) * 1000:.0f} ms "
            f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f})"
        )
    times = [load_seconds(100_000) for _ in range(3)]
    print(f"JSON store load of 100,000 jobs: {statistics.median(times) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
