"""Wake-ups across processes for the PostgreSQL store: LISTEN/NOTIFY.

After each enqueue (and each retry, revival or recovery) commits, a thread of
the store (``Notifier``) sends ``pg_notify`` in a small transaction of its own
(requests made while one is on its way coalesce into the next), so writers
never serialize on NOTIFY's commit-time lock; an enqueue inside the caller's
transaction notifies in that transaction, delivered when it commits. One
listener thread per opened store (``Listener``) holds a dedicated autocommit
connection that ``LISTEN``\\ s and wakes this process's idle workers within
milliseconds; it reconnects (and listens again) by itself. Idle workers also
look on their own at least every second, which covers a lost connection,
``listen=False`` and PgBouncer.

A notification's payload is ``<sender>/<count>:<queue>``: the sending
process's token (so that its own listener skips it), how many jobs became
claimable, and the queue. The listener wakes that many idle workers, not all
of them: waking every idle worker for each job made all but one of them
claim nothing and read the next due time, two round trips each, which under
load cost more than the jobs. A payload without a count (``<sender>:<queue>``:
an enqueue in the caller's transaction, whose notifications PostgreSQL folds
into one, or an older jobq, which reads ``<sender>/<count>`` as a sender and
so still wakes for it) wakes every idle worker.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import select
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from jobq.errors import StoreError
from jobq.stores._threads import start_helper
from jobq.stores.base import Signal
from jobq.stores.postgres.connections import Database
from jobq.stores.postgres.statements import NOTIFY

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger("jobq.stores.postgres")

#: The listener's reconnect delays (seconds): doubling from the first to the last.
RECONNECT_DELAYS = (0.1, 5.0)

#: Seconds between pings of an idle LISTEN connection, to notice a dead one.
LISTEN_PING = 30.0

#: The most jobs one notification announces.
MAX_COUNT = 1_000_000


def wake_count(payload: str, *, queue: str, token: str) -> int | None:
    """How many idle workers a notification asks this listener to wake: 0 for
    another queue's or our own, ``None`` for "all" (no count in it)."""
    sender, _, named = payload.partition(":")
    if named != queue:
        return 0
    sender, _, count = sender.partition("/")
    if sender == token:
        return 0
    if count.isdigit() and len(count) <= 7:
        return max(1, min(int(count), MAX_COUNT))
    return None


def channel_name(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema (at most 63 bytes, PostgreSQL's
    limit for names)."""
    name = f"jobq.{schema}"
    if len(name.encode()) > 63:
        name = "jobq." + hashlib.sha256(schema.encode()).hexdigest()[:40]
    return name


class Notifier:
    """Tells the listeners of other processes (and other stores of this one)
    that a queue has new work, soon after a change committed.

    A thread, started at the first ``request``, sends the notification in a
    transaction of its own that does not wait for the WAL flush, so changes
    never wait for it, and NOTIFY's commit-time lock never serializes them.
    Requests coalesce: the thread takes the jobs requested so far before it
    sends, so every change that committed before a notification is covered
    by it, and the notification counts their jobs.

    ``token`` goes with every notification, so that this process's listener
    skips them; ``connection`` lends a connection for one call.
    """

    def __init__(
        self,
        *,
        channel: str,
        queue: str,
        token: str,
        connection: Callable[[], AbstractContextManager[psycopg.Connection[Any]]],
    ) -> None:
        self._channel = channel
        self._token = token
        self._queue = queue
        self._connection = connection
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wanted = threading.Event()
        self._jobs = 0  # requested and not sent yet; under _lock
        self._thread: threading.Thread | None = None

    def request(self, count: int = 1) -> None:
        """Ask for a notification after the change that just committed made
        ``count`` jobs claimable."""
        with self._lock:
            self._jobs += count
        self._wanted.set()
        if self._thread is None:
            self._start()

    def stop(self) -> None:
        """Ask the thread to send what is still due and stop; see ``join``."""
        with self._lock:
            self._stop.set()
            self._wanted.set()

    def join(self) -> None:
        """Wait for the thread to end, unless this is the thread."""
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None and not self._stop.is_set():
                thread = threading.Thread(
                    target=self._send,
                    name=f"jobq-postgres-notify-{self._queue}",
                    daemon=True,
                )
                if start_helper(thread):  # else others find the jobs by polling
                    self._thread = thread

    def _send(self) -> None:
        """Send a notification for every batch of requests; at ``stop``, send
        the one still due (unless the last one failed: the server is away)."""
        stop, wanted = self._stop, self._wanted
        healthy = True
        while True:
            wanted.wait()
            wanted.clear()
            closing = stop.is_set()
            with self._lock:
                jobs, self._jobs = self._jobs, 0
            if jobs and (healthy or not closing):
                count = max(1, min(jobs, MAX_COUNT))
                message = {
                    "channel": self._channel,
                    "message": f"{self._token}/{count}:{self._queue}",
                }
                try:
                    with self._connection() as conn:
                        conn.execute(NOTIFY, message)
                    healthy = True
                except StoreError as exc:
                    # Idle workers elsewhere still look every second.
                    logger.debug("jobq could not notify other processes: %s", exc)
                    healthy = False
                    stop.wait(0.1)
                except Exception:
                    logger.exception("jobq could not notify other processes")
                    healthy = False
                    stop.wait(0.1)
            if closing:
                return


class Listener:
    """A thread that wakes this process's idle workers at each notification
    for the queue; it reconnects and listens again when the connection fails.
    Without notifications (``listen=False``, or while reconnecting) it wakes
    them every ``poll_interval``.

    ``listen``: ``True``, ``False``, or a connection string for the LISTEN
    connection. ``token``: what this process's ``Notifier`` sends, skipped
    here. ``signal`` gives the store's current ``Signal``.
    """

    def __init__(
        self,
        db: Database,
        *,
        listen: bool | str,
        channel: str,
        queue: str,
        token: str,
        poll_interval: float,
        signal: Callable[[], Signal],
    ) -> None:
        self._db = db
        self._listen = listen
        self._channel = channel
        self._queue = queue
        self._token = token
        self._poll_interval = poll_interval
        self._signal = signal
        #: Whether the thread holds a LISTEN connection now.
        self.listening = False
        self._stop = threading.Event()
        self._pipe: tuple[int, int] | None = None  # wakes the thread to stop
        self._conn: psycopg.Connection[Any] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._pipe = os.pipe()
        for fd in self._pipe:
            os.set_blocking(fd, False)
        thread = threading.Thread(
            target=self._run,
            args=(self._pipe[0], self._stop),
            name=f"jobq-postgres-listen-{self._queue}",
            daemon=True,
        )
        if start_helper(thread):  # else idle workers look every second
            self._thread = thread

    def stop(self) -> None:
        """Ask the thread to stop, at once; see ``join`` and ``close``."""
        self._stop.set()
        if self._pipe is not None:
            with contextlib.suppress(OSError):
                os.write(self._pipe[1], b"x")

    def join(self) -> None:
        """Wait for the thread to end, unless this is the thread."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def close(self) -> None:
        """Close the pipe that wakes the thread (after ``join``)."""
        pipe, self._pipe = self._pipe, None
        for fd in pipe or ():
            with contextlib.suppress(OSError):
                os.close(fd)

    def abandon(self) -> psycopg.Connection[Any] | None:
        """In a forked child: close this process's copies of the pipe (the
        parent's stay open), and return the parent's LISTEN connection, if
        any, which must be neither used nor closed here."""
        self.close()
        return self._conn

    def _run(self, wake_fd: int, stop: threading.Event) -> None:
        """Listen, or poll with ``listen=False``, until stopped."""
        try:
            if self._listen is False:
                while not self._stopped(wake_fd, stop, self._poll_interval):
                    self._wake_workers()
                return
            self._listen_loop(wake_fd, stop)
        except Exception:
            logger.exception(
                "the jobq listener for %s stopped; idle workers still look for "
                "jobs every second",
                self._db.where,
            )

    def _listen_loop(self, wake_fd: int, stop: threading.Event) -> None:
        import psycopg
        from psycopg import sql

        db = self._db
        conninfo = self._listen if isinstance(self._listen, str) else None
        statement = sql.SQL("LISTEN {}").format(sql.Identifier(self._channel))
        delay = RECONNECT_DELAYS[0]
        failures = 0
        while not stop.is_set():
            try:
                conn = db.connect(conninfo)
            except psycopg.Error as exc:
                failures += 1
                log = logger.warning if failures == 1 else logger.debug
                log("jobq cannot LISTEN at %s (%s); polling until it can",
                    db.where, str(exc).strip())  # fmt: skip
                self._wake_workers()
                if self._stopped(wake_fd, stop, min(delay, self._poll_interval)):
                    return
                delay = min(delay * 2, RECONNECT_DELAYS[1])
                continue
            self._conn = conn
            try:
                conn.execute(statement)
                if failures:
                    logger.info("jobq listens at %s again", db.where)
                failures, delay = 0, RECONNECT_DELAYS[0]
                self.listening = True
                self._wake_workers()  # whatever came while nobody listened
                self._relay(conn, wake_fd, stop)
            except psycopg.Error as exc:
                failures += 1
                logger.warning(
                    "jobq's LISTEN connection to %s failed (%s); reconnecting",
                    db.where,
                    str(exc).strip(),
                )
            finally:
                self.listening = False
                self._conn = None
                conn.close()

    def _relay(
        self, conn: psycopg.Connection[Any], wake_fd: int, stop: threading.Event
    ) -> None:
        """Pass notifications for this queue on to idle workers until stopped.
        Blocks on the connection's socket (``poll``, which unlike ``select``
        takes descriptors beyond 1023), pinging every ``LISTEN_PING``."""
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        poller.register(wake_fd, select.POLLIN)
        while not stop.is_set():
            ready = poller.poll(LISTEN_PING * 1000)
            if stop.is_set() or any(fd == wake_fd for fd, _ in ready):
                return
            if ready:
                wake, everyone = 0, False
                for notification in conn.notifies(timeout=0):
                    count = wake_count(
                        notification.payload, queue=self._queue, token=self._token
                    )
                    if count is None:
                        everyone = True
                    else:
                        wake += count
                if wake or everyone:
                    self._wake_workers(wake, everyone=everyone)
            else:
                conn.execute("SELECT 1")  # a dead connection fails here
                # A notification that came with the answer waits in psycopg's
                # backlog, where poll() cannot see it: wake up in case.
                self._wake_workers()

    def _stopped(self, wake_fd: int, stop: threading.Event, timeout: float) -> bool:
        """Wait up to ``timeout``; whether the listener should stop."""
        if stop.is_set():
            return True
        poller = select.poll()
        poller.register(wake_fd, select.POLLIN)
        poller.poll(timeout * 1000)
        return stop.is_set()

    def _wake_workers(self, count: int = 0, *, everyone: bool = True) -> None:
        """Wake ``count`` idle workers; with ``everyone``, all of them (at
        least one, for a worker about to wait)."""
        signal = self._signal()
        with signal.lock:
            if everyone:
                count = max(count, signal.idle_workers, 1)
            signal.jobs_added_locked(count)
