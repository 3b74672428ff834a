"""``JobQueue``: the one object users touch.

It validates what callers pass, hands jobs to its store, and runs them on its
worker threads. Job state lives in the store; the queue only holds its
lifecycle (opened, running, closed) and its own counters.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType, TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    ParamSpec,
    TypeVar,
    Unpack,
    cast,
    overload,
)

from jobq._figure_cache import FigureCache
from jobq._fork import reset_after_fork
from jobq._json import encode
from jobq._limits import DeclaredLimits, new_limit
from jobq._periodic.scheduler import (
    CATCH_UPS,
    OVERLAPS,
    RUN_BY,
    Periodic,
    Scheduler,
    make_slots,
    not_declared,
    run_now_key,
    slot_caller,
    slot_key,
    unknown_schedule,
)
from jobq._rules import (
    check_int,
    check_sent_meta,
    check_text,
    check_timeout,
    checked_clock,
    stored_id,
)
from jobq._time import to_seconds
from jobq._worker.isolation import Isolation
from jobq._worker.limits import current_claim
from jobq._worker.pool import WorkerPool
from jobq._worker.runner import Runner, TaskResolver
from jobq._worker.tally import CANCELLED
from jobq.activity import (
    ActivityMinute,
    ProcessInfo,
    TaskActivity,
    minute_of,
)
from jobq.errors import QueueClosed, StoreError, StoreLocked
from jobq.events import (
    EventKind,
    Kinds,
    Subscriber,
    Subscribers,
    new_event,
    publish,
)
from jobq.middleware import Middleware, check_middleware
from jobq.options import (
    JOB_OPTIONS,
    NOTHING,
    PERIODIC_OPTIONS,
    TASK_OPTIONS,
    Checked,
    Delay,
    JobOptions,
    PeriodicOptions,
    SendOptions,
    TaskOptions,
    check,
    check_names,
)
from jobq.producers import EnqueueHook, EnqueueHooks, Sending
from jobq.retry import RetryPolicy
from jobq.stores import store_from
from jobq.stores.base import (
    STOP_LOOK,
    ActivityStore,
    FinishedStore,
    LimitStore,
    NewJob,
    PageStore,
    ScheduleStore,
    Signal,
    capabilities_of,
    location_of,
    missing_limit_members,
    missing_schedule_members,
    new_job,
)
from jobq.stores.pages import JobPage, JobQuery, page_from_list
from jobq.tasks import Task, check_task_name, register, task_name
from jobq.types import (
    Enqueued,
    FinishedMinute,
    Job,
    JobRecord,
    JobState,
    LimitUsage,
    Schedule,
    Stats,
    WorkerStats,
)

if TYPE_CHECKING:  # a default, so that JobQueue() without a handler is JobQueue[Any]
    from typing_extensions import TypeVar as DefaultTypeVar

    P = DefaultTypeVar("P", default=Any)
else:
    P = TypeVar("P")
TaskParams = ParamSpec("TaskParams")
R = TypeVar("R")

logger = logging.getLogger("jobq")

#: Read once: an enum member's lookup on its class costs a call (per job).
ENQUEUED = EventKind.ENQUEUED

JobRef = int | Enqueued

#: The default ``max_payload_bytes``: a payload's JSON text may be this long.
MAX_PAYLOAD_BYTES = 1 << 20

#: Seconds the interpreter waits at exit for running handlers of a queue that
#: was not stopped, before it exits anyway (those jobs run again later).
EXIT_TIMEOUT = 10.0

#: Seconds a cancelled job is kept by default (``keep_cancelled``): a day,
#: so that it stays visible where completed jobs are not kept at all.
KEEP_CANCELLED = 86400.0

#: The longest ``cancel(by=...)`` text kept.
MAX_BY = 200

#: The most minutes ``finished_per_minute`` reads back (a day).
MAX_MINUTES = 1440
#: How many times ``join`` and ``wait`` ask the store in a row when it
#: fails, and how long apart (seconds), before they raise its error.
LOOK_ATTEMPTS = 3
LOOK_RETRY = 0.05

#: Started queues stay alive (like a started thread pool) until stopped.
_running_queues: set[JobQueue[Any]] = set()

#: Queues with an open store, started or not: stopping them at exit saves
#: their store, so a script that only enqueues does not lose its jobs.
_open_queues: weakref.WeakSet[JobQueue[Any]] = weakref.WeakSet()


#: Set when the interpreter starts to exit: a lazy start never starts then.
_exiting = False


def _shutting_down() -> bool:
    return _exiting or sys.is_finalizing()


@atexit.register
def _stop_at_exit() -> None:
    global _exiting
    _exiting = True
    deadline = time.monotonic() + EXIT_TIMEOUT  # one wait for all queues together
    for queue in dict.fromkeys([*_running_queues, *_open_queues]):
        queue.stop(timeout=max(deadline - time.monotonic(), 0.0))


class JobQueue(Generic[P]):
    """An in-process job queue with retries, backoff and a dead-letter list.

    Constructing one validates its arguments and opens nothing: the store's
    files, locks and connections come with the first call that needs them,
    so importing a module that builds a queue is always safe.

    Guards: ``max_pending`` (``None``: no
    limit) makes ``enqueue`` raise ``QueueFull`` once that many jobs are
    pending, so a flood cannot take the app down; ``max_payload_bytes`` (1 MiB
    by default, ``None``: no limit) caps a payload's JSON text; and a WARNING
    is logged for each handler running longer than ``warn_running_after``
    seconds (``None``: never).

    ``timeout`` (``None``: no limit) is the default time limit of its jobs,
    overridden per task and per job and stored with each job: at the limit
    ``JobTimeout`` is raised in the handler's thread, and a handler still
    running ``timeout_grace`` seconds later is abandoned (its attempt
    failed, a new worker thread in its place; see the README's section
    "Time limits"). ``max_abandoned`` (``None``: as many as the workers
    started) bounds the abandoned threads: while that many are alive, an
    abandoned thread is not replaced, so the pool shrinks rather than the
    process growing, until they return.

    ``immediate=True`` is a test mode: each ``enqueue`` then runs the jobs
    that are due in the calling thread before it returns, as ``run_pending``
    does (no worker threads needed). A failed attempt stays pending for its
    retry, and delayed jobs wait; ``run_pending()`` runs them once the clock
    has moved.

    Extension points: ``middleware`` (a list of callables ``(job,
    call_next)`` wrapping every attempt, the first outermost; see
    ``jobq.middleware``), ``subscribe`` (events after each recorded change;
    see ``jobq.events``), and ``resolve_task`` (a function ``name -> handler
    or None`` for task names no ``@queue.task`` registered, for integrations
    with a registry of their own such as Django's Tasks framework; its
    handler receives the ``Job``).
    """

    def __init__(
        self,
        handler: Callable[[Job[P]], Any] | None = None,
        *,
        store: Any = None,
        max_attempts: int = 5,
        base_delay: Delay = 1.0,
        max_delay: Delay = 3600.0,
        jitter: bool = True,
        dead_letter_limit: int = 1000,
        keep_completed: Delay = 0,
        keep_cancelled: Delay = KEEP_CANCELLED,
        clock: Callable[[], float] | None = None,
        max_pending: int | None = None,
        max_payload_bytes: int | None = MAX_PAYLOAD_BYTES,
        warn_running_after: Delay | None = 600.0,
        timeout: Delay | None = None,
        timeout_grace: Delay = 5.0,
        max_abandoned: int | None = None,
        immediate: bool = False,
        middleware: Iterable[Middleware] | None = None,
        resolve_task: TaskResolver | None = None,
    ) -> None:
        if handler is not None and not callable(handler):
            raise TypeError(f"handler must be callable, not {handler!r}")
        if resolve_task is not None and not callable(resolve_task):
            raise TypeError(f"resolve_task must be callable, not {resolve_task!r}")
        self.middleware = check_middleware(middleware)
        self.resolve_task = resolve_task
        self._subscribers = Subscribers()
        self._enqueue_hooks = EnqueueHooks()
        self._extending = threading.Lock()  # add_middleware's changes, one at a time
        self.policy = RetryPolicy(
            max_attempts=max_attempts,
            base_delay=to_seconds(base_delay, "base_delay"),
            max_delay=to_seconds(max_delay, "max_delay"),
            jitter=bool(jitter),
        )
        self.dead_letter_limit = check_int(dead_letter_limit, "dead_letter_limit", 0)
        self.store = store_from(store)
        self._clock: Callable[[], float] = (
            (lambda: time.time()) if clock is None else checked_clock(clock)
        )
        self._handler = handler
        #: Named tasks by name, filled by ``@queue.task`` (see ``jobq.tasks``).
        self._tasks: dict[str, Task[Any, Any]] = {}
        #: Periodic tasks by name, filled by ``@queue.periodic``.
        self._periodics: dict[str, Periodic] = {}
        #: Limits declared by ``queue.limit``, kept across a fork.
        self._limits = DeclaredLimits()
        self.immediate = bool(immediate)
        self._keep_completed = to_seconds(keep_completed, "keep_completed")
        self.keep_cancelled = to_seconds(keep_cancelled, "keep_cancelled")
        self.max_pending = _optional_limit(max_pending, "max_pending")
        self.max_payload_bytes = _optional_limit(max_payload_bytes, "max_payload_bytes")
        self._warn_running_after = (
            None
            if warn_running_after is None
            else to_seconds(warn_running_after, "warn_running_after")
        )
        self.timeout = check_timeout(timeout)
        self.timeout_grace = to_seconds(timeout_grace, "timeout_grace")
        #: What each child process of isolated tasks calls first
        #: (``child_setup``): an import path and its arguments.
        self._child_setup: tuple[str, list[Any]] | None = None
        self.max_abandoned = _optional_limit(max_abandoned, "max_abandoned", 0)
        self._closed = False
        self._build_runtime()
        reset_after_fork(self)

    def _build_runtime(self, start_workers: int = 0) -> None:
        """The parts that belong to one process: lock, signal, workers, counters."""
        self._lifecycle = threading.Lock()
        self._signal = Signal(self._clock)
        self._figure_cache = FigureCache()
        self._signal.keep_cancelled = self.keep_cancelled
        self._signal.on_release = self._released
        self._isolation = Isolation(self.timeout_grace)
        self._isolation.setup = self._child_setup
        self._runner = Runner(
            self.store,
            self._handler,
            self.policy,
            self._clock,
            self._keep_completed,
            self._tasks,
            middleware=self.middleware,
            subscribers=self._subscribers,
            resolve_task=self.resolve_task,
            isolation=self._isolation,
        )
        self._scheduler = Scheduler(
            self._periodics,
            cast(ScheduleStore, self.store),  # periodic() refuses other stores
            self._clock,
            self._slot_job,
            self._slot_enqueued,
        )
        self._pool = WorkerPool(
            self._runner,
            self.store,
            self._signal,
            self._clock,
            self._warn_running_after,
            self.timeout_grace,
            scheduler=self._scheduler,
            max_abandoned=self.max_abandoned,
        )
        self._opened = False
        #: Threads inside this queue's ``run_pending`` (see ``_in_handler``).
        self._running_due = _Depth()
        #: Workers to start on first use (0: none): set by ``start(lazy=True)``
        #: and in a forked child of a started queue; honoured by
        #: ``ensure_started``, ``enqueue`` and ``join``; cleared by ``stop``.
        self._start_on_use = start_workers

    def _after_fork_in_child(self) -> None:
        """A forked child gets workers of its own on first use, never the
        parent's threads, locks or store handles; a lazy start's wish is kept."""
        _running_queues.discard(self)
        self._build_runtime(
            start_workers=self._pool.workers
            if self._pool.running
            else self._start_on_use
        )

    # -- lifecycle ------------------------------------------------------------

    def start(self, workers: int = 4, *, lazy: bool = False) -> JobQueue[P]:
        """Start ``workers`` worker threads; a no-op while running.

        ``lazy=True`` starts nothing and opens nothing yet: the workers start
        in the process that first *uses* the queue, with its first
        ``ensure_started()`` (a web framework's first request), ``enqueue``
        or ``join``. So an app factory (or ``AppConfig.ready()``) may call it
        although it also runs in processes that never serve: the reloader's
        watcher, gunicorn's master with ``--preload``, management commands,
        tests. A forked child keeps the wish and starts its own workers on
        its own first use. ``stop()`` cancels the wish; nothing starts while
        the interpreter exits.
        """
        if isinstance(workers, bool) or not isinstance(workers, int):
            raise TypeError(f"workers must be an int, not {workers!r}")
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self._require_handler()
        with self._lifecycle:
            if lazy:
                self._check_open()
                if not self._pool.running:
                    self._start_on_use = workers
                return self
            self._start_on_use = 0
            self._open_locked()
            self._start_locked(workers)
        return self

    def ensure_started(self) -> bool:
        """Start the workers a lazy ``start`` (or a started parent of this
        forked child) asked for, if they do not run yet; whether workers run
        in this process now.

        Cheap once started: meant to be called on every request by a
        framework hook. Without such a wish (never started, or stopped) it
        starts nothing and opens nothing. JSON store: while another process
        owns the file, nothing starts (``False``); a later call tries again.
        After ``close()`` it raises ``QueueClosed``, as every use does.
        """
        if self._closed:  # not _check_open(): a call less on every request
            raise QueueClosed("this queue was closed")
        if self._start_on_use:
            self._ensure_open(start=True)
        return self._pool.running

    def _start_locked(self, workers: int) -> None:
        if not self._pool.running:
            self.store.recover(self._clock())  # also proves we may write it
            self._pool.start(workers)
            _running_queues.add(self)
        self._start_on_use = 0  # only once started: a failed start is tried again

    def stop(self, timeout: Delay | None = None) -> None:
        """Take no new jobs, wait for running ones (up to ``timeout``), save.

        Idempotent. The store stays open: ``enqueue`` still works and
        ``start`` starts again. A handler still running after ``timeout``
        keeps its job ``running`` until it returns; one under a time limit
        is waited for only until its thread is abandoned (its limit plus
        ``timeout_grace``).

        After ``close()`` it returns at once: the handlers ``close`` left
        running are not waited for again. From inside a handler of this queue
        it raises ``RuntimeError`` and changes nothing: it would wait for that
        handler to return.
        """
        seconds = _timeout(timeout)
        if self._closed:
            return
        self._refuse_in_handler("stop")
        with self._lifecycle:
            self._stop_locked(seconds)

    def _stop_locked(self, timeout: float | None) -> None:
        """``stop``'s work, with the lifecycle lock held."""
        if self._closed:  # closed while this call waited for the lock
            return
        _running_queues.discard(self)
        self._start_on_use = 0
        self._pool.stop(timeout)
        self._isolation.close_idle()
        if self._opened:
            try:
                self.store.save()
            except StoreError:
                logger.exception("saving the store at stop failed")

    def close(self, timeout: Delay | None = None) -> None:
        """``stop(timeout)``, then release the store; later calls raise
        ``QueueClosed``, but ``stop`` and ``close``, which return at once.

        From inside a handler of this queue it raises ``RuntimeError`` and
        changes nothing: it would wait for that handler to return, and release
        the store before the handler's job could be recorded (the job would
        run again, or die, as if its process had died).
        """
        seconds = _timeout(timeout)
        if self._closed:
            return
        self._refuse_in_handler("close")
        self.stop(seconds)
        with self._lifecycle:
            if not self._closed:
                self._closed = True
                _open_queues.discard(self)
                self._isolation.close()  # an attempt still running there fails
                if self._opened:
                    self.store.close()

    def __enter__(self) -> JobQueue[P]:
        self._check_open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- adding jobs ----------------------------------------------------------

    def enqueue(self, payload: P, **options: Unpack[SendOptions]) -> Enqueued:
        """Add a job; while a job with ``key`` is pending or running, return
        that one with ``duplicate=True`` instead.

        The options (``jobq.options.SendOptions``): ``delay`` or ``at``,
        ``key``, ``priority``, ``meta`` (string headers stored with the job
        and shown to its handler and middleware as ``job.meta``, at most 64
        entries in 8 KiB of JSON), ``timeout`` (this job's time limit,
        instead of its task's or the queue's), ``connection`` (a database
        connection of the caller's, a psycopg 3 one for the PostgreSQL
        store: the job is written in its current transaction, so it exists
        if, and only if, that commits).
        """
        given = check(options, "enqueue") if options else NOTHING
        if self._enqueue_hooks.hooks:
            return self._send([payload], given, None, None, "payload", None)[0]
        # No hook: _send's work without its call (the hot path of every job).
        jobs = self._prepare([payload], given, None, None, "payload")
        return self.add(jobs, connection=given.connection)[0]

    def enqueue_many(
        self, payloads: Iterable[P], **options: Unpack[SendOptions]
    ) -> list[Enqueued]:
        """Add many jobs with the same options in one write; all or nothing.
        The options are ``enqueue``'s."""
        given = check(options, "enqueue_many") if options else NOTHING
        return self._send(payloads, given, None, None, "payload", None)

    def send(
        self,
        payloads: Iterable[object],
        *,
        task: str | None = None,
        max_attempts: int | None = None,
        what: str = "payload",
        then: Callable[[list[Enqueued]], object] | None = None,
        **options: Unpack[SendOptions],
    ) -> list[Enqueued]:
        """``prepare`` then ``add``, inside the enqueue hooks (see
        ``around_enqueue``): what ``enqueue``, ``enqueue_many`` and
        ``Task.enqueue`` do, for integrations that enqueue on their own."""
        given = check(options, "send") if options else NOTHING
        return self._send(payloads, given, task, max_attempts, what, then)

    def _send(
        self,
        payloads: Iterable[object],
        given: Checked,
        task: str | None,
        max_attempts: int | None,
        what: str,
        then: Callable[[list[Enqueued]], object] | None,
    ) -> list[Enqueued]:
        if not self._enqueue_hooks.hooks:
            jobs = self._prepare(payloads, given, task, max_attempts, what)
            return self.add(jobs, connection=given.connection, then=then)
        sending = Sending(task, {} if given.meta is None else dict(given.meta))
        with self._enqueue_hooks.around(sending):
            # What the hooks added has an allowance of its own, beside the
            # caller's limits: turning tracing on never makes a call fail
            # that is valid without it (check applied the caller's).
            meta_text = check_sent_meta(given.meta, sending.meta)
            jobs = self._prepare(payloads, given, task, max_attempts, what)
            if meta_text != given.meta_text:
                jobs = [job._replace(meta=meta_text) for job in jobs]
            sending.added = self.add(jobs, connection=given.connection, then=then)
        return sending.added

    def around_enqueue(self, hook: EnqueueHook) -> Callable[[], None]:
        """Wrap every enqueue of this queue in ``hook``, in the caller's
        thread; returns the function that removes it. A hook may add headers
        to the jobs' ``meta`` (see ``jobq.producers``)."""
        return self._enqueue_hooks.install(hook)

    def prepare(
        self,
        payloads: Iterable[object],
        *,
        task: str | None = None,
        max_attempts: int | None = None,
        what: str = "payload",
        **options: Unpack[JobOptions],
    ) -> list[NewJob]:
        """The jobs ``enqueue_many`` would add, checked and encoded, for
        ``add``: the first half of ``enqueue``.

        Every check happens here, at the call (``TypeError``, ``ValueError``
        as for ``enqueue``; ``what`` names the payloads in messages), and
        nothing is written: an integration that writes later (after a commit)
        still refuses bad input where it was given. ``task`` and
        ``max_attempts`` make them jobs of a named task (``Task.enqueue``).
        ``timeout``: the job's or its task's, else the queue's; stored with
        each job, so every process that runs it applies the same limit.
        """
        given = check(options, "prepare", JOB_OPTIONS) if options else NOTHING
        if task is not None:
            task = check_task_name(task)
        return self._prepare(payloads, given, task, max_attempts, what)

    def _prepare(
        self,
        payloads: Iterable[object],
        given: Checked,
        task: str | None,
        max_attempts: int | None,
        what: str,
    ) -> list[NewJob]:
        run_at = given.run_at(self._clock())
        key, meta_text = given.key, given.meta_text
        priority = 0 if given.priority is None else given.priority
        if max_attempts is None:
            max_attempts = self.policy.max_attempts
        limit = self.timeout if given.timeout is None else given.timeout
        limits = () if given.limits is None else self._limits.check(given.limits)
        most = self.max_payload_bytes
        # A loop: on Python 3.11 a comprehension is a call of a closure over
        # every name it reads, a cost each single enqueue would pay.
        jobs: list[NewJob] = []
        for payload in payloads:
            text = encode(payload, what)
            # len() counts characters; the text is ASCII (non-ASCII is
            # escaped), so it is also the size in bytes.
            if most is not None and len(text) > most:
                raise ValueError(
                    f"{what}: {len(text)} bytes of JSON, more than "
                    f"max_payload_bytes={most}"
                )
            jobs.append(new_job((text, run_at, key, priority, max_attempts, task,
                                 limit, meta_text, limits, (), "wait")))  # fmt: skip
        if given.after is not None:  # a workflow's steps: rare, so apart
            after = self._parents(given.after)
            failure = given.after_failure or "wait"
            jobs = [job._replace(after=after, after_failure=failure) for job in jobs]
        return jobs

    def _parents(self, after: tuple[int, ...]) -> tuple[int, ...]:
        """``after``, if this queue's store runs workflows."""
        if after and not capabilities_of(self.store).workflows:
            raise TypeError(
                f"{location_of(self.store)} cannot run a job after others "
                "(after=): it does not declare Capabilities(workflows=True)"
            )
        return after

    def add(
        self,
        jobs: Sequence[NewJob],
        *,
        connection: Any = None,
        then: Callable[[list[Enqueued]], object] | None = None,
    ) -> list[Enqueued]:
        """Write jobs made by ``prepare``, in one write; the second half of
        ``enqueue``. Publishes ``enqueued`` for each new job, and runs the due
        jobs at once in immediate mode.

        ``then``, if given, is called with the written jobs right after the
        write, before the events and before immediate mode runs them (an
        integration announces its jobs there: Django's ``task_enqueued``).
        Integrations that write at another moment override it (Django's
        queue writes at the commit of the current transaction).
        """
        if self.immediate:
            self._require_handler()  # before anything is added
        if connection is not None and not self.store.transactional_add:
            raise TypeError(
                f"{type(self.store).__name__} cannot add jobs in the caller's "
                "transaction (connection=...); the PostgreSQL store can"
            )
        if self._closed or not self._opened or self._start_on_use:
            self._ensure_open(start=True)  # else it would do nothing: no call
        if not jobs:
            return []
        now = self._clock()
        if connection is None:
            added = self.store.add(jobs, now, max_pending=self.max_pending)
        else:
            add: Callable[..., list[Enqueued]] = self.store.add
            added = add(jobs, now, max_pending=self.max_pending, connection=connection)
        if then is not None:
            then(added)
        callbacks = self._subscribers.enqueued
        if callbacks:
            for job, enqueued in zip(jobs, added, strict=True):
                if not enqueued.duplicate:
                    event = new_event(ENQUEUED, enqueued.id, job.task, 0, now)
                    publish(callbacks, event)
        if self.immediate:
            self._run_due()
        return added

    def add_middleware(self, middleware: Middleware) -> Callable[[], None]:
        """Add ``middleware`` innermost, after those given to the queue
        (for an integration turned on after construction: tracing); returns
        the function that removes it. Attempts that start later use it."""
        (middleware,) = check_middleware([middleware])
        # An identity of its own (the same middleware added twice is two
        # entries), called in C: no Python frame per attempt.
        entry: Middleware = functools.partial(middleware)
        with self._extending:
            self._set_middleware((*self.middleware, entry))

        def remove() -> None:
            with self._extending:
                kept = tuple(m for m in self.middleware if m is not entry)
                self._set_middleware(kept)

        return remove

    def _set_middleware(self, chain: tuple[Middleware, ...]) -> None:
        self.middleware = chain
        self._runner.middleware = chain

    def subscribe(
        self, callback: Subscriber, kinds: Kinds | None = None
    ) -> Callable[[], None]:
        """Call ``callback`` with an ``Event`` after each change the store
        recorded in this process; returns the function that unsubscribes.
        ``kinds``: an ``EventKind`` or several (their values too): only
        those (``ValueError`` for an unknown or none); default every kind.

        Callbacks run synchronously in the thread that made the change, so
        they must be quick; one that raises is logged at ERROR and changes
        nothing. See ``jobq.events``.
        """
        return self._subscribers.subscribe(callback, kinds)

    # -- running --------------------------------------------------------------

    def join(self, timeout: Delay | None = None) -> bool:
        """Wait until nothing is pending (delayed included) or running.

        Returns ``False`` if ``timeout`` passed first. Jobs are run by this
        queue's workers, or by other processes sharing the store. From inside
        a handler of this queue it raises ``RuntimeError``: the handler's own
        job is running, so it would wait for itself.
        """
        seconds = _timeout(timeout)
        self._check_open()
        self._refuse_in_handler("join")
        self._ensure_open(start=True)
        deadline = None if seconds is None else time.monotonic() + seconds
        return self._until_settled(self._nothing_left, deadline, look=1.0)

    def _look_again(self, done: Callable[[], bool]) -> bool:
        """``done()`` (called with ``self._signal.lock`` held), asked again
        when the store fails, up to ``LOOK_ATTEMPTS`` times in all and
        ``LOOK_RETRY`` seconds apart: a connection lost under a read (a
        restarted server, a killed backend) is no reason to fail a wait; a
        store that keeps failing is."""
        for _ in range(LOOK_ATTEMPTS - 1):
            try:
                return done()
            except StoreError:
                logger.warning("a look at the store failed; again", exc_info=True)
                self._signal.settled.wait(LOOK_RETRY)  # the lock let go meanwhile
        return done()

    def _nothing_left(self) -> bool:
        stats = self.store.stats()
        return stats.pending == 0 and stats.running == 0

    def _until_settled(
        self, done: Callable[[], bool], deadline: float | None, *, look: float
    ) -> bool:
        """Wait until ``done()``, asked again whenever a job of this process
        settles and at least every ``look`` seconds (other processes change
        jobs too), or until the monotonic ``deadline`` (``None``: none);
        whether ``done()`` came true."""
        signal = self._signal
        with signal.lock:
            signal.joiners += 1
            try:
                while not self._look_again(done):
                    wait = look
                    if deadline is not None:
                        wait = min(wait, deadline - time.monotonic())
                        if wait <= 0:
                            return False
                    signal.settled.wait(wait)
                return True
            finally:
                signal.joiners -= 1

    def run_pending(self, limit: int | None = None) -> int:
        """Run due jobs in the calling thread, up to ``limit``; how many ran.

        A handler's ``KeyboardInterrupt`` or ``SystemExit`` is recorded as a
        failed attempt, then raised here, so Ctrl-C stops a cron script.
        """
        self._require_handler()
        self._ensure_open()
        if self._periodics:
            self._scheduler.tick()
        return self._run_due(limit)

    def _run_due(self, limit: int | None = None) -> int:
        """Run due jobs here; meanwhile this thread counts as inside a handler
        of this queue (marked once per call, not per job: it is a hot path)."""
        running = self._running_due
        running.depth += 1  # a handler may call run_pending: nested
        ran = 0
        try:
            while limit is None or ran < limit:
                claims = self.store.claim_many(self._clock(), 1)
                if not claims:
                    break
                interrupted = self._runner.run(claims[0])
                ran += 1
                if interrupted is not None:
                    raise interrupted  # recorded as a failed attempt; now stop
            return ran
        finally:
            running.depth -= 1
            if ran and not running.depth:
                self._hand_over()

    # -- named tasks ----------------------------------------------------------

    @overload
    def task(
        self, func: Callable[TaskParams, R], /, **options: Unpack[TaskOptions]
    ) -> Task[TaskParams, R]: ...

    @overload
    def task(
        self, func: None = None, /, **options: Unpack[TaskOptions]
    ) -> Callable[[Callable[TaskParams, R]], Task[TaskParams, R]]: ...

    def task(
        self,
        func: Callable[TaskParams, R] | None = None,
        /,
        **options: Unpack[TaskOptions],
    ) -> Task[TaskParams, R] | Callable[..., Task[TaskParams, R]]:
        """Register a module-level function as a named task of this queue:
        ``@queue.task`` or ``@queue.task(name=..., max_attempts=...,
        priority=..., timeout=...)`` (``jobq.options.TaskOptions``).

        The task is found by ``name``, by default ``module.qualname``; a
        function in ``__main__``, a nested function or a lambda needs an
        explicit ``name`` (``ValueError`` otherwise), and a name another
        function holds in this queue raises ``ValueError``. ``max_attempts``
        (default: the queue's), ``priority`` and ``timeout`` (default: the
        queue's, at each enqueue) are the defaults of its jobs.
        See ``jobq.Task``.
        """
        check_names(options, TASK_OPTIONS, "task")

        def decorate(function: Callable[TaskParams, R]) -> Task[TaskParams, R]:
            return register(self, self._tasks, function, **options)

        return decorate if func is None else decorate(func)

    def periodic(
        self, **options: Unpack[PeriodicOptions]
    ) -> Callable[[Callable[..., R]], Task[..., R]]:
        """Register a function as a named task that this queue enqueues once
        per slot of a schedule, whatever the number of processes sharing
        its store: ``@queue.periodic(every=timedelta(minutes=10))`` or
        ``@queue.periodic(cron="0 3 * * *", tz="Europe/Berlin")``.

        ``every`` (seconds or ``timedelta``; slots at its multiples since
        the epoch) or ``cron`` (five fields, in the IANA zone ``tz``; needs
        ``jobq[cron]``), exactly one. The function takes no arguments, or
        ``scheduled_at`` (the slot, an aware ``datetime``). ``overlap``:
        ``"skip"`` a slot while the previous slot's job is pending or
        running, or ``"allow"`` it. ``catch_up``: after downtime, enqueue
        the ``"latest"`` missed slot, ``"none"``, or ``"all"`` (the latest
        ``max_catch_up``). ``name``, ``max_attempts``, ``priority`` and
        ``timeout`` as for ``task``. Slots are enqueued by this queue's
        workers (and ``run_pending``); see the README, "Periodic jobs".
        """
        check_names(options, PERIODIC_OPTIONS, "periodic")
        every, cron = options.get("every"), options.get("cron")
        slots = make_slots(every, cron, options.get("tz", "UTC"))
        overlap = options.get("overlap", "skip")
        catch_up = options.get("catch_up", "latest")
        if overlap not in OVERLAPS:
            raise ValueError(f"overlap must be one of {OVERLAPS}, not {overlap!r}")
        if catch_up not in CATCH_UPS:
            raise ValueError(f"catch_up must be one of {CATCH_UPS}, not {catch_up!r}")
        max_catch_up = check_int(options.get("max_catch_up", 100), "max_catch_up", 1)
        if options.get("isolate"):
            raise TypeError(
                "a periodic task cannot be isolated (isolate=True); have it "
                "enqueue a task that is: @queue.task(isolate=True)"
            )
        missing = missing_schedule_members(self.store)
        if missing:
            raise TypeError(
                f"{type(self.store).__name__} cannot run periodic jobs: it lacks "
                f"{', '.join(missing)} (see jobq.stores.base.ScheduleStore)"
            )

        def decorate(function: Callable[..., R]) -> Task[..., R]:
            if not callable(function):
                raise TypeError(f"@queue.periodic needs a function, not {function!r}")
            call, wants_slot = slot_caller(function, slots.tz)
            task: Task[..., R] = register(
                self,
                self._tasks,
                call,
                name=task_name(function, options.get("name")),
                max_attempts=options.get("max_attempts"),
                priority=options.get("priority", 0),
                timeout=options.get("timeout"),
            )
            self._periodics[task.name] = Periodic(
                task, slots, overlap, catch_up, max_catch_up, wants_slot
            )
            self._scheduler.added(task.name)
            with self._signal.lock:  # an idle worker looks at once
                self._signal.jobs_added_locked()
            return task

        return decorate

    # -- limits ---------------------------------------------------------------

    def limit(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        rate: str | None = None,
        burst: int = 1,
    ) -> None:
        """Declare a limit that jobs may run under (``limits=[...]``): at
        most ``concurrency`` attempts running at once and at most ``rate``
        starts (``"10/s"``, ``"100/m"``, ``"1000/h"``; evenly spaced,
        ``burst`` at once) across every process sharing the store. ``name``
        is exact, or a family's pattern (``"account:*"``: each
        ``account:<id>`` its own limit). Declare it in every process, before
        jobs under it are enqueued; the store holds the newest declaration
        and every process enforces that one (see the README's "Limits").
        Opens nothing: the store learns of it when it opens."""
        declared = new_limit(name, concurrency, rate, burst)
        missing = missing_limit_members(self.store)
        if missing:
            raise TypeError(
                f"{type(self.store).__name__} cannot hold limits: it lacks "
                f"{', '.join(missing)} (see jobq.stores.base.LimitStore)"
            )
        with self._lifecycle:
            self._limits.add(declared)
            if self._opened:
                self._limits.write(cast(LimitStore, self.store), [declared])

    def limits(self) -> list[LimitUsage]:
        """Every limit the store holds, by name, with the attempts running
        under it and the jobs it holds back now (a family's summed over its
        keys); ``[]`` for a store without limits."""
        self._ensure_open()
        if missing_limit_members(self.store):
            return []
        return cast(LimitStore, self.store).limit_usage(self._clock())

    def schedules(self) -> list[Schedule]:
        """The periodic jobs declared on this queue, then those its store
        still keeps but no code declares any more (``orphaned``), with
        their next slots, last slot and pause."""
        self._ensure_open()
        store = cast(ScheduleStore, self.store)
        states = [] if missing_schedule_members(store) else store.schedule_states()
        return self._scheduler.schedules(states, self._clock())

    def pause_schedule(self, name: str, *, by: str | None = None) -> bool:
        """Pause periodic job ``name`` in the store, for every process that
        shares it: each slot that falls while paused is passed over, never
        enqueued later. ``by`` says who paused it (this host and process by
        default). ``True`` if it ran, ``False`` if it was paused already;
        ``ValueError`` for a name neither declared on this queue nor stored.
        """
        who = _who(by)
        store = self._schedule_store(name)
        return store.pause_schedule(name, self._clock(), by=who)

    def resume_schedule(self, name: str) -> bool:
        """Resume periodic job ``name``: its next slot after now runs; the
        slots that fell while paused stay passed over (no burst). ``True``
        if it was paused, ``False`` if not; ``ValueError`` for a name
        neither declared on this queue nor stored."""
        store = self._schedule_store(name)
        return store.resume_schedule(name, self._clock())

    def run_schedule(self, name: str, *, by: str | None = None) -> Enqueued:
        """Enqueue one job of periodic job ``name`` now, by hand, taking no
        slot: the next slot runs as planned. Its key says so
        (``periodic:NAME@<now> (run now)``), its ``meta`` who asked
        (``jobq.run_by``: ``by``, this host and process by default), and a
        function that takes ``scheduled_at`` gets the time it was asked
        for. It runs whether the schedule is paused or not; with
        ``overlap="skip"`` it is refused while the schedule's last job is
        pending or running: that job is returned with ``duplicate=True``.
        ``ValueError`` unless this queue's code declares ``name`` (its task
        and options are in the code)."""
        who = _who(by)
        store = self._schedule_store(name)
        periodic = self._periodics.get(name)
        if periodic is None:
            raise not_declared(name)
        now = self._clock()
        job = self._schedule_job(
            periodic, now, at=now, key=run_now_key(name, now), meta={RUN_BY: who}
        )
        skip = periodic.overlap == "skip"
        result = store.enqueue_now(name, job, now, skip_running=skip)
        if not result.duplicate:
            self._slot_enqueued(result.id, name, now)
        return result

    def _schedule_store(self, name: object) -> ScheduleStore:
        """The open store, for an action on schedule ``name``: one declared
        here or stored (``TypeError``, ``ValueError`` otherwise)."""
        if not isinstance(name, str):
            raise TypeError(f"a schedule's name is a str, not {name!r}")
        self._ensure_open()
        store = cast(ScheduleStore, self.store)
        if name in self._periodics:
            return store
        stored = [] if missing_schedule_members(store) else store.schedule_states()
        if name not in {state.name for state in stored}:
            raise unknown_schedule(name, [*self._periodics, *(s.name for s in stored)])
        return store

    def _slot_job(self, periodic: Periodic, slot: float) -> NewJob:
        """The job of one slot: due at the slot, keyed by schedule and slot."""
        return self._schedule_job(
            periodic, slot, at=slot, key=slot_key(periodic.name, slot)
        )

    def _schedule_job(
        self,
        periodic: Periodic,
        scheduled_at: float,
        *,
        at: float,
        key: str,
        meta: Mapping[str, str] | None = None,
    ) -> NewJob:
        """A job of ``periodic``'s task with its options, for ``scheduled_at``."""
        task = periodic.task
        return self.prepare(
            [periodic.payload(scheduled_at)],
            at=at,
            key=key,
            meta=meta,
            priority=task.priority,
            timeout=task.timeout,
            limits=task.limits or None,
            task=task.name,
            max_attempts=task.max_attempts,
        )[0]

    def _slot_enqueued(self, job_id: int, task: str, now: float) -> None:
        callbacks = self._subscribers.enqueued
        if callbacks:
            publish(callbacks, new_event(ENQUEUED, job_id, task, 0, now))

    def child_setup(self, function: str, *args: Any) -> None:
        """Have each child process of this queue's isolated tasks call
        ``function`` (an import path, ``"module.name"``) with ``args`` (JSON
        values) before it imports a task: it sets up what the tasks need
        (an app, a framework) and returns ``None`` or a callable that gives
        a context manager, entered around each attempt (an app context).
        The Flask and Django integrations set theirs. Children started
        later use it."""
        path = _import_path(function)
        encode(list(args), "the arguments of child_setup")  # JSON, checked now
        self._child_setup = (path, list(args))
        self._isolation.setup = self._child_setup

    @property
    def tasks(self) -> Mapping[str, Task[Any, Any]]:
        """The named tasks registered with this queue, by name (read-only)."""
        return MappingProxyType(self._tasks)

    # -- looking and managing -------------------------------------------------

    def stats(self) -> Stats:
        """The queue as stored (``kept``: completed jobs kept, not expired),
        plus ``completed``, ``retried`` and ``abandoned`` (worker threads given
        up at a time limit and still alive) of this object."""
        self._ensure_open()
        stored = self.store.stats()
        counters = self._runner.counters
        return Stats(
            stored.pending,
            stored.running,
            stored.dead,
            counters.completed,
            counters.retried,
            self._pool.abandoned,
            stored.delayed,
            stored.kept,
            stored.cancelled,
            stored.waiting,
            stored.retrying,
        )

    @property
    def keep_completed(self) -> float:
        """Seconds a completed job is kept with its result (0: not kept)."""
        return self._keep_completed

    def finished_per_minute(self, minutes: int = 10) -> list[FinishedMinute] | None:
        """Jobs whose last attempt ended in each of the last ``minutes``
        minutes up to now's (the queue's clock), oldest first, as the store
        holds them across processes: kept completed jobs and dead ones.
        ``None`` where the store cannot tell (memory, JSON, or a store
        without ``finished_per_minute``: see ``jobq.stores.base``)."""
        if type(minutes) is not int or not 1 <= minutes <= MAX_MINUTES:
            raise ValueError(
                f"minutes must be an int from 1 to {MAX_MINUTES}, not {minutes!r}"
            )
        self._ensure_open()
        if not capabilities_of(self.store).finished_counts:
            return None
        read = cast(FinishedStore, self.store).finished_per_minute
        now = self._clock()
        last = int(now // 60)
        since = float((last - minutes + 1) * 60)
        found = {m.start: m for m in read(since, now)}
        return [
            found.get(start, FinishedMinute(start, 0, 0))
            for start in (float(m * 60) for m in range(last - minutes + 1, last + 1))
        ]

    def processes(self) -> list[ProcessInfo] | None:
        """The processes serving this queue (running workers), from every
        host, as their last beats left them in the store (a gone one shown
        for an hour); ``None`` where the store keeps no figures
        (``jobq.activity``)."""
        store = self._activity_store()
        return None if store is None else store.processes(self._clock())

    def activity(self, minutes: int = 60) -> list[ActivityMinute] | None:
        """Each of the last ``minutes`` minutes up to now's, oldest first:
        the attempts that succeeded and failed in it, the jobs that died or
        were cancelled, from every process, and the queue's depth sampled
        in it; ``None`` where the store keeps no figures. Counted by each
        process and written every few seconds (``jobq.activity``); the
        minutes that ended over a minute ago are read from the store once,
        then held for up to five minutes (``jobq._figure_cache``)."""
        since, now = self._minutes_back(minutes)
        store = self._activity_store()
        if store is None:
            return None
        return self._figure_cache.activity(store, since, now)

    def task_activity(self, minutes: int = 60) -> list[TaskActivity] | None:
        """Each task's outcomes over the last ``minutes`` minutes, from every
        process, with its attempts' median and 95th percentile durations
        and its newest failed attempt's error; ``None`` where the store
        keeps no figures. Held as ``activity``'s minutes are."""
        since, now = self._minutes_back(minutes)
        store = self._activity_store()
        return (
            None
            if store is None
            else self._figure_cache.task_activity(store, since, now)
        )

    def _minutes_back(self, minutes: int) -> tuple[float, float]:
        """The start of the minute ``minutes - 1`` before now's, and now."""
        if type(minutes) is not int or not 1 <= minutes <= MAX_MINUTES:
            raise ValueError(
                f"minutes must be an int from 1 to {MAX_MINUTES}, not {minutes!r}"
            )
        now = self._clock()
        return minute_of(now) - 60.0 * (minutes - 1), now

    def _activity_store(self) -> ActivityStore | None:
        """The store's figures, this queue's own counts handed over first
        when no beat will (no workers run here); ``None`` without them."""
        self._ensure_open()
        if not capabilities_of(self.store).activity:
            return None
        self._hand_over()
        return cast(ActivityStore, self.store)

    def _hand_over(self) -> None:
        """Write this queue's uncounted outcomes now, where no workers'
        beat will (``run_pending``, ``cancel`` in a process without
        workers); kept for the next time if the store fails."""
        heartbeat = self._pool.heartbeat
        if heartbeat is None or self._pool.running:
            return
        try:
            heartbeat.hand_over(self._runner.tally)
        except Exception:
            logger.warning("could not write this queue's figures", exc_info=True)

    def browse(
        self,
        view: str,
        *,
        limit: int = 50,
        after: str | None = None,
        task: str | None = None,
        key: str | None = None,
        error: str | None = None,
    ) -> JobPage:
        """One page of a job list: ``view`` is ``"due"`` (in run order),
        ``"delayed"`` (never attempted), ``"retrying"`` (after a failed
        attempt; both earliest due first), ``"running"``, ``"waiting"`` (for
        a parent: by id), ``"dead"`` (newest death first), ``"completed"`` or
        ``"cancelled"``; ``after`` the cursor of the page before; filters by
        task name, key (exact) and text of the last error. Keyset pages:
        see ``jobq.stores.pages``."""
        query = JobQuery(view, limit, after, task, key, error)
        self._ensure_open()
        now = self._clock()
        if not capabilities_of(self.store).pages:
            return page_from_list(self.store, query, now)
        return cast(PageStore, self.store).page_jobs(query, now)

    @property
    def clock(self) -> Callable[[], float]:
        """The queue's clock (epoch seconds): ``time.time`` unless one was
        given; the clock of ``next_due`` and of every ``Event``."""
        return self._clock

    def next_due(self) -> float | None:
        """When the job that runs next fell or falls due (epoch seconds,
        the queue's clock; ``None``: nothing is pending), across processes.

        ``clock() - next_due()``, when positive, is how long that job has
        waited: the oldest wait of all unless priorities put a younger job
        first. One indexed read on SQLite and PostgreSQL, O(1) in memory."""
        self._ensure_open()
        return self.store.next_due()

    def worker_stats(self) -> WorkerStats:
        """This process's worker threads: ``busy`` (running a handler now),
        ``idle`` (waiting for a job) and ``lost`` (abandoned at a time limit
        and not replaced, ``max_abandoned`` being reached: the pool is
        degraded while it is above 0); all 0 while not started. Handlers
        running in ``run_pending`` count as busy. Reads counts without a
        lock: for metrics, not for decisions."""
        pool = self._pool
        busy = len(self._runner.active)
        workers = pool.workers if pool.running else 0
        lost = pool.lost
        return WorkerStats(busy, max(workers - lost - busy, 0), lost)

    def get(self, job: JobRef) -> JobRecord[P] | None:
        """A pending, running, dead or kept completed job; ``None`` if none."""
        job_id = _job_id(job)
        self._ensure_open()
        if job_id is None:
            return None
        return self.store.get(job_id, self._clock())

    def dead_jobs(self) -> list[JobRecord[P]]:
        """The dead-letter list, oldest first."""
        self._ensure_open()
        return self.store.list_jobs(JobState.DEAD)

    def retry_dead(self, job: JobRef) -> bool:
        """Make a dead job pending again with its attempts reset."""
        return self._manage(job, EventKind.REVIVED, self.store.revive, True)

    def delete_dead(self, job: JobRef) -> bool:
        """Remove a dead job for good."""
        return self._manage(job, EventKind.DELETED, self.store.delete_dead)

    def cancel(
        self, job: JobRef, *, wait: Delay | None = None, by: str | None = None
    ) -> bool:
        """Cancel a job: a pending one ends ``cancelled`` now; a running one
        is asked to stop, whichever process runs it (see the README's section
        "Cancelling jobs"). ``True`` if it was pending or running, ``False``
        if it had finished, was dead or cancelled, or is unknown.

        ``wait`` (seconds): wait up to that long for a running job to stop,
        and return whether it did. ``by`` says who asked, kept with the job
        (``JobRecord.cancellation``): this host and process by default.
        """
        seconds = None if wait is None else to_seconds(wait, "wait")
        who = _who(by)
        job_id = _job_id(job)
        self._ensure_open()
        if job_id is None:
            return False
        if seconds and (claim := current_claim()) is not None and claim.id == job_id:
            raise RuntimeError(
                "cancel(wait=...) was called from the handler of the job it "
                "cancels: it would wait for itself. Cancel without wait, or "
                "return from the handler; nothing was changed"
            )
        now = self._clock()
        callbacks = self._subscribers.cancelled
        record = self.store.get(job_id, now)  # its task, for the events and figures
        outcome = self.store.cancel(
            job_id, now, by=who, keep_until=now + self.keep_cancelled
        )
        if outcome == "cancelled":
            task = None if record is None else record.task
            self._runner.tally.count(task, CANCELLED)
            self._hand_over()
            if callbacks:
                publish(callbacks, new_event(EventKind.CANCELLED, job_id, task, 0, now))
            return True
        if outcome is None:
            return False
        self._pool.stop_job(job_id)  # at once, if it runs here
        return seconds is None or self._stopped(job_id, seconds)

    def wait(self, job: JobRef, timeout: Delay | None = None) -> JobRecord[P] | None:
        """The job's record once it has finished (completed, dead or
        cancelled); ``None`` if ``timeout`` seconds passed first.

        Woken as a job of this process settles, and where the store tells
        of other processes' changes (SQLite, PostgreSQL), as they settle
        theirs; it looks at least once a second regardless. A completed
        job is read from the store, so it must be kept (``keep_completed``):
        a job that is gone, finished and not kept or never added, raises
        ``LookupError``. From inside the handler of that very job it raises
        ``RuntimeError`` (it would wait for itself).
        """
        seconds = _timeout(timeout)
        job_id = _job_id(job)
        self._ensure_open(start=True)
        if (claim := current_claim()) is not None and claim.id == job_id:
            raise RuntimeError(
                f"wait() was called from the handler of job {job_id}: it would "
                "wait for itself"
            )
        deadline = None if seconds is None else time.monotonic() + seconds
        found: list[JobRecord[P] | None] = [None]

        def finished() -> bool:
            record = None if job_id is None else self.store.get(job_id, self._clock())
            found[0] = record
            return record is None or record.state in _FINISHED

        if not self._until_settled(finished, deadline, look=1.0):
            return None
        if found[0] is None:
            raise LookupError(
                f"job {job if job_id is None else job_id} is not in the queue: it "
                "finished and was not kept (keep_completed is "
                f"{self._keep_completed:g}), or was never added"
            )
        return found[0]

    def _released(self, jobs: Sequence[tuple[int, str | None]]) -> None:
        """Publish ``released`` for waiting jobs the store made pending."""
        callbacks = self._subscribers.released
        if callbacks:
            now = self._clock()
            for job_id, task in jobs:
                publish(callbacks, new_event(EventKind.RELEASED, job_id, task, 0, now))

    def _stopped(self, job_id: int, seconds: float) -> bool:
        """Whether the job stopped running within ``seconds``: woken when a
        job of this process settles, looking at least every ``STOP_LOOK``
        seconds (another process may run it)."""

        def stopped() -> bool:
            record = self.store.get(job_id, self._clock())
            return record is None or record.state is not JobState.RUNNING

        return self._until_settled(stopped, time.monotonic() + seconds, look=STOP_LOOK)

    def _manage(
        self,
        job: JobRef,
        kind: EventKind,
        change: Callable[..., bool],
        at_now: bool = False,
    ) -> bool:
        """``change`` the job (``retry_dead``, ``delete_dead``, ``cancel``),
        then publish ``kind`` if it changed. The job's task name comes from
        a look at the job first, only when someone subscribed."""
        job_id = _job_id(job)
        self._ensure_open()
        if job_id is None:
            return False
        now = self._clock()
        task = None
        callbacks = self._subscribers.of(kind)
        if callbacks:
            record = self.store.get(job_id, now)
            task = None if record is None else record.task
        changed = change(job_id, now) if at_now else change(job_id)
        if changed and callbacks:
            publish(callbacks, new_event(kind, job_id, task, 0, now))
        return changed

    def save(self) -> None:
        """Write the store now."""
        self._ensure_open()
        self.store.save()

    # -- helpers --------------------------------------------------------------

    def _in_handler(self) -> bool:
        """Whether the calling thread may be inside a handler of this queue:
        it is one of this queue's worker threads, or inside its
        ``run_pending`` (immediate mode included).

        Such a thread runs nothing but jobq's code and the handlers, so no
        flag needs setting around each handler call (the per-job hot path);
        and it is per queue, so a handler may still join another queue.
        """
        return self._pool.runs_in_current_thread() or self._running_due.depth > 0

    def _refuse_in_handler(self, call: str) -> None:
        """``RuntimeError`` for ``join``, ``stop`` or ``close`` called from a
        handler of this queue: each would wait for the handler itself (and a
        ``close`` would release the store under its running job)."""
        if self._in_handler():
            raise RuntimeError(
                f"{call}() was called from inside a handler of this queue: "
                f"{_WHY_NOT_IN_HANDLER[call]}. Call it from another thread (a "
                "handler may set an Event that thread waits for); nothing was "
                "changed"
            )

    def _check_open(self) -> None:
        """``QueueClosed`` after ``close()``."""
        if self._closed:
            raise QueueClosed("this queue was closed")

    def _ensure_open(self, *, start: bool = False) -> None:
        """Open the store if needed; with ``start``, also start the workers
        that are wished for on first use (see ``start(lazy=True)``)."""
        self._check_open()
        if not self._opened or (start and self._start_on_use):
            with self._lifecycle:
                self._open_locked(start=start)

    def _open_locked(self, *, start: bool = False) -> None:
        self._check_open()
        if not self._opened:
            self.store.open(self._signal, dead_letter_limit=self.dead_letter_limit)
            if self._limits:
                self._limits.write(cast(LimitStore, self.store))
            self._opened = True
            _open_queues.add(self)
        if start and self._start_on_use and not _shutting_down():
            # JSON: while another process (say, the parent of this forked
            # child) owns the file, reading works and a change raises
            # StoreLocked itself; the workers start with the first use after
            # that process released the file (or died).
            with contextlib.suppress(StoreLocked):
                self._start_locked(self._start_on_use)

    def _require_handler(self) -> None:
        if self._handler is None and not self._tasks and self.resolve_task is None:
            raise TypeError(
                "this queue has no handler and no tasks: pass a handler to "
                "JobQueue(handler) or register tasks with @queue.task"
            )


class _Depth(threading.local):
    """How deep the current thread is in nested calls of one queue's
    ``run_pending`` (a ``threading.local``: each thread has its own)."""

    depth = 0


_WHY_NOT_IN_HANDLER = {
    "join": "it would wait for this handler's own job, which cannot end "
    "before the handler returns",
    "stop": "it would wait for this handler to return",
    "close": "it would wait for this handler to return, and release the store "
    "before this handler's job is recorded",
}


#: The states a job ends in: what ``wait`` waits for.
_FINISHED = frozenset((JobState.COMPLETED, JobState.DEAD, JobState.CANCELLED))


def _timeout(timeout: object) -> float | None:
    """A ``timeout`` argument in seconds, or ``None`` (no limit).

    Like every duration the queue takes: a number or a ``timedelta``,
    finite and >= 0, checked at the call (``TypeError``, ``ValueError``): a
    NaN or an infinity would otherwise wait forever, or not at all.
    """
    return None if timeout is None else to_seconds(timeout, "timeout")


def _import_path(value: object) -> str:
    """``value`` if it reads as an import path (``"module.name"``)."""
    if not isinstance(value, str) or "." not in value:
        raise TypeError(
            f"an import path such as 'myapp.jobs.setup' is needed, not {value!r}"
        )
    return value


def _who(by: object) -> str:
    """Who cancels, as kept with the job: ``by`` checked (text every store
    holds, at most ``MAX_BY`` characters), or this host and process."""
    if by is None:
        return f"{socket.gethostname()} pid {os.getpid()}"
    if not isinstance(by, str):
        raise TypeError(f"by must be a str or None, not {by!r}")
    if not 0 < len(by) <= MAX_BY:
        raise ValueError(f"by must be 1 to {MAX_BY} characters, not {len(by)}")
    return check_text(by, "by")


def _optional_limit(value: int | None, name: str, minimum: int = 1) -> int | None:
    return None if value is None else check_int(value, name, minimum)


def _job_id(job: JobRef) -> int | None:
    """The id ``job`` names; ``None`` for an id no store can hold (no such job)."""
    return stored_id(job.id if isinstance(job, Enqueued) else job)
