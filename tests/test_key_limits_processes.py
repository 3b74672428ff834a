"""Limits across processes: three processes on one SQLite file, and three on
one PostgreSQL queue, each a ``JobQueue`` with workers of its own, under the
same declarations. Each handler writes when it started and ended to a log
the processes share (one ``write`` per line, ``O_APPEND``), and the test
counts from it how many ran at once and how many started in any second.

The children are real processes (``subprocess``), run from a file; they
say "ready" once their store is open, and stop when the parent closes their
stdin. The parent waits with ``join`` (the store's counts, from every
process), never on sleeps.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jobq
from jobq.stores import Store

ROOT = Path(__file__).resolve().parents[1]
WAIT = 120.0  # seconds; a cap so that a broken child fails the test, never hangs it
PROCESSES = 3

# argv: the store as JSON, the log's path, the workers, the handler's seconds,
# the lease (seconds).
CHILD = r"""
import json, os, sys, threading, time
import jobq
from jobq.stores import PostgresStore, SqliteStore

where, log_path = json.loads(sys.argv[1]), sys.argv[2]
workers, work, lease = int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
if "sqlite" in where:
    store = SqliteStore(where["sqlite"], lease_seconds=lease)
else:
    url, schema, name = where["postgres"]
    store = PostgresStore(url, schema=schema, queue=name, lease_seconds=lease)
log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

def handler(job):
    start = time.monotonic()
    if job.payload == "hang" and job.attempt == 1:  # its retry runs
        os.write(1, b"hang %d\n" % job.id)  # one write: threads do not mix
        threading.Event().wait()
    time.sleep(work)
    end = time.monotonic()
    os.write(log, f"{job.payload} {job.id} {start!r} {end!r}\n".encode())

queue = jobq.JobQueue(handler, store=store, timeout_grace=600, keep_completed=600)
queue.limit("smtp", concurrency=2)
queue.limit("api", rate="50/s")
queue.limit("account:*", concurrency=1)
queue.stats()
print("ready", flush=True)
queue.start(workers=workers)
sys.stdin.readline()
queue.close(timeout=5)
"""


def start_children(
    processes: list[subprocess.Popen[str]],
    tmp_path: Path,
    where: str,
    *,
    workers: int = 4,
    work: float = 0.02,
    lease: float = 30.0,
) -> Path:
    """``PROCESSES`` children, each ready; the log they write."""
    script, log = tmp_path / "child.py", tmp_path / "runs.log"
    script.write_text(CHILD)
    for _ in range(PROCESSES):
        child = subprocess.Popen(
            [sys.executable, str(script), where, str(log), str(workers),
             str(work), str(lease)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        processes.append(child)
    for child in processes:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n", "a child ended early"
    return log


def stop_children(processes: list[subprocess.Popen[str]]) -> None:
    """Tell each live child to stop, and wait for it."""
    for child in processes:
        if child.poll() is None:
            assert child.stdin is not None
            child.stdin.write("stop\n")
            child.stdin.flush()
    for child in processes:
        child.wait(WAIT)


def runs(log: Path) -> list[tuple[str, int, float, float]]:
    """(payload, job id, start, end) of each finished run in the log."""
    found = []
    for line in log.read_text().splitlines():
        payload, job_id, start, end = line.split()
        found.append((payload, int(job_id), float(start), float(end)))
    return found


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of these (start, end) spans in progress at once."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = peak = 0
    for _, change in events:  # an end sorts before a start at the same moment
        running += change
        peak = max(peak, running)
    return peak


def parent_queue(make_store: Callable[[], Store]) -> jobq.JobQueue[Any]:
    queue: jobq.JobQueue[Any] = jobq.JobQueue(store=make_store())
    queue.limit("smtp", concurrency=2)
    queue.limit("api", rate="50/s")
    queue.limit("account:*", concurrency=1)
    return queue


def test_concurrency_holds_across_three_processes(
    shared: tuple[str, Callable[[], Store]],
    processes: list[subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    """300 jobs under concurrency=2, 20 ms each, 12 workers in 3 processes:
    never more than 2 at once, in about 300 x 20 ms / 2."""
    where, make_store = shared
    log = start_children(processes, tmp_path, where)
    queue = parent_queue(make_store)
    try:
        queue.enqueue_many(["smtp"] * 300, limits=["smtp"])
        assert queue.join(timeout=WAIT)
    finally:
        queue.close()
        stop_children(processes)
    found = runs(log)
    assert len({job_id for _, job_id, _, _ in found}) == len(found) == 300
    assert most_at_once([(s, e) for _, _, s, e in found]) == 2
    took = max(e for *_, e in found) - min(s for *_, s, _ in found)
    print(f"300 x 20 ms under concurrency=2: {took:.2f} s (ideal 3.00 s)")


def test_a_rate_holds_across_three_processes(
    shared: tuple[str, Callable[[], Store]],
    processes: list[subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    """rate="50/s" for 10 s: no window of one second holds more than 50
    starts (burst 1), whichever process started them. The starts are the
    claims' times as the store kept them (``started_at``, on the clock the
    rate is counted on): a handler's own clock adds the jitter of getting
    the claimed job to its thread."""
    where, make_store = shared
    start_children(processes, tmp_path, where, work=0.0)
    queue = parent_queue(make_store)
    try:
        ids = [e.id for e in queue.enqueue_many(["api"] * 500, limits=["api"])]
        assert queue.join(timeout=WAIT)
        records = [queue.get(job_id) for job_id in ids]
    finally:
        queue.close()
        stop_children(processes)
    starts = sorted(r.started_at for r in records if r is not None and r.started_at)
    assert len(starts) == 500
    most, j = 0, 0
    for i, start in enumerate(starts):  # every window [start, start + 1 s)
        while j < len(starts) and starts[j] < start + 1.0:
            j += 1
        most = max(most, j - i)
    took = starts[-1] - starts[0]
    print(f"500 under rate=50/s: {took:.2f} s, at most {most} starts in 1 s")
    assert most <= 50
    assert took >= 499 * 0.02 * 0.999  # evenly spaced: 20 ms apart


def test_the_keys_of_a_family_run_in_parallel_and_each_alone(
    shared: tuple[str, Callable[[], Store]],
    processes: list[subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    where, make_store = shared
    log = start_children(processes, tmp_path, where)
    queue = parent_queue(make_store)
    try:
        for _ in range(10):
            for account in range(10):
                queue.enqueue(f"account:{account}", limits=[f"account:{account}"])
        assert queue.join(timeout=WAIT)
    finally:
        queue.close()
        stop_children(processes)
    found = runs(log)
    assert Counter(payload for payload, *_ in found) == {
        f"account:{a}": 10 for a in range(10)
    }
    for account in range(10):
        spans = [(s, e) for p, _, s, e in found if p == f"account:{account}"]
        assert most_at_once(spans) == 1
    assert most_at_once([(s, e) for _, _, s, e in found]) > 1  # keys in parallel


def test_a_killed_process_s_slots_are_freed_at_lease_expiry(
    shared: tuple[str, Callable[[], Store]],
    processes: list[subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    """The processes whose handlers hang holding both slots of "smtp" are
    SIGKILLed: once their leases (1 s) expire another takes the slots, the
    hung jobs run again (their second attempt returns), nothing is lost,
    and never more than 2 ran at once."""
    where, make_store = shared
    log = start_children(processes, tmp_path, where, lease=1.0)
    queue = parent_queue(make_store)
    try:
        hung = {queue.enqueue("hang", limits=["smtp"]).id for _ in range(2)}
        holders = hanging(processes, 2)
        for child in holders:
            child.kill()
            child.wait(WAIT)
        rest = queue.enqueue_many(["smtp"] * 20, limits=["smtp"])
        assert queue.join(timeout=WAIT)
    finally:
        queue.close()
        stop_children(processes)
    done = {job_id for _, job_id, _, _ in runs(log)}
    assert done == hung | {e.id for e in rest}
    assert most_at_once([(s, e) for _, _, s, e in runs(log)]) <= 2


def hanging(
    processes: list[subprocess.Popen[str]], count: int
) -> list[subprocess.Popen[str]]:
    """The children in whose handlers ``count`` jobs hang (each says so on
    its stdout, read here unbuffered so that no line waits in a buffer)."""
    streams = {child.stdout.fileno(): child for child in processes if child.stdout}
    holders: list[subprocess.Popen[str]] = []
    seen = 0
    while seen < count:
        ready, _, _ = select.select(list(streams), [], [], WAIT)
        assert ready, "no handler hung in time"
        for fd in ready:
            said = os.read(fd, 4096).decode()
            assert said, "a child ended early"
            assert set(said.split()[::2]) == {"hang"}, f"a child said {said!r}"
            seen += said.count("hang")
            if streams[fd] not in holders:
                holders.append(streams[fd])
    return holders
