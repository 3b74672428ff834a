"""Cancelling: ``cancel`` ends a pending job ``cancelled`` at once and marks
a running one *stopping*; a stopping job ends as its claim ends (see
"Cancelling" in ``jobq.stores.base``). The tests drive the ``Store`` calls
directly, on the clock the test moves."""

from __future__ import annotations

import pytest

from jobq import Cancellation, JobState
from jobq.stores.base import Claim, Failure, NewJob, Store, capabilities_of
from jobq.stores.pages import JobPage, JobQuery, page_from_list
from jobq.testing.clock import T0, Clock
from jobq.testing.contract.base import (
    ContractBase,
    OpenStore,
    claim_one,
    claimed_again,
    fail_one,
    failed_attempt,
    finish_one,
)

#: Who cancels, in these tests.
BY = "tester"

#: How long a cancelled job is kept, in these tests.
KEEP = 600.0


def new_job(run_at: float, key: str | None = None, max_attempts: int = 3) -> NewJob:
    return NewJob('"x"', run_at, key, 0, max_attempts)


def add_one(store: Store, now: float, key: str | None = None, delay: float = 0) -> int:
    """One job added through ``add``: its id."""
    [job] = store.add([new_job(now + delay, key)], now)
    assert job.duplicate is False
    return job.id


def cancel(store: Store, job_id: int, now: float, by: str = BY) -> str | None:
    """``store.cancel`` as the queue calls it, kept ``KEEP`` seconds."""
    return store.cancel(job_id, now, by=by, keep_until=now + KEEP)


def running(store: Store, now: float, key: str | None = None) -> Claim:
    """A job added and claimed: its claim (the only due job)."""
    add_one(store, now, key)
    claim = claim_one(store, now)
    assert claim is not None
    return claim


def page(store: Store, query: JobQuery, now: float) -> JobPage:
    """A page as ``JobQueue.browse`` reads it from ``store``."""
    if capabilities_of(store).pages:
        return store.page_jobs(query, now)  # type: ignore[attr-defined, no-any-return]
    return page_from_list(store, query, now)


def state_of(store: Store, job_id: int, now: float) -> JobState | None:
    record = store.get(job_id, now)
    return None if record is None else record.state


class CancelTests(ContractBase):
    """``cancel``, ``stops_requested`` and how a stopping job ends."""

    # -- a pending job: cancelled at once ----------------------------------------------

    @pytest.mark.parametrize("delay", [0, 60], ids=["due", "delayed"])
    def test_cancel_ends_a_pending_job_cancelled(
        self, open_store: OpenStore, clock: Clock, delay: float
    ) -> None:
        store, _ = open_store()
        job_id = add_one(store, clock(), delay=delay)
        clock.advance(5)

        assert cancel(store, job_id, clock()) == "cancelled"

        record = store.get(job_id, clock())
        assert record is not None
        assert (record.state, record.attempts) == (JobState.CANCELLED, 0)
        assert record.cancellation == Cancellation(T0 + 5, BY, None)
        assert record.stopping is False

    def test_a_cancelled_job_is_kept_until_its_keep_until(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, _ = open_store()
        job_id = add_one(store, clock())
        cancel(store, job_id, clock())

        clock.advance(KEEP - 0.1)
        assert state_of(store, job_id, clock()) is JobState.CANCELLED
        assert store.stats().cancelled == 1
        clock.advance(0.1)
        assert store.get(job_id, clock()) is None
        assert store.stats().cancelled == 0

    def test_a_cancelled_job_is_listed_and_counted_as_cancelled_only(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, _ = open_store()
        job_id = add_one(store, clock())
        other = add_one(store, clock(), delay=30)

        cancel(store, job_id, clock())

        assert [r.id for r in store.list_jobs(JobState.CANCELLED)] == [job_id]
        assert [r.id for r in store.list_jobs(JobState.PENDING)] == [other]
        stats = store.stats()
        assert (stats.pending, stats.running, stats.dead) == (1, 0, 0)
        assert (stats.cancelled, stats.kept, stats.delayed) == (1, 0, 1)

    def test_cancelled_jobs_are_paged_newest_first_until_they_expire(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, _ = open_store()
        first, second = add_one(store, clock()), add_one(store, clock())
        cancel(store, first, clock())
        clock.advance(1)
        cancel(store, second, clock())

        shown = page(store, JobQuery("cancelled"), clock())
        assert [record.id for record in shown.jobs] == [second, first]
        one = page(store, JobQuery("cancelled", limit=1), clock())
        assert [record.id for record in one.jobs] == [second]
        after = JobQuery("cancelled", limit=1, after=one.after)
        assert [record.id for record in page(store, after, clock()).jobs] == [first]
        clock.advance(KEEP - 0.5)
        assert [r.id for r in page(store, JobQuery("cancelled"), clock()).jobs] == [
            second
        ]

    def test_a_cancelled_pending_job_frees_its_key(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, _ = open_store()
        first = add_one(store, clock(), key="k")
        cancel(store, first, clock())

        [again] = store.add([new_job(clock(), "k")], clock())

        assert again.duplicate is False
        assert again.id != first

    def test_a_cancelled_job_is_never_claimed(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, _ = open_store()
        job_id = add_one(store, clock(), delay=60)
        cancel(store, job_id, clock())
        clock.advance(120)

        assert store.claim_many(clock(), 10) == []
        assert store.next_due() is None
        assert state_of(store, job_id, clock()) is JobState.CANCELLED

    def test_cancelling_a_pending_job_wakes_join_callers(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, signal = open_store()
        job_id = add_one(store, clock(), delay=60)
        before = signal.settled_calls

        cancel(store, job_id, clock())

        assert signal.settled_calls > before, "cancel() did not call job_settled"

    def test_a_cancelled_job_cannot_be_revived_or_deleted_as_dead(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, _ = open_store()
        job_id = add_one(store, clock())
        cancel(store, job_id, clock())

        assert store.revive(job_id, clock()) is False
        assert store.delete_dead(job_id) is False
        assert state_of(store, job_id, clock()) is JobState.CANCELLED

    def test_cancelling_a_pending_job_changes_no_other_job(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, _ = open_store()
        claim = running(store, clock(), key="a")
        pending = add_one(store, clock(), key="b", delay=10)
        job_id = add_one(store, clock(), key="c")
        before = [store.get(i, clock()) for i in (claim.id, pending)]

        cancel(store, job_id, clock())

        assert [store.get(i, clock()) for i in (claim.id, pending)] == before
        assert store.add([new_job(clock(), "a")], clock())[0].duplicate is True
        assert store.add([new_job(clock(), "b")], clock())[0].duplicate is True

    # -- what cancel refuses -----------------------------------------------------------

    def test_cancel_refuses_a_finished_dead_cancelled_or_unknown_job(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, _ = open_store()
        completed = running(store, clock())
        assert finish_one(store, completed, '"ok"', clock() + 60, clock())
        dead = running(store, clock())
        assert fail_one(store, dead, failed_attempt(clock()), None, clock())
        cancelled = add_one(store, clock())
        assert cancel(store, cancelled, clock()) == "cancelled"
        ids = (completed.id, dead.id, cancelled)
        before = [store.get(i, clock()) for i in ids]

        for job_id in (*ids, cancelled + 1000):
            assert cancel(store, job_id, clock() + 1, by="again") is None

        assert [store.get(i, clock()) for i in ids] == before
        assert [r.id for r in store.list_jobs(JobState.DEAD)] == [dead.id]

    # -- a running job: stopping -------------------------------------------------------

    def test_cancel_marks_a_running_job_stopping(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, _ = open_store()
        claim = running(store, clock())
        clock.advance(5)

        assert cancel(store, claim.id, clock()) == "stopping"

        record = store.get(claim.id, clock())
        assert record is not None
        assert (record.state, record.stopping) == (JobState.RUNNING, True)
        assert record.cancellation == Cancellation(T0 + 5, BY, claim.attempt)
        assert (store.stats().running, store.stats().cancelled) == (1, 0)

    def test_a_stopping_job_stops_the_attempt_it_runs(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, _ = open_store()
        add_one(store, clock())
        _, current = claimed_again(store, clock())

        cancel(store, current.id, clock())

        record = store.get(current.id, clock())
        assert record is not None
        assert record.cancellation is not None
        assert record.cancellation.attempt == current.attempt == 2

    def test_a_second_cancel_of_a_stopping_job_changes_nothing(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, _ = open_store()
        claim = running(store, clock())
        cancel(store, claim.id, clock())
        before = store.get(claim.id, clock())
        clock.advance(5)

        assert cancel(store, claim.id, clock(), by="someone else") == "stopping"

        assert store.get(claim.id, clock()) == before

    def test_a_stopping_job_frees_its_key_at_once(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, _ = open_store()
        claim = running(store, clock(), key="k")
        cancel(store, claim.id, clock())

        [again] = store.add([new_job(clock(), "k")], clock())

        assert again.duplicate is False
        assert again.id != claim.id

    def test_stops_requested_names_the_stopping_claims_only(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, _ = open_store()
        for _ in range(3):
            add_one(store, clock())
        claims = store.claim_many(clock(), 3)
        assert len(claims) == 3
        assert store.stops_requested(claims) == []

        cancel(store, claims[0].id, clock())
        cancel(store, claims[2].id, clock())

        assert sorted(store.stops_requested(claims)) == [claims[0].id, claims[2].id]
        assert store.stops_requested(claims[1:2]) == []
        assert store.stops_requested([]) == []

    def test_stops_requested_ignores_a_stale_claim(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, _ = open_store()
        add_one(store, clock())
        stale, current = claimed_again(store, clock())
        cancel(store, current.id, clock())

        assert store.stops_requested([stale]) == []
        assert store.stops_requested([current]) == [current.id]

    # -- how a stopping job ends -------------------------------------------------------

    @pytest.mark.parametrize("retry_in", [0, None], ids=["retry", "no-retry"])
    def test_a_failed_attempt_ends_a_stopping_job_cancelled(
        self, open_store: OpenStore, clock: Clock, retry_in: float | None
    ) -> None:
        store, signal = open_store()
        claim = running(store, clock())
        cancel(store, claim.id, clock())
        clock.advance(3)
        error = failed_attempt(clock())
        retry_at = None if retry_in is None else clock() + retry_in
        before = signal.settled_calls

        states = store.fail_many([Failure(claim, error, retry_at)], clock())

        assert states == [JobState.CANCELLED]
        assert signal.settled_calls > before, "fail_many() did not call job_settled"
        record = store.get(claim.id, clock())
        assert record is not None
        assert (record.state, record.attempts) == (JobState.CANCELLED, 1)
        assert record.errors == (error,)
        assert record.finished_at == T0 + 3
        assert record.cancellation == Cancellation(T0, BY, 1)
        assert store.claim_many(clock(), 10) == []
        assert store.stats().cancelled == 1
        clock.advance(KEEP - 3)
        assert store.get(claim.id, clock()) is None

    def test_fail_many_says_the_state_each_job_ends_in(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, _ = open_store()
        add_one(store, clock())
        stale, _ = claimed_again(store, clock())
        for _ in range(3):
            add_one(store, clock())
        retried, buried, stopped = store.claim_many(clock(), 3)
        cancel(store, stopped.id, clock())
        error = failed_attempt(clock())

        states = store.fail_many(
            [
                Failure(retried, error, clock() + 60),
                Failure(buried, error, None),
                Failure(stale, error, clock()),
                Failure(stopped, error, clock()),
            ],
            clock(),
        )

        assert states == [JobState.PENDING, JobState.DEAD, None, JobState.CANCELLED]

    @pytest.mark.parametrize("keep_for", [60, None], ids=["kept", "removed"])
    def test_a_stopping_job_whose_handler_returned_completes(
        self, open_store: OpenStore, clock: Clock, keep_for: float | None
    ) -> None:
        store, _ = open_store()
        claim = running(store, clock())
        cancel(store, claim.id, clock())
        keep_until = None if keep_for is None else clock() + keep_for

        assert finish_one(store, claim, '"done"', keep_until, clock()) is True

        record = store.get(claim.id, clock())
        if keep_for is None:
            assert record is None
        else:
            assert record is not None
            assert (record.state, record.result) == (JobState.COMPLETED, "done")
        assert store.stats().cancelled == 0
        assert store.list_jobs(JobState.CANCELLED) == []

    @pytest.mark.parametrize("max_attempts", [3, 1], ids=["retries-left", "last"])
    def test_a_stopping_job_whose_process_died_ends_cancelled(
        self, open_store: OpenStore, clock: Clock, max_attempts: int
    ) -> None:
        self.skip_unless_persistent()
        store, _ = open_store()
        [job] = store.add([new_job(clock(), max_attempts=max_attempts)], clock())
        claim = claim_one(store, clock())
        assert claim is not None
        store.cancel(job.id, clock(), by=BY, keep_until=clock() + 7200)
        store.close()  # the claim stays, as when its process is killed
        clock.advance(3600)
        self.expire_claims()

        again, _ = open_store()
        again.recover(clock())

        record = again.get(job.id, clock())
        assert record is not None
        assert (record.state, record.attempts) == (JobState.CANCELLED, 1)
        assert [error.type for error in record.errors] == ["jobq.errors.ProcessDied"]
        assert record.cancellation == Cancellation(T0, BY, 1)
        assert again.claim_many(clock(), 10) == []
        assert again.stats().pending == 0
        clock.advance(3600)
        assert again.get(job.id, clock()) is None

    def test_a_cancelled_job_is_the_same_after_a_restart(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        self.skip_unless_persistent()
        store, _ = open_store()
        job_id = add_one(store, clock())
        cancel(store, job_id, clock())
        before = store.get(job_id, clock())
        store.close()

        again, _ = open_store()

        assert again.get(job_id, clock()) == before
        assert again.stats().cancelled == 1
