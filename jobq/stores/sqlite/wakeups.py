"""Wake-ups across processes for the SQLite store: the ``data_version`` watcher.

Idle workers wake at once for jobs added by this process (``Signal``), and
within about ``poll_interval`` for jobs added by others: a watcher thread
polls ``PRAGMA data_version``, which changes whenever another connection
commits, and wakes this process's idle workers and joiners then.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable

from jobq.errors import StoreError
from jobq.stores.base import Signal
from jobq.stores.sqlite.connections import Database, guard
from jobq.stores.sqlite.statements import CHECKPOINT, DATA_VERSION

logger = logging.getLogger("jobq.stores.sqlite")

#: Seconds between two looks at ``data_version`` while other connections commit.
QUICK_POLL = 0.002
#: Seconds between the watcher's checkpoints while commits come.
CHECKPOINT_EVERY = 0.05


class Watcher:
    """A thread that wakes this process's idle workers and joiners when
    another connection commits to the file.

    ``signal`` gives the store's current ``Signal``. One watcher runs from
    ``start`` to ``stop``; a store that opens again starts a new one.
    """

    def __init__(
        self, db: Database, *, poll_interval: float, signal: Callable[[], Signal]
    ) -> None:
        self._db = db
        self._poll_interval = poll_interval
        self._signal = signal
        self._stop = threading.Event()
        self._conn: sqlite3.Connection | None = None  # the thread's
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start polling; the first reading is taken here, so a commit made by
        another process any time after ``start`` returns is noticed."""
        conn = self._db.connect()
        try:
            version = conn.execute(DATA_VERSION).fetchone()[0]
        except sqlite3.Error as exc:
            conn.close()
            raise self._db.error(exc) from exc
        self._conn = conn
        self._thread = threading.Thread(
            target=self._watch,
            args=(version,),
            name=f"jobq-sqlite-watch-{os.path.basename(self._db.path)}",
            daemon=True,
        )
        self._thread.start()

    def is_alive(self) -> bool:
        """Whether the thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Ask the thread to stop (it closes its own connection); see ``join``."""
        self._stop.set()

    def join(self) -> None:
        """Wait for the thread to end, unless this is the thread. Call it
        holding no lock: the thread may wait for a fork to finish."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def take_connection(self) -> sqlite3.Connection | None:
        """The thread's connection, taken away (to close before a fork, or to
        set aside in a child); the thread opens a new one on its next look."""
        conn, self._conn = self._conn, None
        return conn

    def _watch(self, last: int) -> None:
        """Wake this process's idle workers and joiners when another
        connection commits: ``data_version`` changes then, and only then.

        A fork closes the thread's connection (``take_connection``); a new one
        starts a new reading (values of two connections do not compare), and
        wakes the workers once for what may have been committed in between.

        It looks every ``QUICK_POLL`` seconds while commits keep coming, and
        backs off to ``poll_interval`` when they stop: a busy queue sees other
        processes' jobs within milliseconds, an idle one costs next to nothing.

        With ``synchronous="NORMAL"`` it also checkpoints the WAL every
        ``CHECKPOINT_EVERY`` seconds while commits come, so that no commit of
        a worker or producer has to: the commit that reaches SQLite's
        automatic checkpoint copies the WAL into the database and syncs it,
        stalling its caller for milliseconds.
        """
        db, stop = self._db, self._stop
        pid = os.getpid()
        interval = self._poll_interval
        next_checkpoint = 0.0
        try:
            while not stop.wait(interval):
                try:
                    with guard:
                        conn = self._conn
                        reconnected = conn is None
                        if conn is None:
                            conn = self._conn = db.connect()
                        version = conn.execute(DATA_VERSION).fetchone()[0]
                        if (
                            db.checkpoints_in_background
                            and version != last
                            and time.monotonic() >= next_checkpoint
                        ):
                            conn.execute(CHECKPOINT).fetchall()
                            next_checkpoint = time.monotonic() + CHECKPOINT_EVERY
                except (sqlite3.Error, StoreError):
                    logger.exception("watching %s failed; trying again", db.path)
                    stop.wait(1.0)
                    continue
                if not reconnected and version == last:
                    interval = min(interval * 2, self._poll_interval)
                else:
                    last = version
                    interval = min(QUICK_POLL, self._poll_interval)
                    signal = self._signal()
                    with signal.lock:
                        signal.jobs_added_locked(max(signal.idle_workers, 1))
                        signal.job_settled_locked()
        finally:
            if os.getpid() == pid:
                with guard:
                    conn, self._conn = self._conn, None
                    if conn is not None:
                        conn.close()
