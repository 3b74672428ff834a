"""Interrupting a handler never breaks jobq or the app: ``JobTimeout`` lands
at a line of the handler's own code only, a worker outlives anything that
fails while an outcome is recorded, and the thread that enforces limits
never waits for a lock a handler may hold.

Each test here failed before the interruption was made safe (see the
README, "Time limits"). The randomized version, thousands of interruptions
on every store, is ``test_interruption_fuzz.py``.
"""

from __future__ import annotations

import importlib
import io
import logging
import queue as stdlib_queue
import subprocess
import sys
import threading
import traceback
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import jobq
from jobq._worker import interrupt
from jobq._worker.interrupt import handler_frames
from jobq._worker.stacks import stack_of
from jobq.stores import PostgresStore, SqliteStore, Store

MakeQueue = Callable[..., jobq.JobQueue[Any]]
WAIT = 20.0  # seconds; a cap so that a broken run fails, never hangs
ROOT = Path(__file__).resolve().parents[1]
HERE = str(Path(__file__).resolve())


def innermost_file(error: jobq.AttemptError) -> str:
    """The file of the innermost frame of a recorded traceback."""
    files = [
        line.split('"')[1]
        for line in error.traceback.splitlines()
        if line.startswith('  File "')
    ]
    return files[-1]


def dead_errors(queue: jobq.JobQueue[Any]) -> list[jobq.AttemptError]:
    return [record.errors[-1] for record in queue.dead_jobs()]


# -- a worker never dies --------------------------------------------------------------


def _raise_with_a_frame_of_no_line() -> None:
    """Raise an exception whose traceback holds a frame with no line number,
    as a loop's jump back does when an exception lands there."""
    frame = sys._getframe()
    lineless = types.TracebackType(None, frame, 10**5, -1)
    assert lineless.tb_lineno is None
    raise ValueError("no line here").with_traceback(lineless)


def test_a_traceback_with_a_frame_of_no_line_is_recorded_and_the_worker_goes_on(
    make_queue: MakeQueue,
) -> None:
    ran: list[str] = []

    def handler(job: jobq.Job[Any]) -> None:
        ran.append(job.payload)
        if job.payload == "odd":
            _raise_with_a_frame_of_no_line()

    queue = make_queue(handler, max_attempts=1)
    queue.enqueue("odd")
    queue.enqueue("next")
    queue.start(workers=1)

    assert queue.join(WAIT)
    assert ran == ["odd", "next"]
    [error] = dead_errors(queue)
    assert (error.type, error.message) == ("ValueError", "no line here")
    assert ", line None, in _raise_with_a_frame_of_no_line" in error.traceback
    assert queue.stats().running == 0


def test_run_pending_records_a_traceback_with_a_frame_of_no_line(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(lambda job: _raise_with_a_frame_of_no_line(), max_attempts=1)
    queue.enqueue("x")

    assert queue.run_pending() == 1
    assert [e.message for e in dead_errors(queue)] == ["no line here"]


def test_the_loop_of_the_report_is_interrupted_and_every_job_ends_dead(
    make_queue: MakeQueue,
) -> None:
    """The handler that killed a worker on 3.11: the exception landed on the
    loop's jump back, a frame with no line number."""

    def handler(job: jobq.Job[Any]) -> None:
        total = 0
        while True:
            for i in range(1000):
                if i % 7 == 0:
                    total += i

    queue = make_queue(handler, timeout=0.05, max_attempts=1, timeout_grace=WAIT)
    queue.enqueue_many(range(6))
    queue.start(workers=2)

    assert queue.join(WAIT)
    errors = dead_errors(queue)
    assert [e.type for e in errors] == ["jobq.errors.JobTimeout"] * 6
    assert {innermost_file(e) for e in errors} == {HERE}
    assert queue.stats().abandoned == 0


@pytest.mark.parametrize(
    "kind", ["started", "succeeded", "retrying", "dead", "enqueued"]
)
@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt, RuntimeError])
def test_a_subscriber_that_raises_anything_is_logged_and_changes_nothing(
    make_queue: MakeQueue,
    kind: str,
    raised: type[BaseException],
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[tuple[str, int]] = []

    def handler(job: jobq.Job[Any]) -> None:
        ran.append((job.payload, job.attempt))
        if job.payload == "fail" and job.attempt == 1:
            raise ValueError("once")
        if job.payload == "die":
            raise jobq.Fatal("at once")

    def subscriber(event: jobq.Event) -> None:
        raise raised("from a subscriber")

    queue = make_queue(handler, base_delay=0, jitter=False, max_attempts=2)
    queue.subscribe(subscriber, kinds=[kind])
    with caplog.at_level(logging.ERROR, logger="jobq"):
        queue.enqueue_many(["fail", "die", "ok"])
        queue.start(workers=1)
        assert queue.join(WAIT)
        queue.enqueue("after")  # the worker is still there
        assert queue.join(WAIT)

    assert sorted(ran) == [
        ("after", 1), ("die", 1), ("fail", 1), ("fail", 2), ("ok", 1)
    ]  # fmt: skip
    stats = queue.stats()
    assert (stats.completed, stats.retried, stats.dead, stats.running) == (3, 1, 1, 0)
    assert f"an event subscriber failed on {kind}" in caplog.text


def test_a_logging_filter_that_raises_stops_no_worker(make_queue: MakeQueue) -> None:
    """A bug in the app's logging setup, met while jobq logs a failure."""

    class Broken(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            raise RuntimeError("a broken filter")

    broken = Broken()
    logger = logging.getLogger("jobq")
    logger.addFilter(broken)
    try:
        queue = make_queue(
            lambda job: 1 / 0 if job.payload == "fail" else None, max_attempts=1
        )
        queue.enqueue_many(["fail", "ok", "fail", "ok"])
        queue.start(workers=1)
        assert queue.join(WAIT)
        stats = queue.stats()
        assert (stats.dead, stats.completed, stats.running) == (2, 2, 0)
    finally:
        logger.removeFilter(broken)


def test_a_result_whose_encoding_fails_keeps_the_success(make_queue: MakeQueue) -> None:
    class Hostile(dict[str, int]):
        def items(self) -> Any:
            raise RuntimeError("no items")

    queue = make_queue(lambda job: Hostile(a=1), keep_completed=60)
    job = queue.enqueue("x")
    queue.start(workers=1)

    assert queue.join(WAIT)
    record = queue.get(job)
    assert record is not None
    assert (record.state, record.result) == (jobq.JobState.COMPLETED, None)


# -- where JobTimeout lands ---------------------------------------------------------


def _spin_in_the_standard_library(kind: str) -> None:
    """Loop forever, spending most of the time inside the standard library
    (and its locks), a little in this code."""
    log = logging.getLogger("tests.spin")
    log.setLevel(logging.INFO)
    items: stdlib_queue.Queue[int] = stdlib_queue.Queue()
    lock = threading.Lock()
    while True:
        if kind == "logging":
            log.info("tick")
        elif kind == "queue":
            items.put(1)
            items.get()
        elif kind == "lock":
            with lock:
                pass
        elif kind == "condition":
            threading.Event().wait(0.0001)


@pytest.fixture
def logged_to_memory() -> Iterator[logging.Handler]:
    """A handler on the root logger, as an app's logging setup has."""
    handler = logging.StreamHandler(io.StringIO())
    root = logging.getLogger()
    root.addHandler(handler)
    yield handler
    root.removeHandler(handler)


@pytest.mark.parametrize("kind", ["logging", "queue", "lock", "condition"])
def test_job_timeout_lands_in_the_handler_s_code_never_in_the_standard_library(
    make_queue: MakeQueue, kind: str, logged_to_memory: logging.Handler
) -> None:
    queue = make_queue(
        lambda job: _spin_in_the_standard_library(kind),
        timeout=0.02,
        max_attempts=1,
        timeout_grace=WAIT,
    )
    queue.enqueue_many(range(8))
    queue.start(workers=2)

    assert queue.join(WAIT)
    errors = dead_errors(queue)
    assert [e.type for e in errors] == ["jobq.errors.JobTimeout"] * 8
    assert {innermost_file(e) for e in errors} == {HERE}  # the handler's line
    assert queue.stats().abandoned == 0
    assert logged_to_memory.lock is not None
    assert logged_to_memory.lock.acquire(timeout=1)  # every logging lock is free
    logged_to_memory.lock.release()


def test_handlers_that_log_under_a_limit_leave_logging_and_the_limits_working(
    make_queue: MakeQueue, logged_to_memory: logging.Handler
) -> None:
    """The report: JobTimeout between a logging handler's acquire() and its
    try left the lock held, and the watchdog blocked on its own log line."""
    log = logging.getLogger("tests.app")
    log.setLevel(logging.INFO)

    def handler(job: jobq.Job[Any]) -> None:
        while True:
            log.info("tick %s", job.id)

    queue = make_queue(handler, timeout=0.01, max_attempts=1, timeout_grace=WAIT)
    queue.enqueue_many(range(40))
    queue.start(workers=2)

    assert queue.join(WAIT)
    assert queue.stats().dead == 40
    assert logged_to_memory.lock is not None
    assert logged_to_memory.lock.acquire(timeout=1)
    logged_to_memory.lock.release()


def test_a_frame_chain_that_leads_to_no_frame_is_outside_any_handler() -> None:
    """Seen once on 3.11 in CI: reading a running thread's frames led to a
    module's globals where a frame belonged, and the AttributeError killed
    the limits thread (no later time limit fired). The chain now ends
    there, as outside a handler, for that look only."""
    module_globals: Any = vars(types)

    assert handler_frames(module_globals) is None


def _parked(entered: threading.Event, release: threading.Event) -> None:
    entered.set()
    release.wait(WAIT)


def test_the_stack_of_another_thread_is_read_outermost_call_first() -> None:
    entered, release = threading.Event(), threading.Event()
    thread = threading.Thread(target=_parked, args=(entered, release))
    thread.start()
    try:
        assert entered.wait(WAIT)
        text = stack_of(thread.ident or 0)
        expected = traceback.extract_stack(sys._current_frames()[thread.ident or 0])
    finally:
        release.set()
        thread.join(WAIT)

    wanted = traceback.StackSummary.from_list(
        [(frame.filename, frame.lineno, frame.name, None) for frame in expected]
    )
    assert text == "".join(wanted.format())
    assert "in _parked\n    release.wait(WAIT)\n" in (text or "")
    assert stack_of(1) is None  # no such thread


HANDLER_MODULE = """
def handler(job):
    total = 0
    while True:
        total += 1
"""


def test_a_handler_in_a_file_never_seen_is_interrupted_and_no_thread_reads_its_frames(
    make_queue: MakeQueue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cleanup lines of a handler's file are learnt from the files its
    own thread notes (on 3.11) or that the limits thread reads (3.12+): on
    3.11 no other thread may make frame objects of a running thread's
    frames (a collection started by the allocation can let that thread pop
    the frame: memory freed under the object, a segmentation fault in CI)."""
    (tmp_path / "fresh_handlers.py").write_text(HANDLER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    fresh = importlib.import_module("fresh_handlers")
    readers: list[str] = []
    read_frames = interrupt._frame_of

    def spied(thread_state: int | None) -> types.FrameType | None:
        readers.append(threading.current_thread().name)
        return read_frames(thread_state)

    monkeypatch.setattr(interrupt, "_frame_of", spied)
    queue = make_queue(fresh.handler, timeout=0.02, max_attempts=1, timeout_grace=WAIT)
    queue.enqueue_many(range(4))
    queue.start(workers=2)

    assert queue.join(WAIT)
    errors = dead_errors(queue)
    assert [e.type for e in errors] == ["jobq.errors.JobTimeout"] * 4
    assert {innermost_file(e) for e in errors} == {fresh.__file__}
    assert queue.stats().abandoned == 0
    if sys.version_info < (3, 12):
        assert readers == []


def test_limits_are_enforced_while_a_handler_holds_the_logging_lock(
    make_queue: MakeQueue, logged_to_memory: logging.Handler
) -> None:
    """The limits thread never logs: a handler stuck inside a logging
    handler (a full pipe) does not stop another handler's time limit."""
    entered, release = threading.Event(), threading.Event()
    seen: list[str] = []

    class Stuck(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            entered.set()
            release.wait(WAIT)

    stuck_handler = Stuck()
    log = logging.getLogger("tests.stuck")
    log.addHandler(stuck_handler)
    log.propagate = False
    try:

        def handler(job: jobq.Job[Any]) -> None:
            if job.payload == "log":
                log.error("stuck in emit, its handler's lock held")
                return
            try:
                while True:
                    pass
            except jobq.JobTimeout as exc:
                seen.append(str(exc))
                raise

        queue = make_queue(handler, timeout=0.05, max_attempts=1, timeout_grace=WAIT)
        queue.enqueue("log", timeout=WAIT)
        queue.start(workers=2)
        assert entered.wait(WAIT)
        logged_to_memory.acquire()  # jobq's own log lines wait too
        try:
            queue.enqueue("loop")
            for _ in range(int(WAIT * 100)):
                if seen:
                    break
                release.wait(0.01)
            assert seen == [jobq.JobTimeout.DEFAULT]
        finally:
            logged_to_memory.release()
            release.set()
        assert queue.join(WAIT)
    finally:
        log.removeHandler(stuck_handler)
        log.propagate = True


# -- a time limit inside jobq's own code, from a handler ------------------------------

# argv: store kind and place; enqueues one job, within the second a busy
# store would make it wait (SQLite's busy timeout is longer).
ENQUEUE_ELSEWHERE = r"""
import sys
import jobq
from jobq.stores import PostgresStore, SqliteStore

if sys.argv[1] == "sqlite":
    store = SqliteStore(sys.argv[2], busy_timeout=1.0)
else:
    store = PostgresStore(sys.argv[2], schema=sys.argv[3], queue=sys.argv[4])
with jobq.JobQueue(lambda job: None, store=store) as queue:
    queue.enqueue("from another process")
"""


def _place(store: Store) -> list[str]:
    if isinstance(store, SqliteStore):
        return ["sqlite", store.path]
    assert isinstance(store, PostgresStore)
    return ["postgres", store.conninfo, store.schema, store.queue]


def test_a_time_limit_while_the_handler_enqueues_never_wedges_the_store(
    make_queue: MakeQueue, store_kind: str
) -> None:
    """The report: JobTimeout landed between BEGIN IMMEDIATE and the try
    that rolls back, so the worker's SQLite connection stayed inside a write
    transaction and every process's enqueue failed (9 of 15 trials)."""
    queue = make_queue(lambda job: None, max_attempts=1, timeout_grace=WAIT)
    died = threading.Event()
    queue.subscribe(lambda event: died.set(), kinds="dead")

    @queue.task(name="fan_out", timeout=0.03)
    def fan_out() -> None:
        while True:
            child.enqueue()

    @queue.task(name="child")
    def child() -> None: ...

    for trial in range(15):
        died.clear()
        job = fan_out.enqueue()
        queue.start(workers=1)
        assert died.wait(WAIT), trial
        queue.stop(timeout=WAIT)
        assert queue.stats().running == 0, trial
        [dead] = queue.dead_jobs()
        assert (dead.id, dead.errors[-1].type) == (job.id, "jobq.errors.JobTimeout")
        assert innermost_file(dead.errors[-1]) == HERE  # at a line of fan_out
        assert queue.delete_dead(job)
        queue.run_pending()  # its children: the store takes writes
        if store_kind in ("sqlite", "postgres"):
            subprocess.run(
                [sys.executable, "-c", ENQUEUE_ELSEWHERE, *_place(queue.store)],
                check=True,
                timeout=60,
                cwd=ROOT,
                capture_output=True,
            )
            assert queue.run_pending() == 1
    assert queue.stats().abandoned == 0


# -- the lines an interruption may land at ---------------------------------------------


class Resource:
    """A context manager that counts its entries and exits."""

    def __init__(self) -> None:
        self.entered = self.exited = 0

    def __enter__(self) -> Resource:
        self.entered += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self.exited += 1


def _uses_cleanup(resource: Resource, lock: threading.Lock, log: list[str]) -> None:
    """Every form of cleanup the app's code may rely on."""
    for _ in range(2):
        with resource:
            log.append("in with")
        lock.acquire()
        try:
            log.append("in try")
        finally:
            lock.release()
        try:
            log.append("before")
            raise KeyError("handled")
        except KeyError:
            log.append("except body")
            log.append("still the except body")
        with resource, resource:
            log.append("two")
    log.append("end")


@jobq.middleware.hands_over
def _call_handler(function: Callable[[], None]) -> None:
    function()


class Landed(Exception):
    """Raised at a line event by ``_interrupt_at``."""


def _interrupt_at(event_number: int) -> tuple[int | None, bool]:
    """Run ``_uses_cleanup`` as a handler and raise at its line event
    ``event_number`` among those ``may_land`` allows; the line it landed at
    (``None``: the run ended first), after checking that every ``with``
    was exited and the lock released."""
    from jobq._worker.interrupt import learn_cleanup_lines, may_land

    learn_cleanup_lines([__file__])  # as the limits thread does at a limit

    resource, lock, log = Resource(), threading.Lock(), []
    seen = 0
    landed: int | None = None

    def tracer(frame: types.FrameType, event: str, arg: object) -> Any:
        nonlocal seen, landed
        if frame.f_code is not _uses_cleanup.__code__:
            return None
        if event == "line" and may_land(frame):
            if seen == event_number:
                landed = frame.f_lineno
                sys.settrace(None)
                raise Landed
            seen += 1
        return tracer

    sys.settrace(tracer)
    try:
        _call_handler(lambda: _uses_cleanup(resource, lock, log))
    except Landed:
        pass
    finally:
        sys.settrace(None)
    assert resource.entered == resource.exited, event_number
    assert not lock.locked(), event_number
    return landed, log[-1:] == ["end"]


def test_an_interruption_at_any_line_it_may_land_at_skips_no_cleanup() -> None:
    """Raise at each line event, one run per event, wherever ``may_land``
    allows it: every ``with`` is exited as often as entered, every lock is
    released, and it never lands in an ``except`` or ``finally`` body."""
    landed_lines: set[int] = set()
    event_number = 0
    while True:
        landed, ended = _interrupt_at(event_number)
        if landed is None:
            assert ended
            break  # every place it may land at was tried
        landed_lines.add(landed)
        event_number += 1
    first = _uses_cleanup.__code__.co_firstlineno
    relative = {line - first for line in landed_lines}
    # Lines counted from the def: the loop, the bodies of with and try, the
    # lines between; never a with (its exit), a try, an except or a finally.
    assert relative == {2, 4, 5, 7, 11, 12, 17, 18}


def test_the_places_an_interruption_may_land_in_are_told_apart() -> None:
    import psycopg

    import jobq.stores.sqlite.store
    import jobq.tasks
    from jobq._worker import runner
    from jobq._worker.interrupt import Place, place_of

    assert place_of(HERE) is Place.OWN
    for module in (jobq.tasks, runner, jobq.stores.sqlite.store, logging, threading):
        assert place_of(str(module.__file__)) is Place.FENCED, module
    assert place_of(str(psycopg.__file__)) is Place.LIBRARY
