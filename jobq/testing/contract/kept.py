"""Kept results: with ``keep_completed`` a finished job stays ``completed``
with its result until ``keep_until``, then is gone."""

from __future__ import annotations

import datetime as dt

from jobq import JobState, Stats
from jobq.testing.clock import T0, Clock
from jobq.testing.contract.base import (
    ContractBase,
    MakeQueue,
    succeed,
)


class KeptResultTests(ContractBase):
    """Completed jobs kept with their results (``finish_many`` with a
    ``keep_until``)."""

    # -- keep_completed ----------------------------------------------------------------

    def test_keep_completed_keeps_the_result_for_that_many_seconds(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(
            lambda job: {"sent": job.payload}, keep_completed=60, clock=clock
        )
        job = queue.enqueue("ann")
        queue.run_pending()

        clock.advance(59.9)
        record = queue.get(job)
        assert record is not None
        assert record.state is JobState.COMPLETED
        assert record.result == {"sent": "ann"}

        clock.advance(0.2)
        assert queue.get(job) is None

    def test_keep_completed_accepts_a_timedelta(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, keep_completed=dt.timedelta(minutes=2), clock=clock)
        job = queue.enqueue(1)
        queue.run_pending()

        clock.advance(119)
        assert queue.get(job) is not None
        clock.advance(2)
        assert queue.get(job) is None

    def test_a_result_that_is_not_json_is_kept_as_none(
        self, make_queue: MakeQueue
    ) -> None:
        queue = make_queue(lambda job: object(), keep_completed=60)
        job = queue.enqueue("x")

        queue.run_pending()

        record = queue.get(job)
        assert record is not None
        assert (record.state, record.result) == (JobState.COMPLETED, None)
        assert queue.stats().completed == 1

    def test_a_kept_completed_job_is_neither_pending_nor_running(
        self, make_queue: MakeQueue
    ) -> None:
        queue = make_queue(succeed, keep_completed=60)
        queue.enqueue(1)
        queue.run_pending()

        assert queue.stats() == Stats(
            pending=0, running=0, dead=0, completed=1, retried=0, kept=1
        )
        assert queue.join(timeout=0)

    def test_a_kept_completed_job_cannot_be_cancelled(
        self, make_queue: MakeQueue
    ) -> None:
        queue = make_queue(succeed, keep_completed=60)
        job = queue.enqueue(1)
        queue.run_pending()

        assert queue.cancel(job) is False
        assert queue.get(job) is not None

    # -- counted until they expire -----------------------------------------------------

    def test_stats_count_kept_completed_jobs_until_they_expire(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, keep_completed=60, clock=clock)
        queue.enqueue("first")
        queue.run_pending()
        clock.advance(30)
        queue.enqueue("second")
        queue.run_pending()
        assert queue.stats().kept == 2

        clock.advance(45)  # the first expired; no finish purged it yet
        assert (queue.stats().kept, queue.stats().completed) == (1, 2)

        clock.advance(30)
        assert queue.stats().kept == 0

    def test_stats_count_no_kept_jobs_when_results_are_not_kept(
        self, make_queue: MakeQueue
    ) -> None:
        queue = make_queue(succeed)
        queue.enqueue("x")
        queue.run_pending()

        assert (queue.stats().kept, queue.stats().completed) == (0, 1)

    # -- the attempt's times; a restart (persistent stores) ----------------------------

    def test_a_kept_success_keeps_when_its_attempt_started_and_finished(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(lambda job: clock.advance(2), keep_completed=60, clock=clock)
        job = queue.enqueue("x")

        queue.run_pending()

        record = queue.get(job)
        assert record is not None
        assert record.state is JobState.COMPLETED
        assert (record.started_at, record.finished_at) == (T0, T0 + 2)

    def test_a_kept_completed_job_and_its_result_are_the_same_after_a_restart(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        self.skip_unless_persistent()
        queue = make_queue(
            lambda job: {"sent": job.payload}, keep_completed=60, clock=clock
        )
        job = queue.enqueue("ann")
        queue.run_pending()
        before = queue.get(job)
        assert before is not None
        assert before.result == {"sent": "ann"}
        queue.close()

        again = make_queue(succeed, clock=clock)

        assert again.get(job) == before
        clock.advance(60.1)
        assert again.get(job) is None
