"""Limits in memory (the memory and JSON stores): per concrete key, the
attempts running and the rate's ``tat``, and the jobs it holds back.

A held job leaves the due jobs (``_due``) for a heap of its key, in the same
order (priority, due time, id), so no claim looks at it again: jobs under no
limit, or another, are claimed past it (no head-of-line blocking). It goes
back, the best first, when its key allows: a slot freed (``free``) or the
rate's time come (``ready``, whose times ``next_ready`` gives the store's
``next_due``). Every call is O(log n) in the jobs held, with the store's
lock held (the caller's).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable

from jobq.stores.limits import governing, has_room, next_tat, rate_allows, rate_ready_at
from jobq.types import Limit, LimitUsage

#: A due job as the memory store orders them: (-priority, run_at, id).
Item = tuple[int, float, int]


class KeyState:
    """One concrete key: its declaration, attempts running, the rate's
    ``tat``, the jobs it holds (a heap), and whether a rate wait for it is
    in ``Limiter._waits``."""

    __slots__ = ("held", "limit", "running", "tat", "waiting_rate")

    def __init__(self, limit: Limit) -> None:
        self.limit = limit
        self.running = 0
        self.tat = float("-inf")
        self.held: list[Item] = []
        self.waiting_rate = False


class Limiter:
    """The limits of one memory store."""

    def __init__(self) -> None:
        self._limits: dict[str, Limit] = {}
        self._keys: dict[str, KeyState] = {}
        self._held_by: dict[int, str] = {}  # job id -> the key holding it
        self._waits: list[tuple[float, str]] = []  # (when its rate allows, key)

    # -- declarations ----------------------------------------------------------

    def declare(self, limit: Limit, now: float) -> tuple[Limit | None, list[Item]]:
        """Keep ``limit``: the one it replaced when that differed, and the
        held jobs its keys now let go (keys it governs take it at once,
        their counts kept: a limit raised lets more run now)."""
        old = self._limits.get(limit.name)
        self._limits[limit.name] = limit
        changed = []
        for key, state in self._keys.items():
            if state.limit.name == limit.name or limit.matches(key):
                state.limit = governing(self._limits.values(), key) or limit
                changed.append((key, state))
        replaced = old if old is not None and old != limit else None
        return replaced, self._next(changed, now)

    def declarations(self) -> list[Limit]:
        return sorted(self._limits.values(), key=lambda limit: limit.name)

    # -- the claim -------------------------------------------------------------

    def admit(
        self, item: Item, keys: tuple[str, ...], now: float
    ) -> tuple[bool, list[Item]]:
        """Take a slot of each key and a start of each rate for the job of
        ``item`` (a claim); or, if one of them does not allow it now, hold
        it there and take nothing. Whether it was admitted, and the held
        jobs that may run now instead, due again (see ``_next``)."""
        states: list[tuple[str, KeyState]] = []
        for key in keys:
            state = self._state(key)
            if state is None:
                continue  # no declaration (any more): no limit
            if not self._allows(state, now):
                self._hold(item, key, state, now)
                return False, self._next(states, now)
            states.append((key, state))
        for _, state in states:
            if state.limit.concurrency is not None:
                state.running += 1
            state.tat = next_tat(state.limit, state.tat, now)
        return True, self._next(states, now)

    def free(self, keys: tuple[str, ...], now: float) -> list[Item]:
        """The slots of an attempt that ended; the held jobs that may run
        now, due again."""
        states = []
        for key in keys:
            state = self._keys.get(key)
            if state is not None and state.limit.concurrency is not None:
                state.running = max(state.running - 1, 0)
                states.append((key, state))
        return self._next(states, now)

    def ready(self, now: float) -> list[Item]:
        """The held jobs whose key's rate allows one more start by ``now``,
        due again."""
        states = []
        waits = self._waits
        while waits and waits[0][0] <= now:
            _, key = heapq.heappop(waits)
            state = self._keys[key]
            state.waiting_rate = False
            states.append((key, state))
        return self._next(states, now)

    def next_ready(self) -> float | None:
        """When a rate next lets a held job go (``None``: none waits on one)."""
        return self._waits[0][0] if self._waits else None

    # -- what it shows ----------------------------------------------------------

    def held_by(self, job_id: int) -> str | None:
        return self._held_by.get(job_id)

    def cancelled(self, job_id: int, keys: tuple[str, ...], now: float) -> list[Item]:
        """A pending job under ``keys`` is no longer pending (cancelled): held,
        its heap item is skipped when it surfaces; let go by a key that has
        not started it yet, that key may let another go instead."""
        if self._held_by.pop(job_id, None) is not None:
            return []
        states = [(key, self._keys[key]) for key in keys if key in self._keys]
        return self._next(states, now)

    def usage(self) -> list[LimitUsage]:
        """Each declaration with its keys' running attempts and held jobs."""
        running: Counter[str] = Counter()
        waiting: Counter[str] = Counter()
        for state in self._keys.values():
            running[state.limit.name] += state.running
        for key in self._held_by.values():
            waiting[self._keys[key].limit.name] += 1
        return [
            LimitUsage(
                limit.name,
                limit.concurrency,
                limit.rate_text,
                limit.burst,
                running[limit.name],
                waiting[limit.name],
            )
            for limit in self.declarations()
        ]

    def restart(self, declarations: Iterable[Limit]) -> list[Item]:
        """Nothing runs any more (a store loaded again, a forked child): keep
        only ``declarations``; the jobs that were held, due again."""
        held = [
            item
            for state in self._keys.values()
            for item in state.held
            if item[2] in self._held_by
        ]
        self._limits = {limit.name: limit for limit in declarations}
        self._keys.clear()
        self._held_by.clear()
        self._waits.clear()
        return held

    # -- helpers ----------------------------------------------------------------

    def _state(self, key: str) -> KeyState | None:
        state = self._keys.get(key)
        if state is None:
            limit = governing(self._limits.values(), key)
            if limit is None:
                return None
            state = self._keys[key] = KeyState(limit)
        return state

    @staticmethod
    def _allows(state: KeyState, now: float) -> bool:
        return has_room(state.limit, state.running) and rate_allows(
            state.limit, state.tat, now
        )

    def _hold(self, item: Item, key: str, state: KeyState, now: float) -> None:
        heapq.heappush(state.held, item)
        self._held_by[item[2]] = key
        self._wait_rate(key, state, now)

    def _next(self, states: list[tuple[str, KeyState]], now: float) -> list[Item]:
        """What each of these keys does with the jobs it holds: one that
        allows a start now lets its best go (due again: a claim admits it, or
        holds it on another of its keys); one whose rate alone forbids it
        waits for the rate (``ready``); one that is full waits for ``free``."""
        released = []
        for key, state in states:
            if not state.held:
                continue
            if self._allows(state, now):
                item = self._release(key, state)
                if item is not None:
                    released.append(item)
            else:
                self._wait_rate(key, state, now)
        return released

    def _wait_rate(self, key: str, state: KeyState, now: float) -> None:
        """Have ``ready`` look at the key when its rate allows a start, if
        that is what holds it (it has room, and the time is ahead)."""
        if state.waiting_rate or not has_room(state.limit, state.running):
            return
        at = rate_ready_at(state.limit, state.tat)
        if at > now:
            state.waiting_rate = True
            heapq.heappush(self._waits, (at, key))

    def _release(self, key: str, state: KeyState) -> Item | None:
        """The best job ``key`` holds, no longer held (skipping cancelled
        ones); ``None`` if it holds none."""
        held = state.held
        while held:
            item = heapq.heappop(held)
            if self._held_by.get(item[2]) == key:
                del self._held_by[item[2]]
                return item
        return None
