"""SQLite store figures: enqueue and drain throughput, claims beside many future
jobs, and how fast an idle worker sees a job another process enqueued.

Run: ``python -m benchmarks.sqlite_quick [N]`` (default 20,000). Prints medians
and min-max of 3 rounds; every round uses a fresh database in a temp directory.
"""

from __future__ import annotations

import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import jobq
from benchmarks import throughput
from benchmarks.harness import PAYLOAD, noop, summary
from jobq.stores import SqliteStore
from jobq.stores.base import Signal

ROUNDS = 3


def enqueue_each(directory: str, n: int, synchronous: str) -> float:
    """n enqueue calls, one transaction each."""
    store = SqliteStore(os.path.join(directory, "each.db"), synchronous=synchronous)
    with jobq.JobQueue(noop, store=store) as queue:
        queue.stats()  # open first: the timing is the enqueues only
        start = time.perf_counter()
        for _ in range(n):
            queue.enqueue(PAYLOAD)
        return n / (time.perf_counter() - start)


def enqueue_many(directory: str, n: int, synchronous: str) -> float:
    """One enqueue_many of n jobs: one transaction."""
    store = SqliteStore(os.path.join(directory, "many.db"), synchronous=synchronous)
    with jobq.JobQueue(noop, store=store) as queue:
        queue.stats()
        start = time.perf_counter()
        queue.enqueue_many([PAYLOAD] * n)
        return n / (time.perf_counter() - start)


def drain(directory: str, n: int, synchronous: str) -> float:
    """n queued jobs, then 4 workers until the queue is empty."""
    path = os.path.join(directory, "drain.db")
    return throughput.drain(n, SqliteStore(path, synchronous=synchronous))


def end_to_end(directory: str, n: int, synchronous: str) -> float:
    """A producer enqueueing one by one while 4 workers run the jobs."""
    path = os.path.join(directory, "e2e.db")
    return throughput.end_to_end(n, SqliteStore(path, synchronous=synchronous))


def claim_beside_future_jobs(directory: str, future: int) -> float:
    """Microseconds per claim+finish with ``future`` high-priority delayed jobs."""
    store = SqliteStore(os.path.join(directory, "future.db"))
    store.open(Signal(), dead_letter_limit=1000)
    try:
        now = time.time()
        queue: jobq.JobQueue[Any] = jobq.JobQueue(noop, store=store, clock=lambda: now)
        queue.enqueue_many([PAYLOAD] * future, delay=3600, priority=9)
        queue.enqueue_many([PAYLOAD] * 1000)
        start = time.perf_counter()
        for _ in range(1000):
            claim = store.claim(now)
            if claim is None:
                raise RuntimeError("a due job was not claimed")
            store.finish(claim, None, None, now)
        return (time.perf_counter() - start) / 1000 * 1e6
    finally:
        store.close()


CHILD = """
import sys, time, jobq
queue = jobq.JobQueue(store=sys.argv[1])
for line in sys.stdin:
    queue.enqueue({"sent": time.time()})
queue.close()
"""


def wake_up_latency(directory: str, samples: int, poll_interval: float) -> list[float]:
    """Seconds from another process's enqueue to our idle worker running it."""
    path = os.path.join(directory, "wake.db")
    latencies: list[float] = []
    ran = threading.Semaphore(0)

    def handler(job: jobq.Job[Any]) -> None:
        latencies.append(time.time() - job.payload["sent"])
        ran.release()

    store = SqliteStore(path, poll_interval=poll_interval)
    with jobq.JobQueue(handler, store=store).start(workers=2):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, f"sqlite:///{path}"],
            stdin=subprocess.PIPE,
            text=True,
        )
        stdin = child.stdin
        if stdin is None:
            raise RuntimeError("no pipe to the child")
        for _ in range(samples):
            # Let the workers go idle (we measure an idle wake-up), at a random
            # phase of the watcher's polling.
            time.sleep(random.uniform(0.1, 0.2))
            stdin.write("go\n")
            stdin.flush()
            if not ran.acquire(timeout=10):
                raise RuntimeError("the job from the other process never ran")
        stdin.close()
        child.wait()
    return latencies


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    print(
        f"python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} cpus, N={n}, {ROUNDS} rounds"
    )
    print("\nno-op jobs/s                            median  (min-max)")
    for synchronous in ("NORMAL", "FULL"):
        for name, run in [
            ("enqueue, one call each", enqueue_each),
            ("enqueue_many, one call", enqueue_many),
            ("drain, 4 workers", drain),
            ("end-to-end, 4 workers", end_to_end),
        ]:
            values = []
            for _ in range(ROUNDS):
                with tempfile.TemporaryDirectory() as directory:
                    values.append(run(directory, n, synchronous))
            print(f"{synchronous:6} {name:26} {summary(values)}")
    print("\nclaim + finish beside delayed high-priority jobs (1 thread)")
    for future in (0, 100_000):
        with tempfile.TemporaryDirectory() as directory:
            micros = claim_beside_future_jobs(directory, future)
        print(f"  {future:>7,} delayed jobs: {micros:6.0f} us per job")
    print("\ncross-process wake-up: enqueue in process B -> handler starts in A")
    for poll in (0.05, 0.01):
        with tempfile.TemporaryDirectory() as directory:
            latencies = [s * 1000 for s in wake_up_latency(directory, 30, poll)]
        print(
            f"  poll_interval={poll * 1000:.0f} ms: median "
            f"{statistics.median(latencies):.1f} ms, max {max(latencies):.1f} ms "
            "(30 samples)"
        )


if __name__ == "__main__":
    main()
