"""The extension points: middleware around every attempt, events after every
recorded change, the named-task registry, and what a store must be.

Middleware and events run on every store (the ``make_queue`` fixture); time
comes from an injected clock, so durations and waits are exact.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from collections.abc import Callable
from typing import Any

import pytest

import jobq
import jobq._worker.runner
import jobq.queue
from jobq import Event, EventKind, Fatal, Job, JobState
from jobq.stores import MemoryStore, store_from
from jobq.testing import T0, Clock

MakeQueue = Callable[..., jobq.JobQueue[Any]]


def succeed(job: Job[Any]) -> str:
    return f"done {job.payload}"


# -- middleware -----------------------------------------------------------------------


class Layer:
    """A middleware that notes when it enters and leaves."""

    def __init__(self, name: str, calls: list[str]) -> None:
        self.name = name
        self.calls = calls

    def __call__(self, job: Job[Any], call_next: Callable[[], object]) -> object:
        self.calls.append(f"{self.name} in")
        try:
            return call_next()
        finally:
            self.calls.append(f"{self.name} out")


def test_middleware_wraps_each_attempt_the_first_outermost(
    make_queue: MakeQueue,
) -> None:
    calls: list[str] = []

    def handler(job: Job[Any]) -> None:
        calls.append("handler")

    queue = make_queue(
        handler, middleware=[Layer("outer", calls), Layer("inner", calls)]
    )
    queue.enqueue("x")
    queue.run_pending()

    assert calls == ["outer in", "inner in", "handler", "inner out", "outer out"]


def test_middleware_sees_the_job_of_plain_jobs_and_named_tasks(
    make_queue: MakeQueue,
) -> None:
    seen: list[Job[Any]] = []

    def note(job: Job[Any], call_next: Callable[[], object]) -> object:
        seen.append(job)
        return call_next()

    queue = make_queue(succeed, middleware=[note])
    add = queue.task(name="add")(lambda a, b: a + b)
    plain = queue.enqueue({"n": 1}, key="k")
    named = add.enqueue(2, b=3)
    queue.run_pending()

    assert seen == [
        Job(plain.id, {"n": 1}, 1, "k", None),
        Job(named.id, {"args": [2], "kwargs": {"b": 3}}, 1, None, "add"),
    ]


def test_what_a_middleware_returns_is_the_result(make_queue: MakeQueue) -> None:
    def replace(job: Job[Any], call_next: Callable[[], object]) -> object:
        return {"wrapped": call_next()}

    queue = make_queue(succeed, middleware=[replace], keep_completed=60)
    job = queue.enqueue(7)
    queue.run_pending()

    record = queue.get(job)
    assert record is not None
    assert record.result == {"wrapped": "done 7"}


def test_a_handlers_exception_passes_through_middleware(make_queue: MakeQueue) -> None:
    caught: list[BaseException] = []

    def watch(job: Job[Any], call_next: Callable[[], object]) -> object:
        try:
            return call_next()
        except Exception as exc:
            caught.append(exc)
            raise

    def fail(job: Job[Any]) -> None:
        raise Fatal("no such address")

    queue = make_queue(fail, middleware=[watch])
    job = queue.enqueue("x")
    queue.run_pending()

    assert [type(e) for e in caught] == [Fatal]
    record = queue.get(job)
    assert record is not None
    assert record.state is JobState.DEAD
    assert record.last_error == "jobq.errors.Fatal: no such address"


def test_a_middleware_that_raises_before_call_next_is_a_failed_attempt(
    make_queue: MakeQueue, clock: Clock
) -> None:
    ran: list[Any] = []

    def refuse(job: Job[Any], call_next: Callable[[], object]) -> object:
        raise RuntimeError("no database session")

    queue = make_queue(ran.append, middleware=[refuse], clock=clock)
    job = queue.enqueue("x")
    queue.run_pending()

    record = queue.get(job)
    assert ran == []
    assert record is not None
    assert (record.state, record.attempts) == (JobState.PENDING, 1)
    assert record.last_error == "RuntimeError: no database session"


def test_a_middleware_may_skip_the_handler(make_queue: MakeQueue) -> None:
    ran: list[Any] = []

    def skip(job: Job[Any], call_next: Callable[[], object]) -> object:
        return "skipped"

    queue = make_queue(ran.append, middleware=[skip], keep_completed=60)
    job = queue.enqueue("x")
    queue.run_pending()

    record = queue.get(job)
    assert ran == []
    assert record is not None
    assert (record.state, record.result) == (JobState.COMPLETED, "skipped")


def test_middleware_runs_in_the_worker_thread(make_queue: MakeQueue) -> None:
    import threading

    threads: list[str] = []

    def where(job: Job[Any], call_next: Callable[[], object]) -> object:
        threads.append(threading.current_thread().name)
        return call_next()

    queue = make_queue(succeed, middleware=[where]).start(workers=1)
    queue.enqueue("x")
    assert queue.join(timeout=10)

    assert threads == ["jobq-worker-1"]


@pytest.mark.parametrize("middleware", [[1], "not a list", lambda job, nxt: None])
def test_middleware_that_is_not_a_list_of_callables_is_refused(
    middleware: Any,
) -> None:
    with pytest.raises(TypeError, match="middleware"):
        jobq.JobQueue(succeed, middleware=middleware)


# -- events ---------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def kinds(self) -> list[EventKind]:
        return [event.kind for event in self.events]


class Timed:
    """A handler that takes ``seconds`` of the fake clock, then fails the
    payloads that say so."""

    def __init__(self, clock: Clock, seconds: float) -> None:
        self.clock = clock
        self.seconds = seconds

    def __call__(self, job: Job[Any]) -> str:
        self.clock.advance(self.seconds)
        if job.payload == "fatal":
            raise Fatal("gone")
        if job.payload == "retry" and job.attempt == 1:
            raise ValueError("once")
        return "ok"


def test_every_kind_of_event_with_its_fields(
    make_queue: MakeQueue, clock: Clock
) -> None:
    events = Recorder()
    queue = make_queue(Timed(clock, 2.0), clock=clock, base_delay=10, jitter=False)
    queue.subscribe(events)

    ok = queue.enqueue("ok", delay=5)
    retried = queue.enqueue("retry")
    dead = queue.enqueue("fatal")
    cancelled = queue.enqueue("never", delay=100)
    clock.advance(7)
    # Each attempt takes 2 s: "retry" runs from T0 + 7, "fatal" from T0 + 9,
    # and "ok" (due at T0 + 5, the latest) from T0 + 11.
    queue.run_pending()
    assert queue.cancel(cancelled)
    assert queue.retry_dead(dead)
    assert queue.run_pending() == 1  # the revived job dies again
    assert queue.delete_dead(dead)

    by_job: dict[int, list[Event]] = {}
    for event in events.events:
        by_job.setdefault(event.job_id, []).append(event)
    kinds = {job: [e.kind for e in found] for job, found in by_job.items()}
    assert kinds[ok.id] == ["enqueued", "started", "succeeded"]
    assert kinds[retried.id] == ["enqueued", "started", "retrying"]
    assert kinds[dead.id] == [
        "enqueued", "started", "dead", "revived", "started", "dead", "deleted",
    ]  # fmt: skip
    assert kinds[cancelled.id] == ["enqueued", "cancelled"]

    enqueued, started, succeeded = by_job[ok.id]
    assert (enqueued.at, enqueued.attempt, enqueued.task) == (T0, 0, None)
    assert (started.at, started.wait) == (T0 + 11, 6.0)
    assert started.attempt == 1
    assert started.job == Job(ok.id, "ok", 1, None, None)
    assert succeeded.duration == pytest.approx(2.0)
    assert succeeded.wait == 6.0  # the attempt's wait, again at its end
    assert succeeded.result == "ok"
    assert succeeded.error is None
    retrying = by_job[retried.id][-1]
    assert retrying.duration == pytest.approx(2.0)
    assert retrying.wait == by_job[retried.id][1].wait == 7.0
    assert retrying.error is not None
    assert (retrying.error.type, retrying.error.message) == ("ValueError", "once")
    died = by_job[dead.id][2]
    assert died.wait == 9.0
    assert died.error is not None
    assert died.error.type == "jobq.errors.Fatal"
    assert by_job[dead.id][4].attempt == 1  # the revived job starts over


def test_events_name_the_task_of_a_named_task(make_queue: MakeQueue) -> None:
    events = Recorder()
    queue = make_queue()
    queue.subscribe(events)
    noop = queue.task(name="jobs.noop")(lambda: None)
    job = noop.enqueue()
    queue.run_pending()

    assert [(e.kind, e.task) for e in events.events if e.job_id == job.id] == [
        ("enqueued", "jobs.noop"),
        ("started", "jobs.noop"),
        ("succeeded", "jobs.noop"),
    ]


def test_a_duplicate_key_publishes_no_enqueued_event(make_queue: MakeQueue) -> None:
    events = Recorder()
    queue = make_queue(succeed)
    queue.subscribe(events)
    queue.enqueue("a", key="k")
    queue.enqueue("a", key="k")

    assert events.kinds() == ["enqueued"]


def test_a_refused_change_publishes_nothing(make_queue: MakeQueue) -> None:
    events = Recorder()
    queue = make_queue(succeed)
    queue.subscribe(events)
    job = queue.enqueue("a")
    events.events.clear()

    assert not queue.retry_dead(job)
    assert not queue.delete_dead(job)
    assert not queue.cancel(10**6)
    assert events.events == []


def test_an_event_comes_after_the_store_recorded_the_change(
    make_queue: MakeQueue,
) -> None:
    seen: list[tuple[EventKind, JobState | None]] = []
    queue = make_queue(succeed, keep_completed=60)

    def look(event: Event) -> None:
        record = queue.get(event.job_id)
        seen.append((event.kind, None if record is None else record.state))

    queue.subscribe(look)
    queue.enqueue("x")
    queue.run_pending()

    assert seen == [
        (EventKind.ENQUEUED, JobState.PENDING),
        (EventKind.STARTED, JobState.RUNNING),
        (EventKind.SUCCEEDED, JobState.COMPLETED),
    ]


def test_unsubscribing_stops_the_events(make_queue: MakeQueue) -> None:
    first, second = Recorder(), Recorder()
    queue = make_queue(succeed)
    unsubscribe = queue.subscribe(first)
    queue.subscribe(second)
    queue.enqueue("a")

    unsubscribe()
    unsubscribe()  # idempotent
    queue.enqueue("b")

    assert first.kinds() == ["enqueued"]
    assert second.kinds() == ["enqueued", "enqueued"]


def test_a_subscriber_that_raises_is_logged_and_changes_nothing(
    make_queue: MakeQueue, caplog: pytest.LogCaptureFixture
) -> None:
    after = Recorder()

    def broken(event: Event) -> None:
        raise RuntimeError("metrics are down")

    queue = make_queue(succeed, keep_completed=60)
    queue.subscribe(broken)
    queue.subscribe(after)
    with caplog.at_level(logging.ERROR, "jobq"):
        job = queue.enqueue("x")
        queue.run_pending()

    record = queue.get(job)
    assert record is not None
    assert record.state is JobState.COMPLETED
    assert after.kinds() == ["enqueued", "started", "succeeded"]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 3
    assert "an event subscriber failed" in errors[0].getMessage()


def test_a_subscriber_must_be_callable() -> None:
    with pytest.raises(TypeError, match="subscriber must be callable"):
        jobq.JobQueue(succeed).subscribe("print")  # type: ignore[arg-type]


def test_a_subscriber_with_kinds_receives_only_those(
    make_queue: MakeQueue, clock: Clock
) -> None:
    every, failures, revivals = Recorder(), Recorder(), Recorder()
    queue = make_queue(Timed(clock, 1.0), clock=clock, max_attempts=1)
    queue.subscribe(every)
    queue.subscribe(failures, kinds=[EventKind.RETRYING, "dead"])
    queue.subscribe(revivals, kinds=EventKind.REVIVED)  # one kind alone
    queue.enqueue("ok")
    dead = queue.enqueue("fatal")
    queue.run_pending()
    assert queue.retry_dead(dead)

    assert every.kinds() == [
        "enqueued", "enqueued", "started", "succeeded", "started", "dead", "revived",
    ]  # fmt: skip
    assert failures.kinds() == ["dead"]
    assert revivals.kinds() == ["revived"]
    assert failures.events[0] == every.events[5]  # the same event, shared


def test_events_nobody_wants_are_not_built(
    make_queue: MakeQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[EventKind] = []
    real = jobq._worker.runner.new_event

    def counted(kind: EventKind, *args: Any) -> Event:
        built.append(kind)
        return real(kind, *args)

    monkeypatch.setattr(jobq.queue, "new_event", counted)
    monkeypatch.setattr(jobq._worker.runner, "new_event", counted)
    dead = Recorder()
    queue = make_queue(succeed)
    queue.subscribe(dead, kinds=["dead"])
    queue.enqueue("a")
    queue.run_pending()

    assert built == []
    assert dead.events == []


@pytest.mark.parametrize("kinds", [["finished"], [], [EventKind.DEAD, 3]])
def test_unknown_kinds_are_refused_at_subscribe(kinds: list[Any]) -> None:
    queue = jobq.JobQueue(succeed)
    with pytest.raises(ValueError, match="kinds= takes event kinds"):
        queue.subscribe(print, kinds=kinds)
    queue.enqueue("a")  # nothing subscribed: the refused call left nothing


def test_an_event_is_a_frozen_dataclass_equal_to_one_built_by_hand(
    make_queue: MakeQueue, clock: Clock
) -> None:
    events = Recorder()
    queue = make_queue(succeed, clock=clock)
    queue.subscribe(events)
    job = queue.enqueue("a")
    (enqueued,) = events.events

    assert type(enqueued) is Event
    assert enqueued == Event(EventKind.ENQUEUED, job.id, None, 0, T0)
    assert hash(enqueued) == hash(Event(EventKind.ENQUEUED, job.id, None, 0, T0))
    assert dataclasses.replace(enqueued, attempt=2).attempt == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        enqueued.attempt = 1  # type: ignore[misc]
    assert repr(enqueued).startswith("Event(kind=<EventKind.ENQUEUED: 'enqueued'>")


def test_events_come_from_worker_threads_too(make_queue: MakeQueue) -> None:
    events = Recorder()
    queue = make_queue(succeed).start(workers=2)
    queue.subscribe(events)
    for n in range(10):
        queue.enqueue(n)
    assert queue.join(timeout=10)
    queue.stop()

    assert events.kinds().count(EventKind.SUCCEEDED) == 10
    assert events.kinds().count(EventKind.STARTED) == 10


def test_an_attempt_begun_before_the_subscription_ends_with_no_times() -> None:
    """Nobody subscribed when the attempt began, so its start was never read:
    its end event says so (``None``), rather than a duration since 1970."""
    began, go = threading.Event(), threading.Event()

    def fail_later(job: Job[Any]) -> None:
        began.set()
        go.wait(10)
        raise ValueError("late")

    events = Recorder()
    queue: jobq.JobQueue[Any] = jobq.JobQueue(fail_later, max_attempts=1)
    queue.enqueue("x")
    runner = threading.Thread(target=queue.run_pending)
    runner.start()
    assert began.wait(10)
    queue.subscribe(events)
    go.set()
    runner.join(10)
    queue.close()

    (dead,) = [e for e in events.events if e.kind == EventKind.DEAD]
    assert (dead.duration, dead.wait) == (None, None)
    assert dead.error is not None
    assert dead.error.message == "late"


# -- the registry of named tasks ------------------------------------------------------


def test_queue_tasks_is_a_read_only_mapping_of_the_registered_tasks() -> None:
    queue = jobq.JobQueue()
    noop = queue.task(name="jobs.noop")(lambda: None)

    assert dict(queue.tasks) == {"jobs.noop": noop}
    with pytest.raises(TypeError):
        queue.tasks["other"] = noop  # type: ignore[index]


def test_task_name_is_the_name_a_task_is_stored_by() -> None:
    assert jobq.task_name(succeed) == f"{__name__}.succeed"
    assert jobq.task_name(succeed, "custom") == "custom"
    with pytest.raises(ValueError, match="lambda"):
        jobq.task_name(lambda: None)


def test_resolve_task_runs_task_names_nothing_registered() -> None:
    ran: list[Job[Any]] = []

    def resolve(name: str) -> Callable[[Job[Any]], Any] | None:
        return ran.append if name.startswith("known.") else None

    queue = jobq.JobQueue(resolve_task=resolve, max_attempts=1)
    jobs = queue.add(queue.prepare([{"args": [], "kwargs": {}}] * 2, task="known.x"))
    unknown = queue.add(queue.prepare([{"args": [], "kwargs": {}}], task="other.y"))
    queue.run_pending()

    assert [job.id for job in ran] == [job.id for job in jobs]
    record = queue.get(unknown[0])
    assert record is not None
    assert (record.state, (record.last_error or "")[:22]) == (
        "dead",
        "jobq.tasks.UnknownTask",
    )


def test_prepare_checks_everything_and_writes_nothing() -> None:
    queue = jobq.JobQueue(succeed)

    with pytest.raises(TypeError, match="JSON"):
        queue.prepare([object()])
    prepared = queue.prepare(["a", "b"], key="k", priority=3)

    assert queue.stats().pending == 0
    assert [(job.key, job.priority) for job in prepared] == [("k", 3), ("k", 3)]
    added = queue.add(prepared)
    assert [e.duplicate for e in added] == [False, True]


@pytest.mark.parametrize("name", ["", " padded", "tab\tin", "nul\x00", "\ud800", 7])
def test_prepare_refuses_a_task_name_no_task_could_have(name: Any) -> None:
    """As ``@queue.task(name=...)`` does: an empty name would pass for the
    plain jobs in the stores' figures, a surrogate would not encode."""
    queue = jobq.JobQueue(succeed)

    with pytest.raises(
        TypeError if isinstance(name, int) else ValueError, match="name"
    ):
        queue.prepare(["a"], task=name)
    assert queue.stats().pending == 0


# -- the store contract ----------------------------------------------------------------


class HalfAStore:
    """Has some of a store's methods, not all."""

    lease_seconds = None
    claim_batch = 1

    def add(self, jobs: Any, now: float) -> list[Any]:
        return []

    def claim(self, now: float) -> None:
        return None


def test_a_store_object_missing_methods_is_refused_naming_them() -> None:
    with pytest.raises(TypeError) as refused:
        jobq.JobQueue(succeed, store=HalfAStore())

    message = str(refused.value)
    assert "HalfAStore is not a complete store" in message
    for missing in ("claim_many", "finish_many", "fail_many", "release", "open"):
        assert missing in message
    assert not re.search(r"\badd\b", message)  # it has add


def test_something_that_is_no_store_at_all_gets_the_general_message() -> None:
    with pytest.raises(TypeError, match="store must be None, a path"):
        store_from(42)


@pytest.mark.parametrize(
    ("kind", "shared", "keeps", "transactional"),
    [
        ("memory", False, False, False),
        ("json", False, True, False),
        ("sqlite", True, True, False),
        ("postgres", True, True, True),
    ],
)
def test_each_store_declares_what_it_can_do(
    kind: str,
    shared: bool,
    keeps: bool,
    transactional: bool,
    tmp_path: Any,
    request: pytest.FixtureRequest,
) -> None:
    if kind == "memory":
        store: Any = MemoryStore()
    elif kind == "json":
        store = store_from(str(tmp_path / "jobs.json"))
    elif kind == "sqlite":
        store = store_from(f"sqlite:///{tmp_path / 'jobs.db'}")
    else:
        request.getfixturevalue("postgres_schema")  # skips without a server
        store = store_from("postgresql://postgres@127.0.0.1/test")
    declared = (
        store.shared_between_processes,
        store.keeps_results,
        store.transactional_add,
    )
    assert declared == (shared, keeps, transactional)
