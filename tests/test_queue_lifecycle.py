"""Worker threads, start, stop, close and join, on every store.

Handlers that must stay running block on a ``Gate`` that the test opens (and
that opens itself at teardown, before the queues are closed). Nothing sleeps to
synchronize: tests wait on events, on ``join`` or on ``stop``. The few bounded
waits that check something does *not* happen can only make a broken queue
pass by luck, never make a working one fail.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import jobq
from jobq import Job, JobState, QueueClosed
from jobq.stores import MemoryStore

MakeQueue = Callable[..., jobq.JobQueue[Any]]

#: Upper bound for anything that should happen at once; only reached on failure.
PATIENCE = 5.0


class Gate:
    """Handlers wait here; records how many ran at once and on which threads."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.active = 0
        self.peak = 0
        self.started: list[Any] = []
        self.threads: list[threading.Thread] = []

    def __call__(self, job: Job[Any]) -> Any:
        with self._lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.started.append(job.payload)
            self.threads.append(threading.current_thread())
            self._changed.notify_all()
        try:
            self.opened.wait(PATIENCE)
        finally:
            with self._lock:
                self.active -= 1
        return job.payload

    def wait_started(self, count: int) -> None:
        """Wait until ``count`` handlers have started."""
        with self._lock:
            assert self._changed.wait_for(lambda: len(self.started) >= count, PATIENCE)

    def open(self) -> None:
        self.opened.set()


@pytest.fixture
def gate(make_queue: MakeQueue) -> Iterator[Gate]:
    """A gate that is opened before ``make_queue`` closes the test's queues."""
    gate = Gate()
    yield gate
    gate.open()


class Recorder:
    """A handler that records payloads and threads, raising planned exceptions."""

    def __init__(self, raises: dict[Any, BaseException] | None = None) -> None:
        self.raises = raises or {}
        self.payloads: list[Any] = []
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def __call__(self, job: Job[Any]) -> Any:
        with self._lock:
            self.payloads.append(job.payload)
            self.threads.append(threading.current_thread())
        if job.payload in self.raises:
            raise self.raises[job.payload]
        return job.payload


# -- workers ------------------------------------------------------------------


def test_workers_run_every_enqueued_job(make_queue: MakeQueue) -> None:
    handler = Recorder()
    queue = make_queue(handler).start(workers=3)

    queue.enqueue_many(range(20))

    assert queue.join(timeout=PATIENCE)
    assert sorted(handler.payloads) == list(range(20))
    stats = queue.stats()
    assert (stats.pending, stats.running, stats.completed) == (0, 0, 20)


def test_workers_run_handlers_off_the_calling_thread(make_queue: MakeQueue) -> None:
    handler = Recorder()
    queue = make_queue(handler).start(workers=1)

    queue.enqueue("x")

    assert queue.join(timeout=PATIENCE)
    assert handler.threads != [threading.current_thread()]


def test_start_returns_the_queue(make_queue: MakeQueue) -> None:
    queue = make_queue(Recorder())

    assert queue.start(workers=1) is queue


def test_never_more_than_workers_jobs_run_at_once(
    make_queue: MakeQueue, gate: Gate
) -> None:
    queue = make_queue(gate).start(workers=3)
    queue.enqueue_many(range(9))

    gate.wait_started(3)
    stats = queue.stats()
    gate.open()

    assert (stats.running, stats.pending) == (3, 6)
    assert queue.join(timeout=PATIENCE)
    assert gate.peak == 3
    assert sorted(gate.started) == list(range(9))


def test_start_while_running_adds_no_workers(make_queue: MakeQueue, gate: Gate) -> None:
    queue = make_queue(gate).start(workers=2)
    queue.start(workers=5)
    queue.enqueue_many(range(6))

    gate.wait_started(2)
    stats = queue.stats()
    gate.open()

    assert stats.running == 2
    assert queue.join(timeout=PATIENCE)
    assert gate.peak == 2


def test_a_restart_while_handlers_still_run_never_exceeds_workers(
    make_queue: MakeQueue,
) -> None:
    lock = threading.Lock()
    active, peak = 0, 0
    gates = {n: threading.Event() for n in range(6)}
    started = {n: threading.Event() for n in range(6)}

    def handler(job: Job[Any]) -> None:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        started[job.payload].set()
        try:
            gates[job.payload].wait(PATIENCE)
        finally:
            with lock:
                active -= 1

    queue = make_queue(handler).start(workers=2)
    try:
        queue.enqueue_many(range(6))
        assert started[0].wait(PATIENCE)
        assert started[1].wait(PATIENCE)
        queue.stop(timeout=0.01)  # both handlers still running
        queue.start(workers=2)

        gates[0].set()  # frees one worker, which takes job 2
        assert started[2].wait(PATIENCE)
        assert peak == 2
        assert queue.stats().running == 2
    finally:
        for event in gates.values():
            event.set()
    assert queue.join(timeout=PATIENCE)
    assert peak == 2


class Interrupt(BaseException):
    """Like ``KeyboardInterrupt``: not an ``Exception``."""


@pytest.mark.parametrize(
    "raised",
    [SystemExit(1), KeyboardInterrupt(), Interrupt("bye"), ValueError("boom")],
    ids=["SystemExit", "KeyboardInterrupt", "BaseException", "Exception"],
)
def test_a_worker_survives_anything_a_handler_raises(
    make_queue: MakeQueue, raised: BaseException
) -> None:
    handler = Recorder(raises={"bad": raised})
    queue = make_queue(handler, max_attempts=1).start(workers=1)
    bad = queue.enqueue("bad")
    assert queue.join(timeout=PATIENCE)

    queue.enqueue("good")

    assert queue.join(timeout=PATIENCE)
    assert handler.payloads == ["bad", "good"]
    assert handler.threads[0] is handler.threads[1]
    assert handler.threads[0].is_alive()
    record = queue.get(bad)
    assert record is not None
    assert record.state is JobState.DEAD
    assert record.last_error is not None
    kind = type(raised)
    named = kind.__name__ if kind is not Interrupt else f"{__name__}.Interrupt"
    assert record.last_error.startswith(named)
    assert queue.stats().completed == 1


def test_workers_retry_a_failed_job(make_queue: MakeQueue) -> None:
    failed = threading.Event()

    def handler(job: Job[Any]) -> None:
        if not failed.is_set():
            failed.set()
            raise ValueError("once")

    queue = make_queue(handler, base_delay=0).start(workers=1)
    job = queue.enqueue("x")

    assert queue.join(timeout=PATIENCE)
    assert queue.get(job) is None
    stats = queue.stats()
    assert (stats.completed, stats.retried) == (1, 1)


def test_workers_run_a_delayed_job_once_it_is_due(make_queue: MakeQueue) -> None:
    handler = Recorder()
    queue = make_queue(handler).start(workers=1)
    begun = time.time()

    queue.enqueue("x", delay=0.1)

    assert queue.join(timeout=PATIENCE)
    assert handler.payloads == ["x"]
    assert time.time() - begun >= 0.1


# -- stop and start again ---------------------------------------------------------


def test_stop_waits_for_a_running_handler(make_queue: MakeQueue, gate: Gate) -> None:
    queue = make_queue(gate).start(workers=1)
    job = queue.enqueue("x")
    gate.wait_started(1)
    stopper = threading.Thread(target=queue.stop)
    stopper.start()

    stopper.join(0.1)
    still_stopping = stopper.is_alive()
    gate.open()
    stopper.join(PATIENCE)

    assert still_stopping
    assert not stopper.is_alive()
    assert queue.get(job) is None  # finished and recorded before stop returned
    assert queue.stats().completed == 1


def test_stop_lets_running_jobs_finish_and_leaves_the_rest_pending(
    make_queue: MakeQueue, gate: Gate
) -> None:
    queue = make_queue(gate).start(workers=2)
    jobs = queue.enqueue_many(range(5))
    gate.wait_started(2)
    queue.stop(timeout=0.01)  # the workers now take no new job

    gate.open()
    queue.stop()  # waits for the two running handlers

    assert sorted(gate.started) == [0, 1]
    assert [queue.get(job) for job in jobs[:2]] == [None, None]
    pending = [queue.get(job) for job in jobs[2:]]
    assert [r.state if r else None for r in pending] == [JobState.PENDING] * 3
    stats = queue.stats()
    assert (stats.pending, stats.running, stats.completed) == (3, 0, 2)


def test_start_after_stop_runs_jobs_again(make_queue: MakeQueue) -> None:
    handler = Recorder()
    queue = make_queue(handler).start(workers=2)
    queue.enqueue("before")
    assert queue.join(timeout=PATIENCE)
    queue.stop()

    queue.start(workers=2)
    queue.enqueue("after")

    assert queue.join(timeout=PATIENCE)
    assert handler.payloads == ["before", "after"]


def test_enqueue_after_stop_keeps_the_job_pending_until_start(
    make_queue: MakeQueue,
) -> None:
    handler = Recorder()
    queue = make_queue(handler).start(workers=2)
    queue.stop()

    job = queue.enqueue("x")

    record = queue.get(job)
    assert record is not None
    assert record.state is JobState.PENDING
    assert handler.payloads == []
    queue.start(workers=2)
    assert queue.join(timeout=PATIENCE)
    assert handler.payloads == ["x"]


def test_stop_with_a_timeout_returns_while_a_handler_is_blocked(
    make_queue: MakeQueue, gate: Gate
) -> None:
    queue = make_queue(gate).start(workers=1)
    job = queue.enqueue("x")
    gate.wait_started(1)

    begun = time.monotonic()
    queue.stop(timeout=0.2)
    took = time.monotonic() - begun

    assert 0.15 <= took < 2.0
    record = queue.get(job)
    assert record is not None
    assert record.state is JobState.RUNNING
    assert queue.stats().running == 1


def test_a_job_outliving_stop_records_its_outcome_when_its_handler_returns(
    make_queue: MakeQueue, gate: Gate
) -> None:
    queue = make_queue(gate).start(workers=1)
    job = queue.enqueue("x")
    gate.wait_started(1)
    queue.stop(timeout=0.01)

    gate.open()

    assert queue.join(timeout=PATIENCE)
    assert queue.get(job) is None
    assert queue.stats().completed == 1


def test_stop_is_idempotent(make_queue: MakeQueue) -> None:
    handler = Recorder()
    queue = make_queue(handler)
    queue.stop()  # never started
    queue.start(workers=1)

    queue.stop()
    queue.stop(timeout=0)

    queue.enqueue("x")
    assert queue.run_pending() == 1


def test_start_rejects_fewer_than_one_worker(make_queue: MakeQueue) -> None:
    handler = Recorder()
    queue = make_queue(handler)
    queue.enqueue("x")
    before = queue.stats()

    with pytest.raises(ValueError, match="workers"):
        queue.start(workers=0)

    assert queue.stats() == before
    assert not queue.join(timeout=0)
    assert handler.payloads == []


# -- join -------------------------------------------------------------------------


def test_join_returns_true_at_once_when_nothing_is_queued(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(Recorder())

    assert queue.join(timeout=0) is True


def test_join_returns_false_while_a_job_is_pending(make_queue: MakeQueue) -> None:
    queue = make_queue(Recorder())
    queue.enqueue("x")

    begun = time.monotonic()
    drained = queue.join(timeout=0.1)

    assert drained is False
    assert time.monotonic() - begun >= 0.09


def test_join_counts_a_delayed_job_as_pending(make_queue: MakeQueue) -> None:
    queue = make_queue(Recorder()).start(workers=1)
    queue.enqueue("x", delay=3600)

    assert queue.join(timeout=0.05) is False


def test_join_waits_for_a_running_job(make_queue: MakeQueue, gate: Gate) -> None:
    queue = make_queue(gate).start(workers=1)
    queue.enqueue("x")
    gate.wait_started(1)

    assert queue.join(timeout=0.05) is False
    gate.open()
    assert queue.join(timeout=PATIENCE) is True


def test_join_returns_true_once_run_pending_drained_the_queue(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(Recorder())
    queue.enqueue_many([1, 2])
    queue.run_pending()

    assert queue.join(timeout=0) is True


class FlakyStats(MemoryStore):
    """A memory store whose ``stats`` fails the next ``failures`` times, as a
    database's read does when its connection is lost under it."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 0

    def stats(self) -> Any:
        if self.failures:
            self.failures -= 1
            raise jobq.StoreError("connection lost under the read")
        return super().stats()


def test_join_looks_again_when_a_read_of_the_store_fails_once() -> None:
    store = FlakyStats()
    queue: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: None, store=store)
    queue.stats()
    store.failures = 2  # the third look answers

    assert queue.join(timeout=5)
    assert store.failures == 0


def test_join_raises_when_the_store_keeps_failing() -> None:
    store = FlakyStats()
    queue: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: None, store=store)
    queue.stats()
    store.failures = 3

    with pytest.raises(jobq.StoreError, match="connection lost"):
        queue.join(timeout=5)


def test_join_does_not_wait_for_dead_jobs(make_queue: MakeQueue) -> None:
    queue = make_queue(Recorder(raises={"x": jobq.Fatal("no")})).start(workers=1)
    queue.enqueue("x")

    assert queue.join(timeout=PATIENCE)
    assert queue.stats().dead == 1


# -- timeouts ---------------------------------------------------------------------

TIMED_CALLS: dict[str, Callable[[jobq.JobQueue[Any], object], object]] = {
    "join": lambda q, timeout: q.join(timeout=timeout),  # type: ignore[arg-type]
    "stop": lambda q, timeout: q.stop(timeout=timeout),  # type: ignore[arg-type]
    "close": lambda q, timeout: q.close(timeout=timeout),  # type: ignore[arg-type]
}

BAD_TIMEOUTS: dict[str, tuple[object, type[Exception]]] = {
    "nan": (float("nan"), ValueError),
    "inf": (float("inf"), ValueError),
    "-inf": (float("-inf"), ValueError),
    "negative": (-1, ValueError),
    "negative timedelta": (dt.timedelta(seconds=-1), ValueError),
    "str": ("1", TypeError),
    "bool": (True, TypeError),
}


@pytest.mark.parametrize("store_kind", ["memory"])  # checked before any store call
@pytest.mark.parametrize("call", TIMED_CALLS.values(), ids=TIMED_CALLS.keys())
@pytest.mark.parametrize(
    ("timeout", "error"), BAD_TIMEOUTS.values(), ids=BAD_TIMEOUTS.keys()
)
def test_a_bad_timeout_raises_at_the_call_and_changes_nothing(
    make_queue: MakeQueue,
    call: Callable[[jobq.JobQueue[Any], object], object],
    timeout: object,
    error: type[Exception],
) -> None:
    handler = Recorder()
    queue = make_queue(handler).start(workers=1)

    with pytest.raises(error, match="timeout"):
        call(queue, timeout)

    queue.enqueue("x")  # still open, and its workers still run
    assert queue.join(timeout=PATIENCE)
    assert handler.payloads == ["x"]


@pytest.mark.parametrize("call", TIMED_CALLS.values(), ids=TIMED_CALLS.keys())
def test_a_timeout_may_be_a_timedelta(
    make_queue: MakeQueue, call: Callable[[jobq.JobQueue[Any], object], object]
) -> None:
    queue = make_queue(Recorder()).start(workers=1)
    queue.enqueue("x", delay=3600)

    begun = time.monotonic()
    call(queue, dt.timedelta(milliseconds=50))

    assert time.monotonic() - begun < PATIENCE


@pytest.mark.parametrize("call", ["stop", "close"])
def test_a_timeout_longer_than_a_thread_can_wait_waits_like_no_limit(
    make_queue: MakeQueue, gate: Gate, call: str
) -> None:
    """Finite, but beyond ``threading.TIMEOUT_MAX`` (about 292 years): no
    ``OverflowError``; the call waits for the running handler."""
    queue = make_queue(gate).start(workers=1)
    queue.enqueue("x")
    gate.wait_started(1)
    raised: list[Exception] = []

    def stop() -> None:
        try:
            getattr(queue, call)(timeout=dt.timedelta.max)
        except Exception as exc:
            raised.append(exc)

    stopper = threading.Thread(target=stop)
    stopper.start()
    stopper.join(0.1)
    still_stopping = stopper.is_alive()
    gate.open()
    stopper.join(PATIENCE)

    assert raised == []
    assert still_stopping
    assert not stopper.is_alive()
    assert gate.active == 0


# -- calls from inside a handler --------------------------------------------------


class CallsFromHandler:
    """A handler that calls ``call(queue)`` and records what it raised."""

    def __init__(self, call: Callable[[jobq.JobQueue[Any]], object]) -> None:
        self.call = call
        self.queue: jobq.JobQueue[Any] | None = None
        self.raised: list[BaseException] = []
        self.returned: list[object] = []

    def __call__(self, job: Job[Any]) -> Any:
        assert self.queue is not None
        try:
            self.returned.append(self.call(self.queue))
        except Exception as exc:
            self.raised.append(exc)
        return job.payload


RUN_BY = ["worker", "run_pending", "immediate"]


def run_one_job(make_queue: MakeQueue, handler: CallsFromHandler, run_by: str) -> Any:
    """Run one job with ``handler`` on a worker thread, in ``run_pending``
    or in immediate mode; the job's ``Enqueued``."""
    queue = make_queue(handler, immediate=run_by == "immediate")
    handler.queue = queue
    if run_by == "worker":
        queue.start(workers=1)
    job = queue.enqueue("x")
    if run_by == "run_pending":
        assert queue.run_pending() == 1
    assert queue.join(timeout=PATIENCE)
    return job


@pytest.mark.parametrize("run_by", RUN_BY)
def test_join_from_a_handler_raises_runtime_error(
    make_queue: MakeQueue, run_by: str
) -> None:
    handler = CallsFromHandler(lambda q: q.join(timeout=1))  # bounded if broken

    job = run_one_job(make_queue, handler, run_by)

    assert [type(exc) for exc in handler.raised] == [RuntimeError]
    assert "join() was called from inside a handler" in str(handler.raised[0])
    assert handler.queue is not None
    assert handler.queue.get(job) is None  # the job itself succeeded


@pytest.mark.parametrize("run_by", RUN_BY)
def test_join_stop_and_close_of_another_queue_work_from_a_handler(
    make_queue: MakeQueue, run_by: str
) -> None:
    other = make_queue(Recorder(), store=MemoryStore()).start(workers=1)
    other.enqueue("y")

    def use_other(queue: jobq.JobQueue[Any]) -> object:
        return (other.join(timeout=PATIENCE), other.stop(), other.close())

    handler = CallsFromHandler(use_other)

    run_one_job(make_queue, handler, run_by)

    assert handler.raised == []
    assert handler.returned == [(True, None, None)]
    with pytest.raises(QueueClosed):
        other.stats()


@pytest.mark.parametrize("run_by", RUN_BY)
@pytest.mark.parametrize("call", ["stop", "close"])
def test_stop_or_close_from_a_handler_raises_runtime_error_and_changes_nothing(
    make_queue: MakeQueue, call: str, run_by: str
) -> None:
    handler = CallsFromHandler(lambda q: getattr(q, call)(timeout=1))

    job = run_one_job(make_queue, handler, run_by)

    assert [type(exc) for exc in handler.raised] == [RuntimeError]
    assert f"{call}() was called from inside a handler" in str(handler.raised[0])
    queue = handler.queue
    assert queue is not None
    assert queue.get(job) is None  # the job succeeded, as its handler did
    assert queue.ensure_started() is (run_by == "worker")  # workers still run
    second = queue.enqueue("y")  # the queue still works as before
    if run_by == "run_pending":
        queue.run_pending()
    assert queue.join(timeout=PATIENCE)
    assert queue.get(second) is None
    assert [type(exc) for exc in handler.raised] == [RuntimeError] * 2


@pytest.mark.parametrize("run_by", RUN_BY)
def test_a_job_whose_handler_tried_to_close_the_queue_is_not_dead_after_a_reopen(
    make_queue: MakeQueue, run_by: str
) -> None:
    handler = CallsFromHandler(lambda q: q.close(timeout=1))
    job = run_one_job(make_queue, handler, run_by)
    assert handler.queue is not None
    handler.queue.close()

    reopened = make_queue(Recorder())  # the same place, for stores that persist

    assert reopened.get(job) is None
    assert reopened.dead_jobs() == []
    stats = reopened.stats()
    assert (stats.pending, stats.running, stats.dead) == (0, 0, 0)


# -- close --------------------------------------------------------------------------


def test_close_is_idempotent(make_queue: MakeQueue) -> None:
    queue = make_queue(Recorder()).start(workers=1)
    queue.enqueue("x")

    queue.close()
    queue.close()

    with pytest.raises(QueueClosed):
        queue.stats()


def test_close_of_a_queue_never_used_works(make_queue: MakeQueue) -> None:
    queue = make_queue(Recorder())

    queue.close()

    with pytest.raises(QueueClosed):
        queue.enqueue("x")


CALLS_AFTER_CLOSE: dict[str, Callable[[jobq.JobQueue[Any]], object]] = {
    "enqueue": lambda q: q.enqueue("x"),
    "enqueue_many": lambda q: q.enqueue_many(["x"]),
    "stats": lambda q: q.stats(),
    "get": lambda q: q.get(1),
    "start": lambda q: q.start(workers=1),
    "start_lazy": lambda q: q.start(workers=1, lazy=True),
    "ensure_started": lambda q: q.ensure_started(),
    "with": lambda q: q.__enter__(),
    "run_pending": lambda q: q.run_pending(),
    "join": lambda q: q.join(timeout=0),
    "dead_jobs": lambda q: q.dead_jobs(),
    "retry_dead": lambda q: q.retry_dead(1),
    "delete_dead": lambda q: q.delete_dead(1),
    "cancel": lambda q: q.cancel(1),
    "save": lambda q: q.save(),
}


@pytest.mark.parametrize(
    "call", CALLS_AFTER_CLOSE.values(), ids=CALLS_AFTER_CLOSE.keys()
)
def test_calls_after_close_raise_queue_closed(
    make_queue: MakeQueue, call: Callable[[jobq.JobQueue[Any]], object]
) -> None:
    queue = make_queue(Recorder()).start(workers=1)
    queue.enqueue("x")
    assert queue.join(timeout=PATIENCE)
    queue.close()

    with pytest.raises(QueueClosed):
        call(queue)


def test_ensure_started_after_close_of_a_lazily_started_queue_raises_queue_closed(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(Recorder()).start(workers=1, lazy=True)
    queue.close()

    with pytest.raises(QueueClosed):
        queue.ensure_started()


def test_stop_and_close_after_close_do_nothing(make_queue: MakeQueue) -> None:
    queue = make_queue(Recorder()).start(workers=1)
    queue.close()

    queue.stop()
    queue.stop(timeout=0)
    queue.close()
    queue.close(timeout=0)

    with pytest.raises(QueueClosed):
        queue.stats()


@pytest.mark.parametrize("call", ["stop", "close"])
def test_stop_and_close_after_close_return_at_once_while_a_handler_is_stuck(
    make_queue: MakeQueue, gate: Gate, call: str
) -> None:
    queue = make_queue(gate).start(workers=1)
    queue.enqueue("x")
    gate.wait_started(1)
    queue.close(timeout=0.01)  # returns with the handler still running

    caller = threading.Thread(target=getattr(queue, call))  # no timeout
    caller.start()
    caller.join(PATIENCE)
    still_stuck = gate.active == 1
    gate.open()
    gate.threads[0].join(PATIENCE)  # nothing of this test outlives it

    assert not caller.is_alive()
    assert still_stuck  # nothing waited for the handler
    assert not gate.threads[0].is_alive()


def test_close_releases_the_store_for_another_queue(make_queue: MakeQueue) -> None:
    first = make_queue(Recorder()).start(workers=1)
    first.enqueue("x", delay=3600)
    first.close()

    second = make_queue(Recorder())  # the same place, for stores that persist

    second.enqueue("y")
    assert second.run_pending() == 1


def test_close_lets_running_jobs_finish(make_queue: MakeQueue, gate: Gate) -> None:
    queue = make_queue(gate).start(workers=1)
    queue.enqueue("x")
    gate.wait_started(1)
    closer = threading.Thread(target=queue.close)
    closer.start()

    gate.open()
    closer.join(PATIENCE)

    assert not closer.is_alive()
    assert gate.active == 0


def test_a_handler_outliving_close_does_not_take_the_store_back(
    make_queue: MakeQueue, gate: Gate
) -> None:
    first = make_queue(gate).start(workers=1)
    first.enqueue("x")
    gate.wait_started(1)
    first.close(timeout=0.01)

    gate.open()
    gate.threads[0].join(PATIENCE)  # the worker has done all it will do
    assert not gate.threads[0].is_alive()

    second = make_queue(Recorder())  # the same place, for stores that persist
    second.enqueue("y")
    assert second.run_pending() >= 1


def test_a_with_block_closes_the_queue(make_queue: MakeQueue) -> None:
    handler = Recorder()

    with make_queue(handler).start(workers=1) as queue:
        queue.enqueue("x")
        assert queue.join(timeout=PATIENCE)

    assert handler.payloads == ["x"]
    with pytest.raises(QueueClosed):
        queue.enqueue("y")


def test_a_with_block_closes_the_queue_when_its_body_raises(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(Recorder())

    def request() -> None:
        with queue:
            queue.enqueue("x")
            raise RuntimeError("request failed")

    with pytest.raises(RuntimeError, match="request failed"):
        request()

    with pytest.raises(QueueClosed):
        queue.stats()
