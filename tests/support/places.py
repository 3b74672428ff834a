"""Where one example of a property test keeps its store: a fresh place per
example (a temporary directory, or a PostgreSQL queue of its own), with
stores built over it again after a restart and copies of it after a crash."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from jobq.stores import JsonFileStore, MemoryStore, PostgresStore, SqliteStore, Store

#: SQLite leases, in fake seconds (its leases follow the queue's clock).
SQLITE_LEASE = 60.0
#: PostgreSQL leases, in real seconds (they follow the database's clock).
POSTGRES_LEASE = 0.05


class Place:
    """Where one example's store lives; builds stores over it."""

    #: Survives a restart (restart and crash rules apply).
    persistent = False
    #: Its stores order jobs on a clock of their own, not the queue's.
    own_clock = False

    def store(self) -> Store:
        raise NotImplementedError

    def crash_copy(self) -> Place:
        """What a process killed now leaves behind, as a new place."""
        raise NotImplementedError

    def remove(self) -> None:
        """Delete what this place holds (at the end of an example)."""


class MemoryPlace(Place):
    def store(self) -> Store:
        return MemoryStore()


def _sockets(directory: str, names: list[str]) -> list[str]:
    """The sockets among ``names`` (SQLite's wake-up sockets), which cannot
    be copied: the next process makes its own."""
    return [
        name
        for name in names
        if stat.S_ISSOCK(os.lstat(os.path.join(directory, name)).st_mode)
    ]


class DirectoryPlace(Place):
    """A file store in a temporary directory of its own."""

    persistent = True

    def __init__(self, build: Callable[[Path], Store]) -> None:
        self.build = build
        self.directory = Path(tempfile.mkdtemp(prefix="jobq-model-"))

    def store(self) -> Store:
        return self.build(self.directory)

    def crash_copy(self) -> Place:
        copy = DirectoryPlace(self.build)
        shutil.copytree(
            self.directory, copy.directory, dirs_exist_ok=True, ignore=_sockets
        )
        return copy

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


class PostgresPlace(Place):
    """A queue of its own (a fresh name) in the test session's schema."""

    persistent = True

    def __init__(self, template: PostgresStore) -> None:
        self.conninfo, self.schema = template.conninfo, template.schema
        self.clock = template.clock
        self.own_clock = template.uses_own_clock
        self.queue = f"model-{uuid.uuid4().hex[:12]}"

    def store(self) -> Store:
        return PostgresStore(
            self.conninfo,
            schema=self.schema,
            queue=self.queue,
            clock=self.clock,
            lease_seconds=POSTGRES_LEASE,
            listen=False,
            pool_size=2,
        )

    def crash_copy(self) -> Place:
        return self  # every change that returned is committed in the database


def json_store(directory: Path) -> Store:
    # Compaction only at save() and close(), never in the background, so that
    # a crash copy is never taken half-way through one.
    return JsonFileStore(directory / "jobs.json", compact_bytes=1 << 40)


def sqlite_store(directory: Path) -> Store:
    return SqliteStore(directory / "jobs.db", lease_seconds=SQLITE_LEASE)


def places(store_kind: str, template: Store) -> Callable[[], Place]:
    """A new place for each example, for stores like ``template``."""
    if store_kind == "memory":
        return MemoryPlace
    if store_kind == "json":
        return lambda: DirectoryPlace(json_store)
    if store_kind == "sqlite":
        return lambda: DirectoryPlace(sqlite_store)
    if store_kind == "postgres":
        assert isinstance(template, PostgresStore)
        return lambda: PostgresPlace(template)
    pytest.fail(f"no model test for the store kind {store_kind!r} yet")
