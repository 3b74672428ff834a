"""The ``jobq`` command: look at a queue, manage its dead jobs, run its
workers, migrate its store's schema.

::

    jobq stats      [--json]                 pending, running, dead, abandoned
    jobq dead       [--json]                 the dead-letter list, oldest first
    jobq schedules  [--json]                 periodic jobs, declared and orphaned
    jobq limits     [--json]                 limits, with jobs running and waiting
    jobq show ID    [--json]                 one job with every attempt's error
    jobq retry ID   [--json]                 make a dead job pending again
    jobq delete ID  [--json]                 remove a dead job
    jobq purge-dead --yes [--json]           remove every dead job
    jobq migrate    [--json]                 create or upgrade a store's schema
    jobq worker --app MODULE:ATTRIBUTE [--workers N] [--shutdown-timeout S]
    jobq dashboard [--bind HOST:PORT] [--read-only] [--no-token]

Every command finds the jobs with ``--store URL_OR_PATH`` (or the environment
variable ``JOBQ_STORE``) or with ``--app MODULE:ATTRIBUTE``, a ``JobQueue`` in
the application's code whose store is then used; ``worker`` needs ``--app``,
since that queue's handler runs the jobs. Exit status: 0 done; 1 no such job,
not in the needed state, the store failed, or a package it needs is not
installed (``MissingExtra``: one line naming the extra); 2 a usage error.

Built on ``argparse``, so the command needs nothing beyond the standard
library. What it does, ``flask jobq`` and ``manage.py jobq`` do too: that is
``jobq.admin`` (operations, their output, an application's queue as a
command uses it, the shared arguments), re-exported here under the names it
had first (``jobq.cli.operations``, ``jobq.cli.render``, ...). The command's
own parts:

* ``jobq.cli.queues``: where the jobs are (``find_queue``, ``open_store``,
  ``load_app``: ``--store``, ``$JOBQ_STORE``, ``--app``);
* ``jobq.cli.dashboard``: ``jobq dashboard``, the dashboard as a process;
* ``jobq.cli.command``: the ``argparse`` front-end and ``main``.
"""

from __future__ import annotations

from jobq.admin.operations import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    SHUTDOWN_TIMEOUT,
    CommandError,
    Migration,
    NoSuchJob,
    NotConfirmed,
    Writer,
    command_error,
    dead,
    delete,
    describe_store,
    migrate,
    purge_dead,
    retry,
    run_worker,
    show,
    stats,
)
from jobq.admin.render import escape, job_details, job_summary

# The shared modules by their first names: jobq.cli.operations, jobq.cli.render.
from jobq.cli import operations as operations
from jobq.cli import render as render
from jobq.cli.command import (
    COMMANDS,
    Command,
    add_dead_arguments,
    add_delete_arguments,
    add_limits_arguments,
    add_migrate_arguments,
    add_purge_dead_arguments,
    add_queue_arguments,
    add_retry_arguments,
    add_schedules_arguments,
    add_show_arguments,
    add_stats_arguments,
    add_worker_arguments,
    build_parser,
    main,
    queue_from_args,
)
from jobq.cli.queues import (
    STORE_ENV,
    find_queue,
    load_app,
    open_store,
    queue_for_command,
)

__all__ = [
    "COMMANDS",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "SHUTDOWN_TIMEOUT",
    "STORE_ENV",
    "Command",
    "CommandError",
    "Migration",
    "NoSuchJob",
    "NotConfirmed",
    "Writer",
    "add_dead_arguments",
    "add_delete_arguments",
    "add_limits_arguments",
    "add_migrate_arguments",
    "add_purge_dead_arguments",
    "add_queue_arguments",
    "add_retry_arguments",
    "add_schedules_arguments",
    "add_show_arguments",
    "add_stats_arguments",
    "add_worker_arguments",
    "build_parser",
    "command_error",
    "dead",
    "delete",
    "describe_store",
    "escape",
    "find_queue",
    "job_details",
    "job_summary",
    "load_app",
    "main",
    "migrate",
    "open_store",
    "purge_dead",
    "queue_for_command",
    "queue_from_args",
    "retry",
    "run_worker",
    "show",
    "stats",
]
