"""Limits that keep a flood from taking the app down, and the slow-job warning.

How a store applies ``max_pending`` is in ``jobq.testing.StoreContractTests``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

import jobq

MakeQueue = Callable[..., jobq.JobQueue[Any]]
WAIT = 10.0


def test_queue_full_is_a_jobq_error() -> None:
    assert issubclass(jobq.QueueFull, jobq.JobqError)


def test_a_payload_beyond_max_payload_bytes_is_refused_and_nothing_added(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(lambda job: None, max_payload_bytes=100)
    queue.enqueue("x" * 50)

    with pytest.raises(ValueError, match="max_payload_bytes=100"):
        queue.enqueue("x" * 200)
    with pytest.raises(ValueError, match="max_payload_bytes"):
        queue.enqueue_many(["small", "x" * 200])

    assert queue.stats().pending == 1


def test_payloads_are_limited_to_one_mebibyte_by_default(make_queue: MakeQueue) -> None:
    queue = make_queue(lambda job: None)

    with pytest.raises(ValueError, match="max_payload_bytes"):
        queue.enqueue("x" * (1 << 20))


def test_max_payload_bytes_none_lifts_the_limit(make_queue: MakeQueue) -> None:
    queue = make_queue(lambda job: None, max_payload_bytes=None)

    queue.enqueue("x" * (1 << 20))

    assert queue.stats().pending == 1


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        ("max_pending", 0, ValueError),
        ("max_pending", "10", TypeError),
        ("max_payload_bytes", 0, ValueError),
        ("max_payload_bytes", 1.5, TypeError),
        ("warn_running_after", -1, ValueError),
    ],
)
def test_bad_limits_fail_at_construction(
    option: str, value: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match=option):
        jobq.JobQueue(lambda job: None, **{option: value})


class _Warnings(logging.Handler):
    """Collects the jobq logger's warnings and signals the first slow-job one."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        self.slow = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        self.messages.append(message)
        if "has been running for" in message:
            self.slow.set()


def test_a_handler_running_longer_than_warn_running_after_is_reported_once(
    make_queue: MakeQueue,
) -> None:
    release = threading.Event()
    started = threading.Event()

    def slow(job: jobq.Job[Any]) -> None:
        started.set()
        release.wait(WAIT)

    warnings = _Warnings()
    logger = logging.getLogger("jobq")
    logger.addHandler(warnings)
    try:
        queue = make_queue(slow, warn_running_after=0.05).start(workers=1)
        job = queue.enqueue("slow")
        assert started.wait(WAIT)
        assert warnings.slow.wait(WAIT)
        record = queue.get(job)
        assert record is not None
        assert record.state is jobq.JobState.RUNNING
    finally:
        release.set()
        logger.removeHandler(warnings)
    assert queue.join(timeout=WAIT)
    slow_warnings = [m for m in warnings.messages if "has been running for" in m]
    assert len(slow_warnings) == 1
    assert f"job {job.id} " in slow_warnings[0]
