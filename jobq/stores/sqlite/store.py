"""The SQLite store's class, ``SqliteStore``: the store protocol on one file.

Claims stay O(log n) however many delayed or low-priority jobs wait. A pending
job is ``scheduled`` (due later) or ``ready`` (due), each state with a partial
index: a claim first moves the scheduled jobs that fell due to ``ready`` (an
index range on ``run_at``), then takes the first ready job in (priority DESC,
run_at, id) order, so it never walks past future rows. Callers only ever see
"pending".

Claims are fenced and leased: each claim bumps the row's ``token`` and sets
``lease_until`` and its owner (host, pid, a per-process nonce). Only the
current token may end or renew a claim. ``recover`` turns a claim into a
failed attempt once its lease expired or, at once, when its owner is a dead
process on this host (``open`` does that too, so a restart picks such jobs up).

Clock. Leases are given, renewed and judged on the host's wall clock
(``_lease_clock``), which every process on the file shares, never on the
``now`` the queue passes: a process whose queue has a clock of its own (its
``clock=``) must not take the others' live claims for expired, nor have its
own taken. Due times, attempt times and kept jobs' expiry follow the queue's
clock, as the other stores' do: on one host the only clock that can differ
from the others is one a queue was given on purpose (tests, freezegun).
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
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from jobq._fork import reset_after_fork
from jobq.activity import (
    Beat,
    DepthSample,
    MinuteOutcomes,
    ProcessInfo,
    TaskOutcomes,
)
from jobq.errors import StoreError
from jobq.stores._group import Call, GroupCommit
from jobq.stores.base import (
    CancelOutcome,
    Capabilities,
    Claim,
    Done,
    Failure,
    NewJob,
    Signal,
    SlotState,
    StoreStats,
    add_error,
    check_room,
    describe_error,
    ended_by_crash,
    log_dropped_dead,
    log_recovered,
    overlapping_job,
    paused,
    process_died,
    resumed,
    run_by_hand,
    slot_taken,
)
from jobq.stores.helpers import (
    OneJobCalls,
    batch_size,
    database_page,
    positive_seconds,
    record_from_row,
)
from jobq.stores.limits import usage_of
from jobq.stores.pages import DATABASE_FIRST, JobPage, JobQuery, read_cursor
from jobq.stores.sqlite import activity
from jobq.stores.sqlite.connections import Database, guard, inherited
from jobq.stores.sqlite.limiting import (
    Limiter,
    cancelled,
    declare,
    declared,
    free_slots,
    job_limits,
    limits_text,
)
from jobq.stores.sqlite.schema import migrate_schema
from jobq.stores.sqlite.statements import (
    ANY_DUE,
    ANY_DUE_OR_READY,
    ANY_EXPIRED,
    BURY,
    CANCEL_PENDING,
    CANCEL_STATE,
    CANCELS_AT,
    CHECKPOINT,
    CLAIM,
    CLAIMED,
    COMPLETE,
    COMPLETE_PARENT,
    COUNTS,
    DEAD_COUNT,
    DEAD_KEY,
    DELETE,
    DELETE_CLAIMED,
    DELETE_DEAD,
    DELETE_PARENT,
    DUE_SCHEDULED,
    END_CANCELLED,
    EXPIRE_CANCELLED,
    EXPIRE_COMPLETED,
    EXPIRED,
    EXPIRED_CANCELLED,
    EXPIRED_COMPLETED,
    EXPIRES_AT,
    FINISHED_PER_MINUTE,
    GET,
    GET_SCHEDULE,
    HELD_KEY,
    HELD_PER_KEY,
    INSERT,
    INSERT_CHILD,
    INSERT_ROW,
    LIMITS_AT,
    LIMITS_DECLARED,
    LISTS,
    LIVE_COUNT,
    LIVE_JOB,
    NEXT_DUE,
    OLDEST_DEAD,
    OWNED,
    OWNERS,
    PAGES,
    PENDING_COUNT,
    PROMOTE,
    PUT_SCHEDULE,
    READY_KEY_EXISTS,
    RELEASE,
    RENEW_CHUNK,
    RETRY,
    RETRYING,
    REVIVE,
    SCHEDULES,
    SLOTS_PER_KEY,
    STOP_RUNNING,
    SYNCHRONOUS,
    WIDTH,
    renew,
    stops,
)
from jobq.stores.sqlite.wakeups import Watcher
from jobq.stores.sqlite.workflows import Ends, link, parents_of, start_of, with_family
from jobq.types import (
    AttemptError,
    Enqueued,
    FinishedMinute,
    JobRecord,
    JobState,
    Limit,
    LimitUsage,
)

logger = logging.getLogger("jobq.stores.sqlite")

#: Seconds between looks for a limit declared in another process (``claim_many``).
LIMITS_LOOK = 1.0


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


def _lease_clock() -> float:
    """The clock of leases: the host's, read at each call (so freezegun moves
    it in tests), whatever clock the queue was given (see the module)."""
    return time.time()


def _dump_errors(errors: tuple[AttemptError, ...]) -> str:
    return json.dumps([[e.type, e.message, e.traceback, e.at] for e in errors])


def _load_errors(text: str) -> tuple[AttemptError, ...]:
    return tuple(
        AttemptError(str(t), str(m), str(tb), float(at))
        for t, m, tb, at in json.loads(text)
    )


def _records(
    conn: sqlite3.Connection, rows: Sequence[Sequence[Any]]
) -> list[JobRecord[Any]]:
    """Jobs as ``RECORD`` selects them, with their parents and children."""
    records = [
        record_from_row(
            row, json.loads(row[11]), cancels_at=CANCELS_AT, limits_at=LIMITS_AT
        )
        for row in rows
    ]
    return with_family(conn, rows, records)


#: What ``_finish_one`` says of a job with children it ended.
_PARENT = 2


def _finish_one(
    conn: sqlite3.Connection, done: Done, keep_until: float | None, now: float
) -> int:
    """Delete the job, or keep it completed (finished ``now``): 0 if its
    claim was no longer current, ``_PARENT`` if it has children (to tell),
    else 1."""
    claim = done.claim
    if keep_until is None:
        values: tuple[Any, ...] = (claim.id, claim.token)
        statements = (DELETE_CLAIMED, DELETE_PARENT)
    else:
        values = (done.result, keep_until, now, claim.id, claim.token)
        statements = (COMPLETE, COMPLETE_PARENT)
    ended = conn.execute(statements[0], values).rowcount
    parent = not ended and conn.execute(statements[1], values).rowcount
    if not (ended or parent):
        return 0
    if claim.limits:
        free_slots(conn, claim.id)
    return _PARENT if parent else 1


def _release_one(conn: sqlite3.Connection, claim: Claim, ends: Ends) -> bool:
    """Give the claim's job back (``RELEASE``); whether it was stopping, so
    ended cancelled (its waiting children told)."""
    row = conn.execute(RELEASE, (claim.id, claim.token)).fetchone()
    if row is None:
        return False
    if claim.limits:
        free_slots(conn, claim.id)
    stopped, children = row
    if stopped and children:
        ends.ended(claim.id, "cancelled")
    return bool(stopped)


def _insert(
    conn: sqlite3.Connection, new: NewJob, now: float, keep_cancelled: float = 0.0
) -> tuple[Enqueued, str]:
    """Insert one job (in the caller's write transaction); a live job
    holding its key is returned as a duplicate instead. With the state the
    job was added in (a child's may be "waiting" or "cancelled")."""
    start = None if not new.after else start_of(conn, new, now, keep_cancelled)
    if new.key is not None and (start is None or start.cancel is None):
        held = conn.execute(HELD_KEY, (new.key,)).fetchone()
        if held is not None:
            return Enqueued(held[0], True), ""
    if start is None:
        state, row = _row(new, now)
        (job_id,) = conn.execute(INSERT, row).fetchone()
        return Enqueued(job_id, False), state
    at, by, until = start.cancel or (None, None, None)
    values = (start.state, new.payload, new.key, new.priority, new.run_at, now,
              new.max_attempts, new.task, new.timeout, new.meta,
              limits_text(new.limits), new.after_failure, start.waiting_on, at,
              by, until)  # fmt: skip
    (job_id,) = conn.execute(INSERT_CHILD, values).fetchone()
    link(conn, job_id, start.slots)
    return Enqueued(job_id, False), start.state


def _row(new: NewJob, now: float) -> tuple[str, tuple[Any, ...]]:
    """The state and ``INSERT`` values of a job with no parents."""
    state = "ready" if new.run_at <= now else "scheduled"
    row = (state, new.payload, new.key, new.priority, new.run_at, now,
           new.max_attempts, new.task, new.timeout, new.meta,
           limits_text(new.limits))  # fmt: skip
    return state, row


def _plain(call: Call) -> bool:
    """One job with no key, cap or parents: nothing to read before its
    ``INSERT``, which is then a transaction by itself (``_add_one``)."""
    if len(call.jobs) != 1 or call.max_pending is not None:
        return False
    job = call.jobs[0]
    return job.key is None and not job.after


def _live_in(conn: sqlite3.Connection) -> Callable[[int], bool]:
    """Whether a job is pending or running, as ``conn``'s transaction sees
    it (``overlapping_job``'s question)."""
    return lambda job_id: conn.execute(LIVE_JOB, (job_id,)).fetchone() is not None


def _schedule(conn: sqlite3.Connection, name: str) -> SlotState | None:
    """Schedule ``name``'s stored state (in the caller's transaction)."""
    row = conn.execute(GET_SCHEDULE, (name,)).fetchone()
    return None if row is None else SlotState(*row)


def _claims(rows: list[Any], conn: sqlite3.Connection | None = None) -> list[Claim]:
    """The claims ``CLAIM`` returned, in run order; a child's parents read
    through ``conn`` (given only when some row is a child)."""
    if len(rows) > 1:  # RETURNING keeps no order
        rows.sort(key=lambda row: (*row[7:9], row[0]))
    return [
        Claim(
            job_id,
            token,
            payload,
            tried + 1,
            max_attempts,
            key,
            task,
            due,
            timeout,
            meta,
            () if limits is None else job_limits(limits),
            () if conn is None or after_failure is None else parents_of(conn, job_id),
        )
        for (
            job_id,
            token,
            payload,
            tried,
            max_attempts,
            key,
            task,
            _,
            due,
            timeout,
            meta,
            limits,
            after_failure,
        ) in rows
    ]


class SqliteStore(OneJobCalls):
    """Jobs in a SQLite database file that many processes on one host share.

    ``synchronous``: ``"NORMAL"`` keeps every change that returned through a
    crash of the process; ``"FULL"`` also through an OS crash or power loss,
    at the cost of an fsync per change. ``lease_seconds``: how long a claim
    lasts without renewal (the queue renews every third of it), on the
    host's clock whatever clock the queue was given (see the module).
    ``busy_timeout``: seconds to wait for another writer before failing with
    ``StoreError``. ``poll_interval``: how often idle workers look for jobs
    added by other processes when no wake-up socket can be made beside the
    database (see ``doorbell``; otherwise they wake at once).
    ``claim_batch``: how many due jobs a worker may claim at once (see
    ``Store.claim_batch``). The file must be on a local filesystem.
    """

    shared_between_processes = True
    keeps_results = True
    transactional_add = False
    capabilities = Capabilities(
        pages=True,
        finished_counts=True,
        schedules=True,
        schema=True,
        files=True,
        limits=True,
        workflows=True,
        activity=True,
        own_clock_leases=True,
    )

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
        self._db = Database(
            self.path, synchronous=self.synchronous, busy_timeout=self.busy_timeout
        )
        self._signal = Signal()
        self._dead_letter_limit = 1000
        self._reset_process_state()
        reset_after_fork(self)
        guard.track(self)

    @property
    def location(self) -> str:
        return f"the SQLite file {self.path}"

    def missing(self) -> str | None:
        """``None`` if the database file is there; else what is not."""
        return None if os.path.exists(self.path) else f"no SQLite store at {self.path}"

    @property
    def listening(self) -> bool:
        """Whether other processes' changes wake this store's idle workers at
        once (by datagram); ``False`` when closed, or when no wake-up socket
        could be made (they are then noticed within ``poll_interval``)."""
        watcher = self._watcher
        return watcher is not None and watcher.listening

    def _reset_process_state(self) -> None:
        """What belongs to one process: connections, the watcher, the identity."""
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._owner = _this_process()
        self._conns: dict[int, sqlite3.Connection] = {}  # by thread
        #: How deep each thread is in calls on its connection now: ``close``
        #: leaves those connections to their threads, which close them as
        #: their call ends (one closed under a thread inside it crashes).
        self._inside: dict[int, int] = {}
        self._opened = False
        #: The last watcher started, kept after ``close`` until its thread has
        #: closed its connection, so that a fork meanwhile closes it first.
        self._watcher: Watcher | None = None
        #: Whether a limit is declared in the file: until one is, a claim
        #: does not probe for keys that may release held jobs (``claim_many``).
        self._limits_in_use = False
        self._look_for_limits_at = 0.0
        self._group = GroupCommit(self._add_calls)

    def _after_fork_in_child(self) -> None:
        """Set the parent's connections aside unused; ``open`` again to go on."""
        inherited.extend(self._conns.values())
        if self._watcher is not None:
            conn = self._watcher.take_connection()
            if conn is not None:
                inherited.append(conn)
            self._watcher.abandon()
        self._reset_process_state()

    def close_for_fork(self) -> None:
        """Close this process's connections: no thread is using them (the
        fork guard, ``connections.ForkGuard``, calls this before ``os.fork()``),
        and each reopens its own on next use."""
        if self._pid != os.getpid():
            return  # inherited, not reset yet: never touch the parent's
        watcher = self._watcher
        watched = None if watcher is None else watcher.take_connection()
        conns = [*self._conns.values(), watched]
        self._conns.clear()
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
        with guard, self._lock:
            self._signal = signal
            self._dead_letter_limit = dead_letter_limit
            if self._opened:
                return
            self._db.create_file()
            conn = self._db.connect()
            try:
                migrate_schema(self._db, conn)
                watcher = Watcher(
                    self._db, poll_interval=self.poll_interval, signal=self._current
                )
                watcher.start()
                self._watcher = watcher
            except BaseException:
                conn.close()
                raise
            self._conns[threading.get_ident()] = conn
            self._opened = True
        self._recover(signal.clock(), expired=False)

    def _current(self) -> Signal:
        """The signal of the queue that opened the store last (the watcher's)."""
        return self._signal

    def close(self) -> None:
        """Stop the watcher and close this process's connections; idempotent.

        A thread may still be inside a call (a handler that outlived
        ``close(timeout)``): its connection is left to it, and closed as
        that call ends; any later call raises ``StoreError``."""
        self._check_process()
        with self._lock:
            self._opened = False
            watcher = self._watcher
            if watcher is not None:
                watcher.stop()
        # Joined holding no lock: the watcher may wait for a fork to finish.
        if watcher is not None:
            watcher.join()  # it closes its own connection
        with guard:
            with self._lock:
                idle = [
                    conn
                    for ident, conn in self._conns.items()
                    if ident not in self._inside
                ]
                self._conns.clear()
            for conn in idle:
                self._close_connection(conn)

    def _close_connection(self, conn: sqlite3.Connection) -> None:
        """Close a connection no thread is inside (nor can enter again)."""
        try:
            conn.close()
        except sqlite3.Error:
            logger.exception("closing a connection to %s failed", self.path)

    def migrate(self) -> int:
        """Create the file (mode 0600) and the schema if needed, or check the
        schema's version, now: one connection, one transaction, closed after.
        ``open`` does the same; this is for deploy scripts (``jobq migrate``).
        Returns the schema's version; a newer one raises ``StoreError``."""
        self._check_process()
        with guard:
            self._db.create_file()
            conn = self._db.connect()
            try:
                return migrate_schema(self._db, conn)
            finally:
                conn.close()

    def save(self) -> None:
        """Committed changes are already durable against a process crash; a
        checkpoint also syncs them to the database file (power loss)."""
        with self._reading() as conn:
            conn.execute(CHECKPOINT).fetchall()

    # -- the job's path: add, claim, finish or fail ---------------------------

    def add(
        self, jobs: Sequence[NewJob], now: float, *, max_pending: int | None = None
    ) -> list[Enqueued]:
        """Add jobs; callers that add at the same time share one transaction
        (``GroupCommit``)."""
        self._check_process()
        return self._group.add(Call(jobs, now, max_pending))

    def _add_calls(self, calls: Sequence[Call]) -> list[list[Enqueued]]:
        """Write the calls' jobs in one transaction, all or none; a call
        with ``max_pending`` counts the pending jobs after the calls before
        it, as if each had committed alone."""
        if len(calls) == 1 and _plain(calls[0]):
            return [[self._add_one(calls[0].jobs[0], calls[0].now)]]
        added: list[list[Enqueued]] = []
        due = delayed = 0
        keep_cancelled = self._signal.keep_cancelled
        pending = 0
        with self._write() as conn:
            for call in calls:
                if call.max_pending is not None:
                    (pending,) = conn.execute(PENDING_COUNT).fetchone()
                before = due + delayed
                results: list[Enqueued] = []
                for job in call.jobs:
                    enqueued, state = _insert(conn, job, call.now, keep_cancelled)
                    results.append(enqueued)
                    if state == "ready":
                        due += 1
                    elif state == "scheduled":
                        delayed += 1
                if call.max_pending is not None:  # raising rolls everything back
                    check_room(pending, due + delayed - before, call.max_pending)
                added.append(results)
        if due or delayed:
            # A delayed job wakes one idle worker so it shortens its wait.
            self._jobs_added(due or 1)
        return added

    def _add_one(self, job: NewJob, now: float) -> Enqueued:
        """A ``_plain`` job: its ``INSERT`` alone, in autocommit (one
        statement instead of BEGIN, INSERT, COMMIT). A trigger's writes
        leave ``lastrowid`` alone (jobq's only update counts)."""
        row = _row(job, now)[1]
        with guard, self._connection() as conn:
            try:
                # No RETURNING: SQLite would fill a table with the id first.
                job_id: int = conn.execute(INSERT_ROW, row).lastrowid  # type: ignore[assignment]
            except sqlite3.Error as exc:
                raise self._db.error(exc) from exc
        watcher = self._watcher
        if watcher is not None:
            watcher.committed()
        self._jobs_added(1)
        return Enqueued(job_id, False)

    def enqueue_slot(
        self,
        name: str,
        expression: str,
        slot: float,
        job: NewJob,
        now: float,
        *,
        skip_running: bool,
    ) -> Enqueued | None:
        """One IMMEDIATE transaction: processes asking for the same slot take
        turns, and the later ones find it taken."""
        with self._write() as conn:
            state = _schedule(conn, name)
            if slot_taken(state, slot):
                return None
            skipped = overlapping_job(state, skip_running, _live_in(conn))
            keep_cancelled = self._signal.keep_cancelled
            result = (
                _insert(conn, job, now, keep_cancelled)[0]
                if skipped is None
                else Enqueued(skipped, True)
            )
            state = SlotState(name, expression, slot, result.id)
            conn.execute(PUT_SCHEDULE, state)
        if not result.duplicate:
            self._jobs_added(1)
        return result

    def schedule_states(self) -> list[SlotState]:
        with self._reading() as conn:
            return [SlotState(*row) for row in conn.execute(SCHEDULES).fetchall()]

    def pause_schedule(self, name: str, now: float, *, by: str) -> bool:
        with self._write() as conn:
            state = paused(_schedule(conn, name), name, now, by)
            if state is not None:
                conn.execute(PUT_SCHEDULE, state)
        return state is not None

    def resume_schedule(self, name: str, now: float) -> bool:
        with self._write() as conn:
            state = resumed(_schedule(conn, name), now)
            if state is not None:
                conn.execute(PUT_SCHEDULE, state)
        return state is not None

    def enqueue_now(
        self, name: str, job: NewJob, now: float, *, skip_running: bool
    ) -> Enqueued:
        """One IMMEDIATE transaction, as ``enqueue_slot``."""
        with self._write() as conn:
            state = _schedule(conn, name)
            skipped = overlapping_job(state, skip_running, _live_in(conn))
            if skipped is not None:
                return Enqueued(skipped, True)
            keep_cancelled = self._signal.keep_cancelled
            result = _insert(conn, job, now, keep_cancelled)[0]
            if not result.duplicate:
                conn.execute(PUT_SCHEDULE, run_by_hand(state, name, result.id))
        if not result.duplicate:
            self._jobs_added(1)
        return result

    def claim_many(self, now: float, limit: int) -> list[Claim]:
        self._check_process()
        watcher = self._watcher
        if watcher is not None:
            watcher.want_rings()  # before looking: nothing committed later is missed
        with self._reading() as conn:
            if not self._limits_in_use and now >= self._look_for_limits_at:
                self._look_for_limits(conn, now)
            if self._limits_in_use:
                due, releasing = conn.execute(ANY_DUE_OR_READY, (now, now)).fetchone()
                if not (due or releasing):
                    return []
            elif conn.execute(ANY_DUE, (now,)).fetchone()[0]:
                releasing = 0  # as before limits existed: one probe less
            else:
                return []
        owner = self._owner
        with self._write() as conn:
            conn.execute(PROMOTE, (now,))
            limiter = Limiter(conn, now) if releasing else None
            if limiter is not None:
                limiter.release()
            until = _lease_clock() + self._lease
            lease = (until, owner.host, owner.pid, owner.nonce)
            rows = conn.execute(CLAIM, (now, *lease, limit)).fetchall()
            for row in rows:  # a loop, not any(): no generator for each claim
                if row[11] is not None:
                    self._limits_in_use = True
                    limiter = limiter or Limiter(conn, now)
                    rows = self._admit(conn, limiter, rows, limit, lease)
                    break
            for row in rows:
                if row[12] is not None:
                    return _claims(rows, conn)
        return _claims(rows)

    def _look_for_limits(self, conn: sqlite3.Connection, now: float) -> None:
        """Whether some process declared a limit, looked at once a second:
        a process that neither declared one nor claimed a limited job learns
        so within a second, and only then releases held jobs by itself."""
        self._look_for_limits_at = now + LIMITS_LOOK
        if conn.execute(LIMITS_DECLARED).fetchone()[0]:
            self._limits_in_use = True

    def _may_hold(self, conn: sqlite3.Connection, now: float) -> bool:
        """Whether a key may release held jobs now: idle workers should look."""
        return bool(conn.execute(READY_KEY_EXISTS, (now,)).fetchone()[0])

    def _admit(
        self,
        conn: sqlite3.Connection,
        limiter: Limiter,
        rows: list[Any],
        limit: int,
        lease: tuple[float, str, int, str],
    ) -> list[Any]:
        """The claimed rows whose limits admit them; the others held, and
        more claimed in their place (under the same ``lease``) until
        ``limit`` or nothing is ready."""
        admitted: list[Any] = []
        while rows:
            rows.sort(key=lambda row: (*row[7:9], row[0]))
            admitted += [
                row
                for row in rows
                if row[11] is None or limiter.admit(row[0], job_limits(row[11]))
            ]
            wanted = limit - len(admitted)
            if not wanted:
                break
            rows = conn.execute(CLAIM, (limiter.now, *lease, wanted)).fetchall()
        return admitted

    def finish_many(
        self, done: Sequence[Done], keep_until: float | None, now: float
    ) -> list[bool]:
        ends: Ends | None = None  # made for a parent only: a finish's hot path
        with self._write() as conn:
            conn.execute(EXPIRE_COMPLETED, (now,))
            ended: list[bool] = []
            for d in done:
                outcome = _finish_one(conn, d, keep_until, now)
                if outcome == _PARENT:
                    ends = ends or self._ends(conn, now)
                    ends.ended(d.claim.id, "completed", d.result)
                ended.append(bool(outcome))
            settled = any(ended) and self._settled(conn)
            freed = self._slots_freed(conn, [d.claim for d in done], now)
        if settled:
            self._job_settled()
        if freed:
            self._jobs_added(1)
        if ends is not None:
            self._ends_told(ends)
        return ended

    def _slots_freed(
        self, conn: sqlite3.Connection, claims: Sequence[Claim], now: float
    ) -> bool:
        """Whether ending ``claims`` let a key release held jobs (a probe of
        ``jobq_limit_ready``, only where one of them had limits)."""
        if not any(claim.limits for claim in claims):
            return False
        return self._may_hold(conn, now)

    def release(self, claims: Sequence[Claim], now: float) -> None:
        """Pending again; a stopping job, which never started, cancelled."""
        with self._write() as conn:
            ends = self._ends(conn, now)
            stopped = [_release_one(conn, claim, ends) for claim in claims]
            settled = any(stopped) and self._settled(conn)
        self._jobs_added(len(claims))
        if settled:
            self._job_settled()
        self._ends_told(ends)

    def fail_many(
        self, failures: Sequence[Failure], now: float
    ) -> list[JobState | None]:
        states: list[JobState | None] = []
        dropped: list[tuple[int, str | None]] = []
        with self._write() as conn:
            ends = self._ends(conn, now)
            for claim, error, retry_at in failures:
                row = conn.execute(CLAIMED, (claim.id, claim.token)).fetchone()
                if row is None:
                    states.append(None)
                    continue
                attempts, errors, stopping, children = row
                end = JobState.CANCELLED if stopping else (
                    JobState.DEAD if retry_at is None else JobState.PENDING
                )  # fmt: skip
                dropped += self._record_failure(conn, claim.id, attempts, errors,
                                                error, retry_at, now, end,
                                                children, ends)  # fmt: skip
                if claim.limits:
                    free_slots(conn, claim.id)
                states.append(end)
            settled = self._any_settled(conn, states, now, ends)
            freed = self._slots_freed(conn, [f.claim for f in failures], now)
        self._log_dropped(dropped)
        self._ends_told(ends)
        if settled:
            self._job_settled()
        retried = states.count(JobState.PENDING) + freed
        if retried:
            self._jobs_added(retried)
        return states

    def renew(self, claims: Sequence[Claim], now: float) -> None:
        """One statement for all of them (per ``RENEW_CHUNK``), in one
        transaction: the watchdog renews every running job of the process.
        Until the host's clock (``_lease_clock``) plus the lease, not ``now``."""
        if not claims:
            return
        until = _lease_clock() + self._lease
        with self._write() as conn:
            for start in range(0, len(claims), RENEW_CHUNK):
                chunk = claims[start : start + RENEW_CHUNK]
                values: list[float | int] = [until]
                for claim in chunk:
                    values += (claim.id, claim.token)
                conn.execute(renew(len(chunk)), values)

    def recover(self, now: float) -> int:
        """Claims whose lease expired on the host's clock (``_lease_clock``),
        or whose process died on this host; recorded as failed at ``now``."""
        return self._recover(now, expired=True)

    # -- looking and managing ---------------------------------------------------

    def get(self, job_id: int, now: float) -> JobRecord[Any] | None:
        with self._reading() as conn:
            row = conn.execute(GET, (job_id,)).fetchone()
            if row is None:
                return None
            expires_at = row[EXPIRES_AT]  # a stopping job's is its cancel's
            if row[1] != "running" and expires_at is not None and expires_at <= now:
                return None
            return _records(conn, [row])[0]

    def list_jobs(
        self, state: JobState, limit: int | None = None
    ) -> list[JobRecord[Any]]:
        with self._reading() as conn:
            rows = conn.execute(LISTS[state], (-1 if limit is None else limit,))
            return _records(conn, rows.fetchall())

    def revive(self, job_id: int, now: float) -> bool:
        with self._write() as conn:
            row = conn.execute(DEAD_KEY, (job_id,)).fetchone()
            if row is None:
                return False
            key = row[0]
            if key is not None and conn.execute(HELD_KEY, (key,)).fetchone():
                return False
            conn.execute(REVIVE, (now, job_id))
        self._jobs_added(1)
        return True

    def delete_dead(self, job_id: int) -> bool:
        """Its waiting children end as if it was cancelled (see "Workflows")."""
        now = self._signal.clock()
        with self._write() as conn:
            row = conn.execute(DELETE_DEAD, (job_id,)).fetchone()
            ends = self._ends(conn, now)
            if row is not None and row[0]:
                ends.ended(job_id, "cancelled", how="was deleted")
            settled = self._any_settled(conn, (), now, ends)
        if settled:
            self._job_settled()
        self._ends_told(ends)
        return row is not None

    def cancel(
        self, job_id: int, now: float, *, by: str, keep_until: float
    ) -> CancelOutcome | None:
        """One write: a pending job cancelled, a running one stopping (its
        first request kept), purging the cancelled jobs expired at ``now``."""
        with self._write() as conn:
            conn.execute(EXPIRE_CANCELLED, (now,))
            row = conn.execute(CANCEL_STATE, (job_id,)).fetchone()
            state, stopping, limits, held_by, children = (
                (None, False, None, None, 0) if row is None else row
            )
            request = (now, by, keep_until, job_id)
            ends = self._ends(conn, now)
            if state in ("scheduled", "ready", "held", "waiting"):
                conn.execute(CANCEL_PENDING, request)
                if limits is not None:
                    cancelled(conn, state, limits, held_by)
                if children:
                    ends.ended(job_id, "cancelled")
                outcome: CancelOutcome | None = "cancelled"
            elif state == "running":
                if not stopping:
                    conn.execute(STOP_RUNNING, request)
                outcome = "stopping"
            else:
                outcome = None
            settled = outcome == "cancelled" and self._settled(conn)
        if settled:
            self._job_settled()
        self._ends_told(ends)
        return outcome

    def stops_requested(self, claims: Sequence[Claim]) -> list[int]:
        """One read of the claims' rows (per ``RENEW_CHUNK``), by primary key."""
        stopping: list[int] = []
        with self._reading() as conn:
            for start in range(0, len(claims), RENEW_CHUNK):
                chunk = claims[start : start + RENEW_CHUNK]
                values = [v for claim in chunk for v in (claim.id, claim.token)]
                rows = conn.execute(stops(len(chunk)), values).fetchall()
                stopping += [job_id for (job_id,) in rows]
        return stopping

    def stats(self) -> StoreStats:
        self._check_process()
        if self._signal.joiners and self._watcher is not None:
            # ``join`` asks at each look: ask the others to ring when they
            # settle the queue, before reading, so none settles unseen.
            self._watcher.joining()
        with self._reading() as conn:
            now = self._signal.clock()
            counts = dict(conn.execute(COUNTS).fetchall())
            due = conn.execute(DUE_SCHEDULED, (now,)).fetchone()[0]
            expired = conn.execute(EXPIRED_COMPLETED, (now,)).fetchone()[0]
            gone = conn.execute(EXPIRED_CANCELLED, (now,)).fetchone()[0]
            retrying = conn.execute(RETRYING, (now,)).fetchone()[0]
        return StoreStats(
            counts["scheduled"] + counts["ready"] + counts["held"],
            counts["running"],
            counts["dead"],
            counts["scheduled"] - due,
            counts["completed"] - expired,
            counts["cancelled"] - gone,
            counts["waiting"],
            retrying,
        )

    def finished_per_minute(self, since: float, now: float) -> list[FinishedMinute]:
        """Jobs finished per minute (see ``jobq.stores.base``): two counts
        over each minute's range of the ``jobq_finished`` index."""
        self._check_process()
        with self._reading() as conn:
            params = {"since": since, "now": now}
            rows = conn.execute(FINISHED_PER_MINUTE, params).fetchall()
        return [
            FinishedMinute(float(m), completed, died) for m, completed, died in rows
        ]

    def page_jobs(self, query: JobQuery, now: float) -> JobPage:
        """A page of a list (see ``jobq.stores.pages``): one statement over
        the list's index, reading that page's rows."""
        first = DATABASE_FIRST[query.view]
        cursor = read_cursor(query.after, len(first), int64=True) or first
        params: dict[str, object] = {
            "now": now, "limit": query.limit + 1, "task": query.task,
            "key": query.key, "error": query.error,
        }  # fmt: skip
        params.update((f"c{i}", value) for i, value in enumerate(cursor))
        with self._reading() as conn:
            rows = conn.execute(PAGES[query.view], params).fetchall()
            page = database_page(
                rows,
                query.limit,
                WIDTH,
                json.loads,
                cancels_at=CANCELS_AT,
                limits_at=LIMITS_AT,
            )
            with_family(conn, rows, page.jobs)
        return page

    def next_due(self) -> float | None:
        """The first ready job's due time, else the earliest of the first
        scheduled job's and a holding key's ``ready_at``."""
        with self._reading() as conn:
            ready, scheduled, releasing = conn.execute(NEXT_DUE).fetchone()
        if ready is not None:
            return float(ready)
        later = [float(t) for t in (scheduled, releasing) if t is not None]
        return min(later) if later else None

    # -- limits -------------------------------------------------------------------

    def declare_limit(self, limit: Limit) -> Limit | None:
        with self._write() as conn:
            found = declare(conn, limit)
        self._limits_in_use = True
        return found

    def limit_usage(self, now: float) -> list[LimitUsage]:
        """The declarations, and per key its slots and held jobs, summed
        over the declaration that governs each key."""
        with self._reading() as conn:
            limits = declared(conn)
            running = conn.execute(SLOTS_PER_KEY).fetchall()
            held = conn.execute(HELD_PER_KEY).fetchall()
        return usage_of(limits, running, held)

    # -- activity (jobq.stores.sqlite.activity) -------------------------------------

    def beat(self, beat: Beat, now: float) -> None:
        with self._write() as conn:
            activity.write_beat(conn, beat, now)

    def leave(self, process_id: str) -> None:
        with self._write() as conn:
            activity.leave(conn, process_id)

    def processes(self, now: float) -> list[ProcessInfo]:
        with self._reading() as conn:
            return activity.read_processes(conn, now)

    def outcomes(self, since: float, now: float) -> list[TaskOutcomes]:
        with self._reading() as conn:
            return activity.read_outcomes(conn, since, now)

    def minute_outcomes(self, since: float, now: float) -> list[MinuteOutcomes]:
        with self._reading() as conn:
            return activity.read_minute_outcomes(conn, since, now)

    def samples(self, since: float, now: float) -> list[DepthSample]:
        with self._reading() as conn:
            return activity.read_samples(conn, since, now)

    # -- inside a write transaction: settling, failures, burial, recovery ----------

    def _settled(self, conn: sqlite3.Connection) -> bool:
        """Whether a ``join`` caller should look again: someone joins, here
        or in another process, and nothing is pending or running any more.
        Waking joiners at every finished job would make them query the
        counts at every job."""
        if not self._signal.joiners:
            watcher = self._watcher
            if watcher is None or not watcher.others_join():
                return False
        return not conn.execute(LIVE_COUNT).fetchone()[0]

    def _any_settled(
        self,
        conn: sqlite3.Connection,
        states: Sequence[JobState | None],
        now: float,
        ends: Ends,
    ) -> bool:
        """After failed attempts ended jobs in ``states`` (and parents'
        ends cancelled children): purge the expired cancelled jobs if one was
        cancelled (``cancel`` does too), and say whether ``join`` callers
        should look again (one left the live ones)."""
        cancelled = JobState.CANCELLED in states or ends.cancelled
        if cancelled:
            conn.execute(EXPIRE_CANCELLED, (now,))
        ended = cancelled or JobState.DEAD in states
        return bool(ended) and self._settled(conn)

    def _ends(self, conn: sqlite3.Connection, now: float) -> Ends:
        """What parents' ends in this write do to their children."""
        return Ends(conn, now, self._signal.keep_cancelled)

    def _ends_told(self, ends: Ends) -> None:
        """After the commit: wake the workers for the children parents'
        ends released, here and in the other processes, and say which."""
        if ends.released:
            self._jobs_added(len(ends.released))
            self._signal.jobs_released(ends.released)

    # -- wake-ups, here and in the other processes --------------------------------

    def _jobs_added(self, count: int) -> None:
        """``count`` jobs became claimable (or a delayed job may be due
        sooner): wake this process's idle workers, and ring the others."""
        self._signal.jobs_added(count)
        watcher = self._watcher
        if watcher is not None:
            watcher.jobs_added(count)

    def _job_settled(self) -> None:
        """Nothing is pending or running any more: wake this process's
        ``join`` callers, and ring the other processes if one joins."""
        self._signal.job_settled()
        watcher = self._watcher
        if watcher is not None:
            watcher.settled()

    def _record_failure(
        self,
        conn: sqlite3.Connection,
        job_id: int,
        attempts: int,
        errors: str,
        error: AttemptError,
        retry_at: float | None,
        now: float,
        end: JobState,
        children: int,
        ends: Ends,
    ) -> list[tuple[int, str | None]]:
        """Store one more failed attempt, finished ``now``: ``end`` says
        whether the job is pending again at ``retry_at``, dead or cancelled
        (its waiting children told, if it has ``children``).

        Returns the dead jobs the dead-letter limit dropped, to log after commit.
        """
        kept = _dump_errors(add_error(_load_errors(errors), error))
        last = describe_error(error)
        if end is JobState.CANCELLED:
            conn.execute(END_CANCELLED, (attempts + 1, last, kept, now, job_id))
            if children:
                ends.ended(job_id, "cancelled")
            return []
        if end is JobState.PENDING and retry_at is not None:
            state = "ready" if retry_at <= now else "scheduled"
            values = (state, retry_at, attempts + 1, last, kept, now, job_id)
            conn.execute(RETRY, values)
            return []
        conn.execute(BURY, (attempts + 1, last, kept, now, job_id))
        if children:
            ends.ended(job_id, "dead")
        (dead,) = conn.execute(DEAD_COUNT).fetchone()
        excess = dead - self._dead_letter_limit
        if excess <= 0:
            return []
        dropped = conn.execute(OLDEST_DEAD, (excess,)).fetchall()
        conn.executemany(DELETE, [(row[0],) for row in dropped])
        for dropped_id, _, dropped_children in dropped:
            if dropped_children:
                how = "was dropped from the dead-letter list"
                ends.ended(dropped_id, "cancelled", how=how)
        return [(dropped_id, last_error) for dropped_id, last_error, _ in dropped]

    def _log_dropped(self, dropped: list[tuple[int, str | None]]) -> None:
        for job_id, last_error in dropped:
            log_dropped_dead(self._dead_letter_limit, job_id, last_error)

    def _recover(self, now: float, *, expired: bool) -> int:
        """Make claims of dead owners (and, with ``expired``, claims expired
        on the host's clock) failed attempts at ``now``: pending again now, or
        dead when out of attempts, or cancelled when stopping
        (``ended_by_crash``)."""
        dead_owners = self._dead_owners()
        expired_at = _lease_clock()
        if not dead_owners:
            if not expired:
                return 0
            with self._reading() as conn:
                if not conn.execute(ANY_EXPIRED, (expired_at,)).fetchone()[0]:
                    return 0
        error = process_died(now)
        dropped: list[tuple[int, str | None]] = []
        with self._write() as conn:
            ends = self._ends(conn, now)
            rows = conn.execute(EXPIRED, (expired_at,)).fetchall() if expired else []
            for pid, nonce in dead_owners:
                rows += conn.execute(OWNED, (self._owner.host, pid, nonce)).fetchall()
            recovered = {row[0]: row for row in rows}
            states: list[JobState | None] = []
            for (
                job_id,
                attempts,
                max_attempts,
                errors,
                stopping,
                limited,
                children,
            ) in recovered.values():
                end = ended_by_crash(attempts, max_attempts, bool(stopping))
                dropped += self._record_failure(
                    conn, job_id, attempts, errors, error, now, now, end, children, ends
                )
                if limited:
                    free_slots(conn, job_id)
                states.append(end)
            settled = self._any_settled(conn, states, now, ends)
            freed = bool(recovered) and self._may_hold(conn, now)
        self._log_dropped(dropped)
        self._ends_told(ends)
        log_recovered(recovered)
        retried = states.count(JobState.PENDING) + freed
        if retried:
            self._jobs_added(retried)
        if settled:
            self._job_settled()
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

    # -- this thread's connection ----------------------------------------------

    @contextlib.contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection for one call, opened on first use;
        ``StoreError`` once the store is closed. ``close`` never closes it
        while the call runs: if the store was closed meanwhile, this thread
        closes it as the call ends."""
        self._check_process()
        ident = threading.get_ident()
        with self._lock:
            if not self._opened:
                raise StoreError(
                    f"{self.path}: the store is not open (closed, or inherited "
                    "through fork: open it again)"
                )
            conn = self._conns.get(ident)
            if conn is None:
                conn = self._conns[ident] = self._db.connect()
            self._inside[ident] = self._inside.get(ident, 0) + 1
        try:
            yield conn
        finally:
            with self._lock:
                depth = self._inside.pop(ident, 1) - 1
                if depth:
                    self._inside[ident] = depth
                orphaned = not depth and self._conns.get(ident) is not conn
            if orphaned:  # the store was closed during the call
                self._close_connection(conn)

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One short write transaction. IMMEDIATE takes the write lock first
        (waiting up to ``busy_timeout``), so it cannot fail half-way on a
        snapshot another writer made stale."""
        with guard, self._connection() as conn, self._db.transaction(conn):
            yield conn
        watcher = self._watcher
        if watcher is not None:
            watcher.committed()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection for reads (autocommit: no lock is kept)."""
        with guard, self._connection() as conn:
            try:
                yield conn
            except sqlite3.Error as exc:
                raise self._db.error(exc) from exc
