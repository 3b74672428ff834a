"""What time limits cost and how soon they act, on the memory store.

- ``interrupt``: from a job's limit to ``JobTimeout`` arriving in a handler
  that loops in pure Python (one worker), p50 and p99 in ms. The limits
  thread wakes at the limit (it waits for the GIL, which the looping thread
  gives up at the interpreter's switch interval, 5 ms) and switches on the
  line events of the handler's thread, which raise at its next line.
- ``replace``: from a blocked handler's limit + grace to the first job that
  its replacement thread starts, p50 and p99 in ms.
- ``cost``: microseconds per no-op job drained by 4 workers with
  ``timeout=30`` against none, alternating rounds in the same run (the
  median round of each).

Run: ``python -m benchmarks.time_limits [ROUNDS]``.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from typing import Any

import jobq
from benchmarks.common import percentile

LIMIT = 0.02
GRACE = 0.02
DRAIN = 20_000


def interrupt_latency(rounds: int) -> list[float]:
    """ms from the limit to ``JobTimeout`` in a loop, one job at a time."""
    samples: list[float] = []
    done = threading.Semaphore(0)

    def handler(job: jobq.Job[Any]) -> None:
        entered = time.monotonic()
        try:
            while True:
                pass
        except jobq.JobTimeout:
            samples.append((time.monotonic() - entered - LIMIT) * 1000)
        finally:
            done.release()

    with jobq.JobQueue(handler, timeout=LIMIT, max_attempts=1) as queue:
        queue.start(workers=1)
        for _ in range(rounds):
            queue.enqueue(None)
            done.acquire()
    return samples


def replacement_latency(rounds: int) -> list[float]:
    """ms from a blocked handler's limit + grace to its replacement's first job."""
    samples: list[float] = []
    release = threading.Event()
    hung = threading.Semaphore(0)
    replaced = threading.Semaphore(0)
    entered: list[float] = []

    def handler(job: jobq.Job[Any]) -> None:
        if job.payload == "hang":
            entered.append(time.monotonic())
            hung.release()
            release.wait()
        else:
            samples.append((time.monotonic() - entered[-1] - LIMIT - GRACE) * 1000)
            replaced.release()

    with jobq.JobQueue(handler, max_attempts=1, timeout_grace=GRACE) as queue:
        queue.start(workers=1)
        for _ in range(rounds):
            queue.enqueue("hang", timeout=LIMIT)
            hung.acquire()
            queue.enqueue("next")  # only a replacement thread can run it
            replaced.acquire()
        release.set()
    return samples


def drain_seconds(timeout: float | None) -> float:
    """Seconds 4 workers take to run ``DRAIN`` no-op jobs."""
    with jobq.JobQueue(lambda job: None, timeout=timeout) as queue:
        queue.enqueue_many([None] * DRAIN)
        started = time.perf_counter()
        queue.start(workers=4)
        queue.join()
        return time.perf_counter() - started


def main(rounds: int = 200) -> None:
    interrupts = interrupt_latency(rounds)
    print(
        f"limit -> JobTimeout (pure-Python loop), {rounds} jobs: "
        f"p50 {percentile(interrupts, 50):.2f} ms, "
        f"p99 {percentile(interrupts, 99):.2f} ms"
    )
    replaced = replacement_latency(max(rounds // 4, 2))
    print(
        f"limit + grace -> replacement thread's first job, {len(replaced)} threads: "
        f"p50 {percentile(replaced, 50):.2f} ms, p99 {percentile(replaced, 99):.2f} ms"
    )
    plain: list[float] = []
    limited: list[float] = []
    drain_seconds(None)  # warm up
    for _ in range(5):
        plain.append(drain_seconds(None))
        limited.append(drain_seconds(30))
    per_job = {
        name: statistics.median(times) / DRAIN * 1e6
        for name, times in (("none", plain), ("30", limited))
    }
    print(
        f"no-op jobs, 4 workers, memory store: {per_job['none']:.2f} us/job without "
        f"a limit, {per_job['30']:.2f} us/job with timeout=30 "
        f"({per_job['30'] - per_job['none']:+.2f} us)"
    )


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:2]))
