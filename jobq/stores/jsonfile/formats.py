"""The JSON store's file formats: snapshot documents and journal record bodies.

A job is one JSON object (a "row") in both: the snapshot lists rows, and a
journal ``put`` record carries the row of a job as it now is, so replaying a
record never depends on the records before it. Payload and result are
spliced in as the JSON text the store holds, never decoded and encoded again;
``meta`` is a JSON string holding its JSON object text (a string, so that no
member inside it can be mistaken for the row's own ``"payload"``).

Version 2 added ``started_at``, ``finished_at``, ``timeout`` and ``meta`` to
rows and the attempt's start to ``run`` records; version 1 files, which have
none of them, load with those ``None``. Version 3 added the ``cancelled``
state and a row's ``cancel`` member (``[at, by, attempt, keep_until]``,
only where a job was asked to stop), a row's ``limits`` (only where a job
runs under some), and limits' declarations: the header's ``limits`` list and
``limit`` journal records (``[name, concurrency, rate, per, burst]``); older
files load with none. Version 4 added the ``waiting`` state, a row's
``parents`` (``[[id, end, result], ...]``, the result as JSON text in a
string) and ``after_failure`` (only where a job has parents), and ``all``
records: a parent's end and its children's changes, one per line after the
``["all"]`` line, replayed together (see "Workflows" in
``jobq.stores.base``).

Periodic jobs' schedule states (``SlotState``) live in the snapshot header's
``schedules`` list and in ``slot`` journal records; files without them
(older ones) load with no schedule state. Version 5 added a schedule's pause
to both (``[name, expression, last_slot, last_job_id, paused_at, paused_by,
resumed_at]``; version 4's have the first four) and writes ``NO_SLOT`` as
``null``, so that the file stays standard JSON.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from jobq.stores._entry import (
    AFTER_FAILURE,
    ATTEMPTS,
    CANCELLATION,
    CANCELLED,
    COMPLETED,
    CREATED_AT,
    DEAD,
    ERRORS,
    EXPIRES_AT,
    FINISHED_AT,
    ID,
    KEY,
    LAST_ERROR,
    LIMITS,
    MAX_ATTEMPTS,
    META,
    PARENTS,
    PAYLOAD,
    PENDING,
    PRIORITY,
    RESULT,
    RUN_AT,
    RUNNING,
    STARTED_AT,
    STATE,
    TASK,
    TIMEOUT,
    WAITING,
    CancelTuple,
    Entry,
    started,
)
from jobq.stores.base import NO_SLOT, ParentOutcome, SlotState
from jobq.types import Limit

FORMAT = "jobq"
VERSION = 5

#: What reading a malformed file raises (RecursionError: absurdly deep nesting).
MALFORMED = (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError)

# ASCII with escapes, so that any text (a lone surrogate included) becomes a
# record: encoding a record must never fail after the change it describes.
_string = json.encoder.encode_basestring_ascii  # the C encoder where there is one
_CHECKSUM = b', "crc32": '
_JOBS_OPEN = ', "jobs": ['
_PUT_OPEN = '["put",'
_PAYLOAD_MEMBER = ',"payload":'
_RESULT_MEMBER = ',"result":'
_STATES = frozenset((PENDING, WAITING, RUNNING, DEAD, COMPLETED, CANCELLED))
_OPERATIONS = frozenset(("put", "del", "run", "slot", "limit"))
_PARENT_ENDS = frozenset((None, "completed", "dead", "cancelled"))
#: A record of several changes made in one write (a parent's end and its
#: children's): this line, then one change per line.
_GROUP_OPEN = '["all"]\n'

_ROW_CHECK = re.compile(rb'\{"crc32":([0-9]{1,10}),')
_ROW_START = re.compile(re.escape(b'{"crc32":'))
_TRAILER = re.compile(rb'.\], "crc32": [0-9]+\}$', re.DOTALL)  # after a hit newline

#: Jobs serialized per chunk of a snapshot.
CHUNK_ROWS = 1000


class NewerFormat(Exception):
    """The file was written by a newer jobq; refusing it beats misreading it."""


def _text(value: str | None) -> str:
    return "null" if value is None else _string(value)


def _number(value: float | None) -> str:
    return "null" if value is None else repr(value)


def row(entry: Entry, running: bool) -> str:
    """One job as a JSON object (hand-built: this runs once per change)."""
    errors = "[]"
    if entry[ERRORS]:
        errors = json.dumps(entry[ERRORS])
    state = RUNNING if running else entry[STATE]
    return (
        f'{{"id":{entry[ID]},"state":"{state}","key":{_text(entry[KEY])},'
        f'"priority":{entry[PRIORITY]},"run_at":{entry[RUN_AT]!r},'
        f'"created_at":{entry[CREATED_AT]!r},"max_attempts":{entry[MAX_ATTEMPTS]},'
        f'"task":{_text(entry[TASK])},"attempts":{entry[ATTEMPTS]},'
        f'"last_error":{_text(entry[LAST_ERROR])},"errors":{errors},'
        f'"expires_at":{_number(entry[EXPIRES_AT])},'
        f'"started_at":{_number(entry[STARTED_AT])},'
        f'"finished_at":{_number(entry[FINISHED_AT])},'
        f'"timeout":{_number(entry[TIMEOUT])},"meta":{_text(entry[META])},'
        f"{_cancel_member(entry[CANCELLATION])}{_limits_member(entry[LIMITS])}"
        f"{_parents_member(entry[PARENTS], entry[AFTER_FAILURE])}"
        f'"payload":{entry[PAYLOAD]},'
        f'"result":{"null" if entry[RESULT] is None else entry[RESULT]}}}'
    )


def _cancel_member(cancel: CancelTuple | None) -> str:
    """A row's ``cancel`` member with its comma; none for the usual job."""
    if cancel is None:
        return ""
    at, by, attempt, keep_until = cancel
    return f'"cancel":[{at!r},{_string(by)},{_number(attempt)},{keep_until!r}],'


def _limits_member(limits: tuple[str, ...]) -> str:
    """A row's ``limits`` member with its comma; none for the usual job."""
    if not limits:
        return ""
    return f'"limits":[{",".join(_string(name) for name in limits)}],'


def _parents_member(
    parents: tuple[ParentOutcome, ...], after_failure: str | None
) -> str:
    """A row's ``parents`` and ``after_failure`` members with their commas;
    none for the usual job. Each parent is ``[id, end, result]``, its result
    JSON text held as a string: a row's members before its payload never
    hold raw JSON of a job's (see ``_entry``)."""
    if not parents:
        return ""
    items = ",".join(
        f"[{pid},{_text(end)},{_text(result)}]" for pid, end, result in parents
    )
    return f'"parents":[{items}],"after_failure":{_text(after_failure)},'


def _parents(value: object) -> tuple[ParentOutcome, ...]:
    """A row's ``parents`` read back (``()``: none)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise TypeError(f"expected a list of parents, not {value!r}")
    parents: list[ParentOutcome] = []
    for item in value:
        if not isinstance(item, list) or len(item) != 3 or type(item[0]) is not int:
            raise TypeError(f"expected a parent, not {item!r}")
        pid, end, result = item
        if end not in _PARENT_ENDS:
            raise ValueError(f"unknown parent end {end!r}")
        parents.append((pid, end, _optional_str(result)))
    return tuple(parents)


def _limit_names(value: object) -> tuple[str, ...]:
    """A row's ``limits`` read back (``()``: none)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"expected a list of limit names, not {value!r}")
    return tuple(value)


def _cancellation(value: object) -> CancelTuple | None:
    """A row's ``cancel`` member read back (``None``: none)."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 4:
        raise TypeError(f"expected a cancellation, not {value!r}")
    at, by, attempt, keep_until = value
    if not isinstance(by, str) or not (attempt is None or type(attempt) is int):
        raise TypeError(f"expected a cancellation, not {value!r}")
    return (_float(at), by, attempt, _float(keep_until))


def checked_row(entry: Entry, running: bool) -> str:
    """A snapshot's row: ``row`` with the CRC-32 of the rest of it as its
    first member, ``{"crc32":N,"id":...}``.

    The snapshot's own checksum tells that a file is damaged, not where;
    with this, the rows the damage missed are loaded again (see
    ``State.salvage_snapshot``), and a row the damage hit is never loaded,
    even where it still parses (a flipped byte inside a payload string).
    Readers ignore members they do not know, so it came without a new
    version, and files whose rows have no CRC still load.
    """
    rest = row(entry, running)[1:]
    return f'{{"crc32":{zlib.crc32(rest.encode())},{rest}'


def put_record(entry: Entry, running: bool = False) -> bytes:
    return f"{_PUT_OPEN}{row(entry, running)}]".encode()


def group_record(bodies: list[bytes]) -> bytes:
    """One record of several changes, replayed all or none (no change's
    text holds a raw newline: JSON escapes it in strings)."""
    return _GROUP_OPEN.encode() + b"\n".join(bodies)


def delete_record(job_id: int) -> bytes:
    return b'["del",%d]' % job_id


def run_record(job_id: int, started_at: float) -> bytes:
    return b'["run",%d,%s]' % (job_id, repr(started_at).encode())


def slot_record(state: SlotState) -> bytes:
    return json.dumps(["slot", *_slot_fields(state)], ensure_ascii=True).encode()


def _slot_fields(state: SlotState) -> list[object]:
    """A schedule's state as the file keeps it: ``NO_SLOT`` as ``null``."""
    last_slot = None if state.last_slot == NO_SLOT else state.last_slot
    return [state.name, state.expression, last_slot, *state[3:]]


def limit_record(limit: Limit) -> bytes:
    return json.dumps(["limit", *_limit_fields(limit)], ensure_ascii=True).encode()


def _limit_fields(limit: Limit) -> list[object]:
    return [limit.name, limit.concurrency, limit.rate, limit.per, limit.burst]


def serialize(
    live: Iterable[Entry],
    dead: Sequence[Entry],
    running: Mapping[int, float | None],
    next_id: int,
    seq: int,
    schedules: Sequence[SlotState] = (),
    limits: Sequence[Limit] = (),
) -> Iterator[bytes]:
    """A snapshot that, with the journal's records after ``seq`` replayed on
    top, is the whole queue: the ``live`` jobs, then the ``dead`` ones in
    burial order; the ``running`` ones (id -> their attempt's ``started_at``,
    which their entries do not hold) as running since then. A job may appear
    twice (changed while the snapshot was taken); the later row and then the
    journal decide.

    It comes in chunks of ``CHUNK_ROWS`` jobs, so no single step holds the GIL
    for long, and ends with the CRC-32 of every byte before its ``"crc32"``
    member, so a damaged snapshot is refused even where the damage leaves
    valid JSON; each row carries its own CRC too (see ``checked_row``).
    """
    head = json.dumps(
        {"format": FORMAT, "version": VERSION, "seq": seq, "next_id": next_id,
         "schedules": [_slot_fields(state) for state in schedules],
         "limits": [_limit_fields(limit) for limit in limits]}
    )  # fmt: skip
    chunk = f'{head[:-1]}, "jobs": [\n'.encode()
    crc = zlib.crc32(chunk)
    yield chunk
    ordered = itertools.chain(live, dead)
    separator = ""
    while part := list(itertools.islice(ordered, CHUNK_ROWS)):
        chunk = (
            separator + ",\n".join(_snapshot_row(e, running) for e in part)
        ).encode()
        separator = ",\n"
        crc = zlib.crc32(chunk, crc)
        yield chunk
    crc = zlib.crc32(b"\n]", crc)
    yield b"\n]%s%d}\n" % (_CHECKSUM, crc)


def _snapshot_row(entry: Entry, running: Mapping[int, float | None]) -> str:
    """A snapshot's row; a running job's with its claim's start, which the
    memory store keeps beside its entry, not in it."""
    job_id = entry[ID]
    if job_id in running:
        return checked_row(started(entry, running[job_id]), True)
    return checked_row(entry, False)


@dataclass
class Salvage:
    """What ``State.salvage_snapshot`` made of a damaged snapshot."""

    rows: int = 0  # rows loaded
    lost: int = 0  # lines after the header that held no row that could be loaded
    header: bool = False  # whether the header line could be read


class State:
    """Rows being loaded: from a snapshot, then journal records replayed on top."""

    def __init__(self) -> None:
        self.jobs: dict[int, Entry] = {}
        self.running: set[int] = set()
        self.dead: OrderedDict[int, None] = OrderedDict()  # burial order
        self.next_id = 1
        self.seq = 0  # the newest change this state holds
        self.schedules: dict[str, SlotState] = {}
        self.limits: dict[str, Limit] = {}

    def load_snapshot(self, data: bytes) -> None:
        """Read a snapshot line by line: one job per line, so a million jobs
        never sit in memory as a million parsed dicts at once."""
        text = data.decode()
        first, _, rest = text.partition("\n")
        if not first.endswith(_JOBS_OPEN):
            # Not our layout: a newer jobq's file must still be told apart
            # from damage, so look for its version in the whole document.
            _check_version(json.loads(text))
            raise ValueError("no job list after the header")
        head = json.loads(first.removesuffix(_JOBS_OPEN) + "}")
        _check_version(head)
        end = data.rfind(_CHECKSUM)
        closing = data[end + len(_CHECKSUM) :].rstrip(b"\n")
        if end < 0 or not closing.endswith(b"}") or data[end - 2 : end] != b"\n]":
            raise ValueError("the snapshot ends without its checksum")
        if zlib.crc32(data[:end]) != int(closing[:-1]):
            raise ValueError("the snapshot's checksum does not match its content")
        body = rest[: rest.rindex("\n]")]
        for text_row in body.split(",\n") if body else []:
            self._put(text_row)
        self.next_id = max(self.next_id, int(head["next_id"]))
        self.seq = int(head["seq"])
        self._schedules(head)

    def salvage_snapshot(self, data: bytes) -> Salvage:
        """Load the rows of a snapshot that failed ``load_snapshot``.

        Each row is one line. Where rows carry their CRC (``checked_row``),
        a row is loaded only if its CRC matches, so every row the damage
        missed is loaded and none it hit; a line that holds more than one
        row (the newline between them was hit) is searched for the start of
        each. A file in which no row carries a CRC (an earlier jobq's) loads
        the rows that still parse, as read. ``seq`` stays 0, so the whole
        journal on disk is replayed on top: the header's number may be
        damaged, and replaying records the snapshot already holds is
        harmless (each says what a job now is), while it corrects rows that
        are older than the records after them. The header's ``next_id``
        counts if it parses; the caller also keeps every id it sees.
        Raises ``NewerFormat`` if the header says a newer jobq wrote it.
        """
        lines = data.split(b"\n")
        checked = _ROW_START.search(data) is not None
        salvage = Salvage()
        for number, line in enumerate(lines):
            if number == 0:
                salvage.header = self._salvage_head(line)
                if salvage.header:
                    continue
            elif not line.strip() or line.startswith(b"]"):  # the list's end
                continue
            loaded = 0
            for text in _intact_rows(line) if checked else _readable_rows(line):
                try:
                    self._put(text)
                except MALFORMED:  # intact, yet no row this jobq reads
                    continue
                loaded += 1
            salvage.rows += loaded
            salvage.lost += number > 0 and not loaded
        return salvage

    def _salvage_head(self, line: bytes) -> bool:
        """Take ``next_id`` from a damaged snapshot's header line, if it reads."""
        text = line.removesuffix(_JOBS_OPEN.encode())
        if text == line:
            return False
        try:
            head = json.loads(text + b"}")
            _check_version(head)
            next_id = head["next_id"]
        except MALFORMED:
            return False
        if type(next_id) is int:
            self.next_id = max(self.next_id, next_id)
        with contextlib.suppress(*MALFORMED):
            self._schedules(head)
        return True

    def _schedules(self, head: dict[str, object]) -> None:
        """The schedule states a snapshot's header holds (none before them)."""
        listed = head.get("schedules", [])
        if not isinstance(listed, list):
            raise TypeError(f"expected a list of schedules, not {listed!r}")
        for item in listed:
            self._slot(item)
        declared = head.get("limits", [])
        if not isinstance(declared, list):
            raise TypeError(f"expected a list of limits, not {declared!r}")
        for item in declared:
            self._limit(item)

    def _limit(self, item: object) -> None:
        """A limit's declaration: ``[name, concurrency, rate, per, burst]``."""
        if not isinstance(item, list) or len(item) != 5:
            raise ValueError(f"malformed limit: {item!r}")
        name, concurrency, rate, per, burst = item
        if not isinstance(name, str) or not all(
            value is None or type(value) is int for value in (concurrency, rate)
        ):
            raise TypeError(f"malformed limit: {item!r}")
        if type(burst) is not int or (rate is None) != (per is None):
            raise TypeError(f"malformed limit: {item!r}")
        per_seconds = None if per is None else _float(per)
        self.limits[name] = Limit(name, concurrency, rate, per_seconds, burst)

    def _slot(self, item: object) -> None:
        """A schedule's state: ``[name, expression, last_slot, last_job_id]``,
        then (version 5) ``paused_at, paused_by, resumed_at``."""
        if not isinstance(item, list) or len(item) not in (4, 7):
            raise ValueError(f"malformed schedule state: {item!r}")
        name, expression, slot, job_id, *pause = item
        paused_at, paused_by, resumed_at = pause or (None, None, None)
        if not isinstance(name, str) or not isinstance(expression, str):
            raise TypeError(f"malformed schedule state: {item!r}")
        if job_id is not None and type(job_id) is not int:
            raise TypeError(f"malformed schedule state: {item!r}")
        self.schedules[name] = SlotState(
            name,
            expression,
            NO_SLOT if slot is None else _float(slot),
            job_id,
            _optional_float(paused_at),
            _optional_str(paused_by),
            _optional_float(resumed_at),
        )

    def apply(self, seq: int, body: bytes) -> None:
        """Replay one journal record; records the snapshot holds are skipped.

        A record of a kind this jobq does not know, in a record that is
        otherwise well formed, raises ``NewerFormat``: a newer jobq wrote it,
        and skipping it would lose what it says.
        """
        if seq <= self.seq:
            return
        text = body.decode()
        if text.startswith(_GROUP_OPEN):
            for change in text[len(_GROUP_OPEN) :].split("\n"):
                self._apply(change)
        else:
            self._apply(text)
        self.seq = seq

    def _apply(self, text: str) -> None:
        """Replay one change (see ``apply``)."""
        if text.startswith(_PUT_OPEN):
            if not text.endswith("]"):
                raise ValueError("a put record without its closing bracket")
            self._put(text[len(_PUT_OPEN) : -1])
        else:
            record = json.loads(text)
            if not isinstance(record, list) or not record:
                raise ValueError(f"not a journal record: {text[:80]!r}")
            operation = record[0]
            if isinstance(operation, str) and operation not in _OPERATIONS:
                raise NewerFormat(
                    f"a journal record of kind {operation!r} was written by a "
                    "newer jobq: upgrade jobq"
                )
            if operation in ("slot", "limit"):
                (self._slot if operation == "slot" else self._limit)(record[1:])
                return
            if len(record) < 2 or type(record[1]) is not int:  # a bool is no id
                raise ValueError(f"malformed journal record: {text[:80]!r}")
            job_id = record[1]
            if operation == "del" and len(record) == 2:
                self.jobs.pop(job_id, None)
                self.running.discard(job_id)
                self.dead.pop(job_id, None)
            elif operation == "run" and len(record) <= 3:
                self._run(job_id, record[2:])
            else:
                raise ValueError(f"malformed journal record: {text[:80]!r}")

    def _put(self, text_row: str) -> None:
        entry, running = _entry(text_row)  # a malformed row fails where it is read
        job_id = entry[ID]
        self.jobs[job_id] = entry
        self.next_id = max(self.next_id, job_id + 1)
        self.dead.pop(job_id, None)
        self.running.discard(job_id)
        if running:
            self.running.add(job_id)
        elif entry[STATE] == DEAD:
            self.dead[job_id] = None

    def _run(self, job_id: int, start: list[object]) -> None:
        """A ``run`` record: the job runs, since ``start`` (version 2:
        ``[started_at]``; version 1 did not say)."""
        self.running.add(job_id)
        entry = self.jobs.get(job_id)
        if start and entry is not None:
            self.jobs[job_id] = started(entry, _float(start[0]))

    def entries(self) -> list[Entry]:
        """The jobs, dead ones last in burial order."""
        live = [e for i, e in self.jobs.items() if i not in self.dead]
        return live + [self.jobs[i] for i in self.dead]


def _check_version(document: object) -> None:
    """Refuse what is not a jobq snapshot, or one newer than this code reads."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError("not a jobq file")
    version = document.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"bad version {version!r}")
    if version > VERSION:
        raise NewerFormat(
            f"this file was written by a newer jobq (format version {version}; "
            f"this jobq reads up to {VERSION}): upgrade jobq"
        )


def _intact_rows(line: bytes) -> list[str]:
    """The rows in one line of a damaged snapshot whose CRC matches.

    Normally one. Where the newline between two rows was hit, both are on
    this line (``},X{"crc32":``), and where the one after the last row was,
    so is the list's end (``}X], "crc32": N}``). So a row may end at the
    line's end (less its ``,`` or one damaged byte), two bytes before a later
    row's start, or just before the damaged byte ahead of the list's end. A
    ``{"crc32":`` inside a row (in a payload) is a start only if no row
    found covers it. This tries a few ends per start: no search.
    """
    starts = [match.start() for match in _ROW_START.finditer(line)]
    tail = [len(line), len(line) - 1]
    trailer = _TRAILER.search(line)
    if trailer is not None:
        tail.append(trailer.start())
    rows: list[str] = []
    covered = 0
    for index, start in enumerate(starts):
        if start < covered:
            continue
        ends = [later - 2 for later in starts[index + 1 :]] + tail
        found = _checked_row(line, start, ends)
        if found is not None:
            text, covered = found
            rows.append(text)
    return rows


def _checked_row(line: bytes, start: int, ends: list[int]) -> tuple[str, int] | None:
    """The row at ``start`` if it ends with ``}`` at one of ``ends`` and its
    CRC matches there: its text, and where it ends."""
    check = _ROW_CHECK.match(line, start)
    if check is None:
        return None
    crc = int(check.group(1))
    for end in ends:
        rest = line[check.end() : end]
        if rest.endswith(b"}") and zlib.crc32(rest) == crc:
            try:
                return "{" + rest.decode(), end
            except UnicodeDecodeError:
                return None
    return None


def _readable_rows(line: bytes) -> list[str]:
    """A row without a CRC from a damaged snapshot, if it reads as a job whose
    payload and result are JSON (they are otherwise taken as they are)."""
    text = line.rstrip(b",")
    try:
        decoded = text.decode()
        entry, _ = _entry(decoded)
        json.loads(entry[PAYLOAD])
        if entry[RESULT] is not None:
            json.loads(entry[RESULT])
    except MALFORMED:
        return []
    return [decoded]


def _entry(text_row: str) -> tuple[Entry, bool]:
    """The entry a row describes, and whether it was running.

    Payload and result are the last two members and are taken as the JSON
    text they are: a structural ``,"payload":`` can only be the first one in
    the row (quotes inside strings are escaped), and ``,"result":`` the last.
    """
    payload_at = text_row.index(_PAYLOAD_MEMBER)
    result_at = text_row.rindex(_RESULT_MEMBER)
    item = json.loads(text_row[:payload_at] + "}")
    result = text_row[result_at + len(_RESULT_MEMBER) : -1]
    state = item["state"]
    if state not in _STATES:
        raise ValueError(f"unknown job state {state!r}")
    entry: Entry = (
        int(item["id"]),
        text_row[payload_at + len(_PAYLOAD_MEMBER) : result_at],
        _optional_str(item["key"]),
        int(item["priority"]),
        float(item["run_at"]),
        float(item["created_at"]),
        int(item["max_attempts"]),
        _optional_str(item["task"]),
        PENDING if state == RUNNING else state,
        int(item["attempts"]),
        _optional_str(item["last_error"]),
        tuple((str(t), str(m), str(tb), float(at)) for t, m, tb, at in item["errors"]),
        None if result == "null" else result,
        _optional_float(item["expires_at"]),
        _optional_float(item.get("started_at")),  # version 1 rows have none
        _optional_float(item.get("finished_at")),
        _optional_float(item.get("timeout")),
        _optional_str(item.get("meta")),
        _cancellation(item.get("cancel")),  # version 3
        _limit_names(item.get("limits")),  # version 3
        _parents(item.get("parents")),  # version 4
        _optional_str(item.get("after_failure")),
    )
    return entry, state == RUNNING


def _float(value: object) -> float:
    """A time or duration from a file: a number (``float`` also takes text)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, not {value!r}")
    return float(value)


def _optional_float(value: object) -> float | None:
    return None if value is None else _float(value)


def _optional_str(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"expected a string or null, not {value!r}")
