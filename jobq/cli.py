"""The ``jobq`` command: look at a queue, manage its dead jobs, run its workers.

::

    jobq stats      [--json]                 pending, running and dead counts
    jobq dead       [--json]                 the dead-letter list, oldest first
    jobq show ID    [--json]                 one job with every attempt's error
    jobq retry ID   [--json]                 make a dead job pending again
    jobq delete ID  [--json]                 remove a dead job
    jobq purge-dead --yes [--json]           remove every dead job
    jobq worker --app MODULE:ATTRIBUTE [--workers N] [--shutdown-timeout S]

Every command finds the jobs with ``--store URL_OR_PATH`` (or the environment
variable ``JOBQ_STORE``) or with ``--app MODULE:ATTRIBUTE``, a ``JobQueue`` in
the application's code whose store is then used; ``worker`` needs ``--app``,
since that queue's handler runs the jobs. Exit status: 0 done; 1 no such job,
not in the needed state, or the store failed; 2 a usage error.

Built on ``argparse``, so the command needs nothing beyond the standard
library. Each command is an ``add_<cmd>_arguments(parser)`` plus a
``run_<cmd>(queue, args, out) -> int``: framework commands (``flask jobq``,
``manage.py jobq``) reuse them with a queue of their own. ``run_*`` functions
write results to ``out`` and problems to ``err`` (``sys.stderr`` by default)
and let ``jobq.JobqError`` propagate (``main`` reports it with status 1).

Stored text is data from whoever enqueued the job or raised the error, so
everything shown from a job (payload, key, task, errors, tracebacks, result)
passes through ``escape``: control characters such as ESC, line breaks in
one-line fields, and other non-printable characters appear as escapes like
``\\x1b`` and ``\\n``, never raw, so a job cannot drive the terminal. ``--json``
output is ASCII-only JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib
import json
import logging
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol

import jobq
from jobq.errors import JobqError, StoreLocked
from jobq.queue import JobQueue
from jobq.stores import (
    JsonFileStore,
    MemoryStore,
    PostgresStore,
    SqliteStore,
    Store,
    store_from,
)
from jobq.types import JobRecord, JobState

__all__ = [
    "COMMANDS",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "Command",
    "CommandError",
    "Writer",
    "add_dead_arguments",
    "add_delete_arguments",
    "add_purge_dead_arguments",
    "add_queue_arguments",
    "add_retry_arguments",
    "add_show_arguments",
    "add_stats_arguments",
    "add_worker_arguments",
    "build_parser",
    "escape",
    "job_details",
    "job_summary",
    "load_app",
    "main",
    "queue_from_args",
    "run_dead",
    "run_delete",
    "run_purge_dead",
    "run_retry",
    "run_show",
    "run_stats",
    "run_worker",
]

logger = logging.getLogger("jobq")

EXIT_OK = 0
#: No such job, a job not in the needed state, or a store that failed.
EXIT_FAILED = 1
#: A usage error: bad options, an unknown store URL scheme, a bad ``--app``.
EXIT_USAGE = 2

#: The environment variable that names the store when ``--store`` is not given.
STORE_ENV = "JOBQ_STORE"

#: Characters of a text column in ``jobq dead`` beyond which it is cut.
KEY_WIDTH = 32
ERROR_WIDTH = 72

#: How long ``jobq worker`` waits for running jobs after SIGTERM or SIGINT.
SHUTDOWN_TIMEOUT = 30.0

#: Seconds between the worker's looks at whether a signal asked it to stop.
_STOP_POLL = 0.2

Queue = JobQueue[Any]


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


# -- rendering -----------------------------------------------------------------

_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape(text: str, *, keep: str = "") -> str:
    """``text`` safe to write to a terminal.

    Every non-printable character (``str.isprintable``: control characters
    such as ESC and line breaks, C1 controls, bidirectional overrides, lone
    surrogates) becomes an escape as ``repr`` writes it (``\\x1b``, ``\\n``,
    ``\\u202e``); printable text, non-ASCII letters included, stays as it is.
    Characters in ``keep`` (e.g. ``"\\n"`` for a traceback) stay too.
    """
    if text.isprintable():
        return text
    return "".join(
        ch if ch.isprintable() or ch in keep else _escape_char(ch) for ch in text
    )


def _escape_char(ch: str) -> str:
    named = _NAMED_ESCAPES.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _json_text(value: Any) -> str:
    """A payload or result as one escaped line of JSON."""
    return escape(json.dumps(value, ensure_ascii=False))


def _when(epoch: float | None) -> str:
    """Epoch seconds as UTC time for people; ``-`` for none."""
    if epoch is None:
        return "-"
    try:
        moment = dt.datetime.fromtimestamp(epoch, dt.UTC)
    except (OverflowError, OSError, ValueError):
        return repr(epoch)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _buried_at(record: JobRecord[Any]) -> float | None:
    """When a dead job died: the time of its last failed attempt."""
    if record.state != JobState.DEAD or not record.errors:
        return None
    return record.errors[-1].at


def job_summary(record: JobRecord[Any]) -> dict[str, Any]:
    """A job as ``jobq dead --json`` lists it (stable keys; times are epoch
    seconds; ``buried_at`` is ``null`` unless the job is dead)."""
    return {
        "id": record.id,
        "state": str(record.state),
        "attempts": record.attempts,
        "max_attempts": record.max_attempts,
        "priority": record.priority,
        "key": record.key,
        "task": record.task,
        "created_at": record.created_at,
        "run_at": record.run_at,
        "buried_at": _buried_at(record),
        "last_error": record.last_error,
        "payload": record.payload,
    }


def job_details(record: JobRecord[Any]) -> dict[str, Any]:
    """A job as ``jobq show --json`` prints it: the summary plus ``result``
    and ``errors`` (one object per kept failed attempt, oldest first)."""
    details = job_summary(record)
    details["result"] = record.result
    details["errors"] = [
        {
            "type": error.type,
            "message": error.message,
            "traceback": error.traceback,
            "at": error.at,
        }
        for error in record.errors
    ]
    return details


def _write_json(out: Writer, value: Any) -> None:
    out.write(json.dumps(value, indent=2, ensure_ascii=True) + "\n")


def _write_table(
    out: Writer, headers: Sequence[str], rows: Sequence[Sequence[str]]
) -> None:
    """Columns padded to their widest cell; the first column right-aligned."""
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        cells = [
            cell.rjust(width) if i == 0 else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        out.write("  ".join(cells).rstrip() + "\n")


def _write_fields(out: Writer, fields: Sequence[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        out.write(f"{name.ljust(width)}  {value}\n")


def _optional(text: str | None, width: int | None = None) -> str:
    if text is None:
        return "-"
    shown = escape(text)
    return shown if width is None else _cut(shown, width)


def _flag(args: argparse.Namespace, name: str) -> bool:
    return bool(getattr(args, name, False))


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


# -- stats ---------------------------------------------------------------------


def add_stats_arguments(parser: argparse.ArgumentParser) -> None:
    _add_json_argument(parser)


def run_stats(
    queue: Queue, args: argparse.Namespace, out: Writer, *, err: Writer | None = None
) -> int:
    """Pending (delayed included), running and dead jobs as stored."""
    stats = queue.stats()
    counts = {"pending": stats.pending, "running": stats.running, "dead": stats.dead}
    if _flag(args, "json"):
        _write_json(out, counts)
    else:
        _write_fields(out, [(name, str(count)) for name, count in counts.items()])
    return EXIT_OK


# -- dead ----------------------------------------------------------------------


def add_dead_arguments(parser: argparse.ArgumentParser) -> None:
    _add_json_argument(parser)


def run_dead(
    queue: Queue, args: argparse.Namespace, out: Writer, *, err: Writer | None = None
) -> int:
    """The dead-letter list, oldest first: a table, or a JSON array."""
    records = queue.dead_jobs()
    if _flag(args, "json"):
        _write_json(out, [job_summary(record) for record in records])
        return EXIT_OK
    if not records:
        out.write("no dead jobs\n")
        return EXIT_OK
    with_task = any(record.task is not None for record in records)
    headers = ["ID", "ATTEMPTS", "BURIED (UTC)", "CREATED (UTC)", "KEY"]
    headers += ["TASK"] if with_task else []
    headers += ["LAST ERROR"]
    rows = []
    for record in records:
        row = [
            str(record.id),
            f"{record.attempts}/{record.max_attempts}",
            _when(_buried_at(record)),
            _when(record.created_at),
            _optional(record.key, KEY_WIDTH),
        ]
        row += [_optional(record.task, KEY_WIDTH)] if with_task else []
        row += [_optional(record.last_error, ERROR_WIDTH)]
        rows.append(row)
    _write_table(out, headers, rows)
    return EXIT_OK


# -- show ----------------------------------------------------------------------


def add_show_arguments(parser: argparse.ArgumentParser) -> None:
    _add_id_argument(parser, "the job to show")
    _add_json_argument(parser)


def run_show(
    queue: Queue, args: argparse.Namespace, out: Writer, *, err: Writer | None = None
) -> int:
    """One job in any state, with every kept error and its traceback."""
    record = queue.get(args.id)
    if record is None:
        return _fail(args, err, f"no job {args.id}")
    if _flag(args, "json"):
        _write_json(out, job_details(record))
        return EXIT_OK
    fields = [
        ("id", str(record.id)),
        ("state", str(record.state)),
        ("attempts", f"{record.attempts} of {record.max_attempts} failed"),
        ("priority", str(record.priority)),
        ("key", _optional(record.key)),
        ("task", _optional(record.task)),
        ("created", _when(record.created_at) + " UTC"),
    ]
    if record.state == JobState.PENDING:
        fields.append(("due", _when(record.run_at) + " UTC"))
    if record.state == JobState.DEAD:
        fields.append(("buried", _when(_buried_at(record)) + " UTC"))
    fields.append(("last error", _optional(record.last_error)))
    fields.append(("payload", _json_text(record.payload)))
    if record.state == JobState.COMPLETED:
        fields.append(("result", _json_text(record.result)))
    _write_fields(out, fields)
    count = len(record.errors)
    for number, error in enumerate(record.errors, 1):
        heading = f"error {number} of {count}, at {_when(error.at)} UTC"
        message = f"{error.type}: {error.message}" if error.message else error.type
        out.write(f"\n{heading}\n  {escape(message)}\n")
        for line in escape(error.traceback.rstrip("\n"), keep="\n").splitlines():
            out.write(f"    {line}\n")
    return EXIT_OK


# -- retry, delete, purge-dead ---------------------------------------------------


def add_retry_arguments(parser: argparse.ArgumentParser) -> None:
    _add_id_argument(parser, "the dead job to make pending again")
    _add_json_argument(parser)


def run_retry(
    queue: Queue, args: argparse.Namespace, out: Writer, *, err: Writer | None = None
) -> int:
    """Make a dead job pending again, due now, with its attempts reset."""
    if not queue.retry_dead(args.id):
        return _fail(args, err, _not_dead(queue, args.id, "retried"))
    if _flag(args, "json"):
        _write_json(out, {"id": args.id, "retried": True})
    else:
        out.write(f"job {args.id} is pending again\n")
    return EXIT_OK


def add_delete_arguments(parser: argparse.ArgumentParser) -> None:
    _add_id_argument(parser, "the dead job to remove")
    _add_json_argument(parser)


def run_delete(
    queue: Queue, args: argparse.Namespace, out: Writer, *, err: Writer | None = None
) -> int:
    """Remove a dead job for good."""
    if not queue.delete_dead(args.id):
        return _fail(args, err, _not_dead(queue, args.id, "deleted"))
    if _flag(args, "json"):
        _write_json(out, {"id": args.id, "deleted": True})
    else:
        out.write(f"job {args.id} deleted\n")
    return EXIT_OK


def add_purge_dead_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--yes",
        action="store_true",
        help="really delete them (without it, the command only says how many)",
    )
    _add_json_argument(parser)


def run_purge_dead(
    queue: Queue, args: argparse.Namespace, out: Writer, *, err: Writer | None = None
) -> int:
    """Remove every dead job; refuses (status 2) without ``--yes``."""
    records = queue.dead_jobs()
    if not _flag(args, "yes"):
        return _fail(
            args,
            err,
            f"this would delete {_plural(len(records), 'dead job')} for good; "
            "pass --yes to do it",
            EXIT_USAGE,
        )
    deleted = sum(1 for record in records if queue.delete_dead(record.id))
    if _flag(args, "json"):
        _write_json(out, {"deleted": deleted})
    else:
        out.write(f"deleted {_plural(deleted, 'dead job')}\n")
    return EXIT_OK


def _not_dead(queue: Queue, job_id: int, done: str) -> str:
    """Why ``retry_dead`` or ``delete_dead`` of ``job_id`` changed nothing."""
    record = queue.get(job_id)
    if record is None:
        return f"no job {job_id}"
    if record.state != JobState.DEAD:
        return f"job {job_id} is {record.state}, not dead; it was not {done}"
    if done == "retried" and record.key is not None:
        return (
            f"job {job_id} was not retried: its key {escape(record.key)!r} is held "
            "by another pending or running job"
        )
    return f"job {job_id} was not {done}; it changed meanwhile"


# -- worker --------------------------------------------------------------------


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers",
        type=_positive_int,
        default=4,
        metavar="N",
        help="worker threads, i.e. jobs run at once (default: 4)",
    )
    parser.add_argument(
        "--shutdown-timeout",
        type=_seconds,
        default=SHUTDOWN_TIMEOUT,
        metavar="SECONDS",
        help="on SIGTERM or SIGINT, wait this long for running jobs before "
        "exiting; jobs still running then run again later (default: "
        f"{SHUTDOWN_TIMEOUT:g}); a second signal exits at once",
    )
    parser.add_argument(
        "--log-level",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        default="INFO",
        help="level of the messages written to stderr when the application "
        "has not configured logging (default: INFO)",
    )


def run_worker(
    queue: Queue,
    args: argparse.Namespace,
    out: Writer,
    *,
    err: Writer | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Run ``queue``'s workers in the foreground until SIGTERM or SIGINT (or
    until ``stop`` is set), then close the queue, waiting at most
    ``--shutdown-timeout`` seconds for running jobs.

    Signal handlers are installed only when called from the main thread, and
    the previous ones are restored on return. Logs go to ``err`` if the
    ``jobq`` logger has nowhere else to go.
    """
    err = sys.stderr if err is None else err
    workers: int = getattr(args, "workers", 4)
    timeout: float = getattr(args, "shutdown_timeout", SHUTDOWN_TIMEOUT)
    level = logging.getLevelName(getattr(args, "log_level", "INFO"))
    with _log_to(err, level):
        if isinstance(queue.store, MemoryStore) and not isinstance(
            queue.store, JsonFileStore
        ):
            logger.warning(
                "this queue keeps its jobs in memory: only jobs enqueued in this "
                "process run, and they are lost when it exits"
            )
        waiter = _StopWaiter(stop)
        with waiter.handling_signals():  # before start: a signal always stops
            try:
                queue.start(workers=workers)
            except TypeError as exc:  # no handler
                return _fail(args, err, str(exc))
            logger.info(
                "jobq worker %d started: %s on %s",
                os.getpid(),
                _plural(workers, "worker"),
                _describe(queue.store),
            )
            waiter.wait()
            logger.info(
                "stopping (%s): waiting up to %g s for running jobs",
                waiter.reason,
                timeout,
            )
            queue.close(timeout=timeout)
        logger.info("jobq worker %d stopped", os.getpid())
    return EXIT_OK


class _StopWaiter:
    """Waits for SIGTERM, SIGINT or an event; a second signal exits at once.

    The signal handler only records the signal (setting an ``Event`` from a
    handler could deadlock on the lock the interrupted main thread holds);
    ``wait`` looks every ``_STOP_POLL`` seconds.
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
def _log_to(stream: Writer, level: int) -> Iterator[None]:
    """Send the ``jobq`` logger to ``stream`` meanwhile, unless the
    application configured logging (then its configuration decides)."""
    if _has_handlers(logger):
        yield
        return
    handler = logging.StreamHandler(stream)
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


def _describe(store: Store) -> str:
    if isinstance(store, JsonFileStore):
        return f"the JSON file {store.path}"
    if isinstance(store, MemoryStore):
        return "memory"
    if isinstance(store, SqliteStore):
        return f"the SQLite file {store.path}"
    if isinstance(store, PostgresStore):
        return f"{store.where}, schema {store.schema!r}, queue {store.queue!r}"
    return type(store).__name__


# -- finding the queue -----------------------------------------------------------


def add_queue_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that say where the jobs are (the standalone command's; a
    framework command has its queue already)."""
    group = parser.add_argument_group("where the jobs are")
    group.add_argument(
        "--store",
        metavar="URL_OR_PATH",
        help="a JSON store's file, sqlite:///relative.db, sqlite:////absolute.db "
        f"or postgresql://user@host/db (default: ${STORE_ENV})",
    )
    group.add_argument(
        "--app",
        metavar="MODULE:ATTRIBUTE",
        help="a jobq.JobQueue in your code, e.g. myapp.jobs:queue (imported with "
        "the current directory on sys.path); its store is used, and the worker "
        "runs its handler",
    )
    group.add_argument(
        "--queue",
        metavar="NAME",
        help="PostgreSQL --store: the queue's name (default: default)",
    )
    group.add_argument(
        "--schema",
        metavar="NAME",
        help="PostgreSQL --store: the schema of jobq's tables (default: jobq)",
    )


def queue_from_args(
    args: argparse.Namespace, *, read_only: bool = False, worker: bool = False
) -> Queue:
    """The queue that ``--store`` (or ``$JOBQ_STORE``) or ``--app`` names.

    ``read_only``: the command only looks, so a JSON store is opened without
    taking its owner's lock. ``worker``: ``--app`` is needed, and its queue is
    returned as it is. Raises ``CommandError`` (status 2) for usage errors,
    and (status 1) for a store file that does not exist.

    The result is either a new queue over a store made for the command, or
    the application's own queue (``--app``, except a JSON store read
    read-only); ``main`` closes only the former: the latter belongs to the
    application's module.
    """
    return _resolve(args, read_only=read_only, worker=worker)[0]


def _resolve(
    args: argparse.Namespace, *, read_only: bool, worker: bool
) -> tuple[Queue, bool]:
    """``queue_from_args``, and whether the queue was made here (to close)."""
    app: str | None = getattr(args, "app", None)
    spec: str | None = getattr(args, "store", None)
    postgres = {
        name: value
        for name in ("queue", "schema")
        if (value := getattr(args, name, None)) is not None
    }
    if app is not None:
        if spec is not None:
            raise CommandError(
                "pass --store or --app, not both: the app's queue names its store",
                EXIT_USAGE,
            )
        if postgres:
            raise CommandError(
                "--queue and --schema go with --store; the app's queue names its own",
                EXIT_USAGE,
            )
        app_queue = load_app(app)
        if worker:
            return app_queue, False
        queue = _for_commands(app_queue, read_only=read_only)
        return queue, queue is not app_queue
    if worker:
        raise CommandError(
            "worker needs --app MODULE:ATTRIBUTE naming the jobq.JobQueue to run "
            "(its handler runs the jobs; its store is used)",
            EXIT_USAGE,
        )
    spec = spec or os.environ.get(STORE_ENV) or None
    if spec is None:
        raise CommandError(
            f"name the store with --store URL_OR_PATH (or set {STORE_ENV}), or "
            "the application's queue with --app MODULE:ATTRIBUTE",
            EXIT_USAGE,
        )
    store = _open_store(spec, read_only=read_only, **postgres)
    return JobQueue(None, store=store), True


def _open_store(
    spec: str,
    *,
    read_only: bool,
    queue: str | None = None,
    schema: str | None = None,
) -> Store:
    """The store ``spec`` names, as the command uses it: a file that does not
    exist is an error (never created by a typo), a JSON store is read-only
    for commands that only look, a PostgreSQL store never runs DDL."""
    try:
        store = store_from(spec)
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    if (queue is not None or schema is not None) and not isinstance(
        store, PostgresStore
    ):
        raise CommandError(
            "--queue and --schema apply to a PostgreSQL store", EXIT_USAGE
        )
    if isinstance(store, JsonFileStore):
        if not any(os.path.exists(p) for p in (store.path, f"{store.path}.lock")):
            raise CommandError(f"no JSON store at {store.path}")
        return JsonFileStore(store.path, read_only=True) if read_only else store
    if isinstance(store, SqliteStore):
        if not os.path.exists(store.path):
            raise CommandError(f"no SQLite store at {store.path}")
        return store
    if isinstance(store, PostgresStore):
        return PostgresStore(
            store.conninfo,
            queue=queue or "default",
            schema=schema or "jobq",
            listen=False,  # no workers here to wake
            pool_size=2,
            auto_migrate=False,  # a missing schema is an error, not created
        )
    return store


def _for_commands(queue: Queue, *, read_only: bool) -> Queue:
    """An application's queue as a command other than ``worker`` uses it."""
    store = queue.store
    if isinstance(store, JsonFileStore):
        if read_only and not store.read_only:
            return JobQueue(None, store=JsonFileStore(store.path, read_only=True))
        return queue
    if isinstance(store, MemoryStore):
        raise CommandError(
            "the app's queue keeps its jobs in memory (store=None), out of reach "
            "of another process; give it a persistent store",
            EXIT_USAGE,
        )
    return queue


def load_app(spec: str) -> Queue:
    """The ``JobQueue`` that ``MODULE:ATTRIBUTE`` names (the attribute may be
    dotted); the current directory is put on ``sys.path`` first, as ``python
    -m`` would. ``CommandError`` (status 2) if there is no such module or
    attribute, or it is not a ``JobQueue``; an error raised while importing
    the module propagates."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise CommandError(
            f"--app must be MODULE:ATTRIBUTE, e.g. myapp.jobs:queue, not {spec!r}",
            EXIT_USAGE,
        )
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and f"{module_name}.".startswith(f"{missing}."):
            raise CommandError(
                f"--app {spec}: no module named {missing!r}", EXIT_USAGE
            ) from None
        raise
    found: object = module
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise CommandError(
                f"--app {spec}: {module_name!r} has no attribute {attribute!r}",
                EXIT_USAGE,
            ) from None
    if not isinstance(found, JobQueue):
        raise CommandError(
            f"--app {spec} is a {type(found).__name__}, not a jobq.JobQueue",
            EXIT_USAGE,
        )
    return found


# -- the command -----------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One subcommand: its arguments, what it runs, and whether it changes
    the store (then a JSON store's owner lock is needed)."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[..., int]
    changes: Callable[[argparse.Namespace], bool]


def _never(args: argparse.Namespace) -> bool:
    return False


def _always(args: argparse.Namespace) -> bool:
    return True


COMMANDS: dict[str, Command] = {
    command.name: command
    for command in (
        Command(
            "stats",
            "pending, running and dead jobs",
            add_stats_arguments,
            run_stats,
            _never,
        ),
        Command(
            "dead",
            "list the dead jobs, oldest first",
            add_dead_arguments,
            run_dead,
            _never,
        ),
        Command(
            "show",
            "show one job with its errors and tracebacks",
            add_show_arguments,
            run_show,
            _never,
        ),
        Command(
            "retry",
            "make a dead job pending again",
            add_retry_arguments,
            run_retry,
            _always,
        ),
        Command(
            "delete",
            "remove a dead job",
            add_delete_arguments,
            run_delete,
            _always,
        ),
        Command(
            "purge-dead",
            "remove every dead job (needs --yes)",
            add_purge_dead_arguments,
            run_purge_dead,
            lambda args: _flag(args, "yes"),
        ),
        Command(
            "worker",
            "run the workers of --app's queue until SIGTERM or SIGINT",
            add_worker_arguments,
            run_worker,
            _always,
        ),
    )
}


def build_parser() -> argparse.ArgumentParser:
    """The ``jobq`` argument parser, one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="jobq",
        description="Look at a jobq queue, manage its dead jobs, run its workers.",
        epilog="Exit status: 0 done; 1 no such job, a job not in the needed "
        "state, or a store error; 2 a usage error. --json prints ASCII-only JSON "
        "with stable keys; other output shows control characters in jobs as "
        "escapes such as \\x1b.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {jobq.__version__}"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS.values():
        sub = commands.add_parser(
            command.name,
            help=command.help,
            description=command.help[0].upper() + command.help[1:],
        )
        command.add_arguments(sub)
        add_queue_arguments(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``jobq`` with ``argv`` (default: ``sys.argv[1:]``); the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    command = COMMANDS[args.command]
    out, err = sys.stdout, sys.stderr
    try:
        try:
            queue, own = _resolve(
                args,
                read_only=not command.changes(args),
                worker=command.name == "worker",
            )
        except ImportError as exc:  # e.g. psycopg for a PostgreSQL store
            raise CommandError(str(exc)) from None
        try:
            return command.run(queue, args, out, err=err)
        finally:
            if own:  # the app's queue is the app's (the worker closes it itself)
                queue.close()
    except CommandError as exc:
        prefix = "error: " if exc.code == EXIT_USAGE else ""
        return _report(err, f"{prefix}{exc.message}", exc.code, command.name)
    except StoreLocked as exc:
        return _report(
            err,
            f"{exc} Only the process that owns a JSON store can change it: stop "
            "that process, or change the job from it.",
            command=command.name,
        )
    except JobqError as exc:
        return _report(err, str(exc), command=command.name)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    except BrokenPipeError:  # e.g. `jobq dead | head`
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # no second error at exit
        return EXIT_FAILED


# -- helpers ---------------------------------------------------------------------


def _report(
    err: Writer | None,
    message: str,
    code: int = EXIT_FAILED,
    command: str | None = None,
) -> int:
    stream = sys.stderr if err is None else err
    prefix = f"jobq {command}" if command else "jobq"
    stream.write(f"{prefix}: {message}\n")
    return code


def _fail(
    args: argparse.Namespace,
    err: Writer | None,
    message: str,
    code: int = EXIT_FAILED,
) -> int:
    """Report a failure of the command ``args`` ran; its exit status."""
    return _report(err, message, code, getattr(args, "command", None))


def _add_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="print JSON (ASCII only, stable keys) instead of text",
    )


def _add_id_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("id", type=_positive_int, metavar="ID", help=help_text)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, not {text}")
    return value


if __name__ == "__main__":
    raise SystemExit(main())
