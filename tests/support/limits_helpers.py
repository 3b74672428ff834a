"""What the tests of the surfaces that show limits share (the commands, the
dashboard, Prometheus): a queue whose store holds limits, and a job held
back by one, seen while the job that holds its slot runs.

Deterministic, with no thread: the handler of the first job (under a
``concurrency=1`` limit) runs ``run_pending()`` itself, whose claim finds
the second job due but its limit full, so holds it (``held_by``) and runs
nothing; then, still inside that first attempt, it calls ``look``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import pytest

import jobq
from jobq.stores.base import capabilities_of

T = TypeVar("T")

#: The payload of the job whose attempt holds the limit's one slot.
OUTER = "holds the slot"


def needs_limits(queue: jobq.JobQueue[Any]) -> None:
    """Skip where ``queue``'s store does not hold limits (yet)."""
    if not capabilities_of(queue.store).limits:
        pytest.skip(f"{type(queue.store).__name__} holds no limits")


class WhileHeld(Generic[T]):
    """A handler: the ``OUTER`` job makes a claim (which holds the jobs its
    limit does not allow) and calls ``look``, keeping what it returns in
    ``seen``; every other job just returns."""

    def __init__(self) -> None:
        self.queue: jobq.JobQueue[Any] | None = None
        self.look: Callable[[], T] | None = None
        self.seen: list[T] = []

    def __call__(self, job: jobq.Job[Any]) -> None:
        if job.payload != OUTER:
            return
        assert self.queue is not None
        assert self.look is not None
        assert self.queue.run_pending() == 0  # the other job is held, not run
        self.seen.append(self.look())


def hold_one(
    queue: jobq.JobQueue[Any],
    handler: WhileHeld[T],
    look: Callable[[int], T],
    limit: str = "smtp",
    also: tuple[str, ...] = (),
) -> tuple[int, int, T]:
    """Run a job under ``limit`` (``concurrency=1``, declared by the caller)
    while a second job under it (and under ``also``, which allow it) waits,
    held by ``limit``; ``look(held job's id)`` while it is so. The ids of
    the two jobs, and what ``look`` returned. The second job runs afterwards
    if its limits allow it then (a rate may hold it again)."""
    outer = queue.enqueue(OUTER, limits=[limit]).id
    held = queue.enqueue("waits", limits=[limit, *also]).id
    handler.queue = queue
    handler.look = lambda: look(held)
    assert queue.run_pending() >= 1  # the outer job (then the released one)
    (seen,) = handler.seen
    return outer, held, seen
