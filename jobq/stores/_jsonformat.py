"""The JSON store's file formats: snapshot documents and journal record bodies.

A job is one JSON object (a "row") in both: the snapshot lists rows, and a
journal ``put`` record carries the row of a job as it now is, so replaying a
record never depends on the records before it. Payload and result are
spliced in as the JSON text the store holds, never decoded and encoded again.
"""

from __future__ import annotations

import json
import zlib
from collections import OrderedDict
from typing import Any

from jobq._json import encode
from jobq.stores.memory import DEAD, PENDING, _Entry
from jobq.types import AttemptError, JobState

FORMAT = "jobq"
VERSION = 1

#: What reading a malformed file raises (RecursionError: absurdly deep nesting).
MALFORMED = (ValueError, TypeError, KeyError, OverflowError, RecursionError)

_string = json.encoder.encode_basestring  # the C encoder where there is one
_CHECKSUM = b', "crc32": '


class NewerFormat(Exception):
    """The file was written by a newer jobq; refusing it beats misreading it."""


def _text(value: str | None) -> str:
    return "null" if value is None else _string(value)


def row(entry: _Entry, running: bool) -> str:
    """One job as a JSON object (hand-built: this runs once per change)."""
    errors = "[]"
    if entry.errors:
        errors = json.dumps(
            [[e.type, e.message, e.traceback, e.at] for e in entry.errors]
        )
    state = "running" if running else entry.state.value
    expires = "null" if entry.expires_at is None else repr(entry.expires_at)
    return (
        f'{{"id":{entry.id},"state":"{state}","key":{_text(entry.key)},'
        f'"priority":{entry.priority},"run_at":{entry.run_at!r},'
        f'"created_at":{entry.created_at!r},"max_attempts":{entry.max_attempts},'
        f'"task":{_text(entry.task)},"attempts":{entry.attempts},'
        f'"last_error":{_text(entry.last_error)},"errors":{errors},'
        f'"expires_at":{expires},"payload":{entry.payload},'
        f'"result":{"null" if entry.result is None else entry.result}}}'
    )


def put_record(entry: _Entry) -> bytes:
    return f'["put",{row(entry, False)}]'.encode()


def delete_record(job_id: int) -> bytes:
    return b'["del",%d]' % job_id


def run_record(job_id: int) -> bytes:
    return b'["run",%d]' % job_id


def serialize(
    entries: list[_Entry], running: set[int], next_id: int, seq: int
) -> bytes:
    """A snapshot holding every change up to journal sequence number ``seq``."""
    head = json.dumps(
        {
            "format": FORMAT,
            "version": VERSION,
            "seq": seq,
            "next_id": next_id,
            "count": len(entries),
        }
    )
    rows = ",\n".join(row(e, e.id in running) for e in entries)
    body = f'{head[:-1]}, "jobs": [\n{rows}\n]'.encode()
    return body + b'%s%d}\n' % (_CHECKSUM, zlib.crc32(body))


class State:
    """Rows being loaded: from a snapshot, then journal records replayed on top."""

    def __init__(self) -> None:
        self.jobs: dict[int, _Entry] = {}
        self.running: set[int] = set()
        self.dead: OrderedDict[int, None] = OrderedDict()  # burial order
        self.next_id = 1
        self.seq = 0  # the newest change this state holds

    def load_snapshot(self, data: bytes) -> None:
        document = json.loads(data)
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise ValueError("not a jobq file")
        version = document["version"]
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ValueError(f"bad version {version!r}")
        if version > VERSION:
            raise NewerFormat(
                f"this file was written by a newer jobq (format version {version}; "
                f"this jobq reads up to {VERSION}): upgrade jobq"
            )
        end = data.rfind(_CHECKSUM)
        if end < 0 or zlib.crc32(data[:end]) != document.get("crc32"):
            raise ValueError("the snapshot's checksum does not match its content")
        rows = document["jobs"]
        if len(rows) != document["count"]:
            raise ValueError("job count does not match")
        for item in rows:
            self._put(item)
        self.next_id = int(document["next_id"])
        self.seq = int(document.get("seq", 0))

    def apply(self, seq: int, body: bytes) -> None:
        """Replay one journal record; records the snapshot holds are skipped."""
        if seq <= self.seq:
            return
        operation, argument = json.loads(body)
        if operation == "put":
            self._put(argument)
        elif operation == "del":
            self.jobs.pop(argument, None)
            self.running.discard(argument)
            self.dead.pop(argument, None)
        elif operation == "run":
            self.running.add(argument)
        else:
            raise ValueError(f"unknown journal operation {operation!r}")
        self.seq = seq

    def _put(self, item: dict[str, Any]) -> None:
        entry = _entry(item)  # a malformed row fails here, where it is read
        job_id = entry.id
        self.jobs[job_id] = entry
        self.next_id = max(self.next_id, job_id + 1)
        self.dead.pop(job_id, None)
        self.running.discard(job_id)
        if item["state"] == "running":
            self.running.add(job_id)
        elif item["state"] == DEAD.value:
            self.dead[job_id] = None

    def entries(self) -> list[_Entry]:
        """The jobs, dead ones last in burial order."""
        live = [e for i, e in self.jobs.items() if i not in self.dead]
        return live + [self.jobs[i] for i in self.dead]


def _entry(item: dict[str, Any]) -> _Entry:
    result = item["result"]
    state = item["state"]
    return _Entry(
        id=int(item["id"]),
        payload=encode(item["payload"]),
        key=_optional_str(item["key"]),
        priority=int(item["priority"]),
        run_at=float(item["run_at"]),
        created_at=float(item["created_at"]),
        max_attempts=int(item["max_attempts"]),
        task=_optional_str(item["task"]),
        state=PENDING if state == "running" else JobState(state),
        attempts=int(item["attempts"]),
        last_error=_optional_str(item["last_error"]),
        errors=tuple(
            AttemptError(str(t), str(m), str(tb), float(at))
            for t, m, tb, at in item["errors"]
        ),
        result=None if result is None else encode(result, "result"),
        expires_at=None if item["expires_at"] is None else float(item["expires_at"]),
    )


def _optional_str(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"expected a string or null, not {value!r}")
