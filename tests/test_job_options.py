"""The options of jobs and tasks are declared once (``jobq.options``): every
entry point takes the same names, refuses one it does not know where it is
called, and means the same by each."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

import jobq
import jobq.contrib.django
from jobq.contrib.flask import JobQ
from jobq.options import JOB_OPTIONS, SEND_OPTIONS, TASK_OPTIONS
from jobq.web import make_app

MakeQueue = Callable[..., jobq.JobQueue[Any]]


def test_the_option_lists_are_the_typed_dicts() -> None:
    assert {
        "delay",
        "at",
        "key",
        "priority",
        "meta",
        "timeout",
        "limits",
        "after",
        "after_failure",
    } == JOB_OPTIONS
    assert JOB_OPTIONS | {"connection"} == SEND_OPTIONS
    task_options = {"name", "max_attempts", "priority", "timeout", "limits", "isolate"}
    assert task_options == TASK_OPTIONS


@pytest.mark.parametrize(
    ("call", "caller"),
    [
        (lambda q, t: q.enqueue("x", dealy=5), "enqueue"),
        (lambda q, t: q.enqueue_many(["x"], dealy=5), "enqueue_many"),
        (lambda q, t: q.send(["x"], dealy=5), "send"),
        (lambda q, t: q.prepare(["x"], dealy=5), "prepare"),
        (lambda q, t: q.prepare(["x"], connection=None), "prepare"),
        (lambda q, t: t.using(dealy=5), "using"),
        (lambda q, t: q.task(nmae="x"), "task"),
        (lambda q, t: q.periodic(every=60, evrey=60), "periodic"),
        (lambda q, t: JobQ().task(nmae="x"), "task"),
        (lambda q, t: JobQ().periodic(every=60, evrey=60), "periodic"),
        (lambda q, t: make_app(q, read_olny=True), "Dashboard"),
    ],
    ids=[
        "enqueue", "enqueue_many", "send", "prepare", "prepare-connection",
        "using", "task", "periodic", "flask-task", "flask-periodic", "make_app",
    ],
)  # fmt: skip
def test_a_misspelt_option_is_refused_where_it_is_given(
    make_queue: MakeQueue, call: Callable[..., object], caller: str
) -> None:
    queue = make_queue(lambda job: None)

    @queue.task(name="t")
    def t() -> None: ...

    message = f"{caller}\\(\\) got an unexpected keyword argument"
    with pytest.raises(TypeError, match=message):
        call(queue, t)
    assert queue.stats().pending == 0


def test_the_django_helpers_take_the_same_options(make_queue: MakeQueue) -> None:
    with pytest.raises(TypeError, match="enqueue\\(\\) got an unexpected"):
        jobq.contrib.django.get_queue().enqueue("x", dealy=5)  # type: ignore[call-arg]


def test_every_entry_point_means_the_same_by_each_option(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(lambda job: None, clock=lambda: 1000.0)

    @queue.task(name="t")
    def t() -> None: ...

    options: dict[str, Any] = {
        "delay": dt.timedelta(seconds=30),
        "key": "k",
        "priority": 7,
        "meta": {"h": "v"},
        "timeout": 12,
    }
    added = [
        queue.enqueue("a", **options),
        queue.enqueue_many(["b"], **{**options, "key": "k2"})[0],
        queue.send(["c"], **{**options, "key": "k3"})[0],
        t.using(**{**options, "key": "k4"}).enqueue(),
    ]
    records = [queue.get(job) for job in added]
    seen = [
        (r.run_at, r.priority, dict(r.meta), r.timeout, r.key)
        for r in records
        if r is not None
    ]
    assert seen == [
        (1030.0, 7, {"h": "v"}, 12.0, key) for key in ("k", "k2", "k3", "k4")
    ]
