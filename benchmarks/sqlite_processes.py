"""SQLite store with several processes on one file: enqueue and drain throughput.

- enqueue: ``p`` processes each call ``enqueue`` N/p times (one transaction
  each), all at once;
- drain: N jobs are enqueued first (one ``enqueue_many``), then ``p``
  processes with 4 workers each run them until the queue is empty.

Each for 1 and 3 processes, plus the memory store draining N jobs with 4
workers in this process, as a reference measured in the same run. Processes
are started and open the store before the clock starts ("ready", then "go");
times are ``time.monotonic()``, one clock for every process on Linux.

Run: ``python -m benchmarks.sqlite_processes [N]`` (default 12,000). Prints
medians and min-max of 3 rounds; every round uses a fresh database.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import jobq
from benchmarks import throughput
from benchmarks.harness import PAYLOAD, WORKERS, summary
from jobq.stores import SqliteStore

ROUNDS = 3
ROOT = Path(__file__).resolve().parents[1]

# argv: mode ("enqueue" or "drain"), database, jobs to enqueue, workers.
CHILD = r"""
import json, sys, time
import jobq
from benchmarks import throughput
from benchmarks.harness import PAYLOAD, WORKERS, summary
from jobq.stores import SqliteStore

mode, path, n, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
payload = {"to": "ann@example.com", "template": "welcome", "user_id": 42}
ran = []

def handler(job):
    ran.append(job.id)  # atomic: no lock in the measured path

queue = jobq.JobQueue(handler, store=SqliteStore(path))
queue.stats()  # open before the clock starts
print("ready", flush=True)
sys.stdin.readline()
start = time.monotonic()
if mode == "enqueue":
    for _ in range(n):
        queue.enqueue(payload)
    end = time.monotonic()
else:
    queue.start(workers=workers)
    if not queue.join(timeout=600):
        raise SystemExit("the queue did not drain")
    end = time.monotonic()
queue.close()
print(json.dumps({"start": start, "end": end, "ran": len(ran)}), flush=True)
"""


def in_processes(mode: str, path: str, counts: list[int]) -> list[dict[str, Any]]:
    """Start one child per count, let them go at once, return their reports."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, mode, path, str(n), str(WORKERS)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in counts
    ]
    try:
        for proc in procs:
            if proc.stdout is None or proc.stdout.readline() != "ready\n":
                raise RuntimeError("a child failed to open the store")
        for proc in procs:
            if proc.stdin is None:
                raise RuntimeError("no pipe to a child")
            proc.stdin.write("go\n")
            proc.stdin.flush()
        reports = []
        for proc in procs:
            out, _ = proc.communicate(timeout=600)
            if proc.returncode != 0:
                raise RuntimeError(f"a child failed (exit {proc.returncode})")
            reports.append(json.loads(out))
        return reports
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def enqueue(directory: str, n: int, processes: int) -> tuple[float, list[int]]:
    """Jobs/s with ``processes`` processes enqueueing n jobs in all."""
    path = os.path.join(directory, "enqueue.db")
    with jobq.JobQueue[Any](store=SqliteStore(path)) as queue:
        queue.stats()  # the schema exists before the children start
    reports = in_processes("enqueue", path, [n // processes] * processes)
    elapsed = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    with jobq.JobQueue[Any](store=SqliteStore(path)) as queue:
        if queue.stats().pending != n // processes * processes:
            raise RuntimeError("jobs are missing")
    return n // processes * processes / elapsed, [n // processes] * processes


def drain(directory: str, n: int, processes: int) -> tuple[float, list[int]]:
    """Jobs/s with ``processes`` processes (4 workers each) draining n jobs.

    The drain ends when the first process sees the queue empty: the one that
    finished the last job is woken at once, the others within a poll."""
    path = os.path.join(directory, "drain.db")
    with jobq.JobQueue[Any](store=SqliteStore(path)) as queue:
        queue.enqueue_many([PAYLOAD] * n)
    reports = in_processes("drain", path, [0] * processes)
    if sum(r["ran"] for r in reports) != n:
        raise RuntimeError("not every job ran exactly once")
    elapsed = min(r["end"] for r in reports) - min(r["start"] for r in reports)
    return n / elapsed, [r["ran"] for r in reports]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 12_000
    print(
        f"python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} cpus, N={n}, {ROUNDS} rounds, {WORKERS} workers a process"
    )
    print("\nno-op jobs/s                                         median  (min-max)")
    for name, run in [("enqueue, one call each", enqueue), ("drain", drain)]:
        for processes in (1, 3):
            values: list[float] = []
            shares: list[list[int]] = []
            for _ in range(ROUNDS):
                with tempfile.TemporaryDirectory() as directory:
                    rate, share = run(directory, n, processes)
                values.append(rate)
                shares.append(share)
            spread = ""
            if name == "drain" and processes > 1:
                spread = "  jobs per process: " + ", ".join(
                    "/".join(str(s) for s in share) for share in shares
                )
            label = f"sqlite {name}, {processes} process{'es' if processes > 1 else ''}"
            print(f"{label:44} {summary(values)}{spread}")
    values = [throughput.drain(n) for _ in range(ROUNDS)]
    print(f"{'memory drain, 1 process (reference)':44} {summary(values)}")


if __name__ == "__main__":
    main()
