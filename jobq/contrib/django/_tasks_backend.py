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
import datetime as dt
import inspect
import traceback
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string

from jobq.errors import Fatal
from jobq.stores import MemoryStore
from jobq.stores.base import Claim
from jobq.tasks import task_arguments
from jobq.types import AttemptError, Enqueued, JobRecord, JobState

if TYPE_CHECKING:
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    from jobq._runner import Runner
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

__all__ = ["JobqBackend", "NotADjangoTask"]

#: ``TaskResult.worker_ids`` holds one entry per attempt; jobq does not record
#: which worker ran an attempt, so every entry is this.
WORKER_ID = "jobq"

STATUSES = {
    JobState.PENDING: TaskResultStatus.READY,
    JobState.RUNNING: TaskResultStatus.RUNNING,
    JobState.COMPLETED: TaskResultStatus.SUCCESSFUL,
    JobState.DEAD: TaskResultStatus.FAILED,
}


class NotADjangoTask(Fatal):
    """Recorded for a job whose stored import path does not lead to a Django
    ``Task``: it is refused (never called) and dead at once."""


class JobqBackend(BaseTaskBackend):
    """Enqueues Django Tasks as jobs of ``jobq.contrib.django.get_queue()``."""

    supports_defer = True
    supports_async_task = True
    supports_priority = True

    @property
    def supports_get_result(self) -> bool:  # type: ignore[override]
        """Whether any process can read results: not with the memory store."""
        from jobq.contrib.django import get_queue

        return not isinstance(get_queue().store, MemoryStore)

    def enqueue(
        self, task: Task[Any, Any], args: Any, kwargs: Any
    ) -> TaskResult[Any, Any]:
        from jobq.contrib.django import get_queue

        self.validate_task(task)
        _check_resolvable(task)
        delay: float | dt.timedelta = 0.0
        at: dt.datetime | None = None
        run_after: object = task.run_after
        if isinstance(run_after, dt.timedelta):  # Django 6.1 allows one
            delay = run_after
        elif isinstance(run_after, dt.datetime):
            at = run_after
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

        def written(added: list[Enqueued]) -> None:
            object.__setattr__(result, "id", str(added[0].id))
            object.__setattr__(result, "enqueued_at", timezone.now())
            task_enqueued.send(type(self), task_result=result)

        get_queue()._add(
            [{"args": result.args, "kwargs": result.kwargs}],
            delay=delay,
            at=at,
            key=None,
            priority=task.priority,
            connection=None,
            task=task.module_path,
            what=f"the arguments of task {task.module_path!r}",
            then=written,
        )
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
        except NotADjangoTask:
            raise TaskResultDoesNotExist(result_id) from None
        return _to_result(task, record, self.alias)


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
    """The Django ``Task`` at ``path``; ``NotADjangoTask`` for anything else
    (stored data never decides what runs, design.md section 5)."""
    try:
        found = import_string(path)
    except ImportError as exc:
        raise NotADjangoTask(f"{path!r} cannot be imported: {exc}") from None
    if not isinstance(found, Task):
        raise NotADjangoTask(f"{path!r} is not a Django Task; refused")
    return found


def _when(epoch: float) -> dt.datetime:
    """Epoch seconds as Django shows times: aware in UTC with ``USE_TZ``."""
    moment = dt.datetime.fromtimestamp(epoch, tz=dt.UTC)
    return moment if settings.USE_TZ else timezone.make_naive(moment)


def _exception_path(error: AttemptError) -> str:
    """The exception's ``module.Class`` for ``TaskError``: jobq stores the
    class name, and the traceback's last line names its module."""
    if isinstance(getattr(builtins, error.type, None), type):
        return f"builtins.{error.type}"
    lines = error.traceback.rstrip().splitlines()
    last = lines[-1] if lines else ""
    named = last.split(":", 1)[0].strip()
    if named.endswith("." + error.type) and " " not in named:
        return named
    return error.type


def _task_error(error: AttemptError) -> TaskError:
    return TaskError(
        exception_class_path=_exception_path(error), traceback=error.traceback
    )


def _to_result(
    task: Task[Any, Any], record: JobRecord[Any], alias: str
) -> TaskResult[Any, Any]:
    """A stored job as a ``TaskResult``. jobq keeps no start or finish time
    of an attempt: only ``enqueued_at`` is set, and ``finished_at`` of a
    FAILED result (its last error's time)."""
    if task.priority != record.priority:
        # If the settings changed since, show the task as it is now.
        with contextlib.suppress(InvalidTask):
            task = task.using(priority=record.priority)
    status = STATUSES[record.state]
    args, kwargs = task_arguments(_json_text(record.payload))
    # Failed attempts, plus the one running or the one that succeeded.
    started = record.state in (JobState.RUNNING, JobState.COMPLETED)
    attempts = record.attempts + int(started)
    result: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(record.id),
        status=status,
        enqueued_at=_when(record.created_at),
        started_at=None,
        finished_at=(
            _when(record.errors[-1].at)
            if status == TaskResultStatus.FAILED and record.errors
            else None
        ),
        last_attempted_at=None,
        args=args,
        kwargs=kwargs,
        backend=alias,
        errors=[_task_error(e) for e in record.errors],
        worker_ids=[WORKER_ID] * attempts,
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", record.result)
    return result


def _json_text(payload: object) -> str:
    from jobq._json import encode

    return encode(payload, "payload")


class Run:
    """One attempt of a Django task on a jobq worker: its ``TaskResult``,
    the ``task_started`` and ``task_finished`` signals, and the call."""

    def __init__(
        self,
        claim: Claim,
        task: Task[Any, Any],
        args: list[Any],
        kwargs: dict[str, Any],
        result: TaskResult[Any, Any],
        sender: type[BaseTaskBackend],
    ) -> None:
        self.claim = claim
        self.task = task
        self.args = args
        self.kwargs = kwargs
        self.result = result
        self.sender = sender
        self.value: Any = None  # what the task returned, as JSON values

    @classmethod
    def start(cls, claim: Claim, runner: Runner) -> Run:
        """Import the claim's task (``NotADjangoTask`` if it is none), build
        its ``TaskResult`` as RUNNING and send ``task_started``."""
        assert claim.task is not None  # noqa: S101 - the runner checked
        task = _import_task(claim.task)
        args, kwargs = task_arguments(claim.payload)
        backend = task.get_backend()
        record = runner.store.get(claim.id, runner.clock())
        now = timezone.now()
        result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id=str(claim.id),
            status=TaskResultStatus.RUNNING,
            enqueued_at=None if record is None else _when(record.created_at),
            started_at=now if claim.attempt == 1 else None,
            finished_at=None,
            last_attempted_at=now,
            args=args,
            kwargs=kwargs,
            backend=backend.alias,
            errors=[] if record is None else [_task_error(e) for e in record.errors],
            worker_ids=[WORKER_ID] * claim.attempt,
        )
        run = cls(claim, task, args, kwargs, result, type(backend))
        task_started.send(run.sender, task_result=result)
        return run

    def call(self) -> Any:
        """Call the task's function (a coroutine function on an event loop
        of this thread); its return value as JSON values."""
        args: list[Any] = list(self.args)
        if self.task.takes_context:
            args.insert(0, TaskContext(task_result=self.result))
        if inspect.iscoroutinefunction(self.task.func):
            value = asyncio.run(self.task.func(*args, **self.kwargs))
        else:
            value = self.task.call(*args, **self.kwargs)
        try:
            self.value = normalize_json(value)
        except TypeError as exc:
            raise Fatal(f"the task returned a value that is not JSON: {exc}") from exc
        return self.value

    def succeeded(self) -> None:
        """After the store recorded the success: SUCCESSFUL, ``task_finished``."""
        result = self.result
        object.__setattr__(result, "_return_value", self.value)
        object.__setattr__(result, "finished_at", timezone.now())
        object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
        task_finished.send(self.sender, task_result=result)

    def failed(self, exc: BaseException) -> None:
        """After the store recorded the failure: READY again for a retry, or
        FAILED (and ``task_finished``) once the job is dead."""
        result = self.result
        kind = type(exc)
        result.errors.append(
            TaskError(
                exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
                traceback="".join(traceback.format_exception(exc)),
            )
        )
        claim = self.claim
        if isinstance(exc, Fatal) or claim.attempt >= claim.max_attempts:
            object.__setattr__(result, "finished_at", timezone.now())
            object.__setattr__(result, "status", TaskResultStatus.FAILED)
            task_finished.send(self.sender, task_result=result)
        else:
            object.__setattr__(result, "status", TaskResultStatus.READY)
