"""A job's workflow relatives for people: its parents and children looked
up with their states now (``jobq show``, the dashboard's job page)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from jobq.types import JobRecord, JobState


class Reads(Protocol):
    """What ``family`` reads: a queue's ``get``."""

    def get(self, job: int) -> JobRecord[Any] | None: ...


#: The most parents, and the most children, ``family`` looks up (one read
#: each): a fan-in of 1,000 parents or a fan-out of 10,000 children shows
#: this many of them, and says how many more there are.
RELATIVES_SHOWN = 100


@dataclass(frozen=True)
class Relative:
    """A parent or child of a job as the store holds it now: ``state``
    ``None`` when the store no longer holds it (gone: a completed job not
    kept, or a deleted one)."""

    id: int
    task: str | None
    state: JobState | None


@dataclass(frozen=True)
class Family:
    """A job's parents (``after=``, in that order) and children (by id),
    each looked up, at most ``RELATIVES_SHOWN`` of each; ``more_parents``
    and ``more_children``: how many more there are, not looked up."""

    parents: tuple[Relative, ...] = ()
    children: tuple[Relative, ...] = ()
    more_parents: int = 0
    more_children: int = 0


def relatives(
    queue: Reads, ids: Sequence[int], limit: int = RELATIVES_SHOWN
) -> tuple[tuple[Relative, ...], int]:
    """The first ``limit`` of ``ids`` looked up, and how many more there are."""
    found = []
    for job_id in ids[:limit]:
        record = queue.get(job_id)
        if record is None:
            found.append(Relative(job_id, None, None))
        else:
            found.append(Relative(job_id, record.task, record.state))
    return tuple(found), max(0, len(ids) - limit)


def family(queue: Reads, record: JobRecord[Any]) -> Family:
    """``record``'s parents and children with their states now (see
    ``Family``): what ``jobq show`` and the dashboard's job page list."""
    if not record.parents and not record.children:
        return Family()
    parents, more_parents = relatives(queue, record.parents)
    children, more_children = relatives(queue, record.children)
    return Family(parents, children, more_parents, more_children)
