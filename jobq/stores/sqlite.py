"""The SQLite store: one database file shared by many processes on one host.

Every change is one short ``BEGIN IMMEDIATE`` transaction on a WAL database:
it returns only after it committed, so it survives a crash of the process
(``synchronous="FULL"`` also survives an OS crash or power loss). No lock or
transaction is held while a handler runs, so any number of threads and
processes can claim from one file and a due job goes to exactly one of them.

Claims stay O(log n) however many delayed or low-priority jobs wait. A pending
job is ``scheduled`` (due later) or ``ready`` (due), each state with a partial
index: a claim first moves the scheduled jobs that fell due to ``ready`` (an
index range on ``run_at``), then takes the first ready job in (priority DESC,
run_at, id) order, so it never walks past future rows. Callers only ever see
"pending". Counts per state live in a small table kept by triggers, so
``stats`` reads five rows, never the jobs.

Claims are fenced and leased: each claim bumps the row's ``token`` and sets
``lease_until`` and its owner (host, pid, a per-process nonce). Only the
current token may end or renew a claim. ``recover`` turns a claim into a
failed attempt once its lease expired or, at once, when its owner is a dead
process on this host (``open`` does that too, so a restart picks such jobs up).

Idle workers wake at once for jobs added by this process, and within about
``poll_interval`` for jobs added by others: a watcher thread polls
``PRAGMA data_version``, which changes whenever another connection commits.

Every SQL statement below is a fixed string taking values as ``?`` parameters.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import socket
import sqlite3
import threading
import time
import urllib.parse
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from jobq._fork import reset_after_fork
from jobq.errors import StoreError
from jobq.stores.base import (
    Claim,
    Done,
    Failure,
    NewJob,
    OneJobCalls,
    Signal,
    StoreStats,
    add_error,
    batch_size,
    check_room,
    describe_error,
    log_dropped_dead,
    log_recovered,
    positive_seconds,
    process_died,
    record_from_row,
)
from jobq.types import AttemptError, Enqueued, JobRecord, JobState

logger = logging.getLogger(__name__)

#: The schema this code writes; a file with a newer one is refused.
SCHEMA_VERSION = 1

# -- schema ----------------------------------------------------------------------
# Tables carry a ``jobq_`` prefix so that the queue can live in a database the
# application also uses. States: scheduled and ready (both "pending"), running,
# dead, completed (kept with its result until ``expires_at``).

SCHEMA = (
    """CREATE TABLE jobq_meta (
        name TEXT PRIMARY KEY,
        value INTEGER NOT NULL
    )""",
    """CREATE TABLE jobq_jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,  -- ids only grow, never reused
        state TEXT NOT NULL CHECK (state IN
            ('scheduled', 'ready', 'running', 'dead', 'completed')),
        payload TEXT NOT NULL,                 -- JSON
        key TEXT,
        priority INTEGER NOT NULL,
        run_at REAL NOT NULL,                  -- epoch seconds
        created_at REAL NOT NULL,
        max_attempts INTEGER NOT NULL,
        task TEXT,
        attempts INTEGER NOT NULL DEFAULT 0,   -- failed attempts
        last_error TEXT,
        errors TEXT NOT NULL DEFAULT '[]',     -- JSON [[type, message, tb, at]]
        result TEXT,                           -- JSON, completed jobs only
        expires_at REAL,                       -- completed jobs only
        buried INTEGER,                        -- dead jobs: burial order
        token INTEGER NOT NULL DEFAULT 0,      -- grows with every claim
        lease_until REAL,                      -- the current (or last) claim's
        owner_host TEXT,
        owner_pid INTEGER,
        owner_nonce TEXT
    )""",
    "CREATE INDEX jobq_scheduled ON jobq_jobs (run_at) WHERE state = 'scheduled'",
    """CREATE INDEX jobq_ready ON jobq_jobs (priority DESC, run_at, id)
        WHERE state = 'ready'""",
    "CREATE INDEX jobq_running ON jobq_jobs (lease_until) WHERE state = 'running'",
    "CREATE INDEX jobq_dead ON jobq_jobs (buried) WHERE state = 'dead'",
    "CREATE INDEX jobq_completed ON jobq_jobs (expires_at) WHERE state = 'completed'",
    # A key is held while its job is pending or running: two processes adding
    # the same key at once get one job.
    """CREATE UNIQUE INDEX jobq_live_keys ON jobq_jobs (key)
        WHERE key IS NOT NULL AND state IN ('scheduled', 'ready', 'running')""",
    """CREATE TABLE jobq_counts (
        state TEXT PRIMARY KEY,
        n INTEGER NOT NULL
    )""",
    """INSERT INTO jobq_counts (state, n) VALUES
        ('scheduled', 0), ('ready', 0), ('running', 0), ('dead', 0), ('completed', 0)
    """,
    """CREATE TRIGGER jobq_count_insert AFTER INSERT ON jobq_jobs BEGIN
        UPDATE jobq_counts SET n = n + 1 WHERE state = NEW.state;
    END""",
    """CREATE TRIGGER jobq_count_delete AFTER DELETE ON jobq_jobs BEGIN
        UPDATE jobq_counts SET n = n - 1 WHERE state = OLD.state;
    END""",
    """CREATE TRIGGER jobq_count_update AFTER UPDATE OF state ON jobq_jobs
        WHEN OLD.state IS NOT NEW.state BEGIN
        UPDATE jobq_counts SET n = n - 1 WHERE state = OLD.state;
        UPDATE jobq_counts SET n = n + 1 WHERE state = NEW.state;
    END""",
)

HAS_META = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobq_meta'"
GET_VERSION = "SELECT value FROM jobq_meta WHERE name = 'schema_version'"
SET_VERSION = "INSERT INTO jobq_meta (name, value) VALUES ('schema_version', ?)"

# -- statements --------------------------------------------------------------------

HELD_KEY = """SELECT id FROM jobq_jobs
    WHERE key = ? AND state IN ('scheduled', 'ready', 'running')"""
INSERT = """INSERT INTO jobq_jobs
    (state, payload, key, priority, run_at, created_at, max_attempts, task)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"""

# Cheap read first, so idle workers never take the write lock for nothing.
ANY_DUE = """SELECT EXISTS (SELECT 1 FROM jobq_jobs WHERE state = 'ready')
    OR EXISTS (SELECT 1 FROM jobq_jobs WHERE state = 'scheduled' AND run_at <= ?)"""
PROMOTE = (
    "UPDATE jobq_jobs SET state = 'ready' WHERE state = 'scheduled' AND run_at <= ?"
)
CLAIM = """UPDATE jobq_jobs SET state = 'running', token = token + 1,
        lease_until = ?, owner_host = ?, owner_pid = ?, owner_nonce = ?
    WHERE id IN (SELECT id FROM jobq_jobs WHERE state = 'ready'
                 ORDER BY priority DESC, run_at, id LIMIT ?)
    RETURNING id, token, payload, attempts, max_attempts, key, task,
        -priority, run_at"""
RELEASE = """UPDATE jobq_jobs SET state = 'ready'
    WHERE id = ? AND state = 'running' AND token = ?"""

EXPIRE_COMPLETED = "DELETE FROM jobq_jobs WHERE state = 'completed' AND expires_at <= ?"
DELETE_CLAIMED = (
    "DELETE FROM jobq_jobs WHERE id = ? AND state = 'running' AND token = ?"
)
COMPLETE = """UPDATE jobq_jobs SET state = 'completed', result = ?, expires_at = ?
    WHERE id = ? AND state = 'running' AND token = ?"""
CLAIMED = """SELECT attempts, errors FROM jobq_jobs
    WHERE id = ? AND state = 'running' AND token = ?"""
RETRY = """UPDATE jobq_jobs SET state = ?, run_at = ?, attempts = ?, last_error = ?,
    errors = ? WHERE id = ?"""
BURY = """UPDATE jobq_jobs SET state = 'dead', attempts = ?, last_error = ?, errors = ?,
        buried = (SELECT coalesce(max(buried), 0) + 1 FROM jobq_jobs
                  WHERE state = 'dead')
    WHERE id = ?"""
DEAD_COUNT = "SELECT n FROM jobq_counts WHERE state = 'dead'"
PENDING_COUNT = """SELECT sum(n) FROM jobq_counts
    WHERE state IN ('scheduled', 'ready')"""
LIVE_COUNT = """SELECT sum(n) FROM jobq_counts
    WHERE state IN ('scheduled', 'ready', 'running')"""
OLDEST_DEAD = """SELECT id, last_error FROM jobq_jobs WHERE state = 'dead'
    ORDER BY buried LIMIT ?"""
DELETE = "DELETE FROM jobq_jobs WHERE id = ?"

RENEW = """UPDATE jobq_jobs SET lease_until = ?
    WHERE id = ? AND state = 'running' AND token = ?"""
ANY_EXPIRED = """SELECT EXISTS (SELECT 1 FROM jobq_jobs
    WHERE state = 'running' AND lease_until <= ?)"""
OWNERS = """SELECT DISTINCT owner_pid, owner_nonce FROM jobq_jobs
    WHERE state = 'running' AND owner_host = ?"""
EXPIRED = """SELECT id, attempts, max_attempts, errors FROM jobq_jobs
    WHERE state = 'running' AND lease_until <= ?"""
OWNED = """SELECT id, attempts, max_attempts, errors FROM jobq_jobs
    WHERE state = 'running' AND owner_host = ? AND owner_pid = ? AND owner_nonce = ?"""

RECORD = """SELECT id, state, payload, attempts, run_at, created_at, last_error, key,
    priority, result, task, errors, max_attempts, expires_at FROM jobq_jobs"""
GET = RECORD + " WHERE id = ?"
LIST_DEAD = RECORD + " WHERE state = 'dead' ORDER BY buried LIMIT ?"
LIST_PENDING = (
    RECORD + " WHERE state IN ('scheduled', 'ready')"
    " ORDER BY run_at, priority DESC, id LIMIT ?"
)
LIST_RUNNING = (
    RECORD + " WHERE state = 'running' ORDER BY run_at, priority DESC, id LIMIT ?"
)
LIST_COMPLETED = (
    RECORD + " WHERE state = 'completed' ORDER BY run_at, priority DESC, id LIMIT ?"
)

DEAD_KEY = "SELECT key FROM jobq_jobs WHERE id = ? AND state = 'dead'"
REVIVE = """UPDATE jobq_jobs SET state = 'ready', attempts = 0, run_at = ?,
    buried = NULL WHERE id = ?"""
DELETE_DEAD = "DELETE FROM jobq_jobs WHERE id = ? AND state = 'dead'"
CANCEL = "DELETE FROM jobq_jobs WHERE id = ? AND state IN ('scheduled', 'ready')"
COUNTS = "SELECT state, n FROM jobq_counts"
DATA_VERSION = "PRAGMA data_version"  # changes when another connection commits
#: Seconds between two looks at ``data_version`` while other connections commit.
QUICK_POLL = 0.002
#: The watcher's checkpoint (PASSIVE: it never waits for, nor blocks, anyone).
CHECKPOINT = "PRAGMA wal_checkpoint(PASSIVE)"
CHECKPOINT_EVERY = 0.05
#: Pages in the WAL at which a commit checkpoints by itself: only when no
#: watcher did (SQLite's default is 1,000, reached in a fraction of a second).
AUTOCHECKPOINT = "PRAGMA wal_autocheckpoint = 10000"
NEXT_DUE = """SELECT
    (SELECT run_at FROM jobq_jobs WHERE state = 'ready'
     ORDER BY priority DESC, run_at, id LIMIT 1),
    (SELECT run_at FROM jobq_jobs WHERE state = 'scheduled' ORDER BY run_at LIMIT 1)"""

#: Seconds between tries to switch a new file to WAL while another process does.
WAL_RETRY = 0.01

#: The fixed pragma for each ``synchronous`` option.
SYNCHRONOUS = {
    "NORMAL": "PRAGMA synchronous = NORMAL",  # WAL: survives a process crash
    "FULL": "PRAGMA synchronous = FULL",  # also an OS crash or power loss
}

_LISTS = {
    JobState.PENDING: LIST_PENDING,
    JobState.RUNNING: LIST_RUNNING,
    JobState.DEAD: LIST_DEAD,
    JobState.COMPLETED: LIST_COMPLETED,
}

#: Connections inherited from a parent process through ``fork``. Never used,
#: and never closed either: SQLite's "How To Corrupt" warns against carrying a
#: connection across fork, and closing one in the child is using it. (With
#: ``os.fork`` there are none: ``_ForkGuard`` closes them before the fork.)
_inherited: list[sqlite3.Connection] = []


class _ForkGuard:
    """Keeps ``os.fork()`` away from open SQLite connections and SQLite calls.

    SQLite keeps what this process holds on each open file (its locks, the
    WAL's shared-memory index) in process-wide tables that a forked child
    inherits, and a child's *new* connection to the same file shares them:
    it sees a write lock the parent held at the fork as held for ever
    ("database is locked"), and it takes no lock of its own on the file, so
    another process that closes the file last deletes the WAL under it and
    the child's later commits are lost. A fork while another thread is inside
    SQLite can also leave one of SQLite's mutexes locked in the child.

    So every use of a store's connections runs inside ``with _guard:``;
    before a fork, ``before_fork`` holds new uses back, waits for the running
    ones, and closes every store's connections. Threads reopen theirs on next
    use, in the parent and in the child alike, and the child inherits nothing.
    Entering and leaving costs about a microsecond.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._active = 0  # threads inside
        self._forking = False
        self._depth = threading.local()  # uses nest within one thread

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
        for store in list(_stores):
            try:
                store._close_for_fork()
            except Exception:
                logger.exception("closing %s before a fork failed", store.path)

    def after_fork_in_parent(self) -> None:
        with self._lock:
            self._forking = False
            self._idle.notify_all()

    def after_fork_in_child(self) -> None:
        self._reset()  # the child's only thread is the one that forked


_guard = _ForkGuard()
_stores: weakref.WeakSet[SqliteStore] = weakref.WeakSet()
os.register_at_fork(
    before=_guard.before_fork,
    after_in_parent=_guard.after_fork_in_parent,
    after_in_child=_guard.after_fork_in_child,
)


def path_from_url(url: str) -> str:
    """The file named by ``sqlite:///relative.db`` or ``sqlite:////absolute.db``.

    The SQLAlchemy convention: three slashes and a relative path, or four and
    an absolute one. Anything else (a host, a missing path, a query string,
    ``:memory:``) raises ``ValueError``.
    """
    prefix = "sqlite://"
    if url[: len(prefix)].lower() != prefix:
        raise ValueError(
            f"malformed SQLite store URL {url!r}: use sqlite:///relative/path.db "
            "or sqlite:////absolute/path.db"
        )
    rest = url[len(prefix) :]
    if not rest.startswith("/"):
        raise ValueError(
            f"malformed SQLite store URL {url!r}: a SQLite URL names no host; "
            "use sqlite:///relative/path.db or sqlite:////absolute/path.db"
        )
    path = rest[1:]
    if "?" in path or "#" in path:
        raise ValueError(
            f"unsupported SQLite store URL {url!r}: query strings are not "
            "supported; pass options to jobq.stores.SqliteStore(path, ...)"
        )
    if not path or path.endswith("/") or path == ":memory:":
        raise ValueError(
            f"malformed SQLite store URL {url!r}: it names no database file "
            "(an in-memory queue is store=None)"
        )
    return path


class _Owner(NamedTuple):
    """Who holds a claim: a process on a host (hostname and pid namespace)."""

    host: str
    pid: int
    nonce: str


_process_owner: _Owner | None = None


def _this_process() -> _Owner:
    """This process, with a nonce that tells it from an earlier one with its pid.

    One identity per process, shared by every store object in it (a forked
    child gets its own). The host includes the pid namespace: containers
    sharing a hostname (host networking) must not judge each other's pids.
    """
    global _process_owner
    if _process_owner is None or _process_owner.pid != os.getpid():
        try:
            namespace = os.readlink("/proc/self/ns/pid")
        except OSError:
            namespace = ""
        host = f"{socket.gethostname()}/{namespace}"
        _process_owner = _Owner(host, os.getpid(), secrets.token_hex(8))
    return _process_owner


def _dump_errors(errors: tuple[AttemptError, ...]) -> str:
    return json.dumps([[e.type, e.message, e.traceback, e.at] for e in errors])


def _load_errors(text: str) -> tuple[AttemptError, ...]:
    return tuple(
        AttemptError(str(t), str(m), str(tb), float(at))
        for t, m, tb, at in json.loads(text)
    )


def _finish_one(conn: sqlite3.Connection, done: Done, keep_until: float | None) -> bool:
    """Delete the job, or keep it completed; whether its claim was current."""
    claim = done.claim
    if keep_until is None:
        return bool(conn.execute(DELETE_CLAIMED, (claim.id, claim.token)).rowcount)
    values = (done.result, keep_until, claim.id, claim.token)
    return bool(conn.execute(COMPLETE, values).rowcount)


class SqliteStore(OneJobCalls):
    """Jobs in a SQLite database file that many processes on one host share.

    ``synchronous``: ``"NORMAL"`` keeps every change that returned through a
    crash of the process; ``"FULL"`` also through an OS crash or power loss,
    at the cost of an fsync per change. ``lease_seconds``: how long a claim
    lasts without renewal (the queue renews every third of it).
    ``busy_timeout``: seconds to wait for another writer before failing with
    ``StoreError``. ``poll_interval``: how often idle workers look for jobs
    added by other processes. ``claim_batch``: how many due jobs a worker may
    claim at once (see ``Store.claim_batch``). The file must be on a local
    filesystem.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "NORMAL",
        lease_seconds: float = 30.0,
        busy_timeout: float = 10.0,
        poll_interval: float = 0.05,
        claim_batch: int = 1,
    ) -> None:
        if str(synchronous).upper() not in SYNCHRONOUS:
            raise ValueError(
                f"synchronous must be 'NORMAL' or 'FULL', not {synchronous!r}"
            )
        self.path = os.path.abspath(os.fspath(path))
        self.synchronous = str(synchronous).upper()
        self.lease_seconds: float | None = positive_seconds(
            lease_seconds, "lease_seconds"
        )
        self._lease = self.lease_seconds
        self.busy_timeout = positive_seconds(busy_timeout, "busy_timeout")
        self.poll_interval = positive_seconds(poll_interval, "poll_interval")
        self.claim_batch = batch_size(claim_batch)
        self._signal = Signal()
        self._dead_letter_limit = 1000
        self._reset_process_state()
        reset_after_fork(self)
        _stores.add(self)

    def migrate(self) -> int:
        """Create the file (mode 0600) and its schema if needed, or check the
        schema's version, now, on a connection of its own (``open`` does the
        same on first use); returns the version. ``StoreError`` for a file
        written by a newer jobq."""
        self._check_process()
        with _guard:
            self._create_file()
            conn = self._connect()
            try:
                self._prepare(conn)
            finally:
                conn.close()
        return SCHEMA_VERSION

    @property
    def _checkpoints_in_background(self) -> bool:
        """The watcher checkpoints (see ``_watch``) with NORMAL only: with
        FULL every commit syncs anyway, and a checkpoint's sync beside them
        slowed them down more than it saved."""
        return self.synchronous == "NORMAL"

    def _reset_process_state(self) -> None:
        """What belongs to one process: connections, the watcher, the identity."""
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._owner = _this_process()
        self._conns: dict[int, sqlite3.Connection] = {}  # by thread
        self._opened = False
        self._stop_watching = threading.Event()
        self._watcher: threading.Thread | None = None
        #: The watcher's connection, in a box of its own per watcher thread.
        self._watch_conn: list[sqlite3.Connection | None] = [None]

    def _after_fork_in_child(self) -> None:
        """Set the parent's connections aside unused; ``open`` again to go on."""
        _inherited.extend(self._conns.values())
        if self._watch_conn[0] is not None:
            _inherited.append(self._watch_conn[0])
        self._reset_process_state()

    def _close_for_fork(self) -> None:
        """Close this process's connections: no thread is using them (see
        ``_ForkGuard``), and each reopens its own on next use."""
        if self._pid != os.getpid():
            return  # inherited, not reset yet: never touch the parent's
        conns = [*self._conns.values(), self._watch_conn[0]]
        self._conns.clear()
        self._watch_conn[0] = None
        for conn in conns:
            if conn is not None:
                try:
                    conn.close()
                except sqlite3.Error:
                    logger.exception("closing a connection to %s failed", self.path)

    def _check_process(self) -> None:
        """Forked without our fork hook (a fork outside ``os.fork``)? Then
        reset here, before touching a lock a parent's thread may hold."""
        if self._pid != os.getpid():
            self._after_fork_in_child()

    # -- lifecycle ------------------------------------------------------------

    def open(self, signal: Signal, *, dead_letter_limit: int) -> None:
        """Create the file (mode 0600) and schema if needed, check the schema
        version, start the watcher, and recover claims of dead processes."""
        self._check_process()
        with _guard, self._lock:
            self._signal = signal
            self._dead_letter_limit = dead_letter_limit
            if self._opened:
                return
            self._create_file()
            conn = self._connect()
            try:
                self._prepare(conn)
                self._start_watcher()
            except BaseException:
                conn.close()
                raise
            self._conns[threading.get_ident()] = conn
            self._opened = True
        self._recover(signal.clock(), expired=False)

    def close(self) -> None:
        """Stop the watcher and close this process's connections; idempotent."""
        self._check_process()
        with self._lock:
            self._opened = False
            self._stop_watching.set()
            watcher, self._watcher = self._watcher, None
        # Joined holding no lock: the watcher may wait for a fork to finish.
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join()  # it closes its own connection
        with _guard:
            with self._lock:
                conns = list(self._conns.values())
                self._conns.clear()
            for conn in conns:
                try:
                    conn.close()
                except sqlite3.Error:
                    logger.exception("closing a connection to %s failed", self.path)

    def save(self) -> None:
        """Committed changes are already durable against a process crash; a
        checkpoint also syncs them to the database file (power loss)."""
        with self._reading() as conn:
            conn.execute(CHECKPOINT).fetchall()

    # -- the job's path: add, claim, finish or fail ---------------------------

    def add(
        self, jobs: Sequence[NewJob], now: float, *, max_pending: int | None = None
    ) -> list[Enqueued]:
        results: list[Enqueued] = []
        due = delayed = 0
        with self._write() as conn:
            pending = 0
            if max_pending is not None:
                (pending,) = conn.execute(PENDING_COUNT).fetchone()
            for new in jobs:
                if new.key is not None:
                    held = conn.execute(HELD_KEY, (new.key,)).fetchone()
                    if held is not None:
                        results.append(Enqueued(held[0], True))
                        continue
                is_due = new.run_at <= now
                state = "ready" if is_due else "scheduled"
                row = (state, new.payload, new.key, new.priority, new.run_at, now,
                       new.max_attempts, new.task)  # fmt: skip
                (job_id,) = conn.execute(INSERT, row).fetchone()
                results.append(Enqueued(job_id, False))
                if is_due:
                    due += 1
                else:
                    delayed += 1
            if max_pending is not None:  # raising here rolls the inserts back
                check_room(pending, due + delayed, max_pending)
        if due or delayed:
            # A delayed job wakes one idle worker so it shortens its wait.
            self._signal.jobs_added(due or 1)
        return results

    def claim_many(self, now: float, limit: int) -> list[Claim]:
        with self._reading() as conn:
            if not conn.execute(ANY_DUE, (now,)).fetchone()[0]:
                return []
        owner = self._owner
        with self._write() as conn:
            conn.execute(PROMOTE, (now,))
            rows = conn.execute(
                CLAIM, (now + self._lease, owner.host, owner.pid, owner.nonce, limit)
            ).fetchall()
        rows.sort(key=lambda row: row[7:])  # RETURNING keeps no order: run order
        return [
            Claim(job_id, token, payload, attempts + 1, max_attempts, key, task)
            for job_id, token, payload, attempts, max_attempts, key, task, *_ in rows
        ]

    def finish_many(
        self, done: Sequence[Done], keep_until: float | None, now: float
    ) -> list[bool]:
        with self._write() as conn:
            conn.execute(EXPIRE_COMPLETED, (now,))
            ended = [_finish_one(conn, d, keep_until) for d in done]
            settled = any(ended) and self._settled(conn)
        if settled:
            self._signal.job_settled()
        return ended

    def release(self, claims: Sequence[Claim], now: float) -> None:
        with self._write() as conn:
            conn.executemany(RELEASE, [(claim.id, claim.token) for claim in claims])
        self._signal.jobs_added(len(claims))

    def fail_many(self, failures: Sequence[Failure], now: float) -> list[bool]:
        recorded: list[bool] = []
        dropped: list[tuple[int, str | None]] = []
        retried = buried = 0
        with self._write() as conn:
            for claim, error, retry_at in failures:
                row = conn.execute(CLAIMED, (claim.id, claim.token)).fetchone()
                recorded.append(row is not None)
                if row is None:
                    continue
                attempts, errors = row
                dropped += self._record_failure(conn, claim.id, attempts, errors,
                                                error, retry_at, now)  # fmt: skip
                if retry_at is None:
                    buried += 1
                else:
                    retried += 1
            settled = buried > 0 and self._settled(conn)
        self._log_dropped(dropped)
        if settled:
            self._signal.job_settled()
        if retried:
            self._signal.jobs_added(retried)
        return recorded

    def renew(self, claims: Sequence[Claim], now: float) -> None:
        until = now + self._lease
        with self._write() as conn:
            conn.executemany(RENEW, [(until, c.id, c.token) for c in claims])

    def recover(self, now: float) -> int:
        """Claims whose lease expired, or whose process died on this host."""
        return self._recover(now, expired=True)

    # -- looking and managing ---------------------------------------------------

    def get(self, job_id: int, now: float) -> JobRecord[Any] | None:
        with self._reading() as conn:
            row = conn.execute(GET, (job_id,)).fetchone()
        if row is None:
            return None
        expires_at = row[-1]
        if expires_at is not None and expires_at <= now:
            return None
        return record_from_row(row, json.loads(row[11]))

    def list_jobs(
        self, state: JobState, limit: int | None = None
    ) -> list[JobRecord[Any]]:
        with self._reading() as conn:
            rows = conn.execute(_LISTS[state], (-1 if limit is None else limit,))
            return [
                record_from_row(row, json.loads(row[11])) for row in rows.fetchall()
            ]

    def revive(self, job_id: int, now: float) -> bool:
        with self._write() as conn:
            row = conn.execute(DEAD_KEY, (job_id,)).fetchone()
            if row is None:
                return False
            key = row[0]
            if key is not None and conn.execute(HELD_KEY, (key,)).fetchone():
                return False
            conn.execute(REVIVE, (now, job_id))
        self._signal.jobs_added()
        return True

    def delete_dead(self, job_id: int) -> bool:
        with self._write() as conn:
            return bool(conn.execute(DELETE_DEAD, (job_id,)).rowcount)

    def cancel(self, job_id: int) -> bool:
        with self._write() as conn:
            cancelled = bool(conn.execute(CANCEL, (job_id,)).rowcount)
            settled = cancelled and self._settled(conn)
        if settled:
            self._signal.job_settled()
        return cancelled

    def stats(self) -> StoreStats:
        with self._reading() as conn:
            counts = dict(conn.execute(COUNTS).fetchall())
        return StoreStats(
            counts["scheduled"] + counts["ready"], counts["running"], counts["dead"]
        )

    def next_due(self) -> float | None:
        with self._reading() as conn:
            ready, scheduled = conn.execute(NEXT_DUE).fetchone()
        due = ready if ready is not None else scheduled
        return None if due is None else float(due)

    # -- inside a write transaction: settling, failures, burial, recovery ----------

    def _settled(self, conn: sqlite3.Connection) -> bool:
        """Whether a ``join`` caller should look again: someone joins and
        nothing is pending or running any more. Waking joiners at every
        finished job would make them query the counts at every job."""
        if not self._signal.joiners:
            return False
        return not conn.execute(LIVE_COUNT).fetchone()[0]

    def _record_failure(
        self,
        conn: sqlite3.Connection,
        job_id: int,
        attempts: int,
        errors: str,
        error: AttemptError,
        retry_at: float | None,
        now: float,
    ) -> list[tuple[int, str | None]]:
        """Store one more failed attempt: pending again at ``retry_at``, or dead.

        Returns the dead jobs the dead-letter limit dropped, to log after commit.
        """
        kept = _dump_errors(add_error(_load_errors(errors), error))
        last = describe_error(error)
        if retry_at is not None:
            state = "ready" if retry_at <= now else "scheduled"
            conn.execute(RETRY, (state, retry_at, attempts + 1, last, kept, job_id))
            return []
        conn.execute(BURY, (attempts + 1, last, kept, job_id))
        (dead,) = conn.execute(DEAD_COUNT).fetchone()
        excess = dead - self._dead_letter_limit
        if excess <= 0:
            return []
        dropped = conn.execute(OLDEST_DEAD, (excess,)).fetchall()
        conn.executemany(DELETE, [(dropped_id,) for dropped_id, _ in dropped])
        return dropped

    def _log_dropped(self, dropped: list[tuple[int, str | None]]) -> None:
        for job_id, last_error in dropped:
            log_dropped_dead(self._dead_letter_limit, job_id, last_error)

    def _recover(self, now: float, *, expired: bool) -> int:
        """Make claims of dead owners (and, with ``expired``, expired claims)
        failed attempts: pending again now, or dead when out of attempts."""
        dead_owners = self._dead_owners()
        if not dead_owners:
            if not expired:
                return 0
            with self._reading() as conn:
                if not conn.execute(ANY_EXPIRED, (now,)).fetchone()[0]:
                    return 0
        error = process_died(now)
        dropped: list[tuple[int, str | None]] = []
        with self._write() as conn:
            rows = conn.execute(EXPIRED, (now,)).fetchall() if expired else []
            for pid, nonce in dead_owners:
                rows += conn.execute(OWNED, (self._owner.host, pid, nonce)).fetchall()
            recovered = {row[0]: row for row in rows}
            for job_id, attempts, max_attempts, errors in recovered.values():
                retry_at = now if attempts + 1 < max_attempts else None
                dropped += self._record_failure(
                    conn, job_id, attempts, errors, error, retry_at, now
                )
            settled = bool(recovered) and self._settled(conn)
        self._log_dropped(dropped)
        log_recovered(recovered)
        if recovered:
            self._signal.jobs_added(len(recovered))
        if settled:
            self._signal.job_settled()
        return len(recovered)

    def _dead_owners(self) -> list[tuple[int, str]]:
        """Owners of running claims on this host whose process is gone.

        A live pid with another nonce may be a reused pid, or not: its claims
        wait for their lease to expire. Our own pid with another nonce is an
        earlier process that had our pid, so it is dead.
        """
        me = self._owner
        with self._reading() as conn:
            owners = conn.execute(OWNERS, (me.host,)).fetchall()
        dead = []
        for pid, nonce in owners:
            if pid == me.pid:
                gone = nonce != me.nonce
            elif pid is None or pid <= 0:
                gone = False
            else:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    gone = True
                except OSError:  # EPERM: alive, another user's process
                    gone = False
                else:
                    gone = False
            if gone:
                dead.append((pid, nonce))
        return dead

    # -- connections and transactions -------------------------------------------

    def _create_file(self) -> None:
        """Create the database file with mode 0600 (SQLite gives its -wal and
        -shm files the same mode); an existing file keeps its mode."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StoreError(f"cannot open {self.path}: {exc.strerror}") from exc
        os.close(fd)

    def _connect(self) -> sqlite3.Connection:
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
            raise self._error(exc) from exc
        try:
            conn.execute(SYNCHRONOUS[self.synchronous])
            if self._checkpoints_in_background:
                conn.execute(AUTOCHECKPOINT)
        except sqlite3.Error as exc:
            conn.close()
            raise self._error(exc) from exc
        return conn

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """Switch to WAL and create or check the schema, in one transaction."""
        try:
            self._use_wal(conn)
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        with self._transaction(conn):
            if conn.execute(HAS_META).fetchone() is None:
                for statement in SCHEMA:
                    conn.execute(statement)
                conn.execute(SET_VERSION, (SCHEMA_VERSION,))
            else:
                self._check_version(conn)

    def _use_wal(self, conn: sqlite3.Connection) -> None:
        """Put the file in WAL mode (it stays so); a no-op once it is.

        Two processes switching a new file at once: the loser gets SQLITE_BUSY
        at once, without the busy handler, so wait for the winner here.
        """
        for _ in range(max(1, round(self.busy_timeout / WAL_RETRY))):
            try:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            except sqlite3.OperationalError as exc:
                if _primary_code(exc) != sqlite3.SQLITE_BUSY:
                    raise
                time.sleep(WAL_RETRY)
                continue
            if mode != "wal":
                raise StoreError(
                    f"{self.path}: SQLite could not use WAL mode here (journal "
                    f"mode {mode!r}); the file must be on a local filesystem"
                )
            return
        conn.execute("PRAGMA journal_mode = WAL")  # still busy: raise that

    def _check_version(self, conn: sqlite3.Connection) -> None:
        row = conn.execute(GET_VERSION).fetchone()
        version = row[0] if row else None
        if not isinstance(version, int) or version < 1:
            raise StoreError(
                f"{self.path} has no valid jobq schema version ({version!r})"
            )
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} was written by a newer jobq (schema version {version}; "
                f"this jobq knows up to {SCHEMA_VERSION}): upgrade jobq"
            )

    def _start_watcher(self) -> None:
        """Start polling; the first reading is taken here, so a commit made by
        another process any time after ``open`` returns is noticed."""
        conn = self._connect()
        try:
            version = conn.execute(DATA_VERSION).fetchone()[0]
        except sqlite3.Error as exc:
            conn.close()
            raise self._error(exc) from exc
        self._watch_conn = [conn]
        self._stop_watching = threading.Event()
        self._watcher = threading.Thread(
            target=self._watch,
            args=(self._watch_conn, version, self._stop_watching),
            name=f"jobq-sqlite-watch-{os.path.basename(self.path)}",
            daemon=True,
        )
        self._watcher.start()

    def _watch(
        self,
        box: list[sqlite3.Connection | None],
        last: int,
        stop: threading.Event,
    ) -> None:
        """Wake this process's idle workers and joiners when another
        connection commits: ``data_version`` changes then, and only then.

        A fork closes the connection in ``box``; a new one starts a new
        reading (values of two connections do not compare), and wakes the
        workers once for what may have been committed in between.

        It looks every ``QUICK_POLL`` seconds while commits keep coming, and
        backs off to ``poll_interval`` when they stop: a busy queue sees other
        processes' jobs within milliseconds, an idle one costs next to nothing.

        With ``synchronous="NORMAL"`` it also checkpoints the WAL every
        ``CHECKPOINT_EVERY`` seconds while commits come, so that no commit of
        a worker or producer has to: the commit that reaches SQLite's
        automatic checkpoint copies the WAL into the database and syncs it,
        stalling its caller for milliseconds.
        """
        pid = os.getpid()
        interval = self.poll_interval
        next_checkpoint = 0.0
        try:
            while not stop.wait(interval):
                try:
                    with _guard:
                        conn = box[0]
                        reconnected = conn is None
                        if conn is None:
                            conn = box[0] = self._connect()
                        version = conn.execute(DATA_VERSION).fetchone()[0]
                        if (
                            self._checkpoints_in_background
                            and version != last
                            and time.monotonic() >= next_checkpoint
                        ):
                            conn.execute(CHECKPOINT).fetchall()
                            next_checkpoint = time.monotonic() + CHECKPOINT_EVERY
                except (sqlite3.Error, StoreError):
                    logger.exception("watching %s failed; trying again", self.path)
                    stop.wait(1.0)
                    continue
                if not reconnected and version == last:
                    interval = min(interval * 2, self.poll_interval)
                else:
                    last = version
                    interval = min(QUICK_POLL, self.poll_interval)
                    signal = self._signal
                    with signal.lock:
                        signal.jobs_added_locked(max(signal.idle_workers, 1))
                        signal.job_settled_locked()
        finally:
            if os.getpid() == pid:
                with _guard:
                    conn, box[0] = box[0], None
                    if conn is not None:
                        conn.close()

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use."""
        self._check_process()
        conn = self._conns.get(threading.get_ident())
        if conn is not None:
            return conn
        with self._lock:
            if not self._opened:
                raise StoreError(
                    f"{self.path}: the store is not open (closed, or inherited "
                    "through fork: open it again)"
                )
            conn = self._connect()
            self._conns[threading.get_ident()] = conn
            return conn

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One short write transaction. IMMEDIATE takes the write lock first
        (waiting up to ``busy_timeout``), so it cannot fail half-way on a
        snapshot another writer made stale."""
        with _guard, self._transaction(self._conn()) as conn:
            yield conn

    @contextlib.contextmanager
    def _transaction(self, conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT on ``conn``, rolled back if the block
        raises; SQLite's errors become ``StoreError``."""
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
            raise self._error(exc) from exc

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection for reads (autocommit: no lock is kept)."""
        with _guard:
            try:
                yield self._conn()
            except sqlite3.Error as exc:
                raise self._error(exc) from exc

    def _error(self, exc: sqlite3.Error) -> StoreError:
        """A ``StoreError`` naming the file, saying what to do where we can."""
        code = _primary_code(exc)
        if code in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT):
            return StoreError(
                f"{self.path} is not a SQLite database, or it is damaged ({exc}); "
                "it was left as it is, since other processes may use it: move it "
                "away yourself, or choose another path"
            )
        if code == sqlite3.SQLITE_BUSY:
            return StoreError(
                f"{self.path}: the database stayed locked by another writer for "
                f"more than busy_timeout={self.busy_timeout:g} s"
            )
        return StoreError(f"{self.path}: {exc}")


def _primary_code(exc: sqlite3.Error) -> int:
    """SQLite's primary result code (SQLITE_BUSY for SQLITE_BUSY_SNAPSHOT...);
    0 for errors the sqlite3 module raises itself (a closed connection)."""
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF
