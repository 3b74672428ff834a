"""Reads: what the store declares, ``stats``, ``finished_per_minute``
(optional), ``list_jobs`` and ``next_due``."""

from __future__ import annotations

from typing import Any

import pytest

import jobq
from jobq import Fatal, Job, JobState, Stats
from jobq.stores.base import (
    Store,
    missing_members,
)
from jobq.testing.clock import T0, Clock
from jobq.testing.contract.base import (
    ContractBase,
    MakeQueue,
    Recorder,
    bury,
    claim_one,
    die,
    succeed,
)


class ReadTests(ContractBase):
    """The store's members and reads: ``stats``, ``list_jobs``, ``next_due``,
    ``finished_per_minute`` where present."""

    # -- what the store declares -------------------------------------------------------

    def test_the_store_has_every_member_of_the_contract(self) -> None:
        store = self.make_store()

        assert missing_members(store) == []
        assert isinstance(store, Store)
        assert store.lease_seconds is None or store.lease_seconds > 0
        assert isinstance(store.claim_batch, int)
        assert store.claim_batch >= 1
        for capability in (
            "shared_between_processes",
            "keeps_results",
            "transactional_add",
        ):
            assert isinstance(getattr(store, capability), bool), capability

    # -- stats -------------------------------------------------------------------------

    def test_stats_count_delayed_jobs_as_pending(self, make_queue: MakeQueue) -> None:
        queue = make_queue(succeed)
        queue.enqueue("now")
        queue.enqueue("later", delay=3600)

        assert queue.stats() == Stats(
            pending=2, running=0, dead=0, completed=0, retried=0, delayed=1
        )

    def test_stats_stop_counting_a_job_as_delayed_once_it_is_due(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)
        queue.enqueue("later", delay=60)
        assert queue.stats().delayed == 1

        clock.advance(60)

        assert (queue.stats().pending, queue.stats().delayed) == (1, 0)

    def test_stats_count_a_job_waiting_to_retry_as_retrying_and_delayed(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(
            Recorder(ValueError("once")), base_delay=60, jitter=False, clock=clock
        )
        queue.enqueue("fails once")
        queue.run_pending()
        queue.enqueue("later", delay=3600)
        queue.enqueue("now")

        stats = queue.stats()

        assert (stats.pending, stats.delayed, stats.retrying) == (3, 2, 1)

    def test_stats_stop_counting_a_job_as_retrying_once_it_is_due(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(
            Recorder(ValueError("once")), base_delay=60, jitter=False, clock=clock
        )
        queue.enqueue("fails once")
        queue.run_pending()
        assert queue.stats().retrying == 1

        clock.advance(60)

        stats = queue.stats()
        assert (stats.pending, stats.delayed, stats.retrying) == (1, 0, 0)

    def test_stats_count_a_running_job(self, make_queue: MakeQueue) -> None:
        seen: list[Stats] = []

        def handler(job: Job[Any]) -> None:
            seen.append(queue.stats())

        queue = make_queue(handler)
        queue.enqueue_many([1, 2])

        queue.run_pending(limit=1)

        assert seen == [Stats(pending=1, running=1, dead=0, completed=0, retried=0)]
        assert queue.stats() == Stats(
            pending=1, running=0, dead=0, completed=1, retried=0
        )

    def test_stats_count_dead_completed_and_retried_jobs(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        def handler(job: Job[Any]) -> None:
            if job.payload == "dies":
                raise Fatal("no")
            if job.payload == "retries" and job.attempt == 1:
                raise ValueError("later")

        queue = make_queue(handler, base_delay=60, clock=clock)
        queue.enqueue_many(["dies", "retries", "succeeds"])

        queue.run_pending()

        assert queue.stats() == Stats(
            pending=1, running=0, dead=1, completed=1, retried=1, delayed=1,
            retrying=1,
        )  # fmt: skip

    def test_stats_count_completed_and_retried_per_queue_object(
        self, make_queue: MakeQueue
    ) -> None:
        first = make_queue(succeed)
        first.enqueue("x")
        first.run_pending()
        assert first.stats().completed == 1
        first.close()

        second = make_queue(succeed)  # the same store, for stores that persist

        assert second.stats().completed == 0

    # -- jobs finished per minute (Store.finished_per_minute, where present) -----------

    def test_finished_per_minute_counts_kept_completed_and_dead_jobs_by_minute(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        def handler(job: Job[Any]) -> None:
            clock.advance(job.payload["takes"])
            if job.payload["dies"]:
                raise Fatal("no")

        queue = make_queue(handler, keep_completed=600, clock=clock)
        if queue.finished_per_minute() is None:
            pytest.skip("the store has no finished_per_minute (optional)")
        minute = T0 - T0 % 60  # the clock is at the start of a minute
        clock.advance(minute + 10 - clock())
        queue.enqueue_many([
            {"takes": 0, "dies": False}, {"takes": 0, "dies": True},
            {"takes": 60, "dies": False},  # ends in the next minute
            {"takes": 0, "dies": True},
        ])  # fmt: skip
        queue.run_pending()

        found = queue.finished_per_minute(3)

        assert found == [
            jobq.FinishedMinute(minute - 60, 0, 0),
            jobq.FinishedMinute(minute, 1, 1),
            jobq.FinishedMinute(minute + 60, 1, 1),
        ]

    def test_finished_per_minute_leaves_out_expired_and_older_jobs(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(die, clock=clock)
        if queue.finished_per_minute() is None:
            pytest.skip("the store has no finished_per_minute (optional)")
        kept = make_queue(succeed, keep_completed=90, clock=clock)
        clock.advance(T0 - T0 % 60 - clock())  # the start of a minute
        queue.enqueue("dies long ago")
        queue.run_pending()
        kept.enqueue("expires")
        kept.run_pending()
        clock.advance(120)  # the completed one expired (not purged yet)

        assert queue.finished_per_minute(2) == [
            jobq.FinishedMinute(clock() - 60, 0, 0),
            jobq.FinishedMinute(clock(), 0, 0),
        ]
        assert [(m.completed, m.died) for m in queue.finished_per_minute(3) or []] == [
            (0, 1),
            (0, 0),
            (0, 0),
        ]

    # -- list_jobs and next_due --------------------------------------------------------

    def test_list_jobs_shows_the_jobs_in_one_state(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(Recorder(Fatal("down")), keep_completed=60, clock=clock)
        dead = bury(queue, "dead")
        completed = queue.enqueue("completed")
        assert queue.run_pending() == 1
        running = queue.enqueue("running")
        pending = queue.enqueue("pending", delay=10)
        store = queue.store
        claimed = claim_one(store, clock())
        assert claimed is not None
        assert claimed.id == running.id

        def listed(state: JobState) -> list[tuple[int, JobState]]:
            return [(record.id, record.state) for record in store.list_jobs(state)]

        assert listed(JobState.PENDING) == [(pending.id, JobState.PENDING)]
        assert listed(JobState.RUNNING) == [(running.id, JobState.RUNNING)]
        assert listed(JobState.DEAD) == [(dead.id, JobState.DEAD)]
        assert listed(JobState.COMPLETED) == [(completed.id, JobState.COMPLETED)]

    def test_list_jobs_shows_pending_jobs_by_due_time_then_priority_then_id(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)
        later = queue.enqueue("later", delay=10, priority=5)
        low = queue.enqueue("low", priority=-1)
        high = queue.enqueue("high", priority=1)
        also_low = queue.enqueue("also low", priority=-1)

        pending = queue.store.list_jobs(JobState.PENDING)
        first_two = queue.store.list_jobs(JobState.PENDING, limit=2)

        assert [r.id for r in pending] == [high.id, low.id, also_low.id, later.id]
        assert [r.id for r in first_two] == [high.id, low.id]

    def test_list_jobs_shows_dead_jobs_oldest_buried_first_up_to_the_limit(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(die, clock=clock)
        first, second, third = (bury(queue, n) for n in range(3))
        queue.retry_dead(first)
        queue.run_pending()

        dead = queue.store.list_jobs(JobState.DEAD, limit=2)

        assert [r.id for r in dead] == [second.id, third.id]

    def test_next_due_is_when_the_earliest_pending_job_is_due(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)
        queue.stats()  # opens the store
        store = queue.store
        assert store.next_due() is None

        queue.enqueue("in a minute", delay=60)
        sooner = queue.enqueue("in half a minute", delay=30, priority=-5)
        assert store.next_due() == T0 + 30

        queue.cancel(sooner)
        assert store.next_due() == T0 + 60

        queue.enqueue("now", priority=-5)
        assert store.next_due() == T0
        queue.run_pending()
        assert store.next_due() == T0 + 60
