"""A workflow's rules on one child, for the stores that hold jobs as
entries (memory, JSON): what a child keeps of its parents, and how a
parent's end changes it (see "Workflows" in ``jobq.stores.base``).

A child keeps one ``ParentOutcome`` per parent, in ``after`` order; it
waits while any of them is unset. These functions decide; the store does
the bookkeeping (indexes, counts, the journal) around them.
"""

from __future__ import annotations

from collections.abc import Callable

from jobq.stores.base import ParentEnd, ParentOutcome, child_fate, parent_ended

#: How a parent stands when a child is added after it: its end so far
#: (``None``: unfinished) and its result; ``None`` for a job the store no
#: longer holds.
Standing = tuple[ParentEnd | None, str | None] | None


def first_outcomes(
    after: tuple[int, ...], after_failure: str, standing: Callable[[int], Standing]
) -> tuple[tuple[ParentOutcome, ...], str | None]:
    """A new child's parents as it keeps them, and the ``Cancellation.by``
    it is added cancelled with (``None``: it is not): a parent that failed
    already counts as it would have had it failed later."""
    outcomes: list[ParentOutcome] = []
    for parent_id in after:
        found = standing(parent_id)
        if found is None:  # finished and not kept: it completed
            outcomes.append((parent_id, "completed", None))
            continue
        end, result = found
        if end is None or end == "completed":
            outcomes.append((parent_id, end, result))
            continue
        fate = child_fate(after_failure, end)
        if fate == "cancel":
            how = "died" if end == "dead" else "was cancelled"
            return (), parent_ended(parent_id, how)
        outcomes.append((parent_id, end if fate == "finished" else None, None))
    return tuple(outcomes), None


def with_outcome(
    parents: tuple[ParentOutcome, ...],
    parent_id: int,
    end: ParentEnd,
    result: str | None,
) -> tuple[ParentOutcome, ...]:
    """``parents`` with ``parent_id``'s outcome set (once: a set one stays)."""
    return tuple(
        (parent_id, end, result) if pid == parent_id and was is None else (pid, was, r)
        for pid, was, r in parents
    )


def waits(parents: tuple[ParentOutcome, ...]) -> bool:
    """Whether a child with these parents still waits for one of them."""
    return any(end is None for _, end, _ in parents)
