"""What a job goes through, on every store: the shared behavioural suite.

Jobs run with ``run_pending`` in the test's own thread and time comes from an
injected clock (or freezegun), so nothing here waits. Worker threads, stop,
close and join are in ``test_queue_lifecycle.py``. Only the public API is
used, plus the ``Store`` protocol for claim fencing, so SQLite and PostgreSQL
run the same tests when they join ``STORES`` in ``conftest.py``.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
import threading
from collections.abc import Callable
from typing import Any

import pytest
from freezegun import freeze_time

import jobq
from jobq import AttemptError, Enqueued, Fatal, Job, JobState, Retry, Stats
from jobq.testing import T0, Clock

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


# -- success ------------------------------------------------------------------


def test_a_successful_job_runs_once_and_is_removed(make_queue: MakeQueue) -> None:
    handler = Recorder()
    queue = make_queue(handler)
    job = queue.enqueue({"to": "ann@example.com"})

    assert queue.run_pending() == 1
    assert queue.run_pending() == 0

    assert handler.payloads == [{"to": "ann@example.com"}]
    assert queue.get(job) is None


def test_a_handler_receives_the_job_id_payload_key_and_first_attempt(
    make_queue: MakeQueue,
) -> None:
    handler = Recorder()
    queue = make_queue(handler)
    job = queue.enqueue({"n": [1, 2.5, "x", None, True]}, key="k-1")

    queue.run_pending()

    assert handler.calls == [Job(job.id, {"n": [1, 2.5, "x", None, True]}, 1, "k-1")]


def test_get_shows_a_pending_job_as_it_was_enqueued(
    make_queue: MakeQueue, clock: Clock
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
    make_queue: MakeQueue,
) -> None:
    handler = Recorder()
    queue = make_queue(handler)
    payload: dict[str, Any] = {"to": ["ann"]}
    queue.enqueue(payload)

    payload["to"].append("bob")
    queue.run_pending()

    assert handler.payloads == [{"to": ["ann"]}]


def test_a_failed_attempt_does_not_see_what_an_earlier_one_did_to_the_payload(
    make_queue: MakeQueue,
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
    make_queue: MakeQueue, clock: Clock
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
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(succeed, keep_completed=dt.timedelta(minutes=2), clock=clock)
    job = queue.enqueue(1)
    queue.run_pending()

    clock.advance(119)
    assert queue.get(job) is not None
    clock.advance(2)
    assert queue.get(job) is None


def test_a_result_that_is_not_json_is_kept_as_none(make_queue: MakeQueue) -> None:
    queue = make_queue(lambda job: object(), keep_completed=60)
    job = queue.enqueue("x")

    queue.run_pending()

    record = queue.get(job)
    assert record is not None
    assert (record.state, record.result) == (JobState.COMPLETED, None)
    assert queue.stats().completed == 1


def test_a_kept_completed_job_is_neither_pending_nor_running(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(succeed, keep_completed=60)
    queue.enqueue(1)
    queue.run_pending()

    assert queue.stats() == Stats(pending=0, running=0, dead=0, completed=1, retried=0)
    assert queue.join(timeout=0)


def test_a_kept_completed_job_cannot_be_cancelled(make_queue: MakeQueue) -> None:
    queue = make_queue(succeed, keep_completed=60)
    job = queue.enqueue(1)
    queue.run_pending()

    assert queue.cancel(job) is False
    assert queue.get(job) is not None


# -- failures, retries and backoff ---------------------------------------------


def test_a_failed_job_is_retried_after_the_backoff(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(fail_with_value_error, base_delay=2, jitter=False, clock=clock)
    job = queue.enqueue("x")

    queue.run_pending()
    first = queue.get(job)
    assert first is not None
    assert (first.state, first.attempts, first.run_at) == (JobState.PENDING, 1, T0 + 2)

    clock.advance(2)
    assert queue.run_pending() == 1
    second = queue.get(job)
    assert second is not None
    assert (second.attempts, second.run_at) == (2, T0 + 2 + 4)


def test_a_retry_is_not_due_before_its_backoff_has_passed(
    make_queue: MakeQueue, clock: Clock
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
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(
        fail_with_value_error, base_delay=10, max_delay=15, jitter=False, clock=clock
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


def test_backoff_delays_accept_a_timedelta(make_queue: MakeQueue, clock: Clock) -> None:
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
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(
        fail_with_value_error, base_delay=100, jitter=True, max_attempts=2, clock=clock
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
    make_queue: MakeQueue, clock: Clock
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
    assert record.last_error == "Retry: rate limited"


def test_retry_after_accepts_a_timedelta(make_queue: MakeQueue, clock: Clock) -> None:
    queue = make_queue(
        Recorder(Retry(after=dt.timedelta(minutes=2))), base_delay=1, clock=clock
    )
    job = queue.enqueue("x")

    queue.run_pending()

    record = queue.get(job)
    assert record is not None
    assert record.run_at == T0 + 120


def test_retry_after_counts_as_an_attempt(make_queue: MakeQueue, clock: Clock) -> None:
    def handler(job: Job[Any]) -> None:
        raise Retry("not yet", after=0)

    queue = make_queue(handler, max_attempts=2, clock=clock)
    job = queue.enqueue("x")

    assert queue.run_pending() == 2

    record = queue.get(job)
    assert record is not None
    assert (record.state, record.attempts) == (JobState.DEAD, 2)


def test_a_job_dies_after_max_attempts_failures(
    make_queue: MakeQueue, clock: Clock
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
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(Recorder(ValueError("once")), base_delay=0, clock=clock)
    job = queue.enqueue("x")

    assert queue.run_pending() == 2

    assert queue.get(job) is None
    assert queue.dead_jobs() == []


def test_fatal_sends_a_job_to_the_dead_letters_at_once(
    make_queue: MakeQueue, clock: Clock
) -> None:
    handler = Recorder(Fatal("no such address"))
    queue = make_queue(handler, max_attempts=5, base_delay=0, clock=clock)
    job = queue.enqueue("x")

    assert queue.run_pending() == 1

    record = queue.get(job)
    assert record is not None
    assert (record.state, record.attempts) == (JobState.DEAD, 1)
    assert record.last_error == "Fatal: no such address"


def test_last_error_names_the_exception_type_and_message(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(fail_with_value_error, clock=clock)
    job = queue.enqueue("x")

    queue.run_pending()

    record = queue.get(job)
    assert record is not None
    assert record.last_error == "ValueError: message"


def parse_invoice(payload: Any) -> None:
    raise ValueError(f"bad invoice {payload}")


def test_a_dead_job_records_every_failed_attempt(
    make_queue: MakeQueue, clock: Clock
) -> None:
    def handler(job: Job[Any]) -> None:
        parse_invoice(job.payload)

    queue = make_queue(handler, max_attempts=2, base_delay=5, jitter=False, clock=clock)
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


def test_a_job_keeps_only_its_last_20_errors(make_queue: MakeQueue) -> None:
    def handler(job: Job[Any]) -> None:
        raise ValueError(f"attempt {job.attempt}")

    queue = make_queue(handler, max_attempts=25, base_delay=0)
    job = queue.enqueue("x")
    queue.run_pending()

    record = queue.get(job)
    assert record is not None
    assert record.attempts == 25
    assert [e.message for e in record.errors] == [f"attempt {n}" for n in range(6, 26)]
    assert record.last_error == "ValueError: attempt 25"


def raise_deep(depth: int, message: str) -> None:
    if depth:
        raise_deep(depth - 1, message)
    raise ValueError(message)


def test_a_huge_error_is_cut_to_about_10_kb_keeping_the_raising_frame(
    make_queue: MakeQueue,
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


class Interrupt(BaseException):
    """Like ``KeyboardInterrupt``: not an ``Exception``."""


@pytest.mark.parametrize(
    ("raised", "last_error"),
    [
        (SystemExit(3), "SystemExit: 3"),
        (KeyboardInterrupt("stop"), "KeyboardInterrupt: stop"),
        (Interrupt("bye"), "Interrupt: bye"),
        (RuntimeError("boom"), "RuntimeError: boom"),
    ],
)
def test_anything_a_handler_raises_is_a_failed_attempt(
    make_queue: MakeQueue, clock: Clock, raised: BaseException, last_error: str
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


# -- the dead-letter list -------------------------------------------------------


def test_dead_jobs_are_listed_oldest_first(make_queue: MakeQueue, clock: Clock) -> None:
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
    make_queue: MakeQueue, clock: Clock
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


def test_a_revived_job_runs_again(make_queue: MakeQueue, clock: Clock) -> None:
    handler = Recorder(Fatal("down"))
    queue = make_queue(handler, clock=clock)
    job = bury(queue, "x")
    queue.retry_dead(job)

    assert queue.run_pending() == 1

    assert [call.attempt for call in handler.calls] == [1, 1]
    assert queue.get(job) is None


def test_a_revived_job_that_dies_again_is_the_newest_dead_job(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(die, clock=clock)
    first = bury(queue, "first")
    second = bury(queue, "second")
    queue.retry_dead(first)

    queue.run_pending()

    assert [job.id for job in queue.dead_jobs()] == [second.id, first.id]


def test_delete_dead_removes_a_dead_job(make_queue: MakeQueue, clock: Clock) -> None:
    queue = make_queue(die, clock=clock)
    job = bury(queue)

    assert queue.delete_dead(job) is True

    assert queue.get(job) is None
    assert queue.dead_jobs() == []
    assert queue.stats().dead == 0


@pytest.mark.parametrize("manage", ["retry_dead", "delete_dead"])
def test_retry_dead_and_delete_dead_refuse_a_pending_job(
    make_queue: MakeQueue, manage: str
) -> None:
    queue = make_queue(succeed)
    job = queue.enqueue("x")

    assert getattr(queue, manage)(job) is False

    record = queue.get(job)
    assert record is not None
    assert (record.state, record.attempts) == (JobState.PENDING, 0)


@pytest.mark.parametrize("manage", ["retry_dead", "delete_dead"])
def test_retry_dead_and_delete_dead_refuse_a_running_job(
    make_queue: MakeQueue, manage: str
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
    make_queue: MakeQueue, manage: str
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
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(die, clock=clock)
    job = bury(queue)

    assert queue.retry_dead(job) is True
    assert queue.retry_dead(job) is False
    assert queue.delete_dead(job) is False
    assert queue.stats().pending == 1


def test_dead_jobs_keep_only_the_newest(make_queue: MakeQueue, clock: Clock) -> None:
    queue = make_queue(die, dead_letter_limit=3, clock=clock)
    jobs = [bury(queue, n) for n in range(5)]

    assert [job.id for job in queue.dead_jobs()] == [job.id for job in jobs[2:]]
    assert queue.stats().dead == 3
    assert queue.get(jobs[0]) is None
    assert queue.get(jobs[1]) is None


def test_each_dead_job_dropped_by_the_limit_is_logged_at_warning(
    make_queue: MakeQueue, clock: Clock, caplog: pytest.LogCaptureFixture
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
    make_queue: MakeQueue, clock: Clock
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
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(die, clock=clock)
    dead = bury(queue, "old", key="invoice-7")

    assert queue.retry_dead(dead) is True

    assert queue.enqueue("new", key="invoice-7") == Enqueued(dead.id, True)


# -- when jobs run: delay, at, priority -------------------------------------------


def test_delay_postpones_a_job(make_queue: MakeQueue, clock: Clock) -> None:
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


def test_delay_accepts_a_timedelta(make_queue: MakeQueue, clock: Clock) -> None:
    queue = make_queue(succeed, clock=clock)

    job = queue.enqueue("x", delay=dt.timedelta(minutes=5))

    record = queue.get(job)
    assert record is not None
    assert record.run_at == T0 + 300


def test_at_accepts_an_aware_datetime(make_queue: MakeQueue, clock: Clock) -> None:
    queue = make_queue(succeed, clock=clock)
    when = dt.datetime.fromtimestamp(T0 + 3600, tz=dt.timezone(dt.timedelta(hours=5)))

    job = queue.enqueue("x", at=when)

    record = queue.get(job)
    assert record is not None
    assert record.run_at == T0 + 3600


def test_at_accepts_epoch_seconds(make_queue: MakeQueue, clock: Clock) -> None:
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
    make_queue: MakeQueue, clock: Clock, at: float | dt.datetime
) -> None:
    queue = make_queue(succeed, clock=clock)

    job = queue.enqueue("x", at=at)

    record = queue.get(job)
    assert record is not None
    assert record.run_at == T0
    assert queue.run_pending() == 1


def test_higher_priority_runs_first_among_due_jobs(make_queue: MakeQueue) -> None:
    handler = Recorder()
    queue = make_queue(handler)
    queue.enqueue("low", priority=-1)
    queue.enqueue("normal")
    queue.enqueue("urgent", priority=10)
    queue.enqueue("high", priority=5)

    queue.run_pending()

    assert handler.payloads == ["urgent", "high", "normal", "low"]


def test_equal_priority_runs_the_earliest_due_first_then_the_lowest_id(
    make_queue: MakeQueue, clock: Clock
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
    make_queue: MakeQueue, clock: Clock
) -> None:
    handler = Recorder()
    queue = make_queue(handler, clock=clock)
    queue.enqueue("early, normal")
    queue.enqueue("later, high", delay=10, priority=1)
    clock.advance(10)

    queue.run_pending()

    assert handler.payloads == ["later, high", "early, normal"]


def test_a_delayed_high_priority_job_does_not_block_due_ones(
    make_queue: MakeQueue, clock: Clock
) -> None:
    handler = Recorder()
    queue = make_queue(handler, clock=clock)
    queue.enqueue("urgent, later", delay=60, priority=100)
    queue.enqueue("normal, now")

    assert queue.run_pending() == 1

    assert handler.payloads == ["normal, now"]


# -- keys -----------------------------------------------------------------------


def test_a_key_returns_the_pending_job_as_a_duplicate(make_queue: MakeQueue) -> None:
    queue = make_queue(succeed)
    first = queue.enqueue({"to": "ann"}, key="welcome-ann")

    second = queue.enqueue({"to": "ann", "again": True}, key="welcome-ann")

    assert first == Enqueued(first.id, False)
    assert second == Enqueued(first.id, True)
    assert queue.stats().pending == 1
    record = queue.get(first)
    assert record is not None
    assert record.payload == {"to": "ann"}


def test_a_key_returns_the_running_job_as_a_duplicate(make_queue: MakeQueue) -> None:
    seen: list[Enqueued] = []

    def handler(job: Job[Any]) -> None:
        seen.append(queue.enqueue("again", key="k"))

    queue = make_queue(handler)
    job = queue.enqueue("first", key="k")

    assert queue.run_pending() == 1

    assert seen == [Enqueued(job.id, True)]


def test_different_keys_do_not_collide(make_queue: MakeQueue) -> None:
    queue = make_queue(succeed)

    first = queue.enqueue("x", key="a")
    second = queue.enqueue("x", key="b")
    unkeyed = queue.enqueue("x")

    assert len({first.id, second.id, unkeyed.id}) == 3
    assert [first.duplicate, second.duplicate, unkeyed.duplicate] == [False] * 3


@pytest.mark.parametrize("keep_completed", [0, 60])
def test_a_finished_job_frees_its_key(
    make_queue: MakeQueue, keep_completed: int
) -> None:
    queue = make_queue(succeed, keep_completed=keep_completed)
    first = queue.enqueue("x", key="k")
    queue.run_pending()

    second = queue.enqueue("x", key="k")

    assert second.duplicate is False
    assert second.id != first.id


def test_a_key_repeated_within_enqueue_many_is_a_duplicate_of_the_first(
    make_queue: MakeQueue,
) -> None:
    handler = Recorder()
    queue = make_queue(handler)

    jobs = queue.enqueue_many(["first", "second", "third"], key="k")

    assert jobs == [Enqueued(jobs[0].id, False)] + [Enqueued(jobs[0].id, True)] * 2
    queue.run_pending()
    assert handler.payloads == ["first"]


def test_a_dead_job_frees_its_key(make_queue: MakeQueue, clock: Clock) -> None:
    queue = make_queue(die, clock=clock)
    first = bury(queue, "x", key="k")

    second = queue.enqueue("x", key="k")

    assert second.duplicate is False
    assert second.id != first.id


def test_a_cancelled_job_frees_its_key(make_queue: MakeQueue) -> None:
    queue = make_queue(succeed)
    first = queue.enqueue("x", key="k")
    queue.cancel(first)

    second = queue.enqueue("x", key="k")

    assert second.duplicate is False
    assert second.id != first.id


def test_a_job_waiting_for_a_retry_keeps_its_key(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(fail_with_value_error, base_delay=60, clock=clock)
    first = queue.enqueue("x", key="k")
    queue.run_pending()

    assert queue.enqueue("x", key="k") == Enqueued(first.id, True)


# -- cancel -----------------------------------------------------------------------


@pytest.mark.parametrize("delay", [0, 60])
def test_cancel_removes_a_pending_job(make_queue: MakeQueue, delay: int) -> None:
    handler = Recorder()
    queue = make_queue(handler)
    job = queue.enqueue("x", delay=delay)

    assert queue.cancel(job) is True

    assert queue.get(job) is None
    assert queue.stats().pending == 0
    assert queue.run_pending() == 0
    assert handler.calls == []


def test_cancel_refuses_a_running_job(make_queue: MakeQueue) -> None:
    answers: list[bool] = []

    def handler(job: Job[Any]) -> str:
        answers.append(queue.cancel(job.id))
        return "done"

    queue = make_queue(handler)
    queue.enqueue("x")

    queue.run_pending()

    assert answers == [False]
    assert queue.stats().completed == 1


def test_cancel_refuses_an_unknown_job(make_queue: MakeQueue) -> None:
    queue = make_queue(succeed)
    job = queue.enqueue("x")

    assert queue.cancel(job.id + 1000) is False
    assert queue.stats().pending == 1


def test_cancel_refuses_a_dead_job(make_queue: MakeQueue, clock: Clock) -> None:
    queue = make_queue(die, clock=clock)
    job = bury(queue)

    assert queue.cancel(job) is False
    assert [dead.id for dead in queue.dead_jobs()] == [job.id]


def test_cancel_twice_returns_false_the_second_time(make_queue: MakeQueue) -> None:
    queue = make_queue(succeed)
    job = queue.enqueue("x")

    assert queue.cancel(job) is True
    assert queue.cancel(job) is False


# -- enqueue_many and job references -------------------------------------------------


def test_enqueue_many_returns_ids_in_order(make_queue: MakeQueue) -> None:
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
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(succeed, clock=clock)

    jobs = queue.enqueue_many(["a", "b"], delay=30, priority=3)

    for job in jobs:
        record = queue.get(job)
        assert record is not None
        assert (record.run_at, record.priority) == (T0 + 30, 3)


def test_enqueue_many_with_a_bad_payload_adds_nothing(make_queue: MakeQueue) -> None:
    queue = make_queue(succeed)
    queue.enqueue("before")
    before = queue.stats()

    with pytest.raises(TypeError):
        queue.enqueue_many([{"n": 1}, {"n": object()}, {"n": 3}])

    assert queue.stats() == before
    assert queue.run_pending() == 1


def test_enqueue_many_of_nothing_adds_nothing(make_queue: MakeQueue) -> None:
    queue = make_queue(succeed)

    assert queue.enqueue_many([]) == []
    assert queue.stats().pending == 0


def test_job_ids_only_grow(make_queue: MakeQueue) -> None:
    queue = make_queue(succeed)
    first = queue.enqueue("x")
    queue.run_pending()
    cancelled = queue.enqueue("x")
    queue.cancel(cancelled)

    last = queue.enqueue("x")

    assert 0 < first.id < cancelled.id < last.id


def test_get_cancel_retry_dead_and_delete_dead_accept_an_enqueued(
    make_queue: MakeQueue, clock: Clock
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


def test_get_of_an_unknown_id_returns_none(make_queue: MakeQueue) -> None:
    queue = make_queue(succeed)

    assert queue.get(12345) is None


# -- run_pending ------------------------------------------------------------------


def test_run_pending_runs_due_jobs_in_the_calling_thread(make_queue: MakeQueue) -> None:
    threads: list[threading.Thread] = []
    queue = make_queue(lambda job: threads.append(threading.current_thread()))
    queue.enqueue_many([1, 2])

    queue.run_pending()

    assert threads == [threading.current_thread()] * 2


def test_run_pending_returns_how_many_ran(make_queue: MakeQueue, clock: Clock) -> None:
    queue = make_queue(succeed, clock=clock)
    queue.enqueue_many([1, 2, 3])
    queue.enqueue(4, delay=10)

    assert queue.run_pending() == 3
    assert queue.run_pending() == 0


def test_run_pending_honours_limit(make_queue: MakeQueue) -> None:
    handler = Recorder()
    queue = make_queue(handler)
    queue.enqueue_many([1, 2, 3, 4, 5])

    assert queue.run_pending(limit=2) == 2
    assert handler.payloads == [1, 2]
    assert queue.stats().pending == 3
    assert queue.run_pending(limit=10) == 3


@pytest.mark.queue_clock  # freezegun moves the queue's clock only
def test_with_freezegun_delayed_jobs_become_due_as_time_moves(
    make_queue: MakeQueue,
) -> None:
    handler = Recorder()
    with freeze_time("2027-03-01 12:00:00") as frozen:
        queue = make_queue(handler)
        queue.enqueue("in a minute", delay=60)
        queue.enqueue("in an hour", at=dt.datetime(2027, 3, 1, 13, tzinfo=dt.UTC))

        assert queue.run_pending() == 0
        frozen.tick(60)
        assert queue.run_pending() == 1
        frozen.move_to("2027-03-01 13:00:00")
        assert queue.run_pending() == 1

    assert handler.payloads == ["in a minute", "in an hour"]


@pytest.mark.queue_clock  # freezegun moves the queue's clock only
def test_with_freezegun_retries_become_due_as_time_moves(make_queue: MakeQueue) -> None:
    handler = Recorder(ValueError("1"), ValueError("2"))
    with freeze_time("2027-03-01 12:00:00") as frozen:
        queue = make_queue(handler, base_delay=10, jitter=False)
        job = queue.enqueue("x")

        assert queue.run_pending() == 1
        frozen.tick(9)
        assert queue.run_pending() == 0
        frozen.tick(1)
        assert queue.run_pending() == 1
        frozen.tick(19)
        assert queue.run_pending() == 0
        frozen.tick(1)
        assert queue.run_pending() == 1

    assert [call.attempt for call in handler.calls] == [1, 2, 3]
    assert queue.get(job) is None


# -- stats -----------------------------------------------------------------------


def test_stats_count_delayed_jobs_as_pending(make_queue: MakeQueue) -> None:
    queue = make_queue(succeed)
    queue.enqueue("now")
    queue.enqueue("later", delay=3600)

    assert queue.stats() == Stats(pending=2, running=0, dead=0, completed=0, retried=0)


def test_stats_count_a_running_job(make_queue: MakeQueue) -> None:
    seen: list[Stats] = []

    def handler(job: Job[Any]) -> None:
        seen.append(queue.stats())

    queue = make_queue(handler)
    queue.enqueue_many([1, 2])

    queue.run_pending(limit=1)

    assert seen == [Stats(pending=1, running=1, dead=0, completed=0, retried=0)]
    assert queue.stats() == Stats(pending=1, running=0, dead=0, completed=1, retried=0)


def test_stats_count_dead_completed_and_retried_jobs(
    make_queue: MakeQueue, clock: Clock
) -> None:
    def handler(job: Job[Any]) -> None:
        if job.payload == "dies":
            raise Fatal("no")
        if job.payload == "retries" and job.attempt == 1:
            raise ValueError("later")

    queue = make_queue(handler, base_delay=60, clock=clock)
    queue.enqueue_many(["dies", "retries", "succeeds"])

    queue.run_pending()

    assert queue.stats() == Stats(pending=1, running=0, dead=1, completed=1, retried=1)


def test_stats_count_completed_and_retried_per_queue_object(
    make_queue: MakeQueue,
) -> None:
    first = make_queue(succeed)
    first.enqueue("x")
    first.run_pending()
    assert first.stats().completed == 1
    first.close()

    second = make_queue(succeed)  # the same store, for stores that persist

    assert second.stats().completed == 0


# -- bad input fails at the call and changes nothing ------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        object(),
        {"when": dt.datetime(2027, 1, 1, tzinfo=dt.UTC)},
        {1, 2},
        b"bytes",
        math.nan,
        [math.inf],
    ],
    ids=["object", "datetime", "set", "bytes", "nan", "inf"],
)
def test_a_payload_that_is_not_json_is_rejected_at_enqueue(
    make_queue: MakeQueue, payload: Any
) -> None:
    queue = make_queue(succeed)
    queue.enqueue("before")
    before = queue.stats()

    with pytest.raises(TypeError, match="JSON"):
        queue.enqueue(payload)

    assert queue.stats() == before


@pytest.mark.parametrize(
    "delay", [-1, -0.001, dt.timedelta(seconds=-1), math.nan, math.inf]
)
def test_a_negative_or_infinite_delay_is_rejected_at_enqueue(
    make_queue: MakeQueue, delay: float | dt.timedelta
) -> None:
    queue = make_queue(succeed)
    queue.enqueue("before")
    before = queue.stats()

    with pytest.raises(ValueError, match="delay"):
        queue.enqueue("x", delay=delay)

    assert queue.stats() == before


@pytest.mark.parametrize(
    "options",
    [{"key": 7}, {"priority": "high"}, {"priority": 1.5}, {"at": "tomorrow"}],
    ids=["key", "priority-str", "priority-float", "at"],
)
def test_an_option_of_the_wrong_type_is_rejected_at_enqueue(
    make_queue: MakeQueue, options: dict[str, Any]
) -> None:
    queue = make_queue(succeed)
    queue.enqueue("before")
    before = queue.stats()

    with pytest.raises(TypeError):
        queue.enqueue("x", **options)

    assert queue.stats() == before


def test_a_naive_datetime_is_rejected_at_enqueue(make_queue: MakeQueue) -> None:
    queue = make_queue(succeed)
    queue.enqueue("before")
    before = queue.stats()

    with pytest.raises(ValueError, match="aware"):
        queue.enqueue("x", at=dt.datetime(2027, 1, 1, 12))  # noqa: DTZ001 - the point

    assert queue.stats() == before


def test_delay_and_at_together_are_rejected(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(succeed, clock=clock)
    queue.enqueue("before")
    before = queue.stats()

    with pytest.raises(ValueError, match="delay or at"):
        queue.enqueue("x", delay=10, at=T0 + 60)

    assert queue.stats() == before


def test_a_bad_option_in_enqueue_many_adds_nothing(make_queue: MakeQueue) -> None:
    queue = make_queue(succeed)

    with pytest.raises(ValueError, match="delay"):
        queue.enqueue_many([1, 2, 3], delay=-5)

    assert queue.stats().pending == 0


@pytest.mark.parametrize("max_attempts", [0, -3])
def test_a_queue_with_fewer_than_one_attempt_is_rejected(max_attempts: int) -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        jobq.JobQueue(succeed, max_attempts=max_attempts)


@pytest.mark.parametrize("option", ["base_delay", "max_delay", "keep_completed"])
@pytest.mark.parametrize(
    "value", [-1, dt.timedelta(seconds=-1)], ids=["seconds", "timedelta"]
)
def test_a_queue_with_a_negative_delay_is_rejected(
    option: str, value: float | dt.timedelta
) -> None:
    options: dict[str, Any] = {option: value}
    with pytest.raises(ValueError, match=option):
        jobq.JobQueue(succeed, **options)


@pytest.mark.parametrize(
    "url", ["sqlite:/x", "sqlite:x.db", "ftp://h/x", "http://example.com/jobs"]
)
def test_a_malformed_or_unknown_store_url_is_rejected(url: str) -> None:
    with pytest.raises(ValueError, match=r"store|URL|url"):
        jobq.JobQueue(succeed, store=url)


# -- claims are fenced by their token (the Store protocol) --------------------------


def failed_attempt(at: float) -> AttemptError:
    return AttemptError("ValueError", "stale", "", at)


def test_a_stale_claim_cannot_finish_a_job_claimed_again(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(succeed, clock=clock)
    job = queue.enqueue("x")
    store = queue.store
    stale = store.claim(clock())
    assert stale is not None
    assert store.fail(stale, failed_attempt(clock()), clock(), clock()) is True
    current = store.claim(clock())
    assert current is not None
    assert current.id == job.id
    before = queue.stats()

    assert store.finish(stale, '"stale"', None, clock()) is False

    record = queue.get(job)
    assert record is not None
    assert (record.state, record.attempts) == (JobState.RUNNING, 1)
    assert queue.stats() == before
    assert store.finish(current, None, None, clock()) is True
    assert queue.get(job) is None


def test_a_stale_claim_cannot_fail_a_job_claimed_again(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(succeed, clock=clock)
    job = queue.enqueue("x")
    store = queue.store
    stale = store.claim(clock())
    assert stale is not None
    assert store.fail(stale, failed_attempt(clock()), clock(), clock()) is True
    current = store.claim(clock())
    assert current is not None
    before = queue.stats()

    assert store.fail(stale, failed_attempt(clock()), None, clock()) is False

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
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(succeed, clock=clock)
    job = queue.enqueue("x")
    store = queue.store
    stale = store.claim(clock())
    assert stale is not None
    assert store.fail(stale, failed_attempt(clock()), clock() + 60, clock()) is True

    assert store.finish(stale, None, None, clock()) is False
    assert store.fail(stale, failed_attempt(clock()), None, clock()) is False

    record = queue.get(job)
    assert record is not None
    assert (record.state, record.attempts, record.run_at) == (
        JobState.PENDING,
        1,
        T0 + 60,
    )


def test_a_claim_cannot_finish_a_job_twice(make_queue: MakeQueue, clock: Clock) -> None:
    queue = make_queue(succeed, clock=clock, keep_completed=60)
    job = queue.enqueue("x")
    store = queue.store
    claim = store.claim(clock())
    assert claim is not None

    assert store.finish(claim, '"first"', clock() + 60, clock()) is True
    assert store.finish(claim, '"second"', clock() + 60, clock()) is False
    assert store.fail(claim, failed_attempt(clock()), None, clock()) is False

    record = queue.get(job)
    assert record is not None
    assert (record.state, record.result) == (JobState.COMPLETED, "first")
