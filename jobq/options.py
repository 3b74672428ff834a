"""The options of jobs and tasks, declared once.

Every call that adds jobs (``JobQueue.enqueue``, ``enqueue_many``,
``send``, ``prepare``, ``Task.using``, and the Flask and Django helpers)
takes the same keywords, typed by ``JobOptions`` or ``SendOptions``
through ``**options: Unpack[...]``, and checks them in one place,
``check``; every task decorator takes ``TaskOptions``. An option added
later is one line in a ``TypedDict`` here and one line in ``check``.

Keywords typed by a ``TypedDict`` (as procrastinate's
``ConfigureTaskOptions``), rather than a frozen options object: every call
site stays as it reads (``enqueue(payload, delay=30)``), and a type checker
still refuses a misspelt or mistyped option.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, TypedDict

from jobq._rules import (
    check_after,
    check_after_failure,
    check_job_limits,
    check_key,
    check_meta,
    check_priority,
    check_timeout,
)
from jobq._time import to_epoch, to_seconds
from jobq.types import AfterFailure, Enqueued

__all__ = [
    "Delay",
    "JobOptions",
    "PeriodicOptions",
    "SendOptions",
    "TaskOptions",
]

#: Seconds, or a ``timedelta``.
Delay = float | dt.timedelta


class JobOptions(TypedDict, total=False):
    """What a job is added with. Each is optional; ``None`` means not given."""

    #: Run it this many seconds from now (default 0) ...
    delay: Delay
    #: ... or at this time: an aware ``datetime`` or epoch seconds (a past
    #: time means now). Not both.
    at: float | dt.datetime | None
    #: While a job with this key is pending or running, adding another
    #: returns that one (``duplicate=True``).
    key: str | None
    #: Higher runs first among due jobs (default 0, or the task's).
    priority: int
    #: String headers stored with the job (at most 64 entries in 8 KiB).
    meta: Mapping[str, str] | None
    #: This job's time limit, instead of its task's or its queue's.
    timeout: Delay | None
    #: The limits it runs under (``queue.limit``), with its task's.
    limits: Sequence[str] | None
    #: Run it once these jobs (ids or ``Enqueued``s) have finished: it
    #: waits (``JobState.WAITING``) until then (see the README's "Workflows").
    after: Sequence[int | Enqueued] | None
    #: When a parent fails: ``"wait"`` for it to be revived (default),
    #: ``"cancel"`` this job, or ``"run"`` it anyway.
    after_failure: AfterFailure | None


class SendOptions(JobOptions, total=False):
    """``JobOptions``, and how the jobs are written."""

    #: A database connection of the caller's (psycopg 3, for the PostgreSQL
    #: store): the jobs are written in its current transaction.
    connection: Any


class TaskOptions(TypedDict, total=False):
    """What a named task is registered with (``@queue.task(...)``): its
    name, and the defaults of its jobs."""

    #: The name its jobs are stored with (default ``module.qualname``).
    name: str | None
    #: Attempts before a job is dead (default: the queue's).
    max_attempts: int | None
    #: Its jobs' priority (default 0).
    priority: int
    #: Its jobs' time limit (default: the queue's).
    timeout: Delay | None
    #: The limits every job of it runs under (``queue.limit``).
    limits: Sequence[str] | None
    #: Run each attempt in a child process, which can be killed at the
    #: limit (default ``False``; see the README's "Isolated tasks").
    isolate: bool


Overlap = Literal["skip", "allow"]
CatchUp = Literal["latest", "none", "all"]


class PeriodicOptions(TaskOptions, total=False):
    """``TaskOptions``, and the schedule of a periodic task
    (``@queue.periodic(...)``)."""

    #: Slots at the multiples of this period since the epoch ...
    every: Delay | None
    #: ... or at the times of this cron expression (needs ``jobq[cron]``).
    cron: str | None
    #: The IANA zone the expression is read in (default ``"UTC"``).
    tz: str
    #: ``"skip"`` a slot while the previous one's job is pending or running
    #: (the default), or ``"allow"`` it.
    overlap: Overlap
    #: After downtime: the ``"latest"`` missed slot (the default), ``"none"``
    #: or ``"all"`` (the latest ``max_catch_up``, default 100).
    catch_up: CatchUp
    max_catch_up: int


#: The names each kind of call takes.
JOB_OPTIONS = frozenset(JobOptions.__annotations__)
SEND_OPTIONS = frozenset(SendOptions.__annotations__)
TASK_OPTIONS = frozenset(TaskOptions.__annotations__)
PERIODIC_OPTIONS = frozenset(PeriodicOptions.__annotations__)


@dataclass(frozen=True, slots=True)
class Checked:
    """Options after ``check``: seconds, epoch seconds, the key, the
    priority, the meta (as given and as stored JSON text), the time limit,
    the connection; ``None`` where not given."""

    delay: float = 0.0
    at: float | None = None
    key: str | None = None
    priority: int | None = None
    meta: Mapping[str, str] | None = None
    meta_text: str | None = None
    timeout: float | None = None
    connection: Any = None
    limits: tuple[str, ...] | None = None
    after: tuple[int, ...] | None = None
    after_failure: AfterFailure | None = None

    def run_at(self, now: float) -> float:
        """When a job added ``now`` is due: a past ``at`` is kept (due now,
        and earlier than the jobs due after it)."""
        return now + self.delay if self.at is None else self.at

    def given(self) -> dict[str, Any]:
        """The options given, as keywords that ``check`` takes again (what
        ``Task.using`` keeps)."""
        found: dict[str, Any] = {}
        if self.delay:
            found["delay"] = self.delay
        for name in ("at", "key", "priority", "meta", "timeout", "connection",
                     "limits", "after", "after_failure"):  # fmt: skip
            value = getattr(self, name)
            if value is not None:
                found[name] = value
        return found


#: No option given: what ``enqueue(payload)`` uses, without a check.
NOTHING = Checked()


def check(
    options: Mapping[str, Any],
    caller: str,
    allowed: frozenset[str] = SEND_OPTIONS,
) -> Checked:
    """``options`` checked at the call that got them: ``TypeError`` for a
    name ``caller`` does not take or a value of the wrong type,
    ``ValueError`` for a value out of range (and for ``delay`` with
    ``at``)."""
    check_names(options, allowed, caller)
    delay, at = options.get("delay"), options.get("at")
    seconds = 0.0 if delay is None else to_seconds(delay, "delay")
    if at is not None:
        if seconds:
            raise ValueError("pass delay or at, not both")
        at = to_epoch(at)
    key, priority = options.get("key"), options.get("priority")
    meta, limits = options.get("meta"), options.get("limits")
    after, failure = options.get("after"), options.get("after_failure")
    key = None if key is None else check_key(key)
    priority = None if priority is None else check_priority(priority)
    meta_text = None if meta is None else check_meta(meta)
    return Checked(
        delay=seconds,
        at=at,
        key=key,
        priority=priority,
        meta=None if meta is None else MappingProxyType(dict(meta)),
        meta_text=meta_text,
        timeout=check_timeout(options.get("timeout")),
        connection=options.get("connection"),
        limits=None if limits is None else check_job_limits(limits),
        after=None if after is None else check_after(after),
        after_failure=None if failure is None else check_after_failure(failure),
    )


def check_names(
    options: Mapping[str, Any], allowed: frozenset[str], caller: str
) -> None:
    """``TypeError`` for an option ``caller`` does not take, as Python says
    it for a keyword argument (the options come as ``**options``)."""
    unknown = options.keys() - allowed
    if unknown:
        raise TypeError(
            f"{caller}() got an unexpected keyword argument {min(unknown)!r}"
        )


def merged(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """``old`` options with each of ``new`` given (not ``None``) in place;
    ``delay`` and ``at`` are one choice, so giving one drops the other;
    ``limits`` add up (a job is under its task's and its own)."""
    given = {name: value for name, value in new.items() if value is not None}
    result = dict(old)
    if "limits" in given and result.get("limits"):  # under both: they add up
        given["limits"] = (*result["limits"], *given["limits"])
    if "delay" in given or "at" in given:
        result.pop("delay", None)
        result.pop("at", None)
    result.update(given)
    return result
