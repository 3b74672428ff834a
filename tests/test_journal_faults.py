"""Write faults: a full or failing disk never loses what is in memory.

ENOSPC and EIO are injected through the store's I/O seam on the journal's
write and fsync and on the snapshot's rename (reliability.md §2.4, §3 (c)).
What the JSON store does about it:

- the change that hit the fault raises ``jobq.OutcomeUnknown`` (a
  ``StoreError``) from ``enqueue``, ``cancel``, ...; the journal is then
  "broken": that change stays in memory (the job is queued and runs; the
  error means "not known to be on disk", not "not added"), and every later
  change made by a caller raises a plain ``StoreError``, and is not made,
  until the compactor has rewritten the files from memory;
  workers go on running jobs, their changes kept in memory;
- ``save()`` raises a ``StoreError`` naming the file and the OS error;
- the last good files are kept, the error is logged;
- after a failed fsync the journal segment is never fsynced again (Linux may
  have dropped the pages and would report success): the data is written
  anew, in a snapshot;
- once the fault is gone, a save (the compactor's or the caller's) writes
  everything, and a restart sees every job.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import jobq
from jobq.stores import JsonFileStore
from jobq.stores.jsonfile.fileio import FileIO

#: The states a stored job can be in after a restart (completed are not kept).
LISTED = (jobq.JobState.PENDING, jobq.JobState.RUNNING, jobq.JobState.DEAD)
WAIT = 20  # seconds; a cap so that a broken test fails instead of hanging
FAR = 3600  # a delay that keeps a job pending for the whole test

ERRNOS = {"ENOSPC": errno.ENOSPC, "EIO": errno.EIO}


class FaultyIO(FileIO):
    """The real file system, with faults on request.

    ``fail(call, code)`` makes ``call`` raise ``OSError(code)`` until
    ``heal()`` (or just once, with ``once=True``): "journal-write" and
    "journal-fsync" (the segment files), "replace" (the snapshot's rename).
    Records which files were fsynced, and counts snapshots written.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failing: dict[str, tuple[int, bool]] = {}
        self._segments: dict[int, str] = {}  # open segment fd -> path
        self.fsynced: list[str] = []  # paths, in order
        self.snapshots = 0
        self.segment_deleted = threading.Event()
        self.faults = 0

    def fail(self, call: str, code: int, *, once: bool = False) -> None:
        with self._lock:
            self._failing[call] = (code, once)

    def heal(self) -> None:
        with self._lock:
            self._failing.clear()

    def _check(self, call: str) -> None:
        with self._lock:
            if call not in self._failing:
                return
            code, once = self._failing[call]
            if once:
                del self._failing[call]
            self.faults += 1
        raise OSError(code, os.strerror(code))

    def open_append(self, path: str) -> int:
        fd = super().open_append(path)
        with self._lock:
            self._segments[fd] = path
        return fd

    def close(self, fd: int) -> None:
        with self._lock:
            self._segments.pop(fd, None)
        super().close(fd)

    def write(self, fd: int, data: bytes) -> None:
        if fd in self._segments:
            self._check("journal-write")
        super().write(fd, data)

    def fsync(self, fd: int) -> None:
        path = self._segments.get(fd)
        if path is not None:
            self._check("journal-fsync")
        super().fsync(fd)
        with self._lock:
            self.fsynced.append(path or "snapshot temp file")

    def replace(self, src: str, dst: str) -> None:
        self._check("replace")
        super().replace(src, dst)
        with self._lock:
            self.snapshots += 1

    def unlink(self, path: str) -> None:
        super().unlink(path)
        if ".journal-" in path:
            self.segment_deleted.set()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "jobs.json"


@pytest.fixture
def io() -> FaultyIO:
    return FaultyIO()


@pytest.fixture
def queues(path: Path, io: FaultyIO) -> Iterator[Any]:
    """Queues on ``path`` through ``io``; all closed (fault healed) at the end."""
    made: list[jobq.JobQueue[Any]] = []

    def make(handler: Any = None, **options: Any) -> jobq.JobQueue[Any]:
        options.setdefault("save_interval", FAR)  # no compaction unless saved
        queue: jobq.JobQueue[Any] = jobq.JobQueue(
            handler, store=JsonFileStore(path, io=io, **options)
        )
        made.append(queue)
        return queue

    yield make
    io.heal()
    for queue in made:
        queue.close(timeout=WAIT)


def _restart(path: Path) -> dict[str, str]:
    """Payload -> state of every job a new process would find in the files.

    Read by a second store while the first still owns them (a reader loads
    the files as they are), so nothing written at close is counted.
    """
    queue: jobq.JobQueue[Any] = jobq.JobQueue(store=JsonFileStore(path))
    try:
        return {
            record.payload: str(record.state)
            for state in LISTED
            for record in queue.store.list_jobs(state)
        }
    finally:
        queue.close()


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and r.name.startswith("jobq")
    ]


JOURNAL_FAULTS = [
    (call, name) for call in ("journal-write", "journal-fsync") for name in ERRNOS
]


@pytest.mark.parametrize(("call", "code"), JOURNAL_FAULTS)
def test_enqueue_that_hits_a_journal_fault_raises_and_later_ones_wait_for_a_rewrite(
    queues: Any,
    io: FaultyIO,
    path: Path,
    caplog: pytest.LogCaptureFixture,
    call: str,
    code: str,
) -> None:
    queue = queues(fsync=True)
    queue.enqueue("before", delay=FAR)
    io.fail(call, ERRNOS[code], once=True)

    with caplog.at_level(logging.ERROR, logger="jobq"):
        with pytest.raises(jobq.OutcomeUnknown, match=os.strerror(ERRNOS[code])):
            queue.enqueue("hit", delay=FAR)
        # the fault is gone, but the journal may have lost data: no more
        # changes go to it until the files are rewritten from memory
        with pytest.raises(jobq.StoreError) as refused:
            queue.enqueue("refused", delay=FAR)
        assert not isinstance(refused.value, jobq.OutcomeUnknown)

    assert any(str(path) in message for message in _errors(caplog))
    assert queue.stats().pending == 2  # "hit" is in memory, "refused" is not
    queue.save()  # the compactor's rewrite, done now
    queue.enqueue("after", delay=FAR)
    assert _restart(path) == dict.fromkeys(["before", "hit", "after"], "pending")


@pytest.mark.parametrize("code", list(ERRNOS))
def test_compactor_rewrites_a_broken_journal_on_its_own(
    queues: Any, io: FaultyIO, path: Path, code: str
) -> None:
    queue = queues(fsync=True, save_interval=0)
    queue.enqueue("before", delay=FAR)
    io.segment_deleted.clear()
    io.fail("journal-fsync", ERRNOS[code], once=True)

    with pytest.raises(jobq.StoreError):
        queue.enqueue("hit", delay=FAR)

    # the compactor rewrote the files and then deleted the broken segment
    assert io.segment_deleted.wait(WAIT)
    queue.enqueue("after", delay=FAR)  # changes are journaled again
    assert _restart(path) == dict.fromkeys(["before", "hit", "after"], "pending")


@pytest.mark.parametrize("code", list(ERRNOS))
def test_after_a_failed_fsync_the_journal_is_rewritten_never_fsynced_again(
    queues: Any, io: FaultyIO, path: Path, code: str
) -> None:
    queue = queues(fsync=True)
    queue.enqueue("before", delay=FAR)
    [segment] = [p for p in os.listdir(path.parent) if ".journal-" in p]
    failed = str(path.parent / segment)
    io.fail("journal-fsync", ERRNOS[code], once=True)
    with pytest.raises(jobq.StoreError):
        queue.enqueue("hit", delay=FAR)
    io.fsynced.clear()
    snapshots = io.snapshots

    queue.save()
    queue.enqueue("after", delay=FAR)

    assert failed not in io.fsynced  # never trusted again
    assert io.snapshots == snapshots + 1  # rewritten from memory instead
    assert not os.path.exists(failed)
    assert _restart(path) == dict.fromkeys(["before", "hit", "after"], "pending")


@pytest.mark.parametrize("code", list(ERRNOS))
@pytest.mark.parametrize("call", ["journal-write", "journal-fsync", "replace"])
def test_workers_keep_running_jobs_through_a_fault_and_nothing_is_lost(
    queues: Any,
    io: FaultyIO,
    path: Path,
    caplog: pytest.LogCaptureFixture,
    call: str,
    code: str,
) -> None:
    ran: list[str] = []
    all_ran = threading.Event()

    def handler(job: jobq.Job[str]) -> None:
        ran.append(job.payload)
        if len(ran) == 5:
            all_ran.set()

    queue = queues(handler, fsync=True)
    queue.enqueue("waits", delay=FAR)
    for n in range(5):
        queue.enqueue(f"runs {n}")
    queue.save()
    good = path.read_bytes()
    io.fail(call, ERRNOS[code])  # until healed

    with caplog.at_level(logging.ERROR, logger="jobq"):
        queue.start(workers=2)
        assert all_ran.wait(WAIT)  # every due job ran
        queue.stop(timeout=WAIT)  # saving at stop fails and is logged
        assert queue.stats().pending == 1  # the finished jobs are gone from memory
        with pytest.raises(jobq.StoreError, match=os.strerror(ERRNOS[code])):
            queue.save()

    assert sorted(ran) == [f"runs {n}" for n in range(5)]
    assert _errors(caplog)
    assert path.read_bytes() == good  # the last good snapshot is kept
    assert not [p for p in os.listdir(path.parent) if p.endswith(".tmp")]
    io.heal()
    queue.save()
    assert _restart(path) == {"waits": "pending"}  # the finished jobs stay done


@pytest.mark.parametrize("code", list(ERRNOS))
def test_failed_snapshot_rename_keeps_the_journal_so_a_restart_sees_every_job(
    queues: Any, io: FaultyIO, path: Path, code: str
) -> None:
    queue = queues(fsync=True)
    queue.enqueue("one", delay=FAR)
    queue.save()
    good = path.read_bytes()
    queue.enqueue("two", delay=FAR)
    io.fail("replace", ERRNOS[code])

    with pytest.raises(jobq.StoreError, match=r"could not replace .*jobs\.json"):
        queue.save()
    queue.enqueue("three", delay=FAR)  # the journal still works

    assert path.read_bytes() == good
    assert _restart(path) == dict.fromkeys(["one", "two", "three"], "pending")


# A process that dies while its job runs: the job is "running" in the journal.
DIES_RUNNING = """
import os, signal, sys, time
import jobq

queue = jobq.JobQueue(lambda job: None, store=sys.argv[1])
queue.enqueue("was running")
queue.store.claim(time.time())
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("code", list(ERRNOS))
def test_startup_that_fails_on_a_fault_starts_cleanly_once_it_is_gone(
    queues: Any, io: FaultyIO, path: Path, code: str
) -> None:
    died = subprocess.run(
        [sys.executable, "-c", DIES_RUNNING, str(path)], timeout=WAIT, check=False
    )
    assert died.returncode == -signal.SIGKILL
    queue = queues()
    io.fail("journal-write", ERRNOS[code])

    with pytest.raises(jobq.StoreError, match=os.strerror(ERRNOS[code])):
        queue.stats()  # recovery needs a new journal segment: the disk refuses
    io.heal()
    queue.enqueue("after", delay=FAR)

    # what a restart after a crash now finds: the recovered job (one failed
    # attempt, pending again) and every change after it
    reader: jobq.JobQueue[Any] = jobq.JobQueue(store=JsonFileStore(path))
    try:
        records = {
            r.payload: r for state in LISTED for r in reader.store.list_jobs(state)
        }
    finally:
        reader.close()
    assert set(records) == {"was running", "after"}
    assert records["was running"].attempts == 1
    assert records["was running"].state is jobq.JobState.PENDING
