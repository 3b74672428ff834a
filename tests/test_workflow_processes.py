"""Workflows across processes: three processes on one SQLite file or one
PostgreSQL queue run many five-step workflows (one step, three after it,
one after those three), with and without SIGKILL at random moments.

Each process has a producer thread (process 0 only) and two workers. The
producer adds workflows one step at a time and appends ``ack <id>`` to its
file after each ``enqueue`` returned; the handler appends ``start <id> <t>
<parents>`` and ``done <id> <t>`` lines (O_APPEND, one ``write`` each, ``t``
from the system-wide monotonic clock) to its process's log. Checked at the
end, after a clean drain:

- lost: an acknowledged step never done: must be 0;
- early: a step started before one of its parents' first "done": 0 (a
  parent's outcome, and with it its children's release, is recorded after
  its handler returned);
- released twice: a step run again after a run that finished in a process
  never killed, unless a process logged that it recovered the step's claim
  (a lease that ran out on a loaded machine: at least once, as any job): 0;
  re-runs after a kill are at least once, and allowed.

The seed is printed; ``JOBQ_CRASH_SEED=<seed>`` replays a run's kill times,
and ``JOBQ_WORKFLOWS=<n>`` sets how many workflows each run adds.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from jobq.stores import Store

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = int(os.environ.get("JOBQ_WORKFLOWS", "1000"))
PROCESSES = 3
WAIT = 180.0  # seconds; a cap so that a broken run fails the test, never hangs it
#: PostgreSQL: a killed process's claims come back this soon (seconds).
LEASE = float(os.environ.get("JOBQ_WORKFLOW_LEASE", "5.0"))

# argv: the store as JSON, this process's number, its log, the producer's
# acks file and workflows to add ("0": none), the first workflow's number.
CHILD = r"""
import json, logging, os, sys, threading, time
import jobq
from jobq.stores import PostgresStore, SqliteStore

where, number, log_path, acks_path, count, first = sys.argv[1:7]
where = json.loads(where)
if "sqlite" in where:
    store = SqliteStore(where["sqlite"])
else:
    url, schema, name = where["postgres"]
    lease = float(sys.argv[7])
    store = PostgresStore(url, schema=schema, queue=name, lease_seconds=lease)
flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
log = os.open(log_path, flags, 0o600)
logging.basicConfig(level=logging.WARNING)  # to this process's stderr file

def handler(job):
    parents = " ".join(str(p) for p in job.parents)
    os.write(log, b"start %d %d %s\n" % (job.id, time.monotonic_ns(), parents.encode()))
    os.write(log, b"done %d %d\n" % (job.id, time.monotonic_ns()))
    return job.id

queue = jobq.JobQueue(handler, store=store, max_attempts=1000, base_delay=0)

def produce():
    acks = os.open(acks_path, flags, 0o600)
    def add(step, after=()):
        job = queue.enqueue({"step": step}, after=list(after))
        os.write(acks, b"ack %d\n" % job.id)
        return job
    for n in range(int(first), int(count)):
        root = add(1)
        middle = [add(step, [root]) for step in (2, 3, 4)]
        add(5, middle)
    os.write(acks, b"produced\n")

queue.start(workers=2)
if int(count):
    threading.Thread(target=produce, daemon=True).start()
print("ready", flush=True)
sys.stdin.readline()  # until the parent closes it, or kills this process
queue.close()
"""


@dataclass
class Run:
    """What the logs of every process of one run say."""

    acked: set[int] = field(default_factory=set)
    produced: bool = False
    #: job id -> (log number, start time, parents) of each run
    starts: dict[int, list[tuple[int, int, list[int]]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    #: job id -> first "done" time
    first_done: dict[int, int] = field(default_factory=dict)


#: The line ``jobq.stores.base.log_recovered`` logs for each recovered claim.
_RECOVERED = re.compile(r"job (\d+) was running in a process that died")


def _lines(path: Path) -> list[list[str]]:
    """Whole lines only: a kill may cut the last one (it then never counts)."""
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().split("\n")[:-1]]


class Cluster:
    """The processes of one run; each spawn of a process has a log of its own."""

    def __init__(self, where: str, tmp_path: Path) -> None:
        self.where = where
        self.dir = tmp_path
        self.script = tmp_path / "child.py"
        self.script.write_text(CHILD)
        self.spawns = 0
        self.procs: dict[int, subprocess.Popen[str]] = {}
        self.log_of: dict[int, int] = {}  # process number -> its current log
        self.killed_logs: set[int] = set()

    def spawn(self, number: int, produce: int, first: int) -> None:
        log = self.spawns
        self.spawns += 1
        with (self.dir / f"stderr-{log}").open("wb") as stderr:
            proc = subprocess.Popen(
                [sys.executable, str(self.script), self.where, str(number),
                 str(self.dir / f"log-{log}"), str(self.dir / "acks"),
                 str(produce), str(first), str(LEASE)],
                cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=stderr, text=True,
            )  # fmt: skip
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n", "a process did not start"
        self.procs[number] = proc
        self.log_of[number] = log

    def kill(self, number: int) -> None:
        proc = self.procs[number]
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=WAIT)
        self.killed_logs.add(self.log_of[number])

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                assert proc.stdin is not None
                proc.stdin.close()
        for proc in self.procs.values():
            proc.wait(timeout=WAIT)
            assert proc.stdout is not None
            proc.stdout.close()

    def kill_leftovers(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=WAIT)

    def recovered(self) -> set[int]:
        """The jobs whose claims a process logged it recovered."""
        found: set[int] = set()
        for log in range(self.spawns):
            text = (self.dir / f"stderr-{log}").read_text(errors="replace")
            found.update(int(job) for job in _RECOVERED.findall(text))
        return found

    def read(self) -> Run:
        run = Run()
        for line in _lines(self.dir / "acks"):
            if line[0] == "produced":
                run.produced = True
            else:
                run.acked.add(int(line[1]))
        for log in range(self.spawns):
            for line in _lines(self.dir / f"log-{log}"):
                job, at = int(line[1]), int(line[2])
                if line[0] == "start":
                    run.starts[job].append((log, at, [int(p) for p in line[3:]]))
                elif job not in run.first_done:
                    run.first_done[job] = at
        return run


def _produced_so_far(cluster: Cluster) -> int:
    """Workflows whose last step the producer acknowledged (a kill may have
    cut the one after them short: its acknowledged steps still count)."""
    acked = len(cluster.read().acked)
    return acked // 5


def _drained(make_store: Callable[[], Store]) -> bool:
    """Whether nothing is left: pending, running or waiting."""
    import jobq

    queue: jobq.JobQueue[object] = jobq.JobQueue(store=make_store())
    try:
        stats = queue.stats()
        return stats.pending == stats.running == stats.waiting == 0
    finally:
        queue.close()


def _check(
    run: Run, killed_logs: set[int], recovered: set[int]
) -> tuple[dict[str, int], list[str]]:
    """The counts, and a line for each step that broke a rule."""
    lost = run.acked - set(run.first_done)
    early = 0
    twice = 0
    broken = [f"lost: {job}" for job in sorted(lost)]
    for job, starts in run.starts.items():
        for _, at, parents in starts:
            if any(run.first_done.get(p, at + 1) > at for p in parents):
                early += 1
                done = [run.first_done.get(p) for p in parents]
                broken.append(f"early: {job} {starts} parents done at {done}")
        finished_cleanly = [log for log, _, _ in starts[:-1] if log not in killed_logs]
        if finished_cleanly and job not in recovered:
            twice += 1
            broken.append(f"twice: {job} {starts}, done {run.first_done.get(job)}")
    return {"lost": len(lost), "early": early, "released twice": twice}, broken


@pytest.mark.parametrize("kills", [0, 12], ids=["calm", "sigkill"])
def test_three_processes_run_five_step_workflows(
    shared: tuple[str, Callable[[], Store]], tmp_path: Path, kills: int
) -> None:
    where, make_store = shared
    seed = int(os.environ.get("JOBQ_CRASH_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    began = time.monotonic()
    make_store().close()  # the schema, before three processes race to make it
    cluster = Cluster(where, tmp_path)
    try:
        cluster.spawn(0, WORKFLOWS, 0)
        for number in (1, 2):
            cluster.spawn(number, 0, 0)
        for _ in range(kills):
            time.sleep(rng.uniform(0.1, 0.6))
            number = rng.randrange(PROCESSES)
            cluster.kill(number)
            produce = WORKFLOWS if number == 0 else 0
            first = _produced_so_far(cluster) if number == 0 else 0
            if number == 0 and cluster.read().produced:
                produce = first = 0
            cluster.spawn(number, produce, first)
        deadline = time.monotonic() + WAIT
        while not (cluster.read().produced and _drained(make_store)):
            assert time.monotonic() < deadline, f"seed {seed}: never drained"
            time.sleep(0.2)
        cluster.stop_all()
    finally:
        cluster.kill_leftovers()

    run = cluster.read()
    recovered = cluster.recovered()
    found, broken = _check(run, cluster.killed_logs, recovered)
    steps = len(run.acked)
    print(
        f"\nworkflows {json.loads(where).keys()}: seed {seed}, {WORKFLOWS} "
        f"workflows, {steps} steps acknowledged, {kills} kills, "
        f"{found}, {len(recovered)} claims recovered, "
        f"{time.monotonic() - began:.1f} s"
    )
    errors = "".join(
        f"\n--- stderr-{log}:\n{(tmp_path / f'stderr-{log}').read_text()[-3000:]}"
        for log in range(cluster.spawns)
    )
    assert found == {"lost": 0, "early": 0, "released twice": 0}, (
        f"seed {seed}: {broken[:10]}{errors}"
    )
    if not kills:  # every step once, but for a claim recovered
        assert all(
            len(starts) == 1 or job in recovered for job, starts in run.starts.items()
        ), f"seed {seed}: {errors}"
    assert steps >= WORKFLOWS * 5 - 4 * kills  # a killed producer's cut workflows
