"""Limits in the SQLite store (see "Limits" in ``jobq.stores.base``): what a
claim's write transaction does for the jobs that have limits, and nothing
for those without.

A claim first releases the held jobs of the keys whose ``ready_at`` came
(a slot freed, or the rate allows a start again: ``READY_KEYS``), as many
as the key allows now, back to ``ready`` in their run order. It then claims
as ever; each claimed row with limits is admitted (a slot of each key, a
start of each rate) or held by the first key that refuses it. A key's
``ready_at`` says when it may release again: its rate's next start, or
NULL while its slots are full (``free_slots``, which frees one, sets it to 0).

No trigger does any of it: the statements that hold or release a job keep
its key's ``held``, and the store calls ``free_slots`` (and ``cancelled``)
only for a claim (a job) with limits, so a job under none runs exactly the
statements it ran before limits existed.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from jobq.stores.limits import NEVER, governing, has_room, next_tat, rate_ready_at
from jobq.stores.sqlite.statements import (
    ADMIT,
    FREE_SLOTS,
    GET_LIMIT,
    HELD_FEWER,
    HELD_MORE,
    HOLD,
    KEY_STATE,
    KEYS_READY,
    LIMITS,
    NEW_KEY,
    PUT_LIMIT,
    READY_KEYS,
    RELEASE_HELD,
    SET_KEY,
    SET_READY,
    SLOTS_READY,
    TAKE_SLOT,
)
from jobq.types import Limit

#: ``ready_at`` for a key that may release now (``free_slots``' value too):
#: before any claim's ``now``.
AT_ONCE = 0.0


def declare(conn: sqlite3.Connection, limit: Limit) -> Limit | None:
    """Store ``limit``; the one it replaced when that differed."""
    row = conn.execute(GET_LIMIT, (limit.name,)).fetchone()
    before = None if row is None else Limit(*row)
    if before != limit:
        conn.execute(PUT_LIMIT, _values(limit))
    return before if before != limit else None


def declared(conn: sqlite3.Connection) -> list[Limit]:
    """Every stored declaration, by name."""
    return [Limit(*row) for row in conn.execute(LIMITS).fetchall()]


def _values(limit: Limit) -> tuple[object, ...]:
    return (limit.name, limit.concurrency, limit.rate, limit.per, limit.burst)


def _tat(stored: float | None) -> float:
    return NEVER if stored is None else stored


def _ready_at(limit: Limit, running: int, tat: float) -> float | None:
    """When a key may next release a held job: NULL while its slots are
    full (freeing one marks it), else when its rate allows a start."""
    if not has_room(limit, running):
        return None
    return max(rate_ready_at(limit, tat), AT_ONCE)


class Limiter:
    """The limits as one claim's transaction sees them: the declarations
    read once, on the first job with limits."""

    def __init__(self, conn: sqlite3.Connection, now: float) -> None:
        self.conn = conn
        self.now = now
        self.limits = declared(conn)

    def release(self) -> int:
        """Release the held jobs the ready keys allow now; how many."""
        released = 0
        for name, tat in self.conn.execute(READY_KEYS, (self.now,)).fetchall():
            released += self._release_key(name, _tat(tat))
        return released

    def _release_key(self, name: str, tat: float) -> int:
        limit = governing(self.limits, name)
        if limit is None:  # its declaration is gone: nothing holds it
            released = int(self.conn.execute(RELEASE_HELD, (name, -1)).rowcount)
            self.conn.execute(HELD_FEWER, (released, name))
            return released
        _, held, running = self._state(name)
        count = min(held, self._allowance(limit, running, tat))
        if count:
            moved = self.conn.execute(RELEASE_HELD, (name, count)).rowcount
            self.conn.execute(HELD_FEWER, (moved, name))
            # As if they started: a claim that holds them again sets it anew.
            running, tat = running + count, next_tat(limit, tat, self.now)
        ready = _ready_at(limit, running, tat) if count < held else None
        self.conn.execute(SET_READY, (ready, name))
        return count

    def _allowance(self, limit: Limit, running: int, tat: float) -> int:
        """How many more starts the key allows now (one at a time for a rate)."""
        if limit.interval is not None and self.now < rate_ready_at(limit, tat):
            return 0
        room = 1 if limit.interval is not None else 2**31
        if limit.concurrency is not None:
            room = min(room, limit.concurrency - running)
        return max(room, 0)

    def _state(self, name: str) -> tuple[float, int, int]:
        """A key's (tat, held, running), its row made on first use."""
        row = self.conn.execute(KEY_STATE, (name,)).fetchone()
        if row is None:
            self.conn.execute(NEW_KEY, (name,))
            return NEVER, 0, 0
        tat, held, running = row
        return _tat(tat), held, running

    def admit(self, job_id: int, keys: Sequence[str]) -> bool:
        """Start the claimed job under ``keys``, taking a slot and a start of
        each, if every key allows it; else hold it by the first that does
        not (and its other keys may release another job: ``ready_at``)."""
        states = [(key, governing(self.limits, key), *self._state(key)) for key in keys]
        for key, limit, tat, _, running in states:
            if limit is not None and not (
                has_room(limit, running) and self.now >= rate_ready_at(limit, tat)
            ):
                self._hold(job_id, key, limit, running, tat, states)
                return False
        for key, limit, tat, held, running in states:
            self.conn.execute(TAKE_SLOT, (key, job_id))
            if limit is not None:
                tat = next_tat(limit, tat, self.now)
                ready = _ready_at(limit, running + 1, tat) if held else None
                self.conn.execute(SET_KEY, (None if tat == NEVER else tat, ready, key))
        self.conn.execute(ADMIT, (self.now, job_id))
        return True

    def _hold(
        self,
        job_id: int,
        key: str,
        limit: Limit,
        running: int,
        tat: float,
        states: Sequence[tuple[str, Limit | None, float, int, int]],
    ) -> None:
        self.conn.execute(HOLD, (key, job_id))
        self.conn.execute(HELD_MORE, (key,))
        self.conn.execute(SET_READY, (_ready_at(limit, running, tat), key))
        for other, other_limit, other_tat, held, other_running in states:
            if other != key and held and other_limit is not None:
                ready = _ready_at(other_limit, other_running, other_tat)
                self.conn.execute(SET_READY, (ready, other))


def free_slots(conn: sqlite3.Connection, job_id: int) -> None:
    """A limited claim of ``job_id`` ended (finished, failed, released,
    recovered, stopped; its statement changed the row): its keys may release
    a held job, and its slots are free."""
    conn.execute(SLOTS_READY, (job_id,))
    conn.execute(FREE_SLOTS, (job_id,))


def cancelled(
    conn: sqlite3.Connection, state: str, limits: str | None, held_by: str | None
) -> None:
    """A pending job with limits was cancelled in ``state``: a held one no
    longer counts against its key; a ready one (perhaps released, counting
    against its keys until a claim took it) gives its keys' place back."""
    if state == "held":
        conn.execute(HELD_FEWER, (1, held_by))
    elif state == "ready":
        conn.execute(KEYS_READY, (limits,))


def job_limits(text: str | None) -> tuple[str, ...]:
    """A job's limits from its column (JSON array text, NULL for none)."""
    return () if text is None else tuple(json.loads(text))


def limits_text(limits: Sequence[str]) -> str | None:
    """A job's limits for its column."""
    return json.dumps(list(limits)) if limits else None
