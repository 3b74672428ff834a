"""Pages of a job list: what a store's optional ``page_jobs`` is asked and
answers (the dashboard's lists, ``JobQueue.browse``).

A list is one of ``VIEWS``: ``due`` (pending and due now, in run order:
highest priority, earliest due, lowest id), ``delayed`` (pending, not yet due,
never attempted: added with ``delay=``/``at=``, earliest due first),
``retrying`` (pending, not yet due, after a failed attempt: waiting out its
backoff, earliest due first), ``running`` (by id), ``waiting`` (for a parent,
by id), ``dead`` (newest death first), ``completed`` and ``cancelled`` (kept
ones, newest first). A pending job is in exactly one of ``due``, ``delayed``
and ``retrying`` (``pending_view``). Filters: a task name and a key (each
exact), and text the job's ``last_error`` contains (case-sensitive).

Pages are keyset-paginated: each ends with an opaque cursor (``after``), the
sort key of its last job as the store chose it, and the next page starts
after it. So a page costs what its rows cost on the database stores (one
index range each), never an offset's walk, and a job added or removed
between two pages shifts nothing. Cursors are plain text (a JSON list of
numbers): safe in a URL once quoted, checked when read back
(``read_cursor``: ``ValueError`` for anything else).

A cursor and the filters come from a client (the dashboard's query string),
so ``JobQuery`` refuses what no store could read, with a ``ValueError`` that
names it, before any store sees it: a cursor that is not a short list of
numbers a store can compare (ints of 64 bits, finite floats), and filters
with a NUL character or a lone surrogate (no store holds such text:
PostgreSQL refuses NUL, SQLite and PostgreSQL cannot encode a surrogate).

A store without ``page_jobs`` (one written before it) still pages through
``page_from_list``, which reads its ``list_jobs`` whole: correct, not fast.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from jobq._rules import INT64_MAX, INT64_MIN, check_text
from jobq.types import JobRecord, JobState

T = TypeVar("T")

#: The lists a page may come from.
VIEWS = (
    "due", "delayed", "retrying", "running", "waiting", "dead", "completed",
    "cancelled",
)  # fmt: skip

#: The most jobs one page may hold.
MAX_PAGE = 1000

#: The longest cursor text read: a store writes at most three numbers (some
#: 70 characters); refusing longer text before parsing it keeps a forged one
#: from costing anything (or nesting deeper than the JSON reader recurses).
MAX_CURSOR_CHARS = 200

#: The bound of a cursor's ints: a database column (64 bits), or the memory
#: stores' negated priority, one more (``-(-2**63)``).
CURSOR_INT_BOUND = 2**63

#: The state of the jobs of each list.
VIEW_STATES = {
    "due": JobState.PENDING,
    "delayed": JobState.PENDING,
    "retrying": JobState.PENDING,
    "running": JobState.RUNNING,
    "waiting": JobState.WAITING,
    "dead": JobState.DEAD,
    "completed": JobState.COMPLETED,
    "cancelled": JobState.CANCELLED,
}

Key = tuple[float, ...]


@dataclass(frozen=True, slots=True)
class JobQuery:
    """One page to read: the list (``view``), at most ``limit`` jobs, after
    the cursor of the page before (``None``: the first page), and filters
    (``None``: any)."""

    view: str
    limit: int = 50
    after: str | None = None
    task: str | None = None
    key: str | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if self.view not in VIEWS:
            raise ValueError(
                f"view must be one of {', '.join(VIEWS)}, not {self.view!r}"
            )
        if type(self.limit) is not int or not 1 <= self.limit <= MAX_PAGE:
            raise ValueError(
                f"limit must be an int from 1 to {MAX_PAGE}, not {self.limit!r}"
            )
        for name in ("after", "task", "key", "error"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a str or None, not {value!r}")
        for name in ("task", "key", "error"):
            value = getattr(self, name)
            if value is not None:
                check_text(value, name)
        if self.after is not None:
            parse_cursor(self.after)

    def admits(self, task: str | None, key: str | None, last_error: str | None) -> bool:
        """Whether a job with these fields passes the filters."""
        return (
            (self.task is None or task == self.task)
            and (self.key is None or key == self.key)
            and (
                self.error is None
                or (last_error is not None and self.error in last_error)
            )
        )


@dataclass(frozen=True, slots=True)
class JobPage:
    """Up to ``limit`` jobs, and the cursor of the next page (``None``: this
    page is the last)."""

    jobs: list[JobRecord[Any]]
    after: str | None


def write_cursor(key: Key) -> str:
    """A sort key as cursor text."""
    return json.dumps(list(key), separators=(",", ":"))


def read_cursor(text: str | None, length: int, *, int64: bool = False) -> Key | None:
    """The sort key of cursor text (``None`` for none); ``ValueError`` if it
    is not a list of ``length`` numbers a store can compare (a cursor made
    elsewhere; see ``parse_cursor``). ``int64``: its ints must fit a 64-bit
    column (the database stores' cursors are column values)."""
    if text is None:
        return None
    values = parse_cursor(text)
    if len(values) != length or (
        int64
        and not all(INT64_MIN <= v <= INT64_MAX for v in values if isinstance(v, int))
    ):
        raise _not_a_cursor(text)
    return values


def parse_cursor(text: str) -> Key:
    """The numbers of cursor text, whatever the list; ``ValueError`` unless
    it is a short JSON list of one to three ints (within
    ``CURSOR_INT_BOUND``) and finite floats."""
    if len(text) > MAX_CURSOR_CHARS:
        raise _not_a_cursor(text)
    try:
        values = json.loads(text)
    except ValueError:
        raise _not_a_cursor(text) from None
    if (
        not isinstance(values, list)
        or not 1 <= len(values) <= 3
        or not all(_cursor_number(v) for v in values)
    ):
        raise _not_a_cursor(text)
    return tuple(values)


def _cursor_number(value: object) -> bool:
    """Checked without a conversion to float, which a 400-digit int would
    overflow (``OverflowError``, not the client's ``ValueError``)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -CURSOR_INT_BOUND <= value <= CURSOR_INT_BOUND
    return isinstance(value, float) and math.isfinite(value)


def _not_a_cursor(text: str) -> ValueError:
    shown = repr(text[:40]) + ("..." if len(text) > 40 else "")
    return ValueError(
        f"after is not a page cursor: {shown}; give the after of the page before "
        "(JobPage.after), or None for the first page"
    )


def take_page(
    candidates: Iterable[tuple[Key, T]],
    query: JobQuery,
    show: Callable[[T], JobRecord[Any]],
) -> JobPage:
    """The page of ``candidates`` (sort key, job; already filtered) after the
    query's cursor, smallest keys first; ``show`` makes a record of each job
    on the page only (the stores that scan memory)."""
    after = read_cursor(query.after, _KEY_LENGTHS[query.view])
    if after is not None:
        candidates = ((k, job) for k, job in candidates if k > after)
    best = heapq.nsmallest(query.limit + 1, candidates, key=lambda pair: pair[0])
    more = len(best) > query.limit
    best = best[: query.limit]
    return JobPage(
        [show(job) for _, job in best],
        write_cursor(best[-1][0]) if more else None,
    )


def sort_key(view: str, priority: int, run_at: float, job_id: int,
             finished_at: float | None) -> Key:  # fmt: skip
    """A job's place in ``view`` for the stores that sort in Python."""
    if view == "due":
        return (-priority, run_at, job_id)
    if view in ("delayed", "retrying"):
        return (run_at, -priority, job_id)
    if view in ("running", "waiting"):
        return (job_id,)
    return (-(finished_at or 0.0), -job_id)  # dead, completed, cancelled: newest first


#: The database stores' cursor before every job of each list: due (priority,
#: run_at, id), delayed and retrying (run_at, id), running (id), dead (burial
#: number), completed and cancelled (expires_at, id).
DATABASE_FIRST: dict[str, tuple[float, ...]] = {
    "due": (2**63 - 1, -1e308, 0),
    "delayed": (-1e308, 0),
    "retrying": (-1e308, 0),
    "running": (0,),
    "waiting": (0,),
    "dead": (2**63 - 1,),
    "completed": (1e308, 2**63 - 1),
    "cancelled": (1e308, 2**63 - 1),
}

_KEY_LENGTHS = {
    "due": 3, "delayed": 3, "retrying": 3, "running": 1, "waiting": 1, "dead": 2,
    "completed": 2, "cancelled": 2,
}  # fmt: skip


def pending_view(run_at: float, attempts: int, now: float) -> str:
    """The list a pending job is in at ``now``: ``due`` once its time has
    come, whatever its past; before, ``retrying`` if an attempt of it failed
    (``attempts``, the failed ones: a retry waiting out its backoff, a
    ``Retry(after=...)``, a time limit's), else ``delayed`` (added for later,
    never attempted). A job whose process died while it ran is due again at
    once (see "Recovery" in ``jobq.stores.base``), so it is never retrying;
    a revived dead job is due at once with no attempts."""
    if run_at <= now:
        return "due"
    return "retrying" if attempts else "delayed"


def in_view(store: Any, view: str, record: JobRecord[Any], now: float) -> bool:
    """Whether a job ``list_jobs`` gave belongs in ``view`` at ``now``
    (``list_jobs`` knows no time: a kept job past its time is gone for
    ``get``)."""
    if view in ("due", "delayed", "retrying"):
        return pending_view(record.run_at, record.attempts, now) == view
    if view in ("completed", "cancelled"):
        return store.get(record.id, now) is not None
    return True


def page_from_list(store: Any, query: JobQuery, now: float) -> JobPage:
    """A page read from ``store.list_jobs`` whole: for a store without
    ``page_jobs``."""
    records = store.list_jobs(VIEW_STATES[query.view])
    return take_page(
        (
            (sort_key(query.view, r.priority, r.run_at, r.id, r.finished_at), r)
            for r in records
            if query.admits(r.task, r.key, r.last_error)
            and in_view(store, query.view, r, now)
        ),
        query,
        lambda record: record,
    )
