"""Connections to the PostgreSQL store's database: the driver, direct
connections, the pool and its connections, and psycopg's errors as
``StoreError``.

Every change is one short transaction, most of them a single statement in
autocommit mode, on a connection borrowed from a pool and returned at once:
no lock, transaction or connection is held while a handler runs. psycopg is
imported only when a store is built, so ``import jobq`` needs nothing beyond
the standard library.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from jobq.errors import OutcomeUnknown, StoreError
from jobq.extras import requires

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

#: Pools, listener connections and pipes inherited from a parent process through
#: ``fork``: never used, and never closed either (closing would end the
#: parent's sessions), only kept from the garbage collector.
inherited: list[object] = []


def require_driver() -> None:
    """Import psycopg and psycopg_pool, or say how to install them
    (``MissingExtra``)."""
    with requires("postgres", "the PostgreSQL store", "psycopg 3 and psycopg_pool"):
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401


def first(row: Any) -> Any:
    """The first column of a row; ``None`` for no row."""
    return None if row is None else row[0]


class Database:
    """One PostgreSQL database as a store reaches it: where it is, how
    connections are made, and what its errors mean.

    ``conninfo`` and ``params``: the connection string and its parameters
    (``conninfo.parse_conninfo``). ``queue`` names connections
    (``application_name``), ``schema`` and ``queue`` the pool; ``prepare``,
    ``pool_size``, ``connect_timeout`` and ``call_timeout`` are the store's
    options.
    """

    def __init__(
        self,
        conninfo: str,
        params: dict[str, Any],
        *,
        queue: str,
        schema: str,
        prepare: bool,
        pool_size: int,
        connect_timeout: float,
        call_timeout: float,
    ) -> None:
        self.conninfo = conninfo
        self.params = params
        self.queue = queue
        self.schema = schema
        self.prepare = prepare
        self.pool_size = pool_size
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self._deadlines = Deadlines(call_timeout)

    @property
    def where(self) -> str:
        """The server and database, as messages name them (no password)."""
        p = self.params
        host = (
            p.get("host")
            or p.get("hostaddr")
            or os.environ.get("PGHOST")
            or ("localhost (socket)")
        )
        port = p.get("port") or os.environ.get("PGPORT") or "5432"
        user = p.get("user") or os.environ.get("PGUSER") or ""
        dbname = p.get("dbname") or os.environ.get("PGDATABASE") or user or "?"
        return f"PostgreSQL at {host}:{port}, database {dbname!r}" + (
            f" as {user!r}" if user else ""
        )

    def connect_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of every connection (direct, pooled, LISTEN)."""
        kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(2, math.ceil(self.connect_timeout)),
        }
        if not self.prepare:
            kwargs["prepare_threshold"] = None
        if "application_name" not in self.params and "PGAPPNAME" not in os.environ:
            kwargs["application_name"] = f"jobq:{self.queue}"[:63]
        return kwargs

    def connect(self, conninfo: str | None = None) -> psycopg.Connection[Any]:
        """A new connection to ``conninfo`` (by default the store's); raises
        psycopg's errors as they are."""
        import psycopg

        return psycopg.connect(
            self.conninfo if conninfo is None else conninfo, **self.connect_kwargs()
        )

    @contextlib.contextmanager
    def direct(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection of its own (schema work, ``check``), closed after use."""
        import psycopg

        try:
            conn = self.connect()
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot connect to {self.where}: {str(exc).strip()}"
            ) from exc
        try:
            with conn:
                yield conn
        except psycopg.Error as exc:
            raise self.error(exc) from exc

    def after_fork(self) -> None:
        """In a forked child, before its first call."""
        self._deadlines.after_fork()

    def new_pool(self) -> psycopg_pool.ConnectionPool[psycopg.Connection[Any]]:
        """A pool for this process, opening its connections in the background."""
        import psycopg_pool

        pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] = (
            psycopg_pool.ConnectionPool(
                self.conninfo,
                kwargs=self.connect_kwargs(),
                min_size=1,
                max_size=self.pool_size,
                open=False,
                name=f"jobq:{self.schema}:{self.queue}",
                timeout=self.connect_timeout,
                num_workers=2,
            )
        )
        pool.open(wait=False)
        return pool

    @contextlib.contextmanager
    def borrow(
        self, pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]]
    ) -> Iterator[psycopg.Connection[Any]]:
        """A connection from ``pool`` for one call, returned at once.

        Connections the server closed while they sat in the pool (a restart)
        are noticed without a round trip and replaced. A connection lost
        during the call raises ``OutcomeUnknown``: what was sent may have
        been committed, only its answer never came. So does a call that waits
        for the server longer than ``call_timeout``: its connection is shut
        down (a server or path that stopped answering never hangs a call).
        """
        import psycopg
        import psycopg_pool

        deadline = time.monotonic() + self.connect_timeout
        try:
            while True:
                conn = pool.getconn(timeout=max(deadline - time.monotonic(), 0.001))
                if _alive(conn):
                    break
                pool.putconn(conn)  # broken: the pool replaces it
        except psycopg_pool.PoolTimeout as exc:
            raise StoreError(self._unreachable()) from exc
        except psycopg_pool.PoolClosed as exc:  # a call that outlived close()
            raise StoreError(f"{self.where}: the store is closed") from exc
        except psycopg.Error as exc:
            raise self.error(exc) from exc
        call = self._deadlines.watch(conn)
        try:
            yield conn
        except psycopg.Error as exc:
            if conn.broken or conn.closed:
                raise self.lost(exc, self._deadlines.end(call)) from exc
            raise self.error(exc) from exc
        finally:
            self._deadlines.end(call)
            pool.putconn(conn)

    def lost(self, exc: Exception, timed_out: bool) -> OutcomeUnknown:
        """The connection broke during a call (or was shut down at its
        deadline): whether the server carried out what it was sent is unknown."""
        why = (
            f"no answer within call_timeout={self.call_timeout:g} s"
            if timed_out
            else f"connection lost: {str(exc).strip()}"
        )
        return OutcomeUnknown(
            f"{self.where}: {why}; what was sent may or may not have been done"
        )

    def _unreachable(self) -> str:
        """Why no connection came within ``connect_timeout``: try one to see,
        for at most 2 s (libpq's shortest timeout)."""
        import psycopg

        try:
            with psycopg.connect(
                self.conninfo, **{**self.connect_kwargs(), "connect_timeout": 2}
            ):
                pass
        except psycopg.Error as exc:
            reason = str(exc).strip()
        else:
            reason = f"all {self.pool_size} connections of the pool stayed busy"
        return (
            f"no connection to {self.where} within "
            f"connect_timeout={self.connect_timeout:g} s: {reason}"
        )

    def error(self, exc: Exception) -> StoreError:
        """A ``StoreError`` naming the database, saying what to do where we can."""
        import psycopg

        if isinstance(exc, psycopg.errors.InsufficientPrivilege):
            return StoreError(
                f"{self.where}: permission denied ({str(exc).strip()}); see "
                "PostgresStore.check()"
            )
        errors = psycopg.errors
        if isinstance(exc, errors.UndefinedTable | errors.UndefinedFunction):
            return StoreError(
                f"{self.where}: the jobq schema {self.schema!r} is missing or "
                f"incomplete ({str(exc).strip()}); run PostgresStore(...).migrate()"
            )
        if isinstance(exc, errors.DeadlockDetected | errors.SerializationFailure):
            return StoreError(
                f"{self.where}: the database rolled back the call's transaction "
                f"to end a conflict ({str(exc).strip()}); the call can be tried again"
            )
        if isinstance(exc, psycopg.OperationalError):
            return StoreError(f"{self.where}: connection lost: {str(exc).strip()}")
        return StoreError(f"{self.where}: {type(exc).__name__}: {str(exc).strip()}")


class Deadlines:
    """Calls on pooled connections that wait for the server longer than
    ``seconds``: one thread (started with the first call, gone after a while
    without calls) shuts each such connection down, so that the waiting
    call fails at once, as if the server had closed it. A partition, a
    stalled proxy or a frozen server otherwise leaves a call waiting as long
    as TCP keeps the connection, which is forever when something on the way
    still acknowledges the packets."""

    #: Seconds without calls after which the thread ends.
    IDLE = 10.0

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._calls: dict[int, tuple[float, psycopg.Connection[Any]]] = {}
        self._expired: set[int] = set()
        self._numbers = itertools.count()
        self._changed = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None

    def watch(self, conn: psycopg.Connection[Any]) -> int:
        """Start watching a call on ``conn``; its number, for ``end``."""
        number = next(self._numbers)
        with self._changed:
            # Every call gets the same timeout, so the calls' insertion order
            # is their deadlines' order: the first one is due first.
            self._calls[number] = (time.monotonic() + self.seconds, conn)
            thread = self._thread
            if thread is None or not thread.is_alive() or thread.ident is None:
                self._start()
            elif len(self._calls) == 1:
                self._changed.notify()
        return number

    def end(self, number: int) -> bool:
        """The call ``number`` is over; whether its deadline had passed (its
        connection shut down). Its connection is no longer touched after."""
        with self._changed:
            self._calls.pop(number, None)
            if number not in self._expired:
                return False
            self._expired.discard(number)
            return True

    def after_fork(self) -> None:
        """In a forked child: the parent's calls and thread are not ours (and
        the lock may have been held by a thread that does not exist here)."""
        self._calls, self._expired = {}, set()
        self._changed = threading.Condition(threading.Lock())
        self._thread = None

    def _start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name="jobq-postgres-deadlines", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        with self._changed:
            while True:
                if not self._calls:
                    if not self._changed.wait(self.IDLE) and not self._calls:
                        self._thread = None
                        return
                    continue
                number, (deadline, conn) = next(iter(self._calls.items()))
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._changed.wait(wait)
                    continue
                del self._calls[number]
                self._expired.add(number)
                _shut_down(conn)


def _shut_down(conn: psycopg.Connection[Any]) -> None:
    """Shut the connection's socket down (on a duplicate of its descriptor,
    which psycopg keeps): the call waiting on it reads the end of the stream."""
    with (
        contextlib.suppress(OSError, ValueError),
        socket.socket(fileno=os.dup(conn.fileno())) as sock,
    ):
        sock.shutdown(socket.SHUT_RDWR)


def _alive(conn: psycopg.Connection[Any]) -> bool:
    """Whether a pooled connection still works, without a round trip: a
    server that closed it (a restart, ``pg_terminate_backend``) left an error
    and end-of-file in its socket, which reading without blocking finds."""
    import psycopg

    if conn.closed or conn.broken:
        return False
    try:
        # The first read takes the server's farewell message, if any; only a
        # second one meets the end of the stream.
        conn.pgconn.consume_input()
        conn.pgconn.consume_input()
    except psycopg.OperationalError:
        return False
    return conn.pgconn.status == psycopg.pq.ConnStatus.OK
