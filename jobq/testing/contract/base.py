"""What every part of the suite shares: ``ContractBase`` (the store under
test, its place and the fixtures) and the helpers the tests use.

Each topic's tests are a class of their own (``EnqueueTests``, ...), a
subclass of ``ContractBase``; ``StoreContractTests`` combines them all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

import jobq
from jobq import AttemptError, Enqueued, Fatal, Job, JobState
from jobq.stores.base import Claim, Done, Failure, NewJob, Signal, Store
from jobq.testing.clock import Clock

MakeQueue = Callable[..., jobq.JobQueue[Any]]
OpenStore = Callable[[], tuple[Store, "WakeUps"]]

# -- handlers -------------------------------------------------------------------------


def succeed(job: Job[Any]) -> str:
    return "ok"


def fail_with_value_error(job: Job[Any]) -> None:
    raise ValueError("message")


def die(job: Job[Any]) -> None:
    raise Fatal("no such address")


class Recorder:
    """A handler that records each call, then raises the next planned outcome."""

    def __init__(self, *outcomes: BaseException | None) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[Job[Any]] = []

    def __call__(self, job: Job[Any]) -> Any:
        self.calls.append(job)
        if self.outcomes:
            outcome = self.outcomes.pop(0)
            if outcome is not None:
                raise outcome
        return job.payload

    @property
    def payloads(self) -> list[Any]:
        return [job.payload for job in self.calls]


def bury(queue: jobq.JobQueue[Any], payload: Any = None, **options: Any) -> Enqueued:
    """Enqueue a job for a queue whose handler raises ``Fatal`` and run it."""
    job = queue.enqueue(payload, **options)
    assert queue.run_pending(limit=1) == 1
    record = queue.get(job)
    assert record is not None
    assert record.state is JobState.DEAD
    return job


# -- the store's own calls ------------------------------------------------------------


def failed_attempt(at: float) -> AttemptError:
    return AttemptError("ValueError", "stale", "", at)


def claim_one(store: Store, now: float) -> Claim | None:
    """One due job claimed through ``claim_many``, or ``None``."""
    claims = store.claim_many(now, 1)
    return claims[0] if claims else None


def finish_one(
    store: Store, claim: Claim, result: str | None, keep_until: float | None, now: float
) -> bool:
    """One success recorded through ``finish_many``."""
    return store.finish_many([Done(claim, result)], keep_until, now)[0]


def fail_one(
    store: Store, claim: Claim, error: AttemptError, retry_at: float | None, now: float
) -> bool:
    """One failed attempt recorded through ``fail_many``: whether it was."""
    return store.fail_many([Failure(claim, error, retry_at)], now)[0] is not None


def slot_job(slot: float, name: str = "s") -> NewJob:
    """The job of a schedule's slot, as the queue would build it."""
    return NewJob('{"args": [], "kwargs": {}}', slot, f"slot:{slot}", 0, 1, name)


def claimed_again(store: Store, now: float) -> tuple[Claim, Claim]:
    """The only job claimed, failed (due again at once) and claimed again:
    the first claim, now stale, and the current one."""
    stale = claim_one(store, now)
    assert stale is not None
    assert fail_one(store, stale, failed_attempt(now), now, now) is True
    current = claim_one(store, now)
    assert current is not None
    return stale, current


class WakeUps(Signal):
    """The ``Signal`` a store is opened with by ``open_store``: as if a worker
    and a ``join`` caller were waiting on it, and counting what woke them.

    ``generation`` counts the ``jobs_added`` calls (as ``Signal`` does), and
    ``settled_calls`` the ``job_settled`` ones.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(clock)
        self.idle_workers = 1  # a store may skip a wake-up nobody waits for
        self.joiners = 1
        self.settled_calls = 0

    def job_settled_locked(self) -> None:
        self.settled_calls += 1
        super().job_settled_locked()


# -- the store under test -------------------------------------------------------------


class ContractBase:
    """The store under test and the fixtures every part of the suite uses
    (see ``StoreContractTests``, which combines the parts)."""

    #: The store keeps its jobs (pending, running, dead and kept completed
    #: ones) when it is closed: a second store over the same place sees them,
    #: as after a restart. ``False``: the restart tests are skipped.
    persistent: ClassVar[bool] = False
    #: Its limits' state (the jobs held back, the rates' last starts) outlives
    #: the store object, as its jobs do (SQLite, PostgreSQL); ``False``: a
    #: restart starts them afresh, the declarations and jobs kept (JSON).
    limits_persist: ClassVar[bool] = True

    #: This test's own directory (pytest's ``tmp_path``).
    tmp_path: Path

    def make_store(self, *, queue_clock: bool = False) -> Store:
        """A new store over this test's place; a second call within one test
        gives a store over the same jobs, as after a restart.

        ``queue_clock=True``: the test moves the queue's clock (an injected
        ``Clock``), so a store that orders jobs on a clock of its own (a
        database server's) must follow the ``now`` the queue passes instead.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must override make_store() to build the "
            "store under test"
        )

    def expire_claims(self) -> None:
        """Make the leases of the claims at this test's place run out, as if
        their process had died long ago; the crash tests call it after moving
        the queue's clock an hour ahead.

        Nothing to do for a store whose claims end with their process (a new
        store over the place recovers them when it opens) or whose leases
        follow the queue's clock; a store whose leases follow a clock of its
        own (``Capabilities.own_clock_leases``: a database server's, the
        host's), which no test moves, overrides it.
        """

    def after_a_crash(
        self,
        queue: jobq.JobQueue[Any],
        make_queue: MakeQueue,
        clock: Clock,
        **options: Any,
    ) -> jobq.JobQueue[Any]:
        """Close ``queue`` with its claims left, as when its process is
        killed; an hour later, a new queue (``options``) over the same
        store, which has recovered them (opening may, ``recover`` does)."""
        queue.close()
        clock.advance(3600)
        self.expire_claims()
        again = make_queue(succeed, clock=clock, **options)
        again.stats()
        again.store.recover(clock())
        return again

    def skip_unless_persistent(self) -> None:
        if not self.persistent:
            pytest.skip("the store keeps nothing across a restart (persistent = False)")

    # -- fixtures ----------------------------------------------------------------------

    @pytest.fixture(autouse=True)
    def _store_place(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path

    @pytest.fixture
    def make_queue(self) -> Iterator[MakeQueue]:
        """Builds queues over new stores from ``make_store`` and closes them
        after the test. A queue given ``clock=`` gets a store built with
        ``queue_clock=True``."""
        queues: list[jobq.JobQueue[Any]] = []

        def make(handler: Any = None, **options: Any) -> jobq.JobQueue[Any]:
            if "store" not in options:
                options["store"] = self.make_store(queue_clock="clock" in options)
            queue: jobq.JobQueue[Any] = jobq.JobQueue(handler, **options)
            queues.append(queue)
            return queue

        yield make
        for queue in queues:
            queue.close(timeout=5)

    @pytest.fixture
    def clock(self) -> Clock:
        """A wall clock the test moves by hand (``make_queue(clock=clock)``)."""
        return Clock()

    @pytest.fixture
    def open_store(self, clock: Clock) -> Iterator[OpenStore]:
        """Opens new stores from ``make_store`` (``queue_clock=True``) with no
        queue, each with a ``WakeUps`` signal on ``clock``, as a queue opens
        its store; closes them after the test."""
        stores: list[Store] = []

        def open_() -> tuple[Store, WakeUps]:
            store = self.make_store(queue_clock=True)
            signal = WakeUps(clock)
            store.open(signal, dead_letter_limit=1000)
            stores.append(store)
            return store, signal

        yield open_
        for store in stores:
            store.close()
