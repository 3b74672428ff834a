"""Several processes on one SQLite file, at scale.

Three processes (``subprocess``, each a ``JobQueue`` with four workers on the
same file) drain thousands of jobs enqueued up front while each also enqueues
more of its own; a quarter of the jobs wait 2 ms as if on I/O, so that the
runs of one process overlap. Every run is logged to a file per process as
``<job id> <start> <end>`` with ``time.monotonic()``, which on Linux is one
clock for every process of the machine. Then:

- every job ran exactly once, and nothing else ran;
- every process took part (how evenly is up to the OS scheduler);
- no process ever ran more jobs at once than its workers;
- no two runs of one job overlapped (implied by exactly once; checked anyway).

A lease that runs out while its handler still runs (the process could not
renew it: paused, starved) lets another process run the job again; that is
at-least-once by design. What must hold is the fence: the late outcome of
the first run changes nothing, whether it succeeds or fails. The test
makes the first process's lease run out in the file once its run started
(leases follow the host's clock, so no queue clock can): nothing waits for
a lease to run out, and no lease runs out that should not.

``test_sqlite_store.py`` covers two processes and the store's unit-level
lease and fencing tests; nothing here waits with ``time.sleep``.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import IO, Any

import pytest
from sqlite_leases import expire_sqlite_claims

import jobq
from jobq.stores import SqliteStore

ROOT = Path(__file__).resolve().parents[1]
WAIT = 60  # seconds; a cap so that a broken child fails the test, never hangs it
PROCESSES = 3
WORKERS = 4
UP_FRONT = 3000
EACH_ADDS = 100

# argv: database, log file, jobs to add while running, workers.
WORKER = r"""
import json, os, sys, threading, time
import jobq
from jobq.stores import SqliteStore

path, log_path = sys.argv[1], sys.argv[2]
adds, workers = int(sys.argv[3]), int(sys.argv[4])
log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

def handler(job):
    start = time.monotonic()
    if job.id % 4 == 0:
        time.sleep(0.002)  # the work: I/O-like, so that runs overlap
    end = time.monotonic()
    os.write(log, f"{job.id} {start!r} {end!r}\n".encode())  # one write per run

queue = jobq.JobQueue(handler, store=SqliteStore(path))
queue.stats()  # open now: the timing starts at "go"
print("ready", flush=True)
sys.stdin.readline()
queue.start(workers=workers)
added = [queue.enqueue({"from": os.getpid(), "n": n}).id for n in range(adds)]
joined = queue.join(timeout=60)
queue.stop(timeout=60)  # others may still add jobs: count once nothing runs here
stats = queue.stats()
queue.close()
os.close(log)
print(json.dumps({"pid": os.getpid(), "added": added, "joined": joined,
                  "completed": stats.completed, "retried": stats.retried}), flush=True)
"""


def spawn(script: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def read_line(stream: IO[str] | None) -> str:
    assert stream is not None
    line = stream.readline()
    assert line, "the child ended early"
    return line


def tell(proc: subprocess.Popen[str], line: str = "go") -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def read_log(path: Path) -> list[tuple[int, float, float]]:
    runs = []
    for line in path.read_text().splitlines():
        job_id, start, end = line.split()
        runs.append((int(job_id), float(start), float(end)))
    return runs


def most_at_once(runs: list[tuple[int, float, float]]) -> int:
    """The largest number of these runs in progress at one moment."""
    events = sorted([(s, 1) for _, s, _ in runs] + [(e, -1) for _, _, e in runs])
    running = peak = 0
    for _, change in events:  # an end sorts before a start at the same moment
        running += change
        peak = max(peak, running)
    return peak


def test_three_processes_run_thousands_of_jobs_exactly_once_and_share_the_work(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    path = tmp_path / "jobs.db"
    with jobq.JobQueue[Any](store=SqliteStore(path)) as queue:
        added = queue.enqueue_many([{"n": n} for n in range(UP_FRONT)])
    up_front = [e.id for e in added]
    logs = [tmp_path / f"runs-{i}.log" for i in range(PROCESSES)]
    processes.extend(spawn(WORKER, path, log, EACH_ADDS, WORKERS) for log in logs)
    for proc in processes:  # all open and idle before any starts
        assert read_line(proc.stdout) == "ready\n"
    for proc in processes:
        tell(proc)
    reports = [json.loads(read_line(proc.stdout)) for proc in processes]
    for proc in processes:
        assert proc.wait(timeout=WAIT) == 0

    assert [r["joined"] for r in reports] == [True] * PROCESSES
    enqueued = up_front + [job_id for r in reports for job_id in r["added"]]
    total = UP_FRONT + PROCESSES * EACH_ADDS
    assert len(set(enqueued)) == len(enqueued) == total

    runs = [read_log(log) for log in logs]
    ran = Counter(job_id for process in runs for job_id, _, _ in process)
    assert ran == Counter(enqueued)  # each exactly once, nothing else
    shares = [len(process) for process in runs]
    assert [r["completed"] for r in reports] == shares
    assert [r["retried"] for r in reports] == [0] * PROCESSES
    # Every process took part; how evenly is the OS scheduler's to say (on a
    # busy 2-core machine one process has had as little as 2 % of the jobs),
    # and the queue promises no even split.
    assert min(shares) > 0, f"a process ran nothing: {shares}"
    assert max(most_at_once(process) for process in runs) <= WORKERS

    intervals: defaultdict[int, list[tuple[float, float]]] = defaultdict(list)
    for process in runs:
        for job_id, start, end in process:
            intervals[job_id].append((start, end))
    for spans in intervals.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start  # never two runs of one job at once

    with jobq.JobQueue[Any](store=SqliteStore(path)) as queue:
        stats = queue.stats()
    assert (stats.pending, stats.running, stats.dead) == (0, 0, 0)


# -- a lease that runs out mid-run: the fence -----------------------------------------

# argv: database, lease seconds, outcome ("return" or "fatal"). Prints "ready"
# once its store is open; each run prints {"started": id, "attempt": n}; a
# line on stdin lets the handlers end, then it stops (which waits for them and
# their outcome) and reports its counters.
#
# "ready" comes before the worker starts: the second process takes the job as
# soon as its worker runs, and a worker printing first would break the order.
FENCED = r"""
import json, logging, sys, threading
import jobq
from jobq.stores import SqliteStore

path, lease, outcome = sys.argv[1], float(sys.argv[2]), sys.argv[3]
store = SqliteStore(path, lease_seconds=lease)
stale = []

class Stale(logging.Handler):
    def emit(self, record):
        if "no longer current" in record.getMessage():
            stale.append(record.getMessage())

logging.getLogger("jobq").addHandler(Stale())
release = threading.Event()

def handler(job):
    print(json.dumps({"started": job.id, "attempt": job.attempt}), flush=True)
    release.wait(60)
    if outcome == "fatal":
        raise jobq.Fatal("too late to bury it")

queue = jobq.JobQueue(handler, store=store)
queue.stats()  # open
print("ready", flush=True)
queue.start(workers=1)
sys.stdin.readline()
release.set()
queue.stop(timeout=60)
stats = queue.stats()
queue.close()
print(json.dumps({"completed": stats.completed, "stale": len(stale)}), flush=True)
"""

#: Seconds a claim's lease lasts: longer than any run of the test, so no lease
#: runs out while the test waits, however slowly the machine runs it (and the
#: first process renews none: its watchdog would first do so after 200 s).
LEASE = 600


@pytest.mark.parametrize("late_outcome", ["return", "fatal"])
def test_a_run_that_outlived_its_lease_cannot_end_the_job_another_process_took_over(
    tmp_path: Path, processes: list[subprocess.Popen[str]], late_outcome: str
) -> None:
    path = tmp_path / "jobs.db"
    queue = jobq.JobQueue[Any](store=SqliteStore(path))
    try:
        queue.stats()  # the schema exists before the children start
        first = spawn(FENCED, path, LEASE, late_outcome)
        processes.append(first)
        assert read_line(first.stdout) == "ready\n"
        job = queue.enqueue("once, ideally")
        assert json.loads(read_line(first.stdout)) == {"started": job.id, "attempt": 1}

        # The first's lease runs out, as for a process paused or starved past
        # it: the second recovers the claim when it starts (a failed attempt)
        # and runs the job while the first still does: at least once.
        expire_sqlite_claims(path)
        second = spawn(FENCED, path, LEASE, "return")
        processes.append(second)
        assert read_line(second.stdout) == "ready\n"
        assert json.loads(read_line(second.stdout)) == {"started": job.id, "attempt": 2}
        tell(second)
        assert json.loads(read_line(second.stdout)) == {"completed": 1, "stale": 0}
        assert queue.get(job) is None  # finished by the second

        # The first run ends now, late: its outcome is not recorded.
        tell(first)
        assert json.loads(read_line(first.stdout)) == {"completed": 0, "stale": 1}
        assert [proc.wait(timeout=WAIT) for proc in processes] == [0, 0]

        assert queue.get(job) is None
        assert queue.dead_jobs() == []
        stats = queue.stats()
        assert (stats.pending, stats.running, stats.dead) == (0, 0, 0)
    finally:
        queue.close()
