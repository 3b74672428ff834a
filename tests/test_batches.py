"""Claiming several jobs at once: the store calls behind it, on every store,
and what workers that batch must still guarantee (jobq._workers)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import jobq
from jobq import Job, JobState
from jobq.stores import JsonFileStore, PostgresStore, SqliteStore
from jobq.stores.base import Done, Failure
from jobq.testing import Clock
from jobq.types import AttemptError

MakeQueue = Callable[..., jobq.JobQueue[Any]]


def succeed(job: Job[Any]) -> str:
    return "ok"


def test_claim_many_takes_due_jobs_in_run_order_up_to_the_limit(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(succeed, clock=clock)
    low = queue.enqueue_many(["a", "b"])
    high = queue.enqueue("c", priority=5)
    queue.enqueue("later", delay=60)
    store = queue.store

    first = store.claim_many(clock(), 2)
    rest = store.claim_many(clock(), 10)

    assert [c.id for c in first] == [high.id, low[0].id]
    assert [c.id for c in rest] == [low[1].id]
    assert [c.attempt for c in first + rest] == [1, 1, 1]
    assert store.claim_many(clock(), 10) == []
    assert queue.stats().running == 3


def test_finish_many_records_current_claims_and_refuses_stale_ones(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(succeed, clock=clock)
    first, second = queue.enqueue_many(["a", "b"])
    store = queue.store
    stale, current = store.claim_many(clock(), 2)
    store.release([stale], clock())
    (again,) = store.claim_many(clock(), 1)

    assert store.finish_many(
        [Done(stale, None), Done(current, None)], None, clock()
    ) == [False, True]

    assert queue.get(second) is None
    record = queue.get(first)
    assert record is not None
    assert record.state is JobState.RUNNING
    assert store.finish_many([Done(again, None)], None, clock()) == [True]
    assert queue.stats().pending + queue.stats().running == 0


def test_fail_many_records_retries_and_deaths_and_refuses_stale_claims(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(succeed, clock=clock)
    retried, dead, reclaimed = queue.enqueue_many(["a", "b", "c"])
    store = queue.store
    first, second, stale = store.claim_many(clock(), 3)
    store.release([stale], clock())
    (current,) = store.claim_many(clock(), 1)
    now = clock()

    recorded = store.fail_many(
        [
            Failure(
                first, AttemptError("ValueError", "try later", "tb", now), now + 60
            ),
            Failure(second, AttemptError("Fatal", "give up", "tb", now), None),
            Failure(stale, AttemptError("ValueError", "stale", "tb", now), now),
        ],
        now,
    )

    assert recorded == [True, True, False]
    again = queue.get(retried)
    assert again is not None
    assert (again.state, again.attempts, again.run_at) == (
        JobState.PENDING,
        1,
        now + 60,
    )
    assert again.last_error == "ValueError: try later"
    [buried] = queue.dead_jobs()
    assert (buried.id, buried.attempts, buried.last_error) == (
        dead.id,
        1,
        "Fatal: give up",
    )
    still = queue.get(reclaimed)
    assert still is not None
    assert (still.state, still.attempts) == (JobState.RUNNING, 0)
    assert queue.stats().pending == 1
    assert store.fail_many([Failure(current, buried.errors[0], None)], now) == [True]
    assert queue.stats().dead == 2


def test_release_makes_jobs_pending_again_without_counting_an_attempt(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(succeed, clock=clock)
    jobs = queue.enqueue_many(["a", "b"])
    store = queue.store
    claims = store.claim_many(clock(), 2)

    store.release(claims, clock())
    store.release(claims, clock())  # stale now: changes nothing

    assert queue.stats().pending == 2
    assert queue.stats().running == 0
    again = store.claim_many(clock(), 2)
    assert [(c.id, c.attempt) for c in again] == [(j.id, 1) for j in jobs]


def test_a_handler_that_blocks_holds_back_none_of_the_jobs_claimed_with_it(
    make_queue: MakeQueue, store_kind: str
) -> None:
    """Jobs claimed in one batch wait where any worker takes them: while one
    worker is stuck in a handler, the other runs every other job."""
    release = threading.Event()
    others_done = threading.Event()
    ran: Counter[int] = Counter()
    lock = threading.Lock()
    total = 400

    def handler(job: Job[Any]) -> None:
        if job.payload == "block":
            assert release.wait(30)
            return
        with lock:
            ran[job.id] += 1
            if len(ran) == total:
                others_done.set()

    queue = make_queue(handler)
    queue.store.claim_batch = 16
    queue.enqueue_many(["fast"] * (total // 2) + ["block"] + ["fast"] * (total // 2))
    queue.start(workers=2)
    try:
        assert others_done.wait(60), f"only {len(ran)} of {total} ran"
    finally:
        release.set()
    assert queue.join(timeout=30)
    assert set(ran.values()) == {1}


def test_a_stop_gives_claimed_jobs_that_did_not_start_back(
    make_queue: MakeQueue,
) -> None:
    ran: Counter[int] = Counter()
    reached, stopped = threading.Event(), threading.Event()

    def handler(job: Job[Any]) -> None:
        ran[job.id] += 1
        if len(ran) == 300:  # the worker holds the rest of its batch
            reached.set()
            assert stopped.wait(60)

    queue = make_queue(handler)
    queue.store.claim_batch = 16
    jobs = queue.enqueue_many(["x"] * 1000)
    queue.start(workers=1)
    assert reached.wait(60)
    queue.stop(timeout=0)  # this worker ends after its running handler
    stopped.set()
    queue.stop(timeout=30)  # waits for the worker to give its claims back

    stats = queue.stats()
    assert (stats.pending, stats.running) == (700, 0)
    queue.start(workers=1)
    assert queue.join(timeout=60)
    assert ran == Counter({job.id: 1 for job in jobs})


def test_failed_attempts_of_a_batch_are_recorded_together_each_for_its_job(
    make_queue: MakeQueue,
) -> None:
    """A burst of failures (an endpoint down) is recorded a batch at a time,
    as successes are, and every job still gets its own retries and errors."""
    attempts: Counter[int] = Counter()
    lock = threading.Lock()

    def fail_twice(job: Job[Any]) -> None:
        with lock:
            attempts[job.id] += 1
        if job.attempt <= 2:
            raise ConnectionError(f"attempt {job.attempt} refused")

    queue = make_queue(fail_twice, base_delay=0, max_attempts=3)
    store = queue.store
    store.claim_batch = 16
    batch_sizes: list[int] = []
    fail_many = store.fail_many

    def counted(failures: Any, now: float) -> list[bool]:
        batch_sizes.append(len(failures))
        return fail_many(failures, now)

    store.fail_many = counted  # type: ignore[method-assign]
    jobs = queue.enqueue_many(["x"] * 150)
    queue.start(workers=2)
    assert queue.join(timeout=60)

    assert attempts == Counter({job.id: 3 for job in jobs})
    assert sum(batch_sizes) == 2 * len(jobs)
    assert max(batch_sizes) > 1
    stats = queue.stats()
    assert (stats.completed, stats.retried, stats.dead) == (150, 300, 0)


@pytest.mark.parametrize("kind", ["json", "sqlite"])
def test_claim_batch_must_be_a_positive_int(kind: str, tmp_path: Path) -> None:
    make = {"json": JsonFileStore, "sqlite": SqliteStore}[kind]
    with pytest.raises(ValueError, match="claim_batch must be at least 1"):
        make(tmp_path / "jobs", claim_batch=0)
    with pytest.raises(TypeError, match="claim_batch must be an int"):
        make(tmp_path / "jobs", claim_batch="8")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="claim_batch"):
        PostgresStore("postgresql://localhost/x", claim_batch=-1)
