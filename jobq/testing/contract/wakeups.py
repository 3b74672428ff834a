"""Wake-ups: the ``Signal`` calls a store owes the queue (``open`` gives it
the ``Signal``; see ``jobq.stores.base``).

The queue's idle workers sleep until a store calls ``Signal.jobs_added``,
and ``join`` callers until it calls ``Signal.job_settled``. A store that
never does passes every other test (they run jobs with ``run_pending``) and
still works, only late: workers and ``join`` look by themselves once a
second, so each new job would wait up to a second. These tests open the
store with a ``WakeUps`` signal, as if a worker and a ``join`` caller waited
on it, and count what the store's calls told them.
"""

from __future__ import annotations

import pytest

from jobq import JobState
from jobq.stores.base import NewJob
from jobq.testing.clock import Clock
from jobq.testing.contract.base import (
    ContractBase,
    OpenStore,
    claim_one,
    fail_one,
    failed_attempt,
    finish_one,
)


def new_job(run_at: float) -> NewJob:
    return NewJob('"x"', run_at, None, 0, 3)


class WakeUpTests(ContractBase):
    """Idle workers are woken when a job becomes claimable, ``join`` callers
    when a job settles."""

    # -- workers: Signal.jobs_added when a job becomes claimable -----------------------

    def test_adding_a_due_job_wakes_an_idle_worker(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, signal = open_store()
        before = signal.generation

        store.add([new_job(clock())], clock())

        assert signal.generation > before, (
            "add() of a due job did not call Signal.jobs_added: idle workers "
            "would sleep up to a second before running it"
        )

    def test_adding_a_job_due_before_every_pending_one_wakes_an_idle_worker(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, signal = open_store()
        store.add([new_job(clock() + 60)], clock())
        before = signal.generation

        store.add([new_job(clock() + 30)], clock())

        assert signal.generation > before, (
            "add() of a delayed job due before every pending one did not call "
            "Signal.jobs_added: a worker waiting for the later one would not "
            "shorten its wait"
        )

    def test_a_retry_due_at_once_wakes_an_idle_worker(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, signal = open_store()
        store.add([new_job(clock())], clock())
        claim = claim_one(store, clock())
        assert claim is not None
        before = signal.generation

        assert fail_one(store, claim, failed_attempt(clock()), clock(), clock())

        assert signal.generation > before, (
            "fail_many() with a retry due now did not call Signal.jobs_added"
        )

    def test_a_released_claim_wakes_an_idle_worker(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, signal = open_store()
        store.add([new_job(clock())], clock())
        claims = store.claim_many(clock(), 1)
        assert len(claims) == 1
        before = signal.generation

        store.release(claims, clock())

        assert signal.generation > before, "release() did not call Signal.jobs_added"

    def test_a_revived_job_wakes_an_idle_worker(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, signal = open_store()
        [job] = store.add([new_job(clock())], clock())
        claim = claim_one(store, clock())
        assert claim is not None
        assert fail_one(store, claim, failed_attempt(clock()), None, clock())
        before = signal.generation

        assert store.revive(job.id, clock()) is True

        assert signal.generation > before, "revive() did not call Signal.jobs_added"

    def test_a_claim_recovered_by_recover_wakes_an_idle_worker(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        self.skip_unless_persistent()
        store, _ = open_store()
        [job] = store.add([new_job(clock())], clock())
        assert claim_one(store, clock()) is not None
        store.close()  # the claim stays, as when its process is killed
        clock.advance(3600)
        self.expire_claims()
        again, signal = open_store()
        before = signal.generation

        recovered = again.recover(clock())

        if not recovered:
            pytest.skip(
                "the store recovered the claim when it opened, before any "
                "worker of the queue waits"
            )
        record = again.get(job.id, clock())
        assert record is not None
        assert record.state is JobState.PENDING
        assert signal.generation > before, (
            "recover() made a job pending again without calling Signal.jobs_added"
        )

    # -- join callers: Signal.job_settled when a job leaves pending or running ---------

    @pytest.mark.parametrize("keep_for", [None, 60], ids=["removed", "kept"])
    def test_a_finished_job_wakes_join_callers(
        self, open_store: OpenStore, clock: Clock, keep_for: float | None
    ) -> None:
        store, signal = open_store()
        store.add([new_job(clock())], clock())
        claim = claim_one(store, clock())
        assert claim is not None
        keep_until = None if keep_for is None else clock() + keep_for
        before = signal.settled_calls

        assert finish_one(store, claim, None, keep_until, clock())

        assert signal.settled_calls > before, (
            "finish_many() did not call Signal.job_settled: join() would wait "
            "up to a second more"
        )

    def test_a_buried_job_wakes_join_callers(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, signal = open_store()
        store.add([new_job(clock())], clock())
        claim = claim_one(store, clock())
        assert claim is not None
        before = signal.settled_calls

        assert fail_one(store, claim, failed_attempt(clock()), None, clock())

        assert signal.settled_calls > before, (
            "fail_many() that buried a job did not call Signal.job_settled"
        )

    def test_a_cancelled_job_wakes_join_callers(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, signal = open_store()
        [job] = store.add([new_job(clock() + 60)], clock())
        before = signal.settled_calls

        outcome = store.cancel(job.id, clock(), by="test", keep_until=clock() + 60)

        assert outcome == "cancelled"
        assert signal.settled_calls > before, "cancel() did not call Signal.job_settled"
