"""Wake-ups across processes for the SQLite store, and its background
checkpoints: the ``Watcher`` thread of an open store.

Idle workers wake at once for jobs added by this process (``Signal``). For
jobs added by other processes the watcher waits on the store's doorbell
(``doorbell.Doorbell``): a process that commits a change that makes jobs
claimable rings every other open store of the database, whose watcher wakes
that many idle workers at once. Waiting on a socket costs no CPU, however
long the queue stays idle.

``join`` across processes: a process whose queue is joined says so to the
others (``joining``, at most twice a second while it waits); for a few
seconds after, a process whose change leaves nothing pending or running
rings it (``settled``), so its joiners look at once rather than at their next
one-second look.

Where the doorbell cannot be bound (the directory beside the database cannot
be made, sockets are not allowed there, a path too long without ``/proc``),
the watcher polls ``PRAGMA data_version`` instead, which changes whenever
another connection commits: every ``QUICK_POLL`` while commits come, backing
off to ``poll_interval`` when they stop. It still rings the others where it
can.

With ``synchronous="NORMAL"`` the watcher also checkpoints the WAL at most
every ``CHECKPOINT_EVERY`` while commits come (see ``Watcher.committed``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import sqlite3
import threading
import time
from collections.abc import Callable

from jobq.errors import StoreError
from jobq.stores._threads import start_helper
from jobq.stores.base import Signal
from jobq.stores.sqlite.connections import Database, guard
from jobq.stores.sqlite.doorbell import Doorbell
from jobq.stores.sqlite.statements import CHECKPOINT, DATA_VERSION

logger = logging.getLogger("jobq.stores.sqlite")

#: Seconds between two looks at ``data_version`` while other connections
#: commit (only without a doorbell).
QUICK_POLL = 0.002
#: Seconds between the watcher's checkpoints while commits come.
CHECKPOINT_EVERY = 0.05
#: A joining process says so at most this often (seconds) ...
JOIN_RING_EVERY = 0.5
#: ... and others ring it when their change settles the queue for this long
#: after they last heard it (``join`` looks at least every second).
JOIN_HEARD_FOR = 3.0
#: The most jobs one message announces (a bound on what a peer may claim).
MAX_COUNT = 1_000_000

#: The messages, each a letter: jobs became claimable (followed by their
#: count), a job settled the queue, a process joins.
ADDED, SETTLED, JOINING = b"a", b"s", b"j"

#: Wake-up directories this process warned about (once each).
_warned: set[str] = set()


def count_of(message: bytes) -> int:
    """The count of an ``ADDED`` message; anything malformed counts 1."""
    digits = message[1:]
    if digits.isdigit() and len(digits) <= 7:
        return max(1, min(int(digits), MAX_COUNT))
    return 1


class Watcher:
    """A thread that wakes this process's idle workers and joiners for other
    processes' changes, and checkpoints the WAL; and the doorbell through
    which this process tells the others about its own changes.

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
        self._lock = threading.Lock()  # the pipe, against a close meanwhile
        self._conn: sqlite3.Connection | None = None  # the thread's
        self._thread: threading.Thread | None = None
        self._bell: Doorbell | None = None
        #: Wakes the thread (to stop, or to checkpoint); with a doorbell only.
        self._pipe: tuple[int, int] | None = None
        self._next_checkpoint = 0.0
        self._next_join_ring = 0.0
        self._others_join_until = 0.0
        self._pid = os.getpid()

    @property
    def listening(self) -> bool:
        """Whether other processes' changes wake this process by datagram
        (``False``: it polls ``data_version``, or it stopped)."""
        return self._bell is not None and self._pipe is not None

    def start(self) -> None:
        """Bind the doorbell and start the thread: a change another process
        commits any time after ``start`` returns wakes this process."""
        self._bell = self._open_doorbell()
        if self._bell is not None and self._bell.name is not None:
            self._pipe = os.pipe()
            for fd in self._pipe:
                os.set_blocking(fd, False)
            thread = threading.Thread(
                target=self._listen, args=(self._bell, self._pipe[0]), daemon=True
            )
        else:
            conn = self._db.connect()
            try:
                version = conn.execute(DATA_VERSION).fetchone()[0]
            except sqlite3.Error as exc:
                conn.close()
                self._close_doorbell()
                raise self._db.error(exc) from exc
            self._conn = conn
            thread = threading.Thread(target=self._poll, args=(version,), daemon=True)
        thread.name = f"jobq-sqlite-watch-{os.path.basename(self._db.path)}"
        if start_helper(thread):  # else idle workers look every second
            self._thread = thread

    def _open_doorbell(self) -> Doorbell | None:
        """The doorbell, bound; unbound (it can still ring others) or None
        where that cannot be, said once per process and directory."""
        bell = None
        try:
            bell = Doorbell(self._db.path)
            bell.bind()
        except OSError as exc:
            directory = f"{self._db.path}-wake"
            if directory not in _warned:
                _warned.add(directory)
                logger.warning(
                    "jobq cannot make a wake-up socket in %s (%s): jobs "
                    "other processes enqueue are noticed within poll_interval="
                    "%g s instead of at once",
                    directory,
                    exc,
                    self._poll_interval,
                )
        return bell

    def is_alive(self) -> bool:
        """Whether the thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Ask the thread to stop (it closes its connection, its doorbell and
        its pipe); see ``join``."""
        self._stop.set()
        self._poke()

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

    def abandon(self) -> None:
        """In a forked child: close this process's copies of the doorbell's
        and the pipe's descriptors; the parent's stay as they are."""
        if self._bell is not None:
            self._bell.abandon()
        pipe, self._pipe = self._pipe, None
        for fd in pipe or ():
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- what this process tells the others -------------------------------------

    def jobs_added(self, count: int) -> None:
        """Ring the others: ``count`` jobs became claimable (or, for a delayed
        job, the next due time moved)."""
        bell = self._bell
        if bell is not None:
            bell.ring(ADDED + str(max(1, min(count, MAX_COUNT))).encode())

    def want_rings(self) -> None:
        """This store runs jobs: have the others ring it from now on (until
        then its socket is quiet: an enqueue-only process is never woken)."""
        bell = self._bell
        if bell is not None and not bell.rung:
            bell.want_rings()

    def joining(self) -> None:
        """This process's queue is joined: ask the others to ring when they
        settle the queue (called at each of the joiner's looks)."""
        bell = self._bell
        now = time.monotonic()
        if bell is not None and now >= self._next_join_ring:
            self._next_join_ring = now + JOIN_RING_EVERY
            bell.want_rings()
            bell.ring(JOINING)

    def others_join(self) -> bool:
        """Whether another process said lately that it joins."""
        return time.monotonic() < self._others_join_until

    def settled(self) -> None:
        """This process's change left nothing pending or running: ring the
        others if one of them joins."""
        bell = self._bell
        if bell is not None and self.others_join():
            bell.ring(SETTLED)

    def committed(self) -> None:
        """A write transaction of this process committed: have the thread
        checkpoint the WAL if it has not for ``CHECKPOINT_EVERY``, so that no
        commit of a worker or producer has to (the commit that reaches
        SQLite's automatic checkpoint copies the WAL into the database and
        syncs it, stalling its caller for milliseconds). Costs a clock
        reading, and a byte written to a pipe at most every 50 ms. (Without
        a doorbell, the polling thread sees the commits itself.)"""
        if self._pipe is None or not self._db.checkpoints_in_background:
            return
        now = time.monotonic()
        if now >= self._next_checkpoint:
            self._next_checkpoint = now + CHECKPOINT_EVERY
            self._poke()

    def _poke(self) -> None:
        """Wake the thread (to stop or checkpoint)."""
        with self._lock:
            if self._pipe is not None:
                with contextlib.suppress(OSError):  # full: it is awake already
                    os.write(self._pipe[1], b"x")

    # -- the thread --------------------------------------------------------------

    def _listen(self, bell: Doorbell, wake_fd: int) -> None:
        """Relay the doorbell until stopped; should it fail, poll instead."""
        try:
            self._relay(bell, wake_fd)
        except Exception:
            logger.exception(
                "jobq's wake-up socket for %s failed; polling data_version "
                "every poll_interval=%g s instead",
                self._db.path,
                self._poll_interval,
            )
            self._close_doorbell()  # others drop it at their next ring
            self._poll(-1)  # no reading yet: the first look wakes everyone
        finally:
            self._close_connection()
            self._close_doorbell()

    def _relay(self, bell: Doorbell, wake_fd: int) -> None:
        """Wait for datagrams, and wake this process's idle workers and
        joiners as they say; checkpoint when poked. Blocks without a
        timeout: nothing runs while nothing happens."""
        poller = select.poll()
        bell_fd = bell.fileno()
        poller.register(bell_fd, select.POLLIN)
        poller.register(wake_fd, select.POLLIN)
        broken = select.POLLERR | select.POLLHUP | select.POLLNVAL
        while not self._stop.is_set():
            events = dict(poller.poll())
            poked = self._drain(wake_fd)
            if self._stop.is_set():
                return
            if events.get(bell_fd, 0) & broken:
                raise OSError(f"poll() says {events[bell_fd]:#x} of the socket")
            self._heard(bell.receive())
            if poked and self._db.checkpoints_in_background:
                self._checkpoint()

    @staticmethod
    def _drain(fd: int) -> bool:
        """Empty the pipe; whether anything was in it."""
        poked = False
        while True:
            try:
                if not os.read(fd, 512):
                    return poked
            except BlockingIOError:
                return poked
            poked = True

    def _heard(self, messages: list[bytes]) -> None:
        """Act on what other processes rang."""
        added, settled = 0, False
        for message in messages:
            kind = message[:1]
            if kind == ADDED:
                added += count_of(message)
            elif kind == SETTLED:
                settled = True
            elif kind == JOINING:
                self._others_join_until = time.monotonic() + JOIN_HEARD_FOR
        if added or settled:
            signal = self._signal()
            with signal.lock:
                if added:
                    signal.jobs_added_locked(min(added, MAX_COUNT))
                if settled:
                    signal.job_settled_locked()

    def _checkpoint(self) -> None:
        try:
            with guard:
                conn = self._conn
                if conn is None:
                    conn = self._conn = self._db.connect()
                conn.execute(CHECKPOINT).fetchall()
        except (sqlite3.Error, StoreError):
            logger.exception("checkpointing %s failed", self._db.path)

    def _poll(self, last: int) -> None:
        """Without a doorbell: wake this process's idle workers and joiners
        when another connection commits: ``data_version`` changes then, and
        only then.

        A fork closes the thread's connection (``take_connection``); a new one
        starts a new reading (values of two connections do not compare), and
        wakes the workers once for what may have been committed in between.

        It looks every ``QUICK_POLL`` seconds while commits keep coming, and
        backs off to ``poll_interval`` when they stop: a busy queue sees other
        processes' jobs within milliseconds, an idle one costs next to nothing.
        It checkpoints as ``committed`` says, at most every
        ``CHECKPOINT_EVERY`` while commits come.
        """
        db, stop = self._db, self._stop
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
            self._close_connection()
            self._close_doorbell()

    def _close_connection(self) -> None:
        if os.getpid() != self._pid:
            return  # never a parent's connection in a forked child
        with guard:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()

    def _close_doorbell(self) -> None:
        """Remove this process's socket, and close the pipe."""
        with self._lock:
            bell, self._bell = self._bell, None
            pipe, self._pipe = self._pipe, None
        if bell is not None:
            bell.close()
        for fd in pipe or ():
            with contextlib.suppress(OSError):
                os.close(fd)
