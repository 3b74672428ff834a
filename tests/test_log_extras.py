"""Every log record about a job carries ``job_id``, ``task`` and ``attempt``
as attributes (``extra``), so JSON formatters show them as fields."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import jobq
from jobq.testing import Clock


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def captured() -> Any:
    handler = Captured()
    logger = logging.getLogger("jobq")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.setLevel(level)
    logger.removeHandler(handler)


def fields(record: logging.LogRecord) -> tuple[object, object, object]:
    return (
        getattr(record, "job_id", "missing"),
        getattr(record, "task", "missing"),
        getattr(record, "attempt", "missing"),
    )


def test_retry_and_death_records_carry_the_job_the_task_and_the_attempt(
    captured: Captured, clock: Clock
) -> None:
    queue: jobq.JobQueue[Any] = jobq.JobQueue(max_attempts=2, clock=clock)

    @queue.task(name="fails")
    def fails() -> None:
        raise ValueError("no")

    job = fails.enqueue()
    queue.run_pending()
    clock.advance(3600)
    queue.run_pending()

    about_jobs = [r for r in captured.records if "job" in r.getMessage()]
    assert [(r.levelname, fields(r)) for r in about_jobs] == [
        ("WARNING", (job.id, "fails", 1)),
        ("ERROR", (job.id, "fails", 2)),
    ]


def test_a_failing_subscriber_s_record_names_the_plain_job(captured: Captured) -> None:
    queue: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: None)

    def broken(event: jobq.Event) -> None:
        raise RuntimeError("bug")

    queue.subscribe(broken)
    job = queue.enqueue("x")
    queue.run_pending()

    failed = [r for r in captured.records if "subscriber failed" in r.getMessage()]
    assert [fields(r) for r in failed] == [
        (job.id, None, None),  # enqueued: no attempt
        (job.id, None, 1),  # started
        (job.id, None, 1),  # succeeded
    ]


def test_a_store_s_record_about_a_dropped_dead_job_carries_its_id(
    captured: Captured,
) -> None:
    queue: jobq.JobQueue[Any] = jobq.JobQueue(max_attempts=1, dead_letter_limit=1)

    @queue.task(name="fails")
    def fails() -> None:
        raise ValueError("no")

    first = fails.enqueue()
    fails.enqueue()
    queue.run_pending()

    dropped = [r for r in captured.records if "dropped dead job" in r.getMessage()]
    assert [fields(r) for r in dropped] == [(first.id, None, None)]
