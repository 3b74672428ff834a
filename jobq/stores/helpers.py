"""Helpers the built-in stores share beyond the contract: their options,
the rows of the database stores, and the one-job calls.

Not part of the contract (``jobq.stores.base``): a store of yours may use
them, but need not. ``jobq.stores.common``, their module's old name, still
imports them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from jobq._json import decode, decode_meta
from jobq.stores.base import Claim, Done, Failure
from jobq.stores.pages import JobPage, write_cursor
from jobq.types import AttemptError, Cancellation, JobRecord, JobState


def batch_size(value: object) -> int:
    """``claim_batch``: an int >= 1, else ``TypeError`` or ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"claim_batch must be an int, not {value!r}")
    if value < 1:
        raise ValueError(f"claim_batch must be at least 1, not {value}")
    return value


def positive_seconds(value: object, name: str) -> float:
    """A store option in seconds: a finite number > 0, else ``TypeError`` or
    ``ValueError`` naming the option."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(
            f"{name} must be a finite number of seconds > 0, not {value!r}"
        )
    return float(value)


#: The states the database stores keep: a pending job is "scheduled" (due
#: later) or "ready" (due), so that a claim never walks past future rows.
DATABASE_STATES = {
    "scheduled": JobState.PENDING,
    "ready": JobState.PENDING,
    "held": JobState.PENDING,  # due, held back by a limit
    "waiting": JobState.WAITING,  # for a parent (after=)
    "running": JobState.RUNNING,
    "dead": JobState.DEAD,
    "completed": JobState.COMPLETED,
    "cancelled": JobState.CANCELLED,
}


def record_from_row(
    row: Sequence[Any],
    errors: Iterable[Sequence[Any]],
    *,
    cancels_at: int | None = None,
    limits_at: int | None = None,
) -> JobRecord[Any]:
    """A job as the database stores select it: (id, state, payload, attempts,
    run_at, created_at, last_error, key, priority, result, task, errors,
    max_attempts, started_at, finished_at, timeout, meta, ...), with
    ``errors`` already parsed; its cancellation's (at, by, attempt) from
    column ``cancels_at`` on (``None``: the store keeps none), its limits
    (JSON array text or NULL) and ``held_by`` from column ``limits_at`` on."""
    (job_id, state, payload, attempts, run_at, created_at, last_error, key, priority,
     result, task, _, max_attempts, started_at, finished_at, timeout,
     meta) = row[:17]  # fmt: skip
    return JobRecord(
        id=job_id,
        payload=decode(payload),
        attempts=attempts,
        state=DATABASE_STATES[state],
        run_at=run_at,
        created_at=created_at,
        last_error=last_error,
        key=key,
        priority=priority,
        result=None if result is None else decode(result),
        task=task,
        errors=tuple(
            AttemptError(str(t), str(m), str(tb), float(at)) for t, m, tb, at in errors
        ),
        max_attempts=max_attempts,
        started_at=started_at,
        finished_at=finished_at,
        timeout=timeout,
        meta=decode_meta(meta),
        cancellation=None if cancels_at is None else cancellation_of(row, cancels_at),
        **({} if limits_at is None else limits_of(row, limits_at)),
    )


def limits_of(row: Sequence[Any], start: int) -> dict[str, Any]:
    """A record's ``limits`` and ``held_by`` from a row's (limits, held_by)
    at ``start``: limits as JSON array text, or NULL for none."""
    limits, held_by = row[start : start + 2]
    return {"limits": () if limits is None else tuple(json.loads(limits)),
            "held_by": held_by}  # fmt: skip


def cancellation_of(row: Sequence[Any], start: int) -> Cancellation | None:
    """The ``Cancellation`` in a row's (at, by, attempt) from ``start``."""
    at, by, attempt = row[start : start + 3]
    return None if at is None else Cancellation(at, by, attempt)


def database_page(
    rows: Sequence[Sequence[Any]],
    limit: int,
    width: int,
    load_errors: Callable[[Any], Iterable[Sequence[Any]]],
    *,
    cancels_at: int | None = None,
    limits_at: int | None = None,
) -> JobPage:
    """A page from up to ``limit`` + 1 rows, each a record's ``width``
    columns (``record_from_row``, ``cancels_at`` as there) and then its sort
    key: one row more than the page means another page, after the last one
    shown."""
    jobs = [
        record_from_row(
            row, load_errors(row[11]), cancels_at=cancels_at, limits_at=limits_at
        )
        for row in rows[:limit]
    ]
    more = len(rows) > limit
    return JobPage(jobs, write_cursor(tuple(rows[limit - 1][width:])) if more else None)


class _Batches(Protocol):
    def claim_many(self, now: float, limit: int) -> list[Claim]: ...

    def finish_many(
        self, done: Sequence[Done], keep_until: float | None, now: float
    ) -> list[bool]: ...

    def fail_many(
        self, failures: Sequence[Failure], now: float
    ) -> list[JobState | None]: ...


class OneJobCalls:
    """``claim``, ``finish`` and ``fail`` of one job, as the store's
    ``claim_many``, ``finish_many`` and ``fail_many``: the built-in stores take
    it as their base (for their tests and direct users; the queue calls only
    the batch methods), so the one-job calls behave exactly as those do."""

    def claim(self: _Batches, now: float) -> Claim | None:
        claims = self.claim_many(now, 1)
        return claims[0] if claims else None

    def finish(
        self: _Batches,
        claim: Claim,
        result: str | None,
        keep_until: float | None,
        now: float,
    ) -> bool:
        return self.finish_many([Done(claim, result)], keep_until, now)[0]

    def fail(
        self: _Batches,
        claim: Claim,
        error: AttemptError,
        retry_at: float | None,
        now: float,
    ) -> bool:
        """Whether the failure was recorded (its claim was current)."""
        return self.fail_many([Failure(claim, error, retry_at)], now)[0] is not None
