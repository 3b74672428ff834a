"""What the queue does before any store sees a job, on every store; and time
moved by freezegun.

What a store must do (success, retries, dead letters, keys, order, claims
fenced by tokens, ...) is ``jobq.testing.StoreContractTests``, which every
store runs in ``test_store_contract.py``. Here: the queue's own argument
checks (bad input fails at the call and changes nothing), and tests that move
time with freezegun (which ``jobq.testing`` does not need).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from typing import Any

import pytest
from freezegun import freeze_time

import jobq
from jobq.testing import T0, Clock
from jobq.testing.contract import Recorder, succeed

MakeQueue = Callable[..., jobq.JobQueue[Any]]


# -- due times ---------------------------------------------------------------------


def test_a_past_due_time_is_kept_so_overdue_jobs_run_earliest_due_first(
    make_queue: MakeQueue, clock: Clock
) -> None:
    handler = Recorder()
    queue = make_queue(handler, clock=clock)
    now = clock()
    added = {
        late: queue.enqueue(f"{late} s late", at=now - late) for late in (10, 30, 20)
    }

    for late, job in added.items():
        record = queue.get(job)
        assert record is not None
        assert record.run_at == pytest.approx(now - late)
    assert queue.run_pending() == 3
    assert handler.payloads == ["30 s late", "20 s late", "10 s late"]


# -- time moved by freezegun --------------------------------------------------------


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


def test_enqueue_many_with_a_bad_payload_adds_nothing(make_queue: MakeQueue) -> None:
    queue = make_queue(succeed)
    queue.enqueue("before")
    before = queue.stats()

    with pytest.raises(TypeError):
        queue.enqueue_many([{"n": 1}, {"n": object()}, {"n": 3}])

    assert queue.stats() == before
    assert queue.run_pending() == 1


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
