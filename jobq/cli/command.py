"""The ``jobq`` command's argument parsing (``argparse``) and ``main``.

Each command is an ``add_<command>_arguments(parser)`` (those that
``manage.py jobq`` offers too are ``jobq.admin.arguments``') and a function
that takes the parsed arguments, calls ``jobq.admin.operations`` with plain
values and returns what ``jobq.admin.render`` makes of the result.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jobq
from jobq.admin import operations, render
from jobq.admin.arguments import (
    SUBCOMMANDS,
    Subcommand,
    add_cancel_arguments,
    add_cancelled_arguments,
    add_dead_arguments,
    add_delete_arguments,
    add_limits_arguments,
    add_migrate_arguments,
    add_processes_arguments,
    add_purge_dead_arguments,
    add_retry_arguments,
    add_schedules_arguments,
    add_show_arguments,
    add_stats_arguments,
    add_worker_arguments,
)
from jobq.admin.operations import (
    EXIT_FAILED,
    EXIT_USAGE,
    CommandError,
    NotConfirmed,
    Writer,
    command_error,
)
from jobq.cli.dashboard import add_dashboard_arguments, run_dashboard
from jobq.cli.queues import STORE_ENV, find_queue
from jobq.errors import JobqError
from jobq.queue import JobQueue

__all__ = [
    "COMMANDS",
    "Command",
    "add_cancel_arguments",
    "add_cancelled_arguments",
    "add_dead_arguments",
    "add_delete_arguments",
    "add_limits_arguments",
    "add_migrate_arguments",
    "add_processes_arguments",
    "add_purge_dead_arguments",
    "add_queue_arguments",
    "add_retry_arguments",
    "add_schedules_arguments",
    "add_show_arguments",
    "add_stats_arguments",
    "add_worker_arguments",
    "build_parser",
    "main",
    "queue_from_args",
]

Queue = JobQueue[Any]


# -- the commands' arguments (``jobq.admin.arguments``, and these) ---------------


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


# -- running them ------------------------------------------------------------------


def _stats(queue: Queue, args: argparse.Namespace) -> str:
    return render.stats(operations.stats(queue), as_json=args.json)


def _dead(queue: Queue, args: argparse.Namespace) -> str:
    return render.dead(operations.dead(queue), as_json=args.json)


def _cancelled(queue: Queue, args: argparse.Namespace) -> str:
    return render.cancelled(operations.cancelled(queue), as_json=args.json)


def _cancel(queue: Queue, args: argparse.Namespace) -> str:
    done = operations.cancel(queue, args.id, wait=args.wait)
    return render.cancel(done.id, done.was, done.outcome, as_json=args.json)


def _schedules(queue: Queue, args: argparse.Namespace) -> str:
    return render.schedules(operations.schedules(queue), as_json=args.json)


def _pause_schedule(queue: Queue, args: argparse.Namespace) -> str:
    changed = operations.pause_schedule(queue, args.name)
    return render.schedule_changed(args.name, "paused", changed, as_json=args.json)


def _resume_schedule(queue: Queue, args: argparse.Namespace) -> str:
    changed = operations.resume_schedule(queue, args.name)
    return render.schedule_changed(args.name, "resumed", changed, as_json=args.json)


def _run_schedule(queue: Queue, args: argparse.Namespace) -> str:
    job_id = operations.run_schedule(queue, args.name)
    return render.schedule_run(args.name, job_id, as_json=args.json)


def _limits(queue: Queue, args: argparse.Namespace) -> str:
    return render.limits(operations.limits(queue), as_json=args.json)


def _processes(queue: Queue, args: argparse.Namespace) -> str:
    shown = operations.processes(queue)
    return render.processes(shown, queue.clock(), as_json=args.json)


def _show(queue: Queue, args: argparse.Namespace) -> str:
    record = operations.show(queue, args.id)
    return render.job(record, operations.family(queue, record), as_json=args.json)


def _retry(queue: Queue, args: argparse.Namespace) -> str:
    return render.retried(operations.retry(queue, args.id), as_json=args.json)


def _delete(queue: Queue, args: argparse.Namespace) -> str:
    return render.deleted(operations.delete(queue, args.id), as_json=args.json)


def _purge_dead(queue: Queue, args: argparse.Namespace) -> str:
    deleted = operations.purge_dead(queue, yes=args.yes)
    return render.purged(deleted, as_json=args.json)


def _migrate(queue: Queue, args: argparse.Namespace) -> str:
    try:
        done = operations.migrate(queue.store)
    except ImportError as exc:  # psycopg, for a PostgreSQL store
        raise CommandError(str(exc)) from None
    return render.migration(done.store, done.version, as_json=args.json)


def _worker(queue: Queue, args: argparse.Namespace) -> str:
    operations.run_worker(
        queue,
        workers=args.workers,
        shutdown_timeout=args.shutdown_timeout,
        log_level=args.log_level,
    )
    return ""


@dataclass(frozen=True)
class Command(Subcommand):
    """One subcommand: its arguments, what it runs (the text to print), and
    whether it changes the store (then a JSON store's owner lock is needed)."""

    run: Callable[[Queue, argparse.Namespace], str]
    changes: Callable[[argparse.Namespace], bool]


def _never(args: argparse.Namespace) -> bool:
    return False


def _always(args: argparse.Namespace) -> bool:
    return True


def _with_app(args: argparse.Namespace) -> bool:
    """``schedules`` with ``--app``: the app's own queue, which declares the
    schedules, is used as it is (not a read-only view of a JSON file)."""
    return args.app is not None


def _if_yes(args: argparse.Namespace) -> bool:
    return bool(args.yes)


def _shared(
    name: str,
    run: Callable[[Queue, argparse.Namespace], str],
    changes: Callable[[argparse.Namespace], bool],
) -> Command:
    """The command ``name`` that ``manage.py jobq`` offers too."""
    shared = SUBCOMMANDS[name]
    return Command(shared.name, shared.help, shared.add_arguments, run, changes)


COMMANDS: dict[str, Command] = {
    command.name: command
    for command in (
        _shared("stats", _stats, _never),
        _shared("dead", _dead, _never),
        _shared("cancelled", _cancelled, _never),
        _shared("schedules", _schedules, _with_app),
        _shared("pause-schedule", _pause_schedule, _always),
        _shared("resume-schedule", _resume_schedule, _always),
        _shared("run-schedule", _run_schedule, _always),
        _shared("limits", _limits, _never),
        _shared("processes", _processes, _never),
        _shared("show", _show, _never),
        _shared("retry", _retry, _always),
        _shared("delete", _delete, _always),
        _shared("cancel", _cancel, _always),
        _shared("purge-dead", _purge_dead, _if_yes),
        _shared("migrate", _migrate, _always),
        Command(
            "dashboard",
            "serve the web dashboard (prints its URL with a token)",
            add_dashboard_arguments,
            run_dashboard,
            _never,  # a JSON file is only read; the databases do not care
        ),
        _shared("worker", _worker, _always),
    )
}


def build_parser() -> argparse.ArgumentParser:
    """The ``jobq`` argument parser, one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="jobq",
        description="Look at a jobq queue, manage its dead jobs, cancel jobs, "
        "pause, resume and run its periodic jobs, run its workers, migrate its "
        "store's schema.",
        epilog="Exit status: 0 done (cancel: the job was cancelled, or asked "
        "to stop); 1 no such job or schedule, a job not in the needed state, "
        "a run-schedule refused, or a store error; 2 a usage error; 3 cancel "
        "--wait: the job still runs. --json "
        "prints ASCII-only JSON with stable keys; other output shows control "
        "characters in jobs as escapes such as \\x1b.",
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


def queue_from_args(
    args: argparse.Namespace, *, read_only: bool = False, worker: bool = False
) -> Queue:
    """The queue that the parsed ``--store`` (or ``$JOBQ_STORE``) or ``--app``
    names (see ``jobq.cli.queues.find_queue``). The caller closes it, unless
    it is the application's own (``--app``, except a JSON store read
    read-only)."""
    queue, _ = _find(args, read_only=read_only, worker=worker)
    return queue


def _find(
    args: argparse.Namespace, *, read_only: bool, worker: bool = False
) -> tuple[Queue, bool]:
    return find_queue(
        store=args.store,
        app=args.app,
        queue=args.queue,
        schema=args.schema,
        read_only=read_only,
        worker=worker,
        migrate=args.command == "migrate",
    )


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
            queue, own = _find(
                args,
                read_only=not command.changes(args),
                worker=command.name == "worker",
            )
        except ImportError as exc:  # e.g. psycopg for a PostgreSQL store
            raise CommandError(str(exc)) from None
        try:
            out.write(command.run(queue, args))
        finally:
            if own:  # the app's queue is the app's (the worker closes it itself)
                queue.close()
    except CommandError as exc:
        usage = exc.code == EXIT_USAGE and not isinstance(exc, NotConfirmed)
        prefix = "error: " if usage else ""
        return _report(err, f"{prefix}{exc.message}", exc.code, command.name)
    except JobqError as exc:
        return _report(err, command_error(exc).message, command=command.name)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    except BrokenPipeError:  # e.g. `jobq dead | head`
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # no second error at exit
        return EXIT_FAILED
    return operations.EXIT_OK


# -- helpers -----------------------------------------------------------------------


def _report(
    err: Writer, message: str, code: int = EXIT_FAILED, command: str | None = None
) -> int:
    prefix = f"jobq {command}" if command else "jobq"
    err.write(f"{prefix}: {message}\n")
    return code
