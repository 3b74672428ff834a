"""Enqueue hooks (``queue.around_enqueue``): they wrap every enqueue in the
caller's thread, may add meta, see what was added, and see a failed write."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import jobq
from jobq._rules import (
    MAX_ADDED_META_BYTES,
    MAX_ADDED_META_ENTRIES,
    MAX_META_BYTES,
    MAX_META_ENTRIES,
)

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


def adding(headers: dict[str, str]) -> jobq.EnqueueHook:
    @contextlib.contextmanager
    def hook(sending: jobq.Sending) -> Iterator[None]:
        sending.meta.update(headers)
        yield

    return hook


def test_a_hook_s_headers_fit_beside_a_caller_s_meta_at_its_limits(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(None)
    most_entries = {f"{n:02}": "" for n in range(MAX_META_ENTRIES)}
    most_bytes = {"a": "x" * (MAX_META_BYTES - len('{"a":""}'))}
    headers = {f"h{n}": "" for n in range(MAX_ADDED_META_ENTRIES - 1)}
    headers["big"] = ""
    room = MAX_ADDED_META_BYTES - len(json.dumps(headers, separators=(",", ":")))
    headers["big"] = "y" * room  # exactly the allowance
    queue.around_enqueue(adding(headers))

    jobs = [queue.enqueue("x", meta=meta) for meta in (most_entries, most_bytes)]

    records = [queue.get(job) for job in jobs]
    assert [r.meta for r in records if r is not None] == [
        {**most_entries, **headers},
        {**most_bytes, **headers},
    ]


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        (
            {f"h{n}": "" for n in range(MAX_ADDED_META_ENTRIES + 1)},
            r"enqueue hooks added 9 meta entries \('h0', 'h1', 'h2', 'h3', 'h4', "
            r"\.\.\.\); at most 8 are allowed besides the caller's meta",
        ),
        (
            {"big": "y" * MAX_ADDED_META_BYTES},
            r"enqueue hooks added meta entries \('big'\) of 2058 bytes of JSON; at "
            r"most 2048 bytes are allowed besides the caller's meta",
        ),
    ],
    ids=["entries", "bytes"],
)
def test_a_hook_adding_more_than_its_allowance_is_refused_and_adds_nothing(
    make_queue: MakeQueue, headers: dict[str, str], message: str
) -> None:
    queue = make_queue(None)
    queue.around_enqueue(adding(headers))

    with pytest.raises(ValueError, match=message):
        queue.enqueue("x")
    with pytest.raises(ValueError, match=message):
        queue.enqueue_many(["x", "y"], meta={"h0": "the caller's"})

    assert queue.stats().pending == 0


def test_a_hook_that_changes_the_caller_s_header_spends_its_own_allowance(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(None)
    queue.around_enqueue(adding({"a": "y" * MAX_ADDED_META_BYTES}))

    with pytest.raises(ValueError, match=r"enqueue hooks added meta entries \('a'\)"):
        queue.enqueue("x", meta={"a": "the caller's"})
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
