"""Managing a queue from outside its application's code: look at its jobs,
fix its dead ones, create or upgrade its store's schema, run its workers in
the foreground. The ``jobq`` command (``jobq.cli``), ``flask jobq`` and
``manage.py jobq`` are front-ends over this package, and a command of your
own can be one too:

* ``jobq.admin.operations``: what each command does, as plain functions of a
  queue (or store) and plain values, returning values (``stats(queue) ->
  Stats``, ``show(queue, job_id) -> JobRecord``, ``purge_dead(queue,
  yes=...) -> int``, ``migrate(store) -> Migration``, ``run_worker(queue,
  workers=...)``) and raising ``CommandError`` (a message and an exit
  status); importable from here too;
* ``jobq.admin.render``: those values as text or ASCII-only JSON, with
  everything stored escaped (``escape``) so a job cannot drive the terminal;
* ``jobq.admin.access``: ``queue_for_command``, an application's queue as a
  command uses it (its store never created, read-only where it only looks);
* ``jobq.admin.arguments``: the commands' ``argparse`` arguments.

Nothing here parses a command line or knows a framework.
"""

from __future__ import annotations

from jobq.admin import access, arguments, operations, render
from jobq.admin.access import queue_for_command
from jobq.admin.operations import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_STILL_RUNNING,
    EXIT_USAGE,
    LOG_LEVELS,
    SHUTDOWN_TIMEOUT,
    Cancel,
    CommandError,
    Migration,
    NoSuchJob,
    NotConfirmed,
    StillRunning,
    Writer,
    cancel,
    cancelled,
    command_error,
    dead,
    delete,
    describe_store,
    limits,
    migrate,
    purge_dead,
    retry,
    run_worker,
    schedules,
    show,
    stats,
)

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_STILL_RUNNING",
    "EXIT_USAGE",
    "LOG_LEVELS",
    "SHUTDOWN_TIMEOUT",
    "Cancel",
    "CommandError",
    "Migration",
    "NoSuchJob",
    "NotConfirmed",
    "StillRunning",
    "Writer",
    "access",
    "arguments",
    "cancel",
    "cancelled",
    "command_error",
    "dead",
    "delete",
    "describe_store",
    "limits",
    "migrate",
    "operations",
    "purge_dead",
    "queue_for_command",
    "render",
    "retry",
    "run_worker",
    "schedules",
    "show",
    "stats",
]
