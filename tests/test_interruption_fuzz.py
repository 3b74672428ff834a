"""The standing test of safe interruption: handlers of a mixed workload are
interrupted at random points, many times, on every store, and after each
round jobq and the app are whole.

The workload: pure-Python loops, loops that log, loops that enqueue on the
queue's own store, loops over an sqlite3 connection of their own and over a
psycopg one, ``threading.Lock`` and ``queue.Queue`` sections,
``time.sleep``, and now and then a handler that never returns (abandoned).
Each job has a random limit of 2-30 ms and one attempt, so it ends dead
(interrupted) or completed (it finished first), recorded once.

After each round: every worker is alive (four jobs meet at a barrier), no
job is left running and every job's attempt was recorded exactly once, the
store takes a write from another connection within a second (and from
another process at the end), every logging lock is free, and
``stats().abandoned`` counts the handlers given up on that are still
alive: every one that never returns, and at most those held in C code past
the grace (they return later). The hangs add up over the rounds, so the
bound on abandoned threads (``max_abandoned``) is lifted here.

CI runs ``INTERRUPTIONS`` (150) per store and Python; set
``JOBQ_INTERRUPTIONS=5000`` to run the full count by hand.
"""

from __future__ import annotations

import functools
import io
import logging
import os
import queue as stdlib_queue
import random
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from postgres_url import POSTGRES_URL

import jobq
from jobq.stores import JsonFileStore, MemoryStore, PostgresStore, SqliteStore, Store

MakeQueue = Callable[..., jobq.JobQueue[Any]]
INTERRUPTIONS = int(os.environ.get("JOBQ_INTERRUPTIONS", "150"))
ROUND = 40  # jobs per round
WORKERS = 4
GRACE = 1.0  # for the handlers that never return
WAIT = 60.0
ROOT = Path(__file__).resolve().parents[1]

KINDS = ["loop", "log", "enqueue", "sqlite", "psycopg", "lock", "sleep"]

app_log = logging.getLogger("tests.fuzz.app")

#: ``sqlite3.connect`` for connections the test closes from its own thread.
_connect = functools.partial(sqlite3.connect, check_same_thread=False)


class Workload:
    """The handlers, and what they saw."""

    def __init__(self, tmp_path: Path) -> None:
        #: Attempts begun, by job id: counted from the ``started`` events
        #: (jobq's code: a limit may land at the handler's first line).
        self.starts: Counter[int] = Counter()
        self.hung = threading.Event()  # set at the end: the hung handlers return
        self.hung_threads: list[threading.Thread] = []
        self.barrier = threading.Barrier(WORKERS + 1)
        self.database = tmp_path / "app.db"
        setup = sqlite3.connect(self.database)
        setup.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
        setup.commit()
        setup.close()
        self._local = threading.local()
        #: Every connection made, so that none is lost to an interruption.
        self.connections: list[sqlite3.Connection | psycopg.Connection[Any]] = []

    def run(self, job: jobq.Job[Any], child: jobq.Task[..., Any]) -> None:
        kind, seed = job.payload
        rng = random.Random(seed)
        end = time.perf_counter() + rng.uniform(0.0, 0.06)  # may finish first
        if kind == "barrier":
            self.barrier.wait(WAIT)
        elif kind == "hang":
            self.hung_threads.append(threading.current_thread())
            self.hung.wait()
        elif kind == "loop":
            total = 0
            while time.perf_counter() < end:
                for i in range(100):
                    total += i % 7
        elif kind == "log":
            while time.perf_counter() < end:
                app_log.info("working on %s", job.id)
        elif kind == "enqueue":
            while time.perf_counter() < end:
                child.enqueue(job.id)
        elif kind == "sqlite":
            connection = self._sqlite()
            while time.perf_counter() < end:
                with connection:  # rolled back if interrupted
                    connection.execute("INSERT INTO t VALUES (?)", (job.id,))
        elif kind == "psycopg":
            connection = self._postgres()
            while time.perf_counter() < end:
                connection.execute("SELECT 1").fetchone()
        elif kind == "lock":
            lock, items = threading.Lock(), stdlib_queue.Queue[int]()
            while time.perf_counter() < end:
                with lock:
                    items.put(1)
                    items.get()
        elif kind == "sleep":
            while time.perf_counter() < end:
                time.sleep(rng.uniform(0.0, 0.004))

    def _sqlite(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "sqlite", None)
        if connection is None:
            # One line: a limit lands at the start of a line, never between
            # the connect and the append (a connection lost, unclosed).
            self.connections.append(connection := _connect(self.database))
            self._local.sqlite = connection
        return connection

    def _postgres(self) -> psycopg.Connection[Any]:
        connection: psycopg.Connection[Any] | None = getattr(
            self._local, "postgres", None
        )
        if connection is None or connection.broken:
            self.connections.append(connection := psycopg.connect(POSTGRES_URL))
            connection.autocommit = True
            self._local.postgres = connection
        return connection


@pytest.fixture
def logged() -> Iterator[logging.Handler]:
    """The app logs at INFO to a handler of its own, as apps do."""
    handler = logging.StreamHandler(io.StringIO())
    app_log.addHandler(handler)
    app_log.setLevel(logging.INFO)
    yield handler
    app_log.removeHandler(handler)


def _another_store(store: Store) -> Store | None:
    """A second store on the same place (its own connection), or ``None``
    where one process holds the queue."""
    if isinstance(store, SqliteStore):
        return SqliteStore(store.path, busy_timeout=1.0)
    if isinstance(store, PostgresStore):
        return PostgresStore(
            store.conninfo, schema=store.schema, queue=store.queue, auto_migrate=False
        )
    assert isinstance(store, MemoryStore | JsonFileStore)
    return None


def _all_in(jobs: list[int], ended: Counter[int]) -> bool:
    return all(ended[job] for job in jobs)


def _logging_locks_are_free(handlers: list[logging.Handler]) -> None:
    module_lock = logging._lock  # type: ignore[attr-defined]
    assert module_lock.acquire(timeout=1)
    module_lock.release()
    for handler in handlers:
        if handler.lock is None:  # one that needs none
            continue
        assert handler.lock.acquire(timeout=1)
        handler.lock.release()


# argv: store kind and place; enqueues one job with a second's patience.
ENQUEUE_ELSEWHERE = r"""
import sys
import jobq
from jobq.stores import PostgresStore, SqliteStore

if sys.argv[1] == "sqlite":
    store = SqliteStore(sys.argv[2], busy_timeout=1.0)
else:
    store = PostgresStore(sys.argv[2], schema=sys.argv[3], queue=sys.argv[4])
with jobq.JobQueue(lambda job: None, store=store) as queue:
    queue.enqueue(["child", 0])
"""


def _enqueue_from_another_process(store: Store) -> None:
    if isinstance(store, SqliteStore):
        place = ["sqlite", store.path]
    elif isinstance(store, PostgresStore):
        place = ["postgres", store.conninfo, store.schema, store.queue]
    else:
        return
    subprocess.run(
        [sys.executable, "-c", ENQUEUE_ELSEWHERE, *place],
        check=True,
        timeout=60,
        cwd=ROOT,
        capture_output=True,
    )


@pytest.mark.timeout(1800)
def test_random_interruptions_never_break_jobq_or_the_app(
    make_queue: MakeQueue, store_kind: str, tmp_path: Path, logged: logging.Handler
) -> None:
    rng = random.Random(f"{store_kind}-{INTERRUPTIONS}")
    workload = Workload(tmp_path)
    queue = make_queue(
        lambda job: workload.run(job, child),
        max_attempts=1,
        timeout_grace=GRACE,
        base_delay=0,
        max_abandoned=10_000,
    )
    ended: Counter[int] = Counter()  # outcomes recorded, by job id
    told = threading.Condition()

    def note(event: jobq.Event) -> None:
        with told:
            ended[event.job_id] += 1
            told.notify_all()

    queue.subscribe(note, ["succeeded", "dead"])
    queue.subscribe(lambda event: workload.starts.update([event.job_id]), "started")

    @queue.task(name="child")
    def child(parent: int) -> None: ...

    queue.start(workers=WORKERS)
    interrupted = hangs = abandoned = rounds = 0
    try:
        while interrupted < INTERRUPTIONS:
            rounds += 1
            jobs = [
                queue.enqueue(
                    [rng.choice(KINDS), rng.random()], timeout=rng.uniform(0.002, 0.03)
                ).id
                for _ in range(ROUND)
            ]
            if rounds % 4 == 1:  # now and then a handler that never returns
                jobs.append(queue.enqueue(["hang", 0], timeout=0.01).id)
                hangs += 1
            assert queue.join(WAIT), f"round {rounds}: {queue.stats()}"

            # Every job's attempt began once and was recorded once.
            records = {job: queue.get(job) for job in jobs}
            assert all(workload.starts[job] == 1 for job in jobs), rounds
            with told:  # events follow the store's write
                assert told.wait_for(functools.partial(_all_in, jobs, ended), WAIT)
            assert all(ended[job] == 1 for job in jobs), rounds
            for job, record in records.items():
                if record is None:  # completed (no result kept)
                    continue
                assert record.state is jobq.JobState.DEAD, (job, record)
                assert record.attempts == 1
                assert [e.type for e in record.errors] == ["jobq.errors.JobTimeout"]
                interrupted += 1
                # Given up on: a hung handler, or one held in C code past
                # the grace (an sqlite3 call waiting for the file's lock).
                abandoned += "did not return within" in record.errors[0].message
            for record in queue.dead_jobs():
                queue.delete_dead(record.id)

            # Nothing running, every worker alive, the abandoned counted.
            stats = queue.stats()
            assert (stats.running, stats.pending) == (0, 0), (rounds, stats)
            assert hangs <= stats.abandoned <= abandoned, (rounds, stats)
            queue.enqueue_many([["barrier", 0]] * WORKERS, timeout=WAIT)
            workload.barrier.wait(WAIT)
            assert queue.join(WAIT)

            # The store takes a write from elsewhere within a second; every
            # logging lock is free.
            other = _another_store(queue.store)
            if other is not None:
                with jobq.JobQueue(lambda job: None, store=other) as elsewhere:
                    started = time.monotonic()
                    elsewhere.enqueue(["child", 0])
                    assert time.monotonic() - started < 1.0
                assert queue.join(WAIT)
            _logging_locks_are_free([logged, *logging.getLogger().handlers])
        _enqueue_from_another_process(queue.store)
        assert queue.join(WAIT)
    finally:
        workload.hung.set()
        for thread in workload.hung_threads:
            thread.join(WAIT)
        queue.close(timeout=WAIT)
        for connection in workload.connections:
            connection.close()
    assert interrupted >= INTERRUPTIONS
    sys.stderr.write(
        f"\n{store_kind}: {interrupted} interruptions in {rounds} rounds, "
        f"{abandoned} abandoned ({hangs} that never return)\n"
    )
