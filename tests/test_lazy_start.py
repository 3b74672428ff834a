"""``start(lazy=True)`` and ``ensure_started()``: workers only in a process that
uses the queue (reloader watchers, gunicorn masters with ``--preload``,
management commands and tests start nothing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from postgres_url import POSTGRES_URL

import jobq
import jobq.queue

MakeQueue = Callable[..., jobq.JobQueue[Any]]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=["memory", "json", "sqlite"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """Overrides conftest's: the lazy start is store-neutral; these three show it."""
    return str(request.param)


def worker_threads() -> int:
    return sum(t.name.startswith("jobq-worker-") for t in threading.enumerate())


def noop(job: jobq.Job[Any]) -> None:
    pass


def test_a_lazy_start_starts_and_opens_nothing(
    make_queue: MakeQueue, tmp_path: Path
) -> None:
    before = worker_threads()
    queue = make_queue(noop)

    assert queue.start(workers=2, lazy=True) is queue

    assert worker_threads() == before
    assert list(tmp_path.iterdir()) == []  # no file, no lock, no connection


def test_ensure_started_starts_the_workers_once(make_queue: MakeQueue) -> None:
    before = worker_threads()
    queue = make_queue(noop).start(workers=2, lazy=True)

    assert queue.ensure_started() is True
    assert queue.ensure_started() is True

    assert worker_threads() == before + 2


def test_the_first_enqueue_starts_the_workers_and_they_run_the_job(
    make_queue: MakeQueue,
) -> None:
    done = threading.Event()
    queue = make_queue(lambda job: done.set()).start(workers=2, lazy=True)

    queue.enqueue({"n": 1})

    assert done.wait(10)
    assert queue.join(timeout=10)
    assert queue.stats().completed == 1


def test_looking_at_a_lazy_queue_starts_no_workers(make_queue: MakeQueue) -> None:
    """What management commands and ``flask jobq stats`` do."""
    before = worker_threads()
    queue = make_queue(noop).start(workers=2, lazy=True)

    queue.stats()
    queue.get(1)
    queue.dead_jobs()
    queue.retry_dead(1)

    assert worker_threads() == before
    assert queue.ensure_started() is True  # the wish is still there


def test_without_a_start_ensure_started_starts_and_opens_nothing(
    make_queue: MakeQueue, tmp_path: Path
) -> None:
    before = worker_threads()
    queue = make_queue(noop)

    assert queue.ensure_started() is False
    queue.enqueue({"n": 1})

    assert worker_threads() == before
    assert queue.stats().pending == 1


def test_stop_cancels_a_lazy_start(make_queue: MakeQueue) -> None:
    before = worker_threads()
    queue = make_queue(noop).start(workers=2, lazy=True)

    queue.stop()
    queue.enqueue({"n": 1})

    assert queue.ensure_started() is False
    assert worker_threads() == before
    assert queue.start(workers=1).ensure_started() is True  # explicit start works


def test_a_stopped_queue_is_not_started_again_by_use(make_queue: MakeQueue) -> None:
    queue = make_queue(noop).start(workers=1, lazy=True)
    assert queue.ensure_started()

    queue.stop(timeout=5)
    queue.enqueue({"n": 1})

    assert queue.ensure_started() is False
    assert queue.stats().pending == 1


def test_a_lazy_start_of_a_running_queue_changes_nothing(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(noop).start(workers=1)

    queue.start(workers=3, lazy=True)
    queue.stop(timeout=5)

    assert queue.ensure_started() is False  # no wish left behind


def test_a_lazy_start_checks_its_arguments_at_once(make_queue: MakeQueue) -> None:
    with pytest.raises(TypeError, match="no handler"):
        make_queue().start(lazy=True)
    with pytest.raises(ValueError, match="at least 1"):
        make_queue(noop).start(workers=0, lazy=True)
    closed = make_queue(noop)
    closed.close()
    with pytest.raises(jobq.QueueClosed):
        closed.start(lazy=True)


def test_nothing_starts_while_the_interpreter_exits(
    make_queue: MakeQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = worker_threads()
    queue = make_queue(noop).start(workers=2, lazy=True)
    monkeypatch.setattr(sys, "is_finalizing", lambda: True)

    queue.enqueue({"n": 1})

    assert queue.ensure_started() is False
    assert worker_threads() == before
    assert queue.stats().pending == 1  # kept for the next run


@pytest.mark.parametrize("kind", ["json", "sqlite", "postgres"])
def test_an_enqueue_from_a_late_atexit_hook_starts_no_workers(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    """A hook registered before jobq's own runs after it: the queue is
    stopping for good then. (From Python 3.12 no thread starts then at all:
    the store opens without its helper threads.)"""
    store = {
        "json": repr(str(tmp_path / "jobs.json")),
        "sqlite": repr(f"sqlite:///{tmp_path / 'jobs.db'}"),
    }.get(kind)
    if store is None:
        schema = request.getfixturevalue("postgres_schema")
        store = f"PostgresStore({POSTGRES_URL!r}, schema={schema!r}, queue='late')"
    script = f"""
import atexit, threading

def late():
    queue.enqueue({{"n": 1}})
    names = [t.name for t in threading.enumerate() if t.name.startswith("jobq-worker")]
    print("threads", names, "pending", queue.stats().pending, flush=True)

atexit.register(late)  # before jobq registers its hook: runs after it
import jobq
from jobq.stores import PostgresStore
queue = jobq.JobQueue(lambda job: None, store={store})
queue.start(workers=2, lazy=True)
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "threads [] pending 1"


# -- fork ----------------------------------------------------------------------

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
# 3.12+ warns when a process with threads forks; a started parent has some.
forks_with_threads = pytest.mark.filterwarnings(
    r"ignore:This process \(pid=\d+\) is multi-threaded:DeprecationWarning"
)


def in_child(body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``body`` in a forked child; what it returned, or its error."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        try:
            report = body()
        except BaseException as exc:
            report = {"error": repr(exc)}
        os.write(write, json.dumps(report).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    report: dict[str, Any] = json.loads(data)
    return report


@needs_fork
@forks_with_threads
@pytest.mark.parametrize("store_kind", ["memory", "sqlite"], indirect=True)
def test_a_child_of_a_lazy_parent_starts_its_own_workers_on_first_use(
    make_queue: MakeQueue,
) -> None:
    """gunicorn --preload: the master built the app (and asked for a lazy
    start) but never serves; each worker process starts its own threads."""
    ran = []
    queue = make_queue(lambda job: ran.append(job.payload)).start(2, lazy=True)
    before = worker_threads()

    def child() -> dict[str, Any]:
        idle = worker_threads()
        queue.stats()
        after_stats = worker_threads()
        started = queue.ensure_started()
        queue.enqueue({"from": "child"})
        joined = queue.join(timeout=10)
        return {
            "idle": idle,
            "after_stats": after_stats,
            "started": started,
            "workers": worker_threads(),
            "joined": joined,
            "ran": ran,
        }

    report = in_child(child)

    assert report == {
        "idle": 0,
        "after_stats": 0,
        "started": True,
        "workers": 2,
        "joined": True,
        "ran": [{"from": "child"}],
    }
    assert worker_threads() == before  # the parent is still lazy and idle
    assert queue.ensure_started() is True


@needs_fork
@forks_with_threads
@pytest.mark.parametrize("store_kind", ["memory", "sqlite"], indirect=True)
def test_a_child_of_a_started_parent_starts_workers_with_ensure_started(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(noop).start(workers=2)

    def child() -> dict[str, Any]:
        inherited = worker_threads()
        queue.stats()
        return {
            "inherited": inherited,
            "after_stats": worker_threads(),
            "started": queue.ensure_started(),
            "workers": worker_threads(),
        }

    assert in_child(child) == {
        "inherited": 0,
        "after_stats": 0,
        "started": True,
        "workers": 2,
    }


@needs_fork
@pytest.mark.parametrize("store_kind", ["memory"], indirect=True)
def test_a_child_of_a_stopped_parent_starts_nothing(make_queue: MakeQueue) -> None:
    queue = make_queue(noop).start(workers=2, lazy=True)
    queue.stop()

    def child() -> dict[str, Any]:
        queue.enqueue({"n": 1})
        return {"started": queue.ensure_started(), "workers": worker_threads()}

    assert in_child(child) == {"started": False, "workers": 0}
