"""The commands' arguments, as ``argparse`` takes them: ``jobq`` and
``manage.py jobq`` (whose parser is argparse too) offer the same ones.
``flask jobq`` has click's spelling of them."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass

from jobq.admin.operations import LOG_LEVELS, SHUTDOWN_TIMEOUT

__all__ = [
    "SUBCOMMANDS",
    "Subcommand",
    "add_cancel_arguments",
    "add_cancelled_arguments",
    "add_dead_arguments",
    "add_delete_arguments",
    "add_limits_arguments",
    "add_migrate_arguments",
    "add_pause_schedule_arguments",
    "add_processes_arguments",
    "add_purge_dead_arguments",
    "add_resume_schedule_arguments",
    "add_retry_arguments",
    "add_run_schedule_arguments",
    "add_schedules_arguments",
    "add_show_arguments",
    "add_stats_arguments",
    "add_worker_arguments",
]


def add_stats_arguments(parser: argparse.ArgumentParser) -> None:
    _add_json_argument(parser)


def add_dead_arguments(parser: argparse.ArgumentParser) -> None:
    _add_json_argument(parser)


def add_schedules_arguments(parser: argparse.ArgumentParser) -> None:
    _add_json_argument(parser)


def add_pause_schedule_arguments(parser: argparse.ArgumentParser) -> None:
    _add_name_argument(parser, "the periodic job to pause")
    _add_json_argument(parser)


def add_resume_schedule_arguments(parser: argparse.ArgumentParser) -> None:
    _add_name_argument(parser, "the paused periodic job to resume")
    _add_json_argument(parser)


def add_run_schedule_arguments(parser: argparse.ArgumentParser) -> None:
    _add_name_argument(parser, "the periodic job to run once now (needs its code)")
    _add_json_argument(parser)


def add_limits_arguments(parser: argparse.ArgumentParser) -> None:
    _add_json_argument(parser)


def add_processes_arguments(parser: argparse.ArgumentParser) -> None:
    _add_json_argument(parser)


def add_show_arguments(parser: argparse.ArgumentParser) -> None:
    _add_id_argument(parser, "the job to show")
    _add_json_argument(parser)


def add_retry_arguments(parser: argparse.ArgumentParser) -> None:
    _add_id_argument(parser, "the dead job to make pending again")
    _add_json_argument(parser)


def add_delete_arguments(parser: argparse.ArgumentParser) -> None:
    _add_id_argument(parser, "the dead job to remove")
    _add_json_argument(parser)


def add_cancel_arguments(parser: argparse.ArgumentParser) -> None:
    _add_id_argument(parser, "the pending, waiting or running job to cancel")
    parser.add_argument(
        "--wait",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="wait up to this long for a running job to stop (exit status 3 "
        "if it still runs then); without it, a running job is only asked to stop",
    )
    _add_json_argument(parser)


def add_cancelled_arguments(parser: argparse.ArgumentParser) -> None:
    _add_json_argument(parser)


def add_purge_dead_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--yes",
        action="store_true",
        help="really delete them (without it, the command only says how many)",
    )
    _add_json_argument(parser)


def add_migrate_arguments(parser: argparse.ArgumentParser) -> None:
    _add_json_argument(parser)


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
        choices=LOG_LEVELS,
        default="INFO",
        help="level of the messages written to stderr when the application "
        "has not configured logging (default: INFO)",
    )


@dataclass(frozen=True)
class Subcommand:
    """A command as a parser offers it: its name, its help, its arguments."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]


#: The commands that ``jobq`` and ``manage.py jobq`` share (``jobq
#: dashboard`` is the command's own), by name.
SUBCOMMANDS: dict[str, Subcommand] = {
    command.name: command
    for command in (
        Subcommand(
            "stats",
            "pending, waiting, running, dead and cancelled jobs",
            add_stats_arguments,
        ),
        Subcommand("dead", "list the dead jobs, oldest first", add_dead_arguments),
        Subcommand(
            "cancelled",
            "list the cancelled jobs kept, newest first",
            add_cancelled_arguments,
        ),
        Subcommand(
            "schedules",
            "list the periodic jobs (declared by --app's code, and orphaned ones)",
            add_schedules_arguments,
        ),
        Subcommand(
            "pause-schedule",
            "pause a periodic job for every process (its slots are passed over)",
            add_pause_schedule_arguments,
        ),
        Subcommand(
            "resume-schedule",
            "resume a paused periodic job from its next slot (no burst)",
            add_resume_schedule_arguments,
        ),
        Subcommand(
            "run-schedule",
            "enqueue one job of a periodic job now, taking no slot (needs --app)",
            add_run_schedule_arguments,
        ),
        Subcommand(
            "limits",
            "list the limits the store holds, with the jobs running and waiting "
            "under each",
            add_limits_arguments,
        ),
        Subcommand(
            "processes",
            "list the processes serving the queue, from every host, with the "
            "jobs each runs",
            add_processes_arguments,
        ),
        Subcommand(
            "show",
            "show one job with its parents and children, errors and tracebacks",
            add_show_arguments,
        ),
        Subcommand("retry", "make a dead job pending again", add_retry_arguments),
        Subcommand("delete", "remove a dead job", add_delete_arguments),
        Subcommand(
            "cancel",
            "cancel a pending or waiting job, or stop a running one (--wait for it)",
            add_cancel_arguments,
        ),
        Subcommand(
            "purge-dead",
            "remove every dead job (needs --yes)",
            add_purge_dead_arguments,
        ),
        Subcommand(
            "migrate",
            "create or upgrade the schema of a SQLite or PostgreSQL store",
            add_migrate_arguments,
        ),
        Subcommand(
            "worker",
            "run the workers of --app's queue until SIGTERM or SIGINT",
            add_worker_arguments,
        ),
    )
}


def _add_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="print JSON (ASCII only, stable keys) instead of text",
    )


def _add_name_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("name", metavar="NAME", help=help_text)


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
