"""The JSON-file store: the memory store, kept in a file that survives restarts.

One process owns the file, enforced by an ``flock`` on the sibling
``<file>.lock`` taken on first use; other processes may read it. The owner
keeps the queue in memory (see ``MemoryStore``) and a daemon thread writes a
snapshot after changes, coalescing bursts: it copies references to the
immutable entries under the lock, then serializes and writes outside it
(temp file + fsync + ``os.replace`` + directory fsync, mode 0600).

A file that cannot be read is moved aside with a timestamped name and logged;
it is never overwritten or dropped. A file written by a newer format is refused.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Sequence
from typing import Any

from jobq._fileio import DEFAULT_IO, FileIO, OwnerLock, durable_replace, move_aside
from jobq._json import encode
from jobq.errors import StoreError, StoreLocked
from jobq.stores.base import Claim, NewJob, Signal, StoreStats
from jobq.stores.memory import DEAD, PENDING, MemoryStore, _Entry
from jobq.types import AttemptError, Enqueued, JobRecord, JobState

logger = logging.getLogger(__name__)

FORMAT = "jobq"
VERSION = 1

_ID_PATTERN = re.compile(rb'"(?:id|next_id)"\s*:\s*(\d+)')

#: What reading a malformed file raises (RecursionError: absurdly deep nesting).
_MALFORMED = (ValueError, TypeError, KeyError, OverflowError, RecursionError)


class JsonFileStore(MemoryStore):
    """Jobs in memory, saved to a JSON file by a background thread.

    ``save_interval``: seconds the writer waits after a change so that a burst
    of changes becomes one snapshot. ``io``: the file-system layer (tests swap
    in one that injects faults).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        save_interval: float = 0.05,
        io: FileIO = DEFAULT_IO,
    ) -> None:
        super().__init__()
        self.path = os.path.abspath(os.fspath(path))
        self.save_interval = save_interval
        self._io = io
        self._owner = OwnerLock(self.path)
        self._opened = False
        self._changes = 0  # grows with every change, under the lock
        self._saved = 0  # the value of _changes that the file holds
        self._loaded_signature: tuple[int, int, int] | None = None
        self._write_lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._writer: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------

    def open(self, signal: Signal, *, dead_letter_limit: int) -> None:
        if self._opened:
            return
        super().open(signal, dead_letter_limit=dead_letter_limit)
        try:
            self._own()
        except StoreLocked:
            self._refresh()  # a reader: load what the owner saved
        self._opened = True

    def close(self) -> None:
        if not self._opened:
            return
        self._closing.set()
        self._wake.set()
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        try:
            if self._owner.held:
                self._write_snapshot()
        finally:
            with self._lock:  # so that _take_ownership sees either state whole
                self._opened = False
                self._owner.release()

    def save(self) -> None:
        if self._owner.held:
            self._write_snapshot()

    # -- changes need the owner's lock ----------------------------------------

    def add(self, jobs: Sequence[NewJob], now: float) -> list[Enqueued]:
        self._require_owner()
        return super().add(jobs, now)

    def claim(self, now: float) -> Claim | None:
        self._require_owner()
        return super().claim(now)

    def finish(
        self, claim: Claim, result: str | None, keep_until: float | None, now: float
    ) -> bool:
        self._require_owner()
        return super().finish(claim, result, keep_until, now)

    def fail(
        self, claim: Claim, error: AttemptError, retry_at: float | None, now: float
    ) -> bool:
        self._require_owner()
        return super().fail(claim, error, retry_at, now)

    def recover(self, now: float) -> int:
        self._require_owner()
        return 0  # running jobs of a dead owner were recovered when the file was loaded

    def revive(self, job_id: int, now: float) -> bool:
        self._require_owner()
        return super().revive(job_id, now)

    def delete_dead(self, job_id: int) -> bool:
        self._require_owner()
        return super().delete_dead(job_id)

    def cancel(self, job_id: int) -> bool:
        self._require_owner()
        return super().cancel(job_id)

    # -- reads see the owner's latest snapshot --------------------------------

    def get(self, job_id: int, now: float) -> JobRecord[Any] | None:
        self._refresh()
        return super().get(job_id, now)

    def list_jobs(
        self, state: JobState, limit: int | None = None
    ) -> list[JobRecord[Any]]:
        self._refresh()
        return super().list_jobs(state, limit)

    def stats(self) -> StoreStats:
        self._refresh()
        return super().stats()

    # -- ownership and loading ------------------------------------------------

    def _require_owner(self) -> None:
        if not self._owner.held:
            self._take_ownership()

    def _take_ownership(self) -> None:
        """Take the owner's lock now: the owner may have gone since ``open``."""
        with self._lock:
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
            self._owner.release()
            raise

    def _refresh(self) -> None:
        """For a reader: reload the file if the owner has written it since."""
        if self._owner.held:
            return
        with self._lock:
            signature = self._signature()
            if signature != self._loaded_signature:
                self._load(recover=False)

    def _signature(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _load(self, *, recover: bool) -> None:
        """Read the file into memory; an owner also recovers jobs that were running."""
        with self._lock:
            now = time.time()
            self._loaded_signature = self._signature()
            entries: list[_Entry] = []
            running: list[int] = []
            next_id = 1
            try:
                data = self._io.read(self.path)
            except FileNotFoundError:
                data = None
            except OSError as exc:
                raise StoreError(f"cannot read {self.path}: {exc.strerror}") from exc
            if data is not None:
                try:
                    entries, running, next_id = _parse(data)
                except _NewerFormat as exc:
                    raise StoreError(str(exc)) from None
                except _MALFORMED as exc:
                    if not recover:
                        raise StoreError(f"cannot read {self.path}: {exc}") from exc
                    next_id = max(
                        (int(m) + 1 for m in _ID_PATTERN.findall(data)), default=1
                    )
                    aside = move_aside(self.path, "corrupt", io=self._io)
                    logger.error(
                        "%s could not be read (%s); moved it to %s and started empty",
                        self.path,
                        exc,
                        aside,
                    )
                    self._loaded_signature = None
            before = self._changes
            self._restore(entries, running, next_id, now, recover=recover)
            self._saved = before
        if recover and self._owner.held:
            self._start_writer()

    # -- writing snapshots ----------------------------------------------------

    def _changed(self, change: _Entry | int) -> None:
        self._changes += 1
        if not self._wake.is_set():
            self._wake.set()

    def _claimed(self, job_id: int, token: int) -> None:
        # Which jobs run is part of the file: a job running when the process
        # dies must come back as a failed attempt, not as untouched pending.
        self._changed(job_id)

    def _start_writer(self) -> None:
        if self._writer is None:
            self._closing.clear()
            self._writer = threading.Thread(
                target=self._write_loop, name=f"jobq-snapshot-{self.path}", daemon=True
            )
            self._writer.start()

    def _write_loop(self) -> None:
        failures = 0
        while not self._closing.is_set():
            self._wake.wait()
            self._closing.wait(self.save_interval)  # let a burst of changes gather
            self._wake.clear()
            try:
                self._write_snapshot()
            except StoreError:
                failures += 1
                pause = min(2.0**failures, 30.0)
                logger.exception(
                    "writing %s failed; trying again in %g s", self.path, pause
                )
                self._closing.wait(pause)
                self._wake.set()
            else:
                failures = 0

    def _write_snapshot(self) -> None:
        """Write the queue as it is now, unless the file already holds it."""
        with self._write_lock:
            with self._lock:
                changes = self._changes
                if changes == self._saved and self._signature() is not None:
                    return
                entries = [e for e in self._jobs.values() if e.state is not DEAD]
                entries.extend(self._jobs[i] for i in self._dead)
                running = set(self._claims)
                next_id = self._next_id
            data = _serialize(entries, running, next_id)
            durable_replace(self.path, data, io=self._io)
            self._saved = changes


class _NewerFormat(Exception):
    """The file was written by a newer jobq; refusing it beats misreading it."""


def _serialize(entries: list[_Entry], running: set[int], next_id: int) -> bytes:
    head = json.dumps(
        {
            "format": FORMAT,
            "version": VERSION,
            "next_id": next_id,
            "count": len(entries),
        }
    )
    rows = ",\n".join(_row(e, e.id in running) for e in entries)
    return f'{head[:-1]}, "jobs": [\n{rows}\n]}}\n'.encode()


def _row(entry: _Entry, running: bool) -> str:
    """One job as JSON; payload and result are spliced in as the text they are."""
    meta = json.dumps(
        {
            "id": entry.id,
            "state": "running" if running else entry.state.value,
            "key": entry.key,
            "priority": entry.priority,
            "run_at": entry.run_at,
            "created_at": entry.created_at,
            "max_attempts": entry.max_attempts,
            "task": entry.task,
            "attempts": entry.attempts,
            "last_error": entry.last_error,
            "errors": [[e.type, e.message, e.traceback, e.at] for e in entry.errors],
            "expires_at": entry.expires_at,
        },
        separators=(",", ":"),
    )
    result = "null" if entry.result is None else entry.result
    return f'{meta[:-1]},"payload":{entry.payload},"result":{result}}}'


def _parse(data: bytes) -> tuple[list[_Entry], list[int], int]:
    """Entries, the ids of those that were running, and the next id."""
    document = json.loads(data)
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError("not a jobq file")
    version = document["version"]
    if not isinstance(version, int) or version < 1:
        raise ValueError(f"bad version {version!r}")
    if version > VERSION:
        raise _NewerFormat(
            f"this file was written by a newer jobq (format version {version}; "
            f"this jobq reads up to {VERSION}): upgrade jobq"
        )
    rows = document["jobs"]
    if len(rows) != document["count"]:
        raise ValueError("job count does not match")
    entries = [_entry(row) for row in rows]
    running = [row["id"] for row in rows if row["state"] == "running"]
    return entries, running, int(document["next_id"])


def _entry(row: dict[str, Any]) -> _Entry:
    result = row["result"]
    return _Entry(
        id=int(row["id"]),
        payload=encode(row["payload"]),
        key=row["key"],
        priority=int(row["priority"]),
        run_at=float(row["run_at"]),
        created_at=float(row["created_at"]),
        max_attempts=int(row["max_attempts"]),
        task=row["task"],
        state=PENDING if row["state"] == "running" else JobState(row["state"]),
        attempts=int(row["attempts"]),
        last_error=row["last_error"],
        errors=tuple(
            AttemptError(str(t), str(m), str(tb), float(at))
            for t, m, tb, at in row["errors"]
        ),
        result=None if result is None else encode(result, "result"),
        expires_at=None if row["expires_at"] is None else float(row["expires_at"]),
    )
