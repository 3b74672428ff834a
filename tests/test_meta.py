"""A job's ``meta``: string headers given at enqueue (``enqueue``,
``enqueue_many``, ``prepare``, ``Task.using``), shown to the handler and the
middleware as ``job.meta`` and by ``get`` as ``JobRecord.meta``, on every
store. Refused meta is in ``test_hostile_input.py``; what each store keeps
through retries, burial, revive and restarts is in the store contract."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

import jobq
from jobq import Job
from jobq._rules import MAX_META_BYTES, MAX_META_ENTRIES

MakeQueue = Callable[..., jobq.JobQueue[Any]]

TRACE = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}


def test_meta_reaches_the_handler_the_middleware_and_get(
    make_queue: MakeQueue,
) -> None:
    seen: list[tuple[str, Mapping[str, str]]] = []

    def middleware(job: Job[Any], call_next: Callable[[], object]) -> object:
        seen.append(("middleware", job.meta))
        return call_next()

    def handler(job: Job[Any]) -> None:
        seen.append(("handler", job.meta))

    queue = make_queue(handler, middleware=[middleware], keep_completed=60)
    job = queue.enqueue("x", meta=TRACE)
    record = queue.get(job)
    assert record is not None
    assert record.meta == TRACE

    queue.run_pending()

    assert seen == [("middleware", TRACE), ("handler", TRACE)]
    completed = queue.get(job)
    assert completed is not None
    assert completed.meta == TRACE


def test_enqueue_many_gives_every_job_the_same_meta(make_queue: MakeQueue) -> None:
    queue = make_queue(None)

    jobs = queue.enqueue_many(["a", "b"], meta={"queue": "mail"})

    records = [queue.get(job) for job in jobs]
    assert [r.meta for r in records if r is not None] == [{"queue": "mail"}] * 2


def test_a_job_s_meta_is_read_only_and_a_copy_of_what_was_given(
    make_queue: MakeQueue,
) -> None:
    given = {"queue": "mail"}
    metas: list[Mapping[str, str]] = []
    queue = make_queue(lambda job: metas.append(job.meta))
    job = queue.enqueue("x", meta=given)
    given["queue"] = "changed"

    record = queue.get(job)
    queue.run_pending()

    assert record is not None
    assert metas == [{"queue": "mail"}]
    for meta in (record.meta, metas[0]):
        with pytest.raises(TypeError):
            meta["queue"] = "other"  # type: ignore[index]


def test_meta_is_stored_as_compact_json_with_sorted_keys() -> None:
    queue: jobq.JobQueue[Any] = jobq.JobQueue()

    [job] = queue.prepare(["x"], meta={"b": "zoë", "a": "1"})
    [plain] = queue.prepare(["x"])

    assert job.meta == '{"a":"1","b":"zo\\u00eb"}'
    assert (plain.meta, plain.timeout) == (None, None)


def test_meta_at_its_limits_is_accepted(make_queue: MakeQueue) -> None:
    queue = make_queue(None)
    most = {f"{n:02}": "" for n in range(MAX_META_ENTRIES)}
    value = "x" * (MAX_META_BYTES - len('{"a":""}'))

    many = queue.enqueue("x", meta=most)
    large = queue.enqueue("x", meta={"a": value})

    shown = [queue.get(many), queue.get(large)]
    assert [r.meta for r in shown if r is not None] == [most, {"a": value}]


def test_a_task_using_meta_gives_it_to_its_jobs(make_queue: MakeQueue) -> None:
    metas: list[Mapping[str, str]] = []

    def middleware(job: Job[Any], call_next: Callable[[], object]) -> object:
        metas.append(job.meta)
        return call_next()

    queue = make_queue(middleware=[middleware])

    @queue.task(name="send")
    def send(to: str) -> None:
        pass

    traced = send.using(meta=TRACE)
    traced.enqueue("ann")
    relabelled = traced.using(key="k").using(meta={"queue": "mail"})
    relabelled.enqueue("bob")
    queue.run_pending()

    assert metas == [TRACE, {"queue": "mail"}]
    assert "meta={'queue': 'mail'}" in repr(relabelled)


def test_a_task_refuses_bad_meta_at_using() -> None:
    queue: jobq.JobQueue[Any] = jobq.JobQueue()

    @queue.task(name="send")
    def send(to: str) -> None:
        pass

    with pytest.raises(TypeError, match="meta must map str to str"):
        send.using(meta={"attempt": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="meta keys must not be empty"):
        send.using(meta={"": "x"})
