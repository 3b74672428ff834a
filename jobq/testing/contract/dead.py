"""Dead letters: dead jobs are listed oldest first, revived or deleted, and
capped at ``dead_letter_limit`` (each dropped one logged)."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest

from jobq import Enqueued, Fatal, Job, JobState
from jobq.testing.clock import T0, Clock
from jobq.testing.contract.base import (
    ContractBase,
    MakeQueue,
    Recorder,
    bury,
    die,
    succeed,
)


class DeadLetterTests(ContractBase):
    """The dead-letter list: ``dead_jobs``, ``retry_dead``, ``delete_dead``,
    the cap."""

    # -- listing and reviving ----------------------------------------------------------

    def test_dead_jobs_are_listed_oldest_first(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(die, clock=clock)
        later = queue.enqueue("buried second", delay=10)
        sooner = queue.enqueue("buried first")
        queue.run_pending()
        clock.advance(10)
        queue.run_pending()

        assert [job.id for job in queue.dead_jobs()] == [sooner.id, later.id]
        assert [job.payload for job in queue.dead_jobs()] == [
            "buried first",
            "buried second",
        ]

    def test_retry_dead_revives_a_job_with_its_attempts_reset(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        handler = Recorder(Fatal("down"))
        queue = make_queue(handler, clock=clock)
        job = bury(queue, "x")
        clock.advance(100)

        assert queue.retry_dead(job) is True

        record = queue.get(job)
        assert record is not None
        assert (record.state, record.attempts, record.run_at) == (
            JobState.PENDING,
            0,
            T0 + 100,
        )
        assert queue.dead_jobs() == []

    def test_a_revived_job_keeps_its_errors(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(die, clock=clock)
        job = bury(queue, "x")
        dead = queue.get(job)
        assert dead is not None

        assert queue.retry_dead(job) is True

        record = queue.get(job)
        assert record is not None
        assert (record.last_error, record.errors) == (dead.last_error, dead.errors)
        assert record.last_error == "jobq.errors.Fatal: no such address"

    def test_a_revived_job_runs_again(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        handler = Recorder(Fatal("down"))
        queue = make_queue(handler, clock=clock)
        job = bury(queue, "x")
        queue.retry_dead(job)

        assert queue.run_pending() == 1

        assert [call.attempt for call in handler.calls] == [1, 1]
        assert queue.get(job) is None

    def test_a_revived_job_that_dies_again_is_the_newest_dead_job(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(die, clock=clock)
        first = bury(queue, "first")
        second = bury(queue, "second")
        queue.retry_dead(first)

        queue.run_pending()

        assert [job.id for job in queue.dead_jobs()] == [second.id, first.id]

    # -- delete_dead, and what retry_dead and delete_dead refuse -----------------------

    def test_delete_dead_removes_a_dead_job(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(die, clock=clock)
        job = bury(queue)

        assert queue.delete_dead(job) is True

        assert queue.get(job) is None
        assert queue.dead_jobs() == []
        assert queue.stats().dead == 0

    @pytest.mark.parametrize("manage", ["retry_dead", "delete_dead"])
    def test_retry_dead_and_delete_dead_refuse_a_pending_job(
        self, make_queue: MakeQueue, manage: str
    ) -> None:
        queue = make_queue(succeed)
        job = queue.enqueue("x")

        assert getattr(queue, manage)(job) is False

        record = queue.get(job)
        assert record is not None
        assert (record.state, record.attempts) == (JobState.PENDING, 0)

    @pytest.mark.parametrize("manage", ["retry_dead", "delete_dead"])
    def test_retry_dead_and_delete_dead_refuse_a_running_job(
        self, make_queue: MakeQueue, manage: str
    ) -> None:
        answers: list[bool] = []

        def handler(job: Job[Any]) -> None:
            answers.append(getattr(queue, manage)(job.id))

        queue = make_queue(handler)
        job = queue.enqueue("x")
        queue.run_pending()

        assert answers == [False]
        assert queue.get(job) is None  # it ran to completion undisturbed

    @pytest.mark.parametrize("manage", ["retry_dead", "delete_dead"])
    def test_retry_dead_and_delete_dead_refuse_an_unknown_or_finished_job(
        self, make_queue: MakeQueue, manage: str
    ) -> None:
        queue = make_queue(succeed, keep_completed=60)
        finished = queue.enqueue("x")
        queue.run_pending()

        assert getattr(queue, manage)(finished) is False
        assert getattr(queue, manage)(finished.id + 1000) is False
        record = queue.get(finished)
        assert record is not None
        assert record.state is JobState.COMPLETED

    def test_retry_dead_of_a_revived_job_returns_false(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(die, clock=clock)
        job = bury(queue)

        assert queue.retry_dead(job) is True
        assert queue.retry_dead(job) is False
        assert queue.delete_dead(job) is False
        assert queue.stats().pending == 1

    # -- the dead-letter limit ---------------------------------------------------------

    def test_dead_jobs_keep_only_the_newest(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(die, dead_letter_limit=3, clock=clock)
        jobs = [bury(queue, n) for n in range(5)]

        assert [job.id for job in queue.dead_jobs()] == [job.id for job in jobs[2:]]
        assert queue.stats().dead == 3
        assert queue.get(jobs[0]) is None
        assert queue.get(jobs[1]) is None

    def test_each_dead_job_dropped_by_the_limit_is_logged_at_warning(
        self, make_queue: MakeQueue, clock: Clock, caplog: pytest.LogCaptureFixture
    ) -> None:
        queue = make_queue(die, dead_letter_limit=3, clock=clock)
        caplog.set_level(logging.WARNING, logger="jobq")
        jobs = [bury(queue, "x") for _ in range(5)]

        warnings = [
            record
            for record in caplog.records
            if record.levelno == logging.WARNING and record.name.startswith("jobq")
        ]
        assert len(warnings) == 2
        for dropped, record in zip(jobs[:2], warnings, strict=True):
            assert re.search(rf"\b{dropped.id}\b", record.getMessage())

    # -- keys of revived jobs ----------------------------------------------------------

    def test_retry_dead_refuses_a_job_whose_key_another_live_job_holds(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(Recorder(Fatal("down")), clock=clock)
        dead = bury(queue, "old", key="invoice-7")
        live = queue.enqueue("new", key="invoice-7")
        assert live.duplicate is False

        assert queue.retry_dead(dead) is False

        dead_record, live_record = queue.get(dead), queue.get(live)
        assert dead_record is not None
        assert live_record is not None
        assert dead_record.state is JobState.DEAD
        assert live_record.state is JobState.PENDING
        assert queue.enqueue("again", key="invoice-7") == Enqueued(live.id, True)

    def test_retry_dead_takes_its_key_back_when_it_is_free(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(die, clock=clock)
        dead = bury(queue, "old", key="invoice-7")

        assert queue.retry_dead(dead) is True

        assert queue.enqueue("new", key="invoice-7") == Enqueued(dead.id, True)

    # -- the attempt's times; a restart (persistent stores) ----------------------------

    def test_a_dead_job_keeps_its_last_attempt_times_through_revive(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        def die_slowly(job: Job[Any]) -> None:
            clock.advance(3)
            raise Fatal("no such address")

        queue = make_queue(die_slowly, clock=clock)
        job = bury(queue, "x")
        [dead] = queue.dead_jobs()
        assert (dead.started_at, dead.finished_at) == (T0, T0 + 3)

        clock.advance(60)
        assert queue.retry_dead(job) is True

        revived = queue.get(job)
        assert revived is not None
        assert (revived.state, revived.attempts) == (JobState.PENDING, 0)
        assert (revived.started_at, revived.finished_at) == (T0, T0 + 3)

    def test_dead_jobs_are_the_same_after_a_restart(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        self.skip_unless_persistent()
        queue = make_queue(die, clock=clock)
        first = bury(queue, "first", key="k", meta={"a": "1", "b": "2"})
        second = bury(queue, "second")
        queue.retry_dead(first)
        queue.run_pending()
        before = queue.dead_jobs()
        assert [job.id for job in before] == [second.id, first.id]
        queue.close()

        again = make_queue(die, clock=clock)

        assert again.dead_jobs() == before
        assert again.stats().dead == 2
        assert again.retry_dead(first) is True
        assert again.enqueue("x", key="k") == Enqueued(first.id, True)
