"""The behavioural suite every store passes: ``StoreContractTests``.

The four built-in stores run it, and so can a store of yours: subclass it in a
test module (named ``Test...``, so that pytest collects it) and say how to
build your store over this test's place::

    from jobq.stores.base import Store
    from jobq.testing import StoreContractTests

    class TestMyStore(StoreContractTests):
        persistent = True  # a second store over the same place sees the jobs

        def make_store(self, *, queue_clock: bool = False) -> Store:
            return MyStore(self.tmp_path / "jobs")

Each test builds queues over your store (``make_queue``), runs their jobs with
``run_pending`` in the test's thread and moves time with a ``Clock``, so
nothing waits. It uses the public API only, plus the ``Store`` methods where
the rule is the store's own (claim fencing, batches, ``list_jobs``,
``next_due``): a failing test names a rule of ``jobq.stores.base`` the store
breaks. Needs pytest only.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, cast

import pytest

import jobq
from jobq import AttemptError, Enqueued, Fatal, Job, JobState, Retry, Stats
from jobq.stores.base import (
    Claim,
    Done,
    Failure,
    NewJob,
    ScheduleStore,
    SlotState,
    Store,
    missing_members,
    missing_schedule_members,
)
from jobq.testing.clock import T0, Clock

__all__ = ["StoreContractTests"]

MakeQueue = Callable[..., jobq.JobQueue[Any]]


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


def parse_invoice(payload: Any) -> None:
    raise ValueError(f"bad invoice {payload}")


def raise_deep(depth: int, message: str) -> None:
    if depth:
        raise_deep(depth - 1, message)
    raise ValueError(message)


class Interrupt(BaseException):
    """Like ``KeyboardInterrupt``: not an ``Exception``."""


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
    """One failed attempt recorded through ``fail_many``."""
    return store.fail_many([Failure(claim, error, retry_at)], now)[0]


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


class StoreContractTests:
    """What every store must do, as tests; subclass it to run them on yours.

    A subclass overrides ``make_store`` and may set ``persistent``. Each test
    gets a fresh place: ``self.tmp_path`` (pytest's ``tmp_path``) is set
    before the test runs, for stores that keep files; a store kept elsewhere
    (a database) adds an autouse fixture of its own that picks a fresh place
    (a new database, schema or queue name) for ``make_store`` to use.
    """

    #: The store keeps its jobs (pending, running, dead and kept completed
    #: ones) when it is closed: a second store over the same place sees them,
    #: as after a restart. ``False``: the restart tests are skipped.
    persistent: ClassVar[bool] = False

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

    def expire_claims(self) -> None:
        """Make the leases of the claims at this test's place run out, as if
        their process had died long ago; the crash tests call it after moving
        the queue's clock an hour ahead.

        Nothing to do for a store whose claims end with their process (a new
        store over the place recovers them when it opens) or whose leases
        follow the queue's clock; a store whose leases follow a clock of its
        own (a database server's) overrides it.
        """

    def skip_unless_persistent(self) -> None:
        if not self.persistent:
            pytest.skip("the store keeps nothing across a restart (persistent = False)")

    # -- success -----------------------------------------------------------------------

    def test_a_successful_job_runs_once_and_is_removed(
        self, make_queue: MakeQueue
    ) -> None:
        handler = Recorder()
        queue = make_queue(handler)
        job = queue.enqueue({"to": "ann@example.com"})

        assert queue.run_pending() == 1
        assert queue.run_pending() == 0

        assert handler.payloads == [{"to": "ann@example.com"}]
        assert queue.get(job) is None

    def test_a_handler_receives_the_job_id_payload_key_and_first_attempt(
        self, make_queue: MakeQueue
    ) -> None:
        handler = Recorder()
        queue = make_queue(handler)
        job = queue.enqueue({"n": [1, 2.5, "x", None, True]}, key="k-1")

        queue.run_pending()

        assert handler.calls == [
            Job(job.id, {"n": [1, 2.5, "x", None, True]}, 1, "k-1")
        ]

    def test_get_shows_a_pending_job_as_it_was_enqueued(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)

        job = queue.enqueue({"to": "zoë", "n": [1, 2]}, delay=5, key="k", priority=2)

        assert queue.get(job) == jobq.JobRecord(
            id=job.id,
            payload={"to": "zoë", "n": [1, 2]},
            attempts=0,
            state=JobState.PENDING,
            run_at=T0 + 5,
            created_at=T0,
            last_error=None,
            key="k",
            priority=2,
            result=None,
            task=None,
            errors=(),
            max_attempts=5,
        )

    def test_changing_a_payload_after_enqueue_does_not_change_the_job(
        self, make_queue: MakeQueue
    ) -> None:
        handler = Recorder()
        queue = make_queue(handler)
        payload: dict[str, Any] = {"to": ["ann"]}
        queue.enqueue(payload)

        payload["to"].append("bob")
        queue.run_pending()

        assert handler.payloads == [{"to": ["ann"]}]

    def test_a_failed_attempt_does_not_see_what_an_earlier_one_did_to_the_payload(
        self, make_queue: MakeQueue
    ) -> None:
        seen: list[Any] = []

        def handler(job: Job[Any]) -> None:
            seen.append(list(job.payload["items"]))
            job.payload["items"].append("changed")
            if job.attempt == 1:
                raise ValueError("again")

        queue = make_queue(handler, base_delay=0)
        queue.enqueue({"items": ["a"]})
        queue.run_pending()

        assert seen == [["a"], ["a"]]

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

    # -- failures, retries and backoff -------------------------------------------------

    def test_a_failed_job_is_retried_after_the_backoff(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(
            fail_with_value_error, base_delay=2, jitter=False, clock=clock
        )
        job = queue.enqueue("x")

        queue.run_pending()
        first = queue.get(job)
        assert first is not None
        assert (first.state, first.attempts, first.run_at) == (
            JobState.PENDING,
            1,
            T0 + 2,
        )

        clock.advance(2)
        assert queue.run_pending() == 1
        second = queue.get(job)
        assert second is not None
        assert (second.attempts, second.run_at) == (2, T0 + 2 + 4)

    def test_a_retry_is_not_due_before_its_backoff_has_passed(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        handler = Recorder(ValueError("once"))
        queue = make_queue(handler, base_delay=10, jitter=False, clock=clock)
        queue.enqueue("x")
        queue.run_pending()

        clock.advance(9.9)
        assert queue.run_pending() == 0
        clock.advance(0.1)
        assert queue.run_pending() == 1
        assert [job.attempt for job in handler.calls] == [1, 2]

    def test_backoff_through_the_queue_is_capped_at_max_delay(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(
            fail_with_value_error,
            base_delay=10,
            max_delay=15,
            jitter=False,
            clock=clock,
        )
        job = queue.enqueue("x")
        waits = []
        for _ in range(3):
            assert queue.run_pending() == 1
            record = queue.get(job)
            assert record is not None
            waits.append(record.run_at - clock())
            clock.advance(record.run_at - clock())

        assert waits == [10, 15, 15]

    def test_backoff_delays_accept_a_timedelta(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(
            fail_with_value_error,
            base_delay=dt.timedelta(seconds=5),
            max_delay=dt.timedelta(seconds=7),
            jitter=False,
            clock=clock,
        )
        job = queue.enqueue("x")

        queue.run_pending()
        first = queue.get(job)
        assert first is not None
        assert first.run_at == T0 + 5
        clock.advance(5)
        queue.run_pending()
        second = queue.get(job)
        assert second is not None
        assert second.run_at == T0 + 5 + 7

    def test_jittered_retries_spread_within_20_percent_of_the_backoff(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(
            fail_with_value_error,
            base_delay=100,
            jitter=True,
            max_attempts=2,
            clock=clock,
        )
        jobs = queue.enqueue_many(range(40))

        assert queue.run_pending() == 40
        waits = set()
        for job in jobs:
            record = queue.get(job)
            assert record is not None
            waits.add(record.run_at - T0)
        assert all(80 <= wait <= 120 for wait in waits)
        assert len(waits) > 1

    def test_retry_after_replaces_the_backoff_exactly(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(
            Recorder(Retry("rate limited", after=30)),
            base_delay=1000,
            jitter=True,
            clock=clock,
        )
        job = queue.enqueue("x")

        queue.run_pending()

        record = queue.get(job)
        assert record is not None
        assert record.run_at == T0 + 30
        assert record.last_error == "jobq.errors.Retry: rate limited"

    def test_retry_after_accepts_a_timedelta(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(
            Recorder(Retry(after=dt.timedelta(minutes=2))), base_delay=1, clock=clock
        )
        job = queue.enqueue("x")

        queue.run_pending()

        record = queue.get(job)
        assert record is not None
        assert record.run_at == T0 + 120

    def test_retry_after_counts_as_an_attempt(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        def handler(job: Job[Any]) -> None:
            raise Retry("not yet", after=0)

        queue = make_queue(handler, max_attempts=2, clock=clock)
        job = queue.enqueue("x")

        assert queue.run_pending() == 2

        record = queue.get(job)
        assert record is not None
        assert (record.state, record.attempts) == (JobState.DEAD, 2)

    def test_a_job_dies_after_max_attempts_failures(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        handler = Recorder(*[ValueError("message")] * 3)
        queue = make_queue(handler, max_attempts=3, base_delay=0, clock=clock)
        job = queue.enqueue("x")

        assert queue.run_pending() == 3

        record = queue.get(job)
        assert record is not None
        assert (record.state, record.attempts) == (JobState.DEAD, 3)
        assert [call.attempt for call in handler.calls] == [1, 2, 3]
        assert [dead.id for dead in queue.dead_jobs()] == [job.id]

    def test_a_job_that_succeeds_on_a_retry_is_removed(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(Recorder(ValueError("once")), base_delay=0, clock=clock)
        job = queue.enqueue("x")

        assert queue.run_pending() == 2

        assert queue.get(job) is None
        assert queue.dead_jobs() == []

    def test_fatal_sends_a_job_to_the_dead_letters_at_once(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        handler = Recorder(Fatal("no such address"))
        queue = make_queue(handler, max_attempts=5, base_delay=0, clock=clock)
        job = queue.enqueue("x")

        assert queue.run_pending() == 1

        record = queue.get(job)
        assert record is not None
        assert (record.state, record.attempts) == (JobState.DEAD, 1)
        assert record.last_error == "jobq.errors.Fatal: no such address"

    def test_last_error_names_the_exception_type_and_message(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(fail_with_value_error, clock=clock)
        job = queue.enqueue("x")

        queue.run_pending()

        record = queue.get(job)
        assert record is not None
        assert record.last_error == "ValueError: message"

    def test_a_dead_job_records_every_failed_attempt(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        def handler(job: Job[Any]) -> None:
            parse_invoice(job.payload)

        queue = make_queue(
            handler, max_attempts=2, base_delay=5, jitter=False, clock=clock
        )
        job = queue.enqueue(7)
        queue.run_pending()
        clock.advance(5)
        queue.run_pending()

        record = queue.get(job)
        assert record is not None
        assert record.state is JobState.DEAD
        assert record.attempts == 2
        assert record.last_error == "ValueError: bad invoice 7"
        assert [(e.type, e.message, e.at) for e in record.errors] == [
            ("ValueError", "bad invoice 7", T0),
            ("ValueError", "bad invoice 7", T0 + 5),
        ]
        for error in record.errors:
            assert isinstance(error, AttemptError)
            assert "parse_invoice" in error.traceback
            assert "ValueError: bad invoice 7" in error.traceback

    def test_a_job_keeps_only_its_last_20_errors(self, make_queue: MakeQueue) -> None:
        def handler(job: Job[Any]) -> None:
            raise ValueError(f"attempt {job.attempt}")

        queue = make_queue(handler, max_attempts=25, base_delay=0)
        job = queue.enqueue("x")
        queue.run_pending()

        record = queue.get(job)
        assert record is not None
        assert record.attempts == 25
        assert [e.message for e in record.errors] == [
            f"attempt {n}" for n in range(6, 26)
        ]
        assert record.last_error == "ValueError: attempt 25"

    def test_a_huge_error_is_cut_to_about_10_kb_keeping_the_raising_frame(
        self, make_queue: MakeQueue
    ) -> None:
        def handler(job: Job[Any]) -> None:
            raise_deep(200, "x" * 1_000_000)

        queue = make_queue(handler, max_attempts=1)
        job = queue.enqueue("x")
        queue.run_pending()

        record = queue.get(job)
        assert record is not None
        (error,) = record.errors
        assert 1_000 < len(error.message) <= 11_000
        assert error.message.startswith("xxx")
        assert 1_000 < len(error.traceback) <= 11_000
        assert "raise_deep" in error.traceback
        assert "ValueError: xxx" in error.traceback
        assert record.last_error is not None
        assert len(record.last_error) <= 11_000

    @pytest.mark.parametrize(
        ("raised", "last_error"),
        [
            (SystemExit(3), "SystemExit: 3"),
            (KeyboardInterrupt("stop"), "KeyboardInterrupt: stop"),
            (Interrupt("bye"), f"{__name__}.Interrupt: bye"),
            (RuntimeError("boom"), "RuntimeError: boom"),
        ],
    )
    def test_anything_a_handler_raises_is_a_failed_attempt(
        self,
        make_queue: MakeQueue,
        clock: Clock,
        raised: BaseException,
        last_error: str,
    ) -> None:
        queue = make_queue(Recorder(raised), base_delay=10, jitter=False, clock=clock)
        job = queue.enqueue("x")

        if isinstance(raised, KeyboardInterrupt | SystemExit):
            with pytest.raises(type(raised)):  # meant for the calling thread: Ctrl-C
                queue.run_pending()
        else:
            assert queue.run_pending() == 1

        record = queue.get(job)
        assert record is not None
        assert (record.state, record.attempts, record.run_at) == (
            JobState.PENDING,
            1,
            T0 + 10,
        )
        assert record.last_error == last_error

    # -- the dead-letter list ----------------------------------------------------------

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

    # -- when jobs run: delay, at, priority --------------------------------------------

    def test_delay_postpones_a_job(self, make_queue: MakeQueue, clock: Clock) -> None:
        handler = Recorder()
        queue = make_queue(handler, clock=clock)
        job = queue.enqueue("x", delay=30)

        record = queue.get(job)
        assert record is not None
        assert record.run_at == T0 + 30
        assert queue.run_pending() == 0
        clock.advance(30)
        assert queue.run_pending() == 1
        assert handler.payloads == ["x"]

    def test_delay_accepts_a_timedelta(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)

        job = queue.enqueue("x", delay=dt.timedelta(minutes=5))

        record = queue.get(job)
        assert record is not None
        assert record.run_at == T0 + 300

    def test_at_accepts_an_aware_datetime(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)
        when = dt.datetime.fromtimestamp(
            T0 + 3600, tz=dt.timezone(dt.timedelta(hours=5))
        )

        job = queue.enqueue("x", at=when)

        record = queue.get(job)
        assert record is not None
        assert record.run_at == T0 + 3600

    def test_at_accepts_epoch_seconds(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)

        job = queue.enqueue("x", at=T0 + 90)

        record = queue.get(job)
        assert record is not None
        assert record.run_at == T0 + 90
        assert queue.run_pending() == 0

    @pytest.mark.parametrize(
        "at",
        [T0 - 3600, dt.datetime.fromtimestamp(T0 - 60, tz=dt.UTC)],
        ids=["epoch", "datetime"],
    )
    def test_at_in_the_past_means_now(
        self, make_queue: MakeQueue, clock: Clock, at: float | dt.datetime
    ) -> None:
        queue = make_queue(succeed, clock=clock)

        job = queue.enqueue("x", at=at)

        record = queue.get(job)
        assert record is not None
        past = at if isinstance(at, float) else at.timestamp()
        assert record.run_at == past  # kept: it orders the due jobs
        assert queue.run_pending() == 1

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

    # -- keys --------------------------------------------------------------------------

    def test_a_key_returns_the_pending_job_as_a_duplicate(
        self, make_queue: MakeQueue
    ) -> None:
        queue = make_queue(succeed)
        first = queue.enqueue({"to": "ann"}, key="welcome-ann")

        second = queue.enqueue({"to": "ann", "again": True}, key="welcome-ann")

        assert first == Enqueued(first.id, False)
        assert second == Enqueued(first.id, True)
        assert queue.stats().pending == 1
        record = queue.get(first)
        assert record is not None
        assert record.payload == {"to": "ann"}

    def test_a_key_returns_the_running_job_as_a_duplicate(
        self, make_queue: MakeQueue
    ) -> None:
        seen: list[Enqueued] = []

        def handler(job: Job[Any]) -> None:
            seen.append(queue.enqueue("again", key="k"))

        queue = make_queue(handler)
        job = queue.enqueue("first", key="k")

        assert queue.run_pending() == 1

        assert seen == [Enqueued(job.id, True)]

    def test_different_keys_do_not_collide(self, make_queue: MakeQueue) -> None:
        queue = make_queue(succeed)

        first = queue.enqueue("x", key="a")
        second = queue.enqueue("x", key="b")
        unkeyed = queue.enqueue("x")

        assert len({first.id, second.id, unkeyed.id}) == 3
        assert [first.duplicate, second.duplicate, unkeyed.duplicate] == [False] * 3

    @pytest.mark.parametrize("keep_completed", [0, 60])
    def test_a_finished_job_frees_its_key(
        self, make_queue: MakeQueue, keep_completed: int
    ) -> None:
        queue = make_queue(succeed, keep_completed=keep_completed)
        first = queue.enqueue("x", key="k")
        queue.run_pending()

        second = queue.enqueue("x", key="k")

        assert second.duplicate is False
        assert second.id != first.id

    def test_a_key_repeated_within_enqueue_many_is_a_duplicate_of_the_first(
        self, make_queue: MakeQueue
    ) -> None:
        handler = Recorder()
        queue = make_queue(handler)

        jobs = queue.enqueue_many(["first", "second", "third"], key="k")

        assert jobs == [Enqueued(jobs[0].id, False)] + [Enqueued(jobs[0].id, True)] * 2
        queue.run_pending()
        assert handler.payloads == ["first"]

    def test_a_dead_job_frees_its_key(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(die, clock=clock)
        first = bury(queue, "x", key="k")

        second = queue.enqueue("x", key="k")

        assert second.duplicate is False
        assert second.id != first.id

    def test_a_cancelled_job_frees_its_key(self, make_queue: MakeQueue) -> None:
        queue = make_queue(succeed)
        first = queue.enqueue("x", key="k")
        queue.cancel(first)

        second = queue.enqueue("x", key="k")

        assert second.duplicate is False
        assert second.id != first.id

    def test_a_job_waiting_for_a_retry_keeps_its_key(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(fail_with_value_error, base_delay=60, clock=clock)
        first = queue.enqueue("x", key="k")
        queue.run_pending()

        assert queue.enqueue("x", key="k") == Enqueued(first.id, True)

    # -- cancel ------------------------------------------------------------------------

    @pytest.mark.parametrize("delay", [0, 60])
    def test_cancel_removes_a_pending_job(
        self, make_queue: MakeQueue, delay: int
    ) -> None:
        handler = Recorder()
        queue = make_queue(handler)
        job = queue.enqueue("x", delay=delay)

        assert queue.cancel(job) is True

        assert queue.get(job) is None
        assert queue.stats().pending == 0
        assert queue.run_pending() == 0
        assert handler.calls == []

    def test_cancel_refuses_a_running_job(self, make_queue: MakeQueue) -> None:
        answers: list[bool] = []

        def handler(job: Job[Any]) -> str:
            answers.append(queue.cancel(job.id))
            return "done"

        queue = make_queue(handler)
        queue.enqueue("x")

        queue.run_pending()

        assert answers == [False]
        assert queue.stats().completed == 1

    def test_cancel_refuses_an_unknown_job(self, make_queue: MakeQueue) -> None:
        queue = make_queue(succeed)
        job = queue.enqueue("x")

        assert queue.cancel(job.id + 1000) is False
        assert queue.stats().pending == 1

    def test_cancel_refuses_a_dead_job(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(die, clock=clock)
        job = bury(queue)

        assert queue.cancel(job) is False
        assert [dead.id for dead in queue.dead_jobs()] == [job.id]

    def test_cancel_twice_returns_false_the_second_time(
        self, make_queue: MakeQueue
    ) -> None:
        queue = make_queue(succeed)
        job = queue.enqueue("x")

        assert queue.cancel(job) is True
        assert queue.cancel(job) is False

    # -- enqueue_many and job references -----------------------------------------------

    def test_enqueue_many_returns_ids_in_order(self, make_queue: MakeQueue) -> None:
        handler = Recorder()
        queue = make_queue(handler)

        jobs = queue.enqueue_many([{"n": n} for n in range(5)])

        assert [job.duplicate for job in jobs] == [False] * 5
        ids = [job.id for job in jobs]
        assert ids == sorted(set(ids))
        for n, job in enumerate(jobs):
            record = queue.get(job)
            assert record is not None
            assert record.payload == {"n": n}
        queue.run_pending()
        assert handler.payloads == [{"n": n} for n in range(5)]

    def test_enqueue_many_applies_its_options_to_every_job(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)

        jobs = queue.enqueue_many(["a", "b"], delay=30, priority=3)

        for job in jobs:
            record = queue.get(job)
            assert record is not None
            assert (record.run_at, record.priority) == (T0 + 30, 3)

    def test_enqueue_many_of_nothing_adds_nothing(self, make_queue: MakeQueue) -> None:
        queue = make_queue(succeed)

        assert queue.enqueue_many([]) == []
        assert queue.stats().pending == 0

    def test_job_ids_only_grow(self, make_queue: MakeQueue) -> None:
        queue = make_queue(succeed)
        first = queue.enqueue("x")
        queue.run_pending()
        cancelled = queue.enqueue("x")
        queue.cancel(cancelled)

        last = queue.enqueue("x")

        assert 0 < first.id < cancelled.id < last.id

    def test_get_cancel_retry_dead_and_delete_dead_accept_an_enqueued(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(die, clock=clock)
        pending = queue.enqueue("pending", delay=60)
        revived = bury(queue, "revived")
        deleted = bury(queue, "deleted")

        record = queue.get(pending)
        assert record is not None
        assert record.payload == "pending"
        assert queue.retry_dead(revived) is True
        assert queue.delete_dead(deleted) is True
        assert queue.cancel(pending) is True
        assert queue.stats().pending == 1  # the revived one

    def test_get_of_an_unknown_id_returns_none(self, make_queue: MakeQueue) -> None:
        queue = make_queue(succeed)

        assert queue.get(12345) is None

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

    # -- jobs finished per minute (Store.finished_per_minute, where present) ----------

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

    # -- pages of the job lists (JobQueue.browse; Store.page_jobs where present) -------

    def test_browse_pages_due_jobs_in_run_order(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)
        ids = [queue.enqueue(i, priority=i % 2).id for i in range(7)]
        queue.enqueue("later", delay=60)

        seen, after = [], None
        for _ in range(4):
            page = queue.browse("due", limit=2, after=after)
            seen += [job.id for job in page.jobs]
            after = page.after
            if after is None:
                break

        assert seen == [ids[1], ids[3], ids[5], ids[0], ids[2], ids[4], ids[6]]
        assert after is None

    def test_browse_lists_delayed_jobs_earliest_first(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)
        queue.enqueue("now")
        late = queue.enqueue("late", delay=120)
        early = queue.enqueue("early", delay=60)

        page = queue.browse("delayed")

        assert [job.id for job in page.jobs] == [early.id, late.id]
        assert page.after is None

        clock.advance(60)
        assert [job.payload for job in queue.browse("due").jobs] == ["now", "early"]

    def test_browse_lists_dead_jobs_newest_death_first_with_filters(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        def handler(job: Job[Any]) -> None:
            raise Fatal(f"bad {job.payload}")

        queue = make_queue(handler, clock=clock)
        first = bury(queue, "a", key="k1")
        clock.advance(1)
        second = bury(queue, "b")
        clock.advance(1)
        third = bury(queue, "c", key="k3")

        page = queue.browse("dead", limit=2)
        assert [job.id for job in page.jobs] == [third.id, second.id]
        rest = queue.browse("dead", limit=2, after=page.after)
        assert [job.id for job in rest.jobs] == [first.id]
        assert rest.after is None
        assert [j.id for j in queue.browse("dead", error="bad b").jobs] == [second.id]
        assert [j.id for j in queue.browse("dead", key="k1").jobs] == [first.id]
        assert queue.browse("dead", task="no.such.task").jobs == []

    def test_browse_filters_by_task_name(self, make_queue: MakeQueue) -> None:
        queue = make_queue()

        @queue.task(name="mail.send")
        def send(to: str) -> None: ...

        @queue.task(name="other")
        def other() -> None: ...

        job = send.enqueue("x")
        other.enqueue()

        page = queue.browse("due", task=send.name)

        assert [(j.id, j.task) for j in page.jobs] == [(job.id, send.name)]

    def test_browse_lists_running_and_kept_completed_jobs(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        seen: list[list[int]] = []

        def handler(job: Job[Any]) -> str:
            seen.append([j.id for j in queue.browse("running").jobs])
            return "ok"

        queue = make_queue(handler, clock=clock, keep_completed=60)
        first, second = queue.enqueue_many([1, 2])
        queue.run_pending(limit=1)
        clock.advance(1)
        queue.run_pending(limit=1)

        assert seen == [[first.id], [second.id]]
        completed = queue.browse("completed")
        assert [(j.id, j.result) for j in completed.jobs] == [
            (second.id, "ok"), (first.id, "ok"),
        ]  # fmt: skip
        clock.advance(59.5)  # the first one's 60 s are over, not the second's
        assert [j.id for j in queue.browse("completed").jobs] == [second.id]

    def test_browse_refuses_a_cursor_it_did_not_make(
        self, make_queue: MakeQueue
    ) -> None:
        queue = make_queue(succeed)

        with pytest.raises(ValueError, match="not a page cursor"):
            queue.browse("due", after="[1, 2]")
        with pytest.raises(ValueError, match="view must be one of"):
            queue.browse("everything")

    @pytest.mark.parametrize(
        ("view", "after"),
        [
            ("running", "[" + "9" * 400 + "]"),  # beyond any float
            ("running", f"[{2**63 + 1}]"),  # beyond 64 bits
            ("dead", f"[{-(2**63) - 1}, 1]"),
            ("due", "[1e999, 1, 1]"),  # infinite
            ("dead", "[" * 5000),  # deeper than the JSON reader goes
            ("due", "[" + "1," * 2000 + "1]"),
            ("due", '["a", 1, 1]'),
        ],
        ids=["400-digits", "above-int64", "below-int64", "infinite", "nested",
             "long", "text"],
    )  # fmt: skip
    def test_browse_refuses_a_forged_cursor_with_a_value_error(
        self, make_queue: MakeQueue, view: str, after: str
    ) -> None:
        queue = make_queue(succeed)
        queue.enqueue("x")

        with pytest.raises(ValueError, match="not a page cursor") as refused:
            queue.browse(view, after=after)
        assert "the after of the page before" in str(refused.value)

    @pytest.mark.parametrize("name", ["task", "key", "error"])
    @pytest.mark.parametrize(
        ("value", "problem"),
        [("a\x00b", "NUL"), ("a\ud800b", "lone surrogate")],
        ids=["nul", "surrogate"],
    )
    def test_browse_refuses_a_filter_no_store_can_hold_with_a_value_error(
        self, make_queue: MakeQueue, name: str, value: str, problem: str
    ) -> None:
        queue = make_queue(die)
        queue.enqueue("x", key="k")
        queue.run_pending()

        filters: dict[str, Any] = {name: value}

        with pytest.raises(ValueError, match=f"{name} .*{problem}"):
            queue.browse("dead", **filters)

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
            pending=1, running=0, dead=1, completed=1, retried=1, delayed=1
        )

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

        assert recorded == [True, True, False]
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
            True
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

    # -- max_pending -------------------------------------------------------------------

    def test_enqueue_beyond_max_pending_raises_queue_full_and_adds_nothing(
        self, make_queue: MakeQueue
    ) -> None:
        queue = make_queue(lambda job: None, max_pending=3)
        queue.enqueue_many(["a", "b", "c"])

        with pytest.raises(jobq.QueueFull, match="max_pending is 3"):
            queue.enqueue("d")
        with pytest.raises(jobq.QueueFull):
            queue.enqueue_many(["e", "f"])

        assert queue.stats().pending == 3

    def test_a_batch_that_would_pass_max_pending_is_refused_whole(
        self, make_queue: MakeQueue
    ) -> None:
        queue = make_queue(lambda job: None, max_pending=3)
        queue.enqueue("a")

        with pytest.raises(jobq.QueueFull):
            queue.enqueue_many(["b", "c", "d"])

        assert queue.stats().pending == 1

    def test_room_made_by_running_jobs_can_be_used_again(
        self, make_queue: MakeQueue
    ) -> None:
        queue = make_queue(lambda job: None, max_pending=2)
        queue.enqueue_many(["a", "b"])
        queue.run_pending()

        queue.enqueue_many(["c", "d"])

        assert queue.stats().pending == 2

    # -- what the store declares, list_jobs and next_due -------------------------------

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

    # -- the last attempt's times, timeout and meta ----------------------------------

    def test_a_job_that_never_ran_has_no_attempt_times_no_timeout_and_no_meta(
        self, make_queue: MakeQueue
    ) -> None:
        queue = make_queue(succeed)
        job = queue.enqueue("x")

        record = queue.get(job)

        assert record is not None
        assert (record.started_at, record.finished_at) == (None, None)
        assert (record.timeout, dict(record.meta)) == (None, {})

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

    def test_a_failed_attempt_finishes_and_the_retry_starts_anew(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        def fail_slowly(job: Job[Any]) -> None:
            clock.advance(2)
            raise ValueError("again")

        queue = make_queue(fail_slowly, base_delay=10, jitter=False, clock=clock)
        job = queue.enqueue("x")
        queue.run_pending()
        failed = queue.get(job)
        assert failed is not None
        assert (failed.state, failed.run_at) == (JobState.PENDING, T0 + 12)
        assert (failed.started_at, failed.finished_at) == (T0, T0 + 2)

        clock.advance(10)
        assert claim_one(queue.store, clock()) is not None

        running = queue.get(job)
        assert running is not None
        assert (running.started_at, running.finished_at) == (T0 + 12, None)

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
        queue.close()  # the claim stays, as when its process is killed
        clock.advance(3600)
        self.expire_claims()

        again = make_queue(succeed, clock=clock)
        again.stats()  # opens the store: it may recover the claim there
        again.store.recover(clock())

        record = again.get(job)
        assert record is not None
        assert (record.state, record.attempts) == (JobState.PENDING, 1)
        assert [error.type for error in record.errors] == ["jobq.errors.ProcessDied"]
        assert (record.started_at, record.finished_at) == (T0, T0 + 3600)

    def test_meta_and_timeout_stay_with_a_job_through_retries_burial_and_revive(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        meta = {"traceparent": "00-4bf92f35-00f067aa-01", "queue": "zoë's"}
        handler = Recorder(ValueError("once"), Fatal("then give up"))
        queue = make_queue(handler, base_delay=0, keep_completed=60, clock=clock)
        [new] = queue.prepare(["x"], meta=meta)
        timed = NewJob(new.payload, new.run_at, new.key, new.priority,
                       new.max_attempts, timeout=2.5, meta=new.meta)  # fmt: skip
        [job] = queue.add([timed])  # no public timeout= yet

        assert queue.run_pending() == 2

        assert [(c.meta, c.timeout) for c in handler.calls] == [(meta, 2.5)] * 2
        [dead] = queue.dead_jobs()
        assert (dead.meta, dead.timeout) == (meta, 2.5)
        assert queue.retry_dead(job) is True
        revived = queue.get(job)
        assert revived is not None
        assert (revived.meta, revived.timeout) == (meta, 2.5)
        claim = claim_one(queue.store, clock())
        assert claim is not None
        assert (claim.meta, claim.timeout) == (new.meta, 2.5)
        assert finish_one(queue.store, claim, None, clock() + 60, clock()) is True
        completed = queue.get(job)
        assert completed is not None
        assert completed.state is JobState.COMPLETED
        assert (completed.meta, completed.timeout) == (meta, 2.5)

    def test_no_meta_and_an_empty_meta_are_stored_alike_and_shown_empty(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        handler = Recorder()
        queue = make_queue(handler, keep_completed=60, clock=clock)
        jobs = [queue.enqueue(1), queue.enqueue(2, meta={})]
        store = queue.store

        claims = store.claim_many(clock(), 2)
        assert [c.meta for c in claims] == [None, None]
        store.release(claims, clock())
        queue.run_pending()

        assert [dict(call.meta) for call in handler.calls] == [{}, {}]
        records = [queue.get(job) for job in jobs]
        assert [dict(r.meta) for r in records if r is not None] == [{}, {}]

    # -- periodic jobs: the store takes each slot once (ScheduleStore) ----------------

    def slot_store(
        self, make_queue: MakeQueue, clock: Clock
    ) -> tuple[ScheduleStore, jobq.JobQueue[Any]]:
        """An open store that must keep schedules, and its queue on ``clock``."""
        queue = make_queue(succeed, clock=clock)
        queue.stats()  # opens it
        missing = missing_schedule_members(queue.store)
        assert not missing, f"the store lacks {missing} for periodic jobs"
        return cast(ScheduleStore, queue.store), queue

    def test_a_slot_is_enqueued_once_and_never_before_a_later_one(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        store, _ = self.slot_store(make_queue, clock)
        now = clock()

        first = store.enqueue_slot("s", "every 60s @ UTC", now, slot_job(now), now,
                                   skip_running=False)  # fmt: skip
        again = store.enqueue_slot("s", "every 60s @ UTC", now, slot_job(now), now,
                                   skip_running=False)  # fmt: skip
        earlier = store.enqueue_slot("s", "every 60s @ UTC", now - 60,
                                     slot_job(now - 60), now,
                                     skip_running=False)  # fmt: skip

        assert first is not None
        assert not first.duplicate
        assert (again, earlier) == (None, None)
        assert store.schedule_states() == [
            SlotState("s", "every 60s @ UTC", now, first.id)
        ]
        claim = claim_one(cast(Store, store), now)
        assert claim is not None
        assert (claim.id, claim.key, claim.run_at) == (first.id, f"slot:{now}", now)

    def test_a_slot_is_skipped_while_the_last_slots_job_is_pending_or_running(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        store, _ = self.slot_store(make_queue, clock)
        jobs = cast(Store, store)
        now = clock()
        first = store.enqueue_slot("s", "e", now, slot_job(now), now, skip_running=True)
        assert first is not None
        skipped = store.enqueue_slot("s", "e", now + 60, slot_job(now + 60), now + 60,
                                     skip_running=True)  # fmt: skip
        claim = claim_one(jobs, now + 60)
        assert claim is not None
        while_running = store.enqueue_slot(
            "s", "e", now + 120, slot_job(now + 120), now + 120, skip_running=True
        )
        assert finish_one(jobs, claim, None, None, now + 120)
        after = store.enqueue_slot("s", "e", now + 180, slot_job(now + 180), now + 180,
                                   skip_running=True)  # fmt: skip

        assert skipped == while_running == Enqueued(first.id, True)
        assert after is not None
        assert not after.duplicate
        assert store.schedule_states() == [SlotState("s", "e", now + 180, after.id)]
        assert jobs.stats().pending == 1

    def test_overlapping_slots_are_enqueued_when_allowed(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        store, _ = self.slot_store(make_queue, clock)
        now = clock()
        added = [
            store.enqueue_slot("s", "e", slot, slot_job(slot), now, skip_running=False)
            for slot in (now, now + 1, now + 2)
        ]

        assert [a is not None and not a.duplicate for a in added] == [True] * 3
        assert cast(Store, store).stats().pending == 3

    def test_schedule_states_are_listed_by_name(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        store, _ = self.slot_store(make_queue, clock)
        now = clock()
        for name in ("b", "a", "zoë"):
            store.enqueue_slot(name, f"{name} @ UTC", now, slot_job(now, name), now,
                               skip_running=False)  # fmt: skip

        states = store.schedule_states()
        assert [(s.name, s.expression, s.last_slot) for s in states] == [
            ("a", "a @ UTC", now), ("b", "b @ UTC", now), ("zoë", "zoë @ UTC", now),
        ]  # fmt: skip

    def test_schedule_states_are_the_same_after_a_restart(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        self.skip_unless_persistent()
        store, queue = self.slot_store(make_queue, clock)
        now = clock()
        added = store.enqueue_slot("s", "e", now, slot_job(now), now, skip_running=True)
        assert added is not None
        before = store.schedule_states()
        queue.close()
        again, _ = self.slot_store(make_queue, clock)

        assert again.schedule_states() == before
        assert again.enqueue_slot("s", "e", now, slot_job(now), now,
                                  skip_running=False) is None  # fmt: skip

    def test_periodic_slots_run_once_each_as_the_clock_moves(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(clock=clock)
        clock.now = 600 * (clock.now // 600)  # on a slot
        ran: list[dt.datetime] = []

        def tick(scheduled_at: dt.datetime) -> None:
            ran.append(scheduled_at)

        queue.periodic(every=dt.timedelta(minutes=10), name="tick")(tick)
        assert queue.run_pending() == 0  # a new schedule starts with its next slot
        clock.advance(600)
        assert queue.run_pending() == 1
        assert queue.run_pending() == 0
        clock.advance(599)
        assert queue.run_pending() == 0
        clock.advance(1)
        assert queue.run_pending() == 1

        start = dt.datetime.fromtimestamp(clock() - 600, dt.UTC)
        assert ran == [start, start + dt.timedelta(minutes=10)]
        (schedule,) = queue.schedules()
        assert (schedule.name, schedule.expression, schedule.last_slot) == (
            "tick", "every 600s", ran[-1],
        )  # fmt: skip
        assert schedule.next_slot == ran[-1] + dt.timedelta(minutes=10)

    # -- a restart: a second store over the same place (persistent stores) -------------

    def test_a_pending_job_is_the_same_after_a_restart(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        self.skip_unless_persistent()
        queue = make_queue(succeed, clock=clock)
        job = queue.enqueue(
            {"to": "zoë"}, delay=5, key="k", priority=2, meta={"trace": "zoë"}
        )
        before = queue.get(job)
        assert before is not None
        assert before.meta == {"trace": "zoë"}
        queue.close()

        again = make_queue(succeed, clock=clock)

        assert again.get(job) == before
        assert again.stats() == Stats(
            pending=1, running=0, dead=0, completed=0, retried=0, delayed=1
        )
        assert again.enqueue("x", key="k") == Enqueued(job.id, True)
        clock.advance(5)
        assert again.run_pending() == 1
        assert again.get(job) is None

    def test_a_job_waiting_for_a_retry_is_the_same_after_a_restart(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        self.skip_unless_persistent()
        queue = make_queue(
            Recorder(ValueError("once")), base_delay=10, jitter=False, clock=clock
        )
        job = queue.enqueue("x", key="k")
        queue.run_pending()
        before = queue.get(job)
        assert before is not None
        assert (before.state, before.attempts) == (JobState.PENDING, 1)
        queue.close()

        handler = Recorder()
        again = make_queue(handler, base_delay=10, jitter=False, clock=clock)

        assert again.get(job) == before
        assert again.enqueue("x", key="k") == Enqueued(job.id, True)
        clock.advance(10)
        assert again.run_pending() == 1
        assert [call.attempt for call in handler.calls] == [2]

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

    def test_job_ids_keep_growing_after_a_restart(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        self.skip_unless_persistent()
        queue = make_queue(succeed, clock=clock)
        finished = queue.enqueue("x")
        queue.run_pending()
        cancelled = queue.enqueue("x")
        queue.cancel(cancelled)
        queue.close()

        again = make_queue(succeed, clock=clock)
        last = again.enqueue("x")

        assert 0 < finished.id < cancelled.id < last.id
