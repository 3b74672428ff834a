"""Group commit (``jobq.stores._group``): enqueues that arrive while a write
is in flight share the next transaction, and each caller still gets its own
outcome.

The first half drives ``GroupCommit`` with a write of its own making, to
place every caller exactly; the second runs it in the SQLite and PostgreSQL
stores, with the first write held back (``HeldWrite``) until the callers
under test have queued behind it.
"""

from __future__ import annotations

import ctypes
import secrets
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from faults import TcpProxy, wait_for
from postgres_url import POSTGRES_URL

import jobq
from jobq._worker import interrupt
from jobq.errors import OutcomeUnknown
from jobq.stores import PostgresStore, Signal, SqliteStore, Store
from jobq.stores._group import Call, GroupCommit
from jobq.stores.base import NewJob
from jobq.types import Enqueued

WAIT = 30.0  # seconds: a cap so that a broken run fails instead of hanging


def job(payload: str, **fields: Any) -> NewJob:
    return NewJob(f'"{payload}"', 0.0, None, 0, 3)._replace(**fields)


def call(payload: str) -> Call:
    return Call([job(payload)], 0.0, None)


class Recorder:
    """A write that records each group it is given, fails as told, and
    holds back the first one until ``release``."""

    def __init__(self, fail: Callable[[Sequence[Call]], BaseException | None]) -> None:
        self.groups: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self._fail = fail
        self._ids = iter(range(1, 1_000))

    def __call__(self, calls: Sequence[Call]) -> list[list[Enqueued]]:
        if not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(WAIT)
        error = self._fail(calls)
        if error is not None:
            raise error
        self.groups.append([c.jobs[0].payload.strip('"') for c in calls])
        return [[Enqueued(next(self._ids), False) for _ in c.jobs] for c in calls]


def never(calls: Sequence[Call]) -> None:
    return None


def waits_in_group(thread: threading.Thread | None = None) -> bool:
    """Whether ``thread`` (default: the main thread) is blocked in
    ``GroupCommit._wait``, queued behind a write."""
    ident = (thread or threading.main_thread()).ident
    frame = sys._current_frames().get(ident or 0)
    return frame is not None and frame.f_code is GroupCommit._wait.__code__


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(16) as executor:
        yield executor


def queue_behind_a_write(
    group: GroupCommit, write: Recorder, pool: ThreadPoolExecutor, *payloads: str
) -> tuple[Future[list[Enqueued]], list[Future[list[Enqueued]]]]:
    """A caller writing (held back by ``write``), and one caller per
    payload queued behind it, in that order."""
    first = pool.submit(group.add, call("first"))
    assert write.entered.wait(WAIT)
    queued = []
    for n, payload in enumerate(payloads, 1):
        queued.append(pool.submit(group.add, call(payload)))
        wait_for(lambda n=n: len(group._queued) == n)
    return first, queued


def test_a_lone_caller_writes_at_once() -> None:
    write = Recorder(never)
    write.release.set()
    group = GroupCommit(write)
    assert group.add(call("a")) == [Enqueued(1, False)]
    assert group.add(call("b")) == [Enqueued(2, False)]
    assert write.groups == [["a"], ["b"]]


def test_callers_queued_behind_a_write_share_the_next_one(
    pool: ThreadPoolExecutor,
) -> None:
    write = Recorder(never)
    group = GroupCommit(write)
    first, queued = queue_behind_a_write(group, write, pool, "b", "c", "d")
    write.release.set()

    assert first.result(WAIT) == [Enqueued(1, False)]
    assert [f.result(WAIT) for f in queued] == [
        [Enqueued(2, False)],
        [Enqueued(3, False)],
        [Enqueued(4, False)],
    ]
    assert write.groups == [["first"], ["b", "c", "d"]]


def test_with_two_writes_in_flight_each_hands_on_the_callers_queued_then(
    pool: ThreadPoolExecutor,
) -> None:
    """Writes end while another is in flight: each hands the callers queued
    then to the first of them; no caller is in two groups, none is left
    waiting, and no write slot is lost."""
    ends = {name: threading.Event() for name in ("w1", "w2", "a")}
    groups: list[list[str]] = []
    inside = threading.Semaphore(0)

    def write(calls: Sequence[Call]) -> list[list[Enqueued]]:
        names = [c.jobs[0].payload.strip('"') for c in calls]
        inside.release()
        assert ends[names[0]].wait(WAIT)
        groups.append(names)
        return [[Enqueued(len(groups), False)] for _ in calls]

    group = GroupCommit(write, in_flight=2)
    writing = [pool.submit(group.add, call(name)) for name in ("w1", "w2")]
    for _ in range(2):
        assert inside.acquire(timeout=WAIT)
    early = [pool.submit(group.add, call(name)) for name in ("a", "b")]
    wait_for(lambda: len(group._queued) == 2)
    ends["w1"].set()
    assert inside.acquire(timeout=WAIT)  # a writes a and b (held), w2 too
    late = pool.submit(group.add, call("c"))
    wait_for(lambda: len(group._queued) == 1)
    ends["c"] = ends["w2"]
    ends["w2"].set()
    wait_for(lambda: ["c"] in groups)
    ends["a"].set()

    assert all(f.result(WAIT) for f in [*writing, *early, late])
    assert groups == [["w1"], ["w2"], ["c"], ["a", "b"]]
    assert group._writing == 0


def test_a_call_that_fails_a_group_fails_alone_and_the_others_are_written(
    pool: ThreadPoolExecutor,
) -> None:
    def bad_fails(calls: Sequence[Call]) -> BaseException | None:
        bad = any(c.jobs[0].payload == '"bad"' for c in calls)
        return ValueError("bad payload") if bad else None

    write = Recorder(bad_fails)
    group = GroupCommit(write)
    first, (b, bad, d) = queue_behind_a_write(group, write, pool, "b", "bad", "d")
    write.release.set()

    assert all(f.result(WAIT) for f in [first, b, d])
    with pytest.raises(ValueError, match="bad payload"):
        bad.result(WAIT)
    assert write.groups == [["first"], ["b"], ["d"]]


def test_outcome_unknown_of_a_group_is_every_caller_s_and_the_next_call_writes(
    pool: ThreadPoolExecutor,
) -> None:
    lost = OutcomeUnknown("connection lost")

    def unknown_if_grouped(calls: Sequence[Call]) -> BaseException | None:
        return lost if len(calls) > 1 else None

    write = Recorder(unknown_if_grouped)
    group = GroupCommit(write)
    first, queued = queue_behind_a_write(group, write, pool, "b", "c")
    write.release.set()

    assert first.result(WAIT)
    for future in queued:
        with pytest.raises(OutcomeUnknown, match="connection lost"):
            future.result(WAIT)
    assert write.groups == [["first"]]  # neither was tried again alone
    assert group.add(call("later"))
    assert write.groups == [["first"], ["later"]]


class Interrupted(Exception):
    """Raised in a caller's thread from outside, as ``KeyboardInterrupt`` is."""


def test_a_caller_interrupted_while_queued_withdraws_and_the_others_go_on(
    pool: ThreadPoolExecutor,
) -> None:
    """A signal handler raises in the main thread while it waits in the
    group (as Ctrl-C does): its job is never written, the write in flight
    and the caller queued after it end as planned."""
    write = Recorder(never)
    group = GroupCommit(write)
    first = pool.submit(group.add, call("first"))
    assert write.entered.wait(WAIT)

    def interrupt_main() -> None:
        wait_for(waits_in_group)
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGUSR1)

    def raise_interrupted(signum: int, frame: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, raise_interrupted)
    try:
        pool.submit(interrupt_main)
        with pytest.raises(Interrupted):
            group.add(call("interrupted"))
    finally:
        signal.signal(signal.SIGUSR1, previous)
    after = pool.submit(group.add, call("after"))
    wait_for(lambda: len(group._queued) == 1)
    write.release.set()

    assert all(f.result(WAIT) for f in [first, after])
    assert write.groups == [["first"], ["after"]]


def test_a_caller_interrupted_as_it_is_given_the_lead_passes_it_on(
    pool: ThreadPoolExecutor,
) -> None:
    """An exception raised asynchronously in the first queued caller lands as
    the write in flight hands it the lead: it withdraws, and the caller
    behind it leads instead; nothing waits for ever."""
    write = Recorder(never)
    group = GroupCommit(write)
    first = pool.submit(group.add, call("first"))
    assert write.entered.wait(WAIT)
    threads: dict[str, threading.Thread] = {}

    def add_as(name: str) -> list[Enqueued]:
        threads[name] = threading.current_thread()
        return group.add(call(name))

    interrupted = pool.submit(add_as, "interrupted")
    wait_for(lambda: len(group._queued) == 1)
    behind = pool.submit(add_as, "behind")
    wait_for(lambda: len(group._queued) == 2)
    wait_for(lambda: waits_in_group(threads["interrupted"]))
    ident = ctypes.c_ulong(threads["interrupted"].ident or 0)
    set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    assert set_async_exc(ident, ctypes.py_object(Interrupted)) == 1
    write.release.set()

    with pytest.raises(Interrupted):
        interrupted.result(WAIT)
    assert all(f.result(WAIT) for f in [first, behind])
    assert write.groups == [["first"], ["behind"]]
    assert group.add(call("later"))  # not left busy


# -- in the stores -------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def open_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., Store]]:
    """Opens stores of the kind (each on a place of its own) and closes them."""
    stores: list[Store] = []

    def make(*, opened: bool = True) -> Store:
        """A store, opened unless a queue will open it (and close it)."""
        store: Store
        if request.param == "sqlite":
            store = SqliteStore(tmp_path / f"{secrets.token_hex(4)}.db")
        else:
            schema = request.getfixturevalue("postgres_schema")
            queue = f"group-{secrets.token_hex(4)}"
            store = PostgresStore(POSTGRES_URL, schema=schema, queue=queue)
        if opened:
            store.open(Signal(), dead_letter_limit=100)
            stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


class HeldWrite:
    """Holds the store's writes back until ``release``; counts the calls
    each write was given, and calls ``on_group`` as a write of several
    begins."""

    def __init__(self, store: Any) -> None:
        self.group: GroupCommit = store._group
        self._write = self.group._write
        self.group._write = self
        self.release = threading.Event()
        self.sizes: list[int] = []
        self.on_group: Callable[[], None] = lambda: None
        self._inside = threading.Semaphore(0)

    def __call__(self, calls: Sequence[Call]) -> list[list[Enqueued]]:
        self._inside.release()
        assert self.release.wait(WAIT)
        self.sizes.append(len(calls))
        if len(calls) > 1:
            self.on_group()
        return self._write(calls)

    def fill(
        self, pool: ThreadPoolExecutor, add: Callable[[Any], Any], argument: Any
    ) -> list[Future[Any]]:
        """``add(argument)`` in as many threads as the store writes at once
        (PostgreSQL: 2), each held back inside its write: who comes next
        queues."""
        futures = []
        for _ in range(self.group._in_flight):
            futures.append(pool.submit(add, argument))
            assert self._inside.acquire(timeout=WAIT)
        return futures

    @property
    def lone(self) -> list[int]:
        """The sizes of the writes ``fill`` held back."""
        return [1] * self.group._in_flight

    def queue(
        self, pool: ThreadPoolExecutor, add: Callable[[Any], Any], *arguments: Any
    ) -> list[Future[Any]]:
        """``add(argument)`` for each argument in a thread of ``pool``, each
        once the one before it queued behind the held write."""
        futures = []
        queued = len(self.group._queued)
        for n, argument in enumerate(arguments, queued + 1):
            futures.append(pool.submit(add, argument))
            wait_for(lambda n=n: len(self.group._queued) == n)
        return futures


def adder(store: Store) -> Callable[[NewJob], list[Enqueued]]:
    return lambda new: store.add([new], 1.0)


def payloads(store: Store) -> list[str]:
    return sorted(job.payload for job in store.list_jobs(jobq.JobState.PENDING))


def test_enqueues_queued_behind_a_write_commit_together_each_with_its_job(
    open_store: Callable[..., Store], pool: ThreadPoolExecutor
) -> None:
    store = open_store()
    held = HeldWrite(store)
    firsts = held.fill(pool, adder(store), job("first"))
    queued = held.queue(pool, adder(store), *[job(f"p{n}") for n in range(7)])
    held.release.set()

    ids = [f.result(WAIT)[0].id for f in [*firsts, *queued]]
    assert held.sizes == [*held.lone, 7]
    assert len(set(ids)) == len(ids)
    for n, job_id in enumerate(ids[len(firsts) :]):
        record = store.get(job_id, 2.0)
        assert record is not None
        assert record.payload == f"p{n}"


def test_a_bad_job_in_a_group_fails_only_its_caller(
    open_store: Callable[..., Store], pool: ThreadPoolExecutor
) -> None:
    store = open_store()
    held = HeldWrite(store)
    (first, *_) = held.fill(pool, adder(store), job("first"))
    too_big = job("bad", priority=2**70)  # past any integer column: refused
    good, bad, also_good = held.queue(
        pool, adder(store), job("good"), too_big, job("also")
    )
    held.release.set()

    assert all(f.result(WAIT) for f in [first, good, also_good])
    with pytest.raises((OverflowError, jobq.StoreError)):  # SQLite's, PostgreSQL's
        bad.result(WAIT)
    assert [p for p in payloads(store) if p != "first"] == ["also", "good"]


def test_callers_with_one_key_in_a_group_get_one_job(
    open_store: Callable[..., Store], pool: ThreadPoolExecutor
) -> None:
    store = open_store()
    held = HeldWrite(store)
    (first, *_) = held.fill(pool, adder(store), job("first"))
    one, two = held.queue(pool, adder(store), job("a", key="k"), job("b", key="k"))
    held.release.set()

    [added], [again] = one.result(WAIT), two.result(WAIT)
    assert first.result(WAIT)
    assert held.sizes == [*held.lone, 2]
    assert not added.duplicate
    assert again == Enqueued(added.id, True)
    assert [p for p in payloads(store) if p != "first"] == ["a"]


def test_max_pending_counts_each_caller_of_a_group_exactly(
    open_store: Callable[..., Store], pool: ThreadPoolExecutor
) -> None:
    store = open_store()
    held = HeldWrite(store)
    firsts = held.fill(pool, adder(store), job("first"))
    room_for_one = len(firsts) + 1

    def add_capped(payload: str) -> list[Enqueued]:
        return store.add([job(payload)], 1.0, max_pending=room_for_one)

    a, b, c = held.queue(pool, add_capped, *"abc")
    held.release.set()

    assert all(first.result(WAIT) for first in firsts)
    # Together they would pass the cap: each is tried alone, in turn.
    outcomes = [future.exception(WAIT) for future in (a, b, c)]
    assert held.sizes == [*held.lone, 3, 1, 1, 1]
    assert [type(outcome).__name__ for outcome in outcomes] == [
        "NoneType", "QueueFull", "QueueFull"]  # fmt: skip
    assert [p for p in payloads(store) if p != "first"] == ["a"]


def test_a_handler_s_time_limit_waits_until_its_enqueue_in_a_group_returned(
    open_store: Callable[..., Store], pool: ThreadPoolExecutor
) -> None:
    """The limit passes while the handler waits in a group: ``JobTimeout``
    lands at the handler's next line, after its enqueue returned; its job
    and the others' are written, and the group goes on."""
    outbox = open_store(opened=False)
    held = HeldWrite(outbox)
    sent: list[Enqueued] = []

    def handler(job: jobq.Job[Any]) -> None:
        sent.append(outbox_queue.enqueue("from the handler"))
        while True:  # pure Python: interrupted at its next line
            pass

    outbox_queue: jobq.JobQueue[Any] = jobq.JobQueue(store=outbox)
    queue: jobq.JobQueue[Any] = jobq.JobQueue(
        handler, store=open_store(opened=False), timeout=0.05, max_attempts=1
    )
    try:
        firsts = held.fill(pool, outbox_queue.enqueue, "first")
        job_id = queue.enqueue("run").id
        queue.start(workers=1)
        wait_for(lambda: len(held.group._queued) == 1)  # the handler's enqueue
        (other,) = held.queue(pool, outbox_queue.enqueue, "other")
        wait_for(lambda: bool(interrupt._waiting))  # the limit asked to interrupt
        held.release.set()

        assert queue.join(WAIT)
        assert all(f.result(WAIT) for f in [*firsts, other])
        [dead] = queue.dead_jobs()
        assert dead.id == job_id
        assert dead.errors[0].type == "jobq.errors.JobTimeout"
        assert len(sent) == 1
        assert outbox_queue.get(sent[0]) is not None
        assert [p for p in payloads(outbox) if p != "first"] == [
            "from the handler", "other"]  # fmt: skip
        assert outbox_queue.enqueue("later")  # the group is not left busy
    finally:
        held.release.set()
        queue.close(timeout=5)
        outbox_queue.close()


def test_a_group_whose_connection_is_lost_raises_outcome_unknown_in_every_caller(
    postgres_schema: str, pool: ThreadPoolExecutor
) -> None:
    """Keyed enqueues retried after it find or add exactly one job each."""
    proxy = TcpProxy(("127.0.0.1", 5432))
    store = PostgresStore(proxy.url(POSTGRES_URL), schema=postgres_schema,
                          queue=f"group-{secrets.token_hex(4)}", listen=False,
                          pool_size=1, connect_timeout=2.0)  # fmt: skip
    queue: jobq.JobQueue[Any] = jobq.JobQueue(store=store)
    held = HeldWrite(store)
    held.on_group = proxy.cut_answer  # the group's first request's answer

    def keyed(payload: str) -> Enqueued:
        return queue.enqueue(payload, key=payload)

    try:
        queue.stats()  # opened: a connection waits in the pool
        # No wake-ups sent to other processes: the only requests through
        # the proxy are the writes' (the cut must meet the group's).
        store._notifier = None
        store._group._in_flight = 1  # and one at a time, the group's last
        firsts = held.fill(pool, queue.enqueue, "first")
        grouped = held.queue(pool, keyed, "a", "b")
        held.release.set()

        assert all(first.result(WAIT) for first in firsts)
        for future in grouped:
            with pytest.raises(OutcomeUnknown):
                future.result(WAIT)
        assert held.sizes == [*held.lone, 2]  # neither tried again alone
        for payload in "ab":  # retried: its job, found or added, once
            keyed(payload)
        assert [p for p in payloads(store) if p != "first"] == ["a", "b"]
    finally:
        held.release.set()
        queue.close()
        proxy.close()
