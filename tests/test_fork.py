"""A queue used before ``os.fork()`` (gunicorn ``--preload``, multiprocessing).

The child gets working threads of its own on first use, never the parent's
lock, connections or dead threads, and never runs silently dead:

- a child of a started queue starts workers on its first call (enqueue, join)
  without calling ``start``; a child of a stopped (or never started) queue
  starts none by itself;
- a lock that another thread of the parent held at the moment of the fork (the
  queue's condition, its lifecycle lock, the store's lock) does not deadlock
  the child;
- the parent goes on working after the child exits;
- SQLite: parent and children share the file, and every job runs exactly
  once overall, a job the parent was running at the fork included. The child
  inherits none of SQLite's per-process state for the file: a write
  transaction of a parent thread at the fork does not lock it out, forks at
  random moments of a busy parent never hang it, and what it commits
  survives its crash after the parent closed (the WAL is not deleted under
  it);
- JSON: one owner. A child of a parent that opened the file reads it, gets
  ``StoreLocked`` on changes while the parent holds it, and takes over (its
  workers included) once the parent closed it or died; a child that never
  touches the store does not keep the parent's lock alive after the parent
  died.

Children report through pipes (JSON lines) and end with ``os._exit``; the
parent waits on the pipe with a deadline and kills a child that hangs, so a
deadlock fails the test instead of hanging it. Handlers record runs with
``list.append`` (atomic), never with a lock a parent's thread might hold at
the fork. Nothing waits with ``time.sleep``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import jobq
from jobq.stores import SqliteStore
from jobq.stores.jsonfile.fileio import OwnerLock

ROOT = Path(__file__).resolve().parents[1]
WAIT = 30.0  # seconds; a cap so that a broken (deadlocked) child fails, never hangs

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
    # 3.12+ warns when a process with threads forks; these tests fork on purpose.
    pytest.mark.filterwarnings(
        r"ignore:This process \(pid=\d+\) is multi-threaded:DeprecationWarning"
    ),
]

FORK_STORES = ["memory", "json", "sqlite"]

MakeQueue = Callable[..., jobq.JobQueue[Any]]
Report = dict[str, Any]


# -- forking and talking to the child ------------------------------------------------


class ChildFailed(AssertionError):
    pass


class Channel:
    """The child's side: wait for the parent's go, say something to it."""

    def __init__(self, go: int, out: int) -> None:
        self._go = go
        self._out = out

    def wait(self) -> None:
        """Block until the parent says go (or is gone)."""
        os.read(self._go, 1)

    def say(self, message: Any) -> None:
        data = (json.dumps(message) + "\n").encode()
        while data:
            data = data[os.write(self._out, data) :]


class Forked:
    """A forked child running ``body(channel)``; what it returns is its report.

    The child never returns into pytest: it ends with ``os._exit``. Anything it
    raises comes back as a traceback and fails the test in the parent.
    """

    def __init__(self, body: Callable[[Channel], Report]) -> None:
        go_read, go_write = os.pipe()
        out_read, out_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            status = 70
            try:
                os.close(go_write)
                os.close(out_read)
                channel = Channel(go_read, out_write)
                try:
                    message: Any = {"report": body(channel)}
                except BaseException:  # reported to the parent
                    message = {"error": traceback.format_exc()}
                channel.say(message)
                status = 0
            finally:
                os._exit(status)
        os.close(go_read)
        os.close(out_write)
        self.pid = pid
        self._go = go_write
        self._out = out_read
        self._buffer = b""
        self._status: int | None = None

    def go(self) -> None:
        os.write(self._go, b"g")

    def hear(self, timeout: float = WAIT) -> Any:
        """The child's next message; fails the test if none comes in time."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([self._out], [], [], max(remaining, 0))
            if not ready:
                self.kill()
                raise ChildFailed(f"the child said nothing for {timeout} s: hung")
            chunk = os.read(self._out, 65536)
            if not chunk:
                status = self.wait()
                raise ChildFailed(f"the child ended (status {status}) without a word")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message = json.loads(line)
        if isinstance(message, dict) and "error" in message:
            self.wait()
            raise ChildFailed("the child raised:\n" + message["error"])
        return message

    def report(self, timeout: float = WAIT) -> Report:
        """The child's final report; also waits for it to exit with status 0."""
        message = self.hear(timeout)
        assert isinstance(message, dict), message
        assert "report" in message, message
        assert self.wait() == 0
        report: Report = message["report"]
        return report

    def wait(self) -> int:
        if self._status is None:
            _, status = os.waitpid(self.pid, 0)
            self._status = os.waitstatus_to_exitcode(status)
        return self._status

    def kill(self) -> None:
        if self._status is None:
            os.kill(self.pid, signal.SIGKILL)
            self.wait()

    def close(self) -> None:
        self.kill()
        for fd in (self._go, self._out):
            with contextlib.suppress(OSError):
                os.close(fd)


@pytest.fixture
def fork() -> Iterator[Callable[[Callable[[Channel], Report]], Forked]]:
    """Forks children; any still alive at the end of the test is killed."""
    children: list[Forked] = []

    def start(body: Callable[[Channel], Report]) -> Forked:
        child = Forked(body)
        children.append(child)
        return child

    yield start
    for child in children:
        child.close()


Fork = Callable[[Callable[[Channel], Report]], Forked]


# -- what handlers record -------------------------------------------------------------


class Runs:
    """Each run as (job id, payload, pid, thread name): ``list.append`` is
    atomic, so no lock that a parent's thread could hold at the fork."""

    def __init__(self) -> None:
        self.runs: list[tuple[int, Any, int, str]] = []

    def __call__(self, job: jobq.Job[Any]) -> None:
        self.runs.append(
            (job.id, job.payload, os.getpid(), threading.current_thread().name)
        )

    def here(self) -> list[list[Any]]:
        """The runs in this process (a child's copy starts with the parent's)."""
        return [list(run) for run in self.runs if run[2] == os.getpid()]


def worker_threads() -> list[str]:
    """Names of this process's live jobq worker threads."""
    return [
        t.name
        for t in threading.enumerate()
        if t.name.startswith("jobq-worker") and t.is_alive()
    ]


def step_aside(queue: jobq.JobQueue[Any], store_kind: str) -> None:
    """What the parent does so that the child's jobs run in the child.

    Memory: nothing (the child has its own copy). SQLite: stop the workers
    (the file is shared; the parent's idle workers could take the child's
    job). JSON: close (the child can own the file only after that).
    """
    if store_kind == "sqlite":
        queue.stop()
    elif store_kind == "json":
        queue.close()


def resume(
    queue: jobq.JobQueue[Any],
    store_kind: str,
    make_queue: MakeQueue,
    handler: Callable[[jobq.Job[Any]], Any],
) -> jobq.JobQueue[Any]:
    """The parent's queue to go on with after the child exited."""
    if store_kind == "json":  # closed: a new queue on the same file
        return make_queue(handler).start(workers=2)
    return queue.start(workers=2)


def assert_parent_still_works(queue: jobq.JobQueue[Any], runs: Runs) -> None:
    job = queue.enqueue("parent, after the child")
    assert queue.join(timeout=WAIT)
    [run] = [r for r in runs.runs if r[1] == "parent, after the child"]
    assert run[0] == job.id
    assert run[2] == os.getpid()
    assert run[3].startswith("jobq-worker")


def child_enqueues_and_joins(queue: jobq.JobQueue[Any], runs: Runs) -> Report:
    """In the child: enqueue, join, and say where the job ran."""
    job = queue.enqueue("child")
    joined = queue.join(timeout=WAIT)
    report = {
        "pid": os.getpid(),
        "joined": joined,
        "job": job.id,
        "pool_running": queue._pool.running,
        "pool_threads_alive": all(t.is_alive() for t in queue._pool._threads),
        "pool_threads": len(queue._pool._threads),
        "workers": worker_threads(),
    }
    queue.close(timeout=WAIT)
    return report | {"runs": runs.here()}  # read once the workers stopped


def assert_ran_on_a_worker_of_the_child(report: Report, workers: int = 2) -> None:
    assert report["joined"] is True
    [run] = [r for r in report["runs"] if r[0] == report["job"]]
    _, payload, pid, thread = run
    assert (payload, pid) == ("child", report["pid"])
    assert thread.startswith("jobq-worker")
    assert report["pool_running"] is True
    assert report["pool_threads"] == workers
    assert report["pool_threads_alive"] is True
    assert len(report["workers"]) == workers


# -- a started parent: the child gets workers on first use ----------------------------


@pytest.mark.parametrize("store_kind", FORK_STORES)
def test_a_child_of_a_started_queue_runs_jobs_on_workers_of_its_own(
    store_kind: str, make_queue: MakeQueue, fork: Fork
) -> None:
    runs = Runs()
    queue = make_queue(runs).start(workers=2)
    queue.enqueue("parent, before the fork")
    assert queue.join(timeout=WAIT)
    parent_signal = id(queue._signal)

    def child(channel: Channel) -> Report:
        # Nothing of the parent's runtime came along: a fresh condition, a
        # pool with no (dead) threads, not started until first use.
        fresh = {
            "new_signal": id(queue._signal) != parent_signal,
            "threads_before_use": len(queue._pool._threads),
            "workers_before_use": worker_threads(),
        }
        channel.wait()
        return fresh | child_enqueues_and_joins(queue, runs)  # no start() call

    forked = fork(child)
    step_aside(queue, store_kind)
    forked.go()
    report = forked.report()

    assert report["new_signal"] is True
    assert report["threads_before_use"] == 0
    assert report["workers_before_use"] == []
    assert_ran_on_a_worker_of_the_child(report)
    assert not [r for r in runs.runs if r[1] == "child"]  # never in the parent
    assert_parent_still_works(resume(queue, store_kind, make_queue, runs), runs)


@pytest.mark.parametrize(
    ("store_kind", "lock"),
    [
        ("memory", "signal"),
        ("memory", "lifecycle"),
        ("json", "signal"),
        ("json", "lifecycle"),
        ("json", "journal"),
        ("json", "compaction"),
        ("sqlite", "signal"),
        ("sqlite", "lifecycle"),
        ("sqlite", "store"),
    ],
)
def test_a_lock_held_by_a_parent_thread_at_the_fork_does_not_deadlock_the_child(
    store_kind: str, lock: str, make_queue: MakeQueue, fork: Fork
) -> None:
    runs = Runs()
    queue = make_queue(runs).start(workers=2)
    queue.enqueue("parent, before the fork")
    assert queue.join(timeout=WAIT)
    held_lock: Any = {
        "signal": queue._signal.lock,  # memory, JSON: the store's lock too
        "lifecycle": queue._lifecycle,
        "journal": getattr(queue.store, "_journal_lock", None),  # JSON
        "compaction": getattr(queue.store, "_compact_lock", None),  # JSON
        # SQLite: the store's own lock (it holds it only briefly, and never
        # waits for its fork guard while holding it).
        "store": getattr(queue.store, "_lock", None),
    }[lock]
    assert held_lock is not None
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with held_lock:
            held.set()
            release.wait(WAIT)

    def child(channel: Channel) -> Report:
        channel.wait()
        return child_enqueues_and_joins(queue, runs)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(WAIT)
    try:
        forked = fork(child)
    finally:
        release.set()
        holder.join()
    step_aside(queue, store_kind)
    forked.go()

    assert_ran_on_a_worker_of_the_child(forked.report())
    assert_parent_still_works(resume(queue, store_kind, make_queue, runs), runs)


# -- a parent that did not start (or stopped): the child starts nothing by itself


@pytest.mark.parametrize("parent", ["stopped", "never started"])
@pytest.mark.parametrize("store_kind", FORK_STORES)
def test_a_child_of_a_queue_that_is_not_running_starts_no_workers_by_itself(
    store_kind: str, parent: str, make_queue: MakeQueue, fork: Fork
) -> None:
    runs = Runs()
    queue = make_queue(runs)
    if parent == "stopped":
        queue.start(workers=2)
        queue.enqueue("parent, before the fork")
        assert queue.join(timeout=WAIT)
        queue.stop()
    else:
        assert queue.run_pending() == 0  # opened, never started

    def child(channel: Channel) -> Report:
        channel.wait()
        job = queue.enqueue("child")
        report: Report = {
            "pid": os.getpid(),
            "pending": queue.stats().pending,
            "workers_after_enqueue": worker_threads(),
            "pool_running": queue._pool.running,
            "joined_at_once": queue.join(timeout=0),
            "ran_here": queue.run_pending(),  # the calling thread runs it
            "runs": runs.here(),
            "job": job.id,
        }
        queue.start(workers=1)  # an explicit start works
        later = queue.enqueue("child, started")
        report["joined"] = queue.join(timeout=WAIT)
        report["later"] = later.id
        report["runs"] = runs.here()
        report["workers"] = worker_threads()
        queue.close(timeout=WAIT)
        return report

    forked = fork(child)
    if store_kind == "json":
        queue.close()
    forked.go()
    report = forked.report()

    assert report["pending"] == 1
    assert report["workers_after_enqueue"] == []
    assert report["pool_running"] is False
    assert report["joined_at_once"] is False
    assert report["ran_here"] == 1
    by_id = {r[0]: r for r in report["runs"]}
    assert by_id[report["job"]][2:] == [report["pid"], "MainThread"]
    assert report["joined"] is True
    assert by_id[report["later"]][1] == "child, started"
    assert by_id[report["later"]][3].startswith("jobq-worker")
    assert len(report["workers"]) == 1


@pytest.mark.parametrize("store_kind", FORK_STORES)
def test_a_queue_built_before_the_fork_and_never_used_works_in_the_child(
    store_kind: str, make_queue: MakeQueue, fork: Fork
) -> None:
    """gunicorn ``--preload`` with a queue built at import and started in
    ``post_fork``: the child opens the store itself."""
    runs = Runs()
    queue = make_queue(runs)  # opens nothing

    def child(channel: Channel) -> Report:
        channel.wait()
        queue.start(workers=2)
        return child_enqueues_and_joins(queue, runs)

    forked = fork(child)
    forked.go()
    assert_ran_on_a_worker_of_the_child(forked.report())

    # The parent opens only now (JSON: the child released the file at exit);
    # memory: the child's job was in the child's copy only.
    stats = queue.stats()
    assert (stats.pending, stats.running, stats.dead) == (0, 0, 0)
    assert_parent_still_works(queue.start(workers=2), runs)


# -- SQLite: one file, parent and children -------------------------------------------


def test_sqlite_a_job_running_in_the_parent_at_the_fork_stays_the_parents(
    tmp_path: Path, fork: Fork
) -> None:
    """The parent's claim lives on (its process lives): the child neither
    recovers nor reruns it, and its ``join`` waits for it."""
    runs = Runs()
    started, release = threading.Event(), threading.Event()

    def handler(job: jobq.Job[Any]) -> None:
        runs(job)
        if job.payload == "slow":
            started.set()
            release.wait(WAIT)

    queue = jobq.JobQueue(handler, store=SqliteStore(tmp_path / "jobs.db"))
    try:
        queue.start(workers=2)
        slow = queue.enqueue("slow")
        assert started.wait(WAIT)

        def child(channel: Channel) -> Report:
            stats = queue.stats()
            record = queue.get(slow)
            channel.say(
                {
                    "running": stats.running,
                    "pending": stats.pending,
                    "state": None if record is None else str(record.state),
                    "attempts": None if record is None else record.attempts,
                }
            )
            channel.wait()
            mine = queue.enqueue("child")
            joined = queue.join(timeout=WAIT)
            queue.close(timeout=WAIT)
            return {"joined": joined, "mine": mine.id, "runs": runs.here()}

        forked = fork(child)
        seen = forked.hear()
        release.set()
        forked.go()
        report = forked.report()
        assert queue.join(timeout=WAIT)
    finally:
        release.set()
        queue.close(timeout=WAIT)

    assert seen == {"running": 1, "pending": 0, "state": "running", "attempts": 0}
    assert report["joined"] is True
    ran = Counter(r[0] for r in runs.runs) + Counter(r[0] for r in report["runs"])
    assert ran == {slow.id: 1, report["mine"]: 1}
    assert [r[2] for r in runs.runs if r[0] == slow.id] == [os.getpid()]


def test_sqlite_gunicorn_preload_three_children_run_every_job_exactly_once(
    tmp_path: Path, fork: Fork
) -> None:
    """The master builds and starts the queue, then forks three workers; each
    enqueues and processes (its workers start on first use), and the master's
    own workers keep running. Every job runs exactly once overall."""
    per_child = 100
    runs = Runs()
    queue = jobq.JobQueue(runs, store=SqliteStore(tmp_path / "jobs.db"))
    try:
        queue.start(workers=2)
        before = [e.id for e in queue.enqueue_many([f"master {n}" for n in range(20)])]
        assert queue.join(timeout=WAIT)

        def child(channel: Channel) -> Report:
            channel.wait()
            ids = [queue.enqueue(f"child {os.getpid()} {n}").id
                   for n in range(per_child)]  # fmt: skip
            joined = queue.join(timeout=WAIT)
            report = {
                "pid": os.getpid(),
                "enqueued": ids,
                "joined": joined,
                "pool_running": queue._pool.running,
                "workers": worker_threads(),
            }
            # Another child may enqueue after this join returned, and these
            # workers may run some of that: read the runs once they stopped.
            queue.close(timeout=WAIT)
            return report | {"runs": runs.here()}

        children = [fork(child) for _ in range(3)]
        for forked in children:
            forked.go()
        reports = [forked.report() for forked in children]
        assert queue.join(timeout=WAIT)
        stats = queue.stats()
    finally:
        queue.close(timeout=WAIT)

    assert [r["joined"] for r in reports] == [True] * 3
    assert [r["pool_running"] for r in reports] == [True] * 3
    assert [len(r["workers"]) for r in reports] == [2] * 3
    enqueued = before + [job_id for r in reports for job_id in r["enqueued"]]
    assert len(set(enqueued)) == len(enqueued) == 20 + 3 * per_child
    ran = Counter(run[0] for run in runs.runs)  # the master's, before and after
    for r in reports:
        ran.update(run[0] for run in r["runs"])
    assert ran == Counter(enqueued)  # each exactly once, nothing else
    assert sum(len(r["runs"]) for r in reports) > 0  # the children did work
    assert (stats.pending, stats.running, stats.dead) == (0, 0, 0)


#: Events set just before any ``os.fork`` of this process: this hook runs
#: before jobq's own (at-fork "before" hooks run newest first), so a test can
#: let a thread go on exactly when a fork begins. Empty: it does nothing.
_set_at_fork: list[threading.Event] = []


def _set_events_at_fork() -> None:
    for event in _set_at_fork:
        event.set()


os.register_at_fork(before=_set_events_at_fork)


def test_sqlite_a_write_transaction_of_a_parent_thread_does_not_lock_the_child_out(
    tmp_path: Path, fork: Fork
) -> None:
    """SQLite keeps this process's locks on a file in process-wide tables that
    a child inherits: forked while a parent thread holds the write lock, the
    child would see it held for ever ("database is locked"). The fork waits
    until no thread is inside the store, and the child inherits no state."""
    store = SqliteStore(tmp_path / "jobs.db", busy_timeout=2)
    queue = jobq.JobQueue(Runs(), store=store)
    in_transaction, commit = threading.Event(), threading.Event()

    def write_slowly() -> None:
        with store._write() as conn:
            conn.execute("UPDATE jobq_meta SET value = value")
            in_transaction.set()
            commit.wait(WAIT)  # until the fork begins

    def child(channel: Channel) -> Report:
        job = queue.enqueue("child")
        report = {"job": job.id, "pending": queue.stats().pending}
        queue.close()
        return report

    try:
        queue.enqueue("parent")
        writer = threading.Thread(target=write_slowly)
        writer.start()
        assert in_transaction.wait(WAIT)
        _set_at_fork.append(commit)
        try:
            forked = fork(child)
        finally:
            _set_at_fork.remove(commit)
            commit.set()
            writer.join()
        report = forked.report()
        assert queue.enqueue("parent again").id == report["job"] + 1
    finally:
        queue.close()
    assert report == {"job": 2, "pending": 2}


def test_sqlite_forks_while_parent_threads_are_busy_in_the_store_never_hang_a_child(
    tmp_path: Path, fork: Fork
) -> None:
    """Forks at random moments of a busy parent (producers and workers
    inside SQLite all the time): a fork inside a SQLite call could leave one
    of SQLite's own mutexes locked in the child, and it would hang."""
    queue = jobq.JobQueue(Runs(), store=SqliteStore(tmp_path / "jobs.db"))
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            queue.enqueue("parent")

    def child(channel: Channel) -> Report:
        queue.stop()  # only the store is the point here: no workers
        job = queue.enqueue("child")
        stats = queue.stats()
        queue.close(timeout=WAIT)
        return {"job": job.id, "pending": stats.pending}

    queue.start(workers=4)
    producers = [threading.Thread(target=produce) for _ in range(2)]
    for producer in producers:
        producer.start()
    try:
        for _ in range(15):
            report = fork(child).report(timeout=10)
            assert report["job"] > 0
            assert report["pending"] >= 0
    finally:
        stop.set()
        for producer in producers:
            producer.join()
        queue.close(timeout=WAIT)


def test_sqlite_a_childs_enqueue_survives_its_crash_after_the_parent_closed(
    tmp_path: Path, fork: Fork
) -> None:
    """The child's connection must hold a lock of its own on the file.

    Sharing the parent's inherited lock table it took none: once the parent
    closed, the last process to close the file deleted the WAL under the
    child, and what the child committed next was lost when it died."""
    path = tmp_path / "jobs.db"
    queue = jobq.JobQueue[Any](store=SqliteStore(path))
    queue.enqueue("parent")

    def child(channel: Channel) -> Report:
        queue.stats()  # the child's own connection, opened beside the parent's
        channel.say("open")
        channel.wait()  # the parent closed, another process came and went
        job = queue.enqueue("child")
        channel.say({"job": job.id})
        os._exit(0)  # a crash: every change that returned must survive it

    forked = fork(child)
    assert forked.hear() == "open"
    queue.close()
    other = jobq.JobQueue[Any](store=SqliteStore(path))  # opens and closes last
    assert other.stats().pending == 1
    other.close()
    forked.go()
    job = forked.hear()["job"]
    assert forked.wait() == 0

    after = jobq.JobQueue[Any](store=SqliteStore(path))
    try:
        record = after.get(job)
        assert record is not None
        assert record.payload == "child"
        assert after.stats().pending == 2
    finally:
        after.close()


# -- JSON: one owner ------------------------------------------------------------------


@pytest.mark.parametrize("store_kind", ["json"])
def test_json_a_child_is_locked_out_while_the_parent_owns_the_file_then_takes_over(
    make_queue: MakeQueue, fork: Fork
) -> None:
    runs = Runs()
    started, release = threading.Event(), threading.Event()

    def handler(job: jobq.Job[Any]) -> None:
        runs(job)
        if job.payload == "slow":
            started.set()
            release.wait(WAIT)

    queue = make_queue(handler).start(workers=2)
    done = queue.enqueue("done before the fork")
    assert queue.join(timeout=WAIT)
    slow = queue.enqueue("slow")
    assert started.wait(WAIT)

    def child(channel: Channel) -> Report:
        stats = queue.stats()  # reading works without the lock
        try:
            queue.enqueue("child, while the parent owns the file")
        except jobq.StoreLocked as exc:
            locked: Any = exc.owner_pid
        else:
            locked = "not locked"
        channel.say(
            {
                "stats": [stats.pending, stats.running, stats.dead],
                "locked": locked,
                "workers": worker_threads(),
            }
        )
        channel.wait()  # the parent closed the file
        return child_enqueues_and_joins(queue, runs)

    forked = fork(child)
    seen = forked.hear()
    release.set()
    queue.close(timeout=WAIT)
    forked.go()
    report = forked.report()

    assert seen == {"stats": [0, 1, 0], "locked": os.getpid(), "workers": []}
    # Its workers started once it could own the file: not silently dead.
    assert_ran_on_a_worker_of_the_child(report)
    assert [r[1] for r in runs.runs] == ["done before the fork", "slow"]
    assert done.id < slow.id < report["job"]  # ids go on from the file

    after = make_queue(runs)  # the same file
    stats = after.stats()
    assert (stats.pending, stats.running, stats.dead) == (0, 0, 0)
    assert_parent_still_works(after.start(workers=2), runs)


JSON_PARENT = r"""
import json, os, sys, threading, warnings
import jobq

warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
runs = []
queue = jobq.JobQueue(lambda job: runs.append((job.id, os.getpid(),
                      threading.current_thread().name)), store=sys.argv[1])
queue.start(workers=2)
queue.enqueue("parent")
assert queue.join(timeout=30)
pid = os.fork()
if pid == 0:  # the child touches nothing until the parent is gone
    status = 1
    try:
        print(os.getpid(), flush=True)  # after the fork hooks ran
        sys.stdin.readline()
        job = queue.enqueue("child")
        joined = queue.join(timeout=30)
        ran = [r for r in runs if r[0] == job.id and r[1] == os.getpid()]
        print(json.dumps({"joined": joined, "ran": ran}), flush=True)
        queue.close(timeout=30)
        status = 0
    finally:
        os._exit(status)
sys.stdin.readline()  # killed here
"""


def test_json_a_forked_child_does_not_keep_a_dead_parents_lock_and_can_take_over(
    tmp_path: Path,
) -> None:
    """The child inherits the parent's ``flock`` descriptor; kept open, it
    would hold the lock after the parent died, though the child never used
    the store. It must be dropped at the fork."""
    path = tmp_path / "jobs.json"
    with subprocess.Popen(
        [sys.executable, "-c", JSON_PARENT, str(path)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as parent:
        assert parent.stdout is not None
        assert parent.stdin is not None
        forked_pid = int(parent.stdout.readline())
        try:
            parent.send_signal(signal.SIGKILL)
            parent.wait(timeout=WAIT)

            lock = OwnerLock(str(path))
            lock.acquire()  # StoreLocked if the child kept the dead parent's lock
            lock.release()

            parent.stdin.write("go\n")  # the child reads the same pipe
            parent.stdin.flush()
            line = parent.stdout.readline()
            assert line, "the child ended without a report"
            report = json.loads(line)
            assert parent.stdout.read() == ""  # EOF: the child has exited
        except BaseException:
            with contextlib.suppress(ProcessLookupError):  # do not leave it behind
                os.kill(forked_pid, signal.SIGKILL)
            raise

    assert report["joined"] is True
    [[_, pid, thread]] = report["ran"]
    assert pid == forked_pid
    assert thread.startswith("jobq-worker")  # the parent had started: so does it
