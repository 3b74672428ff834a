"""Time limits: ``timeout=`` on the queue, a task or a job, ``JobTimeout`` in
the handler's thread at the limit, and a thread abandoned after the grace.

Real threads must really be interrupted here, so the limits are short real
ones (tens of milliseconds) and the tests wait on Events, never on sleeps.
A handler that blocks does so in ``threading.Event.wait`` (C code, which no
exception reaches); each such thread is released and joined before its
queue closes (the ``hang`` fixture).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import jobq
from jobq.stores import PostgresStore, SqliteStore, Store

MakeQueue = Callable[..., jobq.JobQueue[Any]]
WAIT = 10.0  # seconds; a cap so that a broken run fails, never hangs
LIMIT = 0.05  # the time limit of the jobs that must time out
GRACE = 0.05

ROOT = Path(__file__).resolve().parents[1]


class Hang:
    """Handlers that block in C code until released, and their threads."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)
        self.threads: list[threading.Thread] = []

    def block(self) -> None:
        self.threads.append(threading.current_thread())
        self.entered.release()
        self.release.wait()

    def end(self) -> None:
        """Release every blocked handler and wait for its thread to end."""
        self.release.set()
        for thread in self.threads:
            thread.join(WAIT)
            assert not thread.is_alive()


@pytest.fixture
def hang(make_queue: MakeQueue) -> Iterator[Hang]:
    """Depends on ``make_queue`` so that it ends first: blocked threads
    return, and are refused, while their store is still open."""
    blocked = Hang()
    yield blocked
    blocked.end()


def failures(queue: jobq.JobQueue[Any]) -> tuple[threading.Event, list[jobq.Event]]:
    """An Event set at each failed attempt the queue records, and the events."""
    seen: list[jobq.Event] = []
    failed = threading.Event()

    def note(event: jobq.Event) -> None:
        if event.kind in (jobq.EventKind.RETRYING, jobq.EventKind.DEAD):
            seen.append(event)
            failed.set()

    queue.subscribe(note)
    return failed, seen


# -- the options -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (0, ValueError),
        (-1, ValueError),
        (math.nan, ValueError),
        (math.inf, ValueError),
        (dt.timedelta(0), ValueError),
        ("30", TypeError),
        (True, TypeError),
    ],
)
def test_a_bad_timeout_is_refused_at_the_call_and_adds_nothing(
    make_queue: MakeQueue, value: object, error: type[Exception]
) -> None:
    queue = make_queue(lambda job: None)

    @queue.task(name="t")
    def t() -> None: ...

    with pytest.raises(error, match="timeout"):
        jobq.JobQueue(lambda job: None, timeout=value)  # type: ignore[arg-type]
    with pytest.raises(error, match="timeout"):
        queue.enqueue("x", timeout=value)  # type: ignore[arg-type]
    with pytest.raises(error, match="timeout"):
        queue.enqueue_many(["x", "y"], timeout=value)  # type: ignore[arg-type]
    with pytest.raises(error, match="timeout"):
        queue.task(lambda: None, name="u", timeout=value)  # type: ignore[arg-type]
    with pytest.raises(error, match="timeout"):
        t.using(timeout=value)  # type: ignore[arg-type]
    assert queue.stats().pending == 0
    assert "u" not in queue.tasks


def test_the_job_s_limit_wins_over_its_task_s_which_wins_over_the_queue_s(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(lambda job: None, timeout=30)

    @queue.task(name="limited", timeout=dt.timedelta(seconds=10))
    def limited() -> None: ...

    @queue.task(name="plain")
    def plain() -> None: ...

    ids = {
        "queue": queue.enqueue("x").id,
        "job": queue.enqueue("x", timeout=5).id,
        "many": queue.enqueue_many(["x"], timeout=4)[0].id,
        "task": limited.enqueue().id,
        "using": limited.using(timeout=2).enqueue().id,
        "task without": plain.enqueue().id,
        "using without": plain.using(timeout=1.5).enqueue().id,
    }

    records = {name: queue.get(i) for name, i in ids.items()}
    stored = {name: r.timeout for name, r in records.items() if r is not None}
    assert stored == {
        "queue": 30.0,
        "job": 5.0,
        "many": 4.0,
        "task": 10.0,
        "using": 2.0,
        "task without": 30.0,
        "using without": 1.5,
    }
    assert limited.timeout == 10.0
    assert "timeout=2.0" in repr(limited.using(timeout=2))


def test_without_any_timeout_a_job_has_no_limit(make_queue: MakeQueue) -> None:
    queue = make_queue(lambda job: None)
    record = queue.get(queue.enqueue("x"))
    assert record is not None
    assert record.timeout is None


def test_a_handler_sees_its_job_s_limit_and_run_pending_does_not_enforce_it() -> None:
    seen: list[float | None] = []

    def handler(job: jobq.Job[Any]) -> None:
        seen.append(job.timeout)
        threading.Event().wait(0.02)  # past its limit: not interrupted here

    with jobq.JobQueue(handler, timeout=30, immediate=True) as queue:
        queue.enqueue("x", timeout=0.001)
        queue.enqueue("y")
        stats = queue.stats()
        assert (stats.pending, stats.dead, stats.completed) == (0, 0, 2)

    assert seen == [0.001, 30.0]


def test_job_timeout_is_a_jobq_error() -> None:
    assert issubclass(jobq.JobTimeout, jobq.JobqError)


# -- interrupting -----------------------------------------------------------------


def test_a_handler_looping_forever_gets_job_timeout_and_its_job_is_retried(
    make_queue: MakeQueue,
) -> None:
    seen: list[str] = []

    def handler(job: jobq.Job[Any]) -> str:
        if job.attempt == 1:
            try:
                while True:  # pure Python: interrupted at its next line
                    pass
            except jobq.JobTimeout as exc:
                seen.append(str(exc))
                raise
        return "done"

    queue = make_queue(
        handler, timeout=LIMIT, base_delay=0, jitter=False, keep_completed=60
    )
    _failed, events = failures(queue)
    job = queue.enqueue("x")
    queue.start(workers=1)

    assert queue.join(WAIT)
    record = queue.get(job)
    assert record is not None
    assert record.state is jobq.JobState.COMPLETED
    assert [e.type for e in record.errors] == ["jobq.errors.JobTimeout"]
    assert record.errors[0].message == f"job {job.id} ran past its time limit of 0.05 s"
    assert seen == ["the job ran past its time limit"]
    assert [(e.kind, e.attempt) for e in events] == [(jobq.EventKind.RETRYING, 1)]
    assert queue.stats().abandoned == 0


def test_a_job_s_own_limit_interrupts_it_on_a_queue_without_one(
    make_queue: MakeQueue,
) -> None:
    def handler(job: jobq.Job[Any]) -> None:
        while job.payload == "loop":
            pass

    queue = make_queue(handler, max_attempts=1)
    failed, _events = failures(queue)
    unlimited = queue.enqueue("quick")
    limited = queue.enqueue("loop", timeout=LIMIT)
    queue.start(workers=1)

    assert failed.wait(WAIT)
    assert queue.join(WAIT)
    assert queue.get(unlimited) is None  # succeeded
    dead = queue.dead_jobs()
    assert [(d.id, d.last_error) for d in dead] == [
        (
            limited.id,
            f"jobq.errors.JobTimeout: job {limited.id} ran past its time limit "
            "of 0.05 s",
        )
    ]


def test_a_task_s_limit_interrupts_it(make_queue: MakeQueue) -> None:
    queue = make_queue(max_attempts=1)

    @queue.task(name="spin", timeout=LIMIT)
    def spin() -> None:
        while True:
            pass

    spin.enqueue()
    queue.start(workers=1)

    assert queue.join(WAIT)
    assert [d.errors[0].type for d in queue.dead_jobs()] == ["jobq.errors.JobTimeout"]


def test_a_handler_that_catches_job_timeout_may_clean_up_and_return_in_the_grace(
    make_queue: MakeQueue,
) -> None:
    cleaned = threading.Event()

    def handler(job: jobq.Job[Any]) -> str:
        try:
            while True:
                pass
        except jobq.JobTimeout:
            cleaned.set()
            return "cleaned up"

    queue = make_queue(handler, timeout=LIMIT, keep_completed=60)
    job = queue.enqueue("x")
    queue.start(workers=1)

    assert queue.join(WAIT)
    assert cleaned.is_set()
    record = queue.get(job)
    assert record is not None
    assert (record.state, record.result) == (jobq.JobState.COMPLETED, "cleaned up")


def test_short_handlers_near_their_limit_never_lose_a_worker(
    make_queue: MakeQueue,
) -> None:
    """JobTimeout lands in the handler or nowhere: never in jobq's own code
    around it, which would end the worker thread or lose an outcome."""

    together = threading.Barrier(3)

    def handler(job: jobq.Job[Any]) -> None:
        if job.payload == "together":
            together.wait(WAIT)
        elif job.attempt == 1:
            end = time.perf_counter() + 0.002
            while time.perf_counter() < end:
                pass

    queue = make_queue(handler, timeout=0.002, base_delay=0, jitter=False)
    queue.enqueue_many(range(100))
    queue.start(workers=2)

    assert queue.join(WAIT)
    stats = queue.stats()
    assert (stats.pending, stats.running, stats.dead, stats.abandoned) == (0, 0, 0, 0)
    assert stats.completed == 100
    queue.enqueue_many(["together", "together"], timeout=WAIT)  # both still run
    together.wait(WAIT)
    assert queue.join(WAIT)


# -- abandoning ---------------------------------------------------------------------


def test_a_handler_that_swallows_job_timeout_is_abandoned_after_the_grace(
    make_queue: MakeQueue, hang: Hang, caplog: pytest.LogCaptureFixture
) -> None:
    caught = threading.Event()
    stuck: list[threading.Thread] = []

    def handler(job: jobq.Job[Any]) -> None:
        if job.attempt > 1:
            return
        stuck.append(threading.current_thread())
        while not hang.release.is_set():
            try:
                while not hang.release.is_set():  # JobTimeout lands at a line
                    hang.release.wait(0.005)  # of this code: wait returns often
            except jobq.JobTimeout:
                caught.set()  # and carries on

    queue = make_queue(
        handler, timeout=LIMIT, timeout_grace=GRACE, base_delay=0, jitter=False
    )
    _failed, events = failures(queue)
    job = queue.enqueue("x")
    with caplog.at_level(logging.WARNING, logger="jobq"):
        queue.start(workers=1)
        assert queue.join(WAIT)  # retried by the replacement thread

    assert caught.is_set()
    assert stuck[0].is_alive()
    assert queue.stats().abandoned == 1
    error = events[0].error
    assert error is not None
    assert error.type == "jobq.errors.JobTimeout"
    assert error.message == (
        f"job {job.id} ran past its time limit of 0.05 s and did not return within "
        f"the 0.05 s grace: its thread {stuck[0].name} was abandoned"
    )
    assert "in handler" in error.traceback  # where the thread was stuck
    assert f"job {job.id} attempt 1 failed (jobq.errors.JobTimeout" in caplog.text
    hang.release.set()
    stuck[0].join(WAIT)
    assert not stuck[0].is_alive()


def test_a_handler_blocked_in_c_code_is_abandoned_and_replaced_and_its_late_end_refused(
    make_queue: MakeQueue, hang: Hang, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []

    def handler(job: jobq.Job[Any]) -> None:
        if job.payload == "hang":
            hang.block()
        ran.append(job.payload)

    queue = make_queue(handler, timeout=LIMIT, timeout_grace=GRACE, max_attempts=1)
    hung = queue.enqueue("hang")
    queue.start(workers=1)
    assert hang.entered.acquire(timeout=WAIT)
    queue.enqueue_many(["a", "b", "c"])

    assert queue.join(WAIT)  # the replacement ran them while the first hangs
    assert ran == ["a", "b", "c"]
    assert hang.threads[0].is_alive()
    assert queue.stats().abandoned == 1
    dead = queue.dead_jobs()
    assert [(d.id, d.attempts) for d in dead] == [(hung.id, 1)]
    assert "was abandoned" in (dead[0].last_error or "")

    with caplog.at_level(logging.INFO, logger="jobq"):
        hang.end()  # its late outcome reaches the store, which refuses it
    assert f"job {hung.id}: its " in caplog.text
    assert "was not recorded because the claim is no longer current" in caplog.text
    assert "returned after" in caplog.text
    dead = queue.dead_jobs()
    assert [(d.id, d.attempts, len(d.errors)) for d in dead] == [(hung.id, 1, 1)]
    assert ran == ["a", "b", "c"]


def test_four_hung_handlers_do_not_stop_a_queue_of_four_workers(
    make_queue: MakeQueue, hang: Hang
) -> None:
    def handler(job: jobq.Job[Any]) -> int:
        if job.payload < 0:
            hang.block()
        return int(job.payload)

    queue = make_queue(handler, max_attempts=1, timeout_grace=GRACE)
    queue.enqueue_many([-1, -2, -3, -4], timeout=LIMIT)
    queue.start(workers=4)
    for _ in range(4):
        assert hang.entered.acquire(timeout=WAIT)
    queue.enqueue_many(range(20))

    assert queue.join(WAIT)
    stats = queue.stats()
    assert (stats.completed, stats.dead, stats.abandoned) == (20, 4, 4)
    assert all(thread.is_alive() for thread in hang.threads)


def test_stop_returns_within_its_bound_with_a_thread_abandoned(
    make_queue: MakeQueue, hang: Hang
) -> None:
    queue = make_queue(lambda job: hang.block(), timeout=LIMIT, timeout_grace=GRACE)
    failed, _events = failures(queue)
    queue.enqueue("x")
    queue.start(workers=2)
    assert failed.wait(WAIT)

    started = time.monotonic()
    queue.stop(timeout=WAIT)
    assert time.monotonic() - started < 1.0  # the abandoned thread is not waited for
    assert hang.threads[0].is_alive()


def test_stop_without_a_bound_waits_for_a_hung_handler_only_until_its_limit_and_grace(
    make_queue: MakeQueue, hang: Hang
) -> None:
    queue = make_queue(lambda job: hang.block(), timeout=LIMIT, timeout_grace=GRACE)
    job = queue.enqueue("x")
    queue.start(workers=1)
    assert hang.entered.acquire(timeout=WAIT)

    queue.stop()  # returns once the hung thread is abandoned

    assert queue.stats().abandoned == 1
    assert hang.threads[0].is_alive()
    record = queue.get(job)
    assert record is not None
    assert record.state is jobq.JobState.PENDING  # its retry, for the next start


# -- other processes ----------------------------------------------------------------

# argv: store kind, then the store's place (SQLite path; PostgreSQL conninfo,
# schema and queue). Runs the due jobs once; prints what each attempt was.
OTHER_PROCESS = r"""
import sys
import jobq
from jobq.stores import PostgresStore, SqliteStore

kind = sys.argv[1]
if kind == "sqlite":
    store = SqliteStore(sys.argv[2])
else:
    store = PostgresStore(sys.argv[2], schema=sys.argv[3], queue=sys.argv[4])
with jobq.JobQueue(lambda job: print(job.id, job.attempt), store=store) as queue:
    queue.run_pending()
"""


def _place(store: Store) -> list[str]:
    if isinstance(store, SqliteStore):
        return ["sqlite", store.path]
    assert isinstance(store, PostgresStore)
    return ["postgres", store.conninfo, store.schema, store.queue]


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"])
def test_a_timed_out_job_is_taken_by_another_process_on_retry(
    make_queue: MakeQueue, hang: Hang
) -> None:
    queue = make_queue(
        lambda job: hang.block(),
        timeout=LIMIT,
        timeout_grace=GRACE,
        base_delay=0,
        jitter=False,
    )
    failed, _events = failures(queue)
    job = queue.enqueue("x")
    queue.start(workers=1)
    assert hang.entered.acquire(timeout=WAIT)
    queue.stop(timeout=0)  # this process takes nothing more; its thread hangs on
    assert failed.wait(WAIT)  # abandoned all the same: its retry is due

    other = subprocess.run(
        [sys.executable, "-c", OTHER_PROCESS, *_place(queue.store)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=True,
    )

    assert other.stdout.split() == [str(job.id), "2"]
    assert hang.threads[0].is_alive()  # the first attempt still hangs here
    assert queue.stats().pending == 0
