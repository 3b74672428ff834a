"""How the memory and JSON stores hold one job: a plain tuple of plain values.

Why a plain tuple, read through the index constants below, and not a named
tuple or a dataclass: CPython's garbage collector stops tracking an exact
``tuple`` whose items are all strings, numbers and ``None`` (and tuples of
them), but it tracks every instance of any class, named tuples included. With
a million queued jobs, a million tracked objects made each full collection
pause every thread for a second or more; untracked tuples cost nothing.
So states are plain strings and failed attempts are plain tuples here, and
``JobState`` / ``AttemptError`` are built only when a job is shown.

A named record with ``__slots__`` was measured against them (issue 22,
CPython 3.11) and costs more than the 2 % per job it was allowed: 2.6 % more
instructions per no-op job (callgrind, medians of 7-8 runs: 121.5k against
118.4k); and as every record is tracked, a full collection with a million
jobs queued took 289 ms instead of 20, and filling the queue 6.9 s instead
of 4.3.

Entries are never changed in place: a change stores a new tuple. That lets
the JSON store copy references under the lock and serialize them after.
"""

from __future__ import annotations

from typing import Any, Final

from jobq._json import decode, decode_meta
from jobq.stores.base import ERRORS_KEPT, ParentOutcome, describe_error
from jobq.types import AttemptError, Cancellation, JobRecord, JobState

PENDING: Final = "pending"
RUNNING: Final = "running"  # never stored: running jobs are the store's claims
DEAD: Final = "dead"
COMPLETED: Final = "completed"
CANCELLED: Final = "cancelled"
WAITING: Final = "waiting"

#: One failed attempt: type, message, traceback, epoch time.
ErrorTuple = tuple[str, str, str, float]

#: A request to cancel: when, by whom, the attempt it stopped (``None``: the
#: job was pending), and until when the cancelled job is kept (a running
#: job's end takes it from here).
CancelTuple = tuple[float, str, int | None, float]

#: id, payload, key, priority, run_at, created_at, max_attempts, task, state,
#: attempts, last_error, errors, result, expires_at, started_at, finished_at,
#: timeout, meta (payload, result, meta: JSON text), cancellation, limits,
#: parents (each with its outcome: see ``ParentOutcome``), after_failure.
Entry = tuple[
    int, str, str | None, int, float, float, int, str | None,
    str, int, str | None, tuple[ErrorTuple, ...], str | None, float | None,
    float | None, float | None, float | None, str | None, CancelTuple | None,
    tuple[str, ...], tuple[ParentOutcome, ...], str | None,
]  # fmt: skip

ID: Final = 0
PAYLOAD: Final = 1
KEY: Final = 2
PRIORITY: Final = 3
RUN_AT: Final = 4
CREATED_AT: Final = 5
MAX_ATTEMPTS: Final = 6
TASK: Final = 7
STATE: Final = 8
ATTEMPTS: Final = 9
LAST_ERROR: Final = 10
ERRORS: Final = 11
RESULT: Final = 12
EXPIRES_AT: Final = 13
STARTED_AT: Final = 14
FINISHED_AT: Final = 15
TIMEOUT: Final = 16
META: Final = 17
CANCELLATION: Final = 18
LIMITS: Final = 19
PARENTS: Final = 20
AFTER_FAILURE: Final = 21

_FIELDS = {
    "run_at": RUN_AT,
    "state": STATE,
    "attempts": ATTEMPTS,
    "result": RESULT,
    "expires_at": EXPIRES_AT,
    "started_at": STARTED_AT,
    "finished_at": FINISHED_AT,
    "cancellation": CANCELLATION,
    "parents": PARENTS,
}


def new_entry(
    job_id: int,
    payload: str,
    key: str | None,
    priority: int,
    run_at: float,
    created_at: float,
    max_attempts: int,
    task: str | None,
    timeout: float | None,
    meta: str | None,
    limits: tuple[str, ...] = (),
    state: str = PENDING,
    parents: tuple[ParentOutcome, ...] = (),
    after_failure: str | None = None,
) -> Entry:
    """A job with no attempts yet: pending, or (with parents) waiting."""
    return (job_id, payload, key, priority, run_at, created_at, max_attempts, task,
            state, 0, None, (), None, None, None, None, timeout, meta,
            None, limits, parents, after_failure)  # fmt: skip


def started(entry: Entry, at: float | None) -> Entry:
    """``entry`` with an attempt started ``at`` (``None``: none started) and
    not finished: a running job as shown, or a released one (a slice, not
    ``evolve``: it runs for each running job a snapshot writes)."""
    return (*entry[:STARTED_AT], at, None, *entry[TIMEOUT:])


def evolve(entry: Entry, **changes: Any) -> Entry:
    """``entry`` with some of ``run_at``, ``state``, ``attempts``, ``result``,
    ``expires_at``, ``started_at``, ``finished_at``, ``cancellation`` and
    ``parents`` changed."""
    values = list(entry)
    for name, value in changes.items():
        values[_FIELDS[name]] = value
    return tuple(values)  # type: ignore[return-value]  # same shape as entry


def failed(entry: Entry, error: AttemptError, **changes: Any) -> Entry:
    """``entry`` with one more failed attempt recorded, and ``changes``."""
    values = list(evolve(entry, **changes))
    values[ATTEMPTS] = entry[ATTEMPTS] + 1
    values[LAST_ERROR] = describe_error(error)
    attempt = (error.type, error.message, error.traceback, error.at)
    values[ERRORS] = (*entry[ERRORS], attempt)[-ERRORS_KEPT:]
    return tuple(values)  # type: ignore[return-value]  # same shape as entry


def record(
    entry: Entry,
    running: bool,
    held_by: str | None = None,
    children: tuple[int, ...] = (),
) -> JobRecord[Any]:
    """The job as callers see it (``held_by``: the limit holding it back;
    ``children``: the jobs added after it)."""
    result = entry[RESULT]
    cancel = entry[CANCELLATION]
    parents = entry[PARENTS]
    return JobRecord(
        id=entry[ID],
        payload=decode(entry[PAYLOAD]),
        attempts=entry[ATTEMPTS],
        state=JobState(RUNNING if running else entry[STATE]),
        run_at=entry[RUN_AT],
        created_at=entry[CREATED_AT],
        last_error=entry[LAST_ERROR],
        key=entry[KEY],
        priority=entry[PRIORITY],
        result=None if result is None else decode(result),
        task=entry[TASK],
        errors=tuple(AttemptError(*error) for error in entry[ERRORS]),
        max_attempts=entry[MAX_ATTEMPTS],
        started_at=entry[STARTED_AT],
        finished_at=entry[FINISHED_AT],
        timeout=entry[TIMEOUT],
        meta=decode_meta(entry[META]),
        cancellation=None if cancel is None else Cancellation(*cancel[:3]),
        limits=entry[LIMITS],
        held_by=held_by,
        parents=tuple(parent[0] for parent in parents),
        waiting_on=tuple(parent[0] for parent in parents if parent[1] is None),
        children=children,
        after_failure=entry[AFTER_FAILURE],  # type: ignore[arg-type]  # stored checked
    )
