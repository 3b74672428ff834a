"""jobq.contrib.django.tasks.JobqBackend: Django's Tasks framework on jobq.

The tasks are in ``djapp/dtasks.py``, written as Django's Tasks
documentation writes them; ``TASKS`` in the test project names the backend.
On Python 3.11 the framework is the ``django_tasks`` backport; on 3.12+ it
is Django's own ``django.tasks``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from signal import SIGINT
from typing import Any

import pytest
from django.core import checks, mail
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.test import override_settings
from django.utils import timezone
from limits_helpers import needs_limits
from sqlite_leases import expire_sqlite_claims

import jobq.contrib.django as contrib
from jobq.contrib.django import DjangoJobQueue, get_queue
from jobq.contrib.django.tasks import JobqBackend, JobqTask, ReturnValueNotJSON
from jobq.errors import ProcessDied
from jobq.events import Event, EventKind
from jobq.stores import MemoryStore, SqliteStore, Store
from jobq.types import JobState

try:
    from django.tasks import TaskResultStatus, task_backends
    from django.tasks.backends.immediate import ImmediateBackend
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started

    TASKS_LOGGER = "django.tasks"
except ImportError:
    from django_tasks import TaskResultStatus, task_backends
    from django_tasks.backends.immediate import ImmediateBackend
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started

    TASKS_LOGGER = "django_tasks"


def _backend() -> Any:
    return task_backends["default"]


pytestmark = [pytest.mark.timeout(60), pytest.mark.django_db(transaction=True)]

#: The stores that keep results for other processes (get_result).
PERSISTENT = ["json", "sqlite", "postgres"]


def _project_queue(
    store: Store, monkeypatch: pytest.MonkeyPatch, **options: Any
) -> DjangoJobQueue:
    """The project's queue (``settings.JOBQ`` but its store) on ``store``."""
    options = {"max_attempts": 3, "base_delay": 0.1, "keep_completed": 3600, **options}
    queue = DjangoJobQueue(store=store, **options)
    monkeypatch.setattr(contrib, "_queue", queue)
    return queue


@pytest.fixture
def on_store(
    make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch
) -> Iterator[DjangoJobQueue]:
    """The project's queue on a store of the test's ``store_kind``."""
    queue = _project_queue(make_store(), monkeypatch)
    yield queue
    queue.close(timeout=5)


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    from djapp import dtasks

    get_queue().run_pending()  # jobs other tests left due
    dtasks.seen.clear()
    mail.outbox = []
    yield
    dtasks.seen.clear()


@pytest.fixture
def signals() -> Iterator[list[tuple[str, str, Any]]]:
    """(signal, result id, status) for each Tasks signal sent."""
    sent: list[tuple[str, str, Any]] = []

    def receiver(name: str) -> Any:
        def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
            assert sender is JobqBackend
            sent.append((name, task_result.id, task_result.status))

        return receive

    receivers = {
        task_enqueued: receiver("enqueued"),
        task_started: receiver("started"),
        task_finished: receiver("finished"),
    }
    for signal, receive in receivers.items():
        signal.connect(receive)
    yield sent
    for signal, receive in receivers.items():
        signal.disconnect(receive)


def _run_until_finished(result: Any, timeout: float = 10.0) -> None:
    """Run due jobs here until ``result`` is finished (retries wait their delay)."""
    deadline = time.monotonic() + timeout
    while True:
        get_queue().run_pending()
        result.refresh()
        if result.is_finished:
            return
        assert time.monotonic() < deadline, f"{result.id} still {result.status}"
        time.sleep(0.02)


def test_the_backend_is_the_one_configured() -> None:
    assert isinstance(_backend(), JobqBackend)
    assert _backend().supports_defer
    assert _backend().supports_async_task
    assert _backend().supports_priority
    assert _backend().supports_get_result  # a SQLite store


def test_every_job_state_has_a_django_status_a_waiting_job_is_ready() -> None:
    from jobq.contrib.django._tasks_backend import STATUSES, TaskResultStatus

    assert set(STATUSES) == set(JobState)
    assert STATUSES[JobState.WAITING] is TaskResultStatus.READY


def test_the_documentation_example_works_unchanged(signals: list[Any]) -> None:
    from djapp.dtasks import email_users

    result = email_users.enqueue(
        emails=["someone@example.com"],
        subject="You have a message",
        message="Hello there!",
    )
    assert result.status == TaskResultStatus.READY
    assert result.id.isdigit()
    assert result.enqueued_at is not None
    assert result.kwargs["emails"] == ["someone@example.com"]
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value
    record = get_queue().get(int(result.id))
    assert record is not None
    assert record.task == "djapp.dtasks.email_users"
    assert record.payload == {"args": [], "kwargs": result.kwargs}

    assert get_queue().run_pending() == 1
    assert len(mail.outbox) == 1
    assert mail.outbox[0].subject == "You have a message"

    fetched = email_users.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.return_value == 1
    assert fetched.is_finished
    assert fetched.attempts == 1
    assert fetched.errors == []
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 1
    assert _backend().get_result(result.id).return_value == 1
    assert signals == [
        ("enqueued", result.id, TaskResultStatus.READY),
        ("started", result.id, TaskResultStatus.RUNNING),
        ("finished", result.id, TaskResultStatus.SUCCESSFUL),
    ]


def test_using_queue_name_and_context_as_documented() -> None:
    from djapp.dtasks import email_priority, email_with_context

    first = email_priority.using(priority=10).enqueue(
        ["a@example.com"], "Urgent", "Now"
    )
    second = email_with_context.enqueue(emails=["b@example.com"], subject="Ctx")
    assert get_queue().run_pending() == 2
    assert email_priority.get_result(first.id).return_value == 1
    assert email_with_context.get_result(second.id).return_value == 1
    from djapp import dtasks

    assert dtasks.seen == [(1, second.id)]
    assert [m.body for m in mail.outbox] == ["Now", "Attempt 1"]


def test_a_failure_retries_then_maps_to_failed_with_tracebacks(
    signals: list[Any],
) -> None:
    from djapp.dtasks import fail

    result = fail.enqueue("boom")
    _run_until_finished(result)
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 3  # JOBQ["MAX_ATTEMPTS"]
    assert len(result.errors) == 3
    for error in result.errors:
        assert error.exception_class is ValueError
        assert "ValueError: boom" in error.traceback
        assert "raise ValueError(message)" in error.traceback
    assert result.finished_at is not None
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value
    record = get_queue().get(int(result.id))
    assert record is not None
    assert record.state == JobState.DEAD
    mine = [(name, status) for name, rid, status in signals if rid == result.id]
    assert mine == [
        ("enqueued", TaskResultStatus.READY),
        ("started", TaskResultStatus.RUNNING),
        ("started", TaskResultStatus.RUNNING),
        ("started", TaskResultStatus.RUNNING),
        ("finished", TaskResultStatus.FAILED),
    ]
    assert get_queue().delete_dead(int(result.id))


def test_a_time_limit_interrupts_a_task_at_a_line_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The backend calls the task's function itself (marked ``hands_over``):
    ``JobTimeout`` lands in the task, not after the grace."""
    from djapp.dtasks import spin

    queue = _project_queue(
        MemoryStore(), monkeypatch, timeout=0.05, timeout_grace=30, max_attempts=1
    )
    try:
        result = spin.enqueue()
        queue.start(workers=1)
        assert queue.join(10)
        result.refresh()
        assert result.status == TaskResultStatus.FAILED
        [error] = result.errors
        assert "JobTimeout" in error.traceback
        assert error.traceback.splitlines()[-3].strip().endswith("in spin")
        assert queue.stats().abandoned == 0
    finally:
        queue.close(timeout=5)


def test_a_cancelled_task_is_failed_for_django(
    monkeypatch: pytest.MonkeyPatch, signals: list[Any]
) -> None:
    """Django's Tasks have no cancelled status: FAILED, never run again. A
    task cancelled while pending never started, so it never finishes; one
    stopped while running finishes FAILED, its stopped attempt an error."""
    from djapp.dtasks import record, spin

    queue = _project_queue(MemoryStore(), monkeypatch, timeout_grace=30)
    started = threading.Event()

    def on_start(sender: Any, task_result: Any, **kwargs: Any) -> None:
        started.set()

    task_started.connect(on_start)
    try:
        waiting = record.enqueue("never")
        assert queue.cancel(int(waiting.id))
        waiting.refresh()
        running = spin.enqueue()
        queue.start(workers=1)
        assert started.wait(10)
        assert queue.cancel(int(running.id), wait=10)
        running.refresh()
    finally:
        task_started.disconnect(on_start)
        queue.close(timeout=5)

    assert waiting.status == TaskResultStatus.FAILED
    assert (waiting.errors, waiting.attempts) == ([], 0)
    assert waiting.finished_at is not None  # when it was cancelled
    assert running.status == TaskResultStatus.FAILED
    assert running.attempts == 1
    [error] = running.errors
    assert "JobCancelled" in error.traceback
    assert running.finished_at is not None
    assert [(name, rid) for name, rid, _ in signals if name == "finished"] == [
        ("finished", running.id)
    ]
    assert ("finished", running.id, TaskResultStatus.FAILED) in signals


def test_a_return_value_is_json_like_the_framework_says() -> None:
    from djapp.dtasks import pair

    result = pair.enqueue(1, 2)
    get_queue().run_pending()
    assert pair.get_result(result.id).return_value == [1, 2]


def test_priority_orders_the_jobs() -> None:
    from djapp import dtasks
    from djapp.dtasks import record

    record.using(priority=-5).enqueue("low")
    record.enqueue("normal")
    record.using(priority=50).enqueue("high")
    assert get_queue().run_pending() == 3
    assert dtasks.seen == ["high", "normal", "low"]


def test_run_after_defers_the_job() -> None:
    from djapp import dtasks
    from djapp.dtasks import record

    later = timezone.now() + dt.timedelta(hours=1)
    result = record.using(run_after=later).enqueue("later")
    assert get_queue().run_pending() == 0
    assert dtasks.seen == []
    job = get_queue().get(int(result.id))
    assert job is not None
    assert job.state == JobState.PENDING
    assert job.run_at == pytest.approx(later.timestamp())
    assert record.get_result(result.id).status == TaskResultStatus.READY
    assert get_queue().cancel(int(result.id))


def test_an_async_task_runs_on_an_event_loop_in_the_worker_thread() -> None:
    from djapp import dtasks
    from djapp.dtasks import add_async

    result = add_async.enqueue(2, 3)
    assert get_queue().run_pending() == 1
    assert add_async.get_result(result.id).return_value == 5
    assert dtasks.seen == [threading.get_ident()]  # run_pending: this thread


def test_a_stored_path_that_is_not_a_task_is_refused() -> None:
    from djapp import dtasks

    queue = get_queue()
    why = {
        "djapp.dtasks.plain_function": "is not a Django Task",
        "os.getcwd": "is not a Django Task",
        "djapp.nowhere.thing": "cannot be imported (ModuleNotFoundError: No "
        "module named 'djapp.nowhere')",
        "djapp.dtasks.missing": "cannot be imported (ImportError: Module "
        '"djapp.dtasks" does not define a "missing" attribute/class)',
    }
    ids = {
        path: queue.add(queue.prepare([{"args": [], "kwargs": {}}], task=path))[0].id
        for path in why
    }
    assert queue.run_pending() == 4
    assert dtasks.seen == []  # nothing ran
    for path, job_id in ids.items():
        job = queue.get(job_id)
        assert job is not None
        assert job.state == JobState.DEAD
        assert job.attempts == 1  # dead at once
        (error,) = job.errors
        assert error.type == "jobq.contrib.django.tasks.NotADjangoTask"
        assert error.message.startswith(f"{path!r} {why[path]}")
        # The job exists; its task does not (as the reference backends say).
        with pytest.raises(SuspiciousOperation, match=f"job {job_id} does not point"):
            _backend().get_result(str(job_id))
        if "cannot be imported" in why[path]:  # the import's own traceback
            assert "The above exception was the direct cause" in error.traceback
        assert queue.delete_dead(job_id)


def test_a_task_that_does_not_import_as_itself_is_refused_at_enqueue() -> None:
    from djapp.dtasks import renamed

    before = get_queue().stats().pending
    with pytest.raises(InvalidTask, match="does not import as this Task"):
        renamed.enqueue(1)
    assert get_queue().stats().pending == before


@pytest.mark.parametrize("result_id", ["", "abc", "-1", "999999999", "\uff11"])
def test_an_unknown_id_does_not_exist(result_id: str) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        _backend().get_result(result_id)


def test_arguments_that_are_not_json_are_refused() -> None:
    from djapp.dtasks import record

    with pytest.raises(TypeError):
        record.enqueue(object())


def test_inside_a_transaction_the_id_comes_with_the_commit(
    signals: list[Any],
) -> None:
    from djapp.dtasks import record

    with transaction.atomic():
        result = record.enqueue("committed")
        assert result.id == ""
        assert result.enqueued_at is None
        assert signals == []
    assert result.id.isdigit()
    assert result.enqueued_at is not None
    assert signals == [("enqueued", result.id, TaskResultStatus.READY)]
    get_queue().run_pending()
    assert record.get_result(result.id).return_value == "committed"


def test_a_rolled_back_transaction_enqueues_nothing(signals: list[Any]) -> None:
    from djapp.dtasks import record

    before = get_queue().stats().pending
    results: list[Any] = []

    def enqueue_then_fail() -> None:
        with transaction.atomic():
            results.append(record.enqueue("rolled back"))
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        enqueue_then_fail()
    assert results[0].id == ""
    assert signals == []
    assert get_queue().stats().pending == before


# -- the fields of a result, as the reference backends fill them --------------


@pytest.mark.parametrize("store_kind", PERSISTENT)
def test_a_result_says_when_its_task_started_and_finished(
    on_store: DjangoJobQueue, signals: list[Any]
) -> None:
    from djapp.dtasks import record

    running: list[Any] = []

    def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
        running.append(task_result)

    result = record.enqueue("timed")
    assert (result.started_at, result.last_attempted_at, result.finished_at) == (
        None,
        None,
        None,
    )
    task_started.connect(receive)
    try:
        assert on_store.run_pending() == 1
    finally:
        task_started.disconnect(receive)
    fetched = record.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.started_at is not None
    assert fetched.finished_at is not None
    assert fetched.enqueued_at <= fetched.started_at <= fetched.finished_at
    assert fetched.last_attempted_at == fetched.started_at
    (started,) = running
    assert started.status == TaskResultStatus.RUNNING
    assert (started.started_at, started.last_attempted_at) == (
        fetched.started_at,
        fetched.started_at,
    )
    assert started.finished_at is None


@pytest.mark.parametrize("store_kind", PERSISTENT)
def test_a_retried_task_shows_its_last_attempt_and_finishes_when_it_fails(
    on_store: DjangoJobQueue,
) -> None:
    from djapp.dtasks import fail

    result = fail.enqueue("again")
    assert on_store.run_pending() == 1
    waiting = fail.get_result(result.id)
    assert waiting.status == TaskResultStatus.READY  # its retry is due later
    assert waiting.last_attempted_at is not None
    assert waiting.started_at == waiting.last_attempted_at
    assert waiting.finished_at is None
    _run_until_finished(result)
    assert result.status == TaskResultStatus.FAILED
    assert result.last_attempted_at is not None
    assert result.finished_at is not None
    assert waiting.last_attempted_at < result.last_attempted_at <= result.finished_at


@pytest.mark.parametrize("store_kind", PERSISTENT)
def test_the_enqueued_result_equals_the_fetched_one_field_by_field(
    on_store: DjangoJobQueue,
) -> None:
    from djapp.dtasks import email_priority

    due = timezone.now() - dt.timedelta(minutes=5)
    task = email_priority.using(priority=7, run_after=due)
    result = task.enqueue(["c@example.com"], subject="Same", message="Fields")
    assert result == _backend().get_result(result.id)

    assert on_store.run_pending() == 1
    result.refresh()
    fetched = _backend().get_result(result.id)
    for field in dataclasses.fields(fetched):
        assert getattr(result, field.name) == getattr(fetched, field.name), field.name
    assert result == fetched
    assert fetched.return_value == 1


@pytest.mark.parametrize("store_kind", PERSISTENT)
def test_get_result_rebuilds_the_task_as_it_was_enqueued(
    on_store: DjangoJobQueue,
) -> None:
    from djapp.dtasks import record

    later = timezone.now() + dt.timedelta(hours=1)
    task = record.using(queue_name="emails", run_after=later, priority=-3)
    result = task.enqueue("as enqueued")
    fetched = record.get_result(result.id)
    assert fetched.task == task
    assert (fetched.task.queue_name, fetched.task.run_after) == ("emails", later)
    assert (fetched.task.priority, fetched.task.backend) == (-3, "default")

    other = record.using(backend="secondary").enqueue("by the other alias")
    fetched = _backend().get_result(other.id)
    assert (fetched.task.backend, fetched.backend) == ("secondary", "secondary")
    assert fetched == other
    assert on_store.cancel(int(result.id))
    assert on_store.cancel(int(other.id))


def test_the_dashboard_folds_away_every_meta_key_the_backend_sets() -> None:
    from djapp.dtasks import record

    from jobq.web.describe import INTERNAL_META, meta_rows

    later = timezone.now() + dt.timedelta(hours=1)
    result = record.using(queue_name="emails", run_after=later).enqueue("x")
    job = get_queue().get(int(result.id))
    assert job is not None

    shown, internal = meta_rows(job.meta)

    assert shown == []
    assert {key for key, _ in internal} == set(job.meta) == INTERNAL_META
    assert get_queue().cancel(job.id)


def test_the_backend_s_tasks_carry_jobq_s_limits() -> None:
    from djapp.dtasks import record, send_limited

    assert JobqBackend.task_class is JobqTask
    assert isinstance(send_limited, JobqTask)
    assert send_limited.limits == ("smtp",)
    assert record.limits == ()
    per_call = send_limited.using(limits=["account:42", "smtp"], priority=3)
    assert (per_call.limits, per_call.priority) == (("smtp", "account:42"), 3)
    assert send_limited.using(priority=1).limits == ("smtp",)
    with pytest.raises(TypeError, match="list of limit names"):
        send_limited.using(limits="smtp")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="concrete limits"):
        send_limited.using(limits=["account:*"])
    with pytest.raises(TypeError, match="list of limit names"):
        dataclasses.replace(record, limits="smtp")


@pytest.mark.parametrize("store_kind", PERSISTENT)
def test_a_task_s_jobs_run_under_its_limits_and_the_call_s(
    on_store: DjangoJobQueue,
) -> None:
    from djapp.dtasks import send_limited

    with pytest.raises(ValueError, match="'smtp' is not declared"):
        send_limited.enqueue("ann@example.com")
    needs_limits(on_store)
    on_store.limit("smtp", concurrency=2)
    on_store.limit("account:*", concurrency=1)

    result = send_limited.using(limits=["account:42"]).enqueue("ann@example.com")

    record = on_store.get(int(result.id))
    assert record is not None
    assert record.limits == ("smtp", "account:42")
    fetched = send_limited.get_result(result.id)
    assert fetched.task.limits == ("smtp", "account:42")  # type: ignore[attr-defined]
    assert on_store.run_pending() == 1
    fetched.refresh()
    assert fetched.return_value == "ann@example.com"


def test_an_error_of_the_project_resolves_to_its_class() -> None:
    from djapp.dtasks import Declined, decline

    result = decline.enqueue("no")
    _run_until_finished(result)
    assert [error.exception_class for error in result.errors] == [Declined] * 3
    record = get_queue().get(int(result.id))
    assert record is not None
    assert record.errors[-1].type == "djapp.dtasks.Declined"
    assert get_queue().delete_dead(int(result.id))


def test_a_return_value_that_is_not_json_fails_at_once_as_a_type_error() -> None:
    from djapp.dtasks import not_json

    result = not_json.enqueue()
    assert get_queue().run_pending() == 1
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 1  # running it again would repeat what it did
    (error,) = result.errors
    assert error.exception_class is ReturnValueNotJSON
    assert issubclass(error.exception_class, TypeError)
    assert "not JSON" in error.traceback
    assert get_queue().delete_dead(int(result.id))


def test_a_job_whose_process_died_fails_with_a_class_of_jobq(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from djapp.dtasks import record

    store = SqliteStore(tmp_path / "jobs.db", lease_seconds=10)
    queue = _project_queue(store, monkeypatch)
    try:
        result = record.using(priority=1).enqueue("killed")
        for attempt in range(1, 4):  # MAX_ATTEMPTS: each attempt's process dies
            now = time.time() + 3600 * attempt  # past the last recovery
            assert [c.id for c in store.claim_many(now, 1)] == [int(result.id)]
            expire_sqlite_claims(store.path)  # leases follow the host's clock
            assert store.recover(now + 10) == 1
        result.refresh()
        assert result.status == TaskResultStatus.FAILED
        assert [e.exception_class for e in result.errors] == [ProcessDied] * 3
        assert result.errors[0].exception_class_path == "jobq.errors.ProcessDied"
        assert result.finished_at is not None
    finally:
        queue.close(timeout=5)


# -- immediate mode and the order of the signals --------------------------------


@pytest.fixture
def sent() -> Iterator[list[tuple[type, str]]]:
    """(sender, signal) for each Tasks signal sent, whichever the backend."""
    seen: list[tuple[type, str]] = []

    def receiver(name: str) -> Any:
        def receive(sender: type, **kwargs: Any) -> None:
            seen.append((sender, name))

        return receive

    receivers = {
        task_enqueued: receiver("enqueued"),
        task_started: receiver("started"),
        task_finished: receiver("finished"),
    }
    for sent_signal, receive in receivers.items():
        sent_signal.connect(receive)
    yield seen
    for sent_signal, receive in receivers.items():
        sent_signal.disconnect(receive)


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("record", ["same"]),
        ("pair", [1, 2]),
        ("fail", ["boom"]),
        ("exit_now", [3]),
        ("not_json", []),
    ],
)
def test_immediate_mode_returns_what_djangos_immediate_backend_returns(
    make_store: Callable[..., Store],
    monkeypatch: pytest.MonkeyPatch,
    sent: list[tuple[type, str]],
    name: str,
    args: list[Any],
) -> None:
    from djapp import dtasks

    task = getattr(dtasks, name)
    _project_queue(make_store(), monkeypatch, immediate=True, keep_completed=0)
    reference = ImmediateBackend("default", {}).enqueue(task, args, {})
    mine = task.enqueue(*args)

    assert mine.is_finished
    assert (mine.status, mine.task, mine.args, mine.kwargs) == (
        reference.status,
        reference.task,
        reference.args,
        reference.kwargs,
    )
    assert (mine.attempts, mine.backend) == (reference.attempts, reference.backend)
    if reference.status == TaskResultStatus.SUCCESSFUL:
        assert mine.return_value == reference.return_value
    assert len(mine.errors) == len(reference.errors)
    for error, expected in zip(mine.errors, reference.errors, strict=True):
        assert issubclass(error.exception_class, expected.exception_class)
    for result in (mine, reference):
        assert result.enqueued_at is not None
        assert result.started_at is not None
        assert result.finished_at is not None
        assert result.enqueued_at <= result.started_at <= result.finished_at
        assert result.last_attempted_at == result.started_at
    order = ["enqueued", "started", "finished"]
    assert sent == [(ImmediateBackend, s) for s in order] + [
        (JobqBackend, s) for s in order
    ]


@pytest.mark.parametrize("store_kind", PERSISTENT)
def test_task_enqueued_comes_before_task_started_on_a_worker_thread(
    on_store: DjangoJobQueue, signals: list[Any]
) -> None:
    from djapp.dtasks import record

    claimed, started, finished = threading.Event(), threading.Event(), threading.Event()

    def on_event(event: Event) -> None:
        if event.kind is EventKind.STARTED:
            claimed.set()

    def slow_announcement(sender: Any, **kwargs: Any) -> None:
        assert claimed.wait(10)  # a worker holds the job, not announced yet
        assert not started.wait(0.2)  # and it waits for the announcement

    def on_started(sender: Any, **kwargs: Any) -> None:
        started.set()

    def on_finished(sender: Any, **kwargs: Any) -> None:
        finished.set()

    on_store.subscribe(on_event)
    task_enqueued.connect(slow_announcement)
    task_started.connect(on_started)
    task_finished.connect(on_finished)
    try:
        on_store.start(1)
        result = record.enqueue("raced")
        assert finished.wait(10)
    finally:
        task_enqueued.disconnect(slow_announcement)
        task_started.disconnect(on_started)
        task_finished.disconnect(on_finished)
    mine = [name for name, rid, _ in signals if rid == result.id]
    assert mine == ["enqueued", "started", "finished"]


def test_a_failed_task_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from djapp.dtasks import fail

    with caplog.at_level(logging.INFO, logger=TASKS_LOGGER):
        result = fail.enqueue("logged")
        _run_until_finished(result)
    (failed,) = [r for r in caplog.records if "state=FAILED" in r.getMessage()]
    assert failed.exc_info is not None
    assert isinstance(failed.exc_info[1], ValueError)
    assert "logged" in str(failed.exc_info[1])
    assert get_queue().delete_dead(int(result.id))


# -- due times -------------------------------------------------------------------


@pytest.mark.parametrize("store_kind", PERSISTENT)
def test_overdue_tasks_run_in_the_order_they_fell_due(
    on_store: DjangoJobQueue,
) -> None:
    from djapp import dtasks
    from djapp.dtasks import record

    now = timezone.now()
    for late in (10, 30, 20):
        run_after = now - dt.timedelta(seconds=late)
        result = record.using(run_after=run_after).enqueue(f"{late} s late")
        job = on_store.get(int(result.id))
        assert job is not None
        assert job.run_at == pytest.approx(run_after.timestamp(), abs=1.0)
    assert on_store.run_pending() == 3
    assert dtasks.seen == ["30 s late", "20 s late", "10 s late"]


# -- system checks ---------------------------------------------------------------


def test_a_project_without_the_jobq_app_hears_it_once() -> None:
    # jobq's own check (registered when the app was imported, at setup) says
    # it; the backend, which says it for a project that imports jobq only
    # through TASKS, stays silent then (tests/test_django_checks.py).
    assert list(_backend().check()) == []
    assert [m for m in checks.run_checks() if m.id == "jobq.E006"] == []
    from django.conf import settings

    apps = [app for app in settings.INSTALLED_APPS if app != "jobq.contrib.django"]
    with override_settings(INSTALLED_APPS=apps):
        assert list(_backend().check()) == []
        (message,) = [m for m in checks.run_checks() if m.id == "jobq.E006"]
        assert message.level == checks.ERROR
        assert "'jobq.contrib.django'" in (message.hint or "")


# -- manage.py jobq_worker stopped by a second signal -------------------------


def test_a_job_left_running_by_a_second_sigint_fails_as_process_died(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from djapp.dtasks import hold

    # A store of its own: no worker of another test recovers the claim first.
    database = tmp_path / "jobs.db"
    queue = _project_queue(SqliteStore(database), monkeypatch)
    started = tmp_path / "started"
    result = hold.enqueue(str(started), 60)
    here = Path(__file__).parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(here / "django_project"), str(here.parent)]),
        "DJANGO_SETTINGS_MODULE": "djproject.settings",
        "JOBQ_DJANGO_TEST_STORE": f"sqlite:///{database}",
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "django", "jobq_worker", "--workers", "1"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stderr is not None
        deadline = time.monotonic() + 30
        while not started.exists():  # another process: nothing to wait on
            assert time.monotonic() < deadline, "the task never started"
            time.sleep(0.05)
        worker.send_signal(SIGINT)
        for line in worker.stderr:  # the first is handled: a graceful stop
            if "stopping (SIGINT)" in line:
                break
        worker.send_signal(SIGINT)
        assert worker.wait(timeout=30) == 130
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        if worker.stderr is not None:
            worker.stderr.close()
    record = queue.get(int(result.id))
    assert record is not None
    assert record.state == JobState.RUNNING  # until its claim is recovered
    assert queue.store.recover(time.time()) >= 1  # its process is gone
    result.refresh()
    assert result.status == TaskResultStatus.READY  # attempts left: it runs again
    (error,) = result.errors
    assert error.exception_class is ProcessDied
    assert queue.cancel(int(result.id))
    queue.close(timeout=5)
