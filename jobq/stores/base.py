"""The store contract: everything the queue asks of the place where jobs live.

The queue never touches job state itself; it asks its store, through the
``Store`` protocol below, and every store (memory, JSON file, SQLite,
PostgreSQL, or one of yours) passes the same behavioural suite,
``jobq.testing.StoreContractTests``.

What the queue does before a store sees anything: it checks every argument
(``jobq._rules``: keys, task names, priorities, ids, limits), encodes payloads
as JSON text and makes error text storable. So a store receives only values
it can hold, and holds exactly what it was given: payloads and results cross
this boundary as JSON text, and no caller can change a stored job through a
shared object.

Threads and locks: the queue takes no lock of its own around store calls.
Any method may be called from any thread, several at once (workers, the
watchdog, the application's threads); each must be atomic on its own. The
memory and JSON stores guard their state with the queue's lock
(``Signal.lock``, given to ``open``); the database stores use transactions.

Wake-ups: the queue's idle workers sleep on ``Signal`` until a store says a
job became claimable (``Signal.jobs_added``: a due job added, a retry due
now, a claim released, a dead job revived, a claim recovered, or a job
another process added, where the store can tell) or the next due time
comes (``next_due``, read before they sleep: so a delayed job added due
before the earliest one wakes a worker too, or it may run up to a second
late). ``join`` callers sleep until a store says a job left the pending or
running state (``Signal.job_settled``). A store that cannot tell about other
processes is still correct: workers look at least once a second.

Fork: a store object inherited by a forked child must not use the parent's
threads, locks, files or connections (``os.register_at_fork``; the built-in
stores register with ``jobq._fork``): it reopens on next use.

Recovery: a claim whose process died (or whose lease ran out) becomes a
failed attempt with the ``process_died`` error: pending again at once, or
dead if that was its last attempt (``retries_after_crash``), or
``cancelled`` if it was stopping (``ended_by_crash``). A store whose
claims live as long as its process does this when it is opened; one with
leases, also in ``recover``. A store shared between processes should keep
its leases on a clock they all share (the database server's, the host's),
not on the ``now`` it is given, and say so (``Capabilities.
own_clock_leases``): a process whose queue has a clock of its own then
never takes another's live claim for expired, nor has its own taken.

Attempt times: a store keeps, with each job, when its last attempt started
and finished (``JobRecord.started_at``, ``finished_at``, on the store's
``now``). A claim sets ``started_at`` to its ``now`` (a job taken ahead:
``None`` until marked started, see "Taking jobs ahead") and ``finished_at``
to ``None``, in the write that claims; the write that records the attempt's
outcome sets ``finished_at`` to its ``now``: a kept success, a retry, a
burial, and the failure that recovery records for a dead process's claim
(the recovery's ``now``). A released claim never started, so both are
``None`` again. Revive keeps them: they describe the last attempt.

Job fields carried unchanged: ``timeout`` and ``meta`` (JSON object text of
string headers; ``None`` means none) are stored as ``add`` receives them,
handed back in each ``Claim`` and shown in each ``JobRecord`` (``meta``
decoded), through retries, revive and restarts.

Capabilities: what a store can do beyond the required members, its class
declares once, ``capabilities = Capabilities(pages=True, ...)``. Each flag
promises the members of the protocol beside it (``PageStore``,
``ScheduleStore``, ...; ``missing_members`` holds a store to that), and the
queue and the tools that manage a queue from outside (``jobq.admin``) ask
the flags (``capabilities_of``), never the members. A store whose class
declares none (written before them) can do what it has the members of:
pages, finished counts, schedules, a schema; none of the others. A store
may also say where it keeps its jobs, for people: ``location``, a string
(``location_of``; its class's name where it says nothing).

Pages (optional, ``Capabilities.pages``): a store may also answer
``page_jobs(query, now) -> JobPage`` (``jobq.stores.pages``), one keyset
page of a job list with filters, reading only that page (O(page) with an
index on the database stores). The dashboard and ``JobQueue.browse`` use it
where the store can, and ``page_from_list`` (the whole of ``list_jobs``)
where not, so a store written before keeps working.

Finished per minute (optional, ``Capabilities.finished_counts``): a store
shared between processes may also
answer ``finished_per_minute(since, now) -> list[FinishedMinute]``: for the
minutes from ``since`` (a multiple of 60) to ``now``'s, oldest first (those
in which nothing finished may be left out), how many kept completed jobs
(not expired at ``now``) and dead jobs had their last attempt end
(``finished_at``) then. One read of an index range: the jobs finished since
``since``, so its cost grows with the jobs finished in those minutes, never
with the rest (SQLite and PostgreSQL). The
dashboard shows it beside this process's own events; ``JobQueue.
finished_per_minute`` returns ``None`` for a store without it (memory and
JSON: one process changes their jobs, and its events tell everything).

Dead letters: each burial keeps the newest ``dead_letter_limit`` dead jobs
(given to ``open``), dropping the oldest beyond it and logging each with
``log_dropped_dead``: nothing disappears silently.

Cancelling: ``cancel`` ends a pending job ``cancelled`` at once; a running
one it marks *stopping* (a ``Cancellation`` kept with the job, with the
``keep_until`` its end will keep it until), which frees its key at once and
which the process running it learns of (``stops_requested``, asked by
that process every ``STOP_LOOK`` seconds while it holds claims, where
another process may have asked). A stopping job ends as its claim ends:
``finish_many`` completes it as usual, its cancellation dropped (its
handler returned: its work is done); ``fail_many`` and recovery (its
process died, its lease ran out) end it ``cancelled`` instead of retrying
or burying it, the failed attempt counted and kept in ``errors``; ``release``
ends it ``cancelled`` with no attempt counted (it never started). A
cancelled job is kept until its
``keep_until`` as a completed job is (``get``, ``list_jobs``, ``stats``),
never claimed, revived or counted as pending.

Workflows (``NewJob.after``): a job may be added after others, its
*parents* (ids, in order; the queue checked they are distinct). Each parent
the store holds and has not finished makes the new job ``waiting`` (never
claimed, in no count but ``StoreStats.waiting``); a parent id the store
never gave is a ``ValueError`` (nothing added); a parent it gave but no
longer holds finished and was not kept: completed, its result ``None``. A
child keeps each parent's outcome (``ParentOutcome``: completed with its
result, or failed) with itself, so a parent's result lives as long as its
children need it, whatever becomes of the parent. What a parent's end does
to its waiting children (``child_fate``, by their ``after_failure``) is
written in the write that records that end, so no crash can part them:
completed, each child counts it finished, and the child whose last parent
finished becomes pending, due at its own ``run_at`` or now if later (``Signal.
jobs_released``); dead, a ``"wait"`` child keeps waiting (a revived parent
carries it on), a ``"cancel"`` one ends cancelled, a ``"run"`` one counts
the parent finished, failed; cancelled (or a dead parent deleted, or dropped
beyond the dead-letter cap), ``"wait"`` and ``"cancel"`` children end
cancelled (``Cancellation(now, parent_ended(...), None)``, kept until
``now + Signal.keep_cancelled``), and theirs after them, transitively. A
parent's end costs O(its waiting children) (plus their descendants, when
cancelled); a job without parents or children costs what it did before.

Taking jobs ahead (optional, ``Capabilities.prefetch``: ``PrefetchStore``):
a claim may take more due jobs than there are idle workers, so that fast
handlers cost the store one claim per batch, without weakening what a crash
costs. ``claim_many(now, limit, start=n)`` starts the first ``n`` claims as
usual and takes the others *ahead*: running under the claim's token and
lease (renewed, given back by ``release``, cancelled as running jobs are),
``started_at`` ``None``, not started. Before a worker starts a job taken
ahead, a write marks it started (``start``, or the ``starting`` of the
``finish_many`` or ``fail_many`` that records the worker's last outcome:
no extra round trip), and every worker writes its outcome before it starts
another job. So recovery can tell them apart: a claim taken ahead and never
marked started whose process died (or whose lease ran out) is given back as
``release`` gives it (pending as it was, no attempt counted; ``cancelled``
if it was stopping), and after a crash each worker re-runs at most the one
job it was running. The mark says which claims it marked: only those still
current, their lease not run out, so that a process stopped past its lease
(a VM pause, SIGSTOP) never starts a job that recovery gave back to others.
What it costs: those jobs wait for the lease to run out (``lease_seconds``)
before another process runs them.

Limits (optional, ``Capabilities.limits``: ``LimitStore``): a job may be
added under limits (``NewJob.limits``: concrete names, each falling under a
declared limit, exact or a family's pattern: ``jobq.stores.limits.
governing``). ``claim_many`` claims a due job only when each of its limits
allows it (``jobq.stores.limits``: a concurrency limit while fewer than its
``concurrency`` attempts of its key run, a rate while ``rate_allows``), and
takes a slot of each and a start of each rate (``next_tat``) in the write
that claims. A due job a limit holds back is *held*: pending (counted so by
``stats``), its attempts unchanged, shown with ``JobRecord.held_by`` (the
key), and never looked at again by a claim until released: other due jobs
are claimed in its place. A key releases its held jobs, in their usual
order (priority, due time, id), as it allows them: as many as slots free
up, or as its rate allows (``rate_ready_at``, which ``next_due`` counts).
A slot is freed by the write that ends its claim, whichever (a success, a
failed attempt, a release, a recovery). A job under no limit costs a claim
nothing more.

Activity (optional, ``Capabilities.activity``: ``ActivityStore``): what a
queue did over time and which processes serve it, the same whichever
process asks (``jobq.activity``). A process running workers calls ``beat``
every ``activity.BEAT`` seconds: one write that puts its ``ProcessInfo``
(replacing its earlier one), adds each ``TaskOutcomes`` of its tally to the
row of its minute and task (counts and duration buckets summed), stores its
``DepthSample`` unless a sample of its minute is there already (the first
process's wins), and drops what is older than ``activity.KEPT``
(outcomes, samples) and processes gone for ``activity.GONE_KEPT``. Reads:
``processes(now)`` (``gone`` when ``seen + gone_after`` has passed),
``outcomes(since, now)`` (one row per minute and task, oldest first),
``minute_outcomes(since, now)`` (those summed per minute) and
``samples(since, now)``; each reads the rows of the minutes asked for,
never the jobs. ``leave`` drops a process that stops. A store one process
holds (memory, JSON) keeps them in memory.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    Literal,
    NamedTuple,
    Protocol,
    cast,
    runtime_checkable,
)

from jobq._failures import type_path
from jobq._fork import ForkAware as ForkAware  # public for stores: see Store
from jobq._fork import reset_after_fork as reset_after_fork
from jobq._logs import job_extra
from jobq.activity import (
    Beat,
    DepthSample,
    MinuteOutcomes,
    ProcessInfo,
    TaskOutcomes,
)
from jobq.errors import ProcessDied, QueueFull
from jobq.types import (
    AfterFailure,
    AttemptError,
    Enqueued,
    FinishedMinute,
    JobRecord,
    JobState,
    Limit,
    LimitUsage,
)

if TYPE_CHECKING:
    from jobq.stores.pages import JobPage, JobQuery

logger = logging.getLogger(__name__)

# -- what crosses the boundary -----------------------------------------------------


class NewJob(NamedTuple):
    """A job to add, already checked and encoded by the queue.

    ``run_at`` may be earlier than the ``now`` of ``add`` (jobs prepared
    before they are written, at a commit): such a job is due at once, and
    keeps that ``run_at``. ``timeout`` (seconds) and ``meta`` (a JSON object
    of string headers, as text; ``None``: none) are stored as given.
    """

    payload: str  # JSON text
    run_at: float
    key: str | None
    priority: int
    max_attempts: int
    task: str | None = None
    timeout: float | None = None
    meta: str | None = None  # JSON object text
    limits: tuple[str, ...] = ()  # concrete limit names (see "Limits")
    after: tuple[int, ...] = ()  # parent ids, distinct (see "Workflows")
    after_failure: AfterFailure = "wait"


#: How a parent ended, as its child keeps it: ``"completed"``, or failed:
#: ``"dead"``, ``"cancelled"`` (a dead parent deleted or dropped counts so).
ParentEnd = Literal["completed", "dead", "cancelled"]

#: A parent as its child keeps it: its id, how it ended (``None``: not yet,
#: or dead while the child waits for its revival) and, if it completed, its
#: result as JSON text (``None``: it returned ``None``, or was not kept).
ParentOutcome = tuple[int, ParentEnd | None, str | None]


class Claim(NamedTuple):
    """A running job, fenced by ``token``: only the current claim may end it.

    ``attempt`` is the number of this attempt (failed attempts so far + 1),
    ``run_at`` when the job was due (for how long it waited); ``timeout`` and
    ``meta`` as the job was added with them (defaults, so that a store
    that builds claims positionally without them keeps working).

    (Named tuples here, not dataclasses: these are built once per job on the
    hot path, and a tuple is built several times faster.)
    """

    id: int
    token: int
    payload: str
    attempt: int
    max_attempts: int
    key: str | None
    task: str | None
    run_at: float
    timeout: float | None = None
    meta: str | None = None  # JSON object text
    limits: tuple[str, ...] = ()
    #: Its parents, in ``after`` order, each finished (see "Workflows").
    parents: tuple[ParentOutcome, ...] = ()


class Done(NamedTuple):
    """A claim whose handler returned, and its result as JSON text (or None)."""

    claim: Claim
    result: str | None


#: ``NewJob`` and ``Done`` from a tuple of every field, built in C: a named
#: tuple's ``__new__`` is a Python function, a frame that each enqueue and
#: each job's end would pay.
new_job = cast(
    Callable[
        [
            tuple[str, float, str | None, int, int, str | None, float | None,
                  str | None, tuple[str, ...], tuple[int, ...], AfterFailure]
        ],
        NewJob,
    ],
    functools.partial(tuple.__new__, NewJob),
)  # fmt: skip
new_done = cast(
    Callable[[tuple[Claim, str | None]], Done], functools.partial(tuple.__new__, Done)
)


class Failure(NamedTuple):
    """A claim whose handler failed: the attempt's error, and when the job
    runs again (``None``: it is dead)."""

    claim: Claim
    error: AttemptError
    retry_at: float | None


@dataclass(frozen=True, slots=True)
class StoreStats:
    """The counts a store can answer in O(1) (memory, JSON) or one query.

    ``pending`` counts delayed jobs too; ``delayed`` those of them not due yet;
    ``retrying`` those of the delayed ones with a failed attempt (``attempts``
    > 0: ``jobq.stores.pages.pending_view``), so the never attempted ones are
    ``delayed - retrying``; ``kept`` the completed jobs kept with their
    results whose ``keep_until`` is still ahead, ``cancelled`` the cancelled
    ones likewise (a store written before them reports 0).
    """

    pending: int
    running: int
    dead: int
    delayed: int = 0
    kept: int = 0
    cancelled: int = 0
    waiting: int = 0
    retrying: int = 0


#: What ``Store.cancel`` did: ended a pending job ``"cancelled"``, or asked
#: a running one to stop (``"stopping"``, also when it had been asked before).
CancelOutcome = Literal["cancelled", "stopping"]

#: How often (seconds) a process holding claims on a store shared between
#: processes asks it which of them another process asked to stop
#: (``stops_requested``): the longest a request waits to reach the handler.
STOP_LOOK = 0.25


class Signal:
    """Wakes this process's idle workers and ``join`` callers.

    Two conditions share one lock so that a new job wakes a worker, never a
    ``join`` caller, and a finished job wakes ``join`` callers, never a worker.
    ``generation`` grows with every new claimable job, so a worker that found
    nothing can tell whether something arrived before it went to sleep.
    ``clock`` is the queue's clock, for a store that needs the time outside a
    call that passes ``now`` (recovering a dead process's claims at ``open``).
    ``keep_cancelled``: the queue's, for the children a store cancels itself
    (a workflow's, see "Workflows"); ``on_release``: told of the waiting
    jobs a store made pending (``jobs_released``).
    """

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self.clock: Callable[[], float] = clock or (lambda: time.time())
        self.keep_cancelled = 86400.0
        self.on_release: Callable[[Sequence[tuple[int, str | None]]], object] | None
        self.on_release = None
        self.lock = threading.RLock()
        self.work = threading.Condition(self.lock)
        self.settled = threading.Condition(self.lock)
        self.generation = 0
        self.idle_workers = 0
        self.joiners = 0

    def jobs_added_locked(self, count: int = 1) -> None:
        """New claimable jobs exist; call with ``lock`` held."""
        self.generation += 1
        if self.idle_workers:
            self.work.notify(count)

    def jobs_added(self, count: int = 1) -> None:
        """As ``jobs_added_locked``, for stores that do not hold ``lock``."""
        with self.lock:
            self.jobs_added_locked(count)

    def jobs_released(self, jobs: Sequence[tuple[int, str | None]]) -> None:
        """Waiting jobs (id, task) became pending: their last parent
        finished. Call once the write that released them holds, outside a
        transaction (``jobs_added`` wakes the workers for them as for any
        new job)."""
        if jobs and self.on_release is not None:
            self.on_release(jobs)

    def job_settled_locked(self) -> None:
        """A job left the pending or running state; call with ``lock`` held."""
        if self.joiners:
            self.settled.notify_all()

    def job_settled(self) -> None:
        """As ``job_settled_locked``, for stores that do not hold ``lock``."""
        with self.lock:
            self.job_settled_locked()


# -- the protocol ---------------------------------------------------------------------


@runtime_checkable
class Store(Protocol):
    """Where jobs live. Every method is thread-safe (see the module).

    ``now`` arguments are the queue's clock (epoch seconds); a store with a
    clock of its own (a database server) may use that instead, consistently,
    and a store with leases should give and judge them on a clock every
    process shares (``Capabilities.own_clock_leases``).
    Methods that end a claim take the ``Claim`` and change nothing (returning
    ``False``) when its token is no longer current: a handler that outlived
    its claim cannot end a job another worker runs now.

    Errors: any method may raise ``StoreError`` (``jobq.errors``) when what
    holds the jobs fails it (a file, a disk, a database), naming the problem,
    its driver's errors wrapped; ``add`` also raises ``QueueFull``. The queue
    raises it to the caller of the ``JobQueue`` method that made the call
    (``open`` at first use, ``add``, the reads, ``revive``, ``delete_dead``,
    ``cancel``, ``save``, ``close``, and ``run_pending``'s claims). Its
    workers and watchdog log it and go on: ``claim_many``, ``next_due``,
    ``renew``, ``recover`` and the schedule calls are tried again shortly;
    a failed ``finish_many``, ``fail_many`` or ``release`` leaves its claims
    running, so those jobs run again once recovered (at least once).

    Fork: in a forked child the queue opens its store again (a new
    ``Signal``) before it uses it. A store that holds threads, locks, files
    or connections calls ``reset_after_fork(self)`` (this module) when it is
    built and defines ``_after_fork_in_child(self)`` (``ForkAware``), which
    runs in every child forked later, where only the forking thread lives:
    it forgets the parent's threads, locks, files and connections without
    closing, unlocking or writing them (the parent still uses them), so that
    the store makes its own on next use. The registration holds it weakly.

    Helpers (this module), for the rules every store applies the same way:
    ``check_room`` (``max_pending``), ``describe_error`` (``last_error``),
    ``add_error`` and ``ERRORS_KEPT`` (``errors``), ``process_died``,
    ``retries_after_crash`` and ``log_recovered`` (a dead process's claims),
    ``log_dropped_dead`` (the dead-letter cap), ``slot_taken``,
    ``overlapping_job``, ``paused``, ``resumed`` and ``run_by_hand`` (the
    schedules), ``reset_after_fork`` (fork),
    ``missing_members`` and ``missing_schedule_members`` (what a store lacks).
    ``jobq.testing.StoreContractTests`` checks a store against all of this.
    """

    # -- what the store declares (class attributes are enough) --

    #: Seconds a claim lasts without renewal; ``None`` where claims live as
    #: long as this process (memory, JSON), so no renewal is needed. With a
    #: lease, the queue's watchdog calls ``renew`` every third of it.
    lease_seconds: float | None

    #: How many due jobs a worker may take with one ``claim_many`` while its
    #: handlers are fast (about 2 ms of work at a time). More is faster: one
    #: write for several jobs. A store that takes jobs ahead
    #: (``Capabilities.prefetch``, PostgreSQL: 16) keeps the crash promise
    #: with any batch: its workers write each outcome before they start
    #: another job, and a job taken ahead that never started is given back
    #: by recovery with no attempt counted. The other persistent stores
    #: default to 1, because there a worker writes a batch's outcomes
    #: together: after a crash every job it held runs again, and those it
    #: had not started yet count a failed attempt too.
    claim_batch: int

    #: Several processes may run and change the jobs at once (SQLite,
    #: PostgreSQL). ``False``: one process does (memory; JSON, whose other
    #: processes may only read).
    shared_between_processes: bool

    #: Jobs, kept completed ones and their results included, can be read back
    #: later and from other processes (``False`` for memory only).
    keeps_results: bool

    #: ``add`` takes ``connection=``: the caller's database connection, whose
    #: current transaction the jobs are then written in, so they exist if,
    #: and only if, it commits (PostgreSQL). The queue passes it only then.
    transactional_add: bool

    # -- lifecycle --

    def open(self, signal: Signal, *, dead_letter_limit: int) -> None:
        """Acquire files, locks or connections, and recover the claims of a
        process that died (at the time ``signal.clock()`` gives); idempotent:
        a second call does not take this process's own claims for a dead one's.

        A claim made through this store object is this process's own; any
        other is a dead process's only where the store can tell, never on a
        guess. A store whose place has one owner at a time and whose claims
        live as long as their process (memory, JSON) takes every job it
        finds running when it first opens the place as a dead process's: a
        new store object over the place is a restart. A store shared between
        processes keeps an owner with each claim (SQLite: host, pid and a
        nonce per process; recovered here once that process is gone) or leaves
        its claims to their leases and ``recover`` (PostgreSQL).

        Called by the queue on its first use, never at construction, with
        the ``Signal`` to wake its workers and the dead-letter cap to keep.
        """

    def close(self) -> None:
        """Save what is unsaved and release everything ``open`` took; idempotent.
        Called once the queue's workers stopped or their wait timed out: a
        thread may still be inside a call (a handler that outlived
        ``close(timeout)``), or call later. Such a call returns as it would
        have or raises ``StoreError``; nothing is released under a thread
        that is inside a call (a connection, a file descriptor)."""

    def save(self) -> None:
        """Make everything durable now; raise ``StoreError`` if it cannot."""

    # -- the job's path --

    def add(
        self, jobs: Sequence[NewJob], now: float, *, max_pending: int | None = None
    ) -> list[Enqueued]:
        """Add jobs in one write, all or none; their ids, in order.

        Each new job is pending with no attempts, ``created_at`` = ``now``,
        no ``started_at`` or ``finished_at``, and its ``timeout`` and ``meta``.
        Ids are positive (below 2**63) and only grow: an id is never given
        again, even after its job is gone or the store was reopened.

        A key held by a pending or running job (not a stopping one: see
        ``cancel``), or by an earlier job of the same batch, yields that
        job's id as a duplicate, adding nothing. With
        ``max_pending``, raise ``QueueFull`` and add nothing if the new jobs
        (duplicates do not count) would make more than that many pending
        (``check_room``); exact within a process, approximate across
        processes. Wakes idle workers for the jobs that are due (see the
        module for a delayed one).
        """

    def claim_many(self, now: float, limit: int) -> list[Claim]:
        """Take up to ``limit`` due jobs (``run_at <= now``) in one write, in
        run order (highest priority, earliest due, lowest id), marking each
        running under a token no earlier claim of that job had, with
        ``started_at`` = ``now`` and ``finished_at`` = ``None`` (see the
        module); an empty list if none is due."""

    def finish_many(
        self, done: Sequence[Done], keep_until: float | None, now: float
    ) -> list[bool]:
        """Record successes in one write. ``keep_until`` ``None`` (the
        queue's ``keep_completed`` is 0, its default): delete each job, its
        result with it. Otherwise keep it ``completed`` with its ``result``
        until ``keep_until`` (on the clock of ``now``) and ``finished_at`` =
        ``now``. Either way its key is free again.
        Whether each was recorded (``False`` for a claim no longer current).
        Wakes ``join`` callers (``Signal.job_settled``: they look themselves
        whether anything is left)."""

    def fail_many(
        self, failures: Sequence[Failure], now: float
    ) -> list[JobState | None]:
        """Record failed attempts in one write: each job pending again at its
        ``retry_at`` (waking workers if that is due), or dead when
        ``retry_at`` is ``None`` (freeing its key and keeping the dead-letter
        cap, and waking ``join`` callers), or ``cancelled`` whatever its
        ``retry_at`` if it was stopping (see the module; waking ``join``
        callers). ``attempts`` grows by one,
        ``last_error`` (``describe_error``) and ``errors`` (the newest
        ``ERRORS_KEPT``, oldest first: ``add_error``) take the error, and
        ``finished_at`` = ``now``.
        The state each job is in now (``PENDING``, ``DEAD`` or
        ``CANCELLED``), ``None`` for a claim no longer current (nothing
        recorded)."""

    def release(self, claims: Sequence[Claim], now: float) -> None:
        """Give back claims whose jobs did not start: pending again as they
        were (same ``run_at``), no attempt counted, ``started_at`` and
        ``finished_at`` ``None``, waking workers (workers
        that claimed several jobs at once, stopping before they ran them
        all). Claims no longer current are skipped."""

    def renew(self, claims: Sequence[Claim], now: float) -> None:
        """Extend the lease of running claims (a no-op without leases): by
        ``lease_seconds`` from ``now``, or from the store's own clock where
        it declares ``own_clock_leases``."""

    def recover(self, now: float) -> int:
        """Turn expired claims into failed attempts at ``now`` (see the
        module); how many were recovered. A no-op without leases. Expired at
        ``now``, or by the store's own clock where it declares
        ``own_clock_leases``."""

    # -- looking and managing --

    def get(self, job_id: int, now: float) -> JobRecord[Any] | None:
        """The job in any state, or ``None`` (completed and cancelled jobs
        are gone once ``now`` reaches their ``keep_until``). Its payload and result are
        decoded from their JSON text, new objects for each call; a claimed job
        shows as ``running``, with the ``attempts`` that failed so far."""

    def list_jobs(
        self, state: JobState, limit: int | None = None
    ) -> list[JobRecord[Any]]:
        """Jobs in one state, as ``get`` shows them, up to ``limit`` (``None``:
        all): dead ones oldest-buried first; the others by due time (earliest
        ``run_at``, then highest priority, then lowest id), which for pending
        jobs is not the run order.

        It is given no ``now`` and expires kept jobs by no clock: completed
        and cancelled ones past their ``keep_until`` are listed until the
        store purges them (the built-in stores do as ``finish_many`` records
        later successes, and as ``cancel`` cancels).
        A caller that wants only live ones asks ``get(id, now)`` of each, as
        ``jobq.stores.pages.page_from_list`` does."""

    def revive(self, job_id: int, now: float) -> bool:
        """Make a dead job pending now (``run_at`` = ``now``) with no
        attempts, keeping its ``last_error``, ``errors``, ``started_at`` and
        ``finished_at`` and taking its key
        back; waking workers. ``False`` if it is not dead or its key is held
        by another pending or running job."""

    def delete_dead(self, job_id: int) -> bool:
        """Remove a dead job; ``False`` if it is not dead."""

    def cancel(
        self, job_id: int, now: float, *, by: str, keep_until: float
    ) -> CancelOutcome | None:
        """Cancel a job (see "Cancelling" in the module), in one write.

        A pending job (delayed or not) becomes ``cancelled`` now, kept until
        ``keep_until``, with ``Cancellation(now, by, None)``; its key is free
        and ``join`` callers are woken: ``"cancelled"``. A running one keeps
        running with ``Cancellation(now, by, attempt)`` (the attempt it
        runs) and ``keep_until`` for its end, and its key is free:
        ``"stopping"`` (a second request changes nothing and says
        ``"stopping"`` too). ``None`` for any other job (completed, dead,
        cancelled, unknown)."""

    def stops_requested(self, claims: Sequence[Claim]) -> list[int]:
        """The ids of the jobs of ``claims`` (current ones only) that were
        asked to stop: one read, asked every ``STOP_LOOK`` seconds by a
        process that holds claims, only where ``shared_between_processes``
        (in one process the queue tells its workers itself)."""

    def stats(self) -> StoreStats:
        """Pending (delayed included), running and dead counts (completed
        and cancelled jobs are in none), how many pending jobs are not due
        yet and how many of those had a failed attempt (retrying), and how
        many completed and cancelled jobs are kept, expired ones not counted
        even while not purged yet, all at the clock ``open`` was given
        (``Signal.clock``)."""

    def next_due(self) -> float | None:
        """When the earliest pending job becomes due; ``None`` if none is pending."""


class SlotState(NamedTuple):
    """What a store keeps per schedule (periodic job): the expression its
    last slot was enqueued under, that slot (epoch seconds), and the job it
    enqueued (``None``: none yet, or gone from an older store); the latest
    job run by hand (``enqueue_now``) takes ``last_job_id`` too.

    ``paused_at`` and ``paused_by``: when and by whom it was paused
    (``None``: it runs); ``resumed_at``: when it was last resumed, kept
    until a later slot is taken, since each slot at or before it was passed
    over. A schedule paused (or run by hand) before any slot of it was
    taken has ``expression`` ``""`` and ``last_slot`` ``NO_SLOT``: every
    process starts it as a new schedule.
    """

    name: str
    expression: str
    last_slot: float
    last_job_id: int | None
    paused_at: float | None = None
    paused_by: str | None = None
    resumed_at: float | None = None


#: The ``last_slot`` of a schedule no slot of which was taken yet: before
#: every slot.
NO_SLOT = -math.inf


@runtime_checkable
class ScheduleStore(Protocol):
    """What a store needs for ``@queue.periodic``, beyond ``Store``.

    Optional: a store without these members runs everything else, and
    ``periodic`` refuses it by name (``missing_schedule_members``). Each
    slot of a schedule is enqueued once by whichever process asks first:
    ``enqueue_slot`` is one write, all or nothing, so a crash inside it
    leaves neither the job nor the slot taken.

    Pausing is stored with the schedule (``pause_schedule``), so every
    process obeys it, those that looked at the schedule before included:
    ``enqueue_slot`` refuses a paused schedule's slot in the write that
    would take it. A slot that falls while paused is passed over, never
    enqueued later: ``resume_schedule`` keeps its time, and a slot at or
    before it is refused too (no burst of missed slots at a resume).
    The helpers ``slot_taken``, ``paused``, ``resumed`` and ``run_by_hand``
    (this module) say what each write changes, the same in every store.
    """

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
        """In one write: if schedule ``name``'s stored last slot is at or
        after ``slot``, or it is paused, or was resumed at or after
        ``slot`` (``slot_taken``), change nothing and return ``None`` (this
        slot was enqueued already, or is passed over). Else store ``slot``
        and ``expression`` as its last (``resumed_at`` cleared: the slot is
        after it), and: with ``skip_running`` and its last job pending or
        running, add nothing and return that job as a duplicate (the slot
        is skipped); otherwise add ``job`` as ``add`` does (no
        ``max_pending``) and keep its id as the last job."""

    def schedule_states(self) -> list[SlotState]:
        """Every schedule's stored state, by name (orphans included)."""

    def pause_schedule(self, name: str, now: float, *, by: str) -> bool:
        """In one write: mark schedule ``name`` paused since ``now`` by
        ``by`` (``paused``: a new row for a schedule the store has none
        for); ``False``, changing nothing, if it is paused already."""

    def resume_schedule(self, name: str, now: float) -> bool:
        """In one write: end ``name``'s pause and keep ``now`` as its
        ``resumed_at`` (``resumed``); ``False``, changing nothing, if it is
        not paused (or unknown)."""

    def enqueue_now(
        self, name: str, job: NewJob, now: float, *, skip_running: bool
    ) -> Enqueued:
        """In one write, whether the schedule is paused or not: with
        ``skip_running`` and schedule ``name``'s last job pending or
        running, add nothing and return that job as a duplicate; otherwise
        add ``job`` as ``add`` does (no ``max_pending``) and keep its id as
        the last job, taking no slot (``run_by_hand``)."""


def protocol_members(protocol: type) -> tuple[str, ...]:
    """The members a protocol class declares, as ``typing.get_protocol_members``
    (3.13+) finds them but in the order written: annotated attributes, then
    methods and properties, those of its protocol bases first; private and
    dunder names (``typing``'s own among them) left out."""
    names: dict[str, None] = {}
    for cls in reversed(protocol.__mro__):
        if cls not in (object, Protocol, Generic):
            names.update(dict.fromkeys([*inspect.get_annotations(cls), *vars(cls)]))
    return tuple(name for name in names if not name.startswith("_"))


#: The members ``periodic`` needs of a store, beyond ``STORE_MEMBERS``.
SCHEDULE_MEMBERS = protocol_members(ScheduleStore)


def missing_schedule_members(store: object) -> list[str]:
    """The members of ``ScheduleStore`` that ``store`` lacks: all of them
    where it declares it keeps no schedules (``Capabilities.schedules``)."""
    if capabilities_of(store).schedules:
        return []
    lacking = [name for name in SCHEDULE_MEMBERS if not hasattr(store, name)]
    return lacking or list(SCHEDULE_MEMBERS)


def missing_limit_members(store: object) -> list[str]:
    """The members of ``LimitStore`` that ``store`` lacks: all of them where
    it does not declare ``Capabilities.limits``."""
    if capabilities_of(store).limits:
        return []
    return list(protocol_members(LimitStore))


def slot_taken(state: SlotState | None, slot: float) -> bool:
    """Whether ``enqueue_slot`` must leave ``slot`` alone: it (or a later
    one) was taken already, or it is passed over (the schedule is paused,
    or was resumed at or after it). The first rule of ``enqueue_slot``, the
    same in every store."""
    if state is None:
        return False
    resumed = state.resumed_at is not None and slot <= state.resumed_at
    return state.last_slot >= slot or state.paused_at is not None or resumed


def overlapping_job(
    state: SlotState | None, skip_running: bool, live: Callable[[int], bool]
) -> int | None:
    """The job that makes ``enqueue_slot`` skip a slot: with ``skip_running``,
    the schedule's last job if ``live(id)`` says it is pending or running."""
    last = None if state is None else state.last_job_id
    if skip_running and last is not None and live(last):
        return last
    return None


def paused(state: SlotState | None, name: str, now: float, by: str) -> SlotState | None:
    """The state ``pause_schedule`` stores; ``None`` (nothing to store) if
    the schedule is paused already."""
    if state is None:
        state = SlotState(name, "", NO_SLOT, None)
    elif state.paused_at is not None:
        return None
    return state._replace(paused_at=now, paused_by=by)


def resumed(state: SlotState | None, now: float) -> SlotState | None:
    """The state ``resume_schedule`` stores; ``None`` (nothing to store)
    if the schedule is not paused."""
    if state is None or state.paused_at is None:
        return None
    return state._replace(paused_at=None, paused_by=None, resumed_at=now)


def run_by_hand(state: SlotState | None, name: str, job_id: int) -> SlotState:
    """The state ``enqueue_now`` stores once it added job ``job_id``."""
    if state is None:
        state = SlotState(name, "", NO_SLOT, None)
    return state._replace(last_job_id=job_id)


#: Every attribute and method the queue needs of a store: ``Store``'s members.
STORE_MEMBERS = protocol_members(Store)


def missing_members(store: object) -> list[str]:
    """The members of ``Store`` that ``store`` lacks, in the protocol's order,
    then those of the capabilities it declares."""
    can = capabilities_of(store)
    promised = [m for name, ms in _PROMISED.items() if getattr(can, name) for m in ms]
    return [name for name in (*STORE_MEMBERS, *promised) if not hasattr(store, name)]


# -- what a store can do beyond the required members ---------------------------------


class PageStore(Protocol):
    """``Capabilities.pages``: see "Pages" in the module."""

    def page_jobs(self, query: JobQuery, now: float) -> JobPage: ...


class FinishedStore(Protocol):
    """``Capabilities.finished_counts``: see "Finished per minute" in the module."""

    def finished_per_minute(self, since: float, now: float) -> list[FinishedMinute]: ...


@runtime_checkable
class SchemaStore(Protocol):
    """``Capabilities.schema``: a store whose tables have a schema version."""

    def migrate(self) -> int:
        """Create the schema, or bring it to this jobq's version, now (a
        deploy step, or ``jobq migrate``); returns that version."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    """What a store can do beyond ``Store``, declared on its class:
    ``capabilities = Capabilities(pages=True, schedules=True)``. A flag that
    is ``True`` promises the members of the protocol named beside it; one
    left ``False`` means they are never used, even where present."""

    #: ``PageStore``: a page of a job list read on its own (else the queue
    #: pages through ``list_jobs``).
    pages: bool = False
    #: ``FinishedStore``: jobs finished per minute, across processes (else
    #: ``JobQueue.finished_per_minute`` is ``None``).
    finished_counts: bool = False
    #: ``ScheduleStore``: what ``@queue.periodic`` needs (else it refuses).
    schedules: bool = False
    #: ``SchemaStore``: a schema that ``migrate()`` creates or upgrades (else
    #: ``jobq migrate`` has nothing to do).
    schema: bool = False

    # What the tools that manage a queue from outside (``jobq.admin``) ask:
    # such a tool never creates a store, and writes only where it may.

    #: ``FileStore``: files that must be there (``missing()``) before a tool
    #: opens the store, which would create them.
    files: bool = False
    #: ``OwnedStore``: only the owning process changes the jobs; a tool that
    #: only looks uses ``reader()``, a dashboard of its own shows no actions.
    owner_writes: bool = False
    #: ``MigratingStore``: opening creates or upgrades the schema unless
    #: ``auto_migrate`` is off, as a tool turns it meanwhile.
    migrates_on_open: bool = False
    #: ``NamedQueueStore``: one place, several named queues (``jobq
    #: --queue``, ``--schema``); ``for_command`` is the store a command uses.
    named_queues: bool = False
    #: ``LimitStore``: limits per key (``queue.limit``), enforced by the
    #: claims (else ``queue.limit`` refuses the store).
    limits: bool = False
    #: Jobs added ``after=`` others, as "Workflows" (the module) says: no
    #: member more, a promise about ``add`` and the ends of jobs (else
    #: ``after=`` is refused for the store).
    workflows: bool = False
    #: ``ActivityStore``: the queue's figures over time and its processes,
    #: from every process (else ``JobQueue.activity`` and the others are
    #: ``None``).
    activity: bool = False
    #: ``PrefetchStore``: jobs taken ahead of their start (see "Taking
    #: jobs ahead" in the module); else every job a claim takes starts, and
    #: a batch's outcomes are written together.
    prefetch: bool = False
    #: Leases given, renewed and judged on a clock of the store's own that
    #: every process shares (a database server's, the host's), never on the
    #: ``now`` the queue passes: no member more, a promise about
    #: ``claim_many``, ``renew`` and ``recover``, so that a process whose
    #: clock is off never takes another's live claim for expired (else its
    #: leases follow ``now``, and every process needs the same clock). Its
    #: contract suite makes leases run out with ``expire_claims``.
    own_clock_leases: bool = False


class FileStore(Protocol):
    """``Capabilities.files``: a store kept in files."""

    def missing(self) -> str | None:
        """``None`` if the store's files are there; else what is not, for
        people ("no SQLite store at /srv/jobs.db")."""


class OwnedStore(Protocol):
    """``Capabilities.owner_writes``: one process, the owner, changes the
    jobs; others only read them."""

    def reader(self) -> Store:
        """This store as another process reads it: never taking the owner's
        place, refusing changes; itself if it is such a reader."""


class MigratingStore(Protocol):
    """``Capabilities.migrates_on_open``."""

    #: Opening creates the schema, or upgrades an older one, while true.
    auto_migrate: bool


class NamedQueueStore(Protocol):
    """``Capabilities.named_queues``."""

    def for_command(
        self, *, queue: str | None = None, schema: str | None = None
    ) -> Store:
        """A store over the same place as a short-lived command uses it: on
        ``queue`` and ``schema`` (default: this store's), waking no workers,
        with few connections, and opening only checks the schema."""


class LimitStore(Protocol):
    """``Capabilities.limits``: see "Limits" in the module."""

    def declare_limit(self, limit: Limit) -> Limit | None:
        """Store ``limit`` under its name (exact, or a family's pattern) in
        one write; the stored one it replaced when that differed (``None``
        when it is new or the same). Every process enforces what is stored."""

    def limit_usage(self, now: float) -> list[LimitUsage]:
        """Each stored limit (by name) with the attempts running under it
        and the jobs it holds back now (a family's summed over its keys)."""


class PrefetchStore(Protocol):
    """``Capabilities.prefetch``: see "Taking jobs ahead" in the module."""

    def claim_many(self, now: float, limit: int, *, start: int) -> list[Claim]:
        """As ``Store.claim_many``; only the first ``start`` claims (in run
        order) start now, the others are taken ahead."""

    def start(self, claims: Sequence[Claim], now: float) -> list[bool]:
        """Mark claims taken ahead started (``started_at`` = ``now``), in
        one write; whether each was: a claim no longer current, or whose
        lease ran out (on the store's clock), is not, and its job must not
        run (another process may have it, or will)."""

    def finish_many(
        self,
        done: Sequence[Done],
        keep_until: float | None,
        now: float,
        *,
        starting: Sequence[Claim] = (),
    ) -> list[bool]:
        """As ``Store.finish_many``, marking ``starting`` started as
        ``start`` does, in the same round trip: a flag for each of ``done``,
        then one for each of ``starting`` (whether it was marked)."""

    def fail_many(
        self, failures: Sequence[Failure], now: float, *, starting: Sequence[Claim] = ()
    ) -> list[JobState | None]:
        """As ``Store.fail_many``, marking ``starting`` started as ``start``
        does, in the same round trip: a state for each of ``failures``,
        then ``JobState.RUNNING`` for each of ``starting`` marked, ``None``
        for each not."""


class ActivityStore(Protocol):
    """``Capabilities.activity``: see "Activity" in the module."""

    def beat(self, beat: Beat, now: float) -> None:
        """One write: the process's row, its tally, the minute's sample."""

    def leave(self, process_id: str) -> None:
        """The process stopped serving the queue: its row goes."""

    def processes(self, now: float) -> list[ProcessInfo]:
        """The processes serving the queue (or gone for less than an hour)."""

    def outcomes(self, since: float, now: float) -> list[TaskOutcomes]:
        """The tallies of the minutes from ``since``'s to ``now``'s."""

    def minute_outcomes(self, since: float, now: float) -> list[MinuteOutcomes]:
        """The same minutes' tallies summed over the tasks, oldest first
        (those with none may be left out): summed by the store, so that a
        day's chart reads 1,440 rows, not one per task and minute."""

    def samples(self, since: float, now: float) -> list[DepthSample]:
        """The depth samples of the minutes from ``since``'s to ``now``'s."""


#: The members each capability promises: its protocol's.
_PROMISED = {
    "pages": protocol_members(PageStore),
    "finished_counts": protocol_members(FinishedStore),
    "schedules": SCHEDULE_MEMBERS,
    "schema": protocol_members(SchemaStore),
    "files": protocol_members(FileStore),
    "owner_writes": protocol_members(OwnedStore),
    "migrates_on_open": protocol_members(MigratingStore),
    "named_queues": protocol_members(NamedQueueStore),
    "limits": protocol_members(LimitStore),
    "workflows": (),
    "activity": protocol_members(ActivityStore),
    "own_clock_leases": (),
    "prefetch": protocol_members(PrefetchStore),
}

#: The capabilities older than their declaration: found by their members in a
#: store that declares none, as the queue and the tools found them then.
_FOUND_BY_MEMBERS = ("pages", "finished_counts", "schedules", "schema")


def capabilities_of(store: object) -> Capabilities:
    """What ``store`` can do beyond ``Store``: its class's ``capabilities``.
    A store that declares none was written before them: it can do the older
    ones it has every member of, and none of the others."""
    declared = getattr(store, "capabilities", None)
    if isinstance(declared, Capabilities):
        return declared
    return Capabilities(**{
        name: all(hasattr(store, member) for member in _PROMISED[name])
        for name in _FOUND_BY_MEMBERS
    })  # fmt: skip


def location_of(store: object) -> str:
    """Where ``store`` keeps its jobs, for people: its ``location`` (the
    built-in stores': "the SQLite file /srv/jobs.db"), else its class's name."""
    location = getattr(store, "location", None)
    return location if isinstance(location, str) else type(store).__name__


# -- the rules every store applies the same way ----------------------------------------

#: Failed attempts kept per job in ``errors``.
ERRORS_KEPT = 20


def describe_error(error: AttemptError) -> str:
    """A job's ``last_error`` for a failed attempt: "Type: message" or "Type"."""
    return f"{error.type}: {error.message}" if error.message else error.type


def add_error(
    errors: tuple[AttemptError, ...], error: AttemptError
) -> tuple[AttemptError, ...]:
    """``errors`` with ``error`` appended, keeping the newest ``ERRORS_KEPT``."""
    return (*errors, error)[-ERRORS_KEPT:]


def process_died(at: float) -> AttemptError:
    """The failed attempt recorded for a job whose process died while it ran
    (at ``open`` or in ``recover``: ``at`` is that call's time)."""
    return AttemptError(
        type=type_path(ProcessDied),
        message="the process died while the job was running",
        traceback="",
        at=at,
    )


#: What a parent's end does to a waiting child (see "Workflows"): it
#: counts the parent ``"finished"``, keeps ``"waiting"``, or is ``"cancel"``led.
Fate = Literal["finished", "waiting", "cancel"]


def child_fate(after_failure: str, parent: ParentEnd) -> Fate:
    """What ``parent`` ending so does to a waiting child with this
    ``after_failure``: the rule every store applies."""
    if parent == "completed" or after_failure == "run":
        return "finished"
    if parent == "dead" and after_failure == "wait":
        return "waiting"
    return "cancel"


def parent_ended(parent_id: int, how: str) -> str:
    """The ``Cancellation.by`` of a child a parent's end cancelled: "parent
    job 7 died" (``how``: "died", "was cancelled", "was deleted", "was
    dropped from the dead-letter list")."""
    return f"parent job {parent_id} {how}"


def unknown_parent(parent_id: int) -> ValueError:
    """The error ``add`` raises for a parent id the store never gave."""
    return ValueError(
        f"after=: no job {parent_id} was ever added to this queue; nothing added"
    )


def ended_by_crash(
    attempts: int, max_attempts: int, stopping: bool
) -> Literal[JobState.PENDING, JobState.DEAD, JobState.CANCELLED]:
    """The state a job whose process died while it ran ends in: cancelled if
    it was asked to stop, else pending again if that was not its last
    attempt (``retries_after_crash``), else dead."""
    if stopping:
        return JobState.CANCELLED
    if retries_after_crash(attempts, max_attempts):
        return JobState.PENDING
    return JobState.DEAD


def retries_after_crash(attempts: int, max_attempts: int) -> bool:
    """Whether a job whose process died while it ran (``attempts`` failed
    before that attempt) runs again: the crash counts as a failed attempt, so
    only if that was not its last one."""
    return attempts + 1 < max_attempts


def check_room(pending: int, adding: int, max_pending: int) -> None:
    """Raise ``QueueFull`` if ``adding`` new jobs would make more than
    ``max_pending`` pending; a store calls it before it changes anything.
    Duplicates of held keys are not new: they never count."""
    if adding and pending + adding > max_pending:
        raise QueueFull(
            f"the queue holds {pending} pending jobs and max_pending is "
            f"{max_pending}; {adding} more were not added"
        )


def log_dropped_dead(limit: int, job_id: int, last_error: str | None) -> None:
    """Say that the dead-letter limit dropped a job: nothing disappears silently."""
    logger.warning(
        "dead-letter limit %d reached: dropped dead job %d (%s)",
        limit,
        job_id,
        last_error,
        extra=job_extra(job_id),
    )


def log_recovered(job_ids: Iterable[int]) -> None:
    """Say which claims were recovered as failed attempts (their process died
    or stopped renewing its lease): call it once per recovery, at ``open`` or
    in ``recover``; no ids, no line."""
    for job_id in job_ids:
        logger.warning(
            "job %d was running in a process that died or stopped renewing its "
            "lease: recorded a failed attempt",
            job_id,
            extra=job_extra(job_id),
        )
