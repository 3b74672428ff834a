"""Cancelling jobs through the queue, on every store: a pending job ends
cancelled at once; a running one is stopped with ``JobCancelled`` at its
handler's next line of its own code, stops of its own accord when it asks
``jobq.cancel_requested()``, keeps its success when it returns, and is
abandoned after the grace when it cannot be stopped.

Real threads are really interrupted here, so the tests wait on Events and on
``cancel(wait=...)``, never on sleeps. A handler that blocks does so in
``threading.Event.wait`` (C code, which no exception reaches) and is released
before its queue closes (the ``hang`` fixture). The request made from another
process is in ``test_cancel_processes.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import jobq
from jobq import JobState

MakeQueue = Callable[..., jobq.JobQueue[Any]]
WAIT = 10.0  # seconds; a cap so that a broken run fails, never hangs
GRACE = 0.05


class Hang:
    """Handlers that block in C code until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.inside = 0
        self.changed = threading.Condition()

    def block(self) -> None:
        with self.changed:
            self.inside += 1
        try:
            self.release.wait()
        finally:
            with self.changed:
                self.inside -= 1
                self.changed.notify_all()

    def end(self) -> None:
        """Release every blocked handler and wait until each has returned."""
        self.release.set()
        with self.changed:
            assert self.changed.wait_for(lambda: self.inside == 0, WAIT)


@pytest.fixture
def hang(make_queue: MakeQueue) -> Iterator[Hang]:
    """After ``make_queue`` in the fixtures: its queues close after the
    blocked threads returned (and were refused) while their store was open."""
    blocked = Hang()
    yield blocked
    blocked.end()


class Seen:
    """The events a queue published, which a test may wait for: a store's
    change is visible (``get``, ``cancel(wait=...)``) just before the worker
    that made it publishes its event."""

    def __init__(self) -> None:
        self.events: list[jobq.Event] = []
        self.changed = threading.Condition()

    def __call__(self, event: jobq.Event) -> None:
        with self.changed:
            self.events.append(event)
            self.changed.notify_all()

    def of_kind(self, kind: jobq.EventKind) -> list[tuple[int, int]]:
        """Once one has come, the (job id, attempt) of each event of ``kind``."""
        with self.changed:
            self.changed.wait_for(lambda: self._of_kind(kind), WAIT)
            return self._of_kind(kind)

    def _of_kind(self, kind: jobq.EventKind) -> list[tuple[int, int]]:
        return [(e.job_id, e.attempt) for e in self.events if e.kind is kind]


def started_job(
    make_queue: MakeQueue, body: Callable[[], Any], **options: Any
) -> tuple[jobq.JobQueue[Any], int, Seen]:
    """A started queue running one job (payload "x", key "k") whose handler
    calls ``body`` once it started; the queue, the job's id, and the events
    the queue publishes from before the job started. Other jobs return."""
    started = threading.Event()

    def handler(job: jobq.Job[Any]) -> Any:
        if job.payload != "x":
            return None
        started.set()
        return body()

    queue = make_queue(handler, **options)
    seen = Seen()
    queue.subscribe(seen)
    job_id = queue.enqueue("x", key="k").id
    queue.start(workers=2)
    assert started.wait(WAIT)
    return queue, job_id, seen


# -- a running job ---------------------------------------------------------------------


def test_a_pure_python_loop_is_stopped_with_job_cancelled(
    make_queue: MakeQueue,
) -> None:
    caught: list[BaseException] = []

    def spin() -> None:
        try:
            while True:
                pass
        except BaseException as exc:
            caught.append(exc)
            raise

    queue, job_id, events = started_job(make_queue, spin, keep_cancelled=60)

    assert queue.cancel(job_id, wait=WAIT, by="ops") is True

    assert [type(exc) for exc in caught] == [jobq.JobCancelled]
    record = queue.get(job_id)
    assert record is not None
    assert record.state is JobState.CANCELLED
    assert record.attempts == 1
    assert record.cancellation is not None
    assert (record.cancellation.by, record.cancellation.attempt) == ("ops", 1)
    assert record.errors[-1].type == "jobq.errors.JobCancelled"
    assert "spin" in record.errors[-1].traceback  # where it landed: the handler
    assert events.of_kind(jobq.EventKind.CANCELLED) == [(job_id, 1)]
    stats = queue.stats()
    assert (stats.cancelled, stats.running, stats.pending) == (1, 0, 0)
    assert queue.join(timeout=WAIT)  # never retried


def test_a_time_limited_job_is_stopped_with_job_cancelled_not_a_timeout(
    make_queue: MakeQueue,
) -> None:
    queue, job_id, _ = started_job(
        make_queue, lambda: _spin_forever(), timeout=600, keep_cancelled=60
    )

    assert queue.cancel(job_id, wait=WAIT)

    record = queue.get(job_id)
    assert record is not None
    assert record.state is JobState.CANCELLED
    assert record.errors[-1].type == "jobq.errors.JobCancelled"


def _spin_forever() -> None:
    while True:
        pass


def test_a_handler_blocked_in_c_code_is_abandoned_after_the_grace(
    make_queue: MakeQueue, hang: Hang
) -> None:
    queue, job_id, _ = started_job(
        make_queue, hang.block, timeout_grace=GRACE, keep_cancelled=60
    )

    assert queue.cancel(job_id, wait=WAIT)

    record = queue.get(job_id)
    assert record is not None
    assert record.state is JobState.CANCELLED
    assert "did not stop within the 0.05 s grace" in record.errors[-1].message
    assert "wait" in record.errors[-1].traceback  # the stack it was stuck in
    assert queue.stats().abandoned == 1
    ran = threading.Event()
    queue.subscribe(lambda e: ran.set(), kinds=[jobq.EventKind.SUCCEEDED])
    queue.enqueue("next")  # the pool kept its size: another thread runs it
    assert ran.wait(WAIT)


def test_a_cooperative_handler_stops_of_its_own_accord(make_queue: MakeQueue) -> None:
    """A handler that asks ``cancel_requested()`` is never interrupted: it
    sees the request, and what it raises ends the job cancelled."""
    asked = threading.Event()

    def cooperate() -> None:
        while not jobq.cancel_requested():
            asked.set()
        raise RuntimeError("stopped as asked")

    queue, job_id, _ = started_job(make_queue, cooperate, keep_cancelled=60)
    assert asked.wait(WAIT)

    assert queue.cancel(job_id, wait=WAIT)

    record = queue.get(job_id)
    assert record is not None
    assert record.state is JobState.CANCELLED
    assert record.last_error == "RuntimeError: stopped as asked"


def test_a_handler_that_returns_after_the_request_keeps_its_success(
    make_queue: MakeQueue,
) -> None:
    def finish_what_it_started() -> str:
        while not jobq.cancel_requested():
            pass
        return "partial"

    queue, job_id, events = started_job(
        make_queue, finish_what_it_started, keep_completed=60
    )

    assert queue.cancel(job_id, wait=WAIT)

    record = queue.get(job_id)
    assert record is not None
    assert record.state is JobState.COMPLETED
    assert (record.result, record.cancellation) == ("partial", None)
    assert events.of_kind(jobq.EventKind.SUCCEEDED) == [(job_id, 1)]
    assert queue.stats().cancelled == 0


def test_cancel_requested_is_false_outside_a_stopped_attempt(
    make_queue: MakeQueue,
) -> None:
    seen: list[bool] = []
    queue = make_queue(lambda job: seen.append(jobq.cancel_requested()))
    queue.enqueue("x")
    queue.start(workers=1)
    assert queue.join(timeout=WAIT)
    assert seen == [False]
    assert jobq.cancel_requested() is False  # not a worker thread


def test_a_stopping_job_frees_its_key_at_once(
    make_queue: MakeQueue, hang: Hang
) -> None:
    queue, job_id, _ = started_job(make_queue, hang.block, timeout_grace=WAIT)

    assert queue.cancel(job_id) is True  # asked, not waited for

    record = queue.get(job_id)
    assert record is not None
    assert record.stopping
    again = queue.enqueue("y", key="k")
    assert not again.duplicate
    assert again.id != job_id
    hang.release.set()


def test_wait_says_whether_the_job_stopped_in_time(
    make_queue: MakeQueue, hang: Hang
) -> None:
    queue, job_id, _ = started_job(
        make_queue, hang.block, timeout_grace=WAIT, keep_cancelled=60
    )

    assert queue.cancel(job_id, wait=0.01) is False  # still inside C code
    record = queue.get(job_id)
    assert record is not None
    assert record.stopping
    hang.release.set()  # it returns (or the request lands as it does)
    assert queue.join(timeout=WAIT)
    assert queue.cancel(job_id, wait=WAIT) is False  # over: nothing to cancel


def test_a_handler_cannot_wait_for_its_own_cancellation(make_queue: MakeQueue) -> None:
    refused: list[BaseException] = []
    done = threading.Event()

    def handler(job: jobq.Job[Any]) -> None:
        try:
            queue.cancel(job.id, wait=1)
        except RuntimeError as exc:
            refused.append(exc)
        done.set()

    queue = make_queue(handler)
    job_id = queue.enqueue("x").id
    queue.start(workers=1)
    assert done.wait(WAIT)
    assert "would wait for itself" in str(refused[0])
    assert queue.join(timeout=WAIT)
    record = queue.get(job_id)
    assert record is None or record.state is JobState.COMPLETED  # not asked


# -- a job that is not running ---------------------------------------------------


@pytest.mark.parametrize("delay", [0, 60])
def test_a_pending_job_ends_cancelled_and_never_runs(
    make_queue: MakeQueue, delay: int
) -> None:
    ran: list[int] = []
    queue = make_queue(lambda job: ran.append(job.id), keep_cancelled=60)
    events = Seen()
    queue.subscribe(events)
    job_id = queue.enqueue("x", key="k", delay=delay).id

    assert queue.cancel(jobq.Enqueued(job_id, False), wait=WAIT) is True

    queue.start(workers=1)
    assert queue.join(timeout=WAIT)
    assert ran == []
    record = queue.get(job_id)
    assert record is not None
    assert record.state is JobState.CANCELLED
    assert record.cancellation is not None
    assert record.cancellation.attempt is None
    assert events.of_kind(jobq.EventKind.CANCELLED) == [(job_id, 0)]
    assert [r.id for r in queue.browse("cancelled").jobs] == [job_id]
    assert not queue.enqueue("y", key="k").duplicate


def test_a_finished_dead_or_unknown_job_is_not_cancelled(make_queue: MakeQueue) -> None:
    def handler(job: jobq.Job[Any]) -> None:
        if job.payload == "fail":
            raise jobq.Fatal("no")

    queue = make_queue(handler, keep_completed=60)
    done = queue.enqueue("ok").id
    dead = queue.enqueue("fail").id
    queue.start(workers=1)
    assert queue.join(timeout=WAIT)
    before = queue.stats()

    assert [queue.cancel(i) for i in (done, dead, 10**9)] == [False, False, False]

    assert queue.stats() == before
    assert [r.id for r in queue.dead_jobs()] == [dead]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"by": ""}, ValueError),
        ({"by": "x" * 201}, ValueError),
        ({"by": "a\x00b"}, ValueError),
        ({"by": "\udc80"}, ValueError),
        ({"by": 3}, TypeError),
        ({"wait": -1}, ValueError),
        ({"wait": float("nan")}, ValueError),
        ({"wait": "5"}, TypeError),
    ],
)
def test_bad_arguments_are_refused_and_change_nothing(
    make_queue: MakeQueue, options: dict[str, Any], error: type[Exception]
) -> None:
    queue = make_queue(lambda job: None)
    job_id = queue.enqueue("x").id

    with pytest.raises(error):
        queue.cancel(job_id, **options)

    record = queue.get(job_id)
    assert record is not None
    assert record.state is JobState.PENDING
