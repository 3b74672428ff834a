"""Core figures: no-op throughput against a bare ThreadPoolExecutor in the same run,
memory per pending job, and JSON snapshot time.

Run: ``python -m benchmarks.core [N]``. Prints medians and min-max of 5 rounds.
"""

from __future__ import annotations

import concurrent.futures
import gc
import os
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import jobq
from jobq.stores import JsonFileStore

ROUNDS = 5
PAYLOAD = {"to": "ann@example.com", "template": "welcome", "user_id": 42}


def noop(_: Any) -> None:
    return None


def bare_executor(n: int) -> float:
    """What a user writes by hand: submit every job to a 4-thread pool."""
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for _ in range(n):
            pool.submit(noop, PAYLOAD)
    return n / (time.perf_counter() - start)


def jobq_end_to_end(n: int, store: Any = None) -> float:
    """Producer and 4 workers together, until the queue is drained."""
    done = threading.Event()
    count = 0
    lock = threading.Lock()

    def handler(job: jobq.Job[Any]) -> None:
        nonlocal count
        with lock:
            count += 1
            if count == n:
                done.set()

    queue: jobq.JobQueue[Any] = jobq.JobQueue(handler, store=store)
    queue.start(workers=4)
    start = time.perf_counter()
    for _ in range(n):
        queue.enqueue(PAYLOAD)
    done.wait()
    elapsed = time.perf_counter() - start
    queue.close()
    return n / elapsed


def jobq_drain(n: int) -> float:
    """Enqueue n first, then start 4 workers and time the drain."""
    queue: jobq.JobQueue[Any] = jobq.JobQueue(noop)
    queue.enqueue_many([PAYLOAD] * n)
    start = time.perf_counter()
    queue.start(workers=4)
    queue.join()
    elapsed = time.perf_counter() - start
    queue.close()
    return n / elapsed


def memory_per_job(n: int) -> tuple[float, float]:
    """Bytes per pending job in jobq's memory store and in a plain queue.Queue."""
    import queue as stdlib_queue

    def measure(fill: Callable[[], object]) -> float:
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

    return measure(fill_jobq), measure(fill_plain)


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


def summary(values: list[float]) -> str:
    return (
        f"{statistics.median(values):12,.1f}  ({min(values):,.1f}-{max(values):,.1f})"
    )


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpus,"
        f" N={n}, {ROUNDS} rounds"
    )
    results: dict[str, list[float]] = {}
    for _ in range(ROUNDS):  # interleave, so machine noise hits every contender alike
        for name, run in [
            ("ThreadPoolExecutor(4)", bare_executor),
            ("jobq memory, end-to-end", jobq_end_to_end),
            ("jobq memory, drain", jobq_drain),
        ]:
            results.setdefault(name, []).append(run(n))
    base = statistics.median(results["ThreadPoolExecutor(4)"])
    print("\nno-op jobs/s, 4 workers              median  (min-max)      ratio to TPE")
    for name, values in results.items():
        print(f"{name:28} {summary(values)}  {statistics.median(values) / base:5.2f}x")
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
