"""Hostile and careless input, on every store: a refused call changes nothing,
an accepted one survives a restart, and every error is true.

Each test names the point of the "hostile input" issue it covers. The
standing property test over arbitrary input is ``test_hostile_property.py``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import pytest

import jobq
from jobq import Job, JobState
from jobq.stores import Store
from jobq.testing import T0, Clock

MakeQueue = Callable[..., jobq.JobQueue[Any]]
StoreFactory = Callable[..., Store]

SURROGATE = b"\xff".decode("utf-8", "surrogateescape")  # "\udcff"


def nothing(job: Job[Any]) -> None:
    """A handler for queues whose jobs the test never runs."""


def reopened(
    store_kind: str, make_store: StoreFactory, handler: Any = nothing, **options: Any
) -> jobq.JobQueue[Any] | None:
    """A new queue on the same place, as after a restart (``None`` for the
    memory store, which keeps nothing)."""
    if store_kind == "memory":
        return None
    return jobq.JobQueue(handler, store=make_store(), **options)


def pending_payloads(queue: jobq.JobQueue[Any]) -> list[Any]:
    queue.stats()  # opens the store
    return [r.payload for r in queue.store.list_jobs(JobState.PENDING)]


def snapshot(queue: jobq.JobQueue[Any]) -> tuple[Any, ...]:
    """What a caller can see of a queue: counts and the jobs it shows."""
    stats = queue.stats()  # opens the store
    pending = queue.store.list_jobs(JobState.PENDING)
    return (
        (stats.pending, stats.running, stats.dead),
        [(r.id, r.payload, r.key, r.priority, r.state) for r in pending],
        [(r.id, r.payload, r.last_error) for r in queue.dead_jobs()],
    )


# -- 1. every argument is checked before any store changes -----------------------


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"key": SURROGATE}, ValueError, "key must be valid Unicode"),
        ({"key": "a\x00b"}, ValueError, "key must not contain NUL"),
        ({"priority": 10**5000}, ValueError, "priority must be at most"),
        ({"priority": -(2**63) - 1}, ValueError, "priority must be at least"),
        ({"priority": 2.5}, TypeError, "priority must be an int"),
        ({"meta": [("a", "b")]}, TypeError, "meta must be a mapping"),
        ({"meta": {1: "a"}}, TypeError, "meta must map str to str"),
        ({"meta": {"a": 1}}, TypeError, "meta must map str to str"),
        ({"meta": {"": "a"}}, ValueError, "meta keys must not be empty"),
        ({"meta": {SURROGATE: "a"}}, ValueError, "meta key must be valid Unicode"),
        ({"meta": {"a": SURROGATE}}, ValueError, "must be valid Unicode"),
        ({"meta": {"a": "x\x00y"}}, ValueError, "must not contain NUL"),
        ({"meta": {"a\x00": "x"}}, ValueError, "must not contain NUL"),
        ({"meta": {str(n): "" for n in range(65)}}, ValueError, "at most 64"),
        ({"meta": {"a": "x" * 8192}}, ValueError, "at most 8192 bytes"),
    ],
)
def test_a_refused_enqueue_changes_nothing_and_the_store_keeps_working(
    make_queue: MakeQueue,
    make_store: StoreFactory,
    store_kind: str,
    options: dict[str, Any],
    error: type[Exception],
    match: str,
) -> None:
    queue = make_queue(nothing)
    kept = queue.enqueue("kept", key="k")
    before = snapshot(queue)

    with pytest.raises(error, match=match):
        queue.enqueue("refused", **options)
    with pytest.raises(error, match=match):
        queue.enqueue_many(["a", "b"], **options)

    assert snapshot(queue) == before
    queue.save()
    queue.close()
    again = reopened(store_kind, make_store)
    if again is not None:
        with again:
            assert snapshot(again) == before
            assert again.get(kept) is not None


def test_the_largest_and_smallest_priorities_are_kept_exactly(
    make_queue: MakeQueue, make_store: StoreFactory, store_kind: str
) -> None:
    queue = make_queue(nothing)
    high = queue.enqueue("high", priority=2**63 - 1)
    low = queue.enqueue("low", priority=-(2**63))

    def check(queue: jobq.JobQueue[Any]) -> None:
        for job, priority in ((high, 2**63 - 1), (low, -(2**63))):
            record = queue.get(job)
            assert record is not None
            assert record.priority == priority

    check(queue)
    queue.close()
    again = reopened(store_kind, make_store)
    if again is not None:
        with again:
            check(again)


@pytest.mark.parametrize(
    "payload",
    [
        f"file {SURROGATE}.txt",
        {"name": "a\x00b", "ctl": "\x1b[31m\x07\r\n", "emoji": "\U0001f600"},
        ["\ud800", "\udfff", "x" * 10_000],
    ],
)
def test_odd_text_in_a_payload_is_kept_exactly_through_a_restart(
    make_queue: MakeQueue, make_store: StoreFactory, store_kind: str, payload: Any
) -> None:
    queue = make_queue(nothing)
    job = queue.enqueue(payload)
    queue.close()

    again = reopened(store_kind, make_store)
    if again is None:
        return
    with again:
        record = again.get(job)
        assert record is not None
        assert record.payload == payload


def test_the_json_store_stays_whole_after_a_refused_key(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "jobs.json"
    queue = jobq.JobQueue(nothing, store=path)
    with pytest.raises(ValueError, match="key"):
        queue.enqueue("x", key=SURROGATE)
    queue.enqueue("y")
    queue.save()
    queue.close()  # neither raises: the journal holds only whole records

    with jobq.JobQueue(nothing, store=path) as again:
        assert pending_payloads(again) == ["y"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# -- 2. the text of any failure is recorded ---------------------------------------


def undecodable_name(job: Job[Any]) -> None:
    raise ValueError(f"bad name {SURROGATE} and a NUL \x00 here")


#: An exception class whose name is not ASCII (a lone surrogate cannot be
#: in a class name: Python refuses it).
OddError = type("Odd\u00e9Error", (Exception,), {})


def odd_class(job: Job[Any]) -> None:
    raise OddError(f"{SURROGATE}")


@pytest.mark.parametrize("handler", [undecodable_name, odd_class])
def test_a_failure_whose_text_cannot_be_encoded_is_recorded_escaped(
    make_queue: MakeQueue, make_store: StoreFactory, store_kind: str, handler: Any
) -> None:
    queue = make_queue(handler, max_attempts=1)
    job = queue.enqueue("x")

    assert queue.run_pending() == 1

    def check(queue: jobq.JobQueue[Any]) -> None:
        record = queue.get(job)
        assert record is not None
        assert record.state is JobState.DEAD
        (error,) = record.errors
        assert error.type == type_name(handler)
        assert "\\udcff" in error.message
        assert "\\udcff" in error.traceback
        assert "ProcessDied" not in (record.last_error or "")

    check(queue)
    queue.close()
    again = reopened(store_kind, make_store, handler)
    if again is not None:
        with again:
            check(again)


def type_name(handler: Any) -> str:
    if handler is undecodable_name:
        return "ValueError"
    return f"{OddError.__module__}.{OddError.__qualname__}"


def test_a_nul_in_an_error_message_is_recorded_as_its_escape(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(undecodable_name, max_attempts=1)
    job = queue.enqueue("x")
    queue.run_pending()

    record = queue.get(job)
    assert record is not None
    assert "a NUL \\x00 here" in record.errors[0].message
    assert "\x00" not in (record.last_error or "")


# -- 5. a duplicate never counts against max_pending ------------------------------


def test_a_duplicate_key_is_returned_even_when_the_queue_is_full(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(nothing, max_pending=1)
    first = queue.enqueue("a", key="k")

    again = queue.enqueue("a", key="k")

    assert again == jobq.Enqueued(first.id, True)
    assert queue.enqueue_many(["b", "c"], key="k") == [again, again]
    with pytest.raises(jobq.QueueFull):
        queue.enqueue("d", key="other")
    assert queue.stats().pending == 1


def test_a_batch_of_one_new_key_counts_once_against_max_pending(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(nothing, max_pending=1)

    added = queue.enqueue_many(["a", "b", "c"], key="same")

    assert [e.duplicate for e in added] == [False, True, True]
    assert queue.stats().pending == 1


def test_queue_full_inside_a_callers_transaction_leaves_it_usable(
    make_queue: MakeQueue, store_kind: str
) -> None:
    if store_kind != "postgres":
        pytest.skip("connection= is the PostgreSQL store's")
    import psycopg

    queue = make_queue(nothing, max_pending=1)
    queue.enqueue("a")
    with psycopg.connect(queue.store.conninfo) as conn:  # type: ignore[attr-defined]
        conn.execute("SELECT 1")
        with pytest.raises(jobq.QueueFull):
            queue.enqueue("b", connection=conn)
        assert conn.execute("SELECT 2").fetchone() == (2,)  # not aborted
        conn.commit()
    assert queue.stats().pending == 1


# -- 6. payload keys that JSON would merge -----------------------------------------


@pytest.mark.parametrize(
    ("payload", "shown"),
    [
        ({True: 1, "true": 2}, "True and 'true'"),
        ({1: "a", "1": "b"}, "1 and '1'"),
        ({"outer": [{None: 1, "null": 2}]}, "None and 'null'"),
        ({1.5: 1, "1.5": 2}, "1.5 and '1.5'"),
    ],
)
def test_payload_keys_that_json_would_merge_are_refused(
    make_queue: MakeQueue, payload: Any, shown: str
) -> None:
    queue = make_queue(nothing)

    with pytest.raises(TypeError, match=f"keys {shown}"):
        queue.enqueue(payload)

    assert queue.stats().pending == 0


def test_distinct_non_string_keys_are_still_accepted(make_queue: MakeQueue) -> None:
    queue = make_queue(nothing)

    job = queue.enqueue({1: "a", 2.5: "b", None: "c", False: "d"})

    record = queue.get(job)
    assert record is not None
    assert record.payload == {"1": "a", "2.5": "b", "null": "c", "false": "d"}


# -- 7. a clock that returns no time -----------------------------------------------


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "soon", None])
def test_a_clock_that_returns_no_finite_time_is_refused_at_enqueue(
    make_queue: MakeQueue, make_store: StoreFactory, store_kind: str, value: Any
) -> None:
    clock = Clock()
    queue = make_queue(nothing, clock=clock)
    queue.enqueue("kept")
    clock.now = value

    with pytest.raises(ValueError, match="clock returned"):
        queue.enqueue("refused")

    clock.now = T0
    assert queue.stats().pending == 1
    queue.close()
    again = reopened(store_kind, make_store, clock=Clock())
    if again is not None:
        with again:
            assert pending_payloads(again) == ["kept"]


# -- 11. ids and limits beyond what a store holds ----------------------------------


@pytest.mark.parametrize("job_id", [10**30, 2**63, 0, -1])
def test_an_id_no_store_can_hold_is_no_such_job(
    make_queue: MakeQueue, job_id: int
) -> None:
    queue = make_queue(nothing)
    queue.enqueue("x")

    assert queue.get(job_id) is None
    assert queue.retry_dead(job_id) is False
    assert queue.delete_dead(job_id) is False
    assert queue.cancel(job_id) is False
    assert queue.stats().pending == 1


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"max_attempts": 2**63}, "max_attempts must be at most"),
        ({"max_attempts": 0}, "max_attempts must be at least 1"),
        ({"dead_letter_limit": 2**64}, "dead_letter_limit must be at most"),
        ({"max_pending": 2**64}, "max_pending must be at most"),
        ({"max_payload_bytes": 0}, "max_payload_bytes must be at least 1"),
    ],
)
def test_limits_are_checked_when_the_queue_is_built(
    options: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        jobq.JobQueue(nothing, **options)


def test_a_tasks_limits_name_the_right_argument() -> None:
    queue = jobq.JobQueue()

    with pytest.raises(ValueError, match="max_attempts must be at most"):
        queue.task(name="t", max_attempts=2**40)(nothing)
    with pytest.raises(ValueError, match="priority must be at most"):
        queue.task(name="t", priority=2**63)(nothing)
    task = queue.task(name="t")(nothing)
    with pytest.raises(ValueError, match="priority must be at least"):
        task.using(priority=-(2**64))
    with pytest.raises(ValueError, match="key must not contain NUL"):
        task.using(key="\x00")


# -- 12. clock steps, as the README states them -----------------------------------


class FailOnce:
    def __init__(self) -> None:
        self.calls: list[Any] = []

    def __call__(self, job: Job[Any]) -> None:
        self.calls.append(job.payload)
        if job.attempt == 1 and job.payload == "retried":
            raise ValueError("first try")


def test_a_clock_stepped_back_delays_only_the_jobs_not_yet_due(
    make_queue: MakeQueue,
) -> None:
    clock = Clock()
    handler = FailOnce()
    queue = make_queue(handler, clock=clock, base_delay=0.3, jitter=False)
    queue.enqueue("retried")
    assert queue.run_pending() == 1  # failed: its retry is due at T0 + 0.3
    queue.enqueue("due")

    clock.advance(-3600)
    assert queue.run_pending() == 1  # the job that was due still runs
    clock.advance(3600)
    assert queue.run_pending() == 0  # the retry waits the hour the clock lost
    clock.advance(0.3)

    assert queue.run_pending() == 1
    assert handler.calls == ["retried", "due", "retried"]


def test_a_clock_stepped_forward_makes_delayed_jobs_due_at_once(
    make_queue: MakeQueue,
) -> None:
    clock = Clock()
    handler = FailOnce()
    queue = make_queue(handler, clock=clock)
    queue.enqueue("later", delay=3600)

    clock.advance(3600)

    assert queue.run_pending() == 1
    assert handler.calls == ["later"]
