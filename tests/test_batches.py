"""Claiming several jobs at once: what workers that batch must still
guarantee (jobq._worker.pool). The store calls behind it (``claim_many``,
``finish_many``, ``fail_many``, ``release``) are in
``jobq.testing.StoreContractTests``."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import jobq
from jobq import Job
from jobq.stores import JsonFileStore, PostgresStore, SqliteStore

MakeQueue = Callable[..., jobq.JobQueue[Any]]


def succeed(job: Job[Any]) -> str:
    return "ok"


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

    def counted(failures: Any, now: float, **marks: Any) -> list[bool]:
        batch_sizes.append(len(failures))
        return fail_many(failures, now, **marks)

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
