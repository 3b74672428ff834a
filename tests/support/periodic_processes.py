"""Several processes running the same periodic job on one store, and the count
of its slots: the test of exactly-once (tests/test_periodic_processes.py)
and its figures (benchmarks/periodic.py) run the same code.

Each child declares a 1-second schedule on its own ``JobQueue`` over the
shared store (a SQLite file, or a PostgreSQL schema and queue), says "ready",
starts two workers on "go", stops after the given seconds and exits. The
jobs are kept completed, so that afterwards every slot's job can be counted
by its key, whichever process enqueued or ran it.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any

import jobq
from jobq import JobState
from jobq.stores import PostgresStore, SqliteStore

#: A cap on each wait for a child, so that a broken child fails, never hangs.
WAIT = 120

# argv: store (path or postgresql:// URL), schema, queue, seconds.
CHILD = r"""
import sys, threading
import jobq
from jobq.stores import PostgresStore, SqliteStore

where, schema, name, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
store = (PostgresStore(where, schema=schema, queue=name)
         if where.startswith("postgresql") else SqliteStore(where))
queue = jobq.JobQueue(store=store, keep_completed=3600)

@queue.periodic(every=1, name="beat")
def beat(scheduled_at):
    pass

queue.stats()  # open now: start-up stays off the clock
print("ready", flush=True)
sys.stdin.readline()
queue.start(workers=2)
threading.Event().wait(seconds)  # the run's length, not a synchronisation
queue.close(timeout=30)
print("done", flush=True)
"""


@dataclass(frozen=True)
class SlotCount:
    """What the processes enqueued: ``expected`` slots (every second from the
    first enqueued to the last), ``enqueued`` jobs, ``distinct`` slots among
    them, and ``duplicates`` (jobs beyond one per slot)."""

    expected: int
    enqueued: int
    distinct: int
    duplicates: int


def open_store(where: str, schema: str, queue: str) -> Any:
    if where.startswith("postgresql"):
        return PostgresStore(where, schema=schema, queue=queue)
    return SqliteStore(where)


def run_processes(
    where: str, *, schema: str = "", queue: str = "", processes: int, seconds: float
) -> SlotCount:
    """Run ``processes`` children on the store for ``seconds``; count the slots."""
    args = [where, schema or "-", queue or "-", str(seconds)]
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n", "a child did not start"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            out, _ = child.communicate(timeout=WAIT + seconds)
            assert (child.returncode, out) == (0, "done\n"), "a child failed"
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    return count_slots(where, schema, queue)


def count_slots(where: str, schema: str, queue: str) -> SlotCount:
    """The jobs of schedule "beat" in the store, counted by slot."""
    with jobq.JobQueue(store=open_store(where, schema, queue)) as reader:
        store = reader.store
        reader.stats()  # opens it
        jobs = [
            job
            for state in (JobState.COMPLETED, JobState.PENDING, JobState.RUNNING)
            for job in store.list_jobs(state)
        ]
    keys = Counter(job.key for job in jobs if job.task == "beat")
    slots = sorted(job.run_at for job in jobs if job.task == "beat")
    expected = round(slots[-1] - slots[0]) + 1 if slots else 0
    return SlotCount(
        expected=expected,
        enqueued=sum(keys.values()),
        distinct=len(keys),
        duplicates=sum(keys.values()) - len(keys),
    )
