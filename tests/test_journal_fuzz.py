"""The JSON store's readers under every single-byte change and truncation.

A small real snapshot (three jobs) and journal segment (eleven records: puts,
runs, deletes, a retry, a burial, a revival) are damaged in every way one
byte can be (XOR 0xFF, and XOR 0x01: one flipped bit) and cut at every
length. Each case must read without an exception or a hang, and load every
row and record the damage did not touch, and nothing else; an id seen in
the damaged part is never given again. A change that turns the format
version into a newer one is refused whole, as any newer jobq's file is.

The cases are read by ``read_files``, what opening a store reads, from
memory, so the thousands of them take a few seconds; a sample of them goes
through a real store too, whose open moves the damaged file aside and
writes a snapshot that the next open loads as it is.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import jobq
from jobq.stores import JsonFileStore
from jobq.stores.jsonfile import formats as fmt
from jobq.stores.jsonfile.fileio import FileIO
from jobq.stores.jsonfile.journal import FORMAT_VERSION, MAGIC, scan
from jobq.stores.jsonfile.reading import Files, read_files

FAR = 3600  # a delay that keeps a job pending for the whole test
CHANGES = (0xFF, 0x01)  # XORed into one byte: every bit, and the lowest one
#: Headers of older segments, which this jobq reads: a flip of the version's
#: lowest bit can make one.
OLDER_MAGICS = tuple(b"JOBQ-JOURNAL %d\n" % v for v in range(FORMAT_VERSION - 1, 0, -1))
#: A version digit above this jobq's (the snapshot's and the journal's are one).
NEWER = b"[%d-9]" % (FORMAT_VERSION + 1)
SAMPLE = 83  # every this many changes also goes through a real store
LISTED = (
    jobq.JobState.PENDING,
    jobq.JobState.RUNNING,
    jobq.JobState.DEAD,
    jobq.JobState.CANCELLED,
)
SNAPSHOT, SEGMENT = "/store/jobs.json", "/store/jobs.json.journal-2"


class MemoryIO(FileIO):
    """Reads from a dict of file contents: no disk, for speed."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files

    def read(self, path: str) -> bytes:
        try:
            return self.files[path]
        except KeyError:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT)) from None


class Good:
    """The undamaged files, and where each row and record lies in them."""

    def __init__(self, snapshot: bytes, segment: bytes) -> None:
        self.snapshot = snapshot
        self.segment = segment
        self.records = scan(segment).records
        assert len(self.records) == 11
        # (start, end) of each record, and of each row with its job's id
        self.record_spans: list[tuple[int, int]] = []
        position = len(MAGIC)
        for _, body in self.records:
            self.record_spans.append((position, position + 16 + len(body)))
            position += 16 + len(body)
        assert position == len(segment)
        self.row_spans = [
            (m.start(), m.end(), int(m.group(1)))
            for m in re.finditer(rb'(?m)^\{"crc32":\d+,"id":(\d+),.*\}', snapshot)
        ]
        assert [job_id for _, _, job_id in self.row_spans] == [1, 2, 3]
        self._expected: dict[tuple[frozenset[int], frozenset[int]], fmt.State] = {}

    def expected(
        self, lost_rows: set[int] = frozenset(), lost_records: set[int] = frozenset()
    ) -> fmt.State:
        """The state with the rows of jobs ``lost_rows`` and the records at
        indexes ``lost_records`` missing, built from the intact ones."""
        key = (frozenset(lost_rows), frozenset(lost_records))
        if key not in self._expected:
            self._expected[key] = self._build(lost_rows, lost_records)
        return self._expected[key]

    def _build(self, lost_rows: set[int], lost_records: set[int]) -> fmt.State:
        state = fmt.State()
        state.load_snapshot(self.snapshot)
        for job_id in lost_rows:
            del state.jobs[job_id]
            state.running.discard(job_id)
            state.dead.pop(job_id, None)
        for index, (seq, body) in enumerate(self.records):
            if index not in lost_records:
                state.apply(seq, body)
        return state


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Good:
    path = tmp_path_factory.mktemp("good") / "jobs.json"

    def handler(job: jobq.Job[Any]) -> None:
        if job.payload == "fail":
            raise ValueError("not yet")
        if job.payload == "fatal":
            raise jobq.Fatal("never")

    queue: jobq.JobQueue[Any] = jobq.JobQueue(
        handler, store=JsonFileStore(path, save_interval=FAR), base_delay=FAR
    )
    queue.enqueue("ok")
    queue.enqueue("fail")
    third = queue.enqueue("later", delay=FAR)
    queue.save()  # the snapshot: jobs 1-3, and a new segment after it
    queue.enqueue("job 4", delay=FAR)  # put
    assert queue.run_pending(limit=1) == 1  # job 1: run, del
    assert queue.run_pending(limit=1) == 1  # job 2 fails: run, put
    fatal = queue.enqueue("fatal")  # put
    assert queue.run_pending(limit=1) == 1  # job 5 dies: run, put
    assert queue.retry_dead(fatal)  # put
    assert queue.cancel(third)  # del
    queue.enqueue({"n": 6, "text": "é"}, key="six", priority=3)  # put
    [segment] = path.parent.glob("jobs.json.journal-*")
    files = Good(path.read_bytes(), segment.read_bytes())
    queue.close()
    return files


def _read(snapshot: bytes, segment: bytes) -> Files | str:
    """What opening a store on these files reads, or the StoreError's message."""
    io = MemoryIO({SNAPSHOT: snapshot, SEGMENT: segment})
    try:
        return read_files(io, SNAPSHOT, [SEGMENT])
    except jobq.StoreError as exc:
        return str(exc)


def _refused_as_newer(found: Files | str, damaged: bytes) -> bool:
    """Whether the change made the version number a newer one (the file is
    then refused, ``found`` being the refusal)."""
    newer = re.match(rb'JOBQ-JOURNAL %s\n|\{"format": "jobq", "version": %s,'
                     % (NEWER, NEWER), damaged)  # fmt: skip
    if newer is None:
        return False
    assert isinstance(found, str), found
    assert "newer jobq" in found
    return True


def _same(found: fmt.State, expected: fmt.State) -> bool:
    return (
        found.jobs == expected.jobs
        and found.running == expected.running
        and list(found.dead) == list(expected.dead)
    )


def _damaged(data: bytes) -> Iterator[tuple[str, int, bytes]]:
    """Every single-byte change and every truncation of ``data``:
    (what was done, at which offset, the result)."""
    for position in range(len(data)):
        for change in CHANGES:
            damaged = bytearray(data)
            damaged[position] ^= change
            yield f"byte {position} ^ {change:#04x}", position, bytes(damaged)
    for length in range(len(data)):
        yield f"cut at {length}", length, data[:length]


def _ids_in(data: bytes, start: int, end: int) -> set[int]:
    return {int(m) for m in re.findall(rb'"id":(\d+)', data[start:end])}


# --- the journal -----------------------------------------------------------------


def test_every_change_and_cut_of_a_journal_segment_loads_every_record_it_missed(
    good: Good,
) -> None:
    cases = 0
    for case, at, segment in _damaged(good.segment):
        cut = case.startswith("cut")
        if cut:
            hit = {i for i, (_, end) in enumerate(good.record_spans) if end > at}
        else:
            hit = {i for i, (s, e) in enumerate(good.record_spans) if s <= at < e}
        found = _read(good.snapshot, segment)
        if _refused_as_newer(found, segment):
            cases += 1
            continue

        assert not isinstance(found, str), f"{case}: {found}"
        assert _same(found.state, good.expected(lost_records=hit)), case
        cases += 1
        if not cut and segment.startswith(OLDER_MAGICS):  # read as an older one
            assert not found.segments, case
            continue
        [damage] = found.segments or [None]
        boundaries = {len(MAGIC), *(end for _, end in good.record_spans)}
        if cut and at in boundaries:  # whole records, then nothing: no damage
            assert damage is None, case
            continue
        assert damage is not None, case
        if cut and at < len(MAGIC):  # a crash while the segment was created
            assert damage.scan.torn_at == 0, case
        elif not hit:  # the header was hit: every record is found after it
            assert damage.scan.bad_header, case
            assert damage.lost == [], case
        elif cut or max(hit) == len(good.records) - 1:  # a torn tail
            assert damage.scan.torn_at == good.record_spans[min(hit)][0], case
            assert not damage.scan.gaps, case
        else:  # a record in the middle: exactly its number is reported lost
            [index] = hit
            seq = good.records[index][0]
            assert damage.lost == [(seq, seq)], case
            start, end = good.record_spans[index]
            # the ids in the damaged record, where the damage left them readable
            readable = _ids_in(segment, start, end) & _ids_in(good.segment, start, end)
            assert found.state.next_id > max(readable, default=0), case
        assert found.state.next_id >= good.expected(lost_records=hit).next_id, case
    assert cases == 3 * len(good.segment)


# --- the snapshot ----------------------------------------------------------------


def test_every_change_and_cut_of_a_snapshot_loads_every_row_it_missed(
    good: Good,
) -> None:
    cases = 0
    for case, at, snapshot in _damaged(good.snapshot):
        cut = case.startswith("cut")
        if cut:
            hit = {i for _, end, i in good.row_spans if end > at}
        else:
            hit = {i for start, end, i in good.row_spans if start <= at < end}
        found = _read(snapshot, good.segment)
        if _refused_as_newer(found, snapshot):
            cases += 1
            continue

        assert not isinstance(found, str), f"{case}: {found}"
        # the intact rows, and every journal record replayed on top of them
        assert _same(found.state, good.expected(lost_rows=hit)), case
        cases += 1
        if found.snapshot is None:  # only the final newline is missing
            assert cut, case
            assert at == len(good.snapshot) - 1, case
        else:
            assert found.snapshot.salvage.rows == 3 - len(hit), case
        seen = _ids_in(snapshot, 0, len(snapshot)) & _ids_in(
            good.snapshot, 0, len(good.snapshot)
        )
        assert found.state.next_id > max(seen, default=0), case
    assert cases == 3 * len(good.snapshot)


# --- a sample through a real store -------------------------------------------------


def _jobs(path: Path) -> set[int]:
    """The ids a store owner opened on ``path`` lists (running ones are
    recovered as failed attempts, so states are not compared)."""
    queue: jobq.JobQueue[Any] = jobq.JobQueue(store=JsonFileStore(path))
    try:
        queue.stats()  # opens it as the owner
        return {r.id for state in LISTED for r in queue.store.list_jobs(state)}
    finally:
        queue.close()


def test_a_sample_of_damaged_files_opens_in_a_real_store_and_stays_whole(
    good: Good, tmp_path: Path
) -> None:
    cases = [
        ("segment", *case)
        for case in list(_damaged(good.segment))[::SAMPLE]
        if not case[0].startswith("cut")
    ]
    cases += [
        ("snapshot", *case)
        for case in list(_damaged(good.snapshot))[::SAMPLE]
        if not case[0].startswith("cut")
    ]
    assert len(cases) > 50
    for number, (which, case, _, data) in enumerate(cases):
        directory = tmp_path / f"case-{number}"
        directory.mkdir()
        snapshot = data if which == "snapshot" else good.snapshot
        segment = data if which == "segment" else good.segment
        (directory / "jobs.json").write_bytes(snapshot)
        (directory / "jobs.json.journal-2").write_bytes(segment)
        read = _read(snapshot, segment)
        if _refused_as_newer(read, data):
            continue
        assert not isinstance(read, str), f"{which} {case}: {read}"
        expected = set(read.state.jobs)

        assert _jobs(directory / "jobs.json") == expected, f"{which} {case}"
        # the damaged file is kept aside; a restart finds the same jobs, whole
        names = sorted(p.name for p in directory.iterdir())
        assert any(".corrupt-" in n or ".damaged-" in n for n in names) or (
            read.segments and read.segments[0].scan.torn_at is not None
        ), f"{which} {case}: {names}"
        assert _jobs(directory / "jobs.json") == expected, f"{which} {case}"
        again = read_files(FileIO(), str(directory / "jobs.json"), [])
        assert again.snapshot is None, f"{which} {case}"
        assert set(again.state.jobs) == expected, f"{which} {case}"
