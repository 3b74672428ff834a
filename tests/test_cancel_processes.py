"""Cancelling a job that another process runs, on the stores shared between
processes (SQLite, PostgreSQL): the request is stored with the job, and the
process running it learns of it (``stops_requested``, every ``STOP_LOOK``
seconds) and stops the handler; a process killed after the request leaves a
job that ends cancelled, never run again.

The child is a real process (``subprocess``) with a queue of its own, run
from a file (an interruption lands only in code whose source can be read);
it says on stdout when its handler started, and the parent waits on that
line and on ``cancel(wait=...)``, never on sleeps.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jobq
from jobq import JobState
from jobq.stores import Store

ROOT = Path(__file__).resolve().parents[1]
WAIT = 30.0  # seconds; a cap so that a broken child fails the test, never hangs it
LEASE = 1.0  # PostgreSQL: the child's lease, so that its claim runs out soon

# argv: the store as JSON ({"sqlite": path} or {"postgres": [url, schema, queue]}),
# the handler ("spin": a loop in Python; "block": inside C code, for good).
CHILD = r"""
import json, sys, threading
import jobq
from jobq.stores import PostgresStore, SqliteStore

where, kind = json.loads(sys.argv[1]), sys.argv[2]
if "sqlite" in where:
    store = SqliteStore(where["sqlite"])
else:
    url, schema, name = where["postgres"]
    lease = float(sys.argv[3])
    store = PostgresStore(url, schema=schema, queue=name, lease_seconds=lease)

def handler(job):
    print("started", job.id, flush=True)
    if kind == "spin":
        while True:
            pass
    threading.Event().wait()

queue = jobq.JobQueue(handler, store=store, timeout_grace=600)
queue.start(workers=1)
sys.stdin.readline()  # until the parent closes it
"""


def run_child(
    processes: list[subprocess.Popen[str]], where: str, kind: str, tmp_path: Path
) -> subprocess.Popen[str]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), where, kind, str(LEASE)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    processes.append(child)
    return child


def started(child: subprocess.Popen[str]) -> int:
    """The id of the job the child's handler started (waits for its line)."""
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line.startswith("started "), f"the child ended early: {line!r}"
    return int(line.split()[1])


def test_a_request_from_another_process_stops_the_handler(
    shared: tuple[str, Callable[[], Store]],
    processes: list[subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    where, make_store = shared
    queue: jobq.JobQueue[Any] = jobq.JobQueue(store=make_store(), keep_cancelled=600)
    try:
        queue.enqueue("work", key="only-one")
        child = run_child(processes, where, "spin", tmp_path)
        job_id = started(child)

        assert queue.cancel(job_id, wait=WAIT, by="another process") is True

        record = queue.get(job_id)
        assert record is not None
        assert record.state is JobState.CANCELLED
        assert record.errors[-1].type == "jobq.errors.JobCancelled"
        assert record.cancellation is not None
        assert (record.cancellation.by, record.cancellation.attempt) == (
            "another process",
            1,
        )
        assert not queue.enqueue("again", key="only-one").duplicate
    finally:
        queue.close()


def test_a_job_whose_process_is_killed_after_the_request_ends_cancelled(
    shared: tuple[str, Callable[[], Store]],
    processes: list[subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    """The child's handler is inside C code (the request cannot land there,
    and its grace is long): it is killed, and the job ends cancelled when
    its claim is recovered (SQLite: its process is gone; PostgreSQL: its
    lease ran out), never run again although attempts remain."""
    where, make_store = shared
    asking: jobq.JobQueue[Any] = jobq.JobQueue(store=make_store(), keep_cancelled=600)
    try:
        asking.enqueue("work")
        child = run_child(processes, where, "block", tmp_path)
        job_id = started(child)
        assert asking.cancel(job_id) is True
        child.kill()
        child.communicate(timeout=WAIT)
    finally:
        asking.close()

    ran: list[int] = []
    after: jobq.JobQueue[Any] = jobq.JobQueue(
        lambda job: ran.append(job.id), store=make_store(), keep_cancelled=600
    )
    try:
        after.start(workers=1)
        assert after.join(timeout=WAIT)  # once the claim is recovered
        record = after.get(job_id)
        assert record is not None
        assert record.state is JobState.CANCELLED
        assert record.attempts == 1
        assert record.errors[-1].type == "jobq.errors.ProcessDied"
        assert ran == []
    finally:
        after.close()
