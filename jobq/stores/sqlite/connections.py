"""Connections to the SQLite store's file: opening them, transactions on them,
SQLite's errors as ``StoreError``, and the fork guard that keeps ``os.fork()``
away from them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import urllib.parse
import weakref
from collections.abc import Iterator
from typing import Protocol

from jobq.errors import StoreError
from jobq.stores.sqlite.statements import AUTOCHECKPOINT, SYNCHRONOUS

logger = logging.getLogger("jobq.stores.sqlite")


class Database:
    """The database file of one store, and how its connections are made.

    ``synchronous``: ``"NORMAL"`` or ``"FULL"`` (checked by the store).
    ``busy_timeout``: seconds a connection waits for another writer.

    This process's writers take turns on ``_writing`` before SQLite's write
    lock: a thread that finds it taken sleeps until it is let go, where
    SQLite's busy handler would sleep 1 ms or more and look again (a worker's
    claim behind an enqueue's commit started a millisecond late). Other
    processes' writers are still waited for by SQLite (``busy_timeout``).
    No transaction is open at a fork (``ForkGuard``), so the lock is free then.
    """

    def __init__(self, path: str, *, synchronous: str, busy_timeout: float) -> None:
        self.path = path
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self._writing = threading.Lock()

    @property
    def checkpoints_in_background(self) -> bool:
        """The watcher checkpoints (see ``wakeups.Watcher``) with NORMAL only:
        with FULL every commit syncs anyway, and a checkpoint's sync beside
        them slowed them down more than it saved."""
        return self.synchronous == "NORMAL"

    def create_file(self) -> None:
        """Create the database file with mode 0600 (SQLite gives its -wal and
        -shm files the same mode); an existing file is left unopened.

        Never open an existing file here: closing any descriptor of a file
        drops every POSIX lock this process holds on it, SQLite's included,
        and another process closing its last connection would then think
        itself the last one and delete the -wal and -shm files under this
        process's open connections."""
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o600)
        except FileExistsError:
            return
        except OSError as exc:
            raise StoreError(f"cannot open {self.path}: {exc.strerror}") from exc
        os.close(fd)

    def connect(self) -> sqlite3.Connection:
        """A new connection; ``mode=rw``: a file deleted under us is an error,
        never a fresh empty database."""
        uri = f"file:{urllib.parse.quote(self.path)}?mode=rw"
        try:
            conn = sqlite3.connect(
                uri,
                uri=True,
                timeout=self.busy_timeout,
                isolation_level=None,  # we BEGIN and COMMIT ourselves
                check_same_thread=False,  # close() closes every thread's one
            )
        except sqlite3.Error as exc:
            raise self.error(exc) from exc
        try:
            conn.execute(SYNCHRONOUS[self.synchronous])
            if self.checkpoints_in_background:
                conn.execute(AUTOCHECKPOINT)
        except sqlite3.Error as exc:
            conn.close()
            raise self.error(exc) from exc
        return conn

    @contextlib.contextmanager
    def transaction(self, conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT on ``conn``, rolled back if the block
        raises; SQLite's errors become ``StoreError``. One at a time in this
        process (see the class)."""
        if not self._writing.acquire(timeout=self.busy_timeout):
            raise self.locked()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise self.error(exc) from exc
        finally:
            self._writing.release()

    def error(self, exc: sqlite3.Error) -> StoreError:
        """A ``StoreError`` naming the file, saying what to do where we can."""
        code = primary_code(exc)
        if code in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT):
            return StoreError(
                f"{self.path} is not a SQLite database, or it is damaged ({exc}); "
                "it was left as it is, since other processes may use it: move it "
                "away yourself, or choose another path"
            )
        if code == sqlite3.SQLITE_BUSY:
            return self.locked()
        return StoreError(f"{self.path}: {exc}")

    def locked(self) -> StoreError:
        """Another writer held the database longer than ``busy_timeout``."""
        return StoreError(
            f"{self.path}: the database stayed locked by another writer for "
            f"more than busy_timeout={self.busy_timeout:g} s"
        )


def primary_code(exc: sqlite3.Error) -> int:
    """SQLite's primary result code (SQLITE_BUSY for SQLITE_BUSY_SNAPSHOT...);
    0 for errors the sqlite3 module raises itself (a closed connection)."""
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF


# -- fork ----------------------------------------------------------------------------

#: Connections inherited from a parent process through ``fork``. Never used,
#: and never closed either: SQLite's "How To Corrupt" warns against carrying a
#: connection across fork, and closing one in the child is using it. (With
#: ``os.fork`` there are none: ``ForkGuard`` closes them before the fork.)
inherited: list[sqlite3.Connection] = []


class ForkSafe(Protocol):
    """What ``ForkGuard`` asks of a store whose connections it closes."""

    path: str

    def close_for_fork(self) -> None:
        """Close this process's connections: no thread uses them (the guard
        sees to that), and each reopens its own on next use."""


class ForkGuard:
    """Keeps ``os.fork()`` away from open SQLite connections and SQLite calls.

    SQLite keeps what this process holds on each open file (its locks, the
    WAL's shared-memory index) in process-wide tables that a forked child
    inherits, and a child's *new* connection to the same file shares them:
    it sees a write lock the parent held at the fork as held for ever
    ("database is locked"), and it takes no lock of its own on the file, so
    another process that closes the file last deletes the WAL under it and
    the child's later commits are lost. A fork while another thread is inside
    SQLite can also leave one of SQLite's mutexes locked in the child.

    So every use of a store's connections runs inside ``with guard:``;
    before a fork, ``before_fork`` holds new uses back, waits for the running
    ones, and closes the connections of every store it tracks (``track``).
    Threads reopen theirs on next use, in the parent and in the child alike,
    and the child inherits nothing. Entering and leaving costs about a
    microsecond.
    """

    def __init__(self) -> None:
        self._stores: weakref.WeakSet[ForkSafe] = weakref.WeakSet()
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._active = 0  # threads inside
        self._forking = False
        self._depth = threading.local()  # uses nest within one thread

    def track(self, store: ForkSafe) -> None:
        """Close ``store``'s connections before every fork, while it lives."""
        self._stores.add(store)

    def __enter__(self) -> None:
        depth: int = getattr(self._depth, "n", 0)
        if not depth:
            with self._lock:
                while self._forking:
                    self._idle.wait()
                self._active += 1
        self._depth.n = depth + 1

    def __exit__(self, *exc_info: object) -> None:
        depth = self._depth.n = self._depth.n - 1
        if not depth:
            with self._lock:
                self._active -= 1
                if self._forking and not self._active:
                    self._idle.notify_all()

    def before_fork(self) -> None:
        with self._lock:
            self._forking = True
            forker = 1 if getattr(self._depth, "n", 0) else 0  # never expected
            while self._active > forker:
                self._idle.wait()
        for store in list(self._stores):
            try:
                store.close_for_fork()
            except Exception:
                logger.exception("closing %s before a fork failed", store.path)

    def after_fork_in_parent(self) -> None:
        with self._lock:
            self._forking = False
            self._idle.notify_all()

    def after_fork_in_child(self) -> None:
        self._reset()  # the child's only thread is the one that forked


#: The one guard of this process: every use of a SQLite store's connections
#: runs inside ``with guard:``.
guard = ForkGuard()
os.register_at_fork(
    before=guard.before_fork,
    after_in_parent=guard.after_fork_in_parent,
    after_in_child=guard.after_fork_in_child,
)
