"""Wake-ups across processes for the SQLite store: datagrams, not polling.

Every test that needs a wake-up sets ``poll_interval`` (and, with real
workers, the workers' own idle look) to an hour, so only a datagram can wake
anything within the test's patience: a notification or a timeout, never a
sleeping poll. Waits are on conditions and pipes, capped by ``WAIT``.
Other processes are real (``sys.executable``).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from idle_workers import IdleWorkers

import jobq
from jobq.stores import SqliteStore
from jobq.stores.base import NewJob, Signal
from jobq.stores.sqlite import doorbell, wakeups
from jobq.types import AttemptError

ROOT = Path(__file__).resolve().parents[1]
WAIT = 30.0  # seconds; a cap so that a broken test fails instead of hanging
HOUR = 3600.0
#: How long a worker that should not be woken is given to be woken anyway.
QUIET_SPELL = 0.5

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "jobs.db"


@pytest.fixture
def opened(path: Path) -> Iterator[Callable[..., tuple[SqliteStore, Signal]]]:
    """Opens stores on ``path`` (each with a Signal of its own, polling only
    once an hour); closes them after the test."""
    stores: list[SqliteStore] = []

    def make(at: Path = path, **options: Any) -> tuple[SqliteStore, Signal]:
        options.setdefault("poll_interval", HOUR)
        store = SqliteStore(at, **options)
        sig = Signal()
        store.open(sig, dead_letter_limit=10)
        stores.append(store)
        return store, sig

    yield make
    for store in stores:
        store.close()


def job(payload: Any = None, run_at: float | None = None) -> NewJob:
    return NewJob(json.dumps(payload), time.time() if run_at is None else run_at,
                  None, 0, 3)  # fmt: skip


def run(code: str, *args: str) -> None:
    """Run ``code`` in another Python process (``args`` in ``sys.argv[1:]``)."""
    subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, check=True, timeout=WAIT
    )


ENQUEUE = """
import sys, jobq
queue = jobq.JobQueue(store=sys.argv[1])
queue.enqueue_many(range(int(sys.argv[2])))
queue.close()
"""


def sockets(path: Path) -> list[str]:
    return sorted(os.listdir(doorbell.directory_of(str(path))))


# -- the directory and the sockets ---------------------------------------------


def test_a_store_binds_a_quiet_socket_beside_the_database_and_removes_it(
    path: Path, opened: Callable[..., tuple[SqliteStore, Signal]]
) -> None:
    store, _ = opened()
    directory = Path(doorbell.directory_of(str(path)))

    assert store.listening
    [name] = sockets(path)
    assert name.startswith(f"{os.getpid()}.")
    assert name.endswith(doorbell.QUIET)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700  # as the file: 0600
    socket_mode = (directory / name).stat().st_mode
    assert stat.S_ISSOCK(socket_mode)
    assert stat.S_IMODE(socket_mode) == 0o600

    store.claim_many(time.time(), 1)  # it runs jobs: rung from now on
    [name] = sockets(path)
    assert name.endswith(doorbell.SUFFIX)

    store.close()
    assert not directory.exists()  # the last one out removes the directory
    assert not store.listening


def test_the_directory_and_sockets_let_in_whoever_may_write_the_database(
    path: Path, opened: Callable[..., tuple[SqliteStore, Signal]]
) -> None:
    SqliteStore(path).migrate()
    os.chmod(path, 0o660)  # a group shares the database
    old = os.umask(0o077)
    try:
        store, _ = opened()
    finally:
        os.umask(old)
    directory = Path(doorbell.directory_of(str(path)))

    assert stat.S_IMODE(directory.stat().st_mode) == 0o770
    [name] = sockets(path)
    assert stat.S_IMODE((directory / name).stat().st_mode) == 0o660
    assert store.listening


def test_a_second_store_keeps_the_directory_when_the_first_closes(
    path: Path, opened: Callable[..., tuple[SqliteStore, Signal]]
) -> None:
    first, _ = opened()
    second, _ = opened()
    assert len(sockets(path)) == 2

    first.close()

    assert len(sockets(path)) == 1
    assert second.listening


# -- waking idle workers -----------------------------------------------------------


def test_another_process_enqueue_wakes_as_many_idle_workers_as_jobs(
    path: Path, opened: Callable[..., tuple[SqliteStore, Signal]]
) -> None:
    store, sig = opened()
    store.claim_many(time.time(), 1)

    one = IdleWorkers(sig, 3)
    run(ENQUEUE, f"sqlite:///{path}", "1")
    assert one.settle(1, QUIET_SPELL) == [True, False, False]

    two = IdleWorkers(sig, 3)
    run(ENQUEUE, f"sqlite:///{path}", "2")
    assert two.settle(2, QUIET_SPELL) == [True, True, False]


def test_a_delayed_job_of_another_process_wakes_one_idle_worker(
    path: Path, opened: Callable[..., tuple[SqliteStore, Signal]]
) -> None:
    store, sig = opened()
    other, _ = opened()
    store.claim_many(time.time(), 1)
    idle = IdleWorkers(sig, 2)

    other.add([job("later", run_at=time.time() + HOUR)], time.time())

    # one, to shorten its wait for the due time
    assert idle.settle(1, QUIET_SPELL) == [True, False]


def test_a_retry_release_and_revival_elsewhere_wake_idle_workers(
    path: Path, opened: Callable[..., tuple[SqliteStore, Signal]]
) -> None:
    store, sig = opened()
    other, _ = opened()
    store.claim_many(time.time(), 1)
    now = time.time()
    other.add([job(1, run_at=now), job(2, run_at=now)], now)
    first, second = other.claim_many(now, 2)

    for change in (
        lambda: other.release([first], now),
        lambda: other.fail(second, failure(now), now, now),  # due again at once
    ):
        idle = IdleWorkers(sig, 1, timeout=WAIT)
        change()
        assert idle.join() == [True]
    [again] = other.claim_many(now, 1)
    other.fail(again, failure(now), None, now)  # dead
    [dead] = other.list_jobs(jobq.JobState.DEAD)
    idle = IdleWorkers(sig, 1, timeout=WAIT)
    assert other.revive(dead.id, now)
    assert idle.join() == [True]


def failure(now: float) -> AttemptError:
    return AttemptError("ValueError", "no", "", now)


def test_workers_run_another_process_jobs_without_a_sleeping_poll(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Idle workers look by themselves only once an hour, and the store polls
    # once an hour: every one of these jobs is started because a datagram
    # woke a worker.
    monkeypatch.setattr("jobq._worker.pool.MAX_IDLE_WAIT", HOUR)
    started: list[float] = []
    done = threading.Event()
    n = 50

    def handler(job: jobq.Job[Any]) -> None:
        started.append(time.time() - job.payload)
        if len(started) == n:
            done.set()

    store = SqliteStore(path, poll_interval=HOUR)
    queue = jobq.JobQueue(handler, store=store).start(workers=4)
    try:
        queue.stats()
        assert store.listening
        run(PACED, f"sqlite:///{path}", str(n))
        assert done.wait(WAIT)
    finally:
        queue.close()
    assert len(started) == n


PACED = """
import sys, time, jobq
queue = jobq.JobQueue(store=sys.argv[1])
for _ in range(int(sys.argv[2])):
    queue.enqueue(time.time())
    time.sleep(0.002)
queue.close()
"""


def test_an_enqueue_only_store_is_never_rung(
    path: Path, opened: Callable[..., tuple[SqliteStore, Signal]]
) -> None:
    producer, _ = opened()
    bystander, bystander_sig = opened()  # enqueues only: never claims
    worker, worker_sig = opened()
    worker.claim_many(time.time(), 1)
    idle = IdleWorkers(worker_sig, 1, timeout=WAIT)
    generation = bystander_sig.generation

    producer.add([job()], time.time())

    assert idle.join() == [True]
    names = sockets(path)
    assert sum(n.endswith(doorbell.SUFFIX) for n in names) == 1
    assert sum(n.endswith(doorbell.QUIET) for n in names) == 2
    assert bystander_sig.generation == generation
    assert bystander.listening


# -- join across processes -----------------------------------------------------------

FINISH_WHEN_TOLD = """
import sys, time
from jobq.stores import SqliteStore
from jobq.stores.base import Done, Signal
store = SqliteStore(sys.argv[1], poll_interval=3600)
store.open(Signal(), dead_letter_limit=10)
[claim] = store.claim_many(time.time(), 1)
print("claimed", flush=True)
sys.stdin.readline()
deadline = time.monotonic() + 30
while not store._watcher.others_join():  # the joiner's word arrived
    assert time.monotonic() < deadline
    time.sleep(0.001)
store.finish_many([Done(claim, None)], None, time.time())
store.close()
"""


def test_the_process_that_settles_the_queue_wakes_a_joiner_elsewhere(
    path: Path, opened: Callable[..., tuple[SqliteStore, Signal]]
) -> None:
    store, sig = opened()
    store.add([job()], time.time())
    with subprocess.Popen(
        [sys.executable, "-c", FINISH_WHEN_TOLD, str(path)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        try:
            assert proc.stdout.readline() == "claimed\n"
            with sig.lock:
                sig.joiners += 1  # as JobQueue.join does, then looks
                try:
                    assert store.stats().running == 1  # says "I join" to others
                    proc.stdin.write("go\n")
                    proc.stdin.flush()
                    assert sig.settled.wait(WAIT)  # rung, not timed out
                finally:
                    sig.joiners -= 1
            assert store.stats().running == 0
            assert proc.wait(WAIT) == 0
        finally:
            proc.kill()


# -- messages, dead processes, fork --------------------------------------------------


def test_strangers_datagrams_wake_at_most_a_bounded_number_of_workers(
    path: Path, opened: Callable[..., tuple[SqliteStore, Signal]]
) -> None:
    store, sig = opened()
    store.claim_many(time.time(), 1)
    [name] = sockets(path)
    address = os.path.join(doorbell.directory_of(str(path)), name)
    stranger = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    with stranger:
        idle = IdleWorkers(sig, 2, timeout=QUIET_SPELL)
        for message in (b"", b"zzz", b"s", b"j", b"\xff" * 100):
            stranger.sendto(message, address)
        assert idle.join() == [False, False]

        idle = IdleWorkers(sig, 2, timeout=QUIET_SPELL)
        stranger.sendto(b"a-5", address)  # malformed: one job
        assert idle.join() == [True, False]

    assert wakeups.count_of(b"a3") == 3
    assert wakeups.count_of(b"a") == wakeups.count_of(b"ax") == 1
    assert wakeups.count_of(b"a" + b"9" * 40) == 1  # too long: not a count
    assert wakeups.count_of(b"a9999999") == wakeups.MAX_COUNT
    assert store.listening


def test_the_socket_of_a_killed_process_is_removed_by_the_next_ring(
    path: Path, opened: Callable[..., tuple[SqliteStore, Signal]]
) -> None:
    store, _ = opened()
    for claims in (True, False):  # a rung socket, then a quiet one
        with subprocess.Popen(
            [sys.executable, "-c", HOLD_OPEN, str(path), str(claims)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        ) as proc:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "open\n"
            assert len(sockets(path)) == 2
            proc.send_signal(signal.SIGKILL)
            proc.wait(WAIT)
        assert len(sockets(path)) == 2  # nobody closed it

        if claims:
            store.add([job()], time.time())  # refused: removed
        else:
            opened()[0].close()  # the next store that opens sweeps it
        [name] = sockets(path)
        assert name.startswith(f"{os.getpid()}.")


HOLD_OPEN = """
import sys, threading, time
from jobq.stores import SqliteStore
from jobq.stores.base import Signal
store = SqliteStore(sys.argv[1])
store.open(Signal(), dead_letter_limit=10)
if sys.argv[2] == "True":
    store.claim_many(time.time(), 1)
print("open", flush=True)
threading.Event().wait()
"""


@needs_fork
def test_a_forked_child_rings_and_is_rung_on_a_socket_of_its_own(
    path: Path, opened: Callable[..., tuple[SqliteStore, Signal]]
) -> None:
    store, sig = opened()
    store.claim_many(time.time(), 1)
    [parent_socket] = sockets(path)
    idle = IdleWorkers(sig, 1, timeout=WAIT)  # for the child's ring
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own socket, removed when it closes
        status = 1
        try:
            store.open(Signal(), dead_letter_limit=10)
            mine = [n for n in sockets(path) if n != parent_socket]
            store.add([job("from the child")], time.time())  # rings the parent
            store.close()
            ok = len(mine) == 1 and sockets(path) == [parent_socket]
            status = 0 if ok else 2
        finally:
            os.write(write, b"%d" % status)
            os._exit(status)
    os.close(write)
    with os.fdopen(read) as pipe:
        assert pipe.read() == "0"
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert idle.join() == [True]
    assert sockets(path) == [parent_socket]
    assert store.listening


# -- where no socket can be made ------------------------------------------------------


def test_a_long_path_is_reached_through_the_directory_descriptor(
    tmp_path: Path, opened: Callable[..., tuple[SqliteStore, Signal]]
) -> None:
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd")
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = deep / "jobs.db"
    assert len(str(path)) > 108
    store, sig = opened(path)
    store.claim_many(time.time(), 1)
    assert store.listening

    idle = IdleWorkers(sig, 1, timeout=WAIT)
    run(ENQUEUE, f"sqlite:///{path}", "1")

    assert idle.join() == [True]


def test_without_a_socket_the_store_polls_and_says_so_once(
    path: Path,
    opened: Callable[..., tuple[SqliteStore, Signal]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    Path(doorbell.directory_of(str(path))).write_text("not a directory")
    with caplog.at_level(logging.WARNING, logger="jobq.stores.sqlite"):
        store, sig = opened(poll_interval=0.02)
        opened(poll_interval=0.02)
    assert not store.listening
    [record] = [r for r in caplog.records if "wake-up socket" in r.getMessage()]
    assert "poll_interval=0.02" in record.getMessage()

    idle = IdleWorkers(sig, 1, timeout=WAIT)
    run(ENQUEUE, f"sqlite:///{path}", "1")

    assert idle.join() == [True]  # data_version changed: polled


def test_renewing_and_finishing_ring_nobody(
    path: Path, opened: Callable[..., tuple[SqliteStore, Signal]]
) -> None:
    store, sig = opened()
    other, _ = opened()
    store.claim_many(time.time(), 1)
    idle = IdleWorkers(sig, 1, timeout=WAIT)
    other.add([job()], time.time())
    assert idle.join() == [True]
    [claim] = other.claim_many(time.time(), 1)
    idle = IdleWorkers(sig, 1, timeout=QUIET_SPELL)

    other.renew([claim], time.time())
    other.finish(claim, None, None, time.time())

    assert idle.join() == [False]


def test_a_wake_up_socket_that_fails_gives_way_to_polling(
    path: Path,
    opened: Callable[..., tuple[SqliteStore, Signal]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, sig = opened(poll_interval=0.02)
    store.claim_many(time.time(), 1)
    assert store.listening

    def broken(self: doorbell.Doorbell) -> list[bytes]:
        raise OSError("broken")

    monkeypatch.setattr(doorbell.Doorbell, "receive", broken)
    with caplog.at_level(logging.ERROR, logger="jobq.stores.sqlite"):
        idle = IdleWorkers(sig, 1, timeout=WAIT)
        run(ENQUEUE, f"sqlite:///{path}", "1")  # its ring breaks the relay...
        assert idle.join() == [True]  # ... and polling finds the change

    assert not store.listening
    assert not Path(doorbell.directory_of(str(path))).exists()  # nothing to ring
    assert any("polling data_version" in r.getMessage() for r in caplog.records)
