"""The JSON store's journal: change records appended before each call returns.

Records live in numbered segment files beside the snapshot
(``jobs.json.journal-1``, ``-2``, ...). Compaction starts a new segment,
writes a snapshot that covers everything before it, then deletes the older
segments; replay skips records the snapshot already holds (their sequence
number is not above the snapshot's), so a crash between any two steps loses
and doubles nothing.

A segment is ``MAGIC`` followed by records: a header ``(length, crc32,
seq)`` and a JSON body. The CRC covers the sequence number and the body, so
a torn write at the tail (a crash mid-append) and a damaged record in the
middle are both detected, and told apart by whether a valid record follows;
the records after damage are found again and loaded (see ``scan``).
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import zlib
from dataclasses import dataclass, field

from jobq.stores.jsonfile.fileio import FileIO
from jobq.stores.jsonfile.formats import NewerFormat

#: The version this code writes; it reads older segments too
#: (their records only lack what later versions added, see ``formats``).
FORMAT_VERSION = 5
MAGIC = b"JOBQ-JOURNAL %d\n" % FORMAT_VERSION
#: This version's header and the older ones it reads, all of one length.
_MAGICS = tuple(b"JOBQ-JOURNAL %d\n" % v for v in range(FORMAT_VERSION, 0, -1))
_HEADER = struct.Struct("<IIQ")  # body length, crc32(seq + body), seq
_MAX_BODY = 1 << 30
_SEQ_TOP = _HEADER.size - 2  # where the sequence number's two highest bytes are


def encode_record(seq: int, body: bytes) -> bytes:
    """One record, ready to append."""
    crc = zlib.crc32(body, zlib.crc32(seq.to_bytes(8, "little")))
    return _HEADER.pack(len(body), crc, seq) + body


@dataclass(frozen=True)
class Gap:
    """Damaged bytes between two intact records: ``data[start:end]``.

    The records lost there had sequence numbers above ``seq_before`` (the
    intact record before it, 0 if none in this segment) and below
    ``seq_after`` (the intact record that starts at ``end``).
    """

    start: int
    end: int
    seq_before: int
    seq_after: int


@dataclass
class Scan:
    """What reading one segment found."""

    records: list[tuple[int, bytes]] = field(default_factory=list)  # (seq, body)
    gaps: list[Gap] = field(default_factory=list)  # damage with intact records after
    torn_at: int | None = None  # no intact record from here on: a torn tail
    bad_header: bool = False  # the segment does not start with ``MAGIC``

    @property
    def damaged(self) -> bool:
        """Damage a crash cannot explain: the file is to be moved aside."""
        return bool(self.gaps) or self.bad_header


def scan(data: bytes) -> Scan:
    """The intact records of a segment, in order, and where it is damaged.

    After a record that is not intact, the search goes on byte by byte for
    the next whole record with a valid CRC and a sequence number above the
    last intact one (``_next_record``), so damage costs exactly the records
    it hit, whether it hit a body, a CRC or a length field (then the search
    finds the record after it). If none follows, the rest is a torn tail: a
    crash in the middle of an append, which loses only a change that never
    returned. Raises ``NewerFormat`` for a newer jobq's segment.
    """
    result = Scan()
    position = len(MAGIC)
    if not data.startswith(_MAGICS):
        _refuse_newer(data)
        if MAGIC.startswith(data):  # a crash while creating the segment
            result.torn_at = 0
            return result
        result.bad_header = True
        position = 0  # the records may still be there: search from the start
    last_seq = 0
    while position < len(data):
        record = _record_at(data, position, last_seq)
        if record is None:
            following = _next_record(data, position + 1, last_seq)
            if following is None:
                result.torn_at = position
                break
            start, record = following
            result.gaps.append(Gap(position, start, last_seq, record[0]))
        seq, body, position = record
        result.records.append((seq, body))
        last_seq = seq
    return result


_HEADER_LINE = re.compile(rb"JOBQ-JOURNAL ([0-9]{1,9})\n")


def _refuse_newer(data: bytes) -> None:
    """A well-formed header with a version above ours: a newer jobq's segment."""
    header = _HEADER_LINE.match(data)
    if header is not None and int(header.group(1)) > FORMAT_VERSION:
        raise NewerFormat(
            f"this journal was written by a newer jobq (journal version "
            f"{int(header.group(1))}; this jobq reads {FORMAT_VERSION}): upgrade jobq"
        )


def _next_record(
    data: bytes, start: int, after_seq: int
) -> tuple[int, tuple[int, bytes, int]] | None:
    """The first intact record at or after ``start`` that follows ``after_seq``.

    Only offsets where the two highest bytes of the sequence number are zero
    can start a record (a seq below 2**48: centuries of changes), and JSON
    bodies hold no NUL byte, so ``bytes.find`` skips through text and only
    headers are tried.
    """
    position = start
    while (zeros := data.find(b"\0\0", position + _SEQ_TOP)) >= 0:
        position = zeros - _SEQ_TOP
        record = _record_at(data, position, after_seq)
        if record is not None:
            return position, record
        position += 1
    return None


def _record_at(
    data: bytes, position: int, after_seq: int
) -> tuple[int, bytes, int] | None:
    """The record at ``position`` if it is whole, intact and in order:
    ``(seq, body, where the next record starts)``."""
    end_of_header = position + _HEADER.size
    if end_of_header > len(data):
        return None
    length, crc, seq = _HEADER.unpack_from(data, position)
    end = end_of_header + length
    if length > _MAX_BODY or end > len(data) or seq <= after_seq:
        return None
    body = data[end_of_header:end]
    if zlib.crc32(body, zlib.crc32(seq.to_bytes(8, "little"))) != crc:
        return None
    return seq, body, end


class Segments:
    """The journal's segment files for one store, and the one being appended to."""

    def __init__(self, store_path: str, io: FileIO) -> None:
        self._io = io
        self.directory = os.path.dirname(store_path)
        self._prefix = os.path.basename(store_path) + ".journal-"
        self._pattern = re.compile(re.escape(self._prefix) + r"(\d+)$")
        self.fd: int | None = None
        self.number = 0
        self.size = 0  # bytes appended to the current segment

    def _numbered(self) -> list[tuple[int, str]]:
        numbered = []
        for name in self._io.listdir(self.directory):
            match = self._pattern.match(name)
            if match:
                numbered.append(
                    (int(match.group(1)), os.path.join(self.directory, name))
                )
        return sorted(numbered)

    def existing(self) -> list[str]:
        """Paths of the segments on disk, oldest first."""
        return [path for _, path in self._numbered()]

    def start_new(self, *, durable: bool) -> list[str]:
        """Close the current segment and start the next; the older segments' paths.

        With ``durable``, the new file and its directory entry are fsynced, so
        a power loss cannot lose the segment that later records go to.
        """
        numbered = self._numbered()
        self.number = max([self.number, *(number for number, _ in numbered)])
        self.close()
        self.number += 1
        path = os.path.join(self.directory, f"{self._prefix}{self.number}")
        fd = self._io.open_append(path)
        try:
            self._io.write(fd, MAGIC)
            if durable:
                self._io.fsync(fd)
                self._io.fsync_dir(self.directory)
        except BaseException:
            self._io.close(fd)
            with contextlib.suppress(OSError):  # an empty segment would only confuse
                self._io.unlink(path)
            raise
        self.fd, self.size = fd, 0
        return [path for _, path in numbered]

    def append(self, data: bytes) -> None:
        assert self.fd is not None  # noqa: S101 - start_new comes first
        self._io.write(self.fd, data)
        self.size += len(data)

    def sync(self) -> None:
        assert self.fd is not None  # noqa: S101 - start_new comes first
        self._io.fsync(self.fd)

    def remove(self, paths: list[str]) -> None:
        """Delete segments a durable snapshot now covers."""
        for path in paths:
            self._io.unlink(path)
        if paths:
            self._io.fsync_dir(self.directory)

    def close(self, *, remove_if_empty: bool = False) -> None:
        """Close the current segment; with ``remove_if_empty``, delete it if
        nothing was appended (a clean close leaves only the snapshot)."""
        if self.fd is not None:
            fd, self.fd = self.fd, None
            self._io.close(fd)
            if remove_if_empty and self.size == 0:
                self._io.unlink(
                    os.path.join(self.directory, f"{self._prefix}{self.number}")
                )
