"""Limits (``LimitStore``, optional): a claim takes a job only when each of
its limits allows it, holds back the others without charging them an
attempt, and releases them in their order as the limit allows (see "Limits"
in ``jobq.stores.base``). The tests drive the ``Store`` calls directly, on
the clock the test moves; a store that does not declare
``Capabilities.limits`` skips them, as ``queue.limit`` refuses it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, cast

import pytest

from jobq import JobState, Limit, LimitUsage
from jobq.stores.base import (
    Claim,
    Done,
    Failure,
    LimitStore,
    NewJob,
    Store,
    capabilities_of,
)
from jobq.testing.clock import T0, Clock
from jobq.testing.contract.base import (
    ContractBase,
    OpenStore,
    WakeUps,
    claim_one,
    failed_attempt,
    finish_one,
)

#: How long a cancelled job is kept, in these tests.
KEEP = 600.0


class LimitedStore(Store, LimitStore, Protocol):
    """A store that declares ``Capabilities.limits``."""


def limited_job(
    run_at: float, *limits: str, priority: int = 0, max_attempts: int = 3
) -> NewJob:
    return NewJob('"x"', run_at, None, priority, max_attempts, limits=limits)


def add_limited(
    store: Store,
    now: float,
    *limits: str,
    priority: int = 0,
    run_at: float | None = None,
) -> int:
    """One job added under ``limits``: its id."""
    new = limited_job(now if run_at is None else run_at, *limits, priority=priority)
    [job] = store.add([new], now)
    return job.id


def claimed_ids(store: Store, now: float, count: int = 10) -> list[int]:
    """The ids of the jobs one ``claim_many`` of up to ``count`` takes."""
    return [claim.id for claim in store.claim_many(now, count)]


def held_by(store: Store, job_id: int, now: float) -> str | None:
    """The key holding the job back, checking that it waits as a pending job
    that has spent no attempt."""
    record = store.get(job_id, now)
    assert record is not None
    if record.held_by is not None:
        assert (record.state, record.attempts) == (JobState.PENDING, 0)
        assert (record.started_at, record.finished_at) == (None, None)
    return record.held_by


def usage(store: LimitedStore, now: float) -> dict[str, tuple[int, int]]:
    """Each declared limit's (running, waiting)."""
    return {u.name: (u.running, u.waiting) for u in store.limit_usage(now)}


def end_by_finishing(store: Store, claim: Claim, now: float) -> None:
    assert store.finish_many([Done(claim, None)], None, now) == [True]


def end_by_retrying_later(store: Store, claim: Claim, now: float) -> None:
    """A failed attempt whose retry waits a minute: its backoff holds no slot."""
    failure = Failure(claim, failed_attempt(now), now + 60)
    assert store.fail_many([failure], now) == [JobState.PENDING]


def end_by_burying(store: Store, claim: Claim, now: float) -> None:
    failure = Failure(claim, failed_attempt(now), None)
    assert store.fail_many([failure], now) == [JobState.DEAD]


def end_by_cancelling(store: Store, claim: Claim, now: float) -> None:
    """A stopping job whose handler failed: it ends cancelled."""
    assert store.cancel(claim.id, now, by="tester", keep_until=now + KEEP)
    failure = Failure(claim, failed_attempt(now), now)
    assert store.fail_many([failure], now) == [JobState.CANCELLED]


ENDINGS: dict[str, Callable[[Store, Claim, float], None]] = {
    "finish": end_by_finishing,
    "retry-later": end_by_retrying_later,
    "bury": end_by_burying,
    "cancel": end_by_cancelling,
}


class LimitTests(ContractBase):
    """``declare_limit``, ``limit_usage`` and how claims keep to limits;
    skipped for a store without them."""

    def open_limited(
        self, open_store: OpenStore, *limits: Limit
    ) -> tuple[LimitedStore, WakeUps]:
        """An open store with ``limits`` declared, and its signal; skips the
        test for a store that does not declare ``Capabilities.limits``."""
        store, signal = open_store()
        if not capabilities_of(store).limits:
            pytest.skip("the store does not declare Capabilities.limits (optional)")
        limited = cast(LimitedStore, store)
        for limit in limits:
            limited.declare_limit(limit)
        return limited, signal

    def limit_store(self, open_store: OpenStore, *limits: Limit) -> LimitedStore:
        """As ``open_limited``, the store only."""
        return self.open_limited(open_store, *limits)[0]

    # -- declarations ------------------------------------------------------------------

    def test_declare_limit_returns_the_declaration_it_replaced(
        self, open_store: OpenStore
    ) -> None:
        store = self.limit_store(open_store)
        first = Limit("smtp", concurrency=2)
        other = Limit("smtp", concurrency=3, rate=10, per=1.0, burst=2)

        assert store.declare_limit(first) is None
        assert store.declare_limit(first) is None
        assert store.declare_limit(other) == first
        assert store.declare_limit(other) is None

    def test_limit_usage_lists_each_declaration_by_name(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store = self.limit_store(
            open_store,
            Limit("smtp", concurrency=2),
            Limit("api", rate=100, per=60.0, burst=10),
            Limit("account:*", concurrency=1),
        )
        store.declare_limit(Limit("smtp", concurrency=3, rate=10, per=1.0))

        assert store.limit_usage(clock()) == [
            LimitUsage("account:*", 1, None, 1, 0, 0),
            LimitUsage("api", None, "100/m", 10, 0, 0),
            LimitUsage("smtp", 3, "10/s", 1, 0, 0),
        ]

    def test_limit_usage_counts_running_and_waiting_jobs_a_family_summed(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store = self.limit_store(
            open_store, Limit("smtp", concurrency=2), Limit("account:*", concurrency=1)
        )
        for limits in [("smtp",)] * 3 + [("account:1",)] * 2 + [("account:2",)] * 3:
            add_limited(store, clock(), *limits)

        assert len(claimed_ids(store, clock())) == 4

        assert usage(store, clock()) == {"account:*": (2, 3), "smtp": (2, 1)}

    # -- concurrency -------------------------------------------------------------------

    def test_at_most_n_jobs_of_a_key_run_at_once_the_others_held(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store = self.limit_store(open_store, Limit("smtp", concurrency=2))
        ids = [add_limited(store, clock(), "smtp") for _ in range(5)]

        claims = store.claim_many(clock(), 10)

        assert [(claim.id, claim.limits) for claim in claims] == [
            (ids[0], ("smtp",)),
            (ids[1], ("smtp",)),
        ]
        assert [held_by(store, job_id, clock()) for job_id in ids] == [
            None,
            None,
            "smtp",
            "smtp",
            "smtp",
        ]
        assert store.claim_many(clock(), 10) == []
        stats = store.stats()
        assert (stats.pending, stats.running, stats.delayed) == (3, 2, 0)
        assert [r.id for r in store.list_jobs(JobState.PENDING)] == ids[2:]

    def test_held_jobs_are_released_in_run_order(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store = self.limit_store(open_store, Limit("smtp", concurrency=1))
        first = add_limited(store, clock(), "smtp")
        claim = claim_one(store, clock())
        assert claim is not None
        later = add_limited(store, clock(), "smtp")
        urgent = add_limited(store, clock(), "smtp", priority=5)
        earlier = add_limited(store, clock(), "smtp", run_at=clock() - 10)
        last = add_limited(store, clock(), "smtp")
        assert store.claim_many(clock(), 10) == []

        order = [claim.id]
        for _ in range(4):
            clock.advance(1)
            assert finish_one(store, claim, None, None, clock())
            [claim] = store.claim_many(clock(), 10)
            order.append(claim.id)
        assert order == [first, urgent, earlier, later, last]
        assert store.stats().pending == 0

    @pytest.mark.parametrize("ending", list(ENDINGS))
    def test_a_claim_that_ends_frees_its_slot_for_a_held_job(
        self, open_store: OpenStore, clock: Clock, ending: str
    ) -> None:
        store = self.limit_store(open_store, Limit("smtp", concurrency=1))
        add_limited(store, clock(), "smtp")
        held = add_limited(store, clock(), "smtp")
        claim = claim_one(store, clock())
        assert claim is not None
        assert store.claim_many(clock(), 10) == []

        ENDINGS[ending](store, claim, clock())

        assert claimed_ids(store, clock()) == [held]
        assert usage(store, clock()) == {"smtp": (1, 0)}

    def test_a_released_claim_frees_its_slot(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store = self.limit_store(open_store, Limit("smtp", concurrency=1))
        first = add_limited(store, clock(), "smtp")
        second = add_limited(store, clock(), "smtp")
        claim = claim_one(store, clock())
        assert claim is not None

        store.release([claim], clock())

        assert held_by(store, first, clock()) is None
        assert claimed_ids(store, clock()) == [first]
        assert held_by(store, second, clock()) == "smtp"
        record = store.get(first, clock())
        assert record is not None
        assert record.attempts == 0

    def test_a_recovered_claim_frees_its_slot(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        self.skip_unless_persistent()
        store = self.limit_store(open_store, Limit("smtp", concurrency=1))
        [dying, held] = [
            job.id
            for job in store.add(
                [limited_job(clock(), "smtp", max_attempts=1)] * 2, clock()
            )
        ]
        assert claimed_ids(store, clock()) == [dying]
        store.close()  # the claim stays, as when its process is killed
        clock.advance(3600)
        self.expire_claims()

        again = self.limit_store(open_store)
        again.recover(clock())

        record = again.get(dying, clock())
        assert record is not None
        assert record.state is JobState.DEAD
        assert claimed_ids(again, clock()) == [held]

    def test_a_freed_slot_with_held_jobs_wakes_an_idle_worker(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, signal = self.open_limited(open_store, Limit("smtp", concurrency=1))
        add_limited(store, clock(), "smtp")
        add_limited(store, clock(), "smtp")
        claim = claim_one(store, clock())
        assert claim is not None
        assert store.claim_many(clock(), 10) == []
        before = signal.generation

        assert finish_one(store, claim, None, None, clock())

        assert signal.generation > before, (
            "a freed slot released a held job without calling Signal.jobs_added"
        )

    def test_a_family_limits_each_key_alone(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store = self.limit_store(open_store, Limit("account:*", concurrency=1))
        one = add_limited(store, clock(), "account:1")
        one_again = add_limited(store, clock(), "account:1")
        two = add_limited(store, clock(), "account:2")

        assert claimed_ids(store, clock()) == [one, two]
        assert held_by(store, one_again, clock()) == "account:1"

    def test_jobs_held_by_a_full_key_never_block_the_others(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store = self.limit_store(open_store, Limit("smtp", concurrency=1))
        limited = [add_limited(store, clock(), "smtp") for _ in range(50)]
        free = [add_limited(store, clock()) for _ in range(3)]

        assert claimed_ids(store, clock(), 4) == [limited[0], *free]

        more = add_limited(store, clock())
        assert claimed_ids(store, clock(), 4) == [more]

    def test_a_job_under_no_limit_is_claimed_as_always(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store = self.limit_store(open_store, Limit("smtp", concurrency=1))
        job_id = add_limited(store, clock())

        claim = claim_one(store, clock())

        assert claim is not None
        assert (claim.id, claim.limits) == (job_id, ())
        record = store.get(job_id, clock())
        assert record is not None
        assert (record.state, record.limits, record.held_by) == (
            JobState.RUNNING,
            (),
            None,
        )

    # -- several limits ----------------------------------------------------------------

    def test_a_job_under_two_limits_runs_only_when_both_allow(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store = self.limit_store(
            open_store, Limit("a", concurrency=1), Limit("b", concurrency=1)
        )
        first = add_limited(store, clock(), "a")
        both = add_limited(store, clock(), "a", "b")
        third = add_limited(store, clock(), "b")
        claims = store.claim_many(clock(), 10)
        assert [claim.id for claim in claims] == [first, third]
        assert held_by(store, both, clock()) == "a"

        assert finish_one(store, claims[0], None, None, clock())

        assert store.claim_many(clock(), 10) == []
        assert held_by(store, both, clock()) == "b"
        assert finish_one(store, claims[1], None, None, clock())
        [claim] = store.claim_many(clock(), 10)
        assert (claim.id, claim.limits) == (both, ("a", "b"))
        record = store.get(both, clock())
        assert record is not None
        assert (record.limits, record.held_by) == (("a", "b"), None)
        assert usage(store, clock()) == {"a": (1, 0), "b": (1, 0)}

    # -- rates -------------------------------------------------------------------------

    def test_a_rate_spaces_the_starts_of_a_key(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store = self.limit_store(open_store, Limit("api", rate=2, per=1.0))
        ids = [add_limited(store, clock(), "api") for _ in range(3)]

        assert claimed_ids(store, clock()) == [ids[0]]
        assert held_by(store, ids[1], clock()) == "api"
        assert store.next_due() == T0 + 0.5
        clock.advance(0.25)
        assert claimed_ids(store, clock()) == []
        clock.advance(0.25)
        assert claimed_ids(store, clock()) == [ids[1]]
        assert store.next_due() == T0 + 1.0
        clock.advance(5)
        assert claimed_ids(store, clock()) == [ids[2]]
        assert store.next_due() is None

    def test_a_burst_starts_at_once_then_the_rate_spaces_them(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store = self.limit_store(open_store, Limit("api", rate=2, per=1.0, burst=3))
        ids = [add_limited(store, clock(), "api") for _ in range(5)]

        assert claimed_ids(store, clock()) == ids[:3]
        assert store.next_due() == T0 + 0.5
        clock.advance(0.5)
        assert claimed_ids(store, clock()) == [ids[3]]
        assert claimed_ids(store, clock()) == []
        assert store.next_due() == T0 + 1.0

    def test_a_rate_counts_the_starts_of_a_finished_job(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        api = Limit("api", concurrency=5, rate=1, per=60.0)
        store = self.limit_store(open_store, api)
        add_limited(store, clock(), "api")
        claim = claim_one(store, clock())
        assert claim is not None
        assert finish_one(store, claim, None, None, clock())
        later = add_limited(store, clock(), "api")

        assert claimed_ids(store, clock()) == []
        assert held_by(store, later, clock()) == "api"
        assert usage(store, clock()) == {"api": (0, 1)}
        clock.advance(60)
        assert claimed_ids(store, clock()) == [later]

    def test_concurrency_held_jobs_are_not_due(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store = self.limit_store(open_store, Limit("smtp", concurrency=1))
        add_limited(store, clock(), "smtp")
        add_limited(store, clock(), "smtp")
        assert len(claimed_ids(store, clock())) == 1

        assert store.next_due() is None

    # -- cancelling and restarts -------------------------------------------------------

    def test_a_held_job_cancelled_ends_cancelled(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store = self.limit_store(open_store, Limit("smtp", concurrency=1))
        add_limited(store, clock(), "smtp")
        held = add_limited(store, clock(), "smtp")
        claim = claim_one(store, clock())
        assert claim is not None
        assert store.claim_many(clock(), 10) == []

        assert store.cancel(held, clock(), by="tester", keep_until=clock() + KEEP) == (
            "cancelled"
        )

        record = store.get(held, clock())
        assert record is not None
        assert (record.state, record.attempts, record.held_by) == (
            JobState.CANCELLED,
            0,
            None,
        )
        assert usage(store, clock()) == {"smtp": (1, 0)}
        assert finish_one(store, claim, None, None, clock())
        assert store.claim_many(clock(), 10) == []
        assert store.stats().pending == 0

    def test_a_released_job_cancelled_before_its_claim_lets_the_next_go(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        """A held job a freed slot let go counts against its key until a
        claim takes it; cancelled first, it must give its place back, or
        the jobs still held would wait for a slot nothing will free."""
        store = self.limit_store(open_store, Limit("one", concurrency=1))
        first = (
            claim_one(store, clock()) if add_limited(store, clock(), "one") else None
        )
        assert first is not None
        released = add_limited(store, clock(), "one")
        last = add_limited(store, clock(), "one")
        assert store.claim_many(clock(), 10) == []  # both held
        urgent = store.add([NewJob('"u"', clock(), None, 9, 3)], clock())[0].id
        assert finish_one(store, first, None, None, clock())
        assert claimed_ids(store, clock(), 1) == [urgent]  # the freed slot waits

        assert store.cancel(released, clock(), by="t", keep_until=clock() + KEEP)

        assert claimed_ids(store, clock()) == [last]

    def test_limits_and_held_jobs_are_the_same_after_a_restart(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        self.skip_unless_persistent()
        store = self.limit_store(open_store, Limit("api", rate=1, per=3600.0))
        add_limited(store, clock(), "api")
        held = add_limited(store, clock(), "api")
        claim = claim_one(store, clock())
        assert claim is not None
        assert finish_one(store, claim, None, None, clock())
        assert store.claim_many(clock(), 10) == []
        before = store.get(held, clock())
        store.close()

        again = self.limit_store(open_store)

        if not self.limits_persist:  # the declaration and the job's limits only
            record = again.get(held, clock())
            assert record is not None
            assert (record.limits, record.attempts) == (("api",), 0)
            assert [u.name for u in again.limit_usage(clock())] == ["api"]
            return
        assert again.get(held, clock()) == before
        assert again.limit_usage(clock()) == [LimitUsage("api", None, "1/h", 1, 0, 1)]
        assert again.claim_many(clock(), 10) == []
        assert again.next_due() == T0 + 3600
        assert again.declare_limit(Limit("api", rate=1, per=3600.0)) is None
        clock.advance(3600)
        assert claimed_ids(again, clock()) == [held]
