"""The PostgreSQL store's class, ``PostgresStore``: the store protocol on a
schema that processes on many hosts share.

Claims. A pending job is ``scheduled`` (due later) or ``ready`` (due), each
state with a partial index. One statement moves the scheduled jobs that fell
due to ``ready`` (an index range on ``run_at``) and takes the first due job in
(priority DESC, run_at, id) order, both with ``FOR UPDATE SKIP LOCKED``, so
claims stay O(log n) however many delayed or low-priority jobs wait, and
concurrent claimers never wait for each other.

Leases. A claim sets a random 63-bit ``token``, its ``owner`` and
``lease_until`` = the database's clock + ``lease_seconds``. Only the current
token may end or renew a claim; ``recover`` turns claims whose lease expired
on the database's clock into failed attempts.

Clock. Leases always use the database's clock (``statement_timestamp()``), so
hosts whose clocks differ never judge each other's leases. Due times follow
``clock``: with ``"database"`` (the default) the store ignores the queue's
clock except for differences (a delay of 30 s is 30 s on the database's clock;
an absolute ``at`` is turned into a delay with the enqueuing host's clock) and
orders and compares every due time on the database's clock, so one host's
clock being off moves nothing. With ``"queue"`` it stores and compares the
queue's own times, as the memory store does: that is for tests that inject a
clock or use freezegun; across hosts it assumes synchronized clocks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence, Sized
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar

from jobq._fork import reset_after_fork
from jobq._rules import check_text, storable
from jobq.activity import Beat, DepthSample, MinuteOutcomes, ProcessInfo, TaskOutcomes
from jobq.errors import StoreError
from jobq.stores._group import Call, GroupCommit
from jobq.stores.base import (
    ERRORS_KEPT,
    NO_SLOT,
    CancelOutcome,
    Capabilities,
    Claim,
    Done,
    Failure,
    NewJob,
    ParentEnd,
    ParentOutcome,
    Signal,
    SlotState,
    StoreStats,
    check_room,
    child_fate,
    describe_error,
    ended_by_crash,
    log_dropped_dead,
    log_recovered,
    overlapping_job,
    parent_ended,
    process_died,
    unknown_parent,
)
from jobq.stores.helpers import (
    DATABASE_STATES,
    OneJobCalls,
    batch_size,
    database_page,
    positive_seconds,
    record_from_row,
)
from jobq.stores.limits import (
    governing,
    has_room,
    next_tat,
    rate_allows,
    rate_ready_at,
)
from jobq.stores.pages import DATABASE_FIRST, JobPage, JobQuery, read_cursor
from jobq.stores.postgres.activity import (
    drop_params,
    minutes_params,
    outcome_arrays,
    outcome_from_row,
    process_from_row,
    process_params,
)
from jobq.stores.postgres.connections import (
    Database,
    first,
    inherited,
    require_driver,
)
from jobq.stores.postgres.conninfo import lower_scheme, parse_conninfo, redacted
from jobq.stores.postgres.schema import (
    advisory_lock_key,
    migrate_schema,
    missing_privileges,
    prepare_schema,
)
from jobq.stores.postgres.statements import Statements
from jobq.stores.postgres.wakeups import Listener, Notifier, channel_name
from jobq.types import (
    AttemptError,
    Enqueued,
    FinishedMinute,
    JobRecord,
    JobState,
    Limit,
    LimitUsage,
)

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

#: Scheduled jobs moved to ``ready`` by one claim, at most (the rest by the
#: next claims): bounds the work of one claim when many jobs fall due at once.
PROMOTE_BATCH = 1000

#: Completed jobs past ``keep_completed`` deleted by one ``finish``, at most.
EXPIRE_BATCH = 100

#: Tries to add a keyed job whose holder finishes between our insert and look-up.
KEY_RETRIES = 10

#: Seconds between looks at whether the queue has limits, while it has none
#: (a declaration by another process is seen that much later; until then
#: this process claims only jobs under no limit).
LIMITS_LOOK = 2.0

#: Held jobs released at once by a key no declaration governs any more.
RELEASE_UNGOVERNED = 1000


class _Outcome(NamedTuple):
    """What a limited claim decided for its candidates: the jobs started,
    the jobs held with the key holding each, the slots taken (key, job),
    and each key's new (tat, ready_at: ``None`` keeps the stored one)."""

    started: list[int]
    held: list[tuple[int, str]]
    slots: list[tuple[str, int]]
    keys: dict[str, tuple[float, float | None]]


def _blocker(
    rules: list[tuple[str, Limit | None]],
    tats: dict[str, float],
    running: dict[str, int],
    now: float,
) -> str | None:
    """The first of a job's keys that does not allow it to start now."""
    for name, limit in rules:
        if limit is None:
            continue
        if not (has_room(limit, running[name]) and rate_allows(limit, tats[name], now)):
            return name
    return None


def _decide(
    candidates: Sequence[tuple[int, list[str] | None]],
    declared: list[Limit],
    tats: dict[str, float],
    running: dict[str, int],
    now: float,
) -> _Outcome:
    """Start or hold each candidate in run order, counting the slots and
    starts taken by those before it (``jobq.stores.limits``)."""
    started: list[int] = []
    held: list[tuple[int, str]] = []
    slots: list[tuple[str, int]] = []
    by_rate: dict[str, Limit] = {}
    for job_id, names in candidates:
        rules = [(name, governing(declared, name)) for name in names or ()]
        blocker = _blocker(rules, tats, running, now)
        if blocker is not None:
            held.append((job_id, blocker))
            limit = dict(rules)[blocker]
            if limit is not None and has_room(limit, running[blocker]):
                by_rate[blocker] = limit  # its rate holds it: due at ready_at
            continue
        started.append(job_id)
        for name, limit in rules:
            running[name] += 1
            slots.append((name, job_id))
            if limit is not None:
                tats[name] = next_tat(limit, tats[name], now)
    keys: dict[str, tuple[float, float | None]] = {
        name: (tat, None) for name, tat in tats.items()
    }
    for name, limit in by_rate.items():
        keys[name] = (tats[name], rate_ready_at(limit, tats[name]))
    return _Outcome(started, held, slots, keys)


def _release_plan(
    limit: Limit | None, tat: float, running: int, holds: bool, now: float
) -> tuple[int, float | None]:
    """How many held jobs a key releases now, and its ``ready_at`` after:
    as many as slots are free, one at a time under a rate (then due when
    the rate allows the next); none while it is full (a freed slot wakes it
    again) or its rate does not allow (due when it does)."""
    if not holds:
        return 0, None
    if limit is None:
        return RELEASE_UNGOVERNED, None
    free = None if limit.concurrency is None else limit.concurrency - running
    if free is not None and free <= 0:
        return 0, None
    if not rate_allows(limit, tat, now):
        return 0, rate_ready_at(limit, tat)
    if limit.rate is None:
        return int(free or 0), None
    return 1, rate_ready_at(limit, next_tat(limit, tat, now))


def _dead_letters_lock_key(schema: str, queue: str) -> int:
    """The ``pg_advisory_xact_lock`` key that serializes the dead-letter trims
    of one queue (``statements.LOCK_DEAD``)."""
    name = f"jobq.dead:{len(schema)}:{schema}:{queue}"
    digest = hashlib.sha256(name.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class _Attempt(NamedTuple):
    """A failed attempt to record: its claim's id and token, its error, the
    seconds until the job runs again (``None``: it is dead), and whether the
    job is under limits (its end then frees its slots)."""

    id: int
    token: int
    error: AttemptError
    retry_in: float | None
    limited: bool


def _limited(claims: Sequence[Claim]) -> bool:
    """Whether a claim of these is under limits: ending them then frees
    slots (``statements.FINISH_LIMITED``, ...); else nothing limit-related runs."""
    return any(claim.limits for claim in claims)


def _summed(
    declared: list[Limit], limit: Limit, counts: Sequence[tuple[str, int]]
) -> int:
    """The counts of the keys ``limit`` governs, summed."""
    return sum(int(n) for key, n in counts if governing(declared, key) == limit)


def _retry_after_crash(
    attempts: int, max_attempts: int, stopping: bool
) -> float | None:
    """The ``retry_in`` of a claim whose process died: at once if it runs
    again (``ended_by_crash``), else ``None`` (``FAIL`` ends a stopping job
    cancelled, any other dead)."""
    again = ended_by_crash(attempts, max_attempts, stopping) is JobState.PENDING
    return 0.0 if again else None


#: Where ``statements.RECORD``'s columns hold a job's cancellation.
CANCELS_AT = 17


#: Where ``statements.RECORD``'s columns hold a job's limits and held_by.
LIMITS_AT = 20

#: Where they hold its after_failure, parents, waiting_on and children.
WORKFLOW_AT = 22

#: ``statements.RECORD``'s columns, and so where a page's sort key starts.
RECORD_WIDTH = 27


def _record(row: Sequence[Any]) -> JobRecord[Any]:
    """A job as ``statements.RECORD`` selects it."""
    return _with_limits(record_from_row(row, row[11], cancels_at=CANCELS_AT), row)


def _with_limits(record: JobRecord[Any], row: Sequence[Any]) -> JobRecord[Any]:
    """``record`` with the limits and ``held_by`` of its row, and its
    place in a workflow."""
    limits, held_by = row[LIMITS_AT : LIMITS_AT + 2]
    after_failure, parents, waiting_on, children = row[WORKFLOW_AT : WORKFLOW_AT + 4]
    if limits is not None or held_by is not None:
        record = dataclasses.replace(
            record, limits=tuple(limits or ()), held_by=held_by
        )
    if after_failure is not None or children is not None:
        record = dataclasses.replace(
            record,
            after_failure=after_failure,
            parents=tuple(parents or ()),
            waiting_on=tuple(waiting_on or ()),
            children=tuple(children or ()),
        )
    return record


class _Ended(NamedTuple):
    """A parent's end, as its waiting children take it: how it ended, its
    result (completed), and the ``parent_ended`` words of a child it cancels."""

    id: int
    end: ParentEnd
    result: str | None
    how: str


class _Aftermath:
    """What parents' ends did to their children in a transaction, to tell
    once it committed: the jobs released (id, task: due now or later) and
    whether a child ended cancelled."""

    def __init__(self) -> None:
        self.released: list[tuple[int, str | None]] = []
        self.cancelled = 0

    def forget(self) -> None:
        """The transaction rolled back: nothing of it happened."""
        self.released.clear()
        self.cancelled = 0


logger = logging.getLogger(__name__)

#: How many times a transaction the server aborted for a deadlock is tried.
DEADLOCK_TRIES = 5

T = TypeVar("T")


def _retried(
    conn: psycopg.Connection[Any], aftermath: _Aftermath, work: Callable[[], T]
) -> T:
    """``work`` in one transaction, tried again when the server aborts it
    for a deadlock (40P01). A parent's end writes its children in the same
    transaction, so the jobs counters (``counts``, one row per state and
    shard) are taken in more than one order, and two transactions of one
    shard may wait for each other; the server aborts one, and it is tried
    again here, rather than its claim running again after its lease."""
    import psycopg

    for attempt in range(1, DEADLOCK_TRIES + 1):
        try:
            with conn.transaction():
                return work()
        except psycopg.errors.DeadlockDetected:
            aftermath.forget()
            if attempt == DEADLOCK_TRIES:
                raise
            logger.info("a transaction met a deadlock; trying it again")
    raise AssertionError("unreachable")  # pragma: no cover


#: What a parent's state means to a child added after it: ended so (any
#: other: unfinished).
_PARENT_ENDS: dict[str, ParentEnd] = {
    "completed": "completed", "dead": "dead", "cancelled": "cancelled",
}  # fmt: skip

#: How a child a parent's end cancels says it (``parent_ended``).
_HOW = {"dead": "died", "cancelled": "was cancelled", "completed": ""}

#: What inserting jobs gave: each job's (id, duplicate), and how many of
#: them are new and pending (not waiting, not cancelled).
_Inserted = tuple[list[tuple[int, bool]], int]


#: A call's rows to insert, its jobs (first of each key), and its plan
#: (``PostgresStore._batch``).
_Batch = tuple[list[dict[str, Any]], list[NewJob], list[int]]


def _unkeyed(calls: Sequence[Call]) -> bool:
    """No job has a key and no call a cap: every row goes in, nothing is read."""
    return all(
        call.max_pending is None and all(job.key is None for job in call.jobs)
        for call in calls
    )


def _split(ids: list[Any], rows: Sequence[Sized]) -> list[list[Any]]:
    """``ids`` in order, cut into one list per call's ``rows``."""
    split: list[list[Any]] = []
    start = 0
    for each in rows:
        split.append(ids[start : start + len(each)])
        start += len(each)
    return split


def _results(plan: list[int], ids: list[tuple[int, bool]]) -> list[Enqueued]:
    """Each job's outcome, by its ``plan`` entry (``PostgresStore._batch``)."""
    results: list[Enqueued] = []
    for row in plan:
        if row < 0:
            results.append(Enqueued(results[-1 - row].id, True))
        else:
            results.append(Enqueued(*ids[row]))
    return results


class _Owner(NamedTuple):
    """Who holds a claim, for people reading the table."""

    text: str
    pid: int


_process_owner: _Owner | None = None


def _this_process() -> _Owner:
    global _process_owner
    if _process_owner is None or _process_owner.pid != os.getpid():
        _process_owner = _Owner(f"{socket.gethostname()}:{os.getpid()}", os.getpid())
    return _process_owner


class PostgresStore(OneJobCalls):
    """Jobs in PostgreSQL, shared by processes on any number of hosts.

    ``conninfo``: a ``postgresql://`` URL or a libpq ``key=value`` string.
    ``queue``: the queue's name; queues with different names share the tables
    and never see each other's jobs. ``schema``: where the tables live (created
    on first use unless ``auto_migrate=False``). ``lease_seconds``: how long a
    claim lasts without renewal (the queue renews every third of it); a job
    whose process died runs again after at most that long. ``poll_interval``:
    how often idle workers look for new jobs when no notification can reach
    them (``listen=False``, or the LISTEN connection is down); they also look
    at least every second. ``pool_size``: connections at most in this
    process's pool (each call borrows one for one transaction).
    ``connect_timeout``: seconds to wait for a connection (a new one, or a free
    one from the pool) before ``StoreError``. ``call_timeout``: seconds a call
    waits for the server's answer before its connection is shut down and it
    raises ``OutcomeUnknown`` (a partition or a stalled server never hangs a
    call). ``clock``: ``"database"`` or
    ``"queue"`` (see the module's documentation). ``listen``: ``True``,
    ``False``, or a connection string for the LISTEN connection (e.g. direct to
    PostgreSQL when ``conninfo`` goes through PgBouncer). ``prepare``: let
    psycopg use server-side prepared statements. ``claim_batch``: how many due
    jobs a claim may take for a worker whose handlers are fast, those beyond
    the idle workers taken ahead (see "Taking jobs ahead" in
    ``jobq.stores.base``: a job taken ahead that never started costs no
    attempt after a crash, but waits up to ``lease_seconds`` to run).
    ``take_ahead=False``: the older trade instead, as the other persistent
    stores make it: a worker writes the outcomes of a batch's jobs
    together, faster for handlers of microseconds, but a crash re-runs
    every job the process held, a failed attempt each.

    Constructing one checks the arguments and opens nothing.
    """

    shared_between_processes = True
    keeps_results = True
    transactional_add = True
    capabilities = Capabilities(
        pages=True, finished_counts=True, schedules=True, schema=True,
        migrates_on_open=True, named_queues=True, limits=True, workflows=True,
        activity=True, own_clock_leases=True, prefetch=True,
    )  # fmt: skip

    def __init__(
        self,
        conninfo: str,
        *,
        queue: str = "default",
        schema: str = "jobq",
        lease_seconds: float = 30.0,
        poll_interval: float = 1.0,
        pool_size: int = 10,
        connect_timeout: float = 10.0,
        call_timeout: float = 30.0,
        clock: Literal["database", "queue"] = "database",
        listen: bool | str = True,
        prepare: bool = True,
        auto_migrate: bool = True,
        claim_batch: int = 16,
        take_ahead: bool = True,
    ) -> None:
        require_driver()
        conninfo = lower_scheme(conninfo)
        self._params = parse_conninfo(conninfo)
        self.conninfo = conninfo
        if isinstance(listen, str):
            listen = lower_scheme(listen)
            parse_conninfo(listen)
        elif not isinstance(listen, bool):
            raise TypeError(f"listen must be a bool or a connection string: {listen!r}")
        given: tuple[tuple[object, str], ...] = ((queue, "queue"), (schema, "schema"))
        for value, name in given:
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty str, not {value!r}")
            check_text(value, name)
        if len(schema.encode()) > 63:
            raise ValueError(
                f"schema must be at most 63 bytes (PostgreSQL's limit), not {schema!r}"
            )
        if clock not in ("database", "queue"):
            raise ValueError(f"clock must be 'database' or 'queue', not {clock!r}")
        if isinstance(pool_size, bool) or not isinstance(pool_size, int):
            raise TypeError(f"pool_size must be an int, not {pool_size!r}")
        if pool_size < 1:
            raise ValueError(f"pool_size must be at least 1, not {pool_size}")
        self.queue = queue
        self.schema = schema
        self.lease_seconds: float | None = positive_seconds(
            lease_seconds, "lease_seconds"
        )
        self._lease = float(lease_seconds)
        self.claim_batch = batch_size(claim_batch)
        self.poll_interval = positive_seconds(poll_interval, "poll_interval")
        self.pool_size = pool_size
        self.connect_timeout = positive_seconds(connect_timeout, "connect_timeout")
        self.call_timeout = positive_seconds(call_timeout, "call_timeout")
        self.clock = clock
        #: Whether due times follow the database's clock rather than the queue's
        #: (tests that inject a clock build the store with ``clock="queue"``).
        self.uses_own_clock = clock == "database"
        self.listen = listen
        self.prepare = bool(prepare)
        self.auto_migrate = bool(auto_migrate)
        if not take_ahead:  # the older trade: see the class's documentation
            self.capabilities = dataclasses.replace(self.capabilities, prefetch=False)
        self.channel = channel_name(schema)
        self.lock_key = advisory_lock_key(schema)
        self._dead_lock_key = _dead_letters_lock_key(schema, queue)
        self._sql = Statements(schema)
        self._db = Database(
            conninfo,
            self._params,
            queue=queue,
            schema=schema,
            prepare=self.prepare,
            pool_size=pool_size,
            connect_timeout=self.connect_timeout,
            call_timeout=self.call_timeout,
        )
        self._signal = Signal()
        self._dead_letter_limit = 1000
        self._offset = 0.0  # the queue's clock minus time.time(), at the last claim
        self._reset_process_state()
        reset_after_fork(self)

    def __repr__(self) -> str:
        return (
            f"PostgresStore({redacted(self.conninfo)!r}, queue={self.queue!r}, "
            f"schema={self.schema!r})"
        )

    @property
    def where(self) -> str:
        """The server and database, as messages name them (no password)."""
        return self._db.where

    @property
    def location(self) -> str:
        return f"{self.where}, schema {self.schema!r}, queue {self.queue!r}"

    def for_command(
        self, *, queue: str | None = None, schema: str | None = None
    ) -> PostgresStore:
        """This database as a short-lived command uses it (``jobq --store``):
        on ``queue`` and ``schema`` (default: this store's), listening to no
        one (it runs no workers), two connections, and opening only checks
        the schema (``auto_migrate=False``)."""
        return PostgresStore(
            self.conninfo,
            queue=queue or self.queue,
            schema=schema or self.schema,
            connect_timeout=self.connect_timeout,
            call_timeout=self.call_timeout,
            clock=self.clock,
            prepare=self.prepare,
            listen=False,
            pool_size=2,
            auto_migrate=False,
        )

    @property
    def listening(self) -> bool:
        """Whether the listener holds a LISTEN connection now."""
        listener = self._listener
        return listener is not None and listener.listening

    # -- per-process state ---------------------------------------------------------

    def _reset_process_state(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._owner = _this_process()
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] | None = None
        #: Opened while the interpreter exits: each call connects on its own.
        self._unpooled = False
        #: The last listener and notifier started, kept after ``close`` (which
        #: stops them) until the next ``open`` or fork.
        self._listener: Listener | None = None
        self._notifier: Notifier | None = None
        #: Sent with our notifications, so that our own listener skips them.
        self._token = secrets.token_hex(8)
        #: Whether the queue has limits (then claims check them), and when
        #: that was last looked at while it had none (``LIMITS_LOOK``).
        self._limited = False
        self._limits_looked = float("-inf")
        self._group = GroupCommit(self._add_calls, in_flight=2)

    def _after_fork_in_child(self) -> None:
        """Set the parent's pool and listener aside unused; ``open`` again to go on."""
        listen_conn = None if self._listener is None else self._listener.abandon()
        inherited.extend(x for x in (self._pool, listen_conn) if x is not None)
        self._db.after_fork()
        self._reset_process_state()

    def _check_process(self) -> None:
        if self._pid != os.getpid():
            self._after_fork_in_child()

    # -- lifecycle -------------------------------------------------------------------

    def open(self, signal: Signal, *, dead_letter_limit: int) -> None:
        """Check (or create, or migrate) the schema, then start the pool and
        the listener. Raises ``StoreError`` naming the problem when the server
        cannot be reached or the role lacks a permission."""
        self._check_process()
        with self._lock:
            self._signal = signal
            self._dead_letter_limit = dead_letter_limit
            if self._pool is not None or self._unpooled:
                return
            with self._db.direct() as conn:
                self._prepare(conn)
            try:
                self._pool = self._db.new_pool()
            except RuntimeError as exc:
                if "shutdown" not in str(exc):
                    raise
                # Python 3.12+ starts no thread (the pool's) while the
                # interpreter exits: a late atexit hook's calls connect alone.
                self._unpooled = True
            self._notifier = Notifier(
                channel=self.channel,
                queue=self.queue,
                token=self._token,
                connection=self._connection,
            )
            self._listener = None
            if self.listen is not False or self.poll_interval < 1.0:
                self._listener = Listener(
                    self._db,
                    listen=self.listen,
                    channel=self.channel,
                    queue=self.queue,
                    token=self._token,
                    poll_interval=self.poll_interval,
                    signal=self._current,
                )
                self._listener.start()

    def _current(self) -> Signal:
        """The signal of the queue that opened the store last (the listener's)."""
        return self._signal

    def close(self) -> None:
        """Stop the listener and close this process's connections; idempotent."""
        self._check_process()
        with self._lock:
            listener, notifier = self._listener, self._notifier
            for wakeups in (listener, notifier):
                if wakeups is not None:
                    wakeups.stop()
        for wakeups in (listener, notifier):  # the notifier sends what is due first
            if wakeups is not None:
                wakeups.join()
        with self._lock:
            pool, self._pool = self._pool, None
            self._unpooled = False
            if listener is not None:
                listener.close()
        if pool is not None:
            pool.close()

    def save(self) -> None:
        """Nothing to do: every change returned after its transaction committed."""

    def migrate(self) -> int:
        """Create the schema, or bring it to this jobq's version, now.

        Runs under ``pg_advisory_xact_lock``, in one transaction, so hosts
        doing it at once do not race. Needs a role that may create the schema
        (or owns it); roles that may not run DDL then use the store with
        ``open`` only checking the version. Returns the version.
        """
        self._check_process()
        with self._db.direct() as conn:
            return migrate_schema(conn, self._sql, where=self.where)

    def check(self) -> None:
        """Connect, check the schema (as ``open`` does: creating it unless
        ``auto_migrate=False``) and the privileges the store needs; raise
        ``StoreError`` naming what is wrong."""
        self._check_process()
        with self._db.direct() as conn:
            self._prepare(conn)
            missing = missing_privileges(conn, self._sql)
            if missing:
                raise StoreError(
                    f"{self.where}: the role lacks {', '.join(missing)}; grant them "
                    f"(GRANT USAGE ON SCHEMA ...; GRANT SELECT, INSERT, UPDATE, "
                    "DELETE ON ALL TABLES IN SCHEMA ...; GRANT USAGE ON ALL "
                    "SEQUENCES IN SCHEMA ...)"
                )

    def _prepare(self, conn: psycopg.Connection[Any]) -> None:
        """Check the schema; create or migrate it unless ``auto_migrate=False``."""
        prepare_schema(
            conn, self._sql, where=self.where, auto_migrate=self.auto_migrate
        )

    # -- the job's path: add, claim, finish or fail -----------------------------------

    def add(
        self,
        jobs: Sequence[NewJob],
        now: float,
        *,
        max_pending: int | None = None,
        connection: Any = None,
    ) -> list[Enqueued]:
        """Add jobs in one transaction; callers that add at the same time
        share one (``GroupCommit``). With ``connection`` (a psycopg 3
        connection), write them in that connection's current transaction,
        never shared: they exist if, and only if, the caller commits it.
        Jobs ``after=`` others take a few statements more
        (``_insert_children``), in a transaction of their own."""
        if connection is None and not any(job.after for job in jobs):
            self._check_process()  # a forked child's group is its own
            return self._group.add(Call(jobs, now, max_pending))
        params, kept, plan = self._batch(jobs, now)
        children = any(job.after for job in kept)

        def insert(conn: psycopg.Connection[Any], statement: bytes) -> _Inserted:
            if children:
                return self._insert_children(
                    conn, kept, params, now, notify=connection is not None
                )
            ids = self._insert(conn, params, statement)
            return ids, sum(not held for _, held in ids)

        if connection is not None:
            ids, due = self._add_in(connection, insert, max_pending)
        else:
            with self._connection() as conn, conn.transaction():
                ids, due = self._insert_checked(
                    conn, insert, self._sql.add, max_pending
                )
        self._added(due, notify_others=connection is None)
        return _results(plan, ids)

    def _add_calls(self, calls: Sequence[Call]) -> list[list[Enqueued]]:
        """Write the calls' jobs (none ``after=`` others) in one transaction,
        all or none; a lone job in one statement, in autocommit. A call with
        ``max_pending`` counts the pending jobs after the calls before it,
        as if each had committed alone."""
        batches = [self._batch(call.jobs, call.now) for call in calls]
        statement = self._sql.add
        with self._connection() as conn:
            if len(batches) == 1 and len(batches[0][0]) == 1:
                if calls[0].max_pending is None:
                    ids = [self._insert(conn, batches[0][0], statement)]
                else:
                    with conn.transaction():
                        ids = [self._insert_call(conn, calls[0], batches[0][0])]
            elif _unkeyed(calls):
                ids = _split(
                    self._insert_unkeyed(conn, batches), [b[0] for b in batches]
                )
            else:  # BEGIN goes out with the rows, in one round trip
                with conn.pipeline(), conn.transaction():
                    ids = self._insert_calls(conn, calls, [b[0] for b in batches])
        self._added(sum(not held for its in ids for _, held in its))
        return [_results(b[2], its) for b, its in zip(batches, ids, strict=True)]

    def _insert_calls(
        self,
        conn: psycopg.Connection[Any],
        calls: Sequence[Call],
        params: list[list[dict[str, Any]]],
    ) -> list[list[tuple[int, bool]]]:
        """The calls' rows (in ``conn``'s transaction): all in one pipeline
        unless a call counts the pending jobs first."""
        if any(call.max_pending is not None for call in calls):
            return [
                self._insert_call(conn, call, rows)
                for call, rows in zip(calls, params, strict=True)
            ]
        rows = [row for rows in params for row in rows]
        return _split(self._insert(conn, rows, self._sql.add), params)

    def _insert_unkeyed(
        self, conn: psycopg.Connection[Any], batches: list[_Batch]
    ) -> list[tuple[int, bool]]:
        """Rows no key can turn away, each returning its id, in one round
        trip: BEGIN, the rows and COMMIT go out in one pipeline, the ids are
        read after."""
        from psycopg.rows import tuple_row

        rows = [row for batch in batches for row in batch[0]]
        ids: list[tuple[int, bool]] = []
        with conn.pipeline(), conn.cursor(row_factory=tuple_row) as cur:
            with conn.transaction():
                cur.executemany(self._sql.add, rows, returning=True)
            while True:
                ids.append((first(cur.fetchone()), False))
                if not cur.nextset():
                    return ids

    def _insert_call(
        self,
        conn: psycopg.Connection[Any],
        call: Call,
        params: list[dict[str, Any]],
    ) -> list[tuple[int, bool]]:
        def insert(conn: psycopg.Connection[Any], statement: bytes) -> _Inserted:
            ids = self._insert(conn, params, statement)
            return ids, sum(not held for _, held in ids)

        return self._insert_checked(conn, insert, self._sql.add, call.max_pending)[0]

    def _batch(
        self, jobs: Sequence[NewJob], now: float
    ) -> tuple[list[dict[str, Any]], list[NewJob], list[int]]:
        """The rows to insert for ``jobs``, the jobs they are, and per job
        its row, or ``-1 - i`` for a job whose key the ``i``th job of the
        batch took first (``_results``)."""
        params: list[dict[str, Any]] = []
        kept: list[NewJob] = []
        first_of_key: dict[str, int] = {}
        plan: list[int] = []
        for index, job in enumerate(jobs):
            if job.key is not None:
                if job.key in first_of_key:
                    plan.append(-1 - first_of_key[job.key])
                    continue
                first_of_key[job.key] = index
            plan.append(len(params))
            params.append(self._add_params(job, now))
            kept.append(job)
        return params, kept, plan

    def _added(self, due: int, *, notify_others: bool = True) -> None:
        """Wake this process's idle workers for ``due`` new jobs, and those
        of other processes (unless the caller's commit will)."""
        if due:
            self._signal.jobs_added(due)
            if notify_others:
                self._notify_others(due)

    def _add_params(self, job: NewJob, now: float) -> dict[str, Any]:
        return {
            "q": self.queue,
            "now": self._now(now),
            "run_in": job.run_at - now,  # < 0: overdue, it keeps its place
            "payload": job.payload,
            "key": job.key,
            "priority": job.priority,
            "max_attempts": job.max_attempts,
            "task": job.task,
            "timeout": job.timeout,
            "meta": job.meta,
            "limits": list(job.limits) if job.limits else None,
        }

    def _insert_checked(
        self,
        conn: psycopg.Connection[Any],
        insert: Callable[[psycopg.Connection[Any], bytes], _Inserted],
        statement: bytes,
        max_pending: int | None,
    ) -> _Inserted:
        """``insert``; with ``max_pending``, in a savepoint that ``QueueFull``
        rolls back, so an open transaction (the caller's) stays as it was.
        The count is read first, which begins the caller's transaction on a
        connection that has none open yet."""
        if max_pending is None:
            return insert(conn, statement)
        pending = first(conn.execute(self._sql.pending, {"q": self.queue}).fetchone())
        with conn.transaction():
            ids, due = insert(conn, statement)
            check_room(pending, due, max_pending)
        return ids, due

    def _add_in(
        self,
        connection: Any,
        insert: Callable[[psycopg.Connection[Any], bytes], _Inserted],
        max_pending: int | None,
    ) -> _Inserted:
        """Add in the caller's transaction (or, on an autocommit connection
        outside a transaction, in one of our own)."""
        import psycopg

        if not isinstance(connection, psycopg.Connection):
            raise TypeError(
                "connection must be a psycopg 3 connection (psycopg.Connection), "
                f"not {type(connection).__name__}"
            )
        status = connection.info.transaction_status
        if status == psycopg.pq.TransactionStatus.INERROR:
            raise StoreError(
                "the caller's transaction failed earlier and must be rolled back; "
                "nothing was added"
            )
        statement = self._sql.add_notify
        try:
            if connection.autocommit and status == psycopg.pq.TransactionStatus.IDLE:
                with connection.transaction():
                    return self._insert_checked(
                        connection, insert, statement, max_pending
                    )
            return self._insert_checked(connection, insert, statement, max_pending)
        except psycopg.Error as exc:
            raise self._db.error(exc) from exc

    def _insert(
        self,
        conn: psycopg.Connection[Any],
        params: list[dict[str, Any]],
        statement: bytes,
    ) -> list[tuple[int, bool]]:
        """Insert the rows; a row whose key a live job holds yields that job."""
        from psycopg.rows import tuple_row

        if statement == self._sql.add_notify:
            message = {"channel": self.channel, "message": f"-:{self.queue}"}
            params = [{**values, **message} for values in params]
        with conn.cursor(row_factory=tuple_row) as cur:
            if len(params) == 1:
                cur.execute(statement, params[0])
                inserted = [cur.fetchone()]
            else:
                cur.executemany(statement, params, returning=True)
                inserted = []
                while True:
                    inserted.append(cur.fetchone())
                    if not cur.nextset():
                        break
            results: list[tuple[int, bool]] = []
            for row, values in zip(inserted, params, strict=True):
                if row is not None:
                    results.append((row[0], False))
                    continue
                results.append(self._held(cur, values, statement))
        return results

    def _insert_children(
        self,
        conn: psycopg.Connection[Any],
        jobs: Sequence[NewJob],
        params: list[dict[str, Any]],
        now: float,
        *,
        notify: bool,
    ) -> _Inserted:
        """Add jobs some of which come ``after=`` others, in ``conn``'s
        transaction: their parents locked in id order and read as they are
        then, each job waiting, pending or cancelled by what they are, its
        deps rows, and its parents' counts of children. ``notify``: in the
        caller's transaction, which sends the wake-up as it commits."""
        sql = self._sql
        wanted = sorted({pid for job in jobs for pid in job.after})
        rows = conn.execute(sql.lock_parents, {"ids": wanted}).fetchall()
        found = {row[0]: (row[1], row[2], row[3]) for row in rows}
        self._check_parents(conn, wanted, found)
        for job, values in zip(jobs, params, strict=True):
            values.update(self._child_params(job, found, now))
        ids = self._insert(conn, params, sql.add_child)
        deps: list[tuple[int, int, int, str | None, str | None]] = []
        counts: dict[int, int] = {}
        due = 0
        for values, (job_id, duplicate) in zip(params, ids, strict=True):
            if duplicate:
                continue
            due += values["cancel_by"] is None and not values["waits"]
            for position, outcome in enumerate(values.pop("outcomes")):
                pid, end, result = outcome
                deps.append((job_id, position, pid, end, result))
                if pid in found:
                    counts[pid] = counts.get(pid, 0) + 1
        if deps:
            columns = list(zip(*deps, strict=True))
            conn.execute(sql.add_deps, dict(zip(
                ("children", "positions", "parents", "outcomes", "results"),
                map(list, columns), strict=True)))  # fmt: skip
            counted = {"ids": list(counts), "counts": list(counts.values())}
            conn.execute(sql.count_children, counted)
        if due and notify:
            conn.execute(
                sql.notify_in, {"channel": self.channel, "message": f"-:{self.queue}"}
            )
        return ids, due

    def _check_parents(
        self,
        conn: psycopg.Connection[Any],
        wanted: list[int],
        found: dict[int, tuple[str, str, str | None]],
    ) -> None:
        """Raise ``unknown_parent`` for the first id this queue never gave:
        another queue's job, or one above the last id given."""
        missing = [pid for pid in wanted if pid not in found]
        last = 0
        if missing:
            seq = {"seq": self._sql.names["jobs_id_seq_name"]}
            last = first(conn.execute(self._sql.last_id, seq).fetchone())
        for pid in wanted:
            if pid in found:
                if found[pid][0] != self.queue:
                    raise unknown_parent(pid)
            elif pid > last:
                raise unknown_parent(pid)

    def _child_params(
        self,
        job: NewJob,
        found: dict[int, tuple[str, str, str | None]],
        now: float,
    ) -> dict[str, Any]:
        """A job's parents' outcomes as they are now (``outcomes``), how
        many it waits for, and the parent's end that cancels it, if one does."""
        outcomes: list[ParentOutcome] = []
        cancel_by = None
        for pid in job.after:
            _, state, result = found.get(pid, (self.queue, "completed", None))
            if state not in _PARENT_ENDS:
                outcomes.append((pid, None, None))
                continue
            end = _PARENT_ENDS[state]
            fate = child_fate(job.after_failure, end)
            if fate == "cancel" and cancel_by is None:
                cancel_by = parent_ended(pid, _HOW[end])
            if fate == "finished":
                outcomes.append((pid, end, result if end == "completed" else None))
            else:
                outcomes.append((pid, None, None))
        return {
            "after_failure": job.after_failure if job.after else None,
            "waits": sum(end is None for _, end, _ in outcomes) if job.after else None,
            "cancel_by": cancel_by,
            "keep_for": self._signal.keep_cancelled,
            "outcomes": outcomes,
        }

    def _held(
        self, cur: psycopg.Cursor[Any], values: dict[str, Any], statement: bytes
    ) -> tuple[int, bool]:
        """The live job holding ``values``'s key, or a new job if it just ended."""
        for _ in range(KEY_RETRIES):
            cur.execute(self._sql.held_key, values)
            held = cur.fetchone()
            if held is not None:
                return held[0], True
            cur.execute(statement, values)  # the holder ended in between: again
            row = cur.fetchone()
            if row is not None:
                return row[0], False
        raise StoreError(
            f"key {values['key']!r} kept changing hands; nothing was added for it"
        )

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
        """One transaction: take the slot (``TAKE_SLOT``), add the job, and
        keep its id; hosts asking for the same slot at once wait for the
        schedule's row, and the later ones find the slot taken."""
        key = {"q": self.queue, "name": name}
        with self._connection() as conn, conn.transaction():
            row = conn.execute(
                self._sql.take_slot, {**key, "expression": expression, "slot": slot}
            ).fetchone()
            if row is None:
                return None
            state = SlotState(name, expression, slot, row[0])
            skipped = overlapping_job(state, skip_running, self._live_in(conn))
            if skipped is not None:
                return Enqueued(skipped, True)
            job_id, duplicate = self._insert(
                conn, [self._add_params(job, now)], self._sql.add
            )[0]
            conn.execute(self._sql.set_slot_job, {**key, "job": job_id})
        if not duplicate:
            self._signal.jobs_added(1)
            self._notify_others(1)
        return Enqueued(job_id, duplicate)

    def _live_in(self, conn: psycopg.Connection[Any]) -> Callable[[int], bool]:
        """Whether a job is pending or running, as ``conn``'s transaction
        sees it (``overlapping_job``'s question)."""
        sql = self._sql.live_job
        return lambda job_id: bool(first(conn.execute(sql, {"job": job_id}).fetchone()))

    def schedule_states(self) -> list[SlotState]:
        with self._connection() as conn:
            rows = conn.execute(self._sql.schedules, {"q": self.queue}).fetchall()
        return [SlotState(*row) for row in rows]

    def pause_schedule(self, name: str, now: float, *, by: str) -> bool:
        values = {"q": self.queue, "name": name, "now": now, "by": by}
        with self._connection() as conn:
            row = conn.execute(
                self._sql.pause_schedule, {**values, "no_slot": NO_SLOT}
            ).fetchone()
        return row is not None

    def resume_schedule(self, name: str, now: float) -> bool:
        values = {"q": self.queue, "name": name, "now": now}
        with self._connection() as conn:
            row = conn.execute(self._sql.resume_schedule, values).fetchone()
        return row is not None

    def enqueue_now(
        self, name: str, job: NewJob, now: float, *, skip_running: bool
    ) -> Enqueued:
        """One transaction on the schedule's locked row (``LOCK_SCHEDULE``):
        the last job looked at is the last job kept."""
        key = {"q": self.queue, "name": name}
        with self._connection() as conn, conn.transaction():
            row = conn.execute(
                self._sql.lock_schedule, {**key, "no_slot": NO_SLOT}
            ).fetchone()
            state = SlotState(name, "", NO_SLOT, row[0] if row else None)
            skipped = overlapping_job(state, skip_running, self._live_in(conn))
            if skipped is not None:
                return Enqueued(skipped, True)
            job_id, duplicate = self._insert(
                conn, [self._add_params(job, now)], self._sql.add
            )[0]
            if not duplicate:
                conn.execute(self._sql.set_slot_job, {**key, "job": job_id})
        if not duplicate:
            self._signal.jobs_added(1)
            self._notify_others(1)
        return Enqueued(job_id, duplicate)

    def claim_many(
        self, now: float, limit: int, *, start: int | None = None
    ) -> list[Claim]:
        """One statement while the queue has no limits; else a few per
        claim (``_claim_limited``). The first ``start`` (default: all) start
        now, the others are taken ahead (``started_at`` NULL)."""
        self._offset = now - time.time()  # for next_due: see there
        token = secrets.randbits(63) or 1  # one per batch: (id, token) fences
        params = {
            "q": self.queue,
            "now": self._now(now),
            "batch": PROMOTE_BATCH,
            "limit": limit,
            "start": limit if start is None else start,
            "token": token,
            "lease": self._lease,
            "owner": self._owner.text,
        }
        with self._connection() as conn:
            # The flag first: no call while the queue has no limits.
            if self._limited or self._look_for_limits(conn):
                rows, limits = self._claim_limited(conn, now, params)
            else:  # jobs under no limit only, and no column for their limits
                rows, limits = conn.execute(self._sql.claim, params).fetchall(), {}
            parents = None
            for row in rows:  # a loop, not a call: it runs for every claim
                if row[10] is not None:  # a workflow's step (after_failure)
                    parents = self._parents_of(conn, rows)
                    break
        # RETURNING keeps no order (on a small table the plan scans the rows
        # as they lie): sort into run order, ties by id (first added first).
        if len(rows) > 1:
            rows.sort(key=lambda row: (*row[6:8], row[0]))
        claims = [
            Claim(
                job_id,
                token,
                payload,
                attempts + 1,
                max_attempts,
                key,
                task,
                run_at,
                timeout,
                meta,
            )
            for (
                job_id,
                payload,
                attempts,
                max_attempts,
                key,
                task,
                _,
                run_at,
                timeout,
                meta,
                _,
            ) in rows
        ]
        if limits:
            claims = [claim._replace(limits=limits[claim.id]) for claim in claims]
        if parents:  # None or {} for jobs outside workflows
            claims = [
                claim._replace(parents=parents[claim.id])
                if claim.id in parents
                else claim
                for claim in claims
            ]
        return claims

    def _parents_of(
        self, conn: psycopg.Connection[Any], rows: list[Any]
    ) -> dict[int, tuple[ParentOutcome, ...]]:
        """The parents of the claimed children among ``rows`` (a claim's),
        in ``after`` order, with their outcomes."""
        children = [row[0] for row in rows if row[10] is not None]
        found: dict[int, list[ParentOutcome]] = {}
        rows = conn.execute(self._sql.parents, {"ids": children}).fetchall()
        for child, parent, end, result in rows:
            found.setdefault(child, []).append((parent, end, result))
        return {child: tuple(outcomes) for child, outcomes in found.items()}

    def _look_for_limits(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether the queue has limits declared, looked up at most every
        ``LIMITS_LOOK`` seconds while it has none (once it has, for good)."""
        moment = time.monotonic()
        if moment >= self._limits_looked + LIMITS_LOOK:
            self._limits_looked = moment
            found = conn.execute(self._sql.has_limits, {"q": self.queue}).fetchone()
            self._limited = bool(first(found))
        return self._limited

    def _claim_limited(
        self, conn: psycopg.Connection[Any], now: float, params: dict[str, Any]
    ) -> tuple[list[Any], dict[int, tuple[str, ...]]]:
        """Release what the keys allow, then claim in rounds, each one
        transaction: a round that held jobs back takes more to fill the
        limit. The claims' rows as the plain claim's, and each one's limits."""
        declared = self._declared(conn)
        released = self._release_held(conn, declared, now)
        limit, start = params["limit"], params["start"]
        rows: list[Any] = []
        while len(rows) < limit:
            with conn.transaction():
                started, held = self._limited_round(conn, declared, {
                    **params, "limit": limit - len(rows),
                    "start": start - len(rows),
                })  # fmt: skip
            rows += started
            if not held:
                break
        if released > len(rows):
            self._notify_others(released - len(rows))
        limits = {row[0]: tuple(row[-1] or ()) for row in rows}
        return [row[:-1] for row in rows], limits

    def _limited_round(
        self,
        conn: psycopg.Connection[Any],
        declared: list[Limit],
        params: dict[str, Any],
    ) -> tuple[list[Any], int]:
        """Lock candidates, lock their keys in name order (claimers of one
        key wait for each other; no one else locks a key), count the keys'
        slots after, decide, write: the claims' rows and how many were held."""
        sql = self._sql
        candidates = conn.execute(sql.limited_pick, params).fetchall()
        if not candidates:
            return [], 0
        keys = sorted({name for _, names in candidates for name in names or ()})
        tats: dict[str, float] = {}
        running: dict[str, int] = {}
        now = 0.0
        if keys:
            named = {"q": self.queue, "keys": keys, "now": params["now"]}
            tats = dict(conn.execute(sql.lock_keys, named).fetchall())
            use = conn.execute(sql.key_use, named).fetchall()
            running = {name: int(count) for name, count, _ in use}
            now = float(use[0][2])
        outcome = _decide(candidates, declared, tats, running, now)
        rows = conn.execute(sql.start_limited, {
            **params,
            "ids": outcome.started,
            "held": [job_id for job_id, _ in outcome.held],
            "held_by": [name for _, name in outcome.held],
            "slot_names": [name for name, _ in outcome.slots],
            "slot_ids": [job_id for _, job_id in outcome.slots],
            "keys": list(outcome.keys),
            "tats": [tat for tat, _ in outcome.keys.values()],
            "ready": [ready for _, ready in outcome.keys.values()],
        }).fetchall()  # fmt: skip
        return rows, len(outcome.held)

    def _release_held(
        self, conn: psycopg.Connection[Any], declared: list[Limit], now: float
    ) -> int:
        """Make due again the held jobs their keys allow now (a transaction
        of its own, which never waits for a key); how many."""
        sql = self._sql
        with conn.transaction():
            keys = conn.execute(
                sql.releasable, {"q": self.queue, "now": self._now(now)}
            ).fetchall()
            if not keys:
                return 0
            plans = [
                _release_plan(governing(declared, name), tat, int(count), holds, t)
                for name, tat, count, holds, t in keys
            ]
            row = conn.execute(sql.release_held, {
                "q": self.queue,
                "keys": [name for name, *_ in keys],
                "counts": [n for n, _ in plans],
                "ready": [ready for _, ready in plans],
            }).fetchone()  # fmt: skip
        return int(first(row) or 0)

    def _declared(self, conn: psycopg.Connection[Any]) -> list[Limit]:
        """The queue's declarations as the store holds them."""
        rows = conn.execute(self._sql.limits, {"q": self.queue}).fetchall()
        return [Limit(*row) for row in rows]

    def declare_limit(self, limit: Limit) -> Limit | None:
        values = {
            "q": self.queue, "name": limit.name, "concurrency": limit.concurrency,
            "rate": limit.rate, "per": limit.per, "burst": limit.burst,
        }  # fmt: skip
        with self._connection() as conn:
            row = conn.execute(self._sql.declare_limit, values).fetchone()
        self._limited = True
        if row is None:
            return None
        stored = Limit(limit.name, *row)
        return None if stored == limit else stored

    def limit_usage(self, now: float) -> list[LimitUsage]:
        """Each declaration with its keys' slots and held jobs summed."""
        params = {"q": self.queue}
        with self._connection() as conn, conn.transaction():
            declared = self._declared(conn)
            running = conn.execute(self._sql.running_per_key, params).fetchall()
            waiting = conn.execute(self._sql.held_per_key, params).fetchall()
        return [
            LimitUsage(limit.name, limit.concurrency, limit.rate_text, limit.burst,
                       _summed(declared, limit, running),
                       _summed(declared, limit, waiting))
            for limit in declared
        ]  # fmt: skip

    def finish_many(
        self,
        done: Sequence[Done],
        keep_until: float | None,
        now: float,
        *,
        starting: Sequence[Claim] = (),
    ) -> list[bool]:
        """One statement for jobs outside workflows (sent with ``starting``'s
        mark: one round trip); a job with parents or children ends in a
        transaction that also writes its end to its children
        (``_finish_workflow``)."""
        plain = [d for d in done if not d.claim.parents]
        ended: set[int] = set()
        aftermath = None
        with self._connection() as conn:
            with self._starting(conn, starting, now) as marked:
                if plain:
                    query, values = self._finish_query(plain, keep_until, now, False)
                    ended = {row[0] for row in conn.execute(query, values).fetchall()}
            if len(ended) < len(done):  # parents, children, or stale claims
                rest = [d for d in done if d.claim.id not in ended]
                aftermath = _Aftermath()
                ended |= self._finish_workflow(conn, rest, keep_until, now, aftermath)
            if ended:
                self._settle(conn)
        if aftermath is not None:
            self._told(aftermath)
        self._slots_freed([d.claim for d in done])
        return [d.claim.id in ended for d in done] + marked

    def _finish_query(
        self,
        done: Sequence[Done],
        keep_until: float | None,
        now: float,
        workflow: bool,
    ) -> tuple[bytes, dict[str, Any]]:
        """The statement that ends ``done`` (``workflow``: the variant that
        ends jobs in workflows too), and its values."""
        values: dict[str, Any] = {
            "q": self.queue,
            "now": self._now(now),
            "batch": EXPIRE_BATCH,
            **self._claim_arrays([d.claim for d in done]),
        }
        limited = _limited([d.claim for d in done])
        sql = self._sql
        if keep_until is None:
            queries = (sql.finish, sql.finish_limited, sql.finish_workflow,
                       sql.finish_limited_workflow)  # fmt: skip
        else:
            queries = (sql.complete, sql.complete_limited, sql.complete_workflow,
                       sql.complete_limited_workflow)  # fmt: skip
            values["results"] = [d.result for d in done]
            values["keep_for"] = max(keep_until - now, 0.0)
        return queries[2 * workflow + limited], values

    def _finish_workflow(
        self,
        conn: psycopg.Connection[Any],
        done: Sequence[Done],
        keep_until: float | None,
        now: float,
        aftermath: _Aftermath,
    ) -> set[int]:
        """End jobs that may be in workflows, in one transaction with what
        their ends do to their children (and the deps rows of a child
        finished and not kept); the ids ended."""
        query, values = self._finish_query(done, keep_until, now, True)
        results = {d.claim.id: d.result for d in done}

        def finish() -> set[int]:
            rows = conn.execute(query, values).fetchall()
            if keep_until is None:
                gone = [job_id for job_id, _, parents in rows if parents]
                if gone:
                    conn.execute(self._sql.delete_deps, {"ids": gone})
            ends = [_Ended(job_id, "completed", results[job_id], "")
                    for job_id, children, _ in rows if children]  # fmt: skip
            self._parents_ended(conn, ends, now, aftermath)
            return {row[0] for row in rows}

        return _retried(conn, aftermath, finish)

    def release(self, claims: Sequence[Claim], now: float) -> None:
        """One transaction: a stopping job given back ends cancelled, and
        so do (or not) its children."""
        arrays = self._claim_arrays(claims)
        aftermath = _Aftermath()
        with self._connection() as conn:
            with conn.transaction():
                states = self._give_back(conn, arrays, _limited(claims), now, aftermath)
            self._given_back(conn, states)
        self._told(aftermath)
        self._slots_freed(claims)

    def _give_back(
        self,
        conn: psycopg.Connection[Any],
        arrays: dict[str, list[int]],
        limited: bool,
        now: float,
        aftermath: _Aftermath,
    ) -> list[JobState]:
        """Make claims that never started pending as they were (a stopping
        one cancelled, and what that does to its children), in the caller's
        transaction; the state of each that was current."""
        sql = self._sql
        query = sql.release_limited if limited else sql.release
        rows = conn.execute(query, {"q": self.queue, **arrays}).fetchall()
        ends = [_Ended(job_id, "cancelled", None, _HOW["cancelled"])
                for job_id, state, children in rows
                if children and state == "cancelled"]  # fmt: skip
        self._parents_ended(conn, ends, now, aftermath)
        return [DATABASE_STATES[state] for _, state, _ in rows]

    def _given_back(
        self, conn: psycopg.Connection[Any], states: list[JobState]
    ) -> None:
        """Once claims given back committed: wake ``join`` callers if a
        stopping one ended, and workers here and elsewhere for the others."""
        if JobState.CANCELLED in states:
            self._settle(conn)
        released = states.count(JobState.PENDING)
        self._signal.jobs_added(released)
        self._notify_others(released)

    def _slots_freed(self, claims: Sequence[Claim]) -> None:
        """After claims ended: if one ran under a limit, its slots freed may
        release held jobs, which a claim does: wake one."""
        if self._limited and _limited(claims):
            self._wake_claimers()

    def _wake_claimers(self) -> None:
        self._signal.jobs_added(1)
        self._notify_others(1)

    @staticmethod
    def _claim_arrays(claims: Sequence[Claim]) -> dict[str, list[int]]:
        """Claims as the ``ids`` and ``tokens`` arrays of a statement."""
        return {"ids": [c.id for c in claims], "tokens": [c.token for c in claims]}

    def fail_many(
        self,
        failures: Sequence[Failure],
        now: float,
        *,
        starting: Sequence[Claim] = (),
    ) -> list[JobState | None]:
        """One transaction for the batch, which trims the dead-letter list if a
        job died; a lone retry commits by itself (no BEGIN/COMMIT round trips).
        ``starting`` is marked first, a statement of its own."""
        alone = len(failures) == 1 and failures[0].retry_at is not None
        attempts = [
            _Attempt(claim.id, claim.token, error,
                     None if retry_at is None else max(retry_at - now, 0.0),
                     bool(claim.limits))
            for claim, error, retry_at in failures
        ]  # fmt: skip
        aftermath = _Aftermath()
        states: list[JobState | None] = [None]
        dropped: list[tuple[int, str | None]] = []
        marked: list[bool] = []
        with self._connection() as conn:
            if starting:
                marked = self._mark_started(conn, starting, now)
            if alone:  # a retry: a parent's children go on waiting
                states = [self._fail_one(conn, attempts[0], now, None)]
            if not alone or states[0] is None:  # stopping parent, or stale
                states, dropped = _retried(
                    conn,
                    aftermath,
                    lambda: self._fail_all(conn, attempts, now, aftermath),
                )
            self._after_failures(conn, states, dropped)
        self._told(aftermath)
        self._slots_freed([f.claim for f in failures])
        return states + [JobState.RUNNING if ok else None for ok in marked]

    def _fail_all(
        self,
        conn: psycopg.Connection[Any],
        attempts: Sequence[_Attempt],
        now: float,
        aftermath: _Aftermath,
    ) -> tuple[list[JobState | None], list[tuple[int, str | None]]]:
        """Record failed attempts, then what the ends of parents among them
        do to their children, then trim the dead letters if one died: the
        state each job is in now (``None``: a stale claim), and the dead
        jobs the trim dropped. In the caller's transaction."""
        ends: list[_Ended] = []
        states = [self._fail_one(conn, attempt, now, ends) for attempt in attempts]
        self._parents_ended(conn, ends, now, aftermath)
        if JobState.DEAD not in states:
            return states, []
        return states, self._trim_dead(conn, now, aftermath)

    def _fail_one(
        self,
        conn: psycopg.Connection[Any],
        attempt: _Attempt,
        now: float,
        ends: list[_Ended] | None,
    ) -> JobState | None:
        """Record one failed attempt. ``ends`` ``None``: the plain statement,
        which leaves a parent that ends alone (``None``, as a stale claim);
        else any job, a parent's end added to ``ends``."""
        job_id, token, error, retry_in, limited = attempt
        values = self._fail_params(job_id, token, error, retry_in, now)
        sql = self._sql
        if ends is None:
            query = sql.fail_limited if limited else sql.fail
        else:
            query = sql.fail_limited_workflow if limited else sql.fail_workflow
        row = conn.execute(query, values).fetchone()
        if row is None:
            return None
        state = DATABASE_STATES[row[0]]
        if ends is not None and row[1] and state in (JobState.DEAD, JobState.CANCELLED):
            end: ParentEnd = "dead" if state is JobState.DEAD else "cancelled"
            ends.append(_Ended(job_id, end, None, _HOW[end]))
        return state

    def _after_failures(
        self,
        conn: psycopg.Connection[Any],
        states: list[JobState | None],
        dropped: list[tuple[int, str | None]],
    ) -> None:
        """Once failures committed: wake ``join`` callers if a job ended,
        workers here and elsewhere for the retries due, and log the trim."""
        if JobState.DEAD in states or JobState.CANCELLED in states:
            self._settle(conn)
        self._log_dropped(dropped)
        retried = states.count(JobState.PENDING)
        if retried:
            self._signal.jobs_added(retried)
            self._notify_others(retried)

    def _fail_params(
        self,
        job_id: int,
        token: int,
        error: AttemptError,
        retry_in: float | None,
        now: float,
    ) -> dict[str, Any]:
        return {
            "q": self.queue,
            "now": self._now(now),
            "id": job_id,
            "token": token,
            "retry_in": retry_in,
            "burials": self._sql.names["burials_name"],
            "last_error": describe_error(error),
            "kept": ERRORS_KEPT,
            "etype": error.type,
            "emessage": error.message,
            "etraceback": error.traceback,
            "error_in": error.at - now,
        }

    def start(self, claims: Sequence[Claim], now: float) -> list[bool]:
        if not claims:
            return []
        with self._connection() as conn:
            return self._mark_started(conn, claims, now)

    @contextlib.contextmanager
    def _starting(
        self, conn: psycopg.Connection[Any], claims: Sequence[Claim], now: float
    ) -> Iterator[list[bool]]:
        """Mark ``claims`` started with the statements of the block, in one
        pipeline (one round trip); the block alone when there are none.
        Yields the list that says, once the block is over, which were."""
        marked: list[bool] = []
        if not claims:
            yield marked
            return
        with conn.pipeline():
            cursor = self._send_start(conn, claims, now)
            yield marked
        marked += self._marked(claims, cursor)

    def _mark_started(
        self, conn: psycopg.Connection[Any], claims: Sequence[Claim], now: float
    ) -> list[bool]:
        return self._marked(claims, self._send_start(conn, claims, now))

    def _send_start(
        self, conn: psycopg.Connection[Any], claims: Sequence[Claim], now: float
    ) -> psycopg.Cursor[Any]:
        values = {"q": self.queue, "now": self._now(now), **self._claim_arrays(claims)}
        return conn.execute(self._sql.start, values)

    @staticmethod
    def _marked(claims: Sequence[Claim], cursor: psycopg.Cursor[Any]) -> list[bool]:
        """Which of ``claims`` the start statement behind ``cursor`` marked."""
        ids = {row[0] for row in cursor.fetchall()}
        return [claim.id in ids for claim in claims]

    def renew(self, claims: Sequence[Claim], now: float) -> None:
        if not claims:
            return
        values = {"q": self.queue, "lease": self._lease, **self._claim_arrays(claims)}
        with self._connection() as conn:
            locked = conn.execute(self._sql.renew, values).fetchall()
            for job_id, token in locked:  # by a write in flight: see RENEW
                values |= {"id": job_id, "token": token}
                conn.execute(self._sql.renew_one, values)

    def recover(self, now: float) -> int:
        """Claims whose lease expired (on the database's clock) become failed
        attempts: pending again now, or dead when out of attempts, or
        cancelled when they were stopping (``ended_by_crash``); those taken
        ahead and never started are given back as ``release`` does."""
        sql = self._sql
        with self._connection() as conn:
            if not first(conn.execute(sql.any_expired, {"q": self.queue}).fetchone()):
                return 0
            error = process_died(now)
            aftermath = _Aftermath()
            with conn.transaction():
                rows = conn.execute(sql.expired, {"q": self.queue}).fetchall()
                attempts = [
                    _Attempt(job_id, token, error, _retry_after_crash(*ran), limited)
                    for job_id, token, limited, ahead, *ran in rows
                    if not ahead
                ]
                ahead = [row for row in rows if row[3]]
                states, dropped = self._fail_all(conn, attempts, now, aftermath)
                given: list[JobState] = []
                if ahead:
                    given = self._give_back(conn, {
                        "ids": [row[0] for row in ahead],
                        "tokens": [row[1] for row in ahead],
                    }, any(row[2] for row in ahead), now, aftermath)  # fmt: skip
            self._after_failures(conn, states, dropped)
            if given:
                self._given_back(conn, given)
        self._told(aftermath)
        recovered = [a.id for a, state in zip(attempts, states, strict=True) if state]
        if (recovered or given) and self._limited:
            self._wake_claimers()
        log_recovered(recovered)
        if given:
            logger.info(
                "%d job(s) taken ahead by a process that died or stopped renewing "
                "its lease never started: given back, no attempt counted",
                len(given),
            )
        return len(recovered) + len(given)

    # -- looking and managing --------------------------------------------------------

    def get(self, job_id: int, now: float) -> JobRecord[Any] | None:
        with self._connection() as conn:
            row = conn.execute(
                self._sql.get, {"id": job_id, "q": self.queue, "now": self._now(now)}
            ).fetchone()
        if row is None or row[-1]:  # gone, or kept and expired
            return None
        return _record(row)

    def list_jobs(
        self, state: JobState, limit: int | None = None
    ) -> list[JobRecord[Any]]:
        query = self._sql.lists[state]
        with self._connection() as conn:
            rows = conn.execute(
                query, {"q": self.queue, "limit": limit, "now": None}
            ).fetchall()
        return [_record(row) for row in rows]

    def revive(self, job_id: int, now: float) -> bool:
        import psycopg

        values = {"id": job_id, "q": self.queue, "now": self._now(now)}
        with self._connection() as conn:
            try:
                row = conn.execute(self._sql.revive, values).fetchone()
            except psycopg.errors.UniqueViolation:
                return False  # another job took the key at the same moment
        if row is None:
            return False
        self._signal.jobs_added()
        self._notify_others(1)
        return True

    def delete_dead(self, job_id: int) -> bool:
        """One transaction: the job, its deps rows, and what its deletion
        does to its waiting children (as a cancelled parent's end)."""
        now = self._signal.clock()
        aftermath = _Aftermath()
        with self._connection() as conn:
            with conn.transaction():
                row = conn.execute(
                    self._sql.delete_dead, {"id": job_id, "q": self.queue}
                ).fetchone()
                if row is not None:
                    self._deleted(conn, [row], "was deleted", now, aftermath)
            if aftermath.cancelled:
                self._settle(conn)
        self._told(aftermath)
        return row is not None

    def _deleted(
        self,
        conn: psycopg.Connection[Any],
        rows: Sequence[Sequence[Any]],
        how: str,
        now: float,
        aftermath: _Aftermath,
    ) -> None:
        """Dead jobs deleted (rows: id, ..., has children, has parents, last):
        their deps rows go, and their waiting children take it as a
        cancelled parent's end, ``parent_ended(id, how)``."""
        gone = [row[0] for row in rows if row[-1]]
        if gone:
            conn.execute(self._sql.delete_deps, {"ids": gone})
        ends = [_Ended(row[0], "cancelled", None, how) for row in rows if row[-2]]
        self._parents_ended(conn, ends, now, aftermath)

    def cancel(
        self, job_id: int, now: float, *, by: str, keep_until: float
    ) -> CancelOutcome | None:
        """One statement (``statements.CANCEL``), which also purges expired
        kept jobs, as finishing does."""
        values = {
            "id": job_id, "q": self.queue, "now": self._now(now), "by": by,
            "keep_for": max(keep_until - now, 0.0), "batch": EXPIRE_BATCH,
        }  # fmt: skip
        aftermath = _Aftermath()
        with self._connection() as conn:
            with conn.transaction():
                row = conn.execute(self._sql.cancel, values).fetchone()
                if row is not None and row[0] == "cancelled" and row[1]:
                    end = _Ended(job_id, "cancelled", None, _HOW["cancelled"])
                    self._parents_ended(conn, [end], now, aftermath)
            if row is None:
                return None
            if row[0] == "running":
                return "stopping"
            self._settle(conn)
        self._told(aftermath)
        return "cancelled"

    def stops_requested(self, claims: Sequence[Claim]) -> list[int]:
        """One read of the claims' rows by primary key."""
        if not claims:
            return []
        values = {"q": self.queue, **self._claim_arrays(claims)}
        with self._connection() as conn:
            rows = conn.execute(self._sql.stops_requested, values).fetchall()
        return [job_id for (job_id,) in rows]

    def stats(self) -> StoreStats:
        params = {"q": self.queue, "now": self._now(self._signal.clock())}
        with self._serial_reads() as conn:
            counts = dict(conn.execute(self._sql.counts, params).fetchall())
            due = first(conn.execute(self._sql.due_scheduled, params).fetchone())
            expired = first(
                conn.execute(self._sql.expired_completed, params).fetchone()
            )
            expired_cancelled = first(
                conn.execute(self._sql.expired_cancelled, params).fetchone()
            )
            retrying = first(conn.execute(self._sql.retrying, params).fetchone())
        return StoreStats(
            int(
                counts.get("scheduled", 0)
                + counts.get("ready", 0)
                + counts.get("held", 0)
            ),
            int(counts.get("running", 0)),
            int(counts.get("dead", 0)),
            int(counts.get("scheduled", 0) - due),
            int(counts.get("completed", 0) - expired),
            int(counts.get("cancelled", 0) - expired_cancelled),
            int(counts.get("waiting", 0)),
            int(retrying),
        )

    def finished_per_minute(self, since: float, now: float) -> list[FinishedMinute]:
        """Jobs finished per minute (see ``jobq.stores.base``): one count
        over each minute's range of the ``jobs_finished`` index."""
        params = {"q": self.queue, "since": since, "now": self._now(now)}
        with self._serial_reads() as conn:
            rows = conn.execute(self._sql.finished_per_minute, params).fetchall()
        return [
            FinishedMinute(float(m), int(completed), int(died))
            for m, completed, died in rows
        ]

    # -- activity (see "Activity" in ``jobq.stores.base``) -----------------------------
    # Rows on the beats' clock (``now`` as given, whatever ``clock`` says):
    # a process's ``seen`` is its own clock's, and so is every reader's now.

    def beat(self, beat: Beat, now: float) -> None:
        """One transaction: its statements lock rows in one order whoever
        beats (see ``statements.PUT_PROCESS``), so beats never deadlock."""
        sql = self._sql
        queue = {"q": self.queue}
        with self._connection() as conn, conn.transaction():
            if beat.process is not None:
                row = process_params(beat.process, beat.gone_after)
                conn.execute(sql.put_process, {**queue, **row})
            if beat.outcomes:
                conn.execute(
                    sql.add_outcomes, {**queue, **outcome_arrays(beat.outcomes)}
                )
            if beat.sample is not None:
                conn.execute(sql.add_sample, {**queue, **beat.sample._asdict()})
            conn.execute(sql.drop_old_activity, {**queue, **drop_params(now)})

    def leave(self, process_id: str) -> None:
        with self._connection() as conn:
            conn.execute(self._sql.leave, {"q": self.queue, "id": storable(process_id)})

    def processes(self, now: float) -> list[ProcessInfo]:
        """One range of the processes' key (this queue's rows)."""
        with self._connection() as conn:
            rows = conn.execute(
                self._sql.processes, {"q": self.queue, "now": now}
            ).fetchall()
        return [process_from_row(row) for row in rows]

    def outcomes(self, since: float, now: float) -> list[TaskOutcomes]:
        """One range of the outcomes' key: the minutes asked for."""
        with self._connection() as conn:
            rows = conn.execute(
                self._sql.outcomes, self._minutes(since, now)
            ).fetchall()
        return [outcome_from_row(row) for row in rows]

    def minute_outcomes(self, since: float, now: float) -> list[MinuteOutcomes]:
        """One range of the outcomes' key, summed per minute by the server."""
        with self._connection() as conn:
            rows = conn.execute(
                self._sql.minute_outcomes, self._minutes(since, now)
            ).fetchall()
        return [MinuteOutcomes(*row) for row in rows]

    def samples(self, since: float, now: float) -> list[DepthSample]:
        """One range of the samples' key: the minutes asked for."""
        with self._connection() as conn:
            rows = conn.execute(self._sql.samples, self._minutes(since, now)).fetchall()
        return [DepthSample(*row) for row in rows]

    def _minutes(self, since: float, now: float) -> dict[str, Any]:
        """A read's range: the minutes of ``since`` to ``now``, this queue's."""
        return {"q": self.queue, **minutes_params(since, now)}

    def page_jobs(self, query: JobQuery, now: float) -> JobPage:
        """A page of a list (see ``jobq.stores.pages``): one statement over
        the list's index, reading that page's rows."""
        start = DATABASE_FIRST[query.view]
        cursor = read_cursor(query.after, len(start), int64=True) or start
        params: dict[str, object] = {
            "q": self.queue, "now": self._now(now), "limit": query.limit + 1,
            "task": query.task, "key": query.key, "error": query.error,
        }  # fmt: skip
        params.update((f"c{i}", value) for i, value in enumerate(cursor))
        with self._serial_reads() as conn:
            rows = conn.execute(self._sql.pages[query.view], params).fetchall()
        page = database_page(
            rows, query.limit, RECORD_WIDTH, lambda errors: errors,
            cancels_at=CANCELS_AT,
        )  # fmt: skip
        jobs = [
            _with_limits(job, row) for job, row in zip(page.jobs, rows, strict=False)
        ]
        return JobPage(jobs, page.after)

    def next_due(self) -> float | None:
        """When the earliest pending job falls due, on the queue's clock.

        With the database's clock, that is the database's "how long from now"
        added to the queue's clock as the last ``claim`` saw it (workers ask
        right after a claim found nothing), so a queue whose clock is off
        neither spins nor oversleeps."""
        with self._connection() as conn:
            row = conn.execute(
                self._sql.next_due, {"q": self.queue, "now": None}
            ).fetchone()
        assert row is not None  # noqa: S101 - a SELECT without FROM has one row
        ready, scheduled, db_now, rate_at = row
        due = ready if ready is not None else scheduled
        if rate_at is not None:  # a rate that will release a held job
            due = rate_at if due is None else min(due, rate_at)
        if due is None:
            return None
        if self.clock == "queue":
            return float(due)
        # Not clamped at now: an overdue job's time tells how long it waited.
        return time.time() + self._offset + float(due) - float(db_now)

    # -- inside transactions: settling, burial --------------------------------------

    def _settle(self, conn: psycopg.Connection[Any]) -> None:
        """Wake ``join`` callers of this process if nothing is pending or
        running any more (asked only when someone joins)."""
        from psycopg.pq import TransactionStatus

        signal = self._signal
        if not signal.joiners:
            return
        if conn.info.transaction_status != TransactionStatus.IDLE:
            return  # inside a transaction: not yet
        live = first(conn.execute(self._sql.live, {"q": self.queue}).fetchone())
        if not live:
            signal.job_settled()

    def _trim_dead(
        self, conn: psycopg.Connection[Any], now: float, aftermath: _Aftermath
    ) -> list[tuple[int, str | None]]:
        """Drop the oldest dead jobs beyond the limit (their waiting children
        take it as a cancelled parent's end); returns them to log.

        In the transaction that buried, after its burials: the lock makes
        concurrent trims of the queue count one after the other, each seeing
        the burials committed before it (see ``statements.LOCK_DEAD``)."""
        conn.execute(self._sql.lock_dead, {"lock": self._dead_lock_key})
        rows = conn.execute(
            self._sql.trim_dead, {"q": self.queue, "limit": self._dead_letter_limit}
        ).fetchall()
        rows.sort(key=lambda r: r[1])
        self._deleted(
            conn, rows, "was dropped from the dead-letter list", now, aftermath
        )
        return [(row[0], row[2]) for row in rows]

    # -- workflows: a parent's end, in its transaction --------------------------------

    def _parents_ended(
        self,
        conn: psycopg.Connection[Any],
        ends: Sequence[_Ended],
        now: float,
        aftermath: _Aftermath,
    ) -> None:
        """Write what parents' ends do to their waiting children (see
        ``jobq.stores.base``, "Workflows"): slots set and children released,
        or children cancelled, and then their children, level by level. In
        the transaction that ended the parents, after it locked them: each
        statement here sees every child added before (its own snapshot)."""
        sql = self._sql
        while ends:
            by_id = {end.id: end for end in ends}
            rows = conn.execute(sql.waiting_children, {"parents": list(by_id)})
            slots: list[tuple[int, int, str, str | None]] = []
            cancels: dict[int, str] = {}
            for child, position, parent, after_failure in rows.fetchall():
                end = by_id[parent]
                fate = child_fate(after_failure, end.end)
                if fate == "finished":
                    result = end.result if end.end == "completed" else None
                    slots.append((child, position, end.end, result))
                elif fate == "cancel":
                    cancels.setdefault(child, parent_ended(parent, end.how))
            slots = [slot for slot in slots if slot[0] not in cancels]
            if slots:
                columns = [list(column) for column in zip(*slots, strict=True)]
                released = conn.execute(sql.set_slots, {
                    "now": self._now(now),
                    **dict(zip(("children", "positions", "outcomes", "results"),
                               columns, strict=True)),
                }).fetchall()  # fmt: skip
                aftermath.released += [(i, task) for i, task, done in released if done]
            ends = []
            if cancels:
                cancelled = conn.execute(sql.cancel_children, {
                    "now": self._now(now), "ids": list(cancels),
                    "by": list(cancels.values()),
                    "keep_for": self._signal.keep_cancelled,
                }).fetchall()  # fmt: skip
                aftermath.cancelled += len(cancelled)
                ends = [_Ended(child, "cancelled", None, _HOW["cancelled"])
                        for child, children in cancelled if children]  # fmt: skip

    def _told(self, aftermath: _Aftermath) -> None:
        """Once the transaction committed: wake workers here and elsewhere
        for the released children, and tell the queue of them."""
        released = aftermath.released
        if released:
            self._signal.jobs_added(len(released))
            self._notify_others(len(released))
            self._signal.jobs_released(released)

    def _log_dropped(self, dropped: list[tuple[int, str | None]]) -> None:
        for job_id, last_error in dropped:
            log_dropped_dead(self._dead_letter_limit, job_id, last_error)

    def _now(self, now: float) -> float | None:
        """The ``now`` parameter: the queue's clock, or NULL for the database's."""
        return now if self.clock == "queue" else None

    @contextlib.contextmanager
    def _serial_reads(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection in a transaction without parallel workers, for reads
        that compare ``run_at`` with now: the planner takes "due scheduled
        jobs" for most of them (every run_at in the table is compared, not
        those of scheduled jobs), and starting workers for the handful there
        are costs ten times the query (stats, page_jobs)."""
        with self._connection() as conn, conn.transaction():
            conn.execute(self._sql.serial)
            yield conn

    # -- connections and wake-ups ----------------------------------------------------

    def _connection(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        """A connection from this process's pool for one call, returned at once
        (``Database.borrow``)."""
        self._check_process()
        pool = self._pool
        if pool is None and self._unpooled:
            return self._db.direct()
        if pool is None:
            raise StoreError(
                f"{self.where}: the store is not open (closed, or inherited "
                "through fork: open it again)"
            )
        return self._db.borrow(pool)

    def _notify_others(self, count: int) -> None:
        """Tell the listeners of other processes (and other stores of this one)
        that this queue has ``count`` new claimable jobs, soon after this
        change committed."""
        notifier = self._notifier
        if notifier is not None:
            notifier.request(count)
