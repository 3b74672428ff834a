"""Periodic jobs across processes: three processes on one SQLite file, and
three on one PostgreSQL queue, run the same 1-second schedule for 20 s and
enqueue each slot exactly once; a process killed while it enqueues a slot
leaves neither the job nor the slot taken, so another process enqueues it."""

from __future__ import annotations

import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from periodic_processes import SlotCount, open_store, run_processes
from postgres_url import POSTGRES_URL

import jobq
from jobq.testing.clock import Clock

SECONDS = 20.0


def assert_exactly_once(count: SlotCount) -> None:
    assert count.duplicates == 0
    assert count.enqueued == count.distinct == count.expected  # no slot missing
    assert count.expected >= SECONDS - 2


@pytest.mark.timeout(180)
def test_three_processes_on_one_sqlite_file_enqueue_each_slot_once(
    tmp_path: Path,
) -> None:
    count = run_processes(str(tmp_path / "jobs.db"), processes=3, seconds=SECONDS)
    assert_exactly_once(count)


@pytest.mark.timeout(180)
def test_three_processes_on_one_postgres_queue_enqueue_each_slot_once(
    postgres_schema: str,
) -> None:
    name = f"periodic-{secrets.token_hex(4)}"
    count = run_processes(
        POSTGRES_URL, schema=postgres_schema, queue=name, processes=3, seconds=SECONDS
    )
    assert_exactly_once(count)


# argv: store, schema, queue, and where the job is inserted: a module, the
# class in it ("-": none) and the function, which then kills the process.
DIES_INSIDE = r"""
import importlib, os, signal, sys
import jobq
from jobq.testing.clock import Clock
from periodic_processes import open_store

where, schema, name, module, owner, function = sys.argv[1:7]
target = importlib.import_module(module)
if owner != "-":
    target = getattr(target, owner)
inner = getattr(target, function)

def insert_then_die(*args, **kwargs):
    inner(*args, **kwargs)  # the job's row is written in the open transaction
    os.kill(os.getpid(), signal.SIGKILL)

setattr(target, function, insert_then_die)
clock = Clock(1_800_000_000.0)
queue = jobq.JobQueue(store=open_store(where, schema, name), clock=clock)
queue.periodic(every=60, name="beat")(lambda: None)
queue.run_pending()
clock.advance(60)
queue.run_pending()
"""


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_process_killed_while_enqueueing_a_slot_leaves_it_to_the_next(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if kind == "sqlite":
        where, schema, name = str(tmp_path / "jobs.db"), "-", "-"
        inserts = ["jobq.stores.sqlite.store", "-", "_insert"]
    else:
        where, name = POSTGRES_URL, f"killed-{secrets.token_hex(4)}"
        schema = request.getfixturevalue("postgres_schema")
        inserts = ["jobq.stores.postgres.store", "PostgresStore", "_insert"]
    support = str(Path(__file__).parent / "support")
    child = subprocess.run(
        [sys.executable, "-c", DIES_INSIDE, where, schema, name, *inserts],
        env={"PYTHONPATH": support, "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr

    clock = Clock(1_800_000_000.0)
    with jobq.JobQueue(store=open_store(where, schema, name), clock=clock) as queue:
        queue.periodic(every=60, name="beat")(lambda: None)
        assert queue.stats().pending == 0  # the killed process added nothing
        assert queue.schedules()[0].last_slot is None  # nor took the slot
        queue.run_pending()
        clock.advance(60)
        assert queue.run_pending() == 1
        (schedule,) = queue.schedules()
    assert schedule.last_slot is not None
    assert schedule.last_slot.timestamp() == clock.now
