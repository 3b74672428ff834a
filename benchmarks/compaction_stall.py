"""How long a JSON-store compaction stalls producers, with N jobs queued.

Run: ``python -m benchmarks.compaction_stall [N]``. A producer thread enqueues
without pause while the main thread compacts (``save()``); the longest single
enqueue during the compaction is the stall producers see.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from typing import Any

import jobq
from benchmarks.harness import PAYLOAD
from jobq.stores import JsonFileStore


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with tempfile.TemporaryDirectory() as directory:
        store = JsonFileStore(f"{directory}/jobs.json", compact_bytes=1 << 40)
        queue: jobq.JobQueue[Any] = jobq.JobQueue(None, store=store)
        start = time.perf_counter()
        for _ in range(n // 10_000):
            queue.enqueue_many([PAYLOAD] * 10_000, delay=3600)
        print(f"filled {n:,} jobs in {time.perf_counter() - start:.1f} s")
        latencies: list[float] = []
        done = threading.Event()

        def produce() -> None:
            while not done.is_set():
                began = time.perf_counter()
                queue.enqueue(PAYLOAD, delay=3600)
                latencies.append(time.perf_counter() - began)

        producer = threading.Thread(target=produce)
        producer.start()
        time.sleep(0.2)  # benchmark warm-up, not synchronization
        before = len(latencies)
        began = time.perf_counter()
        queue.save()
        took = time.perf_counter() - began
        during = latencies[before:]
        done.set()
        producer.join()
        during.sort()
        print(
            f"compaction of {n:,} jobs: {took:.2f} s;"
            f" {len(during):,} enqueues meanwhile,"
            f" p50 {during[len(during) // 2] * 1e3:.3f} ms,"
            f" p99 {during[int(len(during) * 0.99)] * 1e3:.2f} ms,"
            f" max {during[-1] * 1e3:.1f} ms"
        )
        began = time.perf_counter()
        queue.close()
        reopened: jobq.JobQueue[Any] = jobq.JobQueue(
            None, store=f"{directory}/jobs.json"
        )
        began = time.perf_counter()
        reopened.stats()
        loaded = time.perf_counter() - began
        print(f"load of {reopened.stats().pending:,} jobs: {loaded:.2f} s")
        reopened.close()


if __name__ == "__main__":
    main()
