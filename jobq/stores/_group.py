"""Group commit: enqueues that arrive together are written in one transaction.

A commit costs the same whatever it holds (a round trip and a WAL flush on
PostgreSQL, a write of the WAL on SQLite), so threads that enqueue at the
same time share one. A caller that finds no write of this store's in
flight writes its own jobs at once: a lone producer never waits. Callers
that arrive meanwhile queue up; when the write ends, they are the next
group, and the first of them writes it, for all of them; each returns once
the transaction that holds its own jobs committed. A store may let a few
writes be in flight at once (``in_flight``: PostgreSQL, whose commits wait
for a WAL flush that concurrent transactions share).

A group that fails is no caller's failure: the leader then writes each
call alone, one transaction after the other (as if they had come one by
one: ``max_pending`` counts exactly), and each caller gets its own outcome
(a bad parent, ``QueueFull``, a value the database refuses). Only
``OutcomeUnknown`` (the connection lost during the commit) is everyone's:
the transaction held all their jobs, and none can know whether it committed.

Handlers' time limits and cancellations never land here: jobq raises them at
a line of the handler's own code only (``jobq._worker.interrupt``), so a
caller waiting in a group gets its answer first. An exception raised
asynchronously by other means (``KeyboardInterrupt``) in a waiting caller
withdraws its jobs if no write took them yet, and hands on the lead it may
have been given: the others are never left waiting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import NamedTuple

from jobq.errors import OutcomeUnknown
from jobq.stores.base import NewJob
from jobq.types import Enqueued


class Call(NamedTuple):
    """One caller's ``add``: its jobs, its clock reading and its cap."""

    jobs: Sequence[NewJob]
    now: float
    max_pending: int | None


#: Writes calls in one transaction, all or none: each call's jobs' results.
Write = Callable[[Sequence[Call]], list[list[Enqueued]]]

# What a waiting caller is told when it wakes.
_WAITING, _LEAD, _DONE, _ALONE = range(4)


class _Waiter:
    """A caller queued behind the write in flight."""

    __slots__ = ("added", "call", "error", "group", "state", "wake")

    def __init__(self, call: Call) -> None:
        self.call = call
        self.state = _WAITING
        self.group: list[_Waiter] = []  # when told to lead: the calls to write
        self.added: list[Enqueued] = []
        self.error: Exception | None = None  # its outcome when _DONE, if it failed
        self.wake = threading.Lock()
        self.wake.acquire()  # released once, when its state is set

    def outcome(self) -> list[Enqueued]:
        if self.error is not None:
            raise self.error
        return self.added


class GroupCommit:
    """Writes of one store's ``add`` calls, grouped while one is in flight."""

    def __init__(self, write: Write, *, in_flight: int = 1) -> None:
        self._write = write
        self._in_flight = in_flight  # writes at once, before callers queue
        self._lock = threading.Lock()
        self._writing = 0  # callers that write, or were told to lead
        self._queued: list[_Waiter] = []

    def add(self, call: Call) -> list[Enqueued]:
        """Write ``call``'s jobs, with those of callers that come meanwhile."""
        waiter = None
        with self._lock:
            if self._writing < self._in_flight:
                self._writing += 1
            else:
                waiter = _Waiter(call)
                self._queued.append(waiter)
        if waiter is not None:
            return self._wait(waiter)
        try:
            return self._write([call])[0]
        finally:
            self._pass_on()

    def _wait(self, waiter: _Waiter) -> list[Enqueued]:
        try:
            waiter.wake.acquire()
            state = waiter.state
        except BaseException:
            self._withdraw(waiter)
            raise
        if state == _LEAD:
            return self._lead(waiter)
        if state == _DONE:
            return waiter.outcome()
        return self._write([waiter.call])[0]  # _ALONE: the leader was stopped

    def _lead(self, leader: _Waiter) -> list[Enqueued]:
        """Write the group handed over (the leader's call first) and tell
        the others."""
        group = leader.group
        others = group[1:]
        try:
            self._write_group(group)
        except BaseException:
            for waiter in others:
                if waiter.state != _DONE:
                    waiter.state = _ALONE
            raise
        finally:
            for waiter in others:
                waiter.wake.release()
            self._pass_on()
        return leader.outcome()

    def _write_group(self, group: list[_Waiter]) -> None:
        """Each waiter's outcome: from one transaction for all, or, if that
        fails, from one per call, one after the other (as if each had come
        alone: a bad call fails only itself, and a cap counts exactly)."""
        try:
            added = self._write([waiter.call for waiter in group])
        except OutcomeUnknown as exc:
            for waiter in group:
                waiter.error = OutcomeUnknown(str(exc))
                waiter.error.__cause__ = exc
                waiter.state = _DONE
            return
        except Exception:
            if len(group) == 1:
                raise
            for waiter in group:
                try:
                    waiter.added = self._write([waiter.call])[0]
                except Exception as exc:  # noqa: BLE001 - its caller raises it
                    waiter.error = exc
                waiter.state = _DONE
            return
        for waiter, its in zip(group, added, strict=True):
            waiter.added = its
            waiter.state = _DONE

    def _pass_on(self, group: list[_Waiter] | None = None) -> None:
        """A write is over: the callers queued now (or ``group``) are the
        next group, led by the first of them."""
        with self._lock:
            if group is None:
                group, self._queued = self._queued, []
            if group:
                group[0].group = group
                group[0].state = _LEAD
                group[0].wake.release()
            else:
                self._writing -= 1

    def _withdraw(self, waiter: _Waiter) -> None:
        """A waiting caller leaves (an exception raised in its thread): its
        jobs go unwritten unless a write took them already, and a group it
        was given to lead passes to the next caller in it."""
        with self._lock:
            if waiter in self._queued:
                self._queued.remove(waiter)
                return
        if waiter.state == _LEAD:  # nobody else holds its group
            self._pass_on(waiter.group[1:])
