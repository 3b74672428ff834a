"""Limits per key through the queue, on every store: ``queue.limit``,
``limits=`` on jobs and tasks, held jobs, no head-of-line blocking, rates,
families, and what ``queue.limits()`` shows.

How a store keeps them is in ``jobq.testing.contract.limits``; three
processes sharing one store are in ``test_key_limits_processes.py``.
Handlers that must overlap block on Events; ``run_pending`` claims in the
test's own thread where a claim must happen at a known moment.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import jobq
from jobq import JobState
from jobq.stores import JsonFileStore

MakeQueue = Callable[..., jobq.JobQueue[Any]]
WAIT = 10.0


class Running:
    """How many handlers run at once, at most, by the name of their limit."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.now: dict[str, int] = {}
        self.peak: dict[str, int] = {}

    def enter(self, name: str) -> None:
        with self.lock:
            self.now[name] = self.now.get(name, 0) + 1
            self.peak[name] = max(self.peak.get(name, 0), self.now[name])
            self.lock.notify_all()

    def leave(self, name: str) -> None:
        with self.lock:
            self.now[name] -= 1

    def overlap(self, name: str, count: int, timeout: float) -> None:
        """Wait until ``count`` handlers of ``name`` have run at once: so a
        slow machine cannot finish one before the next starts."""
        with self.lock:
            self.lock.wait_for(lambda: self.peak[name] >= count, timeout)


# -- declaring ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "options", "error"),
    [
        ("", {"concurrency": 1}, ValueError),
        ("x" * 201, {"concurrency": 1}, ValueError),
        ("a\x00b", {"concurrency": 1}, ValueError),
        (3, {"concurrency": 1}, TypeError),
        ("a*", {"concurrency": 1}, ValueError),
        ("a:*:b", {"concurrency": 1}, ValueError),
        (":*", {"concurrency": 1}, ValueError),
        ("smtp", {}, ValueError),
        ("smtp", {"concurrency": 0}, ValueError),
        ("smtp", {"concurrency": True}, ValueError),
        ("smtp", {"rate": "10"}, ValueError),
        ("smtp", {"rate": "0/s"}, ValueError),
        ("smtp", {"rate": "10/d"}, ValueError),
        ("smtp", {"rate": 10}, TypeError),
        ("smtp", {"rate": "10/s", "burst": 0}, ValueError),
        ("smtp", {"concurrency": 2, "burst": 3}, ValueError),
    ],
)
def test_a_bad_declaration_is_refused_and_declares_nothing(
    make_queue: MakeQueue, name: Any, options: dict[str, Any], error: type[Exception]
) -> None:
    queue = make_queue(lambda job: None)
    with pytest.raises(error):
        queue.limit(name, **options)
    assert queue.limits() == []


def test_a_job_under_an_undeclared_limit_is_refused_and_nothing_added(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(lambda job: None)
    queue.limit("account:*", concurrency=1)

    @queue.task(name="sync", limits=["smtp"])
    def sync() -> None: ...

    for bad in (["smtp"], ["account:"], ["account:*"], "smtp", [3]):
        with pytest.raises((ValueError, TypeError)):
            queue.enqueue("x", limits=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'smtp' is not declared"):
        sync.enqueue()
    assert queue.stats().pending == 0


def test_a_task_declared_without_limits_takes_a_jobs_own_with_using(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(lambda job: None)
    queue.limit("account:*", concurrency=1)

    @queue.task(name="sync")
    def sync(account_id: int) -> None: ...

    job = sync.using(limits=["account:42"]).enqueue(42).id
    record = queue.get(job)
    assert record is not None
    assert record.limits == ("account:42",)


def test_limits_reads_what_the_store_holds(make_queue: MakeQueue) -> None:
    queue = make_queue(lambda job: None)
    queue.limit("smtp", concurrency=2, rate="10/s")
    queue.limit("account:*", concurrency=1)
    queue.limit("api", rate="100/m", burst=5)

    assert queue.limits() == [
        jobq.LimitUsage("account:*", 1, None, 1, 0, 0),
        jobq.LimitUsage("api", None, "100/m", 5, 0, 0),
        jobq.LimitUsage("smtp", 2, "10/s", 1, 0, 0),
    ]


def test_declaring_again_otherwise_warns_and_the_newest_holds(
    make_queue: MakeQueue, caplog: pytest.LogCaptureFixture
) -> None:
    queue = make_queue(lambda job: None)
    queue.limit("smtp", concurrency=2)
    queue.limits()  # opened: the store holds it
    with caplog.at_level(logging.WARNING, logger="jobq"):
        queue.limit("smtp", concurrency=5)
        queue.limit("smtp", concurrency=5)  # the same again: nothing to say
    warnings = [r for r in caplog.records if "limit 'smtp'" in r.getMessage()]
    assert len(warnings) == 1
    assert "concurrency=5" in warnings[0].getMessage()
    assert "concurrency=2" in warnings[0].getMessage()
    assert [usage.concurrency for usage in queue.limits()] == [5]


# -- holding and releasing ----------------------------------------------------------


def test_a_held_job_waits_pending_with_no_attempt_and_says_what_holds_it(
    make_queue: MakeQueue,
) -> None:
    release, started = threading.Event(), threading.Event()

    def handler(job: jobq.Job[Any]) -> None:
        if job.payload == "first":
            started.set()
            release.wait(WAIT)

    queue = make_queue(handler)
    queue.limit("one", concurrency=1)
    first = queue.enqueue("first", limits=["one"]).id
    second = queue.enqueue("second", limits=["one"]).id
    worker = threading.Thread(target=queue.run_pending, kwargs={"limit": 1})
    worker.start()
    try:
        assert started.wait(WAIT)
        assert queue.run_pending() == 0  # its claim holds "second" back

        record = queue.get(second)
        assert record is not None
        assert (record.state, record.attempts, record.held_by) == (
            JobState.PENDING,
            0,
            "one",
        )
        assert record.limits == ("one",)
        assert queue.stats().pending == 1
        assert queue.limits()[0].running == 1
        assert queue.limits()[0].waiting == 1
    finally:
        release.set()
        worker.join(WAIT)
    assert queue.run_pending() == 1  # the slot freed: it runs now
    assert queue.get(first) is None
    assert queue.get(second) is None


def test_concurrency_holds_across_the_workers(make_queue: MakeQueue) -> None:
    running = Running()

    def handler(job: jobq.Job[Any]) -> None:
        running.enter(job.payload)
        running.overlap(job.payload, 2 if job.payload == "smtp" else 3, 2.0)
        running.leave(job.payload)

    queue = make_queue(handler)
    queue.limit("smtp", concurrency=2)
    queue.enqueue_many(["smtp"] * 40, limits=["smtp"])
    queue.enqueue_many(["free"] * 40)
    queue.start(workers=6)
    assert queue.join(timeout=WAIT * 3)
    assert running.peak["smtp"] == 2
    assert running.peak["free"] > 2  # the others ran beside them


def test_jobs_under_no_limit_flow_past_a_thousand_held_ones(
    make_queue: MakeQueue,
) -> None:
    release = threading.Event()
    free_done = threading.Semaphore(0)

    def handler(job: jobq.Job[Any]) -> None:
        if job.payload == "slow":
            release.wait(WAIT)
        else:
            free_done.release()

    queue = make_queue(handler)
    queue.limit("slow", concurrency=1)
    queue.enqueue_many(["slow"] * 1000, limits=["slow"], priority=5)
    queue.enqueue_many(["free"] * 50)
    queue.start(workers=3)
    try:
        for _ in range(50):
            assert free_done.acquire(timeout=WAIT)
        usage = {u.name: u for u in queue.limits()}["slow"]
        assert usage.running == 1
        assert usage.waiting + usage.running + queue.stats().pending >= 1000
    finally:
        release.set()
    assert queue.join(timeout=WAIT * 6)


def test_each_key_of_a_family_is_limited_alone(make_queue: MakeQueue) -> None:
    started = {1: threading.Event(), 2: threading.Event()}
    release = threading.Event()
    running = Running()

    def handler(job: jobq.Job[Any]) -> None:
        account, n = job.payload
        running.enter(f"account:{account}")
        if n == 0:
            started[account].set()
            release.wait(WAIT)
        running.leave(f"account:{account}")

    queue = make_queue(handler)
    queue.limit("account:*", concurrency=1)
    for n in range(3):
        for account in (1, 2):
            queue.enqueue([account, n], limits=[f"account:{account}"])
    queue.start(workers=4)
    try:
        assert started[1].wait(WAIT)  # two keys: both run at once
        assert started[2].wait(WAIT)
    finally:
        release.set()
    assert queue.join(timeout=WAIT)
    assert running.peak == {"account:1": 1, "account:2": 1}


def test_a_rate_spaces_the_starts(make_queue: MakeQueue) -> None:
    """Read from the attempts' ``started_at`` (the claim's time, on the
    clock the rate counts by), not from the handlers: a busy machine may
    start a handler late and bring two handlers' first lines closer."""
    queue = make_queue(lambda job: None, keep_completed=60)
    queue.limit("api", rate="40/s")  # one every 25 ms
    ids = [e.id for e in queue.enqueue_many(list(range(8)), limits=["api"])]
    queue.start(workers=4)
    assert queue.join(timeout=WAIT)
    records = [queue.get(job_id) for job_id in ids]
    starts = sorted(r.started_at for r in records if r is not None and r.started_at)
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(starts) == 8
    assert min(gaps) >= 0.025 - 1e-6  # a start every 25 ms at most, the first at once


def test_a_job_under_two_limits_waits_for_both_and_keeps_its_order(
    make_queue: MakeQueue,
) -> None:
    ran: list[str] = []
    queue = make_queue(lambda job: ran.append(job.payload))
    queue.limit("a", concurrency=1)
    queue.limit("b", concurrency=1)
    queue.enqueue("low", limits=["a", "b"], priority=0)
    queue.enqueue("high", limits=["a", "b"], priority=9)
    queue.enqueue("b only", limits=["b"], priority=5)
    assert queue.run_pending() == 3
    assert ran == ["high", "b only", "low"]


def test_a_task_s_limits_and_a_job_s_add_up(make_queue: MakeQueue) -> None:
    queue = make_queue()
    queue.limit("smtp", concurrency=2)
    queue.limit("account:*", concurrency=1)

    @queue.task(name="mail", limits=["smtp"])
    def mail(to: str) -> None: ...

    job = mail.using(limits=["account:7"]).enqueue("a@example.com").id
    again = mail.using(limits=["smtp"]).enqueue("b@example.com").id

    record, other = queue.get(job), queue.get(again)
    assert record is not None
    assert other is not None
    assert record.limits == ("smtp", "account:7")
    assert other.limits == ("smtp",)


def test_a_held_job_can_be_cancelled(make_queue: MakeQueue) -> None:
    release, started = threading.Event(), threading.Event()

    def handler(job: jobq.Job[Any]) -> None:
        started.set()
        release.wait(WAIT)

    queue = make_queue(handler, keep_cancelled=60)
    queue.limit("one", concurrency=1)
    queue.enqueue("first", limits=["one"])
    held = queue.enqueue("second", limits=["one"]).id
    worker = threading.Thread(target=queue.run_pending, kwargs={"limit": 1})
    worker.start()
    try:
        assert started.wait(WAIT)
        assert queue.run_pending() == 0
        assert queue.cancel(held) is True
        record = queue.get(held)
        assert record is not None
        assert record.state is JobState.CANCELLED
        assert queue.limits()[0].waiting == 0
    finally:
        release.set()
        worker.join(WAIT)
    assert queue.run_pending() == 0


def test_a_retry_s_backoff_holds_no_slot(make_queue: MakeQueue) -> None:
    attempts: list[str] = []

    def handler(job: jobq.Job[Any]) -> None:
        attempts.append(job.payload)
        if job.payload == "flaky":
            raise jobq.Retry("later", after=3600)

    queue = make_queue(handler)
    queue.limit("one", concurrency=1)
    queue.enqueue("flaky", limits=["one"])
    queue.enqueue("next", limits=["one"])
    assert queue.run_pending() == 2  # the retry waits; the slot is free
    assert attempts == ["flaky", "next"]
    assert queue.limits()[0].running == 0


def test_a_json_file_another_owner_holds_opens_with_limits_declared(
    tmp_path: Path,
) -> None:
    """Declaring writes to the store; a JSON file has one owner, so another
    process's declarations are not written, and it still reads the file."""
    path = tmp_path / "jobs.json"
    owner: jobq.JobQueue[Any] = jobq.JobQueue(store=JsonFileStore(path))
    other: jobq.JobQueue[Any] = jobq.JobQueue(store=JsonFileStore(path))
    try:
        owner.limit("smtp", concurrency=2)
        owner.enqueue("x", limits=["smtp"])
        other.limit("smtp", concurrency=5)

        assert other.stats().pending == 1  # opened: reads the owner's file
        assert [u.concurrency for u in owner.limits()] == [2]
    finally:
        other.close()
        owner.close()
