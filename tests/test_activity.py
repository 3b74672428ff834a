"""The queue's figures from its workers: the registry row a started queue
writes (and removes when it stops), the jobs it shows running, and what an
attempt counts in every way it can end: returned, raised, abandoned at its
time limit then returning late, refused as stale, never started.

How each store keeps the figures is in ``jobq.testing.contract.activity``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jobq
from jobq._worker.heartbeat import Heartbeat
from jobq._worker.tally import (
    CANCELLED,
    DEAD,
    UNRECORDED_FAILURE,
    UNRECORDED_SUCCESS,
    Tally,
    bucket,
)
from jobq.activity import BUCKETS, ERROR_CHARS, TaskError, TaskOutcomes
from jobq.stores import SqliteStore

MakeQueue = Callable[..., jobq.JobQueue[Any]]
WAIT = 20.0


def wait_for(check: Callable[[], Any]) -> Any:
    """``check()`` once it is truthy: a beat has no event to wait on."""
    deadline = time.monotonic() + WAIT
    while not (found := check()):
        assert time.monotonic() < deadline, "never came"
        threading.Event().wait(0.02)
    return found


def durations(*seconds: float) -> tuple[int, ...]:
    counts = [0] * BUCKETS
    for value in seconds:
        counts[bucket(value)] += 1
    return tuple(counts)


def test_the_tally_counts_attempts_ends_and_what_the_store_refused() -> None:
    tally = Tally()
    attempts = [("a", 0.0005, True), ("a", 0.003, False), ("a", 0.003, True),
                (None, 2.0, False)]  # fmt: skip
    for task, seconds, returned in attempts:
        tally.attempts.append((task, bucket(seconds), returned))
    tally.count("a", DEAD)
    tally.count("a", UNRECORDED_SUCCESS)  # the store refused one success
    tally.count(None, UNRECORDED_FAILURE)
    tally.count(None, CANCELLED)  # a pending job cancelled

    rows = {row.task: row for row in tally.take(60.0)}

    assert rows["a"] == TaskOutcomes(60.0, "a", 1, 1, 1, 0,
                                     durations(0.0005, 0.003, 0.003))  # fmt: skip
    assert rows[None] == TaskOutcomes(60.0, None, 0, 0, 0, 1, durations(2.0))
    assert tally.take(120.0) == []


def test_counts_a_beat_could_not_write_are_written_by_the_next() -> None:
    tally = Tally()
    tally.attempts.append(("a", bucket(0.01), True))
    first = tally.take(60.0)
    tally.give_back(first)
    tally.attempts.append(("a", bucket(0.01), True))

    assert sorted(tally.take(120.0)) == [
        TaskOutcomes(60.0, "a", 1, 0, 0, 0, durations(0.01)),
        TaskOutcomes(120.0, "a", 1, 0, 0, 0, durations(0.01)),
    ]


def test_the_tally_keeps_each_tasks_newest_error_cut_to_its_start() -> None:
    tally = Tally()
    tally.attempts.append(("a", bucket(0.01), False))
    long = TaskError(5.0, 2, "ValueError: " + "x" * 1000)
    tally.errors.extend([("a", TaskError(3.0, 1, "old")), ("a", long)])
    taken_before = TaskError(4.0, 3, "its attempt was counted by an earlier take")
    tally.errors.append(("b", taken_before))

    rows = {row.task: row for row in tally.take(60.0)}

    error = rows["a"].error
    assert error is not None
    assert (error.at, error.job, len(error.text)) == (5.0, 2, ERROR_CHARS)
    assert error.text.startswith("ValueError: xxx")
    assert rows["b"] == TaskOutcomes(60.0, "b", 0, 0, 0, 0, durations(), taken_before)


def test_a_successful_job_leaves_no_error_in_the_tally() -> None:
    tally = Tally()
    tally.attempts.append(("a", bucket(0.01), True))

    (row,) = tally.take(60.0)
    assert row.error is None


def test_a_job_begun_after_a_beat_read_its_clocks_shows_as_begun_then(
    tmp_path: Path,
) -> None:
    """A beat reads its clocks, then the running jobs: one that began in
    between shows as begun at the beat (its ``seen``), never after it (CI
    once saw a running job begun 0.4 ms after the row that showed it)."""
    queue: jobq.JobQueue[Any] = jobq.JobQueue(None, store=SqliteStore(tmp_path / "q"))
    queue.enqueue("runs")
    (claim,) = queue.store.claim_many(time.time(), 1)
    heartbeat = Heartbeat(queue.store, time.time)

    heartbeat.beat(Tally(), 1, {0: (claim, time.monotonic() + 60)})

    (info,) = queue.processes() or ()
    assert [(job.id, job.started) for job in info.running] == [(claim.id, info.seen)]
    queue.close()


def test_a_started_queue_registers_shows_its_running_jobs_and_leaves(
    make_queue: MakeQueue,
) -> None:
    release, entered = threading.Event(), threading.Event()

    def handler(job: jobq.Job[Any]) -> None:
        entered.set()
        release.wait(WAIT)

    queue = make_queue(handler)
    job = queue.enqueue("blocks")
    queue.start(workers=3)
    try:
        assert entered.wait(WAIT)
        (info,) = wait_for(lambda: [p for p in queue.processes() or () if p.busy == 1])
    finally:
        release.set()
    assert (info.workers, info.busy, info.idle, info.gone) == (3, 1, 2, False)
    assert [running.id for running in info.running] == [job.id]
    assert info.started <= info.running[0].started <= info.seen
    queue.stop(timeout=WAIT)

    assert queue.processes() == []  # it left the registry as it stopped
    (minute,) = queue.activity(1)
    assert minute.succeeded == 1
    assert (minute.pending, minute.running) in ((1, 0), (0, 1))  # sampled at start


def test_an_attempt_abandoned_then_returning_late_counts_once_as_failed(
    make_queue: MakeQueue,
) -> None:
    release, entered = threading.Event(), threading.Event()

    def handler(job: jobq.Job[Any]) -> None:
        entered.set()
        release.wait(WAIT)  # blocked in C: abandoned after the grace

    queue = make_queue(handler, timeout=0.05, timeout_grace=0.05, max_attempts=1)
    queue.enqueue("hangs")
    queue.start(workers=1)
    assert entered.wait(WAIT)
    wait_for(lambda: queue.stats().abandoned == 1)
    release.set()  # it returns late: the store refuses that success
    queue.stop(timeout=WAIT)

    (task,) = queue.task_activity(1)
    assert (task.succeeded, task.failed, task.dead) == (0, 1, 1)
