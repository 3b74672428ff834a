"""An application's queue as a command uses it, with care: a command never
creates a store (a file that does not exist is an error, never made by a
typo; a schema is checked, never created or upgraded), and reads a store
only its owner writes (a JSON file) without taking the owner's place.

The stores say which care they need through their ``Capabilities``
(``jobq.stores.base``): ``files`` that must be there, ``owner_writes``,
``migrates_on_open``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, cast

from jobq.admin.operations import EXIT_USAGE, CommandError
from jobq.queue import JobQueue
from jobq.stores import Store
from jobq.stores.base import FileStore, MigratingStore, OwnedStore, capabilities_of

__all__ = [
    "command_queue",
    "queue_for_command",
    "require_existing",
    "stop_schema_changes",
]

Queue = JobQueue[Any]


@contextlib.contextmanager
def queue_for_command(queue: Queue, *, read_only: bool) -> Iterator[Queue]:
    """An application's queue (``--app``, a Flask app's, a Django project's)
    as a command other than ``worker`` and ``migrate`` uses it, for the
    ``with`` block: its store must exist already (a command creates no file
    and no PostgreSQL schema: ``CommandError`` status 1, or the store's
    ``StoreError``), and for a command that only looks (``read_only``), a
    JSON store the application owns is read through a read-only queue of its
    own (closed afterwards), so the application keeps (or takes) its lock.
    ``CommandError`` (status 2) for a queue that keeps its jobs in memory,
    out of reach of the command."""
    with _no_schema_changes(queue.store):
        found = command_queue(queue, read_only=read_only)
        try:
            yield found
        finally:
            if found is not queue:
                found.close()


def command_queue(queue: Queue, *, read_only: bool) -> Queue:
    """``queue`` as a command uses it (see ``queue_for_command``, which also
    keeps the schema as it is): ``queue`` itself, or a read-only queue of
    its own that the caller closes."""
    store = queue.store
    # An application's queue opens its store on first use (importing the
    # module, init_app, opened nothing): refused before that use.
    require_existing(store, " (the app's store)")
    if capabilities_of(store).owner_writes:
        reader = cast(OwnedStore, store).reader() if read_only else store
        return queue if reader is store else JobQueue(None, store=reader)
    if not store.keeps_results:
        raise CommandError(
            "the app's queue keeps its jobs in memory (store=None), out of reach "
            "of another process; give it a persistent store",
            EXIT_USAGE,
        )
    return queue


def require_existing(store: Store, whose: str = "") -> None:
    """``CommandError`` (status 1) unless ``store``'s files exist (a store
    kept in files: JSON, SQLite): a command only looks at or manages a
    store, so opening a missing one would leave an empty store behind (a
    typo in a path, a command run before the app ever started) where an
    error was due. ``whose`` says who named it."""
    can = capabilities_of(store)
    missing = cast(FileStore, store).missing() if can.files else None
    if missing is None:
        return
    if can.schema:
        create = "create it by starting the app or with migrate"
    else:
        create = "start the app, which creates it"
    raise CommandError(
        f"{missing}{whose}: a command never creates one; check the path, or {create}"
    )


def stop_schema_changes(store: Store) -> bool:
    """From now on, opening ``store`` only checks its schema, never creates
    or upgrades it (``auto_migrate`` off: PostgreSQL); whether that changed
    anything."""
    if not capabilities_of(store).migrates_on_open:
        return False
    switch = cast(MigratingStore, store)
    changed, switch.auto_migrate = switch.auto_migrate, False
    return changed


@contextlib.contextmanager
def _no_schema_changes(store: Store) -> Iterator[None]:
    """``stop_schema_changes`` while a command uses an application's store,
    as ``--store`` does: a command never creates a missing schema (nor
    upgrades an older one), and says so. Restored afterwards, for an
    application that goes on."""
    if not stop_schema_changes(store):
        yield
        return
    try:
        yield
    finally:
        cast(MigratingStore, store).auto_migrate = True
