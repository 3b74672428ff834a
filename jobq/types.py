"""The values jobq hands to handlers and callers: frozen, slotted, typed."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

P = TypeVar("P")


class JobState(enum.StrEnum):
    """Where a job stands; a cancelled or finished job (unless kept) is gone."""

    PENDING = "pending"
    RUNNING = "running"
    DEAD = "dead"
    COMPLETED = "completed"


@dataclass(frozen=True, slots=True)
class Enqueued:
    """What ``enqueue`` returns: the job's id, and whether a keyed job held it."""

    id: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class Job(Generic[P]):
    """What a handler (and each middleware) receives. ``attempt`` is 1 on the
    first try; ``task`` is the name of a named task's job (its payload is
    then ``{"args": [...], "kwargs": {...}}``), ``None`` for a plain job."""

    id: int
    payload: P
    attempt: int
    key: str | None
    task: str | None = None


@dataclass(frozen=True, slots=True)
class AttemptError:
    """One failed attempt: exception type name, message, traceback text, epoch time."""

    type: str
    message: str
    traceback: str
    at: float


@dataclass(frozen=True, slots=True)
class JobRecord(Generic[P]):
    """A stored job as ``get`` and ``dead_jobs`` show it.

    ``attempts`` counts failed attempts; ``errors`` keeps the newest 20 of them,
    oldest first; times are epoch seconds.
    """

    id: int
    payload: P
    attempts: int
    state: JobState
    run_at: float
    created_at: float
    last_error: str | None
    key: str | None
    priority: int
    result: Any
    task: str | None
    errors: tuple[AttemptError, ...]
    max_attempts: int


@dataclass(frozen=True, slots=True)
class Stats:
    """``pending`` (delayed included), ``running`` and ``dead`` as stored, across
    processes; ``completed`` and ``retried`` counted by this queue object."""

    pending: int
    running: int
    dead: int
    completed: int
    retried: int
