"""The JSON-file store: the memory store, kept on disk so it survives crashes.

One process owns the file, enforced by an ``flock`` on the sibling
``<file>.lock`` taken on first use; other processes may read it. The owner
keeps the queue in memory (see ``MemoryStore``) and appends every change to a
journal before the call that made it returns (see ``journal``): a crash of
the process loses nothing that returned. With ``fsync=True`` each change is
also fsynced before returning (concurrent callers share one fsync), which
survives a power loss too.

A daemon thread compacts the journal into a snapshot when the journal has
grown as large as the last snapshot (so each change costs O(1) amortized):
it starts a new journal segment, copies references to the immutable entries
under the lock, serializes and writes outside it (temp file + fsync +
``os.replace`` + directory fsync, mode 0600), then deletes the old segments.

Damaged files are moved aside with a timestamped name and logged; they are
never overwritten or deleted, and every row and record in them that is still
intact is loaded (see ``reading``). A write that fails marks the
journal broken: changes stay in memory, the caller whose change hit it gets
``OutcomeUnknown`` (its change is made, in memory only), later callers that
add or remove jobs get ``StoreError`` (their change is not made), and the
compactor rewrites everything from memory (never trusting a retried fsync)
until it succeeds.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from jobq._fork import reset_after_fork
from jobq.errors import OutcomeUnknown, StoreError, StoreLocked
from jobq.stores._activity import ActivityInMemory
from jobq.stores._entry import DEAD, STATE, Entry, started
from jobq.stores._threads import start_helper
from jobq.stores.base import (
    CancelOutcome,
    Capabilities,
    Claim,
    Done,
    Failure,
    NewJob,
    Signal,
    SlotState,
    StoreStats,
)
from jobq.stores.helpers import (
    OneJobCalls,
    batch_size,
)
from jobq.stores.jsonfile import formats as fmt
from jobq.stores.jsonfile.fileio import (
    DEFAULT_IO,
    FileIO,
    OwnerLock,
    durable_replace,
    move_aside,
)
from jobq.stores.jsonfile.journal import Scan, Segments, encode_record
from jobq.stores.jsonfile.reading import (
    Files,
    SegmentDamage,
    SnapshotDamage,
    read_files,
)
from jobq.stores.memory import MemoryStore
from jobq.stores.pages import JobPage, JobQuery
from jobq.types import Enqueued, JobRecord, JobState, Limit, LimitUsage

logger = logging.getLogger("jobq.stores.jsonfile")


class JsonFileStore(ActivityInMemory, OneJobCalls):
    """Jobs in memory (a ``MemoryStore`` it holds), kept in a JSON snapshot
    plus a journal of the memory store's changes (it is their
    ``ChangeRecorder``).

    ``fsync``: fsync every change before it returns (survives power loss).
    ``save_interval``: seconds the compactor waits once woken, so a burst
    becomes one snapshot. ``compact_bytes``: the journal size that triggers
    compaction when the snapshot is smaller. ``io``: the file-system layer
    (tests swap in one that injects faults or forgets unsynced writes).
    ``read_only``: never take the owner's lock, even when no one owns the
    file; read what is on disk, and raise ``StoreError`` on any change (for
    tools such as the ``jobq`` command that only look). ``claim_batch``: how
    many due jobs a worker may claim at once (see ``Store.claim_batch``).
    """

    lease_seconds: float | None = None  # claims live as long as the owner
    shared_between_processes = False  # one owner; other processes may read
    keeps_results = True  # the file outlives the process
    transactional_add = False
    capabilities = Capabilities(
        pages=True,
        schedules=True,
        files=True,
        owner_writes=True,
        limits=True,
        workflows=True,
        activity=True,
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: bool = False,
        save_interval: float = 0.05,
        compact_bytes: int = 1 << 20,
        io: FileIO = DEFAULT_IO,
        read_only: bool = False,
        claim_batch: int = 1,
    ) -> None:
        self._memory = MemoryStore(recorder=self)
        self.claim_batch = batch_size(claim_batch)
        self.path = os.path.abspath(os.fspath(path))
        self.read_only = bool(read_only)
        self.fsync = bool(fsync)
        self.save_interval = save_interval
        self.compact_bytes = compact_bytes
        self._io = io
        self._owner = OwnerLock(self.path)
        self._segments = Segments(self.path, io)
        self._opened = False
        self._loaded_signature: object = None
        self._init_writing()
        self._clear_activity()
        reset_after_fork(self)

    def _init_writing(self) -> None:
        """State of the journal and its threads: new in a forked child too."""
        self._seq = 0  # the newest change's sequence number (under _lock)
        self._buffer: list[bytes] = []  # records not yet appended (under _lock)
        #: The changes of one write of the memory store (``begin`` .. ``end``),
        #: made one record (under _lock); ``None`` outside one.
        self._group: list[bytes] | None = None
        self._group_depth = 0
        self._settle_group = False
        self._written = 0  # newest seq appended to the journal (_journal_lock)
        #: The change that settled a job last and is not in the journal yet
        #: (0: none): ``join`` callers wake, and ``stats`` counts it as
        #: running, until it is (``_journalled``).
        self._settling = 0
        self._synced = 0  # newest seq fsynced (_sync_lock)
        self._snapshot_size = 0
        self._broken: StoreError | None = None
        #: Set by ``close`` with the journal's locks held: a change made
        #: later is refused (``_require_journal``).
        self._journal_closed = False
        self._journal_lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._compact_lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._writer: threading.Thread | None = None

    def _after_fork_in_child(self) -> None:
        """The parent owns the file and its threads: reload it on next use."""
        # Forget the parent's lock descriptor now, without unlocking: kept open
        # here, it would hold the lock after the parent died or closed.
        self._owner.release()
        self._segments = Segments(self.path, self._io)  # the parent's fd is not ours
        self._init_writing()
        self._clear_activity()  # the parent's figures, and its lock
        self._opened = False

    # -- lifecycle ------------------------------------------------------------

    def open(self, signal: Signal, *, dead_letter_limit: int) -> None:
        if self._opened:
            return
        self._signal = signal
        self._journal_closed = False
        self._memory.open(signal, dead_letter_limit=dead_letter_limit)
        if self.read_only:
            self._refresh()
        else:
            try:
                self._own()
            except StoreLocked:
                self._refresh()  # a reader: load what the owner wrote
        self._opened = True

    def close(self) -> None:
        if not self._opened:
            return
        self._closing.set()
        self._wake.set()
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        compacted = False
        try:
            if self._owner.held:
                self._compact()
                compacted = True
        finally:
            # A thread may still change the store (a handler that outlived
            # close(timeout)): its commit finds the journal closed (StoreError),
            # never a descriptor closed under it, or reused by another file.
            with self._journal_lock, self._sync_lock:
                self._journal_closed = True
                # After a snapshot of everything, the new segment is empty.
                self._segments.close(remove_if_empty=compacted)
            with self._memory.lock:  # so that _take_ownership sees either state whole
                self._opened = False
                self._owner.release()

    def save(self) -> None:
        """Write a snapshot now (it also repairs a broken journal)."""
        if self._owner.held:
            self._compact()

    # -- changes: need the owner's lock, and return once journaled -------------

    def add(
        self, jobs: Sequence[NewJob], now: float, *, max_pending: int | None = None
    ) -> list[Enqueued]:
        self._require_writable()
        results = self._memory.add(jobs, now, max_pending=max_pending)
        self._commit()
        return results

    def claim_many(self, now: float, limit: int) -> list[Claim]:
        self._require_owner()
        claims = self._memory.claim_many(now, limit)
        if claims:
            self._commit_quietly()
        return claims

    def finish_many(
        self, done: Sequence[Done], keep_until: float | None, now: float
    ) -> list[bool]:
        self._require_owner()
        finished = self._memory.finish_many(done, keep_until, now)
        self._commit_quietly()
        return finished

    def release(self, claims: Sequence[Claim], now: float) -> None:
        self._require_owner()
        self._memory.release(claims, now)
        self._commit_quietly()

    def fail_many(
        self, failures: Sequence[Failure], now: float
    ) -> list[JobState | None]:
        self._require_owner()
        failed = self._memory.fail_many(failures, now)
        self._commit_quietly()
        return failed

    def recover(self, now: float) -> int:
        self._require_owner()
        return 0  # the jobs a dead owner was running were recovered at load

    def revive(self, job_id: int, now: float) -> bool:
        self._require_writable()
        revived = self._memory.revive(job_id, now)
        self._commit()
        return revived

    def delete_dead(self, job_id: int) -> bool:
        self._require_writable()
        deleted = self._memory.delete_dead(job_id)
        self._commit()
        return deleted

    def cancel(
        self, job_id: int, now: float, *, by: str, keep_until: float
    ) -> CancelOutcome | None:
        self._require_writable()
        cancelled = self._memory.cancel(job_id, now, by=by, keep_until=keep_until)
        self._commit()
        return cancelled

    def stops_requested(self, claims: Sequence[Claim]) -> list[int]:
        return self._memory.stops_requested(claims)

    def enqueue_slot(
        self,
        name: str,
        expression: str,
        slot: float,
        job: NewJob,
        now: float,
        *,
        skip_running: bool,
    ) -> Enqueued | None:
        self._require_owner()
        result = self._memory.enqueue_slot(
            name, expression, slot, job, now, skip_running=skip_running
        )
        self._commit()
        return result

    def pause_schedule(self, name: str, now: float, *, by: str) -> bool:
        self._require_writable()
        changed = self._memory.pause_schedule(name, now, by=by)
        self._commit()
        return changed

    def resume_schedule(self, name: str, now: float) -> bool:
        self._require_writable()
        changed = self._memory.resume_schedule(name, now)
        self._commit()
        return changed

    def enqueue_now(
        self, name: str, job: NewJob, now: float, *, skip_running: bool
    ) -> Enqueued:
        self._require_writable()
        result = self._memory.enqueue_now(name, job, now, skip_running=skip_running)
        self._commit()
        return result

    # -- reads: a reader sees the owner's latest writes -------------------------

    def get(self, job_id: int, now: float) -> JobRecord[Any] | None:
        self._refresh()
        return self._memory.get(job_id, now)

    def list_jobs(
        self, state: JobState, limit: int | None = None
    ) -> list[JobRecord[Any]]:
        self._refresh()
        return self._memory.list_jobs(state, limit)

    def stats(self) -> StoreStats:
        self._refresh()
        with self._memory.lock:
            stats = self._memory.stats()
            if self._settling:  # as the file says: still running
                stats = dataclasses.replace(stats, running=stats.running + 1)
        return stats

    def page_jobs(self, query: JobQuery, now: float) -> JobPage:
        self._refresh()
        return self._memory.page_jobs(query, now)

    def declare_limit(self, limit: Limit) -> Limit | None:
        """The owner's declarations rule: a reader's (a command, a
        dashboard) are not written."""
        if self.read_only:
            return None
        try:
            self._require_owner()
        except StoreLocked:  # another process owns the file: its rule
            return None
        replaced = self._memory.declare_limit(limit)
        self._commit()
        return replaced

    def limit_usage(self, now: float) -> list[LimitUsage]:
        self._refresh()
        return self._memory.limit_usage(now)

    def schedule_states(self) -> list[SlotState]:
        self._refresh()
        return self._memory.schedule_states()

    def renew(self, claims: Sequence[Claim], now: float) -> None:
        """Claims live as long as this process: nothing to renew."""

    def next_due(self) -> float | None:
        return self._memory.next_due()

    # -- for tools outside the owner (Capabilities) ------------------------------

    @property
    def location(self) -> str:
        return f"the JSON file {self.path}"

    def missing(self) -> str | None:
        """``None`` if the file is there, or its owner's lock (an owner that
        has saved nothing yet); else what is not."""
        if any(os.path.exists(p) for p in (self.path, self._owner.lock_path)):
            return None
        return f"no JSON store at {self.path}"

    def reader(self) -> JsonFileStore:
        """The file as another process reads it: ``read_only``."""
        return self if self.read_only else JsonFileStore(self.path, read_only=True)

    # -- recording changes (ChangeRecorder: called under the memory's lock) ------

    def stored(self, entry: Entry) -> None:
        self._record(fmt.put_record(entry))

    def removed(self, job_id: int) -> None:
        self._record(fmt.delete_record(job_id))

    def claimed(self, job_id: int, started_at: float) -> None:
        self._record(fmt.run_record(job_id, started_at))

    def stopping(self, entry: Entry, started_at: float | None) -> None:
        self._record(fmt.put_record(started(entry, started_at), running=True))

    def declared(self, limit: Limit) -> None:
        self._record(fmt.limit_record(limit))

    def scheduled(self, state: SlotState) -> None:
        self._record(fmt.slot_record(state))

    def settled(self) -> None:
        if self._group is not None:  # its records get their number at end()
            self._settle_group = True
        else:
            self._settling = self._seq  # its records are buffered already

    def begin(self) -> None:
        self._group_depth += 1
        if self._group is None:
            self._group = []

    def end(self) -> None:
        self._group_depth -= 1
        if self._group_depth:
            return
        bodies, self._group = self._group or [], None
        if bodies:
            self._seq += 1
            self._buffer.append(encode_record(self._seq, fmt.group_record(bodies)))
        if self._settle_group:
            self._settle_group = False
            self._settling = self._seq

    def _journalled(self, written: int) -> None:
        """The journal holds every change up to ``written``: wake ``join``
        callers if that includes the last job that settled. So ``join``
        returns only once another process reading the file sees the
        outcome (a ``jobq dead`` run right after it, say)."""
        if 0 < self._settling <= written:
            with self._memory.lock:
                if 0 < self._settling <= written:
                    self._settling = 0
                    self._signal.job_settled_locked()

    def _record(self, body: bytes) -> None:
        if self._group is not None:
            self._group.append(body)
            return
        self._seq += 1
        self._buffer.append(encode_record(self._seq, body))

    def _commit(self) -> None:
        """Return once this thread's changes are in the journal (and on disk
        with ``fsync``); ``OutcomeUnknown`` if they could not be written:
        they are made, in memory, and saved once writing works again (lost
        if the process ends first), so the caller must not take them for
        refused."""
        try:
            self._write_journal()
        except StoreError as exc:
            raise OutcomeUnknown(
                f"{exc}; this change was made in memory and is saved once "
                "writing works again (lost if the process ends before that)"
            ) from exc

    def _write_journal(self) -> None:
        seq = self._seq  # at least the newest change this thread made
        with self._journal_lock:
            if self._written < seq:
                if self._broken is not None:
                    raise self._broken
                self._require_journal()
                with self._memory.lock:
                    records, self._buffer = self._buffer, []
                    newest = self._seq
                try:
                    self._segments.append(b"".join(records))
                except OSError as exc:
                    with self._memory.lock:  # keep them for the rewrite from memory
                        self._buffer[:0] = records
                    raise self._break(exc) from exc
                self._written = newest
                self._journalled(newest)
                if self._journal_too_big():
                    self._wake.set()
        if self.fsync:
            self._sync(seq)

    def _sync(self, seq: int) -> None:
        """fsync the journal up to ``seq``; concurrent callers share one fsync."""
        with self._sync_lock:
            if self._synced >= seq:
                return
            if self._broken is not None:
                raise self._broken
            self._require_journal()
            covered = self._written
            try:
                self._segments.sync()
            except OSError as exc:
                raise self._break(exc) from exc
            self._synced = covered

    def _require_journal(self) -> None:
        """``StoreError`` once ``close`` closed the journal (with its lock
        held): a late change is not written."""
        if self._journal_closed:
            raise StoreError(f"{self.path}: the store is closed")

    def _commit_quietly(self) -> None:
        """For the workers' calls: a write failure is logged (once, by
        ``_break``) and the job goes on; the rewrite from memory keeps it.
        Once the store is closed nothing rewrites it: ``StoreError``."""
        try:
            self._commit()
        except StoreError:
            if self._journal_closed:
                raise

    def _break(self, exc: OSError) -> StoreError:
        """Mark the journal broken and have the compactor rewrite from memory."""
        if self._broken is None:
            logger.error(
                "writing the journal of %s failed (%s); changes are kept in "
                "memory and written again from memory",
                self.path,
                exc.strerror or exc,
            )
        self._broken = StoreError(
            f"cannot write {self.path}: {exc.strerror or exc}; changes are refused "
            "until it has been written again from memory"
        )
        self._wake.set()
        return self._broken

    # -- compaction: snapshot + new journal segment ----------------------------

    def _compact(self) -> None:
        """Write a snapshot of everything so far and drop the journal it covers.

        The snapshot is fuzzy, as in a database checkpoint: it starts a new
        journal segment at sequence number ``seq``, then copies the jobs one
        block at a time, so it may hold some changes made after ``seq`` as
        well. Replaying the records after ``seq`` on top of it gives the
        exact state, because every record says what a job now is (or that it
        is gone). Producers and workers wait only for one block's copy.
        """
        with self._compact_lock:
            with self._journal_lock, self._sync_lock:
                with self._memory.lock:
                    records, self._buffer = self._buffer, []
                    seq = self._seq
                    blocks, dead, running, next_id = self._memory.view()
                    schedules = self._memory.schedule_states()
                    limits = self._memory.limit_declarations()
                if self._broken is None:
                    try:  # so the old segment holds everything up to seq, durably:
                        if records:  # callers that wait for _sync find it synced
                            self._segments.append(b"".join(records))
                        if self.fsync and (records or self._synced < self._written):
                            self._segments.sync()
                    except OSError as exc:
                        self._break(exc)
                try:
                    older = self._segments.existing()
                    self._segments.start_new(durable=self.fsync)
                except OSError as exc:  # the directory itself may be gone
                    raise self._break(exc) from exc
                if self._broken is None:
                    self._written = self._synced = seq
            data = fmt.serialize(
                self._live_jobs(blocks), dead, running, next_id, seq, schedules, limits
            )
            self._snapshot_size = durable_replace(self.path, data, io=self._io)
            with self._journal_lock, self._sync_lock:
                self._written = max(self._written, seq)
                self._synced = max(self._synced, seq)
                self._journalled(self._written)
                if self._broken is not None:
                    logger.warning("%s written again from memory", self.path)
                    self._broken = None
            try:
                self._segments.remove(older)
            except OSError as exc:  # harmless: replay skips what the snapshot holds
                logger.warning("could not remove old journal segments: %s", exc)

    def _live_jobs(self, blocks: list[int]) -> Iterator[Entry]:
        """The jobs that are not dead, a block at a time, each block copied
        under the lock (see ``_compact``)."""
        for number in blocks:
            with self._memory.lock:
                block = self._memory.copy_block(number)
            yield from (entry for entry in block if entry[STATE] != DEAD)

    def _start_writer(self) -> None:
        if self._writer is None:
            self._closing.clear()
            writer = threading.Thread(
                target=self._write_loop, name=f"jobq-compact-{self.path}", daemon=True
            )
            if start_helper(writer):  # else close() compacts, as always
                self._writer = writer

    def _write_loop(self) -> None:
        failures = 0
        while not self._closing.is_set():
            self._wake.wait()
            self._closing.wait(self.save_interval)  # let a burst of changes gather
            self._wake.clear()
            if self._closing.is_set():
                return
            if self._broken is None and not self._journal_too_big():
                continue  # a save() compacted since the wake-up: nothing to do
            try:
                self._compact()
            except Exception:  # this thread must never die silently
                failures += 1
                pause = min(2.0**failures, 30.0)
                logger.exception(
                    "compacting %s failed; again in %g s", self.path, pause
                )
                self._closing.wait(pause)
                self._wake.set()
            else:
                failures = 0

    def _journal_too_big(self) -> bool:
        """Larger than the snapshot and than ``compact_bytes``: compact."""
        return self._segments.size > max(self.compact_bytes, self._snapshot_size)

    # -- ownership and loading ------------------------------------------------

    def _require_owner(self) -> None:
        if not self._owner.held:
            if self.read_only:
                raise StoreError(f"{self.path} was opened read-only")
            self._take_ownership()

    def _require_writable(self) -> None:
        """Before a caller's change: owner, and a journal that can take it."""
        self._require_owner()
        if self._broken is not None:
            raise self._broken

    def _take_ownership(self) -> None:
        """Take the owner's lock now: the owner may have gone since ``open``."""
        with self._memory.lock:
            if not self._opened:  # closed: a late handler must not take the file back
                raise StoreError(f"{self.path}: the store is closed")
            if not self._owner.held:
                self._own()

    def _own(self) -> None:
        """Take the lock (``StoreLocked`` while another process owns the file)
        and load the file; a file we refuse must not stay locked by us."""
        self._owner.acquire()
        try:
            self._load(recover=True)
        except BaseException:
            self._segments.close()
            self._owner.release()
            raise

    def _refresh(self) -> None:
        """For a reader: reload if the owner has written since."""
        if self._owner.held:
            return
        with self._memory.lock:
            if self._signature() != self._loaded_signature:
                self._load(recover=False)

    def _signature(self) -> object:
        """What changes when the owner writes: snapshot and segments' stat."""
        paths = [self.path, *self._segments.existing()]
        stats = []
        for path in paths:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            stats.append((path, st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(stats)

    def _load(self, *, recover: bool) -> None:
        """Read snapshot and journal into memory.

        An owner (``recover``) also moves damaged files aside, turns jobs
        that were running into failed attempts, starts a new journal segment
        and, if anything was damaged, writes a snapshot at once. A reader
        loads what is intact in the journal, but refuses a damaged snapshot
        with ``StoreError``: the owner repairs it when it next opens the file.
        """
        with self._memory.lock:
            self._loaded_signature = self._signature()
            files = read_files(self._io, self.path, self._segments.existing())
            if files.snapshot is not None and not recover:
                raise StoreError(f"cannot read {self.path}: {files.snapshot.error}")
            damaged = recover and self._set_damage_aside(files)
            state = files.state
            self._seq = state.seq
            # Records of an earlier load that failed were never written; left
            # here, they would be written again under reused numbers.
            self._buffer.clear()
            self._memory.restore(
                state.entries(), sorted(state.running), state.next_id,
                self._memory.clock(), recover=recover,
            )  # fmt: skip
            self._memory.restore_schedules(list(state.schedules.values()))
            self._memory.restore_limits(list(state.limits.values()))
            if not recover:
                self._buffer.clear()
                return
            try:
                self._segments.start_new(durable=self.fsync)
            except OSError as exc:
                raise StoreError(f"cannot write {self.path}: {exc.strerror}") from exc
            self._written = self._synced = state.seq
        self._commit()  # the recovered jobs' records
        if damaged:
            self._compact()
        self._start_writer()

    def _set_damage_aside(self, files: Files) -> bool:
        """Move damaged files aside (never delete them) and log what was
        lost; whether anything was wrong, so that a fresh snapshot makes the
        store whole again (it also drops a torn tail with its segment)."""
        if files.snapshot is not None:
            self._set_snapshot_aside(files.snapshot)
        for segment in files.segments:
            if segment.scan.damaged or segment.unapplied:
                self._set_segment_aside(segment)
            else:
                logger.warning(
                    "%s ends in a torn record (a crash while writing); dropped it",
                    segment.path,
                )
        return files.snapshot is not None or bool(files.segments)

    def _set_snapshot_aside(self, damage: SnapshotDamage) -> None:
        aside = move_aside(self.path, "corrupt", io=self._io)
        salvage = damage.salvage
        logger.error(
            "%s is damaged (%s); loaded its %d intact job rows, lines lost: "
            "%d%s; moved the file to %s; the whole journal is replayed on top",
            self.path,
            damage.error,
            salvage.rows,
            salvage.lost,
            "" if salvage.header else ", and its header (ids come from those seen)",
            aside,
        )

    def _set_segment_aside(self, segment: SegmentDamage) -> None:
        aside = move_aside(segment.path, "damaged", io=self._io)
        logger.error(
            "%s is damaged (%s); loaded its %d intact records, %s; moved the "
            "file to %s",
            segment.path,
            _where(segment.scan),
            len(segment.scan.records) - len(segment.unapplied),
            _losses(segment),
            aside,
        )


def _where(found: Scan) -> str:
    """Where a segment is damaged, for the log."""
    parts = ["its header"] if found.bad_header else []
    parts += [f"bytes {gap.start}-{gap.end - 1}" for gap in found.gaps]
    if found.torn_at is not None:
        parts.append(f"from byte {found.torn_at} to its end")
    return ", ".join(parts) or "a record that cannot be applied"


def _losses(segment: SegmentDamage) -> str:
    """Which changes a damaged segment lost, by sequence number, for the log."""
    numbers = [str(a) if a == b else f"{a}-{b}" for a, b in segment.lost]
    numbers += map(str, segment.unapplied)
    if segment.scan.torn_at is not None:
        last = segment.scan.records[-1][0] if segment.scan.records else 0
        numbers.append(f"any after {last}")
    if not numbers:
        return "lost no change the snapshot does not hold"
    return "lost the changes numbered " + ", ".join(numbers)
