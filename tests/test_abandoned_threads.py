"""The bound on abandoned threads (``max_abandoned``): a pool whose handlers
hang for good shrinks instead of growing the process, says so, keeps
taking enqueues and stopping on time, and grows back as the hung calls
return.

Handlers block in ``threading.Event.wait`` (C code, which no exception
reaches) until the test releases them; the tests wait on log records and
joins, never on sleeps. The bound is the pool's, whatever the store: the
memory store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import jobq

WAIT = 10.0
LIMIT = 0.05
GRACE = 0.05

NOT_REPLACED = "was abandoned and not replaced"
RETURNED = "an abandoned worker thread returned"


class Hang:
    """Handlers that block until released (payload ``"hang"``), and the
    other jobs that ran."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.threads: list[threading.Thread] = []
        self.ran: list[Any] = []
        self.lock = threading.Lock()

    def __call__(self, job: jobq.Job[Any]) -> None:
        if job.payload == "hang":
            with self.lock:
                self.threads.append(threading.current_thread())
            self.release.wait()
        else:
            self.ran.append(job.payload)

    def alive(self) -> int:
        with self.lock:
            return sum(thread.is_alive() for thread in self.threads)

    def end(self) -> None:
        """Let every blocked handler return, and wait for its thread to end."""
        self.release.set()
        with self.lock:
            threads = list(self.threads)
        for thread in threads:
            thread.join(WAIT)
            assert not thread.is_alive()


class Logged(logging.Handler):
    """The jobq logger's records, with a wait for a number of them."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen = threading.Condition()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        with self.seen:
            self.records.append(record)
            self.seen.notify_all()

    def matching(self, text: str) -> list[logging.LogRecord]:
        with self.seen:
            return [record for record in self.records if text in record.getMessage()]

    def count(self, text: str) -> int:
        return len(self.matching(text))

    def wait(self, text: str, count: int) -> bool:
        with self.seen:
            return self.seen.wait_for(lambda: self.count(text) >= count, WAIT)


@pytest.fixture
def logged() -> Iterator[Logged]:
    handler = Logged()
    logger = logging.getLogger("jobq")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture
def hang() -> Iterator[Hang]:
    blocked = Hang()
    yield blocked
    blocked.end()


def hanging_queue(hang: Hang, **options: Any) -> jobq.JobQueue[Any]:
    options = {"timeout": LIMIT, "timeout_grace": GRACE, **options}
    return jobq.JobQueue(hang, jitter=False, base_delay=0.01, **options)


@pytest.mark.parametrize(
    ("value", "error"),
    [(-1, ValueError), ("2", TypeError), (True, TypeError), (1.5, TypeError)],
)
def test_a_bad_max_abandoned_is_refused_at_construction(
    value: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="max_abandoned"):
        jobq.JobQueue(lambda job: None, max_abandoned=value)  # type: ignore[arg-type]


def test_300_hanging_jobs_hold_at_most_workers_plus_max_abandoned_threads(
    hang: Hang, logged: Logged
) -> None:
    """The issue's workload: 4 workers, 3 attempts each of 300 jobs that
    hang for good. Two abandoned threads are replaced; every further
    abandonment takes a worker out of the pool, logged at ERROR, until no
    worker is left and nothing more is abandoned."""
    before = set(threading.enumerate())
    with hanging_queue(hang, max_attempts=3, max_abandoned=2) as queue:
        queue.enqueue_many(["hang"] * 300)
        queue.start(workers=4)
        assert logged.wait(NOT_REPLACED, 4)

        stats = queue.stats()
        assert stats.abandoned == 6 == hang.alive()
        workers = queue.worker_stats()
        assert (workers.busy, workers.idle, workers.lost) == (0, 0, 4)
        assert workers.degraded
        pool = [
            thread
            for thread in set(threading.enumerate()) - before
            if thread.name.startswith("jobq-worker")
        ]
        assert len(pool) == 6  # every one of them hung: 4 workers + 2
        errors = logged.matching(NOT_REPLACED)
        assert all(record.levelno == logging.ERROR for record in errors)
        assert "max_abandoned=2" in errors[0].getMessage()
        assert stats.pending == 300  # nobody left to take them, none lost

        later = queue.enqueue("after")  # still accepted
        hang.end()  # the hung calls return: the pool grows back and drains
        assert queue.join(WAIT)

        assert "after" in hang.ran
        assert queue.get(later) is None  # completed
        assert queue.stats().completed == 301
        assert queue.stats().abandoned == 0
        assert queue.worker_stats().lost == 0
        assert logged.count(RETURNED) >= 1


def test_a_pool_short_of_hung_threads_runs_other_jobs_on_the_workers_left(
    hang: Hang, logged: Logged
) -> None:
    with hanging_queue(hang, max_attempts=1, max_abandoned=1) as queue:
        queue.enqueue_many(["hang"] * 3)
        queue.start(workers=4)
        assert logged.wait(NOT_REPLACED, 2)  # the first one was replaced
        assert queue.worker_stats().lost == 2
        assert queue.stats().abandoned == 3

        queue.enqueue_many(range(20))
        assert queue.join(WAIT)  # run by the two workers left

        assert sorted(hang.ran) == list(range(20))
        hang.end()
        assert logged.wait(RETURNED, 1)
        assert queue.worker_stats().lost == 0
        assert queue.stats().abandoned == 0


def test_max_abandoned_defaults_to_the_number_of_workers(
    hang: Hang, logged: Logged
) -> None:
    with hanging_queue(hang, max_attempts=1) as queue:
        queue.enqueue_many(["hang"] * 3)
        queue.start(workers=2)
        assert logged.wait(NOT_REPLACED, 1)

        assert queue.stats().abandoned == 3
        assert queue.worker_stats().lost == 1
        assert "max_abandoned=2" in logged.matching(NOT_REPLACED)[0].getMessage()


def test_with_every_worker_lost_enqueue_works_and_stop_and_close_return_in_time(
    hang: Hang, logged: Logged
) -> None:
    queue = hanging_queue(hang, max_attempts=1, max_abandoned=0)
    queue.enqueue_many(["hang"] * 2)
    queue.start(workers=2)
    assert logged.wait(NOT_REPLACED, 2)
    assert queue.worker_stats().lost == 2

    assert not queue.enqueue("later").duplicate
    started = time.monotonic()
    queue.stop(timeout=5)
    queue.close(timeout=5)

    assert time.monotonic() - started < 5
    assert queue.worker_stats().lost == 0  # not running: nothing is lacking
