"""Periodic jobs: named tasks that a queue enqueues once per slot of a schedule.

No extra process and no leader: every process whose queue runs workers (or
``run_pending``) looks at its schedules when a slot falls due, and asks the
store to enqueue that slot (``ScheduleStore.enqueue_slot``), which does so
for whichever process asks first, in one write with the schedule's state.
The job's key names schedule and slot (``periodic:NAME@2026-03-29T01:00:00Z``),
so a slot's job is visible as such.

When a slot is missed: at the first look in a process, the slots since the
stored last slot were missed while no process ran (``catch_up``: the latest
one, none, or all up to ``max_catch_up``). Later, a slot found late (a busy
worker, a clock stepped forward) is enqueued as the latest one (``"all"``:
each, up to ``max_catch_up``). A schedule the store does not know yet, or
whose expression changed, starts with the first slot after it was declared
in this process: no burst. Slots enqueued together in one look never count
as overlapping one another.
"""

from __future__ import annotations

import datetime as dt
import functools
import inspect
import logging
import math
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobq._logs import job_extra
from jobq._periodic.slots import CronSlots, EverySlots, Slots, zone
from jobq._time import to_seconds
from jobq.options import CatchUp, Overlap
from jobq.stores.base import NewJob, ScheduleStore, SlotState
from jobq.types import Schedule

if TYPE_CHECKING:
    from jobq.tasks import Task

logger = logging.getLogger("jobq")

OVERLAPS = ("skip", "allow")
CATCH_UPS = ("latest", "none", "all")

#: Seconds after which a store that failed is asked again.
RETRY_AFTER = 1.0

#: Where the key of a slot's job starts.
KEY_PREFIX = "periodic:"
#: How a job run by hand (``run_schedule``) ends its key.
RUN_NOW_SUFFIX = " (run now)"
#: The ``meta`` header of a job run by hand: who asked.
RUN_BY = "jobq.run_by"
#: How many of its next slots a schedule lists (``Schedule.next_slots``).
NEXT_SLOTS = 5

#: The shortest ``every=``, in seconds. Slots are epoch seconds in a float
#: (as the stores keep them), which tells instants 61 µs apart at worst
#: (in the year 9999); the job's key and ``scheduled_at`` name them to the
#: microsecond. 1 ms keeps every slot a distinct instant with a distinct
#: key, with room to spare; and a shorter period asks for more jobs than a
#: look per slot can enqueue.
MIN_EVERY = 0.001
#: The longest ``every=``, in seconds: 100 years (of 365.25 days). Slots
#: are the multiples of the period since 1970, so a longer one has no slot
#: before 2070 (most likely a mistaken unit), and the next slot after any
#: clock before the year 9899 stays a ``datetime`` (year 9999 at most).
MAX_EVERY = 36525 * 86400.0


@dataclass(frozen=True)
class Periodic:
    """One schedule: its task, its slots and what to do about overlap and
    missed slots."""

    task: Task[Any, Any]
    slots: Slots
    overlap: Overlap
    catch_up: CatchUp
    max_catch_up: int
    wants_slot: bool  # the function takes ``scheduled_at``

    @property
    def name(self) -> str:
        return self.task.name

    @property
    def stored_expression(self) -> str:
        """The expression as the store keeps it: a change of it, or of the
        time zone, starts the schedule afresh."""
        return f"{self.slots.expression} @ {self.slots.tz}"

    def payload(self, slot: float) -> dict[str, Any]:
        kwargs = {"scheduled_at": iso(slot)} if self.wants_slot else {}
        return {"args": [], "kwargs": kwargs}


def slot_key(name: str, slot: float) -> str:
    """The key of the job of ``name``'s ``slot``."""
    return f"{KEY_PREFIX}{name}@{iso(slot)}"


def run_now_key(name: str, now: float) -> str:
    """The key of a job of ``name`` run by hand at ``now``: never a slot's."""
    return f"{KEY_PREFIX}{name}@{iso(now)}{RUN_NOW_SUFFIX}"


def unknown_schedule(name: str, known: Iterable[str]) -> ValueError:
    """The error of an action on a schedule no code declares and no store
    keeps."""
    names = ", ".join(repr(n) for n in sorted(set(known))[:10]) or "none"
    return ValueError(
        f"no schedule {name[:100]!r}: none is declared on this queue or stored "
        f"(known: {names})"
    )


def not_declared(name: str) -> ValueError:
    """The error of a run by hand of a schedule this process's code does
    not declare: its task and options are in the code."""
    return ValueError(
        f"schedule {name[:100]!r} is not declared by this process's code, so its "
        "job cannot be built here: run it where the code declares it (jobq "
        "--app, or the application's own dashboard)"
    )


def iso(slot: float) -> str:
    """A slot as UTC ISO 8601 text, "Z" for UTC, seconds only when whole."""
    moment = dt.datetime.fromtimestamp(slot, dt.UTC)
    spec = "seconds" if moment.microsecond == 0 else "microseconds"
    return moment.isoformat(timespec=spec).replace("+00:00", "Z")


def make_slots(every: object, cron: object, tz: str) -> Slots:
    """The slots of ``every=`` or ``cron=`` (exactly one) in ``tz``."""
    if (every is None) == (cron is None):
        raise TypeError("periodic needs exactly one of every= or cron=")
    if every is not None:
        if tz != "UTC":
            raise ValueError("tz= applies to cron= schedules; every= slots are UTC")
        return EverySlots(check_period(every))
    if not isinstance(cron, str):
        raise TypeError(f"cron must be a five-field cron string, not {cron!r}")
    return CronSlots(cron, tz)


def check_period(every: object) -> float:
    """``every=`` in seconds; ``ValueError`` outside ``MIN_EVERY`` to
    ``MAX_EVERY``, whose slots the arithmetic cannot tell apart, or that no
    ``datetime`` holds."""
    period = to_seconds(every, "every")
    if period < MIN_EVERY:
        raise ValueError(
            f"every must be at least {MIN_EVERY:g} seconds (1 ms), not {every!r}: "
            f"shorter periods' slots are not reliably distinct instants"
        )
    if period > MAX_EVERY:
        raise ValueError(
            f"every must be at most {MAX_EVERY:.0f} seconds (100 years), not "
            f"{every!r}; for a yearly schedule use cron= (e.g. '0 0 1 1 *')"
        )
    return period


def slot_caller(func: Callable[..., Any], tz: str) -> tuple[Callable[..., Any], bool]:
    """The function a periodic task registers: it passes ``scheduled_at`` (an
    aware ``datetime`` in ``tz``) if ``func`` declares it; and whether it does.
    ``TypeError`` for a function that needs other arguments."""
    params: Mapping[str, inspect.Parameter]
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        params = {}  # a builtin: call it bare
    wants = "scheduled_at" in params
    required = [
        name for name, p in params.items()
        if p.default is p.empty and name != "scheduled_at"
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]  # fmt: skip
    if required:
        raise TypeError(
            f"a periodic function takes no arguments, or only scheduled_at; "
            f"{getattr(func, '__qualname__', func)!r} needs {', '.join(required)}"
        )
    if not wants:
        return func, False
    place = zone(tz)

    @functools.wraps(func)
    def call(scheduled_at: str | dt.datetime | None = None) -> Any:
        if isinstance(scheduled_at, str):
            scheduled_at = dt.datetime.fromisoformat(scheduled_at).astimezone(place)
        return func(scheduled_at=scheduled_at)

    return call, True


class Scheduler:
    """A queue's schedules in one process: when the next slot falls due
    (``next_wake``), and ``tick``, which asks the store for the due slots.

    Rebuilt in a forked child (it holds this process's view only); the
    schedules themselves (``periodics``) belong to the queue.
    """

    def __init__(
        self,
        periodics: Mapping[str, Periodic],
        store: ScheduleStore,
        clock: Callable[[], float],
        prepare: Callable[[Periodic, float], NewJob],
        enqueued: Callable[[int, str, float], object],
    ) -> None:
        self._periodics = periodics
        self._store = store
        self._clock = clock
        self._prepare = prepare
        self._enqueued = enqueued  # (job id, task, now): the ``enqueued`` event
        self._lock = threading.Lock()
        #: Per schedule: the latest slot this process handled (or found
        #: handled); absent until its first look.
        self._last: dict[str, float] = {}
        #: When this process declared each schedule (or was forked).
        self._declared = dict.fromkeys(periodics, clock())
        #: The schedules whose slots could not be computed at their last
        #: look: logged once, not at every look, until they work again.
        self._failing: set[str] = set()
        #: When any schedule next needs a look (epoch seconds; -inf: now).
        self.next_wake = -math.inf if periodics else math.inf

    def added(self, name: str) -> None:
        """A schedule was declared (again): look at once."""
        self._declared[name] = self._clock()
        self._last.pop(name, None)
        self._failing.discard(name)
        self.next_wake = -math.inf

    def tick(self) -> int:
        """Enqueue the slots that fell due; how many jobs were added. A tick
        already running in another thread makes this one a no-op. A store
        that fails is logged and asked again ``RETRY_AFTER`` seconds later."""
        if not self._lock.acquire(blocking=False):
            return 0
        try:
            now = self._clock()
            if now < self.next_wake:
                return 0
            try:
                added, wake = self._look(now)
            except Exception:
                logger.exception("periodic jobs: reading the schedules failed")
                added, wake = 0, now + RETRY_AFTER
            self.next_wake = wake
            return added
        finally:
            self._lock.release()

    def _look(self, now: float) -> tuple[int, float]:
        """``tick``'s work: the jobs added, and when to look next. A store
        that fails to list the schedules fails the whole look (``tick``
        logs it); a schedule whose slots cannot be computed fails only its
        own part, so that one bad schedule never stops the others."""
        added = 0
        stored: dict[str, SlotState] | None = None
        wake = math.inf
        for name, periodic in list(self._periodics.items()):
            if name not in self._last and stored is None:
                stored = {s.name: s for s in self._store.schedule_states()}
            try:
                count, next_look = self._look_at(periodic, stored or {}, now)
            except Exception:
                if name not in self._failing:  # once, not at every look
                    logger.exception(
                        "periodic %s (%s): computing its slots failed; it is "
                        "skipped and tried again every %g s (logged again only "
                        "after it worked); the other schedules carry on",
                        name, periodic.stored_expression, RETRY_AFTER,
                    )  # fmt: skip
                self._failing.add(name)
                count, next_look = 0, now + RETRY_AFTER
            else:
                self._failing.discard(name)
            added += count
            wake = min(wake, next_look)
        return added, wake

    def _look_at(
        self, periodic: Periodic, stored: Mapping[str, SlotState], now: float
    ) -> tuple[int, float]:
        """One schedule's part of a look: the jobs added, and when it next
        needs a look."""
        name = periodic.name
        if name in self._last:
            slots = self._due(periodic, self._last[name], now)
        else:
            slots = self._first_look(periodic, stored.get(name), now)
        added = 0
        wake = math.inf
        for index, slot in enumerate(slots):
            enqueued = self._enqueue(periodic, slot, now, first=index == 0)
            if enqueued is None:  # failed: this slot again, soon
                wake = now + RETRY_AFTER
                break
            added += enqueued
            self._last[name] = max(self._last[name], slot)
        return added, min(wake, periodic.slots.after(max(now, self._last[name])))

    def _first_look(
        self, periodic: Periodic, state: SlotState | None, now: float
    ) -> list[float]:
        """The slots missed while no process of this schedule ran."""
        slots = periodic.slots
        if state is None or state.expression != periodic.stored_expression:
            # New, or changed: from the first slot after its declaration on.
            declared = self._declared.get(periodic.name, now)
            start = slots.at_or_before(min(declared, now))
            self._last[periodic.name] = start
            return self._due(periodic, start, now)
        self._last[periodic.name] = state.last_slot
        if periodic.catch_up == "none":
            self._last[periodic.name] = max(state.last_slot, slots.at_or_before(now))
            return []
        return self._due(periodic, state.last_slot, now)

    @staticmethod
    def _due(periodic: Periodic, last: float, now: float) -> list[float]:
        """The slots after ``last`` to enqueue now: the latest one, or (for
        ``catch_up="all"``) each, up to ``max_catch_up``."""
        slots = periodic.slots
        if periodic.catch_up == "all":
            return slots.between(last, now, periodic.max_catch_up)
        latest = slots.at_or_before(now)
        return [latest] if latest > last else []

    def _enqueue(
        self, periodic: Periodic, slot: float, now: float, *, first: bool
    ) -> int | None:
        """Ask the store for one slot; 1 if this process added its job,
        ``None`` if the store failed. ``first``: the first slot of this
        look, the only one that may overlap a job of an earlier look."""
        try:
            result = self._store.enqueue_slot(
                periodic.name,
                periodic.stored_expression,
                slot,
                self._prepare(periodic, slot),
                now,
                skip_running=first and periodic.overlap == "skip",
            )
        except Exception:
            logger.exception(
                "periodic %s: enqueueing the slot %s failed; it is tried again "
                "shortly", periodic.name, iso(slot),
            )  # fmt: skip
            return None
        if result is None:
            return 0  # another process (or an earlier look) enqueued it
        if result.duplicate:
            logger.info(
                "periodic %s: skipped the slot %s: job %d of an earlier slot "
                "is still pending or running (overlap='skip')",
                periodic.name, iso(slot), result.id,
                extra=job_extra(result.id, periodic.name),
            )  # fmt: skip
            return 0
        self._enqueued(result.id, periodic.name, now)
        return 1

    def schedules(self, states: list[SlotState], now: float) -> list[Schedule]:
        """What ``JobQueue.schedules`` shows: each declared schedule, then
        each stored one no longer declared (orphaned)."""
        stored = {state.name: state for state in states}
        shown = []
        for name, periodic in self._periodics.items():
            state = stored.pop(name, None)
            slots = periodic.slots
            last = None if state is None else state.last_slot
            start = max(now, last or now, self._last.get(name, now))
            next_slots = _next_slots(slots, start)
            shown.append(
                Schedule(
                    name=name,
                    expression=slots.expression,
                    tz=slots.tz,
                    next_slot=next_slots[0] if next_slots else None,
                    last_slot=None if last is None else _datetime(last, slots.tz),
                    last_job_id=None if state is None else state.last_job_id,
                    next_slots=next_slots,
                    **_pause(state, slots.tz),
                )
            )
        for state in stored.values():
            expression, _, tz = state.expression.rpartition(" @ ")
            shown.append(
                Schedule(
                    name=state.name,
                    expression=expression,
                    tz=tz,
                    next_slot=None,
                    last_slot=_datetime(state.last_slot, "UTC"),
                    last_job_id=state.last_job_id,
                    orphaned=True,
                    **_pause(state, "UTC"),
                )
            )
        return shown


def _pause(state: SlotState | None, tz: str) -> dict[str, Any]:
    """A schedule's pause as ``Schedule`` shows it."""
    if state is None or state.paused_at is None:
        return {}
    return {"paused_at": _datetime(state.paused_at, tz), "paused_by": state.paused_by}


def _next_slots(slots: Slots, start: float) -> tuple[dt.datetime, ...]:
    """The first ``NEXT_SLOTS`` slots after ``start``, fewer where they
    cannot be computed (a cron's after the year 9999): one such schedule
    must not break the list, nor the dashboard that shows it."""
    found: list[dt.datetime] = []
    try:
        while len(found) < NEXT_SLOTS:
            start = slots.after(start)
            moment = _datetime(start, slots.tz)
            if moment is None:
                break
            found.append(moment)
    except Exception:
        logger.debug("periodic jobs: a next slot cannot be computed", exc_info=True)
    return tuple(found)


def _datetime(slot: float, tz: str) -> dt.datetime | None:
    """A slot as an aware datetime in ``tz``; ``None`` if no ``datetime``
    holds it (after the year 9999, or a stored slot that is no time)."""
    try:
        return dt.datetime.fromtimestamp(slot, zone(tz))
    except (OverflowError, ValueError, OSError):
        return None
