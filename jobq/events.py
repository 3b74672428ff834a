"""Events: what happened to a job, told to whoever subscribed, after the store
recorded it.

``queue.subscribe(callback)`` registers a callback and returns the function
that unregisters it. Each callback receives an ``Event`` in the thread that
made the change (a worker, or the caller of ``enqueue``, ``run_pending``,
``retry_dead`` ...), once the store holds the change, so a callback that
looks the job up sees it as the event says. Callbacks are called one after
the other and must be quick: a metrics counter, a log line, a signal. One
that raises is logged at ERROR and changes nothing, for the job or for the
callbacks after it.

Events are delivered in the process where the change was made. What a store
does on its own is not an event: recovering the claims of a process that
died, dropping the oldest dead job beyond ``dead_letter_limit``, forgetting
an expired completed job.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jobq._logs import job_extra
from jobq.types import AttemptError, Job

__all__ = ["Event", "EventKind", "Subscriber"]

logger = logging.getLogger("jobq")


class EventKind(enum.StrEnum):
    """What happened to a job."""

    ENQUEUED = "enqueued"  #: added (a duplicate of a held key is not)
    STARTED = "started"  #: an attempt begins (the store holds the claim)
    SUCCEEDED = "succeeded"  #: an attempt returned; the job is finished
    RETRYING = "retrying"  #: an attempt failed; the job waits for its retry
    DEAD = "dead"  #: an attempt failed and the job is in the dead-letter list
    REVIVED = "revived"  #: ``retry_dead`` made a dead job pending again
    DELETED = "deleted"  #: ``delete_dead`` removed a dead job
    CANCELLED = "cancelled"  #: ``cancel`` removed a pending job


@dataclass(frozen=True, slots=True)
class Event:
    """One change to one job.

    ``attempt`` is the attempt's number (1 on the first try) for
    ``started``, ``succeeded``, ``retrying`` and ``dead``, and 0 for the
    other kinds. ``at`` is when it happened (epoch seconds, the queue's
    clock). ``duration`` is how long the attempt ran (``succeeded``,
    ``retrying``, ``dead``), ``wait`` how long the job waited from being due
    to starting (``started``); both in seconds of the queue's clock.
    ``error`` is the failed attempt (``retrying``, ``dead``); ``result`` what
    the attempt returned (``succeeded``). ``job`` is the ``Job`` the attempt
    ran (attempt events only): its payload, key and task.
    """

    kind: EventKind
    job_id: int
    task: str | None
    attempt: int
    at: float
    duration: float | None = None
    wait: float | None = None
    error: AttemptError | None = None
    result: Any = None
    job: Job[Any] | None = None


#: A callback of ``queue.subscribe``.
Subscriber = Callable[[Event], object]


class Subscribers:
    """The callbacks of one queue. Publishing reads a tuple that subscribing
    replaces whole, so it takes no lock, and costs one truth test when
    nobody subscribed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.callbacks: tuple[Subscriber, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.callbacks)

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Add ``callback``; the function returned removes it (idempotent)."""
        if not callable(callback):
            raise TypeError(f"an event subscriber must be callable, not {callback!r}")
        entry = _Entry(callback)  # the same callback twice is two subscriptions
        with self._lock:
            self.callbacks = (*self.callbacks, entry)

        def unsubscribe() -> None:
            with self._lock:
                self.callbacks = tuple(c for c in self.callbacks if c is not entry)

        return unsubscribe

    def publish(self, event: Event) -> None:
        for callback in self.callbacks:
            try:
                callback(event)
            except Exception:
                logger.exception(
                    "an event subscriber failed on %s of job %d; ignored",
                    event.kind,
                    event.job_id,
                    extra=job_extra(event.job_id, event.task, event.attempt or None),
                )


class _Entry:
    """One subscription: the callback, with an identity of its own."""

    __slots__ = ("callback",)

    def __init__(self, callback: Subscriber) -> None:
        self.callback = callback

    def __call__(self, event: Event) -> object:
        return self.callback(event)
