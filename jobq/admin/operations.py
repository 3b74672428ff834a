"""What each ``jobq`` command does, as plain functions: a queue (or store)
and plain values in, plain values out.

``jobq`` (argparse, ``jobq.cli``), ``flask jobq`` and ``manage.py jobq``
parse their arguments their own way, call these, and print what they
return with ``jobq.admin.render``. A command that cannot do what it was asked
raises ``CommandError`` (its ``message`` is one line for the user, its
``code`` the exit status); a failing store raises ``jobq.JobqError``, which
``command_error`` turns into a ``CommandError`` with the same message
(and advice for ``StoreLocked``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol, TypeVar, cast

from jobq.activity import ProcessInfo
from jobq.admin.family import RELATIVES_SHOWN, Family, Relative, family, relatives
from jobq.admin.render import escape, plural
from jobq.errors import JobqError, StoreLocked
from jobq.queue import JobQueue
from jobq.stores import Store
from jobq.stores.base import SchemaStore, capabilities_of, location_of
from jobq.types import JobRecord, JobState, LimitUsage, Schedule, Stats

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_STILL_RUNNING",
    "EXIT_USAGE",
    "LOG_LEVELS",
    "RELATIVES_SHOWN",
    "SCHEDULE_BY",
    "SHUTDOWN_TIMEOUT",
    "Cancel",
    "CommandError",
    "Family",
    "Migratable",
    "Migration",
    "NoSuchJob",
    "NotConfirmed",
    "Relative",
    "StillRunning",
    "Writer",
    "cancel",
    "cancelled",
    "command_error",
    "dead",
    "delete",
    "describe_store",
    "family",
    "limits",
    "migrate",
    "pause_schedule",
    "processes",
    "purge_dead",
    "relatives",
    "resume_schedule",
    "retry",
    "run_schedule",
    "run_worker",
    "schedules",
    "show",
    "stats",
]

logger = logging.getLogger("jobq")

Queue = JobQueue[Any]
_T = TypeVar("_T")

EXIT_OK = 0
#: No such job, a job not in the needed state, or a store that failed.
EXIT_FAILED = 1
#: A usage error: bad options, an unknown store URL scheme, a bad ``--app``.
EXIT_USAGE = 2
#: ``cancel --wait``: the job was asked to stop, and still ran when the wait
#: ended (not 2, which scripts already read as a usage error).
EXIT_STILL_RUNNING = 3

#: How long ``jobq worker`` waits for running jobs after SIGTERM or SIGINT.
SHUTDOWN_TIMEOUT = 30.0

#: The levels ``--log-level`` offers.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

#: Jobs read per page by a command that lists a whole ``browse`` list.
_PAGE = 500

#: Who ``jobq cancel`` says asked (``Cancellation.by``).
CANCELLED_BY = "jobq cancel"

#: Seconds between the worker's looks at whether a signal asked it to stop.
_STOP_POLL = 0.2


class Writer(Protocol):
    """Where a command writes: ``sys.stdout``, a ``io.StringIO``, or a
    framework's output stream (anything with ``write(str)``)."""

    def write(self, text: str, /) -> object: ...


class CommandError(Exception):
    """A problem to report in one line, with the exit status to return."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class NotConfirmed(CommandError):
    """A command that would destroy jobs was not confirmed (``--yes``):
    the message says what it would do (status 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


class NoSuchJob(CommandError):
    """The job id names no job (status 1)."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"no job {job_id}")
        self.job_id = job_id


class StillRunning(CommandError):
    """``cancel --wait``: the job was asked to stop but still runs (status 3);
    it stops when its handler next runs a line of its own, or is abandoned
    after ``timeout_grace``."""

    def __init__(self, job_id: int, wait: float) -> None:
        super().__init__(
            f"job {job_id} was asked to stop but still runs after {wait:g} s; "
            "it ends cancelled when its handler stops",
            EXIT_STILL_RUNNING,
        )
        self.job_id = job_id


def command_error(exc: JobqError) -> CommandError:
    """A store's error as the commands report it (status 1)."""
    if isinstance(exc, StoreLocked):
        return CommandError(
            f"{exc} Only the process that owns a JSON store can change it: stop "
            "that process, or change the job from it."
        )
    return CommandError(str(exc))


# -- looking -----------------------------------------------------------------------


def stats(queue: Queue) -> Stats:
    """Pending (delayed included), running and dead jobs as stored."""
    return queue.stats()


def schedules(queue: Queue) -> list[Schedule]:
    """The periodic jobs ``queue``'s code declares, then those its store
    keeps that no code declares (orphaned). With ``--store`` alone no code
    is loaded, so every stored schedule shows as orphaned."""
    return queue.schedules()


def limits(queue: Queue) -> list[LimitUsage]:
    """Each limit the store holds (declared by any process sharing it), by
    name, with the attempts running under it and the jobs it holds back now
    (a family's summed over its keys); ``[]`` for a store without limits."""
    return queue.limits()


def processes(queue: Queue) -> list[ProcessInfo] | None:
    """The processes serving ``queue`` (running workers), from every host,
    as their last beats left them in the store; ``None`` for a store that
    keeps no figures."""
    return queue.processes()


def dead(queue: Queue) -> list[JobRecord[Any]]:
    """The dead-letter list, oldest first."""
    return queue.dead_jobs()


def cancelled(queue: Queue) -> list[JobRecord[Any]]:
    """The cancelled jobs kept (``keep_cancelled``), newest first."""
    return list(_every("cancelled", queue))


def _every(view: str, queue: Queue) -> Iterator[JobRecord[Any]]:
    """Every job of one of ``browse``'s lists, page after page."""
    after = None
    while True:
        page = queue.browse(view, limit=_PAGE, after=after)
        yield from page.jobs
        if page.after is None:
            return
        after = page.after


def show(queue: Queue, job_id: int) -> JobRecord[Any]:
    """One job in any state, with its kept errors; ``NoSuchJob`` if none."""
    record = queue.get(job_id)
    if record is None:
        raise NoSuchJob(job_id)
    return record


# -- changing --------------------------------------------------------------------


def retry(queue: Queue, job_id: int) -> int:
    """Make a dead job pending again, due now, with its attempts reset;
    returns its id. ``CommandError`` (``NoSuchJob``) saying why not."""
    if not queue.retry_dead(job_id):
        raise _not_dead(queue, job_id, "retried")
    return job_id


def delete(queue: Queue, job_id: int) -> int:
    """Remove a dead job for good; returns its id. ``CommandError``
    (``NoSuchJob``) saying why not."""
    if not queue.delete_dead(job_id):
        raise _not_dead(queue, job_id, "deleted")
    return job_id


def purge_dead(queue: Queue, *, yes: bool) -> int:
    """Remove every dead job; how many were removed. Without ``yes`` nothing
    is removed: ``NotConfirmed`` (status 2) says how many would be."""
    records = queue.dead_jobs()
    if not yes:
        raise NotConfirmed(
            f"this would delete {plural(len(records), 'dead job')} for good; "
            "pass --yes to do it"
        )
    return sum(1 for record in records if queue.delete_dead(record.id))


@dataclass(frozen=True)
class Cancel:
    """What ``cancel`` did to job ``id``: it was ``pending`` or ``waiting``
    (now cancelled) or running; ``state`` is the job's state after the
    request (``None``: it finished and was not kept). A running job without
    a wait is still ``running``, asked to stop; after a wait it is
    ``cancelled``, or ``completed`` when its handler returned normally after
    all."""

    id: int
    was: JobState
    state: JobState | None

    @property
    def outcome(self) -> str:
        """``cancelled``, ``stopping`` (asked to stop, not waited for),
        ``completed`` (its handler returned after the request: its work is
        done) or ``stopped`` (it ended and was not kept)."""
        if self.state is None:
            return "stopped" if self.was is JobState.RUNNING else "cancelled"
        if self.state is JobState.RUNNING:
            return "stopping"
        return str(self.state)


def cancel(
    queue: Queue, job_id: int, *, wait: float | None = None, by: str = CANCELLED_BY
) -> Cancel:
    """Cancel a pending or waiting job, or ask a running one to stop (waiting
    up to ``wait`` seconds for it to). ``NoSuchJob``, ``CommandError`` for a
    job that is not pending, waiting or running, ``StillRunning`` (status 3) when it
    still runs after ``wait``."""
    before = show(queue, job_id)
    if before.state not in _CANCELLABLE:
        raise _not_cancellable(before)
    done = queue.cancel(job_id, wait=wait, by=by)
    after = queue.get(job_id)
    if wait is not None and after is not None and after.stopping:
        raise StillRunning(job_id, wait)
    if not done and (after is None or after.cancellation is None):
        raise CommandError(f"job {job_id} was not cancelled; it changed meanwhile")
    state = None if after is None else after.state
    return Cancel(job_id, before.state, state)


#: Who ``jobq pause-schedule`` and ``jobq run-schedule`` say asked.
SCHEDULE_BY = "jobq"


def pause_schedule(queue: Queue, name: str, *, by: str = SCHEDULE_BY) -> bool:
    """Pause periodic job ``name`` in the store, for every process sharing
    it (its slots are passed over until resumed); ``False`` if it was
    paused already. ``CommandError`` for a name no code loaded here declares
    and the store does not keep."""
    return _on_schedule(lambda: queue.pause_schedule(name, by=by))


def resume_schedule(queue: Queue, name: str) -> bool:
    """Resume periodic job ``name``: its next slot runs, the slots passed
    over stay so; ``False`` if it was not paused. ``CommandError`` as for
    ``pause_schedule``."""
    return _on_schedule(lambda: queue.resume_schedule(name))


def run_schedule(queue: Queue, name: str, *, by: str = SCHEDULE_BY) -> int:
    """Enqueue one job of periodic job ``name`` now, taking no slot; its
    id. ``CommandError`` for a name the code loaded here does not declare
    (its task is in the code: ``--app``), or when ``overlap="skip"``
    refuses it while the schedule's last job is pending or running."""
    added = _on_schedule(lambda: queue.run_schedule(name, by=by))
    if added.duplicate:
        raise CommandError(
            f"schedule {name!r} was not run: its job {added.id} is still "
            "pending or running, and it skips overlapping runs (overlap='skip')"
        )
    return added.id


def _on_schedule(change: Callable[[], _T]) -> _T:
    """``change()``, its ``ValueError`` (an unknown or undeclared schedule,
    a bad ``by``) as a ``CommandError``."""
    try:
        return change()
    except (TypeError, ValueError) as exc:
        raise CommandError(escape(str(exc))) from None


#: The states ``cancel`` acts on.
_CANCELLABLE = (JobState.PENDING, JobState.WAITING, JobState.RUNNING)


def _not_cancellable(record: JobRecord[Any]) -> CommandError:
    """Why a job that is neither pending nor running cannot be cancelled."""
    return CommandError(
        f"job {record.id} is {record.state}; only a pending, waiting or running "
        "job can be cancelled"
    )


def _not_dead(queue: Queue, job_id: int, done: str) -> CommandError:
    """Why ``retry_dead`` or ``delete_dead`` of ``job_id`` changed nothing."""
    record = queue.get(job_id)
    if record is None:
        return NoSuchJob(job_id)
    if record.state != JobState.DEAD:
        return CommandError(
            f"job {job_id} is {record.state}, not dead; it was not {done}"
        )
    if done == "retried" and record.key is not None:
        return CommandError(
            f"job {job_id} was not retried: its key {escape(record.key)!r} is held "
            "by another pending or running job"
        )
    return CommandError(f"job {job_id} was not {done}; it changed meanwhile")


# -- the schema --------------------------------------------------------------------

#: What ``Capabilities.schema`` promises, a store with a schema, by its first
#: name (``jobq.cli.operations.Migratable``).
Migratable = SchemaStore


@dataclass(frozen=True)
class Migration:
    """What ``migrate`` did: the store (as ``describe_store`` names it) and
    its schema version now; ``version`` is None for a store without a schema
    (JSON file, memory)."""

    store: str
    version: int | None


def migrate(store: Store) -> Migration:
    """Create ``store``'s schema, or bring it to this jobq's version (SQLite
    and PostgreSQL, or any store with the ``schema`` capability); a store
    without a schema needs nothing."""
    where = describe_store(store)
    if capabilities_of(store).schema:
        return Migration(where, cast(SchemaStore, store).migrate())
    return Migration(where, None)


def describe_store(store: Store) -> str:
    """Where a store keeps its jobs, for people (its ``location``)."""
    return location_of(store)


# -- the worker --------------------------------------------------------------------


def run_worker(
    queue: Queue,
    *,
    workers: int = 4,
    shutdown_timeout: float = SHUTDOWN_TIMEOUT,
    log_level: str = "INFO",
    err: Writer | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Run ``queue``'s ``workers`` in the foreground until SIGTERM or SIGINT
    (or until ``stop`` is set), then close the queue, waiting at most
    ``shutdown_timeout`` seconds for running jobs; a second signal exits at
    once. ``CommandError`` if the queue has no handler and no tasks.

    Signal handlers are installed only when called from the main thread, and
    the previous ones are restored on return. Logs (at ``log_level``) go to
    ``err`` (default: ``sys.stderr``) if the ``jobq`` logger has nowhere else
    to go.
    """
    level = logging.getLevelName(log_level)
    with _log_to(err, level):
        if not queue.store.keeps_results:
            logger.warning(
                "this queue keeps its jobs in memory: only jobs enqueued in this "
                "process run, and they are lost when it exits"
            )
        waiter = _StopWaiter(stop)
        with waiter.handling_signals():  # before start: a signal always stops
            try:
                queue.start(workers=workers)
            except TypeError as exc:  # no handler
                raise CommandError(str(exc)) from None
            logger.info(
                "jobq worker %d started: %s on %s",
                os.getpid(),
                plural(workers, "worker"),
                describe_store(queue.store),
            )
            waiter.wait()
            logger.info(
                "stopping (%s): waiting up to %g s for running jobs",
                waiter.reason,
                shutdown_timeout,
            )
            waiter.run(lambda: queue.close(timeout=shutdown_timeout))
        logger.info("jobq worker %d stopped", os.getpid())


class _StopWaiter:
    """Waits for SIGTERM, SIGINT or an event; a second signal exits at once.

    The signal handler only records the signal (setting an ``Event`` from a
    handler could deadlock on the lock the interrupted main thread holds);
    ``wait`` looks every ``_STOP_POLL`` seconds.

    Python runs the handler in the main thread, between two bytecodes: while
    the main thread blocks in a long wait, the handler may not run until the
    wait ends. A signal interrupts the wait only if the kernel hands it to the
    main thread (it may pick any thread) and only if it comes once the wait
    has begun (one that comes just before is seen when the wait ends). So the
    main thread never blocks for long while signals may come: ``wait`` polls,
    and ``run`` runs the shutdown in a helper thread that it joins in polls.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, stop: threading.Event | None) -> None:
        self.stop = stop
        self.signum: int | None = None

    @property
    def reason(self) -> str:
        if self.signum is not None:
            return signal.Signals(self.signum).name
        return "asked to stop"

    def wait(self) -> None:
        event = self.stop or threading.Event()
        while self.signum is None and not event.is_set():
            event.wait(_STOP_POLL)

    def run(self, work: Callable[[], object]) -> None:
        """``work()``, which may block for long (``queue.close``): from the main
        thread in a helper thread, waited for every ``_STOP_POLL`` seconds, so
        that a second signal exits within that long; from another thread
        (no signal handlers) directly. Its exception is raised here."""
        if threading.current_thread() is not threading.main_thread():
            work()
            return
        failed: list[BaseException] = []

        def call() -> None:
            try:
                work()
            except BaseException as exc:  # noqa: BLE001 - raised again below
                failed.append(exc)

        helper = threading.Thread(target=call, name="jobq-worker-stop", daemon=True)
        helper.start()
        while helper.is_alive():
            helper.join(_STOP_POLL)
        if failed:
            raise failed[0]

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:  # the second signal: do not wait any longer
            with contextlib.suppress(OSError):
                os.write(2, b"jobq worker: second signal, exiting now\n")
            os._exit(128 + signum)
        self.signum = signum

    @contextlib.contextmanager
    def handling_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class _EscapingFormatter(logging.Formatter):
    """Log lines as text a terminal cannot be driven by (tracebacks keep
    their line breaks; job errors in messages are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        return escape(super().format(record), keep="\n")


def _has_handlers(logger_: logging.Logger) -> bool:
    """Whether records of ``logger_`` reach a handler other than a NullHandler."""
    current: logging.Logger | None = logger_
    while current is not None:
        if any(not isinstance(h, logging.NullHandler) for h in current.handlers):
            return True
        if not current.propagate:
            return False
        current = current.parent
    return False


@contextlib.contextmanager
def _log_to(stream: Writer | None, level: int) -> Iterator[None]:
    """Send the ``jobq`` logger to ``stream`` (default: ``sys.stderr``)
    meanwhile, unless the application configured logging (then its
    configuration decides)."""
    if _has_handlers(logger):
        yield
        return
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(
        _EscapingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
