"""Events: what happened to a job, told to whoever subscribed, after the store
recorded it.

``queue.subscribe(callback)`` registers a callback and returns the function
that unregisters it; ``kinds=`` (an ``EventKind`` or several) limits it to
those kinds, and an event no callback wants is not built at all. Each
callback receives an ``Event`` in the thread that made the change (a
worker, or the caller of ``enqueue``, ``run_pending``, ``retry_dead`` ...),
once the store holds the change, so a callback that looks the job up sees
it as the event says. Callbacks are called one after
the other and must be quick: a metrics counter, a log line, a signal. One
that raises is logged at ERROR and changes nothing, for the job or for the
callbacks after it.

Events are delivered in the process where the change was made. What a store
does on its own is not an event: recovering the claims of a process that
died, dropping the oldest dead job beyond ``dead_letter_limit``, forgetting
an expired completed job.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
from collections.abc import Callable, Iterable
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
    #: A waiting job became pending: its last parent (``after=``) finished.
    RELEASED = "released"


@dataclass(frozen=True, slots=True)
class Event:
    """One change to one job.

    ``attempt`` is the attempt's number (1 on the first try) for
    ``started``, ``succeeded``, ``retrying`` and ``dead``, and 0 for the
    other kinds. ``at`` is when it happened (epoch seconds, the queue's
    clock). ``duration`` is how long the attempt ran (``succeeded``,
    ``retrying``, ``dead``), ``wait`` how long the job waited from being due
    to starting the attempt (``started``, and again at its end:
    ``succeeded``, ``retrying``, ``dead``, so that one subscription to the
    ends sees both); both in seconds of the queue's clock, and both ``None``
    on the end of a failed attempt that began before anyone subscribed to
    attempt events (its start was not read).
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

#: What ``queue.subscribe(kinds=...)`` takes: a kind, or several.
Kinds = EventKind | str | Iterable[EventKind | str]


class _Draft:
    """An ``Event``'s layout without its frozen ``__setattr__`` (see
    ``new_event``)."""

    __slots__ = Event.__slots__


_allocate = object.__new__


def new_event(kind: EventKind, job_id: int, task: str | None, attempt: int,
              at: float, duration: float | None = None,
              wait: float | None = None, error: AttemptError | None = None,
              result: Any = None, job: Job[Any] | None = None) -> Event:  # fmt: skip
    """``Event(...)``, cheaper. The frozen dataclass's own ``__init__`` sets
    each field with ``object.__setattr__``, three times as slow, and jobq
    builds up to three events per job; a draft has the same slots, set by
    plain stores, and then takes the ``Event`` class (Python allows that
    between classes of the same layout): what comes out is the frozen
    dataclass itself. A function, not the draft's ``__init__``: calling a
    class runs its ``__init__`` in a frame of its own C call, which costs
    more than the function's frame."""
    draft: Any = _allocate(_Draft)
    draft.kind = kind
    draft.job_id = job_id
    draft.task = task
    draft.attempt = attempt
    draft.at = at
    draft.duration = duration
    draft.wait = wait
    draft.error = error
    draft.result = result
    draft.job = job
    draft.__class__ = Event
    event: Event = draft
    return event


class Subscribers:
    """The callbacks of one queue, by the kind of event each wants: one
    tuple per kind, replaced whole when someone subscribes, so publishing
    takes no lock, and an event nobody wants is not even built (its tuple
    is empty: one attribute read and a truth test)."""

    enqueued: tuple[Subscriber, ...]
    started: tuple[Subscriber, ...]
    succeeded: tuple[Subscriber, ...]
    retrying: tuple[Subscriber, ...]
    dead: tuple[Subscriber, ...]
    revived: tuple[Subscriber, ...]
    deleted: tuple[Subscriber, ...]
    cancelled: tuple[Subscriber, ...]
    released: tuple[Subscriber, ...]

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Each subscription: its callback and kinds (a tuple of its own, so
        #: the same callback twice is two subscriptions).
        self._entries: tuple[tuple[Subscriber, frozenset[EventKind]], ...] = ()
        #: Whether anyone wants an event about an attempt: the runner builds
        #: a ``Job`` and reads the clock for them only then.
        self.attempts = False
        self._index()

    def of(self, kind: EventKind) -> tuple[Subscriber, ...]:
        """The callbacks that want ``kind``."""
        callbacks: tuple[Subscriber, ...] = getattr(self, kind._value_)
        return callbacks

    def subscribe(
        self, callback: Subscriber, kinds: Kinds | None = None
    ) -> Callable[[], None]:
        """Add ``callback`` for ``kinds`` (default: every kind); the function
        returned removes it (idempotent)."""
        if not callable(callback):
            raise TypeError(f"an event subscriber must be callable, not {callback!r}")
        entry = (callback, _kinds(kinds))
        with self._lock:
            self._entries = (*self._entries, entry)
            self._index()

        def unsubscribe() -> None:
            with self._lock:
                self._entries = tuple(e for e in self._entries if e is not entry)
                self._index()

        return unsubscribe

    def _index(self) -> None:
        """Rebuild the tuple of each kind (under the lock, or in ``__init__``)."""
        for kind in EventKind:
            wanting = tuple(c for c, kinds in self._entries if kind in kinds)
            setattr(self, kind.value, wanting)
        self.attempts = bool(
            self.started or self.succeeded or self.retrying or self.dead
        )


def _kinds(kinds: Kinds | None) -> frozenset[EventKind]:
    """``kinds=`` checked: a clear error at ``subscribe``, not at an event."""
    if kinds is None:
        return frozenset(EventKind)
    given = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    known = {kind.value for kind in EventKind}
    unknown = [k for k in given if k not in known]
    if unknown or not given:
        raise ValueError(
            f"kinds= takes event kinds ({', '.join(sorted(known))}), "
            f"not {unknown[0] if unknown else 'nothing'}"
        )
    return frozenset(EventKind(k) for k in given)


def publish(callbacks: tuple[Subscriber, ...], event: Event) -> None:
    """Call each of ``callbacks`` (``subscribers.of(kind)``) with ``event``;
    raises nothing."""
    for callback in callbacks:
        try:
            callback(event)
        except BaseException:  # SystemExit too: it changes nothing
            # Nor does a failure to log it (a filter's bug): callers need
            # no guard of their own.
            with contextlib.suppress(BaseException):
                logger.exception(
                    "an event subscriber failed on %s of job %d; ignored",
                    event.kind,
                    event.job_id,
                    extra=job_extra(event.job_id, event.task, event.attempt or None),
                )
