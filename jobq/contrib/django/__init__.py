"""jobq for Django: add ``"jobq.contrib.django"`` to ``INSTALLED_APPS``.

One queue per process, built from ``settings.JOBQ`` by the first
``get_queue()`` (building opens nothing: no file, connection or thread)::

    JOBQ = {"STORE": "sqlite:///jobs.db", "WORKERS": 4, "MAX_ATTEMPTS": 5}

    # myapp/tasks.py (imported by the app at startup, like admin.py)
    from jobq.contrib.django import periodic, task

    @task
    def send_welcome(user_id: int) -> None: ...

    @periodic(cron="0 3 * * *", tz="Europe/Berlin")
    def nightly_report() -> None: ...

    send_welcome.enqueue(user.pk)        # in a view

What Django adds to a plain ``jobq.JobQueue``:

* A job enqueued while the ``DATABASE`` connection is in an atomic block
  (``transaction.atomic``, ``ATOMIC_REQUESTS``) is written to the store with
  ``transaction.on_commit``: it never exists if the transaction rolls back,
  and no worker can run it before the data it needs is committed. Such an
  ``enqueue`` returns a ``Deferred`` (``id`` 0: the id is not known yet).
  Passing ``connection=`` (PostgreSQL store in the same database) writes it
  in the caller's transaction instead, with its real id.
* Every job runs between two ``django.db.close_old_connections()`` calls, as
  a request does, so worker threads never keep broken or expired
  connections (skipped in ``IMMEDIATE`` mode and inside an atomic block).
* An isolated task (``isolate=True``) runs in a child process set up as
  Django is (``child_setup``: the same ``DJANGO_SETTINGS_MODULE``, then
  ``django.setup()``), each attempt between two ``close_old_connections()``.
* Workers start in the serving process on its first request
  (``request_started``; ``AUTOSTART``), never in ``AppConfig.ready()``, so
  ``migrate``, ``shell`` or ``test`` start none. ``manage.py jobq_worker``
  runs workers in a process of their own; ``manage.py jobq`` looks at and
  manages the jobs (``stats``, ``dead``, ``show``, ``retry``, ...).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar, Unpack, overload

from jobq.extras import requires

with requires("django", "jobq.contrib.django", "Django"):
    # Not `apps`: the package's submodule apps.py takes that name once imported.
    from django.apps import apps as app_registry
    from django.core.exceptions import ImproperlyConfigured
    from django.db import close_old_connections, connections, transaction
    from django.utils.module_loading import import_string

from jobq.errors import JobqError
from jobq.middleware import Middleware, hands_over
from jobq.options import PeriodicOptions, SendOptions, TaskOptions
from jobq.queue import JobQueue
from jobq.stores.base import NewJob
from jobq.tasks import Task
from jobq.types import Enqueued, Job

# checks: the system checks, registered by this import (the app installed
# or not: they say when it is not).
from . import checks, conf

__all__ = [
    "Deferred",
    "DjangoJobQueue",
    "child_setup",
    "enqueue",
    "enqueue_many",
    "get_queue",
    "periodic",
    "task",
]

logger = logging.getLogger("jobq")

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Deferred(Enqueued):
    """What ``enqueue`` returns for a job whose store write waits for the
    current transaction to commit: ``id`` is 0 and ``duplicate`` False, since
    neither is known before the commit. A rollback drops the job."""

    id: int = 0
    duplicate: bool = False


class DjangoJobQueue(JobQueue[Any]):
    """A ``JobQueue`` that defers enqueues to the commit of the current
    transaction and closes old database connections around each job (a
    middleware, the outermost).

    When ``settings.TASKS`` names ``jobq.contrib.django.tasks.JobqBackend``,
    its workers also run the tasks of Django's Tasks framework: a task name
    no ``@task`` of jobq registered is taken for the import path of a Django
    ``Task`` (``resolve_task``), run only if it is one.
    """

    def __init__(
        self,
        handler: Callable[[Job[Any]], Any] | None = None,
        *,
        on_commit: bool = True,
        database: str = "default",
        workers: int = 4,
        autostart: bool = True,
        middleware: Iterable[Middleware] | None = None,
        **options: Any,
    ) -> None:
        self.on_commit = on_commit
        self.database = database
        self.workers = workers
        self.autostart = autostart
        keep_connections = bool(options.get("immediate"))
        django_tasks = _django_tasks_backend() if serves_django_tasks() else None
        super().__init__(
            handler,
            middleware=[_connections(keep_connections), *(middleware or ())],
            resolve_task=None if django_tasks is None else django_tasks.resolve,
            **options,
        )
        if django_tasks is not None:
            self.subscribe(django_tasks.finished)

    def add(
        self,
        jobs: Sequence[NewJob],
        *,
        connection: Any = None,
        then: Callable[[list[Enqueued]], object] | None = None,
    ) -> list[Enqueued]:
        """Write the jobs at once, or, inside an atomic block of
        ``database``, when it commits (returning ``Deferred`` for each).
        ``then`` is called with the written jobs right after the write (see
        ``JobQueue.add``): at once, or at the commit of a deferred write."""
        db = transaction.get_connection(self.database)
        if connection is not None or not self.on_commit or not db.in_atomic_block:
            return super().add(jobs, connection=connection, then=then)

        def write() -> None:
            super(DjangoJobQueue, self).add(jobs, then=then)

        transaction.on_commit(write, using=self.database)
        return [Deferred() for _ in jobs]


def _connections(keep: bool) -> Middleware:
    """The middleware that runs each job between two
    ``close_old_connections()``, as Django runs a request, unless it runs on
    the caller's connection (``keep``: immediate mode; or inside the caller's
    atomic block, ``run_pending()`` in a ``TestCase``)."""

    def close_old(job: Job[Any], call_next: Callable[[], object]) -> object:
        if keep or _in_atomic_block():
            return call_next()
        close_old_connections()
        try:
            return call_next()
        finally:
            close_old_connections()

    return close_old


def _django_tasks_backend() -> Any:
    """``jobq.contrib.django._tasks_backend``, or ``None`` without a Tasks
    framework (Django 6's ``django.tasks`` or the ``django_tasks`` backport)."""
    try:
        from jobq.contrib.django import _tasks_backend
    except ImportError:
        return None
    return _tasks_backend


def serves_django_tasks() -> bool:
    """Whether ``settings.TASKS`` names ``JobqBackend`` (or a subclass)."""
    from django.conf import settings

    backends = getattr(settings, "TASKS", None)
    if not isinstance(backends, dict):
        return False
    for params in backends.values():
        path = params.get("BACKEND") if isinstance(params, dict) else None
        if not isinstance(path, str):
            continue
        try:
            from jobq.contrib.django._tasks_backend import JobqBackend

            backend = import_string(path)
        except ImportError:
            continue
        if isinstance(backend, type) and issubclass(backend, JobqBackend):
            return True
    return False


def _in_atomic_block() -> bool:
    return any(db.in_atomic_block for db in connections.all(initialized_only=True))


class _LazyHandler:
    """``JOBQ["HANDLER"]``, imported at the first job (the module may itself
    import ``jobq.contrib.django``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._function: Callable[[Job[Any]], Any] | None = None

    @hands_over
    def __call__(self, job: Job[Any]) -> Any:
        if self._function is None:
            self._function = import_string(self.path)
        return self._function(job)


class _Unconfigured(JobQueue[Any]):
    """Where ``@task`` and ``@periodic`` declare tasks while ``settings.JOBQ``
    has problems. Declaring must not raise: ``manage.py check`` imports the
    apps' tasks modules (the app's ``ready()``, views in the URLconf) before
    it reports the problems as check errors. Nothing of it ever runs: its
    ``enqueue`` and ``start`` raise ``ImproperlyConfigured``, as
    ``get_queue()`` does."""

    def __init__(self, problems: str) -> None:
        super().__init__(None)
        self.problems = problems

    def add(
        self,
        jobs: Sequence[NewJob],
        *,
        connection: Any = None,
        then: Callable[[list[Enqueued]], object] | None = None,
    ) -> list[Enqueued]:
        raise ImproperlyConfigured(self.problems)

    def start(self, workers: int = 4, *, lazy: bool = False) -> JobQueue[Any]:
        raise ImproperlyConfigured(self.problems)


_lock = threading.Lock()
_queue: DjangoJobQueue | None = None
_unconfigured: _Unconfigured | None = None
_wished_in: int | None = None  # the pid whose first request asked for workers


def config() -> conf.Config:
    """``settings.JOBQ`` as read for the queue; ``ImproperlyConfigured`` if
    it has problems (``manage.py check`` lists them all)."""
    found = conf.read()
    if found.problems:
        raise ImproperlyConfigured(_described(found.problems))
    return found


def _described(problems: Iterable[conf.Problem]) -> str:
    return " ".join(f"{problem.id}: {problem.msg}" for problem in problems)


def get_queue() -> DjangoJobQueue:
    """The process's queue, built from ``settings.JOBQ`` on first call.

    ``JOBQ`` is read once: changing it afterwards (``override_settings``)
    does not rebuild the queue, since tasks registered on it stay bound to it.
    """
    global _queue
    if _queue is None:
        with _lock:
            if _queue is None:
                _refuse_without_the_app()
                found = config()
                handler = None if found.handler is None else _LazyHandler(found.handler)
                _queue = DjangoJobQueue(
                    handler,
                    store=found.store,
                    on_commit=found.on_commit,
                    database=found.database,
                    workers=found.workers,
                    autostart=found.autostart,
                    **found.queue_options,
                )
                settings_module = _settings_module()
                if settings_module is not None:
                    _queue.child_setup(f"{__name__}.child_setup", settings_module)
                if found.prometheus:
                    from jobq.contrib.prometheus import instrument

                    instrument(_queue)
    return _queue


def _settings_module() -> str | None:
    """The settings module of this process (``None``: ``settings.configure``)."""
    from django.conf import settings

    found = getattr(settings, "SETTINGS_MODULE", None)
    return found if isinstance(found, str) else os.environ.get("DJANGO_SETTINGS_MODULE")


def child_setup(settings_module: str) -> Callable[[], AbstractContextManager[None]]:
    """The child setup of isolated tasks (``JobQueue.child_setup``): Django
    set up from ``settings_module`` (the parent's), and each attempt run
    between two ``close_old_connections()``, as a job in a thread is."""
    import django

    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    django.setup()
    return _between_old_connections_closed


@contextlib.contextmanager
def _between_old_connections_closed() -> Iterator[None]:
    close_old_connections()
    try:
        yield
    finally:
        close_old_connections()


def _refuse_without_the_app() -> None:
    """``ImproperlyConfigured`` (``jobq.E006``) without the jobq app, when a
    check run may not say it (see ``jobq.contrib.django.checks``): without
    the app no worker would ever run the queue's jobs."""
    if not app_registry.ready or app_registry.is_installed(checks.APP):
        return
    if checks.reported_without_the_app(serves_django_tasks):
        return
    error = checks.app_missing("the jobq queue is used")
    raise ImproperlyConfigured(f"{error.id}: {error.msg}. {error.hint}")


def _declaring_queue() -> JobQueue[Any]:
    """The queue ``@task`` and ``@periodic`` declare with: the project's, or
    while ``settings.JOBQ`` has problems, one that refuses every job."""
    global _unconfigured
    if _queue is not None:
        return _queue
    _refuse_without_the_app()  # its checks may not run to report the problems
    found = conf.read()
    if not found.problems:
        return get_queue()
    with _lock:
        if _unconfigured is None:
            _unconfigured = _Unconfigured(_described(found.problems))
        return _unconfigured


def start_lazily(**kwargs: Any) -> None:
    """``request_started`` receiver: start this process's workers on its first
    request, if ``AUTOSTART`` and the queue has a handler or tasks; later
    requests only call ``ensure_started()`` (cheap; retries a JSON store
    that another process owned)."""
    global _wished_in
    queue = get_queue()
    if not queue.autostart:
        return
    try:
        if _wished_in != os.getpid():
            with _lock:
                if _wished_in != os.getpid():
                    _wished_in = os.getpid()
                    queue.start(queue.workers, lazy=True)
        queue.ensure_started()
    except TypeError:  # no handler and no tasks: nothing to run here
        return
    except JobqError:
        logger.exception("jobq: starting the workers of this process failed")


@overload
def task(func: Callable[P, R], /, **options: Unpack[TaskOptions]) -> Task[P, R]: ...


@overload
def task(
    func: None = None, /, **options: Unpack[TaskOptions]
) -> Callable[[Callable[P, R]], Task[P, R]]: ...


def task(
    func: Callable[P, R] | None = None, /, **options: Unpack[TaskOptions]
) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
    """``@get_queue().task``: register a named task of the project's queue.

    While ``settings.JOBQ`` has problems (which ``manage.py check`` reports),
    the task is declared, but calling ``enqueue`` raises
    ``ImproperlyConfigured``, as ``get_queue()`` does."""
    queue = _declaring_queue()
    if func is None:
        return queue.task(**options)
    return queue.task(func, **options)


def periodic(
    **options: Unpack[PeriodicOptions],
) -> Callable[[Callable[..., R]], Task[..., R]]:
    """``@get_queue().periodic(every=... or cron=..., ...)``: a periodic task of
    the project's queue (see ``JobQueue.periodic``); declared in an app's
    ``tasks`` module, it is found in every process like the other tasks.
    Declared while ``settings.JOBQ`` has problems, as ``task``."""
    return _declaring_queue().periodic(**options)


def enqueue(payload: Any, **options: Unpack[SendOptions]) -> Enqueued:
    """``get_queue().enqueue(payload, **options)`` (for ``JOBQ["HANDLER"]``)."""
    return get_queue().enqueue(payload, **options)


def enqueue_many(
    payloads: Iterable[Any], **options: Unpack[SendOptions]
) -> list[Enqueued]:
    """``get_queue().enqueue_many(payloads, **options)``."""
    return get_queue().enqueue_many(payloads, **options)
