"""Damaged store files: startup never crashes, and never silently loses or
invents a job.

A crash leaves at worst a torn tail on the journal: its complete records
are loaded, the rest is dropped with a WARNING. Anything else (a damaged
record with intact ones after it, a damaged snapshot) is media damage or
a bug: every record and row it did not hit is still loaded, the file is
moved aside, never deleted, and an ERROR says what was lost. Files a newer
jobq wrote and files that are not regular files are refused with
``StoreError``, touching nothing. Every prefix of a small snapshot and
journal segment is tried, and seeded random byte flips (reliability.md §3
(b)); ``test_journal_fuzz`` tries every single-byte change.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import re
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import jobq
from jobq.stores import JsonFileStore
from jobq.stores.jsonfile.fileio import FileIO
from jobq.stores.jsonfile.formats import VERSION as SNAPSHOT_VERSION
from jobq.stores.jsonfile.journal import FORMAT_VERSION, MAGIC, encode_record, scan

FAR = 3600  # a delay that keeps a job pending for the whole test
#: The states a stored job can be in after a restart (completed are not kept).
LISTED = (jobq.JobState.PENDING, jobq.JobState.RUNNING, jobq.JobState.DEAD)
WAIT = 20  # seconds; a cap so that a broken test fails instead of hanging
FLIPS = 300  # random byte flips per file


class NoSyncIO(FileIO):
    """The real file system without fsync: these tests are about reading
    files, and hundreds of startups must stay fast."""

    def fsync(self, fd: int) -> None:
        pass

    def fsync_dir(self, directory: str) -> None:
        pass


NO_SYNC = NoSyncIO()


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A valid snapshot with jobs 1-3, and a valid journal segment after it
    with three records: job 4 added, job 1 removed (it ran), job 5 added."""
    path = tmp_path_factory.mktemp("good") / "jobs.json"
    queue: jobq.JobQueue[Any] = jobq.JobQueue(
        lambda job: None, store=JsonFileStore(path, save_interval=FAR, io=NO_SYNC)
    )
    for n in range(1, 4):
        queue.enqueue(f"job {n}", delay=0 if n == 1 else FAR)
    queue.save()
    queue.enqueue("job 4", delay=FAR)
    assert queue.run_pending() == 1  # job 1: a "run" and a "del" record
    queue.enqueue("job 5", delay=FAR)
    [segment] = path.parent.glob("jobs.json.journal-*")
    files = {"snapshot": path.read_bytes(), "segment": segment.read_bytes()}
    queue.close()
    records = scan(files["segment"]).records
    assert len(records) == 4
    return {
        **files,
        "segment name": segment.name,
        "snapshot jobs": {1: "job 1", 2: "job 2", 3: "job 3"},
        # the jobs after each record of the segment is applied
        "after record": [
            {1: "job 1", 2: "job 2", 3: "job 3"},
            {1: "job 1", 2: "job 2", 3: "job 3", 4: "job 4"},
            {1: "job 1", 2: "job 2", 3: "job 3", 4: "job 4"},  # 1 running
            {2: "job 2", 3: "job 3", 4: "job 4"},
            {2: "job 2", 3: "job 3", 4: "job 4", 5: "job 5"},
        ],
        # the jobs when only record k of the segment is lost
        "without record": [
            {2: "job 2", 3: "job 3", 5: "job 5"},
            {2: "job 2", 3: "job 3", 4: "job 4", 5: "job 5"},
            {1: "job 1", 2: "job 2", 3: "job 3", 4: "job 4", 5: "job 5"},
            {2: "job 2", 3: "job 3", 4: "job 4"},
        ],
        "seqs": [seq for seq, _ in records],
        # where each record ends in the segment
        "ends": _record_ends(files["segment"]),
        # (start, end, id) of each row of the snapshot
        "rows": _row_spans(files["snapshot"]),
    }


def _row_spans(snapshot: bytes) -> list[tuple[int, int, int]]:
    """Where each row of a snapshot starts and ends (after its ``}``), and
    its job's id."""
    pattern = rb'(?m)^\{"crc32":\d+,"id":(\d+),.*\}'
    spans = [
        (match.start(), match.end(), int(match.group(1)))
        for match in re.finditer(pattern, snapshot)
    ]
    assert [job_id for _, _, job_id in spans] == [1, 2, 3]
    return spans


def _record_ends(segment: bytes) -> list[int]:
    ends, position = [], len(MAGIC)
    for _, body in scan(segment).records:
        position += 16 + len(body)
        ends.append(position)
    assert ends[-1] == len(segment)
    return ends


class Startup:
    """The store files in a fresh directory, and what opening them gave."""

    def __init__(self, directory: Path, files: dict[str, bytes]) -> None:
        self.directory = directory
        directory.mkdir()
        for name, content in files.items():
            (directory / name).write_bytes(content)
        self.before = files
        self.jobs: dict[int, Any] = {}
        self.ran: list[int] = []
        self.refused: str | None = None  # the StoreError that stopped the startup

    def open(self, caplog: pytest.LogCaptureFixture) -> Startup:
        caplog.clear()
        queue: jobq.JobQueue[Any] = jobq.JobQueue(
            lambda job: self.ran.append(job.id),
            store=JsonFileStore(self.directory / "jobs.json", io=NO_SYNC),
        )
        self.refused = None
        try:
            with caplog.at_level(logging.WARNING, logger="jobq"):
                try:
                    queue.stats()
                except jobq.StoreError as exc:  # a clear refusal, not a crash
                    self.refused = str(exc)
                    return self
            self.jobs = {}
            for state in LISTED:
                for record in queue.store.list_jobs(state):
                    self.jobs[record.id] = record.payload
            self.logged = {
                level: [r.getMessage() for r in caplog.records if r.levelno == level]
                for level in (logging.WARNING, logging.ERROR)
            }
            self.next_id = queue.enqueue("new", delay=FAR).id
        finally:
            queue.close()
        return self

    def names(self) -> list[str]:
        return sorted(p.name for p in self.directory.iterdir())

    def aside(self, kind: str) -> dict[str, bytes]:
        """Files moved aside as ``kind`` ("corrupt" or "damaged"), by name."""
        return {
            p.name: p.read_bytes()
            for p in self.directory.iterdir()
            if re.search(rf"\.{kind}-\d{{8}}T\d{{6}}(-\d+)?$", p.name)
        }


@pytest.fixture
def startups(tmp_path: Path) -> Callable[[dict[str, bytes]], Startup]:
    """Makes a ``Startup`` in a fresh directory for the files given."""
    numbers = itertools.count()

    def make(files: dict[str, bytes]) -> Startup:
        return Startup(tmp_path / f"case-{next(numbers)}", files)

    return make


# --- every truncation ------------------------------------------------------------


def test_every_truncation_of_the_snapshot_loads_the_rows_before_the_cut(
    good: dict[str, Any],
    startups: Callable[[dict[str, bytes]], Startup],
    caplog: pytest.LogCaptureFixture,
) -> None:
    snapshot: bytes = good["snapshot"]
    for length in range(len(snapshot) + 1):
        cut = snapshot[:length]
        startup = startups({"jobs.json": cut}).open(caplog)

        assert startup.refused is None, length
        if length >= len(snapshot) - 1:  # at most the final newline is missing
            assert startup.jobs == good["snapshot jobs"], length
            assert startup.aside("corrupt") == {}
        else:
            whole = {i for _, end, i in good["rows"] if end <= length}
            assert startup.jobs == {i: f"job {i}" for i in whole}, length
            assert list(startup.aside("corrupt").values()) == [cut], length
            assert any("corrupt" in m for m in startup.logged[logging.ERROR])
            seen = re.findall(rb'"(?:id|next_id)"\s*:\s*(\d+)\D', cut)
            assert startup.next_id > max(map(int, seen), default=0), length


def test_every_truncation_of_a_journal_segment_loads_its_whole_records(
    good: dict[str, Any],
    startups: Callable[[dict[str, bytes]], Startup],
    caplog: pytest.LogCaptureFixture,
) -> None:
    segment: bytes = good["segment"]
    ends: list[int] = good["ends"]
    for length in range(len(segment) + 1):
        files = {"jobs.json": good["snapshot"], good["segment name"]: segment[:length]}
        startup = startups(files).open(caplog)

        assert startup.refused is None, length
        whole = sum(1 for end in ends if end <= length)
        assert startup.jobs == good["after record"][whole], length
        torn = length not in (len(MAGIC), *ends)
        warned = [m for m in startup.logged[logging.WARNING] if "torn" in m]
        assert bool(warned) == torn, length
        assert startup.logged[logging.ERROR] == [], length
        assert startup.aside("damaged") == startup.aside("corrupt") == {}


def test_torn_tail_is_dropped_logged_and_the_records_before_it_are_kept(
    good: dict[str, Any],
    startups: Callable[[dict[str, bytes]], Startup],
    caplog: pytest.LogCaptureFixture,
) -> None:
    segment: bytes = good["segment"]
    cut = good["ends"][1] + 7  # two whole records, then part of the third
    files = {"jobs.json": good["snapshot"], good["segment name"]: segment[:cut]}

    startup = startups(files).open(caplog)

    assert startup.jobs == good["after record"][2]
    [warning] = [m for m in startup.logged[logging.WARNING] if "torn" in m]
    assert good["segment name"] in warning
    assert startup.logged[logging.ERROR] == []
    # the next startup finds the same jobs, no torn tail any more
    added = startup.next_id
    again = startup.open(caplog)
    assert set(again.jobs) == set(good["after record"][2]) | {added}
    assert again.logged[logging.WARNING] == again.logged[logging.ERROR] == []


# --- damage ----------------------------------------------------------------------


def test_damaged_record_in_the_middle_costs_that_record_only_and_the_file_is_kept(
    good: dict[str, Any],
    startups: Callable[[dict[str, bytes]], Startup],
    caplog: pytest.LogCaptureFixture,
) -> None:
    segment = bytearray(good["segment"])
    segment[len(MAGIC) + 20] ^= 0x01  # inside the first record: job 4 added
    files = {"jobs.json": good["snapshot"], good["segment name"]: bytes(segment)}

    startup = startups(files).open(caplog)

    # the records after it (job 1 ran and was removed, job 5 added) are loaded
    assert startup.jobs == good["without record"][0]
    [(name, content)] = startup.aside("damaged").items()
    assert name.startswith(good["segment name"] + ".damaged-")
    assert content == bytes(segment)  # never deleted, never rewritten
    [error] = [m for m in startup.logged[logging.ERROR] if "loaded" in m]
    assert (
        f"loaded its 3 intact records, lost the changes numbered {good['seqs'][0]};"
        in error
    )
    # job 4 is in the moved file only: its id is never given to another job
    added = startup.next_id
    assert added > 5
    # a restart leaves the moved file alone and loads what the first kept
    again = startup.open(caplog)
    assert again.aside("damaged") == {name: bytes(segment)}
    assert set(again.jobs) == set(good["without record"][0]) | {added}


def test_damaged_snapshot_header_still_loads_its_rows_and_the_journal_after_it(
    good: dict[str, Any],
    startups: Callable[[dict[str, bytes]], Startup],
    caplog: pytest.LogCaptureFixture,
) -> None:
    snapshot = good["snapshot"].replace(b'"jobs": [', b'"jobs": {')
    files = {"jobs.json": snapshot, good["segment name"]: good["segment"]}

    startup = startups(files).open(caplog)

    # every row is intact, and the journal is replayed on top of them
    assert startup.jobs == good["after record"][4]
    [(name, content)] = startup.aside("corrupt").items()
    assert name.startswith("jobs.json.corrupt-")
    assert content == snapshot
    [error] = [m for m in startup.logged[logging.ERROR] if "loaded" in m]
    assert "loaded its 3 intact job rows, lines lost: 0, and its header" in error
    assert startup.next_id > 5


def test_damaged_snapshot_row_costs_that_row_only(
    good: dict[str, Any],
    startups: Callable[[dict[str, bytes]], Startup],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A changed letter in job 2's payload still parses, as "job 2" did; only
    # the row's own CRC tells it apart.
    start, end, _ = good["rows"][1]
    row = good["snapshot"][start:end]
    assert row.count(b'"job 2"') == 1
    snapshot = good["snapshot"].replace(b'"job 2"', b'"jog 2"')

    startup = startups({"jobs.json": snapshot}).open(caplog)

    assert startup.jobs == {1: "job 1", 3: "job 3"}
    assert list(startup.aside("corrupt").values()) == [snapshot]
    [error] = [m for m in startup.logged[logging.ERROR] if "loaded" in m]
    assert "loaded its 2 intact job rows, lines lost: 1;" in error
    assert startup.next_id > 3  # job 2's id was seen: never given again


def test_damage_in_the_middle_of_a_long_segment_loads_every_record_after_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The case: 50 jobs in jobs.json.journal-2, one byte changed in
    # the 36th record. The 14 records after it are intact: all are loaded.
    source = tmp_path / "source"
    source.mkdir()
    queue: jobq.JobQueue[Any] = jobq.JobQueue(
        store=JsonFileStore(source / "jobs.json", save_interval=FAR, io=NO_SYNC)
    )
    queue.save()  # a snapshot, and segment 2 after it
    for n in range(1, 51):
        queue.enqueue(f"job {n}", delay=FAR)
    files = {p.name: p.read_bytes() for p in source.glob("jobs.json*")}
    queue.close()
    segment = bytearray(files["jobs.json.journal-2"])
    [seq_36, body_36] = scan(bytes(segment)).records[35]
    segment[segment.index(body_36) + len(body_36) // 2] ^= 0xFF
    files["jobs.json.journal-2"] = bytes(segment)
    del files["jobs.json.lock"]

    startup = Startup(tmp_path / "damaged", files).open(caplog)

    assert startup.jobs == {n: f"job {n}" for n in range(1, 51) if n != 36}
    [error] = [m for m in startup.logged[logging.ERROR] if "loaded" in m]
    assert f"loaded its 49 intact records, lost the changes numbered {seq_36};" in error
    assert list(startup.aside("damaged").values()) == [bytes(segment)]
    assert startup.next_id == 51


def test_an_intact_record_that_cannot_be_applied_costs_that_record_only(
    good: dict[str, Any],
    startups: Callable[[dict[str, bytes]], Startup],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A record whose CRC is right but whose body is no valid change (a bug,
    # not damage) is skipped alone: the records after it still load.
    records = scan(good["segment"]).records
    segment = MAGIC + encode_record(records[0][0], b'["del","one"]')
    segment += b"".join(encode_record(seq, body) for seq, body in records[1:])
    files = {"jobs.json": good["snapshot"], good["segment name"]: segment}

    startup = startups(files).open(caplog)

    assert startup.jobs == good["without record"][0]
    [error] = [m for m in startup.logged[logging.ERROR] if "loaded" in m]
    assert (
        f"loaded its 3 intact records, lost the changes numbered {records[0][0]};"
        in error
    )
    assert list(startup.aside("damaged").values()) == [segment]


# --- files written by a newer jobq ------------------------------------------------


@pytest.mark.parametrize("read_only", [False, True], ids=["owner", "reader"])
def test_a_journal_segment_with_a_newer_header_is_refused_and_nothing_touched(
    good: dict[str, Any], tmp_path: Path, read_only: bool
) -> None:
    newer = FORMAT_VERSION + 1
    segment = b"JOBQ-JOURNAL %d\n" % newer + good["segment"][len(MAGIC) :]
    _refused_untouched(good, tmp_path, segment, read_only, f"journal version {newer}")


@pytest.mark.parametrize("read_only", [False, True], ids=["owner", "reader"])
def test_a_journal_record_of_an_unknown_kind_is_refused_and_nothing_touched(
    good: dict[str, Any], tmp_path: Path, read_only: bool
) -> None:
    # The segment's other records are intact and the snapshot is damaged:
    # still, nothing is moved aside, since nothing may be decided about files
    # this jobq cannot read whole.
    seq = scan(good["segment"]).records[-1][0] + 1
    segment = good["segment"] + encode_record(seq, b'["frob", 1]')
    _refused_untouched(good, tmp_path, segment, read_only, "kind 'frob'")


def _refused_untouched(
    good: dict[str, Any], tmp_path: Path, segment: bytes, read_only: bool, why: str
) -> None:
    snapshot = bytearray(good["snapshot"])
    snapshot[len(snapshot) // 2] ^= 0x01
    files = {"jobs.json": bytes(snapshot), good["segment name"]: segment}
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    store = JsonFileStore(tmp_path / "jobs.json", read_only=read_only, io=NO_SYNC)
    queue: jobq.JobQueue[Any] = jobq.JobQueue(store=store)

    with pytest.raises(jobq.StoreError, match="newer jobq") as refused:
        queue.stats()

    queue.close()
    assert why in str(refused.value)
    assert good["segment name"] in str(refused.value)
    lock = [] if read_only else ["jobs.json.lock"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*files, *lock])
    assert {name: (tmp_path / name).read_bytes() for name in files} == files
    assert not store._owner.held


def _without_row_crcs(snapshot: bytes) -> bytes:
    """The snapshot as an earlier jobq wrote it: rows without their CRC."""
    legacy = re.sub(rb'(?m)^\{"crc32":\d+,', b"{", snapshot)
    end = legacy.rindex(b', "crc32": ')
    return legacy[:end] + b', "crc32": %d}\n' % zlib.crc32(legacy[:end])


def test_a_snapshot_whose_rows_carry_no_crc_loads_and_its_damage_loads_rows_as_read(
    good: dict[str, Any],
    startups: Callable[[dict[str, bytes]], Startup],
    caplog: pytest.LogCaptureFixture,
) -> None:
    legacy = _without_row_crcs(good["snapshot"])
    assert b'"crc32":' not in legacy.replace(b', "crc32": ', b"")

    whole = startups({"jobs.json": legacy}).open(caplog)

    assert whole.jobs == good["snapshot jobs"]
    assert whole.aside("corrupt") == {}

    # Damaged, each line that still reads as a job is loaded as read: here
    # job 2's payload changed and still parses, so it loads changed, and job
    # 3's row no longer parses.
    damaged = legacy.replace(b'"job 2"', b'"jog 2"').replace(b'"job 3"', b'"job 3')
    startup = startups({"jobs.json": damaged}).open(caplog)

    assert startup.jobs == {1: "job 1", 2: "jog 2"}
    assert list(startup.aside("corrupt").values()) == [damaged]
    assert startup.next_id > 3


def test_random_byte_flips_in_a_journal_segment_cost_only_the_record_they_hit(
    good: dict[str, Any],
    startups: Callable[[dict[str, bytes]], Startup],
    caplog: pytest.LogCaptureFixture,
) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    segment: bytes = good["segment"]
    ends: list[int] = good["ends"]
    for _ in range(FLIPS):
        position = rng.randrange(len(segment))
        damaged = bytearray(segment)
        damaged[position] ^= rng.randrange(1, 256)
        files = {"jobs.json": good["snapshot"], good["segment name"]: bytes(damaged)}
        startup = startups(files).open(caplog)

        case = f"seed {seed}, byte {position}"
        header = re.match(rb"JOBQ-JOURNAL ([0-9])\n", damaged)
        if header and int(header[1]) > FORMAT_VERSION:  # made a newer header
            assert startup.refused is not None, case
            assert "newer jobq" in startup.refused, case
            assert startup.names() == sorted([*files, "jobs.json.lock"]), case
            continue
        assert startup.refused is None, case
        if position < len(MAGIC):  # the header: every record is still found
            assert startup.jobs == good["after record"][len(ends)], case
            if header and 0 < int(header[1]) < FORMAT_VERSION:  # an older one
                assert startup.aside("damaged") == {}, case
            else:
                assert list(startup.aside("damaged").values()) == [bytes(damaged)], case
            continue
        hit = sum(1 for end in ends if end <= position)  # the record it hit
        assert startup.jobs == good["without record"][hit], case
        if hit == len(ends) - 1:  # the last record: read as a torn tail
            assert startup.aside("damaged") == {}, case
            assert any("torn" in m for m in startup.logged[logging.WARNING]), case
        else:
            assert list(startup.aside("damaged").values()) == [bytes(damaged)], case
            assert startup.logged[logging.ERROR], case


def test_random_byte_flips_in_the_snapshot_cost_only_the_row_they_hit(
    good: dict[str, Any],
    startups: Callable[[dict[str, bytes]], Startup],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The snapshot ends with a CRC-32 of its content, so every flip is found
    # and the file moved aside; each row's own CRC tells which rows are still
    # intact, even where a flip leaves valid JSON (inside a payload string
    # or a number): they are loaded, the one hit is not. A flip that turns
    # the format version into a newer one is refused, as any newer file is:
    # a StoreError, the file left in place.
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    snapshot: bytes = good["snapshot"]
    for _ in range(FLIPS):
        position = rng.randrange(len(snapshot))
        damaged = bytearray(snapshot)
        damaged[position] ^= rng.randrange(1, 256)
        startup = startups({"jobs.json": bytes(damaged)}).open(caplog)

        case = f"seed {seed}, byte {position}"
        if startup.refused is not None:  # the flip made the version number newer
            assert "newer jobq" in startup.refused, case
            # The flip hit the version's digit, or the space before it
            # ("version":65): a number beyond this jobq's format.
            version = re.match(rb'\{"format": "jobq", "version": ?(\d+),', damaged)
            assert version is not None, case
            assert int(version[1]) > SNAPSHOT_VERSION, case
            assert startup.names() == ["jobs.json", "jobs.json.lock"], case
            assert (startup.directory / "jobs.json").read_bytes() == damaged, case
            continue
        intact = {i for start, end, i in good["rows"] if not start <= position < end}
        assert startup.jobs == {i: f"job {i}" for i in intact}, case
        assert list(startup.aside("corrupt").values()) == [bytes(damaged)], case
        assert startup.logged[logging.ERROR], case
        assert startup.next_id > max(intact, default=0), case


# --- compaction -----------------------------------------------------------------


class WatchedIO(NoSyncIO):
    """Counts the journal segments created and deleted; ``freeze()`` stops
    the compactor thread at its next call until ``thaw()``."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.compacted = threading.Event()
        self._thawed = threading.Event()
        self._thawed.set()

    def freeze(self) -> None:
        self._thawed.clear()

    def thaw(self) -> None:
        self._thawed.set()

    def _compactor_waits(self) -> None:
        if threading.current_thread().name.startswith("jobq-compact"):
            assert self._thawed.wait(WAIT)

    def listdir(self, directory: str) -> list[str]:
        self._compactor_waits()
        return super().listdir(directory)

    def open_append(self, path: str) -> int:
        self._compactor_waits()
        self.created.append(path)
        return super().open_append(path)

    def open_new_temp(self, directory: str, prefix: str) -> tuple[int, str]:
        self._compactor_waits()
        return super().open_new_temp(directory, prefix)

    def unlink(self, path: str) -> None:
        self._compactor_waits()
        super().unlink(path)
        if ".journal-" in path:
            self.deleted.append(path)
            self.compacted.set()


def _on_disk(path: Path) -> dict[int, tuple[str, Any, int]]:
    """The jobs a restart would find in the files now: read by a second store
    while the owner still runs (it reads without taking the lock)."""
    reader = JsonFileStore(path, io=NO_SYNC)
    queue: jobq.JobQueue[Any] = jobq.JobQueue(store=reader)
    try:
        return {
            r.id: (str(r.state), r.payload, r.attempts)
            for state in LISTED
            for r in queue.store.list_jobs(state)
        }
    finally:
        queue.close()


def _in_memory(queue: jobq.JobQueue[Any]) -> dict[int, tuple[str, Any, int]]:
    return {
        r.id: (str(r.state), r.payload, r.attempts)
        for state in LISTED
        for r in queue.store.list_jobs(state)
    }


def test_compaction_deletes_old_segments_as_the_journal_grows(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    io = WatchedIO()
    store = JsonFileStore(path, save_interval=0, compact_bytes=2048, io=io)
    queue: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: None, store=store)
    for n in range(5000):
        queue.enqueue({"n": n, "text": "x" * 40}, delay=0 if n % 3 else FAR)
        if n % 10 == 0:
            queue.run_pending(limit=5)
        if len(io.deleted) >= 3:
            break
    assert io.compacted.wait(WAIT)
    io.freeze()  # the files stay as they are, mid-compaction or not

    segments = {str(p) for p in tmp_path.glob("jobs.json.journal-*")}
    assert len(io.created) >= 4
    # only the newest segment remains, and the one before it if the
    # compactor was stopped between starting a segment and deleting the old
    assert segments <= set(io.created[-2:])
    assert set(io.created[:-2]) <= set(io.deleted)
    # a restart right now (a second store reads the files) finds the same jobs
    assert _on_disk(path) == _in_memory(queue)
    io.thaw()
    before_close = _in_memory(queue)
    queue.close()
    assert _on_disk(path) == before_close


def test_restart_after_close_finds_each_job_once_and_no_old_segment(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.json"
    ran: list[str] = []

    def make() -> jobq.JobQueue[Any]:
        return jobq.JobQueue(
            lambda job: ran.append(job.payload),
            store=JsonFileStore(path, compact_bytes=256, io=NO_SYNC),
        )

    queue = make()
    for n in range(20):
        queue.enqueue(f"first {n}")
    assert queue.run_pending(limit=10) == 10
    queue.save()
    for n in range(5):
        queue.enqueue(f"second {n}")
    dead = queue.enqueue("dead")
    queue.close()
    assert not list(tmp_path.glob("jobs.json.journal-*"))

    for _ in range(3):  # restarts change nothing
        queue = make()
        assert queue.cancel(dead)  # a removal that must not come back
        dead = queue.enqueue("dead")
        queue.close()
        assert not list(tmp_path.glob("jobs.json.journal-*"))

    queue = make()
    ran.clear()
    queue.run_pending()
    queue.close()
    expected = [f"first {n}" for n in range(10, 20)]
    expected += [f"second {n}" for n in range(5)] + ["dead"]
    assert ran == expected


# --- files that are not regular files ----------------------------------------------


def _stats_or_refusal(store: JsonFileStore, fifo: Path | None = None) -> str:
    """``stats()`` on a queue over ``store``, in a thread: the ``StoreError``
    message it raised. If it blocks, the FIFO is opened for writing, which
    ends the blocked read, and the test fails instead of hanging."""
    queue: jobq.JobQueue[Any] = jobq.JobQueue(store=store)
    outcome: list[BaseException | None] = []

    def call() -> None:
        try:
            queue.stats()
        except BaseException as exc:  # reported to the test
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(WAIT)
    if thread.is_alive():
        if fifo is not None:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(WAIT)
        pytest.fail(f"stats() blocked on {store.path}")
    queue.close()
    [error] = outcome
    assert isinstance(error, jobq.StoreError), error
    return str(error)


HOSTILE = {
    "a FIFO": lambda path: os.mkfifo(path),
    "a symbolic link to a character device (/dev/zero)": (
        lambda path: os.symlink("/dev/zero", path)
    ),
    "a directory": lambda path: os.mkdir(path),
}


@pytest.mark.parametrize("read_only", [False, True], ids=["owner", "reader"])
@pytest.mark.parametrize("at", ["jobs.json", "jobs.json.journal-1"])
@pytest.mark.parametrize("kind", list(HOSTILE))
def test_a_store_file_that_is_not_a_regular_file_is_refused_and_nothing_hangs(
    good: dict[str, Any], tmp_path: Path, kind: str, at: str, read_only: bool
) -> None:
    if at == "jobs.json.journal-1":
        (tmp_path / "jobs.json").write_bytes(good["snapshot"])
    HOSTILE[kind](tmp_path / at)
    before = sorted(p.name for p in tmp_path.iterdir())
    store = JsonFileStore(tmp_path / "jobs.json", read_only=read_only, io=NO_SYNC)

    message = _stats_or_refusal(store, tmp_path / at if "FIFO" in kind else None)

    assert message == f"cannot read {tmp_path / at}: it is {kind}, not a regular file"
    # nothing moved aside, no segment started; the owner's lock was released
    after = sorted(p.name for p in tmp_path.iterdir())
    assert after == sorted({*before, *([] if read_only else ["jobs.json.lock"])})
    assert not store._owner.held
