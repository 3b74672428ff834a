"""Helpers of the fault tests (``tests/test_faults_*.py``): a TCP proxy that
cuts a process off from PostgreSQL, a worker process that logs what it runs
and what its store recorded, and the Jepsen-style count of a run.

Traffic stays on 127.0.0.1: the proxy listens there and forwards to the
server there, so a worker that reaches PostgreSQL through it is on the far
side of a path the test can cut, reset or blackhole.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import selectors
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[2]
WAIT = 60.0  # seconds: a cap so that a broken run fails instead of hanging


def wait_for(condition: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


class TcpProxy:
    """Forwards connections from 127.0.0.1:``port`` to ``target``, until told
    otherwise:

    - ``blackhole()``: forward nothing either way and accept no connection,
      keeping every connection open (a partition: what was sent waits in the
      sockets' buffers, as TCP retransmits it, and goes through on ``heal``);
    - ``reset()``: reset every connection now, and each new one at once;
    - ``cut_answer()``: forward the next request, then reset its connection
      when the server answers instead of passing the answer on (the request
      was carried out; its caller never hears so);
    - ``heal()``: forward again.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._mode = "forward"
        self._cut_next = False
        self._changed = threading.Condition()
        self._pairs: dict[socket.socket, socket.socket] = {}
        self._upstream: set[socket.socket] = set()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="tcp-proxy", daemon=True)
        self._thread.start()

    def url(self, url: str) -> str:
        """``url`` (a PostgreSQL URL) through this proxy."""
        parts = urlsplit(url)
        user = parts.netloc.rpartition("@")[0]
        netloc = f"{user}@127.0.0.1:{self.port}" if user else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def _set(self, mode: str) -> None:
        with self._changed:
            self._mode = mode
            self._changed.notify_all()

    def blackhole(self) -> None:
        self._set("blackhole")

    def reset(self) -> None:
        self._set("reset")

    def heal(self) -> None:
        self._set("forward")

    def cut_answer(self) -> None:
        with self._changed:
            self._cut_next = True

    @property
    def connections(self) -> int:
        return len(self._upstream)

    def close(self) -> None:
        with self._changed:
            self._stop = True
            self._changed.notify_all()
        self._thread.join(10)
        for sock in list(self._pairs):
            _abort(sock)
        self._listener.close()

    def _run(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            while True:
                with self._changed:
                    while self._mode == "blackhole" and not self._stop:
                        self._changed.wait()
                    if self._stop:
                        return
                    mode = self._mode
                if mode == "reset":
                    for sock in list(self._pairs):
                        self._drop(selector, sock)
                for key, _ in selector.select(timeout=0.05):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    if sock is self._listener:
                        self._accept(selector, mode)
                    elif sock in self._pairs:
                        self._pass(selector, sock)

    def _accept(self, selector: selectors.BaseSelector, mode: str) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        if mode == "reset":
            _abort(client)
            return
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            _abort(client)
            return
        for sock in (client, upstream):
            sock.setblocking(True)
            selector.register(sock, selectors.EVENT_READ)
        self._pairs[client], self._pairs[upstream] = upstream, client
        self._upstream.add(upstream)

    def _pass(self, selector: selectors.BaseSelector, sock: socket.socket) -> None:
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._drop(selector, sock)
            return
        if sock in self._upstream:
            with self._changed:
                cut, self._cut_next = self._cut_next, False
            if cut:
                self._drop(selector, sock)
                return
        try:
            self._pairs[sock].sendall(data)
        except OSError:
            self._drop(selector, sock)

    def _drop(self, selector: selectors.BaseSelector, sock: socket.socket) -> None:
        other = self._pairs.pop(sock, None)
        for each in (sock, other):
            if each is None:
                continue
            self._pairs.pop(each, None)
            self._upstream.discard(each)
            with contextlib.suppress(KeyError, ValueError):
                selector.unregister(each)
            _abort(each)


def _abort(sock: socket.socket) -> None:
    """Close with a reset (RST), not a polite FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@contextlib.contextmanager
def proxy_to(url: str) -> Iterator[TcpProxy]:
    """A proxy to the server of ``url`` for one test, closed at its end."""
    parts = urlsplit(url)
    proxy = TcpProxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    try:
        yield proxy
    finally:
        proxy.close()


# -- a worker process --------------------------------------------------------------

# argv: config as JSON. Logs "started <id> <pid> <time>" and "done ..." around
# each handler's sleep and "recorded ..." once the store recorded its
# success; prints "ready" once its workers run, then runs until its stdin
# closes (or it is killed).
WORKER = r"""
import json, os, sys, threading, time
import jobq
from jobq.events import EventKind
from jobq.stores import PostgresStore, SqliteStore

config = json.loads(sys.argv[1])
log = os.open(config["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
pid = os.getpid()
where = config["store"]
if "store_override" in config:
    where = {"postgres": json.loads(config["store_override"])}
if "sqlite" in where:
    store = SqliteStore(where["sqlite"], lease_seconds=config["lease"])
else:
    url, schema, name = where["postgres"]
    store = PostgresStore(url, schema=schema, queue=name, lease_seconds=config["lease"],
                          connect_timeout=config.get("connect_timeout", 10.0),
                          clock=config.get("clock", "database"))
skew = config.get("skew", 0.0)

def handler(job):
    os.write(log, b"started %d %d %f\n" % (job.id, pid, time.time()))
    time.sleep(config["sleep"])
    os.write(log, b"done %d %d %f\n" % (job.id, pid, time.time()))

def recorded(event):
    os.write(log, b"recorded %d %d %f\n" % (event.job_id, pid, time.time()))

queue = jobq.JobQueue(handler, store=store, max_attempts=1000, base_delay=0,
                      clock=(lambda: time.time() + skew) if skew else None)
queue.subscribe(recorded, EventKind.SUCCEEDED)
queue.start(workers=config["workers"])
print("ready", flush=True)
sys.stdin.read()
queue.close(timeout=30)
"""


class Worker:
    """A worker process on a shared store (``shared``: as the conftest's
    ``shared`` fixture gives it), logging to ``log``."""

    def __init__(self, shared: str, log: Path, **config: Any) -> None:
        config = {"store": json.loads(shared), "log": str(log), "lease": 1.0,
                  "sleep": 0.2, "workers": 2, **config}  # fmt: skip
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, json.dumps(config)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline() == "ready\n"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def finish(self) -> None:
        self.proc.communicate(timeout=WAIT)
        assert self.proc.returncode == 0

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=WAIT)


@contextlib.contextmanager
def workers() -> Iterator[list[Worker]]:
    """Worker processes a test starts (it appends them); any still running
    at the end is killed (and continued first, if it was stopped)."""
    started: list[Worker] = []
    try:
        yield started
    finally:
        for worker in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, 18)  # SIGCONT
            worker.kill()


@dataclass
class Log:
    """What the worker processes logged: per job, who started it, who ran
    it to the end, whose success the store recorded (in order)."""

    started: dict[int, list[int]] = field(
        default_factory=lambda: collections.defaultdict(list)
    )
    done: dict[int, list[int]] = field(
        default_factory=lambda: collections.defaultdict(list)
    )
    recorded: dict[int, list[int]] = field(
        default_factory=lambda: collections.defaultdict(list)
    )
    times: dict[tuple[str, int, int], float] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> Log:
        log = cls()
        if not path.exists():
            return log
        for line in path.read_text().split("\n")[:-1]:
            kind, job, pid, at = line.split()
            getattr(log, kind)[int(job)].append(int(pid))
            log.times[kind, int(job), int(pid)] = float(at)
        return log

    def in_flight(self, pid: int) -> set[int]:
        """Jobs ``pid`` started and has not had recorded."""
        return {
            job for job, pids in self.started.items()
            if pid in pids and pid not in self.recorded.get(job, [])
        }  # fmt: skip


@dataclass
class Figures:
    """One fault run's count, as the README's table gives it."""

    fault: str
    store: str
    runs: int = 0
    acknowledged: int = 0
    lost: int = 0
    duplicates: int = 0  # jobs run more than once (started again elsewhere)
    recorded_twice: int = 0
    stuck: int = 0
    notes: dict[str, Any] = field(default_factory=dict)

    def report(self) -> None:
        """Print the figures (``pytest -s`` shows them) and append them to
        ``JOBQ_FAULT_FIGURES`` when that names a file."""
        line = json.dumps(self.__dict__, sort_keys=True)
        print(f"\nfault figures: {line}")
        path = os.environ.get("JOBQ_FAULT_FIGURES")
        if path:
            with open(path, "a") as out:
                out.write(line + "\n")


def count(log: Log, acknowledged: set[int]) -> tuple[set[int], set[int], set[int]]:
    """Lost (acknowledged, never recorded), run more than once, recorded
    more than once."""
    lost = acknowledged - set(log.recorded)
    twice = {job for job, pids in log.started.items() if len(pids) > 1}
    recorded_twice = {job for job, pids in log.recorded.items() if len(pids) > 1}
    return lost, twice, recorded_twice


# -- a worker taken away mid-job, another taking over --------------------------------


@dataclass
class Takeover:
    """What happened to a worker that was cut off (or frozen) while it ran
    jobs, and to the worker that took them over."""

    log: Log
    acknowledged: set[int]
    cut_off: int  # A's pid
    cut_at: float  # wall clock
    healed_at: float
    back_after: float  # seconds from the heal to the cut-off worker's next recorded job
    stuck: int


def take_over(
    shared: str,
    store: Any,
    log_path: Path,
    *,
    cut: Callable[[Worker], None],
    heal: Callable[[Worker], None],
    cut_off: dict[str, Any],
    jobs: int,
    lease: float,
    outage: float,
) -> Takeover:
    """Worker A (built with ``cut_off``'s options) runs jobs; ``cut(A)`` takes
    it away mid-job for ``outage`` seconds (longer than ``lease``) while B,
    started then, takes its jobs over; ``heal(A)`` brings it back, and more
    jobs show whether A carries on. ``store`` enqueues and counts (a store of
    this process on the same queue)."""
    import jobq

    queue: jobq.JobQueue[Any] = jobq.JobQueue(None, store=store)
    acknowledged: set[int] = set()
    with workers() as started:
        a = Worker(shared, log_path, lease=lease, **cut_off)
        started.append(a)
        acknowledged |= {queue.enqueue(n).id for n in range(jobs)}
        wait_for(lambda: len(Log.read(log_path).recorded) >= 4
                 and bool(Log.read(log_path).in_flight(a.pid)))  # fmt: skip
        cut(a)
        cut_at = time.time()
        b = Worker(shared, log_path, lease=lease)
        started.append(b)
        time.sleep(outage)
        heal(a)
        healed_at = time.time()
        more = {queue.enqueue(n).id for n in range(jobs, 2 * jobs)}
        acknowledged |= more

        def a_recorded_again() -> bool:
            log = Log.read(log_path)
            return any(log.times.get(("recorded", job, a.pid), 0.0) > healed_at
                       for job in log.recorded)  # fmt: skip

        wait_for(a_recorded_again)
        log = Log.read(log_path)
        back_after = min(
            at - healed_at
            for (kind, _, pid), at in log.times.items()
            if kind == "recorded" and pid == a.pid and at > healed_at
        )
        assert queue.join(timeout=WAIT)
        for worker in started:
            worker.finish()
    stats = queue.stats()
    queue.close()
    return Takeover(Log.read(log_path), acknowledged, a.pid, cut_at, healed_at,
                    back_after, stats.running + stats.pending)  # fmt: skip


def figures_of(
    fault: str, store: str, run: Takeover, pid: int | None = None
) -> Figures:
    lost, twice, recorded_twice = count(run.log, run.acknowledged)
    return Figures(
        fault, store, runs=sum(len(p) for p in run.log.started.values()),
        acknowledged=len(run.acknowledged), lost=len(lost), duplicates=len(twice),
        recorded_twice=len(recorded_twice), stuck=run.stuck,
        notes={"back_after_s": round(run.back_after, 3)},
    )  # fmt: skip


def assert_only_jobs_in_flight_ran_twice(run: Takeover) -> None:
    """Every job run twice was one the cut-off worker had claimed by the
    cut (it may start it just after: the claim's answer came first), and
    whose outcome it had not had recorded by then."""
    cut_off = run.cut_off
    _, twice, _ = count(run.log, run.acknowledged)
    for job in twice:
        first = run.log.started[job][0]
        assert first == cut_off, (job, run.log.started[job])
        assert run.log.times["started", job, cut_off] < run.healed_at
        assert run.cut_at <= run.log.times.get(("recorded", job, cut_off), run.cut_at)
