"""End-to-end throughput: one producer enqueueing no-op jobs one by one while 4
workers run them, until the last has run; jobs/s.

Every contender runs the same handler (``harness.Tally``: count, and signal
at the n-th) and starts its workers and opens its store before the clock.
Persistent stores get a fresh directory each round.

Run alone: ``python -m benchmarks.throughput [N]``; in the suite:
``python -m benchmarks``.
"""

from __future__ import annotations

import concurrent.futures
import os
import queue as stdlib_queue
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import jobq
from benchmarks.harness import (
    IN_MEMORY,
    PAYLOAD,
    PERSISTED,
    REFERENCE,
    STDLIB,
    WORKERS,
    Contender,
    Table,
    Tally,
    measure,
)
from jobq.stores import Store

REFERENCE_NAME = "ThreadPoolExecutor(4)"


def thread_pool(n: int) -> float:
    """What a user writes by hand: submit every job to a 4-thread pool."""
    tally = Tally(n)
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        for _ in range(n):
            pool.submit(tally, PAYLOAD)
        tally.wait()
        elapsed = time.perf_counter() - start
    return n / elapsed


def plain_queue(n: int) -> float:
    """The ceiling for handing work between threads: queue.Queue, 4 threads."""
    tally = Tally(n)
    work: stdlib_queue.Queue[Any] = stdlib_queue.Queue()

    def worker() -> None:
        while (item := work.get()) is not None:
            tally(item)

    threads = [threading.Thread(target=worker) for _ in range(WORKERS)]
    for thread in threads:
        thread.start()
    start = time.perf_counter()
    for _ in range(n):
        work.put(PAYLOAD)
    tally.wait()
    elapsed = time.perf_counter() - start
    for _ in threads:
        work.put(None)
    for thread in threads:
        thread.join()
    return n / elapsed


def end_to_end(n: int, store: Store | str | None = None) -> float:
    """jobq: a producer enqueueing one by one while 4 workers run the jobs."""
    tally = Tally(n)
    with jobq.JobQueue(tally, store=store) as queue:
        queue.start(workers=WORKERS)
        queue.stats()  # the store is open: the timing is the work only
        start = time.perf_counter()
        for _ in range(n):
            queue.enqueue(PAYLOAD)
        tally.wait()
        return n / (time.perf_counter() - start)


def drain(n: int, store: Store | str | None = None) -> float:
    """jobq: n jobs queued first, then 4 workers until the queue is empty."""
    with jobq.JobQueue(lambda _: None, store=store) as queue:
        queue.enqueue_many([PAYLOAD] * n)
        start = time.perf_counter()
        queue.start(workers=WORKERS)
        queue.join()
        elapsed = time.perf_counter() - start
        if queue.stats().pending:
            raise RuntimeError("join returned with jobs pending")
        return n / elapsed


def in_temp_dir(run: Callable[[str], float]) -> float:
    with tempfile.TemporaryDirectory() as directory:
        return run(directory)


def jobq_json(n: int) -> float:
    """The JSON store as configured by default: every change journaled."""
    return in_temp_dir(lambda d: end_to_end(n, os.path.join(d, "jobs.json")))


def jobq_sqlite(n: int) -> float:
    """The SQLite store as configured by default (WAL, synchronous=NORMAL)."""
    return in_temp_dir(lambda d: end_to_end(n, f"sqlite:///{d}/jobs.db"))


def huey_memory(n: int) -> float:
    """Huey's MemoryHuey with its consumer in this process: 4 worker threads."""
    from huey import MemoryHuey

    huey = MemoryHuey("bench", results=False)
    tally = Tally(n)

    def run(payload: Any) -> None:
        tally(payload)

    task = huey.task()(run)
    consumer = huey.create_consumer(workers=WORKERS, worker_type="thread")
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    consumer.start()  # its own signal handlers: ours come back below
    try:
        start = time.perf_counter()
        for _ in range(n):
            task(PAYLOAD)
        tally.wait()
        return n / (time.perf_counter() - start)
    finally:
        consumer.stop(graceful=True)
        for number, handler in handlers.items():
            signal.signal(number, handler)


def installed(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def contenders() -> tuple[list[Contender], list[str]]:
    """Those that can run here, and a note for each that cannot."""
    found = [
        Contender(REFERENCE_NAME, REFERENCE, thread_pool, STDLIB),
        Contender("queue.Queue + 4 threads", REFERENCE, plain_queue, STDLIB),
        Contender("jobq memory", IN_MEMORY, end_to_end),
        Contender("jobq JSON (journal)", PERSISTED, jobq_json),
        Contender("jobq SQLite", PERSISTED, jobq_sqlite),
    ]
    notes = []
    if installed("huey"):
        found.append(Contender("Huey MemoryHuey", IN_MEMORY, huey_memory, "huey"))
    else:
        notes.append("Huey is not installed (`pip install -e '.[bench]'`): skipped.")
    return found, notes


def table(n: int, rounds: int) -> Table:
    found, notes = contenders()
    return Table(
        title="End-to-end throughput, 4 workers",
        description=(
            "One producer enqueues no-op jobs with a small JSON payload one by "
            "one while 4 workers run them; the clock stops when the last has "
            "run. Workers are started and stores opened before the clock."
        ),
        unit="jobs/s",
        n=n,
        rounds=rounds,
        results=measure(found, n, rounds),
        reference=REFERENCE_NAME,
        notes=notes,
    )


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    print(table(n, 5).console())


if __name__ == "__main__":
    main()
