"""Flask integration: ``JobQ``, an extension that gives each app its queue::

    from jobq.contrib.flask import JobQ

    jobs = JobQ()                       # extensions.py: no app yet

    @jobs.task                          # tasks.py: registered for every app
    def send_welcome_mail(to: str) -> None:
        ...                             # runs inside the app's app context

    def create_app() -> Flask:          # the app factory
        app = Flask(__name__)
        app.config["JOBQ_STORE"] = "sqlite:///jobs.db"
        jobs.init_app(app)
        return app

    send_welcome_mail.enqueue("ann@example.com")   # in a request or CLI command

Design: the store is fixed when a ``JobQueue`` is built, and an app factory
may build many apps with different configs (tests do), so ``init_app`` builds
one ``JobQueue`` per app from that app's ``JOBQ_*`` config (keyword arguments
given to ``JobQ(...)`` are the defaults under it) and keeps it in
``app.extensions["jobq"]``. The keys are ``JOBQ_`` and those of
``jobq.contrib.options.OPTIONS``, the table Django's ``JOBQ`` setting uses.
``@jobs.task`` records the function on the extension and registers it on
every app's queue, built before or after; the returned ``AppTask`` enqueues
to the queue of ``flask.current_app``. ``jobs.queue`` is the current app's
``JobQueue``.

Every job, handler or task, runs inside ``app.app_context()`` on the worker
thread; an isolated task's (``isolate=True``) runs in a child process, which
builds the app as the ``flask`` command finds it (``child_app``) and runs
each attempt in its app context. With ``JOBQ_AUTOSTART`` (the default) the
workers start lazily: in the process that serves the first request (or
enqueues first), never in ``create_app()``, so the reloader's watcher
process of ``flask run --debug``, gunicorn's master with ``--preload`` and
``flask`` commands start none.

``@jobs.periodic(every=...)`` (or ``cron=``) declares a periodic task on
every app's queue the same way (see ``JobQueue.periodic``).

``flask jobq worker|stats|dead|schedules|pause-schedule|resume-schedule|
run-schedule|limits|show|retry|delete|purge-dead|migrate`` are
the commands of ``jobq`` over the app's queue: the same operations
(``jobq.admin.operations``) and output (``jobq.admin.render``), parsed by click.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, ParamSpec, TypeVar, Unpack, overload

from jobq.extras import requires

with requires("flask", "jobq.contrib.flask", "Flask"):
    import click
    from flask import Flask, current_app, has_app_context
    from flask.cli import AppGroup

from jobq.admin import operations, render
from jobq.admin.access import queue_for_command
from jobq.admin.operations import (
    LOG_LEVELS,
    SHUTDOWN_TIMEOUT,
    CommandError,
    command_error,
    run_worker,
)
from jobq.contrib import flask_dashboard
from jobq.contrib.options import (
    AUTOSTART,
    DASHBOARD,
    DASHBOARD_HOSTS,
    DASHBOARD_READ_ONLY,
    FLASK_DASHBOARD_OPTIONS,
    OPTIONS,
    PROMETHEUS,
    WORKERS,
    Option,
    by_key,
)
from jobq.errors import JobqError
from jobq.middleware import Middleware, hands_over
from jobq.options import (
    PERIODIC_OPTIONS,
    TASK_OPTIONS,
    PeriodicOptions,
    SendOptions,
    TaskOptions,
    check_names,
)
from jobq.queue import JobQueue
from jobq.tasks import Task, task_name
from jobq.types import Enqueued, Job

P = ParamSpec("P")
R = TypeVar("R")

#: The prefix of jobq's ``app.config`` keys: ``JOBQ_`` + a key of
#: ``jobq.contrib.options.OPTIONS``.
PREFIX = "JOBQ_"

#: ``app.config`` keys and the ``JobQueue`` option each sets.
CONFIG_OPTIONS = {
    PREFIX + option.key: option.argument
    for option in OPTIONS
    if option.argument is not None
}

logger = logging.getLogger("jobq")


@dataclass(frozen=True)
class JobQState:
    """What ``init_app`` keeps in ``app.extensions["jobq"]``."""

    extension: JobQ
    queue: JobQueue[Any]
    workers: int
    autostart: bool
    #: The extension's tasks on this app's queue, by name.
    tasks: dict[str, Task[Any, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class _TaskSpec:
    func: Callable[..., Any]
    name: str
    #: ``JobQueue.task``'s options, or ``JobQueue.periodic``'s (``periodic``).
    options: Mapping[str, Any]
    periodic: bool = False


@dataclass
class _Registry:
    """The extension's tasks and the apps it was initialised on."""

    tasks: list[_TaskSpec] = field(default_factory=list)
    apps: weakref.WeakSet[Flask] = field(default_factory=weakref.WeakSet)
    lock: threading.Lock = field(default_factory=threading.Lock)


class JobQ:
    """The jobq Flask extension; see the module's documentation.

    ``handler``: for plain jobs (``jobs.queue.enqueue(payload)``), called with
    a ``jobq.Job`` inside the app context. ``queue_options``: ``JobQueue``
    keyword arguments, the defaults under the app's ``JOBQ_*`` config.
    ``dashboard``: the path to serve the dashboard at (``jobq.web``; or
    ``JOBQ_DASHBOARD``), ``dashboard_auth`` who may see it (a callable
    without arguments, called in the request; without one, this machine
    only), ``dashboard_read_only`` (or ``JOBQ_DASHBOARD_READ_ONLY``), and
    ``dashboard_hosts`` (or ``JOBQ_DASHBOARD_HOSTS``): names beside
    ``localhost`` it answers to without ``dashboard_auth``.
    """

    def __init__(
        self,
        app: Flask | None = None,
        *,
        handler: Callable[[Job[Any]], Any] | None = None,
        dashboard: str | None = None,
        dashboard_auth: Callable[[], object] | None = None,
        dashboard_read_only: bool = False,
        dashboard_hosts: list[str] | tuple[str, ...] = (),
        **queue_options: Any,
    ) -> None:
        _check_argument("dashboard", DASHBOARD, dashboard)
        _check_argument("dashboard_read_only", DASHBOARD_READ_ONLY, dashboard_read_only)
        _check_argument("dashboard_hosts", DASHBOARD_HOSTS, dashboard_hosts)
        self.handler = handler
        self.dashboard = dashboard
        self.dashboard_auth = dashboard_auth
        self.dashboard_read_only = dashboard_read_only
        self.dashboard_hosts = dashboard_hosts
        self.queue_options = queue_options
        self._registry = _Registry()
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Build ``app``'s queue from its config; add the lazy start and the
        ``flask jobq`` commands. Opens nothing and starts no thread."""
        if "jobq" in app.extensions:
            raise RuntimeError(
                "jobq is already initialised on this app; call init_app once"
            )
        config = app.config
        _check_config(config)
        options = dict(self.queue_options)
        for key, argument in CONFIG_OPTIONS.items():
            if key in config:
                setting = by_key()[key.removeprefix(PREFIX)]
                options[argument] = setting.argument_value(config[key])
        workers = config.setdefault(PREFIX + WORKERS.key, WORKERS.default)
        autostart = config.setdefault(PREFIX + AUTOSTART.key, AUTOSTART.default)
        options["middleware"] = [_app_context(app), *(options.get("middleware") or ())]
        queue: JobQueue[Any] = JobQueue(self.handler, **options)
        queue.child_setup(f"{__name__}.child_app", app.import_name)
        if config.setdefault(PREFIX + PROMETHEUS.key, PROMETHEUS.default):
            from jobq.contrib.prometheus import instrument

            instrument(queue)
        state = JobQState(self, queue, workers, bool(autostart))
        with self._registry.lock:
            for spec in self._registry.tasks:
                _register(app, state, spec)
            self._registry.apps.add(app)
        app.extensions["jobq"] = state
        if autostart and (self.handler is not None or self._registry.tasks):
            queue.start(workers, lazy=True)  # nothing runs yet
        if autostart:
            app.before_request(functools.partial(_ensure_started, queue))
        app.cli.add_command(_command_group())
        prefix = config.get(PREFIX + DASHBOARD.key, self.dashboard)
        if prefix is not None:
            read_only = config.get(
                PREFIX + DASHBOARD_READ_ONLY.key, self.dashboard_read_only
            )
            hosts = config.get(PREFIX + DASHBOARD_HOSTS.key, self.dashboard_hosts)
            flask_dashboard.mount(
                app, queue, prefix, self.dashboard_auth, read_only, hosts
            )

    # -- the current app's queue -----------------------------------------------

    @property
    def queue(self) -> JobQueue[Any]:
        """The ``JobQueue`` of ``flask.current_app``."""
        return self.state().queue

    def state(self, app: Flask | None = None) -> JobQState:
        """``app``'s (default: the current app's) state; ``RuntimeError`` if
        ``init_app`` was not called for it."""
        if app is None:
            if not has_app_context():
                raise RuntimeError(
                    "working outside of an application context: use this in a "
                    "request, a flask command or `with app.app_context():`, or "
                    "pass the app"
                )
            app = current_app._get_current_object()  # type: ignore[attr-defined]
        state = app.extensions.get("jobq")
        if not isinstance(state, JobQState) or state.extension is not self:
            raise RuntimeError(
                f"the app {app.name!r} is not initialised with this JobQ; "
                "did you forget to call jobs.init_app(app)?"
            )
        return state

    # -- tasks -----------------------------------------------------------------

    @overload
    def task(
        self, func: Callable[P, R], /, **options: Unpack[TaskOptions]
    ) -> AppTask[P, R]: ...

    @overload
    def task(
        self, func: None = None, /, **options: Unpack[TaskOptions]
    ) -> Callable[[Callable[P, R]], AppTask[P, R]]: ...

    def task(
        self, func: Callable[P, R] | None = None, /, **options: Unpack[TaskOptions]
    ) -> AppTask[P, R] | Callable[[Callable[P, R]], AppTask[P, R]]:
        """``@jobs.task`` or ``@jobs.task(name=..., max_attempts=...,
        priority=..., timeout=...)``: ``@queue.task`` on every app's queue (see
        ``JobQueue.task``); the function runs inside the app context."""
        check_names(options, TASK_OPTIONS, "task")

        def decorate(function: Callable[P, R]) -> AppTask[P, R]:
            name = task_name(function, options.get("name"))
            return self._add(_TaskSpec(function, name, options))

        return decorate if func is None else decorate(func)

    def periodic(
        self, **options: Unpack[PeriodicOptions]
    ) -> Callable[[Callable[..., R]], AppTask[..., R]]:
        """``@jobs.periodic(every=...)`` or ``@jobs.periodic(cron=..., tz=...)``:
        ``JobQueue.periodic`` on every app's queue, with the same options;
        each slot runs inside the app context."""
        check_names(options, PERIODIC_OPTIONS, "periodic")

        def decorate(function: Callable[..., R]) -> AppTask[..., R]:
            name = task_name(function, options.get("name"))
            return self._add(_TaskSpec(function, name, options, periodic=True))

        return decorate

    def _add(self, spec: _TaskSpec) -> AppTask[Any, Any]:
        """Register ``spec`` on every app's queue, and on those to come."""
        with self._registry.lock:
            if any(s.name == spec.name for s in self._registry.tasks):
                raise ValueError(f"a task named {spec.name!r} is already registered")
            for app in list(self._registry.apps):
                state: JobQState = app.extensions["jobq"]
                _register(app, state, spec)
                if state.autostart and not self._registry.tasks and not self.handler:
                    # the first task: init_app had nothing to start yet
                    state.queue.start(state.workers, lazy=True)
            self._registry.tasks.append(spec)
        return AppTask(self, spec)


class AppTask(Generic[P, R]):
    """A task of a ``JobQ``: calling it runs the function here and now;
    ``enqueue`` and ``using`` act on the current app's ``jobq.Task``."""

    def __init__(self, extension: JobQ, spec: _TaskSpec) -> None:
        self._extension = extension
        self._spec = spec
        self.name = spec.name
        self.func: Callable[P, R] = spec.func
        functools.update_wrapper(self, spec.func)

    @hands_over
    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def task(self, app: Flask | None = None) -> Task[P, R]:
        """The ``jobq.Task`` on ``app``'s (default: the current app's) queue."""
        found: Task[P, R] = self._extension.state(app).tasks[self.name]
        return found

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Enqueued:
        """``jobq.Task.enqueue`` on the current app's queue."""
        return self.task().enqueue(*args, **kwargs)

    def using(self, **options: Unpack[SendOptions]) -> Task[P, R]:
        """``jobq.Task.using`` on the current app's queue."""
        return self.task().using(**options)

    def __repr__(self) -> str:
        return f"<jobq.contrib.flask.AppTask {self.name!r}>"


def _check_config(config: Mapping[str, Any]) -> None:
    """``TypeError`` for a ``JOBQ_*`` value of the wrong type (``JobQueue``
    judges the ranges); a WARNING for ``JOBQ_*`` keys jobq does not know."""
    known = by_key((*OPTIONS, *FLASK_DASHBOARD_OPTIONS))
    for key, value in config.items():
        if not key.startswith(PREFIX):
            continue
        option = known.get(key.removeprefix(PREFIX))
        if option is None:
            logger.warning(
                "app.config[%r] is not a jobq setting; known: %s",
                key,
                ", ".join(PREFIX + name for name in known),
            )
            continue
        problem = option.problem(value)
        if problem is not None:
            raise TypeError(f"app.config[{key!r}] {problem}")


def _check_argument(name: str, option: Option, value: object) -> None:
    """``TypeError`` for a ``JobQ(...)`` argument of the wrong type, as for
    its ``app.config`` key."""
    problem = option.problem(value)
    if problem is not None:
        raise TypeError(f"JobQ({name}=...) {problem}")


def _app_context(app: Flask) -> Middleware:
    """The middleware that runs every job inside ``app.app_context()`` (the
    outermost, so the app's own middleware may use ``current_app``)."""

    def in_app_context(job: Job[Any], call_next: Callable[[], object]) -> object:
        with app.app_context():
            return call_next()

    return in_app_context


def child_app(where: str) -> Callable[[], AbstractContextManager[Any]]:
    """The child setup of isolated tasks (``JobQueue.child_setup``): the
    app, found as the ``flask`` command finds it in ``where`` (a module:
    its ``app`` or ``application``, or what its factory ``create_app`` or
    ``make_app`` returns; or ``"module:name"``, ``"module:factory(args)"``),
    whose app context each attempt runs in. ``init_app`` gives the app's
    ``import_name``."""
    from flask.cli import locate_app

    module, _, name = where.partition(":")
    app = locate_app(module, name or None)
    return app.app_context


def _finite_seconds(
    ctx: click.Context, param: click.Parameter, value: float | None
) -> float | None:
    """``FloatRange(min=0)`` lets "inf" and "nan" through, which ``close``
    refuses as a timeout: a usage error now, not a failed shutdown later."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"must be a finite number of seconds, not {value}")
    return value


def _register(app: Flask, state: JobQState, spec: _TaskSpec) -> None:
    options: dict[str, Any] = {**spec.options, "name": spec.name}
    if spec.periodic:
        state.tasks[spec.name] = state.queue.periodic(**options)(spec.func)
    else:
        state.tasks[spec.name] = state.queue.task(spec.func, **options)


def _ensure_started(queue: JobQueue[Any]) -> None:
    queue.ensure_started()  # cheap once the workers run


# -- flask jobq ... --------------------------------------------------------------


def _current_state() -> JobQState:
    state = current_app.extensions.get("jobq")
    if not isinstance(state, JobQState):  # pragma: no cover - added by init_app
        raise click.UsageError("jobq is not initialised on this app")
    return state


def _fail(error: CommandError) -> click.exceptions.Exit:
    """Report ``error`` as click reports its own, with its exit status."""
    click.echo(f"Error: {error.message}", err=True)
    return click.exceptions.Exit(error.code)


@contextlib.contextmanager
def _reporting() -> Iterator[None]:
    """Report a command's failure as ``jobq`` does: one line, its status."""
    try:
        yield
    except CommandError as exc:
        raise _fail(exc) from None
    except JobqError as exc:
        raise _fail(command_error(exc)) from None


@contextlib.contextmanager
def _queue(*, read_only: bool) -> Iterator[JobQueue[Any]]:
    """The current app's queue as the command uses it (see
    ``jobq.admin.queue_for_command``), failures reported."""
    with (
        _reporting(),
        queue_for_command(_current_state().queue, read_only=read_only) as queue,
    ):
        yield queue


#: Who ``flask jobq pause-schedule`` and ``run-schedule`` say asked.
FLASK_BY = "flask jobq"


def _print(text: str) -> None:
    click.echo(text, nl=False)


def _json_option() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option("--json", "json_", is_flag=True, help="print JSON")


def _command_group() -> AppGroup:
    group = AppGroup("jobq", help="Run and inspect this app's jobq queue.")

    @group.command("worker")
    @click.option(
        "--workers",
        type=click.IntRange(min=1),
        default=None,
        help="worker threads (default: JOBQ_WORKERS)",
    )
    @click.option(
        "--shutdown-timeout",
        type=click.FloatRange(min=0),
        callback=_finite_seconds,
        default=SHUTDOWN_TIMEOUT,
        show_default=True,
        help="seconds to wait for running jobs after SIGTERM or SIGINT",
    )
    @click.option(
        "--log-level",
        default="INFO",
        show_default=True,
        type=click.Choice(LOG_LEVELS),
    )
    def worker(workers: int | None, shutdown_timeout: float, log_level: str) -> None:
        """Run the workers in the foreground until SIGTERM or SIGINT."""
        state = _current_state()
        with _reporting():
            run_worker(
                state.queue,
                workers=workers or state.workers,
                shutdown_timeout=shutdown_timeout,
                log_level=log_level,
            )

    @group.command("stats")
    @_json_option()
    def stats(json_: bool) -> None:
        """Pending (delayed included), waiting, running and dead jobs."""
        with _queue(read_only=True) as queue:
            _print(render.stats(operations.stats(queue), as_json=json_))

    @group.command("dead")
    @_json_option()
    def dead(json_: bool) -> None:
        """The dead-letter list, oldest first."""
        with _queue(read_only=True) as queue:
            _print(render.dead(operations.dead(queue), as_json=json_))

    @group.command("cancelled")
    @_json_option()
    def cancelled(json_: bool) -> None:
        """The cancelled jobs kept, newest first."""
        with _queue(read_only=True) as queue:
            _print(render.cancelled(operations.cancelled(queue), as_json=json_))

    @group.command("schedules")
    @_json_option()
    def schedules(json_: bool) -> None:
        """The periodic jobs: declared ones, then orphaned ones."""
        # The app's own queue declares them (see the jobq command's _with_app).
        with _queue(read_only=False) as queue:
            _print(render.schedules(operations.schedules(queue), as_json=json_))

    @group.command("pause-schedule")
    @click.argument("name")
    @_json_option()
    def pause_schedule(name: str, json_: bool) -> None:
        """Pause a periodic job for every process (its slots are passed over)."""
        with _queue(read_only=False) as queue:
            changed = operations.pause_schedule(queue, name, by=FLASK_BY)
        _print(render.schedule_changed(name, "paused", changed, as_json=json_))

    @group.command("resume-schedule")
    @click.argument("name")
    @_json_option()
    def resume_schedule(name: str, json_: bool) -> None:
        """Resume a paused periodic job from its next slot (no burst)."""
        with _queue(read_only=False) as queue:
            changed = operations.resume_schedule(queue, name)
        _print(render.schedule_changed(name, "resumed", changed, as_json=json_))

    @group.command("run-schedule")
    @click.argument("name")
    @_json_option()
    def run_schedule(name: str, json_: bool) -> None:
        """Enqueue one job of a periodic job now, taking no slot."""
        with _queue(read_only=False) as queue:
            job_id = operations.run_schedule(queue, name, by=FLASK_BY)
        _print(render.schedule_run(name, job_id, as_json=json_))

    @group.command("limits")
    @_json_option()
    def limits(json_: bool) -> None:
        """The limits, with the jobs running and waiting under each."""
        with _queue(read_only=True) as queue:
            _print(render.limits(operations.limits(queue), as_json=json_))

    @group.command("processes")
    @_json_option()
    def processes(json_: bool) -> None:
        """The processes serving the queue, with the jobs each runs."""
        with _queue(read_only=True) as queue:
            shown = operations.processes(queue)
            _print(render.processes(shown, queue.clock(), as_json=json_))

    @group.command("show")
    @click.argument("job_id", type=click.IntRange(min=1))
    @_json_option()
    def show(job_id: int, json_: bool) -> None:
        """One job with its parents and children, errors and tracebacks."""
        with _queue(read_only=True) as queue:
            record = operations.show(queue, job_id)
            relatives = operations.family(queue, record)
            _print(render.job(record, relatives, as_json=json_))

    @group.command("retry")
    @click.argument("job_id", type=click.IntRange(min=1))
    @_json_option()
    def retry(job_id: int, json_: bool) -> None:
        """Make a dead job pending again."""
        with _queue(read_only=False) as queue:
            _print(render.retried(operations.retry(queue, job_id), as_json=json_))

    @group.command("delete")
    @click.argument("job_id", type=click.IntRange(min=1))
    @_json_option()
    def delete(job_id: int, json_: bool) -> None:
        """Remove a dead job for good."""
        with _queue(read_only=False) as queue:
            _print(render.deleted(operations.delete(queue, job_id), as_json=json_))

    @group.command("cancel")
    @click.argument("job_id", type=click.IntRange(min=1))
    @click.option(
        "--wait",
        type=click.FloatRange(min=0),
        callback=_finite_seconds,
        default=None,
        help="seconds to wait for a running job to stop (exit status 3 if it "
        "still runs then)",
    )
    @_json_option()
    def cancel(job_id: int, wait: float | None, json_: bool) -> None:
        """Cancel a pending or waiting job, or ask a running one to stop."""
        with _queue(read_only=False) as queue:
            done = operations.cancel(queue, job_id, wait=wait, by="flask jobq cancel")
        _print(render.cancel(done.id, done.was, done.outcome, as_json=json_))

    @group.command("purge-dead")
    @click.option("--yes", is_flag=True, help="really delete them")
    @_json_option()
    def purge_dead(yes: bool, json_: bool) -> None:
        """Remove every dead job (only with --yes)."""
        with _queue(read_only=not yes) as queue:
            _print(render.purged(operations.purge_dead(queue, yes=yes), as_json=json_))

    @group.command("migrate")
    @_json_option()
    def migrate(json_: bool) -> None:
        """Create or upgrade the schema of the app's SQLite or PostgreSQL store."""
        with _reporting():
            done = operations.migrate(_current_state().queue.store)
        _print(render.migration(done.store, done.version, as_json=json_))

    return group
