"""Workflows in the SQLite store (see "Workflows" in ``jobq.stores.base``):
a child's parents in ``jobq_deps``, checked when it is added, and what a
parent's end does to its waiting children, written in the transaction that
records that end, so no crash can part them.

Nothing here runs for a job without parents or children: ``after_failure``
is NULL on a job without parents, ``children`` 0 on one without children,
and the statements that end a claim return that count.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Sequence
from typing import Any, NamedTuple

from jobq.stores.base import (
    NewJob,
    ParentEnd,
    ParentOutcome,
    child_fate,
    parent_ended,
    unknown_parent,
)
from jobq.stores.sqlite.statements import (
    ADD_CHILD,
    CANCEL_CHILD,
    CHILDREN,
    FAMILY_AT,
    INSERT_DEP,
    LAST_ID,
    PARENT,
    PARENTS,
    SET_SLOT,
    SLOT_SET,
    WAITING_CHILDREN,
)
from jobq.types import JobRecord

#: How a stored state ends a parent for its children (None: not yet).
_ENDS: dict[str, ParentEnd | None] = {
    "scheduled": None, "ready": None, "held": None, "running": None,
    "waiting": None, "completed": "completed", "dead": "dead",
    "cancelled": "cancelled",
}  # fmt: skip
#: What a failed parent's end is called in its cancelled child's ``by``.
_HOW = {"dead": "died", "cancelled": "was cancelled"}


class Start(NamedTuple):
    """How a new child starts: its state, unset slots, cancellation
    (at, by, keep_until) or ``None``, and each parent's slot."""

    state: str
    waiting_on: int | None
    cancel: tuple[float, str, float] | None
    slots: list[ParentOutcome]


def start_of(
    conn: sqlite3.Connection, new: NewJob, now: float, keep_cancelled: float
) -> Start:
    """Each parent's outcome as ``add`` finds it; an id never given raises
    ``unknown_parent`` (the caller's transaction is rolled back)."""
    slots: list[ParentOutcome] = []
    unset = 0
    cancel: tuple[float, str, float] | None = None
    last_id: int | None = None
    for parent in new.after:
        row = conn.execute(PARENT, (now, parent)).fetchone()
        if row is None or row[2]:  # gone (or expired): finished, not kept
            if last_id is None:
                found = conn.execute(LAST_ID).fetchone()
                last_id = 0 if found is None else found[0]
            if row is None and parent > last_id:
                raise unknown_parent(parent)
            slots.append((parent, "completed", None))
            continue
        state, result, _ = row
        end = _ENDS[state]
        fate = "waiting" if end is None else child_fate(new.after_failure, end)
        if end is None or fate == "waiting":
            unset += 1
            slots.append((parent, None, None))
            continue
        slots.append((parent, end, result if end == "completed" else None))
        if fate == "cancel" and cancel is None:
            by = parent_ended(parent, _HOW[end])
            cancel = (now, by, now + keep_cancelled)
    if cancel is not None:
        return Start("cancelled", None, cancel, slots)
    if unset:
        return Start("waiting", unset, None, slots)
    return Start("ready" if new.run_at <= now else "scheduled", None, None, slots)


def link(conn: sqlite3.Connection, child: int, slots: Sequence[ParentOutcome]) -> None:
    """The new child's rows in ``jobq_deps``; each parent it still holds
    counts one child more."""
    conn.executemany(
        INSERT_DEP,
        [
            (child, i, parent, end, result)
            for i, (parent, end, result) in enumerate(slots)
        ],
    )
    conn.executemany(ADD_CHILD, [(parent,) for parent, _, _ in slots])


class Ends:
    """What parents' ends do to their waiting children, in the caller's
    write transaction: ``released`` (id, task) became pending, ``cancelled``
    children ended so (and theirs after them)."""

    def __init__(self, conn: sqlite3.Connection, now: float, keep_cancelled: float):
        self.conn = conn
        self.now = now
        self.keep_cancelled = keep_cancelled
        self.released: list[tuple[int, str | None]] = []
        self.cancelled = 0

    def ended(
        self, parent: int, end: ParentEnd, result: str | None = None, how: str = ""
    ) -> None:
        """``parent`` ended so (``result``: a completed one's; ``how``: a
        cancelled child's ``parent_ended``, by default from ``end``)."""
        conn, now = self.conn, self.now
        todo = [(parent, end, result, how or _HOW.get(end, ""))]
        while todo:
            parent, end, result, how = todo.pop()
            rows = conn.execute(WAITING_CHILDREN, (parent,)).fetchall()
            for child, position, mode in rows:
                fate = child_fate(mode, end)
                if fate == "waiting":
                    continue
                if fate == "finished":
                    conn.execute(SET_SLOT, (end, result, child, position))
                    row = conn.execute(SLOT_SET, {"now": now, "id": child}).fetchone()
                    if row is not None and row[0] != "waiting":
                        self.released.append((child, row[1]))
                    continue
                by = parent_ended(parent, how)
                until = now + self.keep_cancelled
                row = conn.execute(CANCEL_CHILD, (now, by, until, child)).fetchone()
                if row is not None:
                    self.cancelled += 1
                    if row[0]:
                        todo.append((child, "cancelled", None, "was cancelled"))


def parents_of(conn: sqlite3.Connection, child: int) -> tuple[ParentOutcome, ...]:
    """A child's parents, in ``after`` order, with their outcomes."""
    return tuple(conn.execute(PARENTS, (child,)).fetchall())


def with_family(
    conn: sqlite3.Connection,
    rows: Sequence[Sequence[Any]],
    records: list[JobRecord[Any]],
) -> list[JobRecord[Any]]:
    """``records`` (made from ``rows``) with their parents and children, read
    only for the jobs that have some."""
    for i, row in enumerate(rows[: len(records)]):
        after_failure, children = row[FAMILY_AT : FAMILY_AT + 2]
        if after_failure is None and not children:
            continue
        changes: dict[str, Any] = {}
        if after_failure is not None:
            parents = parents_of(conn, row[0])
            changes["parents"] = tuple(p[0] for p in parents)
            changes["waiting_on"] = tuple(p[0] for p in parents if p[1] is None)
            changes["after_failure"] = after_failure
        if children:
            found = conn.execute(CHILDREN, (row[0],)).fetchall()
            changes["children"] = tuple(child for (child,) in found)
        records[i] = dataclasses.replace(records[i], **changes)
    return records
