"""How soon ``queue.cancel`` stops a running handler, in-process and from
another process, and what cancellation costs the jobs nobody cancels.

- ``in-process``: from ``cancel(job)`` to ``JobCancelled`` arriving in a
  handler that loops in pure Python (memory store, one worker), p50 and
  p99 in ms. The limits thread is woken at once and switches on the line
  events of the handler's thread (it waits for the GIL, which the looping
  thread gives up at the interpreter's switch interval, 5 ms).
- ``from another process`` (SQLite, PostgreSQL): a child process runs the
  looping handler; the parent cancels through a store of its own and the
  child reports when ``JobCancelled`` arrived (wall clock: one machine).
  The child's watchdog asks the store every ``STOP_LOOK`` (0.25 s) which
  of its claims were asked to stop, so the wait is spread over one poll:
  the parent waits a random part of ``STOP_LOOK`` after the job started
  before it cancels, as a request made at any moment would (without it,
  each job would start just after the poll that stopped the one before,
  and every request would wait a whole poll).
- ``cost``: microseconds per no-op job drained by 4 workers on the memory
  store (the hot path: cancellation adds two attribute writes and a read
  per job); compare with an older checkout by running this file with its
  ``PYTHONPATH``.

Run: ``python -m benchmarks.cancel [ROUNDS] [--postgres URL]``.
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import jobq
from benchmarks.common import percentile
from jobq.stores import PostgresStore, SqliteStore, Store
from jobq.stores.base import STOP_LOOK

DRAIN = 20_000
ROOT = Path(__file__).resolve().parents[1]

#: The child of ``cross_process``: runs looping jobs one at a time and
#: prints, for each, the wall time ``JobCancelled`` arrived.
CHILD = r"""
import json, sys, time
import jobq
from jobq.stores import PostgresStore, SqliteStore

where = json.loads(sys.argv[1])
if "sqlite" in where:
    store = SqliteStore(where["sqlite"])
else:
    store = PostgresStore(where["postgres"][0], queue=where["postgres"][1])

def handler(job):
    print("started", job.id, flush=True)
    try:
        while True:
            pass
    except jobq.JobCancelled:
        print("cancelled", job.id, repr(time.time()), flush=True)
        raise

queue = jobq.JobQueue(handler, store=store, max_attempts=1)
queue.start(workers=1)
sys.stdin.readline()
queue.close()
"""


def in_process(rounds: int) -> list[float]:
    """ms from ``cancel`` to ``JobCancelled`` in a loop, one job at a time."""
    samples: list[float] = []
    entered = threading.Semaphore(0)
    done = threading.Semaphore(0)
    asked: list[float] = []

    def handler(job: jobq.Job[Any]) -> None:
        entered.release()
        try:
            while True:
                pass
        except jobq.JobCancelled:
            samples.append((time.monotonic() - asked[-1]) * 1000)
            raise
        finally:
            done.release()

    with jobq.JobQueue(handler, max_attempts=1) as queue:
        queue.start(workers=1)
        for _ in range(rounds):
            job = queue.enqueue(None)
            entered.acquire()
            asked.append(time.monotonic())
            queue.cancel(job)
            done.acquire()
    return samples


def cross_process(rounds: int, where: dict[str, Any], store: Store) -> list[float]:
    """ms from ``cancel`` in this process to ``JobCancelled`` in a child's."""
    script = Path(ROOT / ".cancel-child.py")
    script.write_text(CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), json.dumps(where)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    out, into = child.stdout, child.stdin
    if out is None or into is None:
        raise RuntimeError("the child has no pipes")
    samples: list[float] = []
    try:
        with jobq.JobQueue(store=store) as queue:
            for _ in range(rounds):
                job = queue.enqueue(None)
                _expect(out.readline(), "started", job.id)
                time.sleep(random.uniform(0, STOP_LOOK))  # any moment of a poll
                asked = time.time()
                queue.cancel(job)
                line = _expect(out.readline(), "cancelled", job.id)
                samples.append((float(line[2]) - asked) * 1000)
    finally:
        into.close()
        child.wait(60)
        script.unlink()
    return samples


def _expect(line: str, word: str, job_id: int) -> list[str]:
    """The child's line, split, if it says ``word`` of ``job_id``."""
    words = line.split()
    if words[:2] != [word, str(job_id)]:
        raise RuntimeError(f"the child said {line!r}, not {word} {job_id}")
    return words


def drain_seconds() -> float:
    """Seconds 4 workers take to run ``DRAIN`` no-op jobs (memory store)."""
    with jobq.JobQueue(lambda job: None) as queue:
        queue.enqueue_many([None] * DRAIN)
        started = time.perf_counter()
        queue.start(workers=4)
        queue.join()
        return time.perf_counter() - started


def report(name: str, samples: list[float]) -> None:
    print(
        f"cancel -> JobCancelled, {name}, {len(samples)} jobs: "
        f"p50 {percentile(samples, 50):.2f} ms, p99 {percentile(samples, 99):.2f} ms",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cancel")
    parser.add_argument("rounds", nargs="?", type=int, default=200)
    parser.add_argument("--postgres", help="also from another process on PostgreSQL")
    parser.add_argument("--cost-only", action="store_true")
    args = parser.parse_args()
    if not args.cost_only:
        report("in-process (memory)", in_process(args.rounds))
        path = str(ROOT / f".cancel-{secrets.token_hex(4)}.db")
        try:
            samples = cross_process(args.rounds, {"sqlite": path}, SqliteStore(path))
        finally:
            for suffix in ("", "-wal", "-shm"):
                Path(path + suffix).unlink(missing_ok=True)
        report("from another process (SQLite)", samples)
        if args.postgres:
            name = f"bench-cancel-{secrets.token_hex(4)}"
            store = PostgresStore(args.postgres, queue=name)
            where = {"postgres": [args.postgres, name]}
            report(
                "from another process (PostgreSQL)",
                cross_process(args.rounds, where, store),
            )
    drain_seconds()  # warm up
    times = [drain_seconds() for _ in range(7)]
    print(
        f"no-op jobs, 4 workers, memory store: "
        f"{statistics.median(times) / DRAIN * 1e6:.2f} us/job (median of 7)"
    )


if __name__ == "__main__":
    main()
