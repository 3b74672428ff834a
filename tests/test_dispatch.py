"""One place per queue talks to the store for its workers (``jobq._worker.dispatch``).

- The dispatcher claims for the workers that are idle, in one store call:
  as many jobs as idle workers, never more (a crash then re-runs at most one
  job per worker and counts no attempt for a job that never started).
- Group commit: outcomes handed in while a pass writes go into the next
  pass's write together, and a worker gets no new job before its own is
  written.
- A crash while a batch of outcomes is being written loses no job: each of
  that batch runs again, and no other job does.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import jobq
from jobq._worker.dispatch import Dispatcher
from jobq.stores import SqliteStore
from jobq.stores.base import Claim, Signal

ROOT = Path(__file__).resolve().parents[1]
WAIT = 10.0  # seconds; a bound so that a broken dispatcher fails, never hangs


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.001)


class CountingStore(SqliteStore):
    """A SQLite store that notes each claim: how many were asked, how many
    came back."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.claims: list[tuple[int, int]] = []

    def claim_many(self, now: float, limit: int) -> list[Claim]:
        claims = super().claim_many(now, limit)
        self.claims.append((limit, len(claims)))
        return claims


class Gate:
    def __init__(self) -> None:
        self.opened = threading.Event()
        self.started: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, job: jobq.Job[Any]) -> None:
        with self._lock:
            self.started.append(job.payload)
        assert self.opened.wait(WAIT)


@pytest.fixture
def gate() -> Iterator[Gate]:
    gate = Gate()
    yield gate
    gate.opened.set()


def test_idle_workers_get_their_jobs_from_one_claim_of_exactly_their_number(
    tmp_path: Path, gate: Gate
) -> None:
    store = CountingStore(tmp_path / "jobs.db")
    queue = jobq.JobQueue(gate, store=store).start(workers=4)
    try:
        wait_until(lambda: queue._signal.idle_workers == 4, "four idle workers")
        store.claims.clear()

        queue.enqueue_many(range(10))
        wait_until(lambda: len(gate.started) == 4, "four jobs to start")

        assert [claim for claim in store.claims if claim[1]] == [(4, 4)]
        stats = queue.stats()
        assert (stats.running, stats.pending) == (4, 6)
    finally:
        gate.opened.set()
        queue.close()


def test_a_worker_that_finishes_claims_for_itself_alone(
    tmp_path: Path, gate: Gate
) -> None:
    store = CountingStore(tmp_path / "jobs.db")
    queue = jobq.JobQueue(gate, store=store).start(workers=2)
    try:
        queue.enqueue_many(range(3))
        wait_until(lambda: len(gate.started) == 2, "two jobs to start")
        store.claims.clear()

        gate.opened.set()
        assert queue.join(timeout=WAIT)

        taken = [claim for claim in store.claims if claim[1]]
        assert sum(got for _, got in taken) == 1
        assert all(asked <= 2 for asked, _ in store.claims)
    finally:
        queue.close()


# -- group commit -------------------------------------------------------------------


class SlowRunner:
    """Stands in for the runner: the first write waits until the test lets
    it go, so that the others pile up behind it."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []
        self.first_write = threading.Event()
        self.let_go = threading.Event()

    def record(self, outcomes: list[Any], *, starting: list[Claim]) -> list[Claim]:
        if not self.batches:
            self.first_write.set()
            assert self.let_go.wait(WAIT)
        self.batches.append(list(outcomes))
        return starting

    def hold(self, claims: list[Claim]) -> None:
        """Nothing is ever due here."""


class NothingDue:
    def claim_many(self, now: float, limit: int) -> list[Claim]:
        return []

    def next_due(self) -> float | None:
        return None


def test_outcomes_handed_in_during_a_write_go_into_the_next_one_together() -> None:
    runner, stopping = SlowRunner(), threading.Event()
    signal = Signal()
    dispatcher = Dispatcher(
        NothingDue(), runner, signal, time.time, stopping.is_set,  # type: ignore[arg-type]
        durable=True,
    )  # fmt: skip
    returned: list[tuple[int, int]] = []  # (outcome, batches written then)

    def finish(n: int) -> None:
        assert dispatcher.next([n], 1) is None  # type: ignore[list-item]
        returned.append((n, len(runner.batches)))

    first = threading.Thread(target=finish, args=(0,))
    first.start()
    assert runner.first_write.wait(WAIT)
    others = [threading.Thread(target=finish, args=(n,)) for n in range(1, 8)]
    for thread in others:
        thread.start()
    wait_until(lambda: dispatcher.waiting == 7, "seven outcomes waiting")

    assert returned == []  # nobody returns before its outcome is written
    runner.let_go.set()
    wait_until(lambda: len(runner.batches) == 2, "the second write")
    with signal.lock:
        stopping.set()
        signal.work.notify_all()
    for thread in [first, *others]:
        thread.join(WAIT)

    assert runner.batches[0] == [0]
    assert sorted(runner.batches[1]) == list(range(1, 8))
    assert sorted(n for n, _ in returned) == list(range(8))
    assert all(written >= (1 if n == 0 else 2) for n, written in returned)


def test_a_persistent_store_writes_the_finishes_that_piled_up_in_one_write(
    tmp_path: Path,
) -> None:
    writes: list[int] = []

    class Recording(SqliteStore):
        def finish_many(self, done: Any, keep_until: Any, now: float) -> list[bool]:
            if not writes:  # hold the first write until the others wait
                dispatcher = queue._pool._dispatcher
                wait_until(lambda: dispatcher.waiting == 7, "seven waiting outcomes")
            writes.append(len(done))
            return super().finish_many(done, keep_until, now)

    all_running = threading.Barrier(8)  # all eight run before any finishes
    queue = jobq.JobQueue(
        lambda job: all_running.wait(WAIT), store=Recording(tmp_path / "jobs.db")
    )
    queue.enqueue_many(range(8))
    queue.start(workers=8)
    try:
        assert queue.join(timeout=WAIT)
    finally:
        queue.close()

    assert writes == [1, 7]


# -- a crash while a batch is being written ---------------------------------------

#: A child that runs 4 workers over a SQLite file. In "crash" mode its first
#: write of successes waits until the other three workers' successes wait
#: behind it; the second write (those three, together) says so and stops
#: before its commit, for the parent to kill it there.
CHILD = r"""
import os, sys, threading, time
import jobq
from jobq.stores import SqliteStore

path, log_path, mode = sys.argv[1:4]
log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
writes = []

class StopsMidWrite(SqliteStore):
    def finish_many(self, done, keep_until, now):
        if mode == "crash":
            writes.append(len(done))
            if len(writes) == 1:
                deadline = time.monotonic() + 30
                dispatcher = queue._pool._dispatcher
                while dispatcher.waiting < 3 and time.monotonic() < deadline:
                    time.sleep(0.001)
            elif len(writes) == 2:
                ids = " ".join(str(d.claim.id) for d in done)
                print("writing", ids, flush=True)
                time.sleep(60)  # the parent kills us here
        return super().finish_many(done, keep_until, now)

all_running = threading.Barrier(4)  # four run before any finishes

def handler(job):
    os.write(log, b"ran %d\n" % job.id)
    if mode == "crash":
        all_running.wait(30)

queue = jobq.JobQueue(handler, store=StopsMidWrite(path), max_attempts=5)
if mode == "crash":
    queue.enqueue_many(range(12))
queue.start(workers=4)
if mode == "drain":
    queue.join(timeout=30)
    print("drained", queue.stats().pending, queue.stats().running, flush=True)
    queue.close()
else:
    time.sleep(60)
"""


def child(tmp_path: Path, mode: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "jobs.db"),
         str(tmp_path / "ran.log"), mode],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def read_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    if not ready:
        proc.kill()
        pytest.fail("the child said nothing")
    return proc.stdout.readline().strip()


def test_a_crash_while_a_batch_is_written_runs_that_batch_again_and_no_other(
    tmp_path: Path,
) -> None:
    crashed = child(tmp_path, "crash")
    line = read_line(crashed)
    crashed.send_signal(signal.SIGKILL)
    crashed.communicate(timeout=30)
    assert line.startswith("writing ")
    in_batch = {int(n) for n in line.split()[1:]}
    assert len(in_batch) == 3

    drain = child(tmp_path, "drain")
    assert read_line(drain) == "drained 0 0"
    drain.communicate(timeout=30)

    runs: dict[int, int] = {}
    for entry in (tmp_path / "ran.log").read_text().split():
        if entry.isdigit():
            runs[int(entry)] = runs.get(int(entry), 0) + 1
    assert sorted(runs) == list(range(1, 13))  # none lost
    twice = {job for job, count in runs.items() if count > 1}
    assert in_batch <= twice  # the batch being written runs again
    assert len(twice) <= 4  # and nothing beyond what the 4 workers held
    assert all(count <= 2 for count in runs.values())
