"""``JobqBackend``: jobq as a backend of Django's Tasks framework.

Imported only through ``jobq.contrib.django.tasks`` (which Django's
``TASKS`` setting names) and by the workers, so that a project without
``django.tasks`` (Django 6+) or the ``django_tasks`` backport still starts.
See ``jobq.contrib.django.tasks`` for what the backend does.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import datetime as dt
import functools
import inspect
import secrets
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, cast

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation
from django.utils import timezone
from django.utils.module_loading import import_string

from jobq import errors
from jobq.contrib.django.checks import APP, REGISTERED_EARLY, app_missing
from jobq.errors import Fatal
from jobq.events import Event, EventKind
from jobq.middleware import hands_over
from jobq.options import check
from jobq.queue import JobQueue
from jobq.tasks import task_arguments
from jobq.types import AttemptError, Enqueued, Job, JobRecord, JobState

if TYPE_CHECKING:
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
else:
    try:  # Django 6.0 and later
        from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import TaskError
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started
        from django.utils.json import normalize_json
    except ImportError:  # the backport, django-tasks 0.12
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import (
            Task,
            TaskContext,
            TaskError,
            TaskResult,
            TaskResultStatus,
        )
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json

__all__ = ["JobqBackend", "JobqTask", "NotADjangoTask", "ReturnValueNotJSON"]

P = ParamSpec("P")
R = TypeVar("R")

#: ``TaskResult.worker_ids`` holds one entry per attempt; jobq does not record
#: which worker ran an attempt, so every entry is this.
WORKER_ID = "jobq"

#: The job's ``meta`` keys that keep what rebuilds the enqueued ``Task``
#: (jobq keeps its priority itself).
QUEUE_NAME = "django.queue_name"
RUN_AFTER = "django.run_after"
BACKEND = "django.backend"
#: The ``meta`` key of the token that pairs a job with its ``task_enqueued``.
ANNOUNCEMENT = "django.announcement"

#: The announcements (``task_enqueued``) this process has yet to send, by
#: token: a worker of this process that claims such a job waits for it, so
#: that ``task_started`` never comes first. Each entry lives as long as its
#: enqueue can still write the job (a rolled-back one is simply forgotten).
_unannounced: weakref.WeakValueDictionary[str, threading.Event] = (
    weakref.WeakValueDictionary()
)
#: How long a worker waits for an announcement (the enqueuing thread is
#: between the store's write and ``task_enqueued``) before it goes on.
ANNOUNCEMENT_WAIT = 10.0

#: What each failed attempt of this process raised, by job id, until its
#: outcome is recorded: ``task_finished`` of a FAILED task is sent inside a
#: handler of it, as the reference backends send it (Django logs it with
#: its traceback).
_raised: dict[int, BaseException] = {}


class _LastFinished(threading.local):
    """The result of the last ``task_finished`` sent in this thread: what an
    immediate-mode ``enqueue`` returns once its task ran."""

    result: TaskResult[Any, Any] | None = None


_last_finished = _LastFinished()

STATUSES = {
    JobState.PENDING: TaskResultStatus.READY,
    # A job waiting for its parents (after=, jobq's own tasks only: Django's
    # Tasks have no dependencies) is READY there, as a pending one.
    JobState.WAITING: TaskResultStatus.READY,
    JobState.RUNNING: TaskResultStatus.RUNNING,
    JobState.COMPLETED: TaskResultStatus.SUCCESSFUL,
    JobState.DEAD: TaskResultStatus.FAILED,
    # Django's Tasks have no cancelled status (nor a cancel API): a job that
    # will never run again, nor succeed, is FAILED there, its errors the
    # attempt it stopped (none if it was pending).
    JobState.CANCELLED: TaskResultStatus.FAILED,
}


class NotADjangoTask(Fatal):
    """Recorded for a job whose stored import path does not lead to a Django
    ``Task``: it is refused (never called) and dead at once."""

    __module__ = "jobq.contrib.django.tasks"  # where it is public


class ReturnValueNotJSON(Fatal, TypeError):
    """Recorded for a task that returned a value JSON cannot hold: a
    ``TypeError``, as the reference backends record it, and dead at once
    (running the task again would repeat what it did)."""

    __module__ = "jobq.contrib.django.tasks"


if TYPE_CHECKING:
    _Task = Task[P, R]
else:

    class _Task(Task, Generic[P, R]):
        """``Task`` as a generic base: Django's own is generic only in its
        type stubs (the backport's at run time too)."""

        __slots__ = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class JobqTask(_Task[P, R]):
    """The ``Task`` of ``JobqBackend`` (its ``task_class``, which Django's
    ``@task`` builds): a Django ``Task`` with jobq's ``limits``, the names
    every job of it runs under (``queue.limit``; see the README's "Limits").
    ``@task(limits=["smtp"])`` gives them to the task, ``.using(limits=[...])``
    adds a call's own (``f"account:{account_id}"``): a job runs under its
    task's and its own, duplicates dropped. A name no ``queue.limit`` of the
    project's queue declares is refused at ``enqueue`` (``ValueError``)."""

    limits: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # The names' shape now (a list or tuple of concrete names); whether
        # each is declared, at enqueue. Task.__post_init__ by name: a slotted
        # dataclass has no zero-argument super().
        names = check({"limits": self.limits}, "task").limits
        object.__setattr__(self, "limits", () if names is None else names)
        Task.__post_init__(self)

    def using(
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: dt.datetime | None = None,
        backend: str | None = None,
        limits: Sequence[str] | None = None,
    ) -> JobqTask[P, R]:
        """``Task.using``, and ``limits`` added to the task's own."""
        changed = cast(
            "JobqTask[P, R]",
            Task.using(
                self,
                priority=priority,
                queue_name=queue_name,
                run_after=run_after,
                backend=backend,
            ),
        )
        if limits is None:
            return changed
        if isinstance(limits, str):  # one name is a list of one, not of letters
            raise TypeError(f"limits must be a list of limit names, not {limits!r}")
        return dataclasses.replace(changed, limits=(*self.limits, *limits))


class JobqBackend(BaseTaskBackend):
    """Enqueues Django Tasks as jobs of ``jobq.contrib.django.get_queue()``."""

    task_class = JobqTask
    supports_defer = True
    supports_async_task = True
    supports_priority = True

    @property
    def supports_get_result(self) -> bool:  # type: ignore[override]
        """Whether any process can read results: the store says so (not the
        memory store)."""
        from jobq.contrib.django import get_queue

        return get_queue().store.keeps_results

    def enqueue(
        self, task: Task[Any, Any], args: Any, kwargs: Any
    ) -> TaskResult[Any, Any]:
        from jobq.contrib.django import get_queue

        self.validate_task(task)
        _check_resolvable(task)
        queue = get_queue()
        result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id="",  # the job's id, once it is written (see written below)
            status=TaskResultStatus.READY,
            enqueued_at=None,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=list(args),  # normalised to JSON values by TaskResult
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

        token = secrets.token_hex(8)
        announced = threading.Event()
        _unannounced[token] = announced

        def written(added: list[Enqueued]) -> None:
            """Right after the write, before any worker starts the job."""
            try:
                # The stored creation time, so that get_result() shows the same.
                record = queue.get(added[0].id)
                enqueued_at = (
                    timezone.now() if record is None else _when(record.created_at)
                )
                object.__setattr__(result, "id", str(added[0].id))
                object.__setattr__(result, "enqueued_at", enqueued_at)
                task_enqueued.send(type(self), task_result=result)
            finally:
                announced.set()

        meta = {QUEUE_NAME: task.queue_name, BACKEND: self.alias, ANNOUNCEMENT: token}
        if task.run_after is not None:
            meta[RUN_AFTER] = task.run_after.isoformat()
        send = functools.partial(
            queue.send,
            [{"args": result.args, "kwargs": result.kwargs}],
            at=task.run_after,
            priority=task.priority,
            meta=meta,
            task=task.module_path,
            limits=_limits_of(task) or None,
            # Immediate mode stands in for Django's ImmediateBackend: one attempt.
            max_attempts=1 if queue.immediate else None,
            what=f"the arguments of task {task.module_path!r}",
            then=written,
        )
        if not queue.immediate:
            send()
            return result
        _last_finished.result = None
        with contextlib.suppress(SystemExit):  # recorded: a FAILED result
            send()
        _show_immediate_outcome(result, queue)
        return result

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        from jobq.contrib.django import get_queue

        if not (result_id.isascii() and result_id.isdigit()):
            raise TaskResultDoesNotExist(result_id)
        record = get_queue().get(int(result_id))
        if record is None or record.task is None:
            raise TaskResultDoesNotExist(result_id)
        try:
            task = _import_task(record.task)
        except NotADjangoTask as refused:
            # As the reference backends: the job exists, its task does not.
            raise SuspiciousOperation(
                f"job {result_id} does not point to a Django Task: {refused}"
            ) from None
        return _to_result(task, record)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """``jobq.E006`` without ``"jobq.contrib.django"`` in
        ``INSTALLED_APPS``: no worker would ever start (unless jobq's own
        check, in every run, says it: see ``jobq.contrib.django.checks``)."""
        messages = list(super().check(**kwargs))
        if not apps.is_installed(APP) and not REGISTERED_EARLY:
            what = f"{type(self).__name__} is the Tasks backend {self.alias!r}"
            messages.append(app_missing(what))
        return messages


def _limits_of(task: Task[Any, Any]) -> tuple[str, ...]:
    """The limits a task's jobs run under: a ``JobqTask``'s, else none."""
    return task.limits if isinstance(task, JobqTask) else ()


def _show_immediate_outcome(result: TaskResult[Any, Any], queue: JobQueue[Any]) -> None:
    """Fill ``result`` with the outcome of the attempt immediate mode ran, as
    ``ImmediateBackend`` returns it (unless the job waits: for its
    ``run_after``, or for the commit of the current transaction)."""
    if not result.id:
        return
    last = _last_finished.result
    if last is not None and last.id == result.id:
        outcome = last
    else:
        record = queue.get(int(result.id))
        if record is None or record.state in (JobState.PENDING, JobState.WAITING):
            return
        outcome = _to_result(result.task, record)
    for name in (
        "status",
        "started_at",
        "finished_at",
        "last_attempted_at",
        "errors",
        "worker_ids",
        "_return_value",
    ):
        object.__setattr__(result, name, getattr(outcome, name))


def _check_resolvable(task: Task[Any, Any]) -> None:
    """A worker finds the task by its import path: that path must lead back
    to this very ``Task`` (not a lambda, a class body's function, or a
    function decorated under another name)."""
    try:
        found = import_string(task.module_path)
    except ImportError:
        found = None
    if not isinstance(found, Task) or found.func is not task.func:
        raise InvalidTask(
            f"{task.module_path} does not import as this Task, so a worker "
            "could not find it; decorate a module-level function with @task"
        )


def _import_task(path: str) -> Task[Any, Any]:
    """The Django ``Task`` at ``path``; ``NotADjangoTask`` for anything else:
    a stored path only ever names a task, never decides what else runs."""
    try:
        found = import_string(path)
    except ImportError as exc:  # its traceback, chained, says where
        raise NotADjangoTask(
            f"{path!r} cannot be imported ({type(exc).__name__}: {exc}); refused"
        ) from exc
    if not isinstance(found, Task):
        raise NotADjangoTask(f"{path!r} is not a Django Task; refused")
    return found


def _stored_task(
    task: Task[Any, Any], priority: int, meta: Mapping[str, str]
) -> Task[Any, Any]:
    """``task`` as it was enqueued: its priority, queue name, ``run_after``
    and backend alias, kept with the job. If the settings changed since (a
    queue or backend no longer configured), the task as it is now."""
    run_after = meta.get(RUN_AFTER)
    with contextlib.suppress(InvalidTask, ImproperlyConfigured, ValueError):
        return task.using(
            priority=priority,
            queue_name=meta.get(QUEUE_NAME),
            run_after=None
            if run_after is None
            else dt.datetime.fromisoformat(run_after),
            backend=meta.get(BACKEND),
        )
    return task


def _when(epoch: float) -> dt.datetime:
    """Epoch seconds as Django shows times: aware in UTC with ``USE_TZ``."""
    moment = dt.datetime.fromtimestamp(epoch, tz=dt.UTC)
    return moment if settings.USE_TZ else timezone.make_naive(moment)


def _maybe_when(epoch: float | None) -> dt.datetime | None:
    return None if epoch is None else _when(epoch)


def _exception_path(error: AttemptError) -> str:
    """The import path of the exception's class, for ``TaskError``: jobq
    records it (bare for a builtin). A record of an older jobq holds only
    the class's name: a builtin, one of ``jobq.errors``, or the module its
    traceback's last line names; else ``Exception``."""
    name = error.type
    if "." in name:
        return name
    if isinstance(getattr(builtins, name, None), type):
        return f"builtins.{name}"
    if isinstance(getattr(errors, name, None), type):
        return f"jobq.errors.{name}"
    lines = error.traceback.rstrip().splitlines()
    named = (lines[-1] if lines else "").split(":", 1)[0].strip()
    if named.endswith("." + name) and " " not in named:
        return named
    return "builtins.Exception"


def _task_error(error: AttemptError) -> TaskError:
    return TaskError(
        exception_class_path=_exception_path(error), traceback=error.traceback
    )


def _to_result(task: Task[Any, Any], record: JobRecord[Any]) -> TaskResult[Any, Any]:
    """A stored job as a ``TaskResult``. jobq keeps the times of the last
    attempt: ``started_at`` and ``last_attempted_at`` are when it started,
    ``finished_at`` when the job finished (SUCCESSFUL or FAILED)."""
    task = _stored_task(task, record.priority, record.meta)
    if isinstance(task, JobqTask) and task.limits != record.limits:
        # The ones it was enqueued with (its task's, and the call's own).
        task = dataclasses.replace(task, limits=record.limits)
    status = STATUSES[record.state]
    args, kwargs = task_arguments(record.payload)
    # Failed attempts, plus the one running or the one that succeeded.
    started = record.state in (JobState.RUNNING, JobState.COMPLETED)
    attempts = record.attempts + int(started)
    finished = status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)
    result: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(record.id),
        status=status,
        enqueued_at=_when(record.created_at),
        started_at=_maybe_when(record.started_at),
        finished_at=_maybe_when(_finished_at(record)) if finished else None,
        last_attempted_at=_maybe_when(record.started_at),
        args=args,
        kwargs=kwargs,
        backend=task.backend,
        errors=[_task_error(e) for e in record.errors],
        worker_ids=[WORKER_ID] * attempts,
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", record.result)
    return result


def _finished_at(record: JobRecord[Any]) -> float | None:
    """When a finished job finished: its last attempt's end, or when it was
    cancelled if no attempt ran."""
    if record.finished_at is None and record.cancellation is not None:
        return record.cancellation.at
    return record.finished_at


def resolve(name: str) -> Callable[[Job[Any]], Any]:
    """``resolve_task`` of the project's queue: a task name no ``@task`` of
    jobq registered is the import path of a Django ``Task``, run by ``run``
    (which refuses it, ``NotADjangoTask``, if it is not one)."""
    return run


def run(job: Job[Any]) -> Any:
    """One attempt of a Django task on a jobq worker: import its ``Task``,
    send ``task_started`` with a RUNNING ``TaskResult``, call its function (a
    coroutine function on an event loop of this thread) and return its value
    as JSON values. ``task_finished`` follows once the store has recorded
    the outcome (``finished``)."""
    from jobq.contrib.django import get_queue

    assert job.task is not None  # noqa: S101 - only task jobs come here
    task = _import_task(job.task)
    announcement = _unannounced.get(job.meta.get(ANNOUNCEMENT, ""))
    if announcement is not None:  # enqueued here: task_enqueued comes first
        announcement.wait(ANNOUNCEMENT_WAIT)
    record = get_queue().get(job.id)
    if record is not None and record.state == JobState.RUNNING:
        result = _to_result(task, record)
    else:  # gone meanwhile (cancelled, its claim recovered): as the job says
        result = _running_result(task, job)
    task_started.send(type(result.task.get_backend()), task_result=result)
    try:
        return _call(result)
    except BaseException as exc:
        _raised[job.id] = exc  # for task_finished, if this was the last attempt
        raise


@hands_over
def _call(result: TaskResult[Any, Any]) -> Any:
    """Call the task of ``result`` with its arguments (and context); its
    return value as JSON values."""
    task = result.task
    call_args: list[Any] = list(result.args)
    if task.takes_context:
        call_args.insert(0, TaskContext(task_result=result))
    if inspect.iscoroutinefunction(task.func):
        value = asyncio.run(task.func(*call_args, **result.kwargs))
    else:
        value = task.func(*call_args, **result.kwargs)  # a time limit lands there
    try:
        return normalize_json(value)
    except (TypeError, ValueError) as exc:
        raise ReturnValueNotJSON(
            f"the task returned a value that is not JSON: {exc}"
        ) from exc


def _running_result(task: Task[Any, Any], job: Job[Any]) -> TaskResult[Any, Any]:
    """A RUNNING result from the ``Job`` alone (its record is not there)."""
    task = _stored_task(task, task.priority, job.meta)
    args, kwargs = task_arguments(job.payload)
    now = timezone.now()
    return TaskResult(
        task=task,
        id=str(job.id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=None,
        started_at=now,
        finished_at=None,
        last_attempted_at=now,
        args=args,
        kwargs=kwargs,
        backend=task.backend,
        errors=[],
        worker_ids=[WORKER_ID] * job.attempt,
    )


#: The events that end an attempt of a Django task (``finished``).
ENDS = (EventKind.SUCCEEDED, EventKind.RETRYING, EventKind.DEAD, EventKind.CANCELLED)


def finished(event: Event) -> None:
    """The queue's subscriber: ``task_finished`` once a Django task's job
    succeeded, is dead or stopped cancelled (the store holds that outcome
    now), with its ``TaskResult`` as ``get_result`` would show it. A job
    cancelled while pending never started, so it never finishes either."""
    if event.kind not in ENDS:
        return
    raised = _raised.pop(event.job_id, None)
    if event.kind is EventKind.RETRYING or event.job is None:
        return
    from jobq.contrib.django import get_queue

    queue = get_queue()
    if event.task is None or event.task in queue.tasks:
        return  # a plain job, or a task of jobq's own
    try:
        task = _import_task(event.task)
    except NotADjangoTask:
        return  # refused: it never started, so it never finishes
    record = queue.get(event.job_id)
    if record is not None:
        result = _to_result(task, record)
    else:  # a success whose job was not kept (no KEEP_COMPLETED)
        result = _finished_result(task, event)
    _last_finished.result = result
    sender = type(result.task.get_backend())
    if raised is None:
        task_finished.send(sender, task_result=result)
        return
    try:  # sent inside a handler of what the task raised, as Django does
        raise raised
    except BaseException:  # noqa: BLE001 - told, then dropped
        task_finished.send(sender, task_result=result)


def _finished_result(task: Task[Any, Any], event: Event) -> TaskResult[Any, Any]:
    """A SUCCESSFUL result from the event alone (the store kept nothing)."""
    assert event.job is not None  # noqa: S101 - finished() checked
    task = _stored_task(task, task.priority, event.job.meta)
    args, kwargs = task_arguments(event.job.payload)
    started = _when(event.at - (event.duration or 0.0))
    result: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(event.job_id),
        status=TaskResultStatus.SUCCESSFUL,
        enqueued_at=None,
        started_at=started,
        finished_at=_when(event.at),
        last_attempted_at=started,
        args=args,
        kwargs=kwargs,
        backend=task.backend,
        errors=[],
        worker_ids=[WORKER_ID] * event.attempt,
    )
    object.__setattr__(result, "_return_value", event.result)
    return result
