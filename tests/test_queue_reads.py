"""The reads that monitoring uses: ``next_due``, ``worker_stats``, ``clock``,
``finished_per_minute``, and ``add_middleware`` for integrations turned on
after construction."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from older_store import OlderStore

import jobq
from jobq.testing import Clock

MakeQueue = Callable[..., jobq.JobQueue[Any]]


def test_next_due_is_when_the_job_that_runs_next_fell_due_on_every_store(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(None, clock=clock)
    assert queue.next_due() is None
    queue.enqueue("later", delay=60)
    assert queue.next_due() == pytest.approx(clock.now + 60)
    queue.enqueue("now")
    start = clock.now

    clock.advance(30)

    assert queue.next_due() == pytest.approx(start)
    assert clock() - (queue.next_due() or 0) == pytest.approx(30)
    assert queue.clock is not None
    assert queue.clock() == clock.now


def test_worker_stats_count_busy_and_idle_workers() -> None:
    started, release = threading.Event(), threading.Event()

    def handler(job: jobq.Job[Any]) -> None:
        started.set()
        release.wait(10)

    queue: jobq.JobQueue[Any] = jobq.JobQueue(handler)
    assert queue.worker_stats() == jobq.WorkerStats(busy=0, idle=0)
    with queue.start(workers=3):
        queue.enqueue("x")
        assert started.wait(10)
        assert queue.worker_stats() == jobq.WorkerStats(busy=1, idle=2)
        release.set()
        assert queue.join(10)
        assert queue.worker_stats() == jobq.WorkerStats(busy=0, idle=3)
    assert queue.worker_stats() == jobq.WorkerStats(busy=0, idle=0)


def test_added_middleware_wraps_later_attempts_innermost_until_removed() -> None:
    calls: list[str] = []

    def named(name: str) -> jobq.Middleware:
        def middleware(job: jobq.Job[Any], call_next: Callable[[], object]) -> object:
            calls.append(name)
            return call_next()

        return middleware

    queue: jobq.JobQueue[Any] = jobq.JobQueue(
        lambda job: calls.append("handler"), middleware=[named("given")]
    )
    remove = queue.add_middleware(named("added"))
    queue.enqueue("x")
    queue.run_pending()
    remove()
    queue.enqueue("y")
    queue.run_pending()

    assert calls == ["given", "added", "handler", "given", "handler"]


def test_added_middleware_must_be_callable() -> None:
    with pytest.raises(TypeError, match="middleware must be callable"):
        jobq.JobQueue().add_middleware(42)  # type: ignore[arg-type]


def test_next_due_tells_how_long_an_overdue_job_waited_on_the_store_s_own_clock(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(None)  # PostgreSQL: the database's clock
    queue.enqueue("x", at=time.time() - 60)

    due = queue.next_due()

    assert due is not None
    assert 55 < time.time() - due < 65


def test_a_store_written_before_kept_counts_reports_none_and_tells_no_minutes() -> None:
    with jobq.JobQueue(lambda job: 1, store=OlderStore(), keep_completed=60) as queue:
        queue.enqueue("x")
        queue.run_pending()

        assert (queue.stats().kept, queue.stats().completed) == (0, 1)
        assert queue.finished_per_minute() is None
        assert queue.keep_completed == 60


@pytest.mark.parametrize("minutes", [0, -1, 1441, 2.0, True, "10"])
def test_finished_per_minute_refuses_a_bad_number_of_minutes(minutes: Any) -> None:
    with jobq.JobQueue() as queue, pytest.raises(ValueError, match="minutes must be"):
        queue.finished_per_minute(minutes)
