"""Claims and leases: due jobs are claimed in run order, each claim fenced
by its token; batches, ``release``, the attempt's start, the claim of a
process that died, and leases on a clock of the store's own."""

from __future__ import annotations

import threading
from typing import Any, cast

import pytest

import jobq
from jobq import AttemptError, JobState
from jobq.stores.base import (
    Claim,
    Done,
    Failure,
    NewJob,
    PrefetchStore,
    Store,
    capabilities_of,
)
from jobq.testing.clock import T0, Clock
from jobq.testing.contract.base import (
    ContractBase,
    MakeQueue,
    OpenStore,
    Recorder,
    claim_one,
    claimed_again,
    fail_one,
    failed_attempt,
    finish_one,
    succeed,
)


class ClaimTests(ContractBase):
    """Run order, ``run_pending``, claims fenced by their token, batches,
    recovering the claims of a dead process, and leases that no queue's
    clock expires (``Capabilities.own_clock_leases``)."""

    # -- run order: priority, then due time, then id -----------------------------------

    def test_higher_priority_runs_first_among_due_jobs(
        self, make_queue: MakeQueue
    ) -> None:
        handler = Recorder()
        queue = make_queue(handler)
        queue.enqueue("low", priority=-1)
        queue.enqueue("normal")
        queue.enqueue("urgent", priority=10)
        queue.enqueue("high", priority=5)

        queue.run_pending()

        assert handler.payloads == ["urgent", "high", "normal", "low"]

    def test_equal_priority_runs_the_earliest_due_first_then_the_lowest_id(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        handler = Recorder()
        queue = make_queue(handler, clock=clock)
        queue.enqueue("due third", delay=20)
        queue.enqueue("due second", delay=10)
        queue.enqueue("due first, lower id", delay=5)
        queue.enqueue("due first, higher id", delay=5)
        clock.advance(60)

        queue.run_pending()

        assert handler.payloads == [
            "due first, lower id",
            "due first, higher id",
            "due second",
            "due third",
        ]

    def test_priority_beats_an_earlier_due_time(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        handler = Recorder()
        queue = make_queue(handler, clock=clock)
        queue.enqueue("early, normal")
        queue.enqueue("later, high", delay=10, priority=1)
        clock.advance(10)

        queue.run_pending()

        assert handler.payloads == ["later, high", "early, normal"]

    def test_a_delayed_high_priority_job_does_not_block_due_ones(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        handler = Recorder()
        queue = make_queue(handler, clock=clock)
        queue.enqueue("urgent, later", delay=60, priority=100)
        queue.enqueue("normal, now")

        assert queue.run_pending() == 1

        assert handler.payloads == ["normal, now"]

    # -- run_pending -------------------------------------------------------------------

    def test_run_pending_runs_due_jobs_in_the_calling_thread(
        self, make_queue: MakeQueue
    ) -> None:
        threads: list[threading.Thread] = []
        queue = make_queue(lambda job: threads.append(threading.current_thread()))
        queue.enqueue_many([1, 2])

        queue.run_pending()

        assert threads == [threading.current_thread()] * 2

    def test_run_pending_returns_how_many_ran(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)
        queue.enqueue_many([1, 2, 3])
        queue.enqueue(4, delay=10)

        assert queue.run_pending() == 3
        assert queue.run_pending() == 0

    def test_run_pending_honours_limit(self, make_queue: MakeQueue) -> None:
        handler = Recorder()
        queue = make_queue(handler)
        queue.enqueue_many([1, 2, 3, 4, 5])

        assert queue.run_pending(limit=2) == 2
        assert handler.payloads == [1, 2]
        assert queue.stats().pending == 3
        assert queue.run_pending(limit=10) == 3

    # -- claims are fenced by their token ----------------------------------------------

    def test_a_stale_claim_cannot_finish_a_job_claimed_again(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)
        job = queue.enqueue("x")
        store = queue.store
        stale, current = claimed_again(store, clock())
        assert current.id == job.id
        before = queue.stats()

        assert finish_one(store, stale, '"stale"', None, clock()) is False

        record = queue.get(job)
        assert record is not None
        assert (record.state, record.attempts) == (JobState.RUNNING, 1)
        assert queue.stats() == before
        assert finish_one(store, current, None, None, clock()) is True
        assert queue.get(job) is None

    def test_a_stale_claim_cannot_fail_a_job_claimed_again(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)
        job = queue.enqueue("x")
        store = queue.store
        stale, _current = claimed_again(store, clock())
        before = queue.stats()

        assert fail_one(store, stale, failed_attempt(clock()), None, clock()) is False

        record = queue.get(job)
        assert record is not None
        assert (record.state, record.attempts, len(record.errors)) == (
            JobState.RUNNING,
            1,
            1,
        )
        assert queue.stats() == before
        assert queue.dead_jobs() == []

    def test_a_stale_claim_cannot_end_a_job_that_is_pending_again(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)
        job = queue.enqueue("x")
        store = queue.store
        stale = claim_one(store, clock())
        assert stale is not None
        assert (
            fail_one(store, stale, failed_attempt(clock()), clock() + 60, clock())
            is True
        )

        assert finish_one(store, stale, None, None, clock()) is False
        assert fail_one(store, stale, failed_attempt(clock()), None, clock()) is False

        record = queue.get(job)
        assert record is not None
        assert (record.state, record.attempts, record.run_at) == (
            JobState.PENDING,
            1,
            T0 + 60,
        )

    def test_a_claim_cannot_finish_a_job_twice(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock, keep_completed=60)
        job = queue.enqueue("x")
        store = queue.store
        claim = claim_one(store, clock())
        assert claim is not None

        assert finish_one(store, claim, '"first"', clock() + 60, clock()) is True
        assert finish_one(store, claim, '"second"', clock() + 60, clock()) is False
        assert fail_one(store, claim, failed_attempt(clock()), None, clock()) is False

        record = queue.get(job)
        assert record is not None
        assert (record.state, record.result) == (JobState.COMPLETED, "first")

    # -- batches: claim_many, finish_many, fail_many, release --------------------------

    def test_claim_many_takes_due_jobs_in_run_order_up_to_the_limit(
        self, make_queue: MakeQueue, clock: Clock
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

    def test_claim_many_breaks_ties_by_the_lowest_id_whatever_was_changed_last(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)
        jobs = queue.enqueue_many(range(10))
        store = queue.store
        claims = store.claim_many(clock(), 10)
        for claim in reversed(claims):  # the last job changed first
            store.release([claim], clock())

        again = store.claim_many(clock(), 10)

        assert [c.id for c in again] == [job.id for job in jobs]

    def test_finish_many_records_current_claims_and_refuses_stale_ones(
        self, make_queue: MakeQueue, clock: Clock
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
        self, make_queue: MakeQueue, clock: Clock
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

        assert recorded == [JobState.PENDING, JobState.DEAD, None]
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
        assert store.fail_many([Failure(current, buried.errors[0], None)], now) == [
            JobState.DEAD
        ]
        assert queue.stats().dead == 2

    def test_release_makes_jobs_pending_again_without_counting_an_attempt(
        self, make_queue: MakeQueue, clock: Clock
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

    # -- the attempt's times; a dead process's claim -----------------------------------

    def test_a_claim_starts_the_attempt_at_its_now_and_it_is_not_finished(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)
        job = queue.enqueue("x")
        clock.advance(5)

        assert claim_one(queue.store, clock()) is not None

        record = queue.get(job)
        assert record is not None
        assert record.state is JobState.RUNNING
        assert (record.started_at, record.finished_at) == (T0 + 5, None)

    def test_a_released_claim_has_no_attempt_times(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)
        job = queue.enqueue("x")
        claim = claim_one(queue.store, clock())
        assert claim is not None

        queue.store.release([claim], clock())

        record = queue.get(job)
        assert record is not None
        assert record.state is JobState.PENDING
        assert (record.started_at, record.finished_at) == (None, None)

    def test_the_claim_of_a_dead_process_finishes_when_it_is_recovered(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        self.skip_unless_persistent()
        queue = make_queue(succeed, clock=clock)
        job = queue.enqueue("x")
        assert claim_one(queue.store, clock()) is not None
        again = self.after_a_crash(queue, make_queue, clock)

        record = again.get(job)
        assert record is not None
        assert (record.state, record.attempts) == (JobState.PENDING, 1)
        assert [error.type for error in record.errors] == ["jobq.errors.ProcessDied"]
        assert (record.started_at, record.finished_at) == (T0, T0 + 3600)

    # -- jobs taken ahead (Capabilities.prefetch) -------------------------------------

    def test_jobs_taken_ahead_run_but_have_not_started_until_marked(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)
        store = self.prefetch_store(queue.store)
        jobs = queue.enqueue_many(["a", "b", "c"])
        claims = store.claim_many(clock(), 3, start=1)
        clock.advance(5)

        assert store.start(claims[1:2], clock()) == [True]

        records = [queue.get(job) for job in jobs]
        assert [(r.state, r.started_at) for r in records if r] == [
            (JobState.RUNNING, T0),
            (JobState.RUNNING, T0 + 5),
            (JobState.RUNNING, None),
        ]

    def test_a_dead_process_s_jobs_taken_ahead_are_given_back_with_no_attempt(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        """The job it ran and the one it marked started with that job's
        outcome each count an attempt; the one never started counts none."""
        self.skip_unless_persistent()
        queue = make_queue(succeed, clock=clock)
        store = self.prefetch_store(queue.store)
        ran, started, ahead = queue.enqueue_many(["ran", "started", "ahead"])
        claims = store.claim_many(clock(), 3, start=1)
        failure = Failure(claims[0], failed_attempt(clock()), clock())
        assert store.fail_many([failure], clock(), starting=claims[1:2]) == [
            JobState.PENDING,  # the failure
            JobState.RUNNING,  # the mark: still this process's
        ]
        again = self.after_a_crash(queue, make_queue, clock)

        records = [again.get(job) for job in (ran, started, ahead)]
        assert [(r.state, r.attempts, len(r.errors)) for r in records if r] == [
            (JobState.PENDING, 1, 1),  # its failure; not claimed again since
            (JobState.PENDING, 1, 1),  # ProcessDied
            (JobState.PENDING, 0, 0),
        ]
        [never] = [r for r in records[2:] if r]
        assert (never.started_at, never.finished_at) == (None, None)

    def test_a_stopping_job_taken_ahead_whose_process_died_ends_cancelled_unrun(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        self.skip_unless_persistent()
        queue = make_queue(succeed, clock=clock)
        store = self.prefetch_store(queue.store)
        _, ahead = queue.enqueue_many(["runs", "taken ahead"])
        store.claim_many(clock(), 2, start=1)
        assert queue.cancel(ahead) is True
        record = queue.get(ahead)
        assert record is not None
        assert record.state is JobState.RUNNING  # stopping, as a running job
        again = self.after_a_crash(queue, make_queue, clock)

        record = again.get(ahead)
        assert record is not None
        assert (record.state, record.attempts, record.errors) == (
            JobState.CANCELLED,
            0,
            (),
        )

    def test_a_job_taken_ahead_whose_lease_ran_out_is_not_marked_and_goes_back(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        """A process stopped past its lease (SIGSTOP, a VM pause) must not
        start what it took ahead: another process's recovery may have given
        it back, or is about to. The mark refuses it; recovery gives it
        back with no attempt counted."""
        queue, store, claims = self.one_taken_ahead_past_its_lease(make_queue, clock)
        ahead = claims[1].id

        assert store.start(claims[1:], clock()) == [False]

        queue.store.recover(clock())
        record = queue.get(ahead)
        assert record is not None
        assert (record.state, record.attempts, record.started_at) == (
            JobState.PENDING,
            0,
            None,
        )

    def test_a_job_taken_ahead_then_taken_over_is_not_marked_by_the_old_claim(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        """Whichever write carries the old claim's mark (an outcome's or
        its own), it says the job is not this process's and leaves the new
        claim's start as it was."""
        queue, store, old = self.one_taken_ahead_past_its_lease(make_queue, clock)
        ahead = old[1].id
        queue.store.recover(clock())
        clock.advance(1)
        taken_over = store.claim_many(clock(), 2, start=2)  # another process's
        assert sorted(c.id for c in taken_over) == sorted(c.id for c in old)
        clock.advance(1)

        done = [Done(old[0], None)]
        assert store.finish_many(done, None, clock(), starting=old[1:]) == [False] * 2
        failure = [Failure(old[0], failed_attempt(clock()), clock())]
        assert store.fail_many(failure, clock(), starting=old[1:]) == [None] * 2
        assert store.start(old[1:], clock()) == [False]

        record = queue.get(ahead)
        assert record is not None
        assert (record.state, record.started_at) == (JobState.RUNNING, T0 + 3601)

    def one_taken_ahead_past_its_lease(
        self, make_queue: MakeQueue, clock: Clock
    ) -> tuple[jobq.JobQueue[Any], PrefetchStore, list[Claim]]:
        """A claim of two jobs, the second taken ahead, whose lease ran out."""
        queue = make_queue(succeed, clock=clock)
        store = self.prefetch_store(queue.store)
        queue.enqueue_many(["runs", "taken ahead"])
        claims = store.claim_many(clock(), 2, start=1)
        clock.advance(3600)
        self.expire_claims()
        return queue, store, claims

    def prefetch_store(self, store: Store) -> PrefetchStore:
        if not capabilities_of(store).prefetch:
            pytest.skip("the store takes no job ahead (no Capabilities.prefetch)")
        return cast(PrefetchStore, store)

    # -- leases on a clock of the store's own (Capabilities.own_clock_leases) ----------

    @pytest.mark.parametrize("skew", [3600.0, -3600.0], ids=["ahead", "behind"])
    def test_a_process_with_a_clock_of_its_own_takes_no_live_claim_for_expired(
        self, open_store: OpenStore, clock: Clock, skew: float
    ) -> None:
        """Two processes, one whose queue's clock is off by ``skew``: neither
        takes the other's live claim for expired, whichever made it."""
        store, _ = open_store()
        if not capabilities_of(store).own_clock_leases:
            pytest.skip("leases follow the queue's clock, or there are none "
                        "(no Capabilities.own_clock_leases)")  # fmt: skip
        skewed, _ = open_store()
        due = NewJob('"x"', clock() - abs(skew), None, 0, 3)  # due for both
        store.add([due, due], clock())
        ours = claim_one(store, clock())
        theirs = claim_one(skewed, clock() + skew)
        assert ours is not None
        assert theirs is not None

        assert skewed.recover(clock() + skew) == 0
        assert store.recover(clock()) == 0
        assert finish_one(store, ours, None, None, clock()) is True
        assert finish_one(skewed, theirs, None, None, clock() + skew) is True
