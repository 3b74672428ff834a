"""What an isolated task's attempt costs (``@queue.task(isolate=True)``):
the same no-op task run in the worker thread and in a child process.

Each round drains ``JOBS`` no-op jobs of one task with 1 worker, then 4,
on the memory store (enqueued as they run), the in-thread task and the
isolated one alternating in the same run; the children are started before
the rounds (a child serves every later attempt, so its start, about a
third of a second, is paid once). It prints microseconds per job, median round of
each, and the difference: the cost of an attempt's trip to the child and
back.

Run: ``python -m benchmarks.isolated [ROUNDS]``.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import jobq

# The task's function, from a module a child process imports by name (the
# tests' own: a function of __main__ cannot be isolated).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from isolated_tasks import noop

JOBS = 2_000


def drain(queue: jobq.JobQueue[Any], task: jobq.Task[[], None]) -> float:
    """Seconds the workers take to run ``JOBS`` jobs of ``task``."""
    started = time.perf_counter()
    for _ in range(JOBS):
        task.enqueue()
    if not queue.join(120):
        raise RuntimeError(f"{JOBS} jobs did not run within 120 s")
    return time.perf_counter() - started


def per_job(workers: int, rounds: int) -> dict[str, float]:
    """Microseconds per job in a thread and isolated (median rounds)."""
    queue: jobq.JobQueue[Any] = jobq.JobQueue()
    plain = queue.task(noop, name="plain")
    isolated = queue.task(noop, name="isolated", isolate=True)
    times: dict[str, list[float]] = {"thread": [], "isolated": []}
    with queue.start(workers=workers):
        drain(queue, plain)
        drain(queue, isolated)  # starts the children
        for _ in range(rounds):
            times["thread"].append(drain(queue, plain))
            times["isolated"].append(drain(queue, isolated))
    return {name: statistics.median(s) / JOBS * 1e6 for name, s in times.items()}


def main(rounds: int = 5) -> None:
    for workers in (1, 4):
        cost = per_job(workers, rounds)
        print(
            f"no-op task, {workers} worker(s), memory store, {JOBS} jobs a round, "
            f"median of {rounds} rounds: {cost['thread']:.1f} us/job in a thread, "
            f"{cost['isolated']:.1f} us/job isolated "
            f"({cost['isolated'] - cost['thread']:+.1f} us)",
            flush=True,
        )


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:2]))
