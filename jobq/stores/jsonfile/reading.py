"""Reading the JSON store's files into memory, and finding what is damaged.

Nothing here changes a file. The store acts on damage (moves files aside,
logs what was lost, writes a fresh snapshot) only once everything has been
read, so a refusal found late, such as a newer jobq's record in the last
segment, leaves every file as it was.

Damage costs exactly what it hit: the snapshot's rows and the journal's
records each carry a CRC, so every one the damage missed is loaded (see
``State.salvage_snapshot`` and ``journal.scan``), and the ids seen in the
unreadable parts are never given to new jobs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from jobq.errors import StoreError
from jobq.stores.jsonfile import formats as fmt
from jobq.stores.jsonfile.fileio import FileIO
from jobq.stores.jsonfile.journal import Scan, scan

#: Job ids in file content that could not be loaded: ``"id": 7``, ``"next_id": 8``.
_ID_PATTERN = re.compile(rb'"(?:id|next_id)"\s*:\s*(\d+)')


@dataclass
class SnapshotDamage:
    """A snapshot whose checksum failed, and what was loaded of it anyway."""

    error: str  # why it failed
    salvage: fmt.Salvage  # what was loaded of it


@dataclass
class SegmentDamage:
    """A journal segment that is damaged or ends in a torn record."""

    path: str
    scan: Scan
    lost: list[tuple[int, int]]  # ranges of sequence numbers lost, inclusive
    unapplied: list[int]  # intact records whose body could not be applied


@dataclass
class Files:
    """What reading the store's files found."""

    state: fmt.State
    snapshot: SnapshotDamage | None = None
    segments: list[SegmentDamage] = field(default_factory=list)


def read_files(io: FileIO, path: str, segments: Sequence[str]) -> Files:
    """Read the snapshot at ``path`` and the journal ``segments`` (oldest
    first) into a ``State``.

    Raises ``StoreError`` for a file that cannot be read at all (permissions,
    not a regular file) and for one a newer jobq wrote.
    """
    files = Files(fmt.State())
    data = _read(io, path)
    if data is not None:
        files.snapshot = _load_snapshot(files, path, data)
    for segment in segments:
        data = _read(io, segment)
        if data is not None:
            _replay(files, segment, data)
    return files


def _read(io: FileIO, path: str) -> bytes | None:
    """The file's content; ``None`` if it is gone (compacted away while a
    reader listed it, or no snapshot yet)."""
    try:
        return io.read(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _load_snapshot(files: Files, path: str, data: bytes) -> SnapshotDamage | None:
    """Load the snapshot; if it is damaged, what could be loaded of it."""
    try:
        files.state.load_snapshot(data)
    except fmt.NewerFormat as exc:
        raise StoreError(f"{path}: {exc}") from None
    except fmt.MALFORMED as exc:
        files.state = fmt.State()  # drop whatever the failed load left
        try:
            salvage = files.state.salvage_snapshot(data)
        except fmt.NewerFormat as newer:
            raise StoreError(f"{path}: {newer}") from None
        _reserve_ids(files.state, data)
        return SnapshotDamage(str(exc), salvage)
    return None


def _replay(files: Files, path: str, data: bytes) -> None:
    """Apply a segment's intact records; note its damage in ``files``."""
    state = files.state
    try:
        found = scan(data)
    except fmt.NewerFormat as exc:
        raise StoreError(f"{path}: {exc}") from None
    floor = state.seq  # the snapshot's, or the previous segment's last record
    unapplied = []
    for seq, body in found.records:
        try:
            state.apply(seq, body)
        except fmt.NewerFormat as exc:
            raise StoreError(f"{path}: {exc}") from None
        except fmt.MALFORMED:
            unapplied.append(seq)
            _reserve_ids(state, body)
    if not (found.damaged or found.torn_at is not None or unapplied):
        return
    lost = []
    for gap in found.gaps:
        _reserve_ids(state, data, gap.start, gap.end)
        first, last = max(gap.seq_before, floor) + 1, gap.seq_after - 1
        if first <= last:
            lost.append((first, last))
    if found.torn_at is not None:
        _reserve_ids(state, data, found.torn_at)
    files.segments.append(SegmentDamage(path, found, lost, unapplied))


def _reserve_ids(
    state: fmt.State, data: bytes, start: int = 0, end: int | None = None
) -> None:
    """Never give again an id seen in ``data[start:end]``, which was not loaded."""
    found = _ID_PATTERN.findall(data, start, len(data) if end is None else end)
    state.next_id = max([state.next_id, *(int(m) + 1 for m in found)])
