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
import math
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from jobq.errors import StoreError

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

#: How the package that brings the driver is installed.
INSTALL_HINT = "pip install 'jobq[postgres]'"

#: Pools, listener connections and pipes inherited from a parent process through
#: ``fork``: never used, and never closed either (closing would end the
#: parent's sessions), only kept from the garbage collector.
inherited: list[object] = []


def require_driver() -> None:
    """Import psycopg and psycopg_pool, or say how to install them."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "the PostgreSQL store needs psycopg 3 and psycopg_pool, which are not "
            f"installed: {INSTALL_HINT}"
        ) from exc


def first(row: Any) -> Any:
    """The first column of a row; ``None`` for no row."""
    return None if row is None else row[0]


class Database:
    """One PostgreSQL database as a store reaches it: where it is, how
    connections are made, and what its errors mean.

    ``conninfo`` and ``params``: the connection string and its parameters
    (``conninfo.parse_conninfo``). ``queue`` names connections
    (``application_name``), ``schema`` and ``queue`` the pool; ``prepare``,
    ``pool_size`` and ``connect_timeout`` are the store's options.
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
    ) -> None:
        self.conninfo = conninfo
        self.params = params
        self.queue = queue
        self.schema = schema
        self.prepare = prepare
        self.pool_size = pool_size
        self.connect_timeout = connect_timeout

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
        are noticed without a round trip and replaced.
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
        try:
            yield conn
        except psycopg.Error as exc:
            raise self.error(exc) from exc
        finally:
            pool.putconn(conn)

    def _unreachable(self) -> str:
        """Why no connection came within ``connect_timeout``: try one to see."""
        import psycopg

        try:
            with self.connect():
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
        if isinstance(exc, psycopg.OperationalError):
            return StoreError(f"{self.where}: connection lost: {str(exc).strip()}")
        return StoreError(f"{self.where}: {type(exc).__name__}: {str(exc).strip()}")


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
