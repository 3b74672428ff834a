"""Fault: the disk fills up under the JSON and the SQLite store.

Each test mounts a tmpfs of a few MiB (``SIZES``) (it needs root; it unmounts it at its
end, also when it fails) and runs a queue on it with 4 threads enqueueing
and 2 workers, then fills what is left with a file until the disk is full.
While it is full, ``enqueue`` must raise ``StoreError`` (never hang, never
say yes and drop the job); the queue must not wedge; once the file is
removed it must carry on by itself; and a restart afterwards must load
every job that was acknowledged and not yet run. On JSON, the disk also
fills while the journal is compacted into a new snapshot.

``JOBQ_FAULT_ROUNDS=<n>`` repeats each run (the figures reported by hand).
"""

from __future__ import annotations

import collections
import errno
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from faults import Figures, wait_for

import jobq
from jobq import OutcomeUnknown, StoreError
from jobq.stores import JsonFileStore, SqliteStore, Store

ROUNDS = int(os.environ.get("JOBQ_FAULT_ROUNDS", "1"))
#: The tmpfs for each store: SQLite's write-ahead log alone takes 40-50 MiB
#: under a steady load (measured; it is checkpointed at 10,000 pages). With
#: less room than that, a checkpoint cannot grow the database file and the
#: WAL cannot start over: writes fail until more space is freed.
SIZES = {"json": "4m", "sqlite": "64m"}

MOUNT, UMOUNT = shutil.which("mount"), shutil.which("umount")
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or MOUNT is None or UMOUNT is None,
    reason="mounting a tmpfs needs root and mount(8)",
)


@pytest.fixture
def disk(tmp_path: Path, kind: str) -> Iterator[Path]:
    """A directory on a tmpfs of ``SIZES[kind]``, unmounted after the test."""
    where = tmp_path / "disk"
    where.mkdir()
    assert MOUNT is not None
    assert UMOUNT is not None
    subprocess.run([MOUNT, "-t", "tmpfs", "-o", f"size={SIZES[kind]},mode=0700",
                    "jobq-faults", str(where)], check=True)  # fmt: skip
    try:
        yield where
    finally:
        subprocess.run([UMOUNT, "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """Fill what is left of ``disk`` with one file; that file."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        while True:
            try:
                os.write(fd, b"\0" * 4096)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return filler
    finally:
        os.close(fd)


STORES: dict[str, Callable[[Path], Store]] = {
    "json": lambda d: JsonFileStore(d / "jobs.json", compact_bytes=256 << 10),
    "sqlite": lambda d: SqliteStore(d / "jobs.db"),
}


class Load:
    """4 threads enqueueing payloads of about 1 KiB, sorting what each
    enqueue did; 2 workers recording which serials ran."""

    def __init__(self) -> None:
        self.ran: collections.Counter[int] = collections.Counter()
        self.acknowledged: set[int] = set()
        self.refused: set[int] = set()
        self.unknown: set[int] = set()
        self.other: list[BaseException] = []
        self.longest = 0.0
        self._serials = iter(range(1, 10**9))
        self._lock = threading.Lock()
        self.stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self, queue: jobq.JobQueue[Any]) -> None:
        self.queue = queue
        self._threads = [threading.Thread(target=self._produce) for _ in range(4)]
        for thread in self._threads:
            thread.start()

    def handler(self, job: jobq.Job[dict[str, Any]]) -> None:
        with self._lock:
            self.ran[job.payload["n"]] += 1

    def _produce(self) -> None:
        while not self.stop.is_set():
            with self._lock:
                serial = next(self._serials)
                backlog = len(self.acknowledged) - len(self.ran)
            if backlog > 200:  # keep the store small: the tmpfs is
                time.sleep(0.005)
                continue
            began = time.monotonic()
            try:
                self.queue.enqueue({"n": serial, "pad": "x" * 1000})
            except OutcomeUnknown:
                outcome = self.unknown
            except StoreError:
                outcome = self.refused
            except BaseException as exc:
                with self._lock:
                    self.other.append(exc)
                return
            else:
                outcome = self.acknowledged
            with self._lock:
                outcome.add(serial)
                self.longest = max(self.longest, time.monotonic() - began)
            if outcome is not self.acknowledged:
                time.sleep(0.01)

    def join(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(60)


@pytest.mark.parametrize("round_", range(ROUNDS))
@pytest.mark.parametrize("kind", list(STORES))
def test_a_full_disk_refuses_enqueues_loses_nothing_and_recovers_by_itself(
    disk: Path, kind: str, round_: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("CRITICAL", logger="jobq")  # the failed writes are logged
    load = Load()
    queue = jobq.JobQueue(load.handler, store=STORES[kind](disk), base_delay=0.01)
    queue.start(workers=2)
    load.start(queue)
    try:
        wait_for(lambda: len(load.ran) > 100)
        filler = fill(disk)
        refused = len(load.refused)
        wait_for(lambda: len(load.refused) > refused + 20)
        time.sleep(0.5)  # full for a while, under load
        filler.unlink()
        freed = time.monotonic()
        after = max(load.acknowledged | load.refused | load.unknown)
        wait_for(lambda: any(n > after and n in load.ran for n in load.acknowledged))
        back_after = time.monotonic() - freed
    finally:
        load.join()
    queue.close(timeout=30)
    assert load.other == []

    restarted = jobq.JobQueue(load.handler, store=STORES[kind](disk))
    restarted.start(workers=2)
    assert restarted.join(timeout=60)
    stats = restarted.stats()
    restarted.close()

    lost = load.acknowledged - set(load.ran)
    figures = Figures(
        "disk full", kind, runs=sum(load.ran.values()),
        acknowledged=len(load.acknowledged), lost=len(lost),
        duplicates=sum(1 for n in load.ran.values() if n > 1),
        stuck=stats.running + stats.pending,
        notes={"refused": len(load.refused), "unknown": len(load.unknown),
               "unknown_present": len(load.unknown & set(load.ran)),
               "back_after_s": round(back_after, 3),
               "longest_enqueue_s": round(load.longest, 3),
               "refused_present": len(load.refused & set(load.ran))},
    )  # fmt: skip
    figures.report()
    assert (lost, figures.stuck) == (set(), 0)
    assert load.refused & set(load.ran) == set()  # a refused enqueue added nothing


@pytest.mark.parametrize("kind", ["json"])
def test_a_disk_that_fills_during_compaction_loses_nothing(
    disk: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The snapshot being written takes the last free space: ``save()``
    raises ``StoreError``, the old snapshot and journal stay as they were,
    and once space is freed a save and a restart hold every job."""
    caplog.set_level("CRITICAL", logger="jobq")
    store = JsonFileStore(disk / "jobs.json", compact_bytes=1 << 40)  # no auto
    queue: jobq.JobQueue[Any] = jobq.JobQueue(store=store)
    ids = {queue.enqueue({"n": n, "pad": "x" * 1000}, delay=3600).id
           for n in range(1200)}  # fmt: skip
    filler = fill(disk)
    os.truncate(filler, filler.stat().st_size - (256 << 10))  # room for the
    with pytest.raises(StoreError):  # journal, never for a 1.2 MB snapshot
        queue.save()
    refused = 0
    for n in range(50):  # the journal takes these, or refuses them
        try:
            ids.add(queue.enqueue({"n": 10_000 + n}, delay=3600).id)
        except OutcomeUnknown:
            pass  # in memory: kept unless the process ends first
        except StoreError:
            refused += 1
    filler.unlink()
    queue.save()
    queue.close()
    restarted: jobq.JobQueue[Any] = jobq.JobQueue(store=STORES[kind](disk))
    kept = {job.id for job in restarted.store.list_jobs(jobq.JobState.PENDING)}
    restarted.close()
    assert ids <= kept
    Figures("disk full in compaction", kind, acknowledged=len(ids),
            lost=len(ids - kept), notes={"refused": refused}).report()  # fmt: skip
