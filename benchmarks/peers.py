"""In-process peers: Huey (``MemoryHuey``; ``SqliteHuey`` with fsync off and
on) with its thread consumer, and persist-queue (``SQLiteAckQueue`` and the
file ``Queue``) with consumer threads written by hand, as its users do.

For the workload tables: ``contenders(workload) -> (contenders, notes)``,
``workload`` a name of ``throughput.WORKLOADS`` or ``"latency"``. Every peer
runs each workload: Huey retries by itself (``retries=2, retry_delay=0``);
persist-queue has no retries, so a failed job is put back, as by hand.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import tempfile
from collections.abc import Callable
from typing import Any

from benchmarks import latency, throughput
from benchmarks.harness import FSYNCED, IN_MEMORY, PERSISTED, Contender
from benchmarks.throughput import (
    Engine,
    Fifo,
    Got,
    Setup,
    Speed,
    ThreadedEngine,
    Workload,
    temp_dir,
)

#: How long a persist-queue worker blocks in ``get`` before it looks again:
#: SQLiteAckQueue's wake-up can be lost (it clears its event after a put set
#: it), and it would then sleep 10 s.
GET_TIMEOUT = 0.1


class HueyEngine(Engine):
    """A Huey instance with its consumer in this process: thread workers."""

    def __init__(self, setup: Setup, make_huey: Callable[[str], Any]) -> None:
        super().__init__(setup)
        self.make_huey = make_huey

    def open(self, cleanup: contextlib.ExitStack) -> None:
        huey = self.make_huey(temp_dir(cleanup))
        handler = self.setup.handler

        def run(payload: Any) -> None:
            handler(payload)

        self._task = huey.task(retries=self.setup.retries, retry_delay=0)(run)
        self._consumer = huey.create_consumer(
            workers=self.setup.workers, worker_type="thread"
        )
        self._started = False
        cleanup.callback(self._stop)

    def enqueue(self, payload: Any) -> None:
        self._task(payload)

    def start(self) -> None:
        handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        self._started = True
        try:
            self._consumer.start()
        finally:  # it installs its own signal handlers: ours come back
            for number, handler in handlers.items():
                signal.signal(number, handler)

    def _stop(self) -> None:
        if self._started:
            self._consumer.stop(graceful=True)


def memory_huey(_: str) -> Any:
    from huey import MemoryHuey

    return MemoryHuey("bench", results=False)


def sqlite_huey(fsync: bool) -> Callable[[str], Any]:
    """SqliteHuey with ``fsync`` set: synchronous=FULL if True, OFF if not
    (left unset, SQLite's compiled-in default applies: FULL on most builds)."""

    def make(directory: str) -> Any:
        from huey import SqliteHuey

        path = os.path.join(directory, "huey.db")
        return SqliteHuey("bench", filename=path, results=False, fsync=fsync)

    return make


class PersistQueueEngine(ThreadedEngine):
    """persist-queue's file ``Queue``: ``task_done`` after each job."""

    def open_fifo(self, cleanup: contextlib.ExitStack) -> Fifo:
        import persistqueue

        directory = temp_dir(cleanup)
        self._fifo = persistqueue.Queue(
            os.path.join(directory, "queue"), tempdir=directory
        )
        return self._fifo

    def done(self, token: Any) -> None:
        self._fifo.task_done()


class SqliteAckQueueEngine(ThreadedEngine):
    """persist-queue's ``SQLiteAckQueue`` (a connection for put, one for get):
    ``ack`` after each job."""

    def open_fifo(self, cleanup: contextlib.ExitStack) -> Fifo:
        import persistqueue

        self._fifo = persistqueue.SQLiteAckQueue(
            os.path.join(temp_dir(cleanup), "queue"), multithreading=True
        )
        cleanup.callback(self._fifo.close)
        return self._fifo

    def get(self) -> Got:
        import persistqueue

        while True:
            try:
                raw = self._fifo.get(raw=True, timeout=GET_TIMEOUT)
            except persistqueue.Empty:
                continue
            return None if raw["data"] is None else (raw["data"], raw["pqid"])

    def done(self, token: Any) -> None:
        self._fifo.ack(id=token)


def sqlite_default_fsyncs() -> bool:
    """Whether SQLite's compiled-in default (what SQLiteAckQueue gets, in WAL
    mode) syncs every commit: synchronous=FULL or EXTRA."""
    with (
        tempfile.TemporaryDirectory() as directory,
        contextlib.closing(sqlite3.connect(os.path.join(directory, "x.db"))) as conn,
    ):
        conn.execute("PRAGMA journal_mode=WAL")
        row = conn.execute("PRAGMA synchronous").fetchone()
    return bool(row and row[0] >= 2)


def huey(workload: Workload) -> list[Contender]:
    return [
        workload.contender(
            "Huey MemoryHuey",
            IN_MEMORY,
            lambda setup: HueyEngine(setup, memory_huey),
            Speed.FAST,
            "huey",
        ),
        workload.contender(
            "Huey SqliteHuey (fsync off)",
            PERSISTED,
            lambda setup: HueyEngine(setup, sqlite_huey(fsync=False)),
            Speed.FILE,
            "huey",
        ),
        workload.contender(
            "Huey SqliteHuey fsync",
            FSYNCED,
            lambda setup: HueyEngine(setup, sqlite_huey(fsync=True)),
            Speed.SYNC,
            "huey",
        ),
    ]


def persist_queue(workload: Workload) -> tuple[list[Contender], list[str]]:
    ack_kind = FSYNCED if sqlite_default_fsyncs() else PERSISTED
    contenders = [
        workload.contender(
            "persist-queue SQLiteAckQueue",
            ack_kind,
            SqliteAckQueueEngine,
            Speed.SYNC,
            "persist-queue",
        ),
        workload.contender(
            "persist-queue file Queue",
            PERSISTED,
            PersistQueueEngine,
            Speed.SYNC,
            "persist-queue",
        ),
    ]
    note = (
        f"persist-queue's SQLiteAckQueue is in the class {ack_kind!r}: it keeps "
        "SQLite's default synchronous setting, which on this build "
        f"{'syncs' if ack_kind == FSYNCED else 'does not sync'} every commit; "
        "its file Queue writes every put and task_done (no fsync but every "
        "100 puts). Their workers are threads written by hand."
    )
    return contenders, [note]


def installed(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def contenders(workload: str) -> tuple[list[Contender], list[str]]:
    """Huey's and persist-queue's contenders for ``workload``, and notes."""
    spec = {**throughput.WORKLOADS, latency.LATENCY.name: latency.LATENCY}[workload]
    found: list[Contender] = []
    notes: list[str] = []
    if installed("huey"):
        found += huey(spec)
        notes.append(
            "Huey: its thread consumer in this process, default polling "
            "(0.1 s, backing off when idle); SqliteHuey with `fsync=False` "
            "(synchronous=OFF) and `fsync=True` (FULL)."
        )
    else:
        notes.append(
            "Huey is not installed (`pip install -e . --group bench`): skipped."
        )
    if installed("persistqueue"):
        more, more_notes = persist_queue(spec)
        found += more
        notes += more_notes
    else:
        notes.append(
            "persist-queue is not installed (`pip install -e . --group bench`): "
            "skipped."
        )
    return found, notes
