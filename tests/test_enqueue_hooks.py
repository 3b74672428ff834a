"""Enqueue hooks (``queue.around_enqueue``): they wrap every enqueue in the
caller's thread, may add meta, see what was added, and see a failed write."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import jobq

MakeQueue = Callable[..., jobq.JobQueue[Any]]


def recording(
    seen: list[tuple[str, Any]], name: str = "hook"
) -> Callable[[jobq.Sending], contextlib.AbstractContextManager[None]]:
    @contextlib.contextmanager
    def hook(sending: jobq.Sending) -> Iterator[None]:
        seen.append((f"{name} enter", (sending.task, dict(sending.meta))))
        sending.meta[name] = threading.current_thread().name
        try:
            yield
        except Exception as exc:
            seen.append((f"{name} failed", type(exc).__name__))
            raise
        seen.append((f"{name} exit", [e.id for e in sending.added]))

    return hook


def test_a_hook_adds_meta_to_every_job_and_sees_their_ids(
    make_queue: MakeQueue,
) -> None:
    seen: list[tuple[str, Any]] = []
    queue = make_queue(None)
    queue.around_enqueue(recording(seen))

    one = queue.enqueue("a", meta={"given": "yes"})
    many = queue.enqueue_many(["b", "c"])

    here = threading.current_thread().name
    assert seen == [
        ("hook enter", (None, {"given": "yes"})),
        ("hook exit", [one.id]),
        ("hook enter", (None, {})),
        ("hook exit", [m.id for m in many]),
    ]
    records = [queue.get(j) for j in (one, *many)]
    assert [r.meta for r in records if r is not None] == [
        {"given": "yes", "hook": here},
        {"hook": here},
        {"hook": here},
    ]


def test_hooks_nest_the_first_outermost_and_see_task_jobs(
    make_queue: MakeQueue,
) -> None:
    seen: list[tuple[str, Any]] = []
    queue = make_queue(None)
    queue.around_enqueue(recording(seen, "outer"))
    queue.around_enqueue(recording(seen, "inner"))

    @queue.task(name="greet")
    def greet(name: str) -> None: ...

    job = greet.enqueue("ann")

    assert [step for step, _ in seen] == [
        "outer enter", "inner enter", "inner exit", "outer exit"
    ]  # fmt: skip
    assert seen[0][1] == ("greet", {})
    record = queue.get(job)
    assert record is not None
    assert set(record.meta) == {"outer", "inner"}


def test_a_refused_enqueue_is_seen_by_the_hook_and_adds_nothing(
    make_queue: MakeQueue,
) -> None:
    seen: list[tuple[str, Any]] = []
    queue = make_queue(None)
    queue.around_enqueue(recording(seen))

    with pytest.raises(TypeError):
        queue.enqueue({"not": object()})

    assert seen[-1] == ("hook failed", "TypeError")
    assert queue.stats().pending == 0


def test_a_removed_hook_is_not_called_again() -> None:
    seen: list[tuple[str, Any]] = []
    queue: jobq.JobQueue[Any] = jobq.JobQueue()
    remove = queue.around_enqueue(recording(seen))
    remove()
    remove()  # idempotent

    job = queue.enqueue("x")

    assert seen == []
    record = queue.get(job)
    assert record is not None
    assert record.meta == {}


def test_a_hook_must_be_callable() -> None:
    with pytest.raises(TypeError, match="enqueue hook must be callable"):
        jobq.JobQueue().around_enqueue("not a hook")  # type: ignore[arg-type]
