"""Crash test: SIGKILL at random moments loses no enqueue that returned.

A child process runs a queue with a producer thread and 4 workers on a
persistent store. It appends ``<id> <serial>`` to an acks file after each
``enqueue`` returned, and its handler appends ``start <id>`` and
``done <id> <serial>`` to a per-round log (O_APPEND, one ``write`` per line,
so a kill never leaves half a line that counts). The parent kills it with
SIGKILL at a random moment, many rounds over the same store, then runs one
clean child that drains the queue. Checked as Jepsen's total-queue checker
does (reliability.md §1.4, §3 (a)):

- lost: an enqueue that returned has no "done" line by the end: must be 0;
- unexpected: a "done" line for a serial never enqueued under that id: 0;
- duplicates: "done" lines beyond the first per job; allowed (at least once),
  but each comes from a job its process was running at a kill, so at most
  the worker count per kill.

The seed is printed; ``JOBQ_CRASH_SEED=<seed>`` replays a run's kill times.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from postgres_url import POSTGRES_URL

ROOT = Path(__file__).resolve().parents[1]
WORKERS = 4
ROUNDS = 20
WAIT = 60  # seconds; a cap so that a broken child fails the test, never hangs it

#: How the child builds each kind of store in its directory ``d`` (a Python
#: expression; ``os``, ``JsonFileStore`` and ``PostgresStore`` are imported
#: there). A new persistent store joins the crash test with one line here.
#: PostgreSQL: its defaults (jobs taken ahead: ``claim_batch`` 16), a queue
#: of the test's own in the session's schema, and a short lease, so that a
#: killed child's claims are recovered within the rounds; its producer adds
#: jobs ``BURSTS`` at a time, so that the queue is deep and claims take jobs
#: ahead.
STORES = {
    "json": "os.path.join(d, 'jobs.json')",
    "json-fsync": "JsonFileStore(os.path.join(d, 'jobs.json'), fsync=True)",
    "sqlite": "'sqlite:///' + os.path.join(d, 'jobs.db')",
    "postgres": "PostgresStore(os.environ['CRASH_PG_URL'], lease_seconds=2.0, "
    "schema=os.environ['CRASH_PG_SCHEMA'], queue=os.path.basename(d))",
}
#: How many jobs the producer adds with one call (``enqueue_many``); 1: it
#: calls ``enqueue``.
BURSTS = {"postgres": 50}

# argv: directory, store expression, mode ("produce" or "drain"), first
# serial, acks file, log file. Prints "ready" once its workers run; a drain
# prints the queue's stats when nothing is left.
CHILD = r"""
import json, os, sys, threading
import jobq
from jobq.stores import JsonFileStore, PostgresStore

d, store, mode, first, acks_path, log_path = sys.argv[1:7]
flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
acks = os.open(acks_path, flags, 0o600)
log = os.open(log_path, flags, 0o600)
room = threading.Semaphore(100)  # at most this many of our jobs unfinished

def handler(job):
    os.write(log, b"start %d\n" % job.id)
    os.write(log, b"done %d %d\n" % (job.id, job.payload))
    room.release()

def produce():
    serial, burst = int(first), int(os.environ["BURST"])
    while True:
        for _ in range(burst):
            room.acquire()
        if burst == 1:
            jobs = [queue.enqueue(serial)]
        else:
            jobs = queue.enqueue_many(list(range(serial, serial + burst)))
        os.write(acks, b"".join(b"%d %d\n" % (job.id, serial + n)
                                for n, job in enumerate(jobs)))
        serial += burst

queue = jobq.JobQueue(handler, store=eval(store), max_attempts=1000, base_delay=0)
queue.start(workers=int(os.environ["WORKERS"]))
if mode == "produce":
    threading.Thread(target=produce, daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()  # until killed
else:
    print("ready", flush=True)
    drained = queue.join(timeout=50)
    s = queue.stats()
    queue.close()
    print(json.dumps({"drained": drained, "pending": s.pending,
                      "running": s.running, "dead": s.dead}), flush=True)
"""


@dataclass
class Round:
    """What one child process reported."""

    acks: dict[int, int] = field(default_factory=dict)  # job id -> serial
    started: set[int] = field(default_factory=set)
    done: list[tuple[int, int]] = field(default_factory=list)  # (id, serial)


def _lines(path: Path) -> list[list[str]]:
    """Whole lines only: a kill may cut the last one (it then never counts)."""
    if not path.exists():
        return []
    text = path.read_text()
    return [line.split() for line in text.split("\n")[:-1]]


def _first_line(fd: int) -> bytes:
    """The child's first line, read from the pipe a byte at a time: never
    beyond it. ``readline`` on the pipe's file object would buffer what
    follows (a drain's stats line, when the child wrote it before this
    process got to read), and ``communicate`` reads the descriptor itself,
    so it would never see it."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return line


def _run_child(
    directory: Path, kind: str, mode: str, number: int, kill_after: float | None
) -> tuple[Round, str]:
    """Run one child; kill it ``kill_after`` seconds after it started its
    workers (negative: after it was spawned). Its round's record and output."""
    burst = str(BURSTS.get(kind, 1))
    acks, log = directory / f"acks-{number}", directory / f"log-{number}"
    stderr_path = directory / f"stderr-{number}"
    with stderr_path.open("wb") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(directory), STORES[kind], mode,
             str(number * 10_000_000), str(acks), str(log)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True,
            env={**os.environ, "WORKERS": str(WORKERS), "BURST": burst},
        )  # fmt: skip
        assert child.stdout is not None
        try:
            if kill_after is not None and kill_after < 0:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=-kill_after)
            else:
                ready, _, _ = select.select([child.stdout], [], [], WAIT)
                assert ready, "the child never started"
                first = _first_line(child.stdout.fileno())
                assert first == b"ready\n", stderr_path.read_text()
                if kill_after is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        child.wait(timeout=kill_after)
            if kill_after is not None:
                child.kill()
            output, _ = child.communicate(timeout=WAIT)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    if kill_after is None:
        assert child.returncode == 0, stderr_path.read_text()
    else:
        assert child.returncode == -signal.SIGKILL, stderr_path.read_text()
    record = Round()
    record.acks = {int(job): int(serial) for job, serial in _lines(acks)}
    for line in _lines(log):
        if line[0] == "start":
            record.started.add(int(line[1]))
        else:
            record.done.append((int(line[1]), int(line[2])))
    return record, output


@pytest.mark.parametrize("kind", list(STORES))
def test_sigkill_at_random_moments_loses_no_enqueue_that_returned(
    tmp_path: Path,
    kind: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if kind == "postgres":
        monkeypatch.setenv("CRASH_PG_URL", POSTGRES_URL)
        monkeypatch.setenv(
            "CRASH_PG_SCHEMA", request.getfixturevalue("postgres_schema")
        )
    seed = int(os.environ.get("JOBQ_CRASH_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    print(f"\ncrash test {kind}: seed {seed}")
    began = time.monotonic()

    rounds: list[Round] = []
    for number in range(ROUNDS):
        delay = rng.uniform(0.02, 0.3)
        # Mostly once the workers run; one round in four from the spawn, so
        # that some kills land while the store loads or compacts at startup.
        kill_after = -delay if rng.random() < 0.25 else delay
        rounds.append(_run_child(tmp_path, kind, "produce", number, kill_after)[0])
    final, output = _run_child(tmp_path, kind, "drain", ROUNDS, None)
    rounds.append(final)

    acked = {job: serial for r in rounds for job, serial in r.acks.items()}
    done = Counter(job for r in rounds for job, _ in r.done)
    serials: dict[int, set[int]] = defaultdict(set)
    for r in rounds:
        for job, serial in r.done:
            serials[job].add(serial)
    lost = sorted(set(acked) - set(done))
    unexpected = sorted(
        job
        for job, seen in serials.items()
        if len(seen) > 1 or (job in acked and seen != {acked[job]})
    )
    duplicates = sum(count - 1 for count in done.values())
    in_flight = [len(r.started - {job for job, _ in r.done}) for r in rounds[:-1]]
    # The jobs each killed process had started and a later one started again:
    # those it was running (or had not recorded as finished) when it died.
    rerun = [
        len(r.started & {job for later in rounds[i + 1 :] for job in later.started})
        for i, r in enumerate(rounds[:-1])
    ]
    # Jobs a process ran twice itself (a lease it lost, or a bug): no kill
    # explains them, so they would fail the duplicates' bound below.
    twice = [
        [job for job, count in Counter(job for job, _ in r.done).items() if count > 1]
        for r in rounds
    ]
    stats = json.loads(output.splitlines()[-1])
    print(
        f"crash test {kind}: rounds {ROUNDS}, acknowledged {len(acked)}, "
        f"lost {len(lost)}, duplicates {duplicates}, unexpected {len(unexpected)}, "
        f"recovered {len(set(done) - set(acked))}, in flight at kills "
        f"{sum(in_flight)} (max {max(in_flight)}), re-run after kills "
        f"{sum(rerun)} (max {max(rerun)}), run twice by one process "
        f"{sum(map(len, twice))} {[(i, t) for i, t in enumerate(twice) if t]}, "
        f"{time.monotonic() - began:.1f} s"
    )
    assert lost == [], f"seed {seed}: acknowledged but never done: {lost[:20]}"
    assert unexpected == [], f"seed {seed}: done under the wrong id: {unexpected}"
    assert max(rerun) <= WORKERS, f"seed {seed}: re-runs per kill {rerun}"
    assert duplicates <= sum(rerun)
    assert stats == {"drained": True, "pending": 0, "running": 0, "dead": 0}
    assert len(acked) > ROUNDS * 10  # the children did real work
