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
middle are both detected, and told apart by whether a valid record follows.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import zlib
from dataclasses import dataclass, field

from jobq._fileio import FileIO

MAGIC = b"JOBQ-JOURNAL 1\n"
_HEADER = struct.Struct("<IIQ")  # body length, crc32(seq + body), seq
_MAX_BODY = 1 << 30


def encode_record(seq: int, body: bytes) -> bytes:
    """One record, ready to append."""
    crc = zlib.crc32(body, zlib.crc32(seq.to_bytes(8, "little")))
    return _HEADER.pack(len(body), crc, seq) + body


@dataclass
class Scan:
    """What reading one segment found."""

    records: list[tuple[int, bytes]] = field(default_factory=list)  # (seq, body)
    damaged_at: int | None = None  # offset of the first bad byte, if any
    valid_after_damage: bool = False  # a good record follows: not a torn tail


def scan(data: bytes) -> Scan:
    """The valid records of a segment, up to the first damage."""
    result = Scan()
    if not data.startswith(MAGIC):
        result.damaged_at = 0
        # A crash while creating the segment leaves a prefix of MAGIC: a torn tail.
        result.valid_after_damage = not MAGIC.startswith(data)
        return result
    position, last_seq = len(MAGIC), 0
    while position < len(data):
        record = _record_at(data, position, last_seq)
        if record is None:
            result.damaged_at = position
            result.valid_after_damage = any(
                _record_at(data, later, last_seq) is not None
                for later in range(position + 1, len(data) - _HEADER.size + 1)
            )
            break
        seq, body, position = record
        result.records.append((seq, body))
        last_seq = seq
    return result


def _record_at(
    data: bytes, position: int, after_seq: int
) -> tuple[int, bytes, int] | None:
    """The record at ``position`` if it is whole, intact and in order."""
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
