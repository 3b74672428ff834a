"""Power loss: with ``fsync=True``, every change that returned survives it.

A SIGKILL keeps the page cache, so it cannot show a missing fsync; these
tests run the JSON store on ``LossyIO``, an in-memory disk that keeps apart
what a running system sees and what a power loss would leave: content written
but not fsynced is lost, and so is a directory change (a file created,
renamed or removed) not followed by an fsync of its directory. After every
change to the disk the double notes what a power loss at that moment would
leave, and how many of the test's changes had returned by then; each such
disk is then opened by a new store and compared with a model of the queue.

The check is itself checked: each fsync call site is disabled in turn, and
the same scenarios must then report a lost change (reliability.md §3 (a')).
"""

from __future__ import annotations

import errno
import itertools
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import jobq
from jobq.stores import JsonFileStore
from jobq.stores.base import Signal
from jobq.stores.jsonfile.fileio import FileIO
from jobq.stores.jsonfile.journal import MAGIC, encode_record

#: The states a stored job can be in after a restart (completed are not kept).
LISTED = (jobq.JobState.PENDING, jobq.JobState.RUNNING, jobq.JobState.DEAD)
WAIT = 20  # seconds; a cap so that a broken test fails instead of hanging
FAR = 10**6  # seconds: a retried job stays pending, not due, for the whole test
MAX_ATTEMPTS = 3

#: What a power loss leaves in the store's directory: (path, content), sorted.
Disk = tuple[tuple[str, bytes], ...]


# --- the storage double ----------------------------------------------------------


class _File:
    """One file (an inode): what processes read, and what is on the device."""

    def __init__(self, content: bytes = b"") -> None:
        self.data = bytearray(content)
        self.synced = bytes(content)

    def content(self, which: str) -> bytes:
        """``synced``, ``written`` (all of it), or ``torn``: the synced part
        and half of what was appended since."""
        if which == "synced":
            return self.synced
        if which == "written" or not self.data.startswith(self.synced):
            return bytes(self.data) if which == "written" else self.synced
        return bytes(self.data[: (len(self.synced) + len(self.data)) // 2])


class _Change(NamedTuple):
    """A directory change not yet made durable by an fsync of the directory."""

    kind: str  # "create", "rename" or "unlink"
    path: str
    target: str | int | None = None  # the new name (rename) or the file (create)


class Recorder:
    """Collects, across the disks of one scenario, what each power loss would leave.

    ``acked`` is how many of the scenario's changes have returned; the test
    raises it after each one, so a disk noted before that is checked against
    fewer changes (never more) than had returned.
    """

    def __init__(self) -> None:
        self.acked = 0
        self.crashes: dict[Disk, set[int]] = {}
        self.sites: Counter[str] = Counter()  # fsync call sites reached

    def note(self, disks: Collection[Disk]) -> None:
        for disk in disks:
            self.crashes.setdefault(disk, set()).add(self.acked)


def _site(method: str) -> str:
    """Name the store's code that called ``method``: ``"caller>function.method"``.

    By function names, not line numbers, so that edits elsewhere do not move
    a site; each of these functions makes at most one such call.
    """
    frame = sys._getframe(1)
    while frame.f_code.co_filename == __file__:  # the doubles' own frames
        assert frame.f_back is not None
        frame = frame.f_back
    caller = frame.f_back.f_code.co_name if frame.f_back is not None else "?"
    return f"{caller}>{frame.f_code.co_name}.{method}"


class LossyIO(FileIO):
    """An in-memory directory that forgets what a power loss would.

    Files are kept per inode: ``data`` (what processes read) and ``synced``
    (what the device holds, as of the file's last fsync). Names are kept as
    processes see them and as of the directory's last fsync, plus the
    directory changes since. A power loss leaves the synced names, with any
    of those later changes possibly made durable too (file systems may write
    directory changes in any order), each name showing its file's synced
    content: ``power_losses`` lists the disks that can result.

    ``skip`` names fsync call sites (see ``_site``) to ignore, to check that
    the durability test notices each missing fsync.
    """

    def __init__(
        self,
        disk: Mapping[str, bytes] | Disk = (),
        *,
        recorder: Recorder | None = None,
        skip: Collection[str] = (),
    ) -> None:
        self.recorder = recorder
        self.skip = frozenset(skip)
        self.on_temp_file: Callable[[], None] | None = None  # runs once, then unset
        self._lock = threading.RLock()
        self._files: dict[int, _File] = {}
        self._names: dict[str, int] = {}
        self._synced_names: dict[str, int] = {}
        self._changes: list[_Change] = []
        self._fds: dict[int, int] = {}  # fd -> file number
        self._numbers = itertools.count(1)
        items = disk.items() if isinstance(disk, Mapping) else disk
        for path, content in items:
            number = next(self._numbers)
            self._files[number] = _File(content)
            self._names[path] = self._synced_names[path] = number

    # -- what a power loss leaves ----------------------------------------------

    def power_losses(self) -> list[Disk]:
        """The disks a power loss now may leave.

        Directory changes since the last directory fsync: none, all, or all
        but one of them made durable. File content: what was fsynced; also,
        with none or all of those changes, everything written, or the synced
        part plus half of what was written after it (a torn write).
        """
        count = len(self._changes)
        everything = set(range(count))
        kept_sets = [set(), everything]
        if count > 1:
            kept_sets += [everything - {i} for i in range(count)]
        disks = [self._disk(kept) for kept in kept_sets]
        for kept in (set(), everything):
            disks += [self._disk(kept, "written"), self._disk(kept, "torn")]
        return list(dict.fromkeys(disks))

    def crash(self) -> LossyIO:
        """The disk after a power loss that kept only what was fsynced."""
        with self._lock:
            return LossyIO(self._disk(set()), recorder=self.recorder, skip=self.skip)

    def power_loss_now(self) -> None:
        """Note the disks a power loss at this very moment would leave."""
        with self._lock:
            if self.recorder is not None:
                self.recorder.note(self.power_losses())

    def contents(self) -> dict[str, bytes]:
        """What a process reads now, by path."""
        with self._lock:
            return {p: bytes(self._files[n].data) for p, n in self._names.items()}

    def _disk(self, kept: Collection[int], content: str = "synced") -> Disk:
        names = dict(self._synced_names)
        for i, change in enumerate(self._changes):
            if i not in kept:
                continue
            if change.kind == "create":
                assert isinstance(change.target, int)
                names[change.path] = change.target
            elif change.kind == "rename":
                assert isinstance(change.target, str)
                if change.path in names:  # unless its creation was lost
                    names[change.target] = names.pop(change.path)
            else:
                names.pop(change.path, None)
        return tuple(
            sorted((p, self._files[n].content(content)) for p, n in names.items())
        )

    def _changed(self) -> None:
        if self.recorder is not None:
            self.recorder.note(self.power_losses())

    # -- FileIO ----------------------------------------------------------------

    def _create(self, path: str) -> int:
        number = next(self._numbers)
        self._files[number] = _File()
        self._names[path] = number
        self._changes.append(_Change("create", path, number))
        fd = 10_000 + number
        self._fds[fd] = number
        self._changed()
        return fd

    def open_new_temp(self, directory: str, prefix: str) -> tuple[int, str]:
        with self._lock:
            path = os.path.join(directory, f"{prefix}{next(self._numbers)}.tmp")
            fd = self._create(path)
            hook, self.on_temp_file = self.on_temp_file, None
        if hook is not None:
            hook()
        return fd, path

    def open_append(self, path: str) -> int:
        with self._lock:
            number = self._names.get(path)
            if number is None:
                return self._create(path)
            fd = 10_000 + next(self._numbers)
            self._fds[fd] = number
            return fd

    def write(self, fd: int, data: bytes) -> None:
        with self._lock:
            self._files[self._fds[fd]].data += data

    def fsync(self, fd: int) -> None:
        site = _site("fsync")
        with self._lock:
            if self.recorder is not None:
                self.recorder.sites[site] += 1
            if site in self.skip:
                return
            file = self._files[self._fds[fd]]
            file.synced = bytes(file.data)
            self._changed()

    def close(self, fd: int) -> None:
        with self._lock:
            del self._fds[fd]

    def replace(self, src: str, dst: str) -> None:
        with self._lock:
            self._rename(src, dst)

    def rename(self, src: str, dst: str) -> None:
        with self._lock:
            self._rename(src, dst)

    def _rename(self, src: str, dst: str) -> None:
        if src not in self._names:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), src)
        self._names[dst] = self._names.pop(src)
        self._changes.append(_Change("rename", src, dst))
        self._changed()

    def fsync_dir(self, directory: str) -> None:
        site = _site("fsync_dir")
        with self._lock:
            assert all(os.path.dirname(p) == directory for p in self._names)
            if self.recorder is not None:
                self.recorder.sites[site] += 1
            if site in self.skip:
                return
            self._synced_names = dict(self._names)
            self._changes.clear()
            self._changed()

    def read(self, path: str) -> bytes:
        with self._lock:
            if path not in self._names:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
            return bytes(self._files[self._names[path]].data)

    def listdir(self, directory: str) -> list[str]:
        with self._lock:
            return [
                os.path.basename(p)
                for p in self._names
                if os.path.dirname(p) == directory
            ]

    def unlink(self, path: str) -> None:
        with self._lock:
            if path not in self._names:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
            del self._names[path]
            self._changes.append(_Change("unlink", path))
            self._changed()

    def truncate(self, fd: int, size: int) -> None:
        with self._lock:
            del self._files[self._fds[fd]].data[size:]

    def exists(self, path: str) -> bool:
        with self._lock:
            return path in self._names


# --- a scenario and its model ----------------------------------------------------


class Job(NamedTuple):
    """What the check compares: the payload's serial number, state, attempts."""

    serial: int
    state: str
    attempts: int


Model = dict[int, Job]


def _recovered(job: Job) -> set[Job | None]:
    """The job as a restart leaves it when it was running at the power loss."""
    attempts = job.attempts + 1
    state = "dead" if attempts >= MAX_ATTEMPTS else "pending"
    return {Job(job.serial, state, attempts)}


class LostChanges(Exception):
    """A power loss between changes lost some that had returned."""


class Scenario:
    """A queue on a ``LossyIO`` disk, and what each change that returned promised.

    ``models[n]`` is the queue after the first ``n`` changes returned;
    ``runs[n]`` the job that change ``n`` ran, if it ran one.
    """

    def __init__(self, path: Path, io: LossyIO, **options: Any) -> None:
        assert io.recorder is not None
        self.path = path
        self.io = io
        self.recorder = io.recorder
        self.options = options
        self.models: list[Model] = [{}]
        self.runs: list[int | None] = [None]
        self.ran: list[int] = []
        self.serials = itertools.count(1)
        self.payloads: dict[int, dict[str, Any]] = {}
        self.queue = self._open()

    def _open(self) -> jobq.JobQueue[Any]:
        self.store = JsonFileStore(self.path, fsync=True, io=self.io, **self.options)
        return jobq.JobQueue(self._handler, store=self.store, max_attempts=MAX_ATTEMPTS)

    def _handler(self, job: jobq.Job[Any]) -> None:
        self.ran.append(job.id)
        if job.payload["do"] == "retry":
            raise jobq.Retry("again later", after=FAR)
        if job.payload["do"] == "fatal":
            raise jobq.Fatal("never works")

    @property
    def model(self) -> Model:
        return self.models[-1]

    def _returned(self, model: Model, ran: int | None = None) -> None:
        self.models.append(model)
        self.runs.append(ran)
        self.recorder.acked = len(self.models) - 1

    # -- the changes --------------------------------------------------------------

    def enqueue(self, do: str = "ok") -> int:
        serial = next(self.serials)
        payload = {"do": do, "serial": serial}
        job_id = self.queue.enqueue(payload).id
        self.payloads[job_id] = payload
        self._returned({**self.model, job_id: Job(serial, "pending", 0)})
        return job_id

    def run(self) -> int:
        assert self.queue.run_pending(limit=1) == 1
        job_id = self.ran[-1]
        model = dict(self.model)
        job = model.pop(job_id)
        do = self.payloads[job_id]["do"]
        if do != "ok":
            attempts = job.attempts + 1
            dead = do == "fatal" or attempts >= MAX_ATTEMPTS
            model[job_id] = Job(job.serial, "dead" if dead else "pending", attempts)
        self._returned(model, ran=job_id)
        return job_id

    def retry_dead(self, job_id: int) -> None:
        assert self.queue.retry_dead(job_id)
        revived = self.model[job_id]._replace(state="pending", attempts=0)
        self._returned({**self.model, job_id: revived})

    def delete_dead(self, job_id: int) -> None:
        assert self.queue.delete_dead(job_id)
        self._returned({i: j for i, j in self.model.items() if i != job_id})

    def cancel(self, job_id: int) -> None:
        assert self.queue.cancel(job_id)
        self._returned({i: j for i, j in self.model.items() if i != job_id})

    def save(self) -> None:
        self.queue.save()
        self._returned(self.model)

    def restart(self) -> None:
        """Close the queue and open the same files again (no power loss)."""
        self.queue.close()
        self.queue = self._open()
        self.queue.stats()  # opens it: loads the files, starts a new segment
        self._returned(self.model)

    def power_loss(self) -> None:
        """Lose power now, between changes, and go on from what the disk kept."""
        survivor = self.io.crash()
        self.io.recorder = None  # what the dead system does next is not on disk
        self.queue.close()
        self.io = survivor
        self.queue = self._open()
        found = _load(self.path, self.io)
        if found != self.model:  # nothing was in flight: all must be there
            self.queue.close()
            raise LostChanges(f"after {len(self.models) - 1} changes: {found}")
        self._returned(self.model)

    def close(self) -> None:
        self.queue.close()
        self.io.power_loss_now()

    # -- the check ---------------------------------------------------------------

    def lost_changes(self) -> list[str]:
        """Each power-loss disk that lacks a change that had returned, or holds
        one that was never made, described; an empty list if none."""
        problems: list[str] = []
        loaded: dict[Disk, Model | str] = {}
        for disk, acked_counts in self.recorder.crashes.items():
            if disk not in loaded:
                try:
                    loaded[disk] = _load(self.path, LossyIO(disk))
                except Exception as exc:  # reported as a finding
                    loaded[disk] = f"cannot open: {exc!r}"
            found = loaded[disk]
            for acked in sorted(acked_counts):
                problem = self._compare(found, acked)
                if problem:
                    problems.append(f"power loss after {acked} changes: {problem}")
        return problems

    def _compare(self, found: Model | str, acked: int) -> str | None:
        if isinstance(found, str):
            return found
        before = self.models[acked]
        after = self.models[acked + 1] if acked + 1 < len(self.models) else before
        running = self.runs[acked + 1] if acked + 1 < len(self.runs) else None
        for job_id in sorted({*before, *after, *found}):
            allowed = {before.get(job_id), after.get(job_id)}
            if job_id == running and job_id in before:
                allowed |= _recovered(before[job_id])
            if found.get(job_id) not in allowed:
                return f"job {job_id} is {found.get(job_id)}, expected one of {allowed}"
        return None


def _load(path: Path, io: LossyIO) -> Model:
    """The jobs a new store finds on ``io``'s disk (a restart after the loss)."""
    store = JsonFileStore(path, fsync=True, io=io)
    store.open(Signal(), dead_letter_limit=1000)
    try:
        return _jobs(store)
    finally:
        store.close()


def _jobs(store: JsonFileStore) -> Model:
    """The jobs an open store holds, as the check compares them."""
    return {
        record.id: Job(
            record.payload.get("serial", 0), str(record.state), record.attempts
        )
        for state in LISTED
        for record in store.list_jobs(state)
    }


# --- scenarios -----------------------------------------------------------------


def everyday_use(path: Path, *, skip: Collection[str] = (), **options: Any) -> Scenario:
    """Enqueues, runs that succeed, retry and die, dead-letter handling,
    cancels, snapshots, restarts and a power loss, one after another."""
    run = Scenario(path, LossyIO(recorder=Recorder(), skip=skip), **options)
    for _ in range(3):
        run.enqueue()
    run.enqueue("retry")
    doomed = [run.enqueue("fatal") for _ in range(2)]
    for _ in range(6):  # three succeed, one is retried later, two die
        run.run()
    run.save()
    later = [run.enqueue() for _ in range(3)]
    run.retry_dead(doomed[0])
    run.delete_dead(doomed[1])
    run.cancel(later[0])
    run.run()
    run.save()
    run.restart()
    run.enqueue()
    run.run()
    run.power_loss()
    run.enqueue("fatal")
    run.run()
    run.run()
    run.save()
    run.cancel(max(i for i, job in run.model.items() if job.state == "pending"))
    run.enqueue()
    run.close()
    return run


class GatedLock:
    """Stands in for one of the store's locks: the first time the thread that
    made it takes it, ``before`` runs first (to let another thread cut in)."""

    def __init__(self, lock: Any, before: Callable[[], None]) -> None:
        self._lock = lock
        self._before: Callable[[], None] | None = before
        self._thread = threading.get_ident()

    def __enter__(self) -> bool:
        if self._before is not None and threading.get_ident() == self._thread:
            before, self._before = self._before, None
            before()
        return bool(self._lock.__enter__())

    def __exit__(self, *exc: object) -> None:
        self._lock.__exit__(*exc)


#: How an enqueue meets a compaction: its records still buffered when the
#: compaction starts; appended but not yet fsynced; or made while the
#: compaction writes its snapshot. The first two are forced by stepping in
#: front of the store's private lock (white-box: no public seam is that
#: fine), the compaction held at its snapshot's temp file.
RACES = {
    "buffered": "_journal_lock",
    "appended": "_sync_lock",
    "during-snapshot": None,
}


def enqueue_racing_compaction(
    path: Path, race: str, skip: Collection[str] = ()
) -> Scenario:
    """One enqueue that returns while a compaction is under way; a power
    loss right then (the compaction has not written its snapshot yet)."""
    run = Scenario(path, LossyIO(recorder=Recorder(), skip=skip), save_interval=FAR)
    run.enqueue()
    compacting, resume = threading.Event(), threading.Event()

    def pause_before_snapshot() -> None:
        compacting.set()
        assert resume.wait(WAIT)

    run.io.on_temp_file = pause_before_snapshot
    compactor = threading.Thread(target=run.queue.save)

    def start_compaction() -> None:
        compactor.start()
        assert compacting.wait(WAIT)

    lock = RACES[race]
    if lock is None:
        start_compaction()
    else:
        setattr(run.store, lock, GatedLock(getattr(run.store, lock), start_compaction))
    run.enqueue()
    run.io.power_loss_now()
    resume.set()
    compactor.join(WAIT)
    run.close()
    return run


# --- the tests --------------------------------------------------------------------


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "jobs.json"


COMPACTION: dict[str, dict[str, Any]] = {
    "on-save": {"save_interval": FAR},
    "on-its-own": {"save_interval": 0, "compact_bytes": 256},
}


@pytest.mark.parametrize("compaction", list(COMPACTION))
def test_every_change_that_returned_survives_a_power_loss_at_any_moment(
    path: Path, compaction: str
) -> None:
    run = everyday_use(path, **COMPACTION[compaction])

    assert run.lost_changes() == []
    assert len(run.recorder.crashes) > 50  # the check saw many disks


def test_compaction_on_its_own_happened_in_the_everyday_scenario(path: Path) -> None:
    run = everyday_use(path, **COMPACTION["on-its-own"])

    assert run.recorder.sites["_compact>durable_replace.fsync"] > 4


@pytest.mark.parametrize("race", list(RACES))
def test_enqueue_racing_a_compaction_is_on_disk_before_it_returns(
    path: Path, race: str
) -> None:
    run = enqueue_racing_compaction(path, race)

    assert run.lost_changes() == []


def test_a_damaged_file_survives_a_power_loss_while_it_is_moved_aside(
    path: Path,
) -> None:
    good = everyday_use(path).io.contents()
    snapshot = good[str(path)]
    damaged = {str(path): snapshot[: len(snapshot) // 2]}  # an unreadable snapshot
    recorder = Recorder()
    io = LossyIO(damaged, recorder=recorder)

    store = JsonFileStore(path, fsync=True, io=io)
    store.open(Signal(), dead_letter_limit=10)
    store.close()

    assert any(name.startswith(f"{path}.corrupt-") for name in io.contents())
    for disk in recorder.crashes:
        assert damaged[str(path)] in dict(disk).values()


# --- the check, checked: each fsync removed in turn ------------------------------

#: Each fsync call site of the JSON store whose removal loses changes, and the
#: scenario that shows it.
NEEDED = {
    # the first records of a (re)started store go to a segment nobody finds
    "_load>start_new.fsync_dir": "everyday",
    # records written during a compaction go to a segment nobody finds
    "_compact>start_new.fsync_dir": "during-snapshot",
    # an enqueue returns before its record is on the device
    "_sync>sync.fsync": "everyday",
    # the compaction takes over fsyncing records that callers then return on
    "_compact>sync.fsync": "buffered",
    # the snapshot's name survives with an empty file, the journal is gone
    "_compact>durable_replace.fsync": "everyday",
    # the old snapshot comes back while the journal's deletion survives
    "_compact>durable_replace.fsync_dir": "everyday",
}

#: fsync call sites whose removal loses nothing, and why; see the report in
#: ``test_removing_a_redundant_fsync_loses_nothing``.
REDUNDANT = {
    # The segment's header is fsynced again, with its first records, by the
    # fsync every change waits for; a header lost with no record after it
    # reads as a torn tail.
    "_load>start_new.fsync": "everyday",
    "_compact>start_new.fsync": "during-snapshot",
    # A deleted segment that comes back holds only records the durable
    # snapshot already has; replay skips them, the next compaction deletes it.
    "_compact>remove.fsync_dir": "everyday",
    # The next directory fsync (the new segment the restart starts) comes
    # before anything could reuse the name: the file is at one name or the other.
    "_set_snapshot_aside>move_aside.fsync_dir": "damaged",
    "_set_segment_aside>move_aside.fsync_dir": "damaged",
}


def _lost_changes(name: str, path: Path, skip: Collection[str]) -> list[str]:
    """What scenario ``name`` lost with the fsync sites in ``skip`` removed."""
    if name == "everyday":
        try:
            run = everyday_use(path, skip=skip, save_interval=FAR)
        except LostChanges as exc:  # found at the power loss between changes
            return [str(exc)]
    elif name == "damaged":
        run = damaged_files(path, skip)
    else:
        run = enqueue_racing_compaction(path, name, skip)
    return run.lost_changes()


def _sites(name: str, path: Path) -> Counter[str]:
    """The fsync call sites scenario ``name`` reaches, with how many calls."""
    if name == "everyday":
        return everyday_use(path, save_interval=FAR).recorder.sites
    if name == "damaged":
        return damaged_files(path).recorder.sites
    return enqueue_racing_compaction(path, name).recorder.sites


def damaged_files(path: Path, skip: Collection[str] = ()) -> Scenario:
    """A restart that finds a damaged snapshot and a damaged segment, then goes on."""
    setup = everyday_use(path, save_interval=FAR).io.contents()
    snapshot = setup[str(path)]
    journal = (  # a damaged record with an intact one after it: not a torn tail
        MAGIC + encode_record(1, b'["del",98]') + b"\xff" * 9
        + encode_record(2, b'["del",99]')
    )  # fmt: skip
    files = {str(path): snapshot[:-40], f"{path}.journal-1": journal}
    run = Scenario(path, LossyIO(files, recorder=Recorder(), skip=skip))
    run.restart()
    # The snapshot's intact rows are loaded again: from here on they are
    # part of what every power loss must keep.
    run.models[-1] = _jobs(run.store)
    assert run.model
    run.enqueue()
    run.close()
    return run


def test_every_fsync_site_is_known(path: Path) -> None:
    reached: Counter[str] = Counter()
    for name in ["everyday", "damaged", *RACES]:
        reached.update(_sites(name, path))

    assert set(reached) == set(NEEDED) | set(REDUNDANT)


@pytest.mark.parametrize("site", list(NEEDED))
def test_removing_a_needed_fsync_is_caught_by_the_power_loss_check(
    path: Path, site: str
) -> None:
    assert _sites(NEEDED[site], path)[site] > 0

    assert _lost_changes(NEEDED[site], path, skip={site}) != []


@pytest.mark.parametrize("site", list(REDUNDANT))
def test_removing_a_redundant_fsync_loses_nothing(path: Path, site: str) -> None:
    assert _sites(REDUNDANT[site], path)[site] > 0

    assert _lost_changes(REDUNDANT[site], path, skip={site}) == []


# --- group commit --------------------------------------------------------------


class SlowDeviceIO(LossyIO):
    """``LossyIO`` whose journal fsync lasts until ``producers`` records of
    the round are written: a device slow enough for every caller to arrive
    while it flushes. Counts the journal fsyncs."""

    def __init__(self, producers: int, **options: Any) -> None:
        super().__init__(**options)
        self.producers = producers
        self.journal_writes = 0
        self.journal_fsyncs = 0
        self._round_written = threading.Condition(self._lock)

    def write(self, fd: int, data: bytes) -> None:
        super().write(fd, data)
        if _site("write") == "_write_journal>append.write":
            with self._lock:
                self.journal_writes += 1
                self._round_written.notify_all()

    def fsync(self, fd: int) -> None:
        if _site("fsync") == "_sync>sync.fsync":
            with self._lock:
                self.journal_fsyncs += 1
                assert self._round_written.wait_for(
                    lambda: self.journal_writes % self.producers == 0, WAIT
                )
        super().fsync(fd)


def test_concurrent_enqueues_share_fsyncs_and_each_is_durable_when_it_returns(
    path: Path,
) -> None:
    producers, rounds = 8, 25
    recorder = Recorder()
    io = SlowDeviceIO(producers, recorder=recorder)
    queue: jobq.JobQueue[Any] = jobq.JobQueue(
        store=JsonFileStore(path, fsync=True, io=io, save_interval=FAR)
    )
    queue.stats()  # open it before the producers start
    acked: list[int] = []  # ids in the order their enqueue returned
    next_round = threading.Barrier(producers)

    def produce(n: int) -> None:
        for i in range(rounds):
            next_round.wait(WAIT)
            acked.append(queue.enqueue({"producer": n, "i": i}).id)
            recorder.acked = len(acked)  # racy but never too high: a lower bound

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    io.power_loss_now()
    queue.close()

    print(f"\ngroup commit: {len(acked)} enqueues, {io.journal_fsyncs} fsyncs")
    assert len(acked) == producers * rounds
    # Records written while an fsync runs share the next one: per round, the
    # first caller's fsync and one for everyone who arrived meanwhile.
    assert io.journal_fsyncs <= 2 * rounds
    # A power loss at any moment keeps every enqueue that had returned:
    # checked on a sample of the moments (each check loads the whole queue).
    moments = sorted(
        ((max(counts), disk) for disk, counts in recorder.crashes.items()),
        key=lambda moment: moment[0],
    )
    for acked_then, disk in [*moments[:: max(1, len(moments) // 20)], moments[-1]]:
        found = _load(path, LossyIO(disk))
        assert set(acked[:acked_then]) <= set(found)
    assert moments[-1][0] == len(acked)
