"""Retries and burial: every failed attempt is recorded, retried after its
backoff (or ``Retry``'s ``after``), and buried after ``max_attempts`` or on
``Fatal``."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from jobq import AttemptError, Enqueued, Fatal, Job, JobState, Retry
from jobq.testing.clock import T0, Clock
from jobq.testing.contract.base import (
    ContractBase,
    MakeQueue,
    Recorder,
    claim_one,
    fail_with_value_error,
)


def parse_invoice(payload: Any) -> None:
    raise ValueError(f"bad invoice {payload}")


def raise_deep(depth: int, message: str) -> None:
    if depth:
        raise_deep(depth - 1, message)
    raise ValueError(message)


class Interrupt(BaseException):
    """Like ``KeyboardInterrupt``: not an ``Exception``."""

    # Where it is imported from (the test ids and errors name it so).
    __module__ = "jobq.testing.contract"


class RetryTests(ContractBase):
    """Failed attempts, backoff, ``Retry`` and ``Fatal``, and the errors kept."""

    # -- backoff -----------------------------------------------------------------------

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

    # -- Retry(after=) -----------------------------------------------------------------

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

    # -- burial: max_attempts and Fatal ------------------------------------------------

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

    # -- the errors kept ---------------------------------------------------------------

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
            (Interrupt("bye"), f"{Interrupt.__module__}.Interrupt: bye"),
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

    # -- the attempt's times; a restart (persistent stores) ----------------------------

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
