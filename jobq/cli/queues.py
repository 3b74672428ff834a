"""Where the ``jobq`` command finds its jobs: a store named by URL or path
(``--store``, ``$JOBQ_STORE``), or an application's ``JobQueue`` (``--app``).

Stores the command opens itself are opened with care: a file that does not
exist is an error (never created by a typo), a JSON store is read-only for
commands that only look (its owner keeps running), a PostgreSQL store never
runs DDL. ``migrate`` is the exception: creating the schema is its job. An
application's queue is used as ``flask jobq`` and ``manage.py jobq`` use
theirs (``jobq.admin.access``).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, cast

from jobq.admin.access import (
    command_queue,
    queue_for_command,
    require_existing,
    stop_schema_changes,
)
from jobq.admin.operations import EXIT_USAGE, CommandError
from jobq.queue import JobQueue
from jobq.stores import Store, store_from
from jobq.stores.base import NamedQueueStore, OwnedStore, capabilities_of

__all__ = [
    "STORE_ENV",
    "find_queue",
    "load_app",
    "open_store",
    "queue_for_command",
]

Queue = JobQueue[Any]

#: The environment variable that names the store when ``--store`` is not given.
STORE_ENV = "JOBQ_STORE"


def find_queue(
    *,
    store: str | None = None,
    app: str | None = None,
    queue: str | None = None,
    schema: str | None = None,
    read_only: bool = False,
    worker: bool = False,
    migrate: bool = False,
) -> tuple[Queue, bool]:
    """The queue that ``store`` (a URL or path; default ``$JOBQ_STORE``) or
    ``app`` (``MODULE:ATTRIBUTE``) names, and whether it was made here (then
    the caller closes it; the application's own queue belongs to its module).

    ``queue`` and ``schema`` pick a PostgreSQL store's queue and schema.
    ``read_only``: the command only looks, so a JSON store is opened without
    taking its owner's lock. ``worker``: ``app`` is needed, and its queue is
    returned as it is. ``migrate``: a store file that does not exist yet is
    created, and the queue of an ``app`` is returned as it is. Otherwise
    ``app``'s store must exist, as ``store``'s must: its file (checked after
    the import, which opens nothing: stores open on first use), or its
    PostgreSQL schema (its ``auto_migrate`` is turned off, so opening it
    only checks the schema, and ``StoreError`` says it is missing). Raises
    ``CommandError``: status 2 for usage errors, 1 for a store file that does
    not exist.
    """
    postgres = {
        name: value
        for name, value in (("queue", queue), ("schema", schema))
        if value is not None
    }
    if app is not None:
        if store is not None:
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
        if worker or migrate:
            return app_queue, False
        found = command_queue(app_queue, read_only=read_only)
        # The command (this process's last use of the app's queue) checks
        # the schema, never creates or upgrades it.
        stop_schema_changes(app_queue.store)
        return found, found is not app_queue
    if worker:
        raise CommandError(
            "worker needs --app MODULE:ATTRIBUTE naming the jobq.JobQueue to run "
            "(its handler runs the jobs; its store is used)",
            EXIT_USAGE,
        )
    spec = store or os.environ.get(STORE_ENV) or None
    if spec is None:
        raise CommandError(
            f"name the store with --store URL_OR_PATH (or set {STORE_ENV}), or "
            "the application's queue with --app MODULE:ATTRIBUTE",
            EXIT_USAGE,
        )
    opened = open_store(spec, read_only=read_only, create=migrate, **postgres)
    return JobQueue(None, store=opened), True


def open_store(
    spec: str,
    *,
    read_only: bool = False,
    create: bool = False,
    queue: str | None = None,
    schema: str | None = None,
) -> Store:
    """The store ``spec`` names, as a command uses it: a file that does not
    exist is an error unless ``create`` (``migrate``), a JSON store is
    read-only if ``read_only``, a PostgreSQL store never runs DDL by itself
    (``auto_migrate=False``; ``migrate`` asks for it) and listens to no one.
    ``CommandError`` (status 2) for a malformed or unknown ``spec``."""
    try:
        store = store_from(spec)
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    can = capabilities_of(store)
    if (queue is not None or schema is not None) and not can.named_queues:
        raise CommandError(
            "--queue and --schema apply to a PostgreSQL store", EXIT_USAGE
        )
    if not create:  # migrate: what is missing is its to create
        require_existing(store)
        if read_only and can.owner_writes:
            return cast(OwnedStore, store).reader()
    if can.named_queues:
        return cast(NamedQueueStore, store).for_command(queue=queue, schema=schema)
    return store


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
