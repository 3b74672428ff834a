"""Workflows in the SQLite store: what only a shared database file has to
get right (the contract suite tests the rules for every store). A file of
the previous schema version migrated with its jobs; a crash inside the write
that ends a parent, which must not part the parent's end from its children's
release; wide workflows (a parent with 10,000 children, a child with 1,000
parents); what a job without parents or children reads and writes (nothing
more); query plans; and a release in one process waking another's workers.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from old_schemas import sqlite_at

from jobq import JobState
from jobq.stores import SqliteStore
from jobq.stores.base import Claim, Done, Failure, NewJob, Signal, StoreStats
from jobq.stores.sqlite import statements
from jobq.stores.sqlite.schema import GET_VERSION, SCHEMA_VERSION
from jobq.types import AfterFailure, AttemptError

ROOT = Path(__file__).resolve().parents[1]
WAIT = 30  # seconds; a cap so that a broken test fails instead of hanging
T0 = 1_800_000_000.0

OpenStore = Callable[..., SqliteStore]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "jobs.db"


@pytest.fixture
def released() -> list[tuple[int, str | None]]:
    """What the stores ``open_store`` opens said they released."""
    return []


@pytest.fixture
def open_store(
    path: Path, released: list[tuple[int, str | None]]
) -> Iterator[OpenStore]:
    """Opened stores on ``path``, closed after the test; each tells
    ``released`` of the children it released."""
    stores: list[SqliteStore] = []

    def make(dead_letter_limit: int = 1000) -> SqliteStore:
        store = SqliteStore(path, lease_seconds=3600)
        signal = Signal()
        signal.on_release = released.extend
        signal.keep_cancelled = 60.0
        store.open(signal, dead_letter_limit=dead_letter_limit)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


def new_job(
    payload: Any = None,
    after: tuple[int, ...] = (),
    after_failure: AfterFailure = "wait",
    *,
    run_at: float = T0,
    key: str | None = None,
    max_attempts: int = 1,
) -> NewJob:
    return NewJob(json.dumps(payload), run_at, key, 0, max_attempts, "t",
                  after=after, after_failure=after_failure)  # fmt: skip


def add(store: SqliteStore, *jobs: NewJob, now: float = T0) -> list[int]:
    return [enqueued.id for enqueued in store.add(list(jobs), now)]


def claim_all(store: SqliteStore, now: float = T0, limit: int = 10_000) -> list[Claim]:
    return store.claim_many(now, limit)


def state_of(store: SqliteStore, job_id: int, now: float = T0) -> JobState | None:
    record = store.get(job_id, now)
    return None if record is None else record.state


@contextlib.contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


# -- migration ---------------------------------------------------------------------


def test_a_version_7_file_is_migrated_and_its_jobs_become_parents(
    path: Path, open_store: OpenStore, released: list[tuple[int, str | None]]
) -> None:
    """Version 8 rebuilds the jobs table (the state 'waiting'): the jobs,
    the id sequence and the keys come through, and each job may be a
    parent; an id given once and deleted is a parent completed long ago."""
    sqlite_at(path, 7)
    with raw(path) as conn:  # job 4 was taken, then deleted: its id stays used
        conn.execute("INSERT INTO jobq_jobs (id, state, payload, priority, run_at,"
                     " created_at, max_attempts) VALUES (4, 'ready', '0', 0, ?, ?, 1)",
                     (T0, T0))  # fmt: skip
        conn.execute("DELETE FROM jobq_jobs WHERE id = 4")

    store = open_store()

    with raw(path) as conn:
        assert conn.execute(GET_VERSION).fetchone() == (SCHEMA_VERSION,) == (12,)
    shown = [(r.state, r.payload, r.parents, r.children, r.after_failure)
             for r in (store.get(i, T0) for i in (1, 2, 3)) if r]  # fmt: skip
    assert shown == [
        (JobState.PENDING, "due", (), (), None),
        (JobState.PENDING, {"n": 1}, (), (), None),
        (JobState.DEAD, "dead", (), (), None),
    ]
    assert store.stats() == StoreStats(2, 0, 1, delayed=1, waiting=0, retrying=1)
    # after job 1 (pending), dead job 3 and job 4 (gone): waits for 1 and 3
    (child,) = add(store, new_job("c", (1, 3, 4)))
    assert child == 5
    record = store.get(child, T0)
    assert record is not None
    assert (record.state, record.parents, record.waiting_on) == (
        JobState.WAITING, (1, 3, 4), (1, 3)
    )  # fmt: skip
    with pytest.raises(ValueError, match="no job 6 was ever added"):
        add(store, new_job("x", (1, 6)))
    assert store.revive(3, T0)
    claims = claim_all(store)
    assert [c.id for c in claims] == [1, 3]
    store.finish_many([Done(c, json.dumps(c.id)) for c in claims], None, T0)
    assert released == [(child, "t")]
    (last,) = claim_all(store)
    assert last.parents == ((1, "completed", "1"), (3, "completed", "3"),
                            (4, "completed", None))  # fmt: skip
    # the key index counts waiting jobs: a waiting job holds its key
    add(store, new_job("w", (child,), key="k1"))
    assert store.add([new_job("again", key="k1")], T0)[0].duplicate


# -- a crash inside the write that ends a parent -----------------------------------

CRASHER = """
import json, os, signal, sys
from jobq.stores import SqliteStore
from jobq.stores.base import Done, Signal

store = SqliteStore(sys.argv[1], lease_seconds=3600)
store.open(Signal(), dead_letter_limit=1000)
now = float(sys.argv[2])
(claim,) = store.claim_many(now, 1)
seen = []

def trace(sql):
    # die inside the finish's transaction: once the parent is ended, at the
    # n-th statement that releases one of its children
    if "UPDATE jobq_deps" in sql:
        seen.append(sql)
        if len(seen) == int(sys.argv[3]):
            os.kill(os.getpid(), signal.SIGKILL)

with store._connection() as conn:  # this thread's: the finish runs on it
    conn.set_trace_callback(trace)
store.finish_many([Done(claim, json.dumps("r"))], now + 3600, now)
print("finished", flush=True)
"""


@pytest.mark.parametrize("die_at", [1, 2, 3])
def test_a_crash_inside_a_parents_end_leaves_it_and_its_children_as_before(
    path: Path, open_store: OpenStore, die_at: int
) -> None:
    """SIGKILL between the statements that end a parent and release its
    children: the transaction holds them all, so the parent is still
    running (then recovered) and every child still waits; a second run
    ends it and releases them together."""
    store = open_store()
    (parent,) = add(store, new_job("p", max_attempts=2))
    children = add(store, *(new_job(n, (parent,)) for n in range(3)))
    store.close()

    crash = subprocess.run(
        [sys.executable, "-c", CRASHER, str(path), str(T0), str(die_at)],
        cwd=ROOT, capture_output=True, text=True, timeout=WAIT, check=False,
    )  # fmt: skip
    assert crash.returncode == -9, crash.stderr
    assert "finished" not in crash.stdout

    store = open_store()  # recovers the dead process's claim: pending again
    assert state_of(store, parent) is JobState.PENDING
    assert [state_of(store, child) for child in children] == [JobState.WAITING] * 3
    assert store.stats() == StoreStats(1, 0, 0, waiting=3)
    (again,) = claim_all(store)
    assert store.finish_many([Done(again, '"r"')], T0 + 60, T0) == [True]
    assert state_of(store, parent) is JobState.COMPLETED
    assert [c.id for c in claim_all(store)] == children


# -- wide workflows ------------------------------------------------------------------


def test_a_parent_with_10000_children_releases_them_in_its_finish(
    open_store: OpenStore, released: list[tuple[int, str | None]]
) -> None:
    store = open_store()
    (parent,) = add(store, new_job("p"))
    children = add(store, *(new_job(n, (parent,)) for n in range(10_000)))
    assert store.stats().waiting == 10_000
    (claim,) = claim_all(store)

    started = time.perf_counter()
    assert store.finish_many([Done(claim, '"r"')], None, T0 + 1) == [True]
    took = time.perf_counter() - started

    assert sorted(released) == [(child, "t") for child in children]
    assert store.stats() == StoreStats(10_000, 0, 0, waiting=0)
    assert took < 5.0, f"a parent's end took {took:.2f} s for 10,000 children"
    claims = claim_all(store, T0 + 1)
    assert [c.id for c in claims] == children
    assert {c.parents for c in claims} == {((parent, "completed", '"r"'),)}


def test_a_child_with_1000_parents_is_released_by_the_last(
    open_store: OpenStore, released: list[tuple[int, str | None]]
) -> None:
    store = open_store()
    parents = add(store, *(new_job(n) for n in range(1_000)))
    (child,) = add(store, new_job("c", tuple(reversed(parents))))
    claims = claim_all(store)
    assert len(claims) == 1_000
    for start in range(0, 999, 100):  # all but the last, 100 at a time
        batch = [c for c in claims[start : start + 100] if c.id != parents[-1]]
        store.finish_many([Done(c, str(c.id)) for c in batch], None, T0)
        assert released == []
    record = store.get(child, T0)
    assert record is not None
    assert (record.state, record.waiting_on) == (JobState.WAITING, (parents[-1],))

    store.finish_many([Done(claims[-1], None)], None, T0)

    assert released == [(child, "t")]
    (last,) = claim_all(store)
    expected = [(p, "completed", None if p == parents[-1] else str(p))
                for p in reversed(parents)]  # fmt: skip
    assert list(last.parents) == expected


# -- a job without parents or children pays nothing -----------------------------------


def test_a_job_without_parents_or_children_reads_no_workflow_rows(
    open_store: OpenStore,
) -> None:
    """Its add, claim, finish, failure and cancel run no statement on
    ``jobq_deps`` (the claim's and the end's own statements say it has
    none); a parent's finish does."""
    store = open_store()
    seen: list[str] = []
    with store._connection() as conn:  # this thread's: the calls run on it
        conn.set_trace_callback(seen.append)
    add(store, new_job("a", max_attempts=2), new_job("b"), new_job("c"))
    first, second = store.claim_many(T0, 2)
    store.finish_many([Done(first, '"r"')], None, T0)
    error = AttemptError("ValueError", "boom", "", T0)
    store.fail_many([Failure(second, error, None)], T0)
    store.cancel(3, T0, by="test", keep_until=T0 + 60)
    assert not [sql for sql in seen if "jobq_deps" in sql]

    (parent,) = add(store, new_job("p"))
    add(store, new_job("c", (parent,)))
    seen.clear()
    store.finish_many([Done(store.claim_many(T0, 1)[0], None)], None, T0)
    assert [sql for sql in seen if "jobq_deps" in sql]


def test_the_dead_letter_cap_and_delete_dead_cancel_waiting_children(
    open_store: OpenStore,
) -> None:
    store = open_store(dead_letter_limit=1)
    first, second = add(store, new_job("a"), new_job("b"))
    waits, runs = add(store, new_job("w", (first,)), new_job("r", (first,), "run"))
    (on_second,) = add(store, new_job("x", (second,)))
    error = AttemptError("ValueError", "boom", "", T0)
    claims = claim_all(store)
    store.fail_many([Failure(claims[0], error, None)], T0)  # first dies
    assert state_of(store, waits) is JobState.WAITING
    assert state_of(store, runs) is JobState.PENDING
    store.fail_many([Failure(claims[1], error, None)], T0)  # drops the first
    record = store.get(waits, T0)
    assert record is not None
    assert record.cancellation is not None
    assert record.cancellation.by == (
        f"parent job {first} was dropped from the dead-letter list"
    )
    assert store.delete_dead(second)  # at the queue's clock: now
    record = store.get(on_second, time.time())
    assert record is not None
    assert record.cancellation is not None
    assert record.cancellation.by == f"parent job {second} was deleted"


# -- query plans -------------------------------------------------------------------


def test_workflow_statements_use_their_indexes(
    open_store: OpenStore, path: Path
) -> None:
    store = open_store()
    parents = add(store, *(new_job(n) for n in range(200)))
    add(store, *(new_job(n, (p,)) for n, p in enumerate(parents)))
    with raw(path) as conn:
        plans = {
            name: "\n".join(
                row[-1]
                for row in conn.execute(
                    "EXPLAIN QUERY PLAN " + getattr(statements, name), params
                )
            )
            for name, params in [
                ("WAITING_CHILDREN", (1,)),
                ("CHILDREN", (1,)),
                ("PARENTS", (1,)),
                ("SET_SLOT", ("completed", None, 1, 0)),
                ("SLOT_SET", {"now": T0, "id": 1}),
                ("LIST_WAITING", (10,)),
            ]
        }
    waiting = plans["WAITING_CHILDREN"]
    assert "jobq_deps USING INDEX jobq_deps_parent (parent=?)" in waiting
    assert "USING COVERING INDEX jobq_deps_parent" in plans["CHILDREN"]
    assert "USING PRIMARY KEY (child=?)" in plans["PARENTS"]
    assert "USING PRIMARY KEY (child=? AND position=?)" in plans["SET_SLOT"]
    assert "USING INTEGER PRIMARY KEY" in plans["SLOT_SET"]
    assert "jobq_deps" in plans["LIST_WAITING"]
    assert not [line for text in plans.values() for line in text.splitlines()
                if line.startswith("SCAN") and "USING" not in line]  # fmt: skip


# -- a release wakes the other processes ------------------------------------------

FINISHER = """
import sys
from jobq.stores import SqliteStore
from jobq.stores.base import Done, Signal

store = SqliteStore(sys.argv[1])
store.open(Signal(), dead_letter_limit=1000)
(claim,) = store.claim_many(float(sys.argv[2]), 1)
store.finish_many([Done(claim, None)], None, float(sys.argv[2]))
store.close()
"""


def test_a_release_in_another_process_wakes_this_ones_idle_workers(
    open_store: OpenStore, path: Path
) -> None:
    """The child is claimable once another process finished its parent: its
    ring wakes an idle worker here at once, as an enqueue there would."""
    store = open_store()
    if not store.listening:
        pytest.skip("no wake-up socket here")
    (parent,) = add(store, new_job("p"))
    (child,) = add(store, new_job("c", (parent,)))
    signal = store._signal
    assert store._watcher is not None
    store._watcher.want_rings()  # as a claim does: the others ring it now
    with signal.lock:
        before = signal.generation
        signal.idle_workers += 1  # a worker waits here
        try:
            finisher = subprocess.Popen([sys.executable, "-c", FINISHER, str(path),
                                         str(T0)], cwd=ROOT)  # fmt: skip
            deadline = time.monotonic() + WAIT
            while signal.generation == before and time.monotonic() < deadline:
                signal.work.wait(deadline - time.monotonic())
        finally:
            signal.idle_workers -= 1
    assert finisher.wait(WAIT) == 0
    assert signal.generation > before, "no ring came for the released child"
    assert [c.id for c in store.claim_many(T0, 5)] == [child]
