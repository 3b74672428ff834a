"""The JSON-file store: what survives a restart or a crash, how the file is
written, what happens to a file that cannot be read, who may change it, and
what a failing disk does.

Crashes and other owners are real processes (``sys.executable``); nothing
here waits with ``time.sleep``.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import jobq
import jobq.testing
from jobq.stores import JsonFileStore
from jobq.stores.base import Signal
from jobq.stores.jsonfile import formats as fmt
from jobq.stores.jsonfile.fileio import FileIO, OwnerLock
from jobq.stores.jsonfile.journal import encode_record

ROOT = Path(__file__).resolve().parents[1]
WAIT = 20  # seconds; a cap so that a broken test fails instead of hanging
FAR = 3600  # a delay that keeps a job pending for the whole test

QueueFactory = Callable[..., jobq.JobQueue[Any]]


def _ignore(job: jobq.Job[Any]) -> None:
    """A handler for queues that never run a job."""


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "jobs.json"


@pytest.fixture
def make_queue(path: Path) -> Iterator[QueueFactory]:
    """Queues on ``path`` (or the store given), closed after the test."""
    queues: list[jobq.JobQueue[Any]] = []

    def make(handler: Any = _ignore, **options: Any) -> jobq.JobQueue[Any]:
        options.setdefault("store", path)
        queue: jobq.JobQueue[Any] = jobq.JobQueue(handler, **options)
        queues.append(queue)
        return queue

    yield make
    for queue in queues:
        queue.close(timeout=WAIT)


def _document(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_bytes())
    return document


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _rows(path: Path) -> dict[int, dict[str, Any]]:
    """The jobs in the file, by id."""
    return {row["id"]: row for row in _document(path)["jobs"]}


# --- restart -----------------------------------------------------------------


def test_restart_keeps_pending_jobs_with_payload_priority_and_delay(
    make_queue: QueueFactory,
) -> None:
    before = make_queue()
    job = before.enqueue({"to": "ann"}, delay=FAR, priority=7, key="mail-ann")
    seen = before.get(job)
    assert seen is not None
    before.close()

    after = make_queue().get(job)

    assert after is not None
    assert after.state is jobq.JobState.PENDING
    assert after.payload == {"to": "ann"}
    assert after.priority == 7
    assert after.key == "mail-ann"
    assert after.run_at == seen.run_at  # still delayed, to the same moment
    assert after.created_at == seen.created_at


def test_restart_keeps_attempts_and_errors_of_a_retrying_job(
    make_queue: QueueFactory,
) -> None:
    def fails(job: jobq.Job[Any]) -> None:
        raise ValueError("smtp timeout")

    before = make_queue(fails, base_delay=FAR)
    job = before.enqueue("mail")
    assert before.run_pending() == 1
    seen = before.get(job)
    assert seen is not None
    before.close()

    after = make_queue().get(job)

    assert after is not None
    assert after.state is jobq.JobState.PENDING
    assert after.attempts == 1
    assert after.last_error == "ValueError: smtp timeout"
    assert after.errors == seen.errors
    assert after.errors[0].type == "ValueError"
    assert "smtp timeout" in after.errors[0].traceback
    assert after.run_at == seen.run_at  # the backoff survives


def test_restart_keeps_dead_jobs_in_burial_order(make_queue: QueueFactory) -> None:
    def fatal(job: jobq.Job[Any]) -> None:
        raise jobq.Fatal(f"no such address {job.payload}")

    before = make_queue(fatal)
    first = before.enqueue("a@x")
    second = before.enqueue("b@x")
    assert before.run_pending() == 2
    before.close()

    after = make_queue()

    dead = after.dead_jobs()
    assert [job.id for job in dead] == [first.id, second.id]
    assert dead[0].state is jobq.JobState.DEAD
    assert dead[0].attempts == 1
    assert dead[0].last_error == "jobq.errors.Fatal: no such address a@x"
    assert after.stats().dead == 2
    assert after.retry_dead(first)  # still a dead job this queue can revive


def test_ids_continue_above_old_ones_after_restart(make_queue: QueueFactory) -> None:
    before = make_queue()
    before.enqueue("a", delay=FAR)
    highest = before.enqueue("b", delay=FAR)
    assert before.cancel(highest)  # the highest id is gone, but never reused
    before.close()

    new = make_queue().enqueue("c")

    assert new.id > highest.id


def test_duplicate_enqueue_after_restart_returns_the_old_id(
    make_queue: QueueFactory,
) -> None:
    before = make_queue()
    old = before.enqueue("report", key="daily-report", delay=FAR)
    before.close()

    again = make_queue().enqueue("report", key="daily-report")

    assert again == jobq.Enqueued(old.id, duplicate=True)


# --- crashes: a real process dies while a job runs --------------------------


def test_schedule_states_are_read_from_the_journal_and_from_the_snapshot(
    make_queue: QueueFactory, path: Path
) -> None:
    clock = jobq.testing.Clock(600 * 3_000_000)
    owner = make_queue(clock=clock)
    owner.periodic(every=600, name="m")(lambda: None)
    owner.run_pending()
    clock.advance(600)
    assert owner.run_pending() == 1
    store = owner.store
    assert isinstance(store, JsonFileStore)
    from_journal = JsonFileStore(path, read_only=True)  # the journal holds it
    from_journal.open(Signal(), dead_letter_limit=10)
    owner.save()  # now the snapshot's header does
    from_snapshot = JsonFileStore(path, read_only=True)
    from_snapshot.open(Signal(), dead_letter_limit=10)

    expected = store.schedule_states()
    assert [s.last_slot for s in expected] == [clock.now]
    assert from_journal.schedule_states() == expected
    assert from_snapshot.schedule_states() == expected
    assert _document(path)["schedules"] == [list(state) for state in expected]
    from_journal.close()
    from_snapshot.close()


# Runs the queue on argv[1] until nothing is pending or running. The handler
# saves (so the running state is on disk), then kills its process with
# argv[2]: "sigkill", or "exit" (os._exit(3)). A payload "retry-first" fails
# normally once first.
CRASHER = """
import os, signal, sys
import jobq

path, how = sys.argv[1], sys.argv[2]

def handler(job):
    if job.payload == "retry-first" and job.attempt == 1:
        raise jobq.Retry("first try fails", after=0)
    queue.save()
    if how == "exit":
        os._exit(3)
    os.kill(os.getpid(), signal.SIGKILL)

queue = jobq.JobQueue(handler, store=path, max_attempts=int(sys.argv[3]))
queue.start(workers=1)
assert queue.join(timeout=20)
queue.close()
"""


def _run_crasher(path: Path, how: str, max_attempts: int) -> int:
    proc = subprocess.run(
        [sys.executable, "-c", CRASHER, str(path), how, str(max_attempts)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    if proc.returncode not in (0, 3, -signal.SIGKILL):
        pytest.fail(f"crasher failed ({proc.returncode}):\n{proc.stderr}")
    return proc.returncode


def test_job_running_when_its_process_died_is_pending_with_one_more_failed_attempt(
    make_queue: QueueFactory, path: Path
) -> None:
    setup = make_queue()
    job = setup.enqueue("retry-first")
    setup.close()

    assert _run_crasher(path, "sigkill", max_attempts=5) == -signal.SIGKILL
    assert _rows(path)[job.id]["state"] == "running"  # what the dead process left
    attempts: list[int] = []
    queue = make_queue(lambda j: attempts.append(j.attempt))

    record = queue.get(job)

    assert record is not None
    assert record.state is jobq.JobState.PENDING
    assert record.attempts == 2
    assert [e.type for e in record.errors] == [
        "jobq.errors.Retry",
        "jobq.errors.ProcessDied",
    ]
    assert record.last_error is not None
    assert "process died" in record.last_error
    assert record.run_at <= time.time()  # due again now, not after a backoff
    # its journal's "run" record said when the attempt that died started
    assert record.started_at is not None
    assert record.finished_at is not None
    assert record.started_at < record.finished_at == record.errors[-1].at
    assert queue.run_pending() == 1
    assert attempts == [3]


@pytest.mark.parametrize("how", ["sigkill", "exit"])
def test_job_that_keeps_killing_its_process_ends_dead_after_max_attempts(
    make_queue: QueueFactory, path: Path, how: str
) -> None:
    max_attempts = 3
    setup = make_queue(max_attempts=max_attempts)
    job = setup.enqueue("poison pill")
    setup.close()

    crashes = 0
    while _run_crasher(path, how, max_attempts) != 0:
        crashes += 1
        assert crashes <= max_attempts, "the job crashed its process too often"

    assert crashes == max_attempts
    record = make_queue().get(job)
    assert record is not None
    assert record.state is jobq.JobState.DEAD
    assert record.attempts == max_attempts
    assert record.last_error is not None
    assert "process died" in record.last_error
    assert [e.type for e in record.errors] == ["jobq.errors.ProcessDied"] * max_attempts


# --- how snapshots are written -----------------------------------------------


class RecordingIO(FileIO):
    """Records each file-system call with its main argument, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self._lock = threading.Lock()

    def _record(self, name: str, arg: object) -> None:
        with self._lock:
            self.calls.append((name, arg))

    def count(self, name: str) -> int:
        with self._lock:
            return sum(1 for called, _ in self.calls if called == name)

    def open_new_temp(self, directory: str, prefix: str) -> tuple[int, str]:
        fd, tmp = super().open_new_temp(directory, prefix)
        self._record("open_new_temp", tmp)
        return fd, tmp

    def write(self, fd: int, data: bytes) -> None:
        self._record("write", fd)
        super().write(fd, data)

    def fsync(self, fd: int) -> None:
        self._record("fsync", fd)
        super().fsync(fd)

    def close(self, fd: int) -> None:
        self._record("close", fd)
        super().close(fd)

    def replace(self, src: str, dst: str) -> None:
        self._record("replace", (src, dst))
        super().replace(src, dst)

    def fsync_dir(self, directory: str) -> None:
        self._record("fsync_dir", directory)
        super().fsync_dir(directory)


def test_snapshot_is_temp_file_fsync_replace_then_directory_fsync(
    make_queue: QueueFactory, path: Path
) -> None:
    io = RecordingIO()
    queue = make_queue(store=JsonFileStore(path, save_interval=FAR, io=io))
    queue.enqueue("x")
    io.calls.clear()

    queue.save()

    # Saving also starts a new journal segment first; the snapshot's own
    # calls follow one another from the temp file's creation on.
    start = [name for name, _ in io.calls].index("open_new_temp")
    snapshot = io.calls[start : start + 6]
    names = [name for name, _ in snapshot]
    assert names == ["open_new_temp", "write", "fsync", "close", "replace", "fsync_dir"]
    tmp = snapshot[0][1]
    fd = snapshot[1][1]
    assert snapshot[2][1] == fd  # the data written is what is fsynced
    assert snapshot[4][1] == (tmp, str(path))  # the fsynced temp file becomes the file
    assert os.path.dirname(str(tmp)) == str(path.parent)  # same filesystem: atomic
    assert snapshot[5][1] == str(path.parent)


def test_store_files_are_private_whatever_the_umask(
    make_queue: QueueFactory, path: Path
) -> None:
    old = os.umask(0)
    try:
        queue = make_queue()
        queue.enqueue({"token": "secret"})
        queue.save()
    finally:
        os.umask(old)

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(Path(f"{path}.lock").stat().st_mode) == 0o600


def test_a_burst_of_changes_is_coalesced_into_few_snapshots(
    make_queue: QueueFactory, path: Path
) -> None:
    io = RecordingIO()
    burst = 1000
    done = threading.Semaphore(0)
    queue = make_queue(
        lambda job: done.release(), store=JsonFileStore(path, io=io)
    ).start(workers=4)

    for n in range(burst):
        queue.enqueue(n)
    for _ in range(burst):
        assert done.acquire(timeout=WAIT)
    assert queue.join(timeout=WAIT)
    queue.save()

    changes = 3 * burst  # each job was added, claimed and finished
    assert io.count("replace") <= changes // 30
    assert _rows(path) == {}


def test_save_writes_at_once_despite_a_long_save_interval(
    make_queue: QueueFactory, path: Path
) -> None:
    queue = make_queue(store=JsonFileStore(path, save_interval=FAR))
    job = queue.enqueue({"n": 1})
    assert not path.exists()  # the writer is still gathering changes

    queue.save()

    assert _rows(path)[job.id]["payload"] == {"n": 1}


def test_snapshot_carries_format_and_version(
    make_queue: QueueFactory, path: Path
) -> None:
    queue = make_queue()
    queue.enqueue("x")
    queue.save()

    document = _document(path)

    assert document["format"] == "jobq"
    assert document["version"] == fmt.VERSION == 5


#: Jobs 1 and 2 as version 1 wrote them: no started_at, finished_at, timeout
#: or meta members.
V1_ROWS = [
    '{"id":1,"state":"pending","key":"k","priority":3,"run_at":1800000000.0,'
    '"created_at":1800000000.0,"max_attempts":5,"task":null,"attempts":0,'
    '"last_error":null,"errors":[],"expires_at":null,"payload":"one","result":null}',
    '{"id":2,"state":"dead","key":null,"priority":0,"run_at":1800000000.0,'
    '"created_at":1800000000.0,"max_attempts":1,"task":"mail.send","attempts":1,'
    '"last_error":"Fatal: no","errors":[["Fatal","no","",1800000001.0]],'
    '"expires_at":null,"payload":{"args":[],"kwargs":{}},"result":null}',
]
V1_PUT = (
    b'["put",{"id":3,"state":"pending","key":null,"priority":0,'
    b'"run_at":1800000000.0,"created_at":1800000000.0,"max_attempts":5,'
    b'"task":null,"attempts":0,"last_error":null,"errors":[],"expires_at":null,'
    b'"payload":"three","result":null}]'
)


def _v1_files(path: Path) -> None:
    """A snapshot (jobs 1 and 2) and a journal segment (job 3 added, then
    job 1 claimed) as version 1 wrote them."""
    head = '{"format": "jobq", "version": 1, "seq": 1, "next_id": 3, "jobs": [\n'
    body = (head + ",\n".join(V1_ROWS) + "\n]").encode()
    path.write_bytes(body + b', "crc32": %d}\n' % zlib.crc32(body))
    segment = path.parent / f"{path.name}.journal-1"
    records = encode_record(2, V1_PUT) + encode_record(3, b'["run",1]')
    segment.write_bytes(b"JOBQ-JOURNAL 1\n" + records)


def test_files_of_version_1_load_and_are_written_again_as_the_current_version(
    make_queue: QueueFactory, path: Path
) -> None:
    _v1_files(path)
    clock = jobq.testing.Clock()

    queue = make_queue(clock=clock)
    records = [queue.get(job_id) for job_id in (1, 2, 3)]

    assert [(r.id, r.state, r.payload, r.attempts) for r in records if r] == [
        (1, jobq.JobState.PENDING, "one", 1),  # it was running: its process died
        (2, jobq.JobState.DEAD, {"args": [], "kwargs": {}}, 1),
        (3, jobq.JobState.PENDING, "three", 0),
    ]
    assert [(r.started_at, r.finished_at, r.timeout, dict(r.meta))
            for r in records if r] == [
        (None, clock(), None, {}),  # version 1 did not say when it started
        (None, None, None, {}),
        (None, None, None, {}),
    ]  # fmt: skip
    queue.save()
    assert _document(path)["version"] == fmt.VERSION
    queue.close()
    again = make_queue(clock=clock)
    assert [again.get(job_id) for job_id in (1, 2, 3)] == records


def _newer_file(path: Path) -> bytes:
    data = json.dumps(
        {
            "format": "jobq",
            "version": fmt.VERSION + 1,
            "next_id": 8,
            "count": 0,
            "jobs": [],
        }
    ).encode()
    path.write_bytes(data)
    return data


@pytest.mark.parametrize("call", ["stats", "enqueue", "start"])
def test_file_of_a_newer_version_is_refused_and_left_untouched(
    make_queue: QueueFactory, path: Path, call: str
) -> None:
    data = _newer_file(path)
    queue = make_queue()
    action: Callable[[], object] = {
        "stats": queue.stats,
        "enqueue": lambda: queue.enqueue("x"),
        "start": queue.start,
    }[call]

    with pytest.raises(jobq.StoreError, match=r"newer jobq.*version 6"):
        action()

    queue.close()
    assert path.read_bytes() == data
    assert _names(path.parent) == ["jobs.json", "jobs.json.lock"]


def test_refusing_a_newer_file_does_not_keep_the_lock(
    make_queue: QueueFactory, path: Path
) -> None:
    _newer_file(path)
    old = make_queue()
    with pytest.raises(jobq.StoreError):
        old.enqueue("x")

    # A newer jobq can still take the file over while the process that
    # refused it lives on (flock: a second open file conflicts like a process).
    newer = OwnerLock(str(path))
    newer.acquire()
    newer.release()


# --- a file that cannot be read ----------------------------------------------


def _truncated(tmp_path: Path) -> bytes:
    """A real snapshot holding ids up to 7, cut in the middle."""
    source = tmp_path / "source.json"
    queue: jobq.JobQueue[Any] = jobq.JobQueue(store=source)
    for n in range(7):
        queue.enqueue({"n": n, "text": "x" * 50}, delay=FAR)
    queue.close()
    data = source.read_bytes()
    assert b'"id":7' in data
    return data[: len(data) * 9 // 10]


def _row_with_huge_id(_: Path) -> bytes:
    row = (
        '{"id": 1e400, "state": "pending", "key": null, "priority": 0, "run_at": 1,'
        ' "created_at": 1, "max_attempts": 3, "task": null, "attempts": 0,'
        ' "last_error": null, "errors": [], "expires_at": null, "payload": 1,'
        ' "result": null}'
    )
    head = '{"format": "jobq", "version": 1, "next_id": 3, "count": 1, "jobs": '
    return f"{head}[{row}]}}".encode()


JOBQ_HEAD = b'{"format": "jobq", "version": 1, '

# name: (content, the highest job id the content shows, 0 if none)
UNREADABLE: dict[str, tuple[Callable[[Path], bytes], int]] = {
    "garbage bytes": (lambda _: b"\x00\xff\xfe\x80 not json at all \x9c", 0),
    "empty": (lambda _: b"", 0),
    "not an object": (lambda _: b'[{"id": 4}]', 4),
    "another format": (lambda _: b'{"format": "other", "version": 1, "id": 3}', 3),
    "row missing fields": (
        lambda _: JOBQ_HEAD + b'"next_id": 9, "count": 1, "jobs": [{"id": 8}]}',
        8,
    ),
    "jobs not a list": (
        lambda _: JOBQ_HEAD + b'"next_id": 2, "count": 1, "jobs": 5}',
        1,
    ),
    "number out of range": (_row_with_huge_id, 2),
    "deeply nested": (lambda _: b"[" * 100_000, 0),
}


@pytest.mark.parametrize("kind", list(UNREADABLE))
def test_unreadable_file_is_moved_aside_logged_and_the_queue_starts_empty(
    make_queue: QueueFactory,
    path: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    kind: str,
) -> None:
    content, highest_id = UNREADABLE[kind]
    data = content(tmp_path)
    path.write_bytes(data)
    queue = make_queue()

    with caplog.at_level(logging.ERROR, logger="jobq"):
        stats = queue.stats()

    assert (stats.pending, stats.running, stats.dead) == (0, 0, 0)
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("jobs.json.corrupt-")]
    assert len(aside) == 1
    assert re.fullmatch(r"jobs\.json\.corrupt-\d{8}T\d{6}", aside[0].name)
    assert aside[0].read_bytes() == data  # never deleted, never rewritten
    errors = [
        r
        for r in caplog.records
        if r.levelno == logging.ERROR and r.name.split(".")[0] == "jobq"
    ]
    assert any(aside[0].name in r.getMessage() for r in errors)
    assert queue.enqueue("new").id > highest_id  # ids never repeat


def test_truncated_snapshot_loads_the_rows_before_the_cut_and_is_moved_aside(
    make_queue: QueueFactory,
    path: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    data = _truncated(tmp_path)
    path.write_bytes(data)
    queue = make_queue()

    with caplog.at_level(logging.ERROR, logger="jobq"):
        assert queue.stats().pending == 6
    pending = queue.store.list_jobs(jobq.JobState.PENDING)

    # the rows the cut missed are loaded, the one it cut is not
    assert [(r.id, r.payload["n"]) for r in pending] == [
        (i, i - 1) for i in range(1, 7)
    ]
    [aside] = [p for p in tmp_path.iterdir() if p.name.startswith("jobs.json.corrupt-")]
    assert aside.read_bytes() == data
    [error] = [
        r.getMessage()
        for r in caplog.records
        if r.name == "jobq.stores.jsonfile" and aside.name in r.getMessage()
    ]
    assert "loaded its 6 intact job rows, lines lost: 1;" in error
    assert queue.enqueue("new").id > 7  # job 7 was in the cut row: never reused


# --- one owner: the lock -----------------------------------------------------

# Another process using the queue file argv[1]; one command per line on stdin,
# one JSON answer per line on stdout.
PEER = """
import json, sys
import jobq

queue = jobq.JobQueue(lambda job: None, store=sys.argv[1])
for line in sys.stdin:
    command, _, arg = line.strip().partition(" ")
    try:
        if command == "enqueue":
            answer = {"id": queue.enqueue(arg, delay=3600).id}
        elif command == "start":
            queue.start(workers=1)
            answer = {}
        elif command == "save":
            queue.save()
            answer = {}
        elif command == "stats":
            s = queue.stats()
            answer = {"pending": s.pending, "running": s.running, "dead": s.dead}
        elif command == "get":
            record = queue.get(int(arg))
            answer = {"payload": record and record.payload}
        elif command == "dead":
            answer = {"ids": [record.id for record in queue.dead_jobs()]}
        elif command == "close":
            queue.close()
            answer = {}
        else:
            answer = {"error": "unknown command " + command}
    except jobq.StoreLocked as exc:
        answer = {"error": "StoreLocked", "owner_pid": exc.owner_pid,
                  "message": str(exc)}
    print(json.dumps(answer), flush=True)
"""


class _Peer:
    """Another process working on the same queue file."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PEER, str(path)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ask(self, command: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the peer died answering {command!r}"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def kill(self) -> None:
        self.proc.kill()
        self.proc.communicate(timeout=WAIT)

    def finish(self) -> None:
        """End the peer (end of input), or kill it if it does not end."""
        try:
            self.proc.communicate(timeout=WAIT)
        finally:
            if self.proc.returncode is None:
                self.kill()


@pytest.fixture
def peer(path: Path) -> Iterator[_Peer]:
    other = _Peer(path)
    yield other
    other.finish()


def test_constructing_a_queue_or_store_takes_no_lock(path: Path, peer: _Peer) -> None:
    jobq.JobQueue(_ignore, store=path)
    JsonFileStore(path)

    assert not Path(f"{path}.lock").exists()
    assert not path.exists()
    assert "error" not in peer.ask("enqueue x")  # the other process may own it


def test_first_use_takes_the_lock(make_queue: QueueFactory, path: Path) -> None:
    queue = make_queue()

    queue.stats()

    assert Path(f"{path}.lock").read_text().strip() == str(os.getpid())


@pytest.mark.parametrize("command", ["enqueue x", "start"])
def test_second_process_that_changes_the_store_gets_store_locked(
    make_queue: QueueFactory, peer: _Peer, command: str
) -> None:
    make_queue().enqueue("mine")

    answer = peer.ask(command)

    assert answer["error"] == "StoreLocked"
    assert answer["owner_pid"] == os.getpid()
    assert str(os.getpid()) in answer["message"]
    assert "sqlite" in answer["message"].lower()


def test_second_process_reads_what_the_owner_saved(
    make_queue: QueueFactory, peer: _Peer
) -> None:
    def fatal(job: jobq.Job[Any]) -> None:
        raise jobq.Fatal("bad")

    owner = make_queue(fatal)
    buried = owner.enqueue("buried")
    owner.run_pending()
    waiting = owner.enqueue({"to": "ann"}, delay=FAR)
    owner.save()

    assert peer.ask("stats") == {"pending": 1, "running": 0, "dead": 1}
    assert peer.ask(f"get {waiting.id}") == {"payload": {"to": "ann"}}
    assert peer.ask("dead") == {"ids": [buried.id]}

    later = owner.enqueue("later", delay=FAR)
    owner.save()

    assert peer.ask("stats")["pending"] == 2  # it sees the newest snapshot
    assert peer.ask(f"get {later.id}") == {"payload": "later"}


def test_lock_of_a_process_killed_with_sigkill_never_blocks_the_next_start(
    make_queue: QueueFactory, path: Path, peer: _Peer
) -> None:
    job = peer.ask("enqueue left-behind")["id"]
    peer.ask("save")
    peer.proc.send_signal(signal.SIGKILL)
    peer.proc.wait(timeout=WAIT)
    assert Path(f"{path}.lock").read_text().strip() == str(peer.pid)  # stale pid

    queue = make_queue().start(workers=1)

    assert queue.get(job) is not None
    assert queue.enqueue("next").id > job


def test_another_process_takes_over_after_the_owner_closes(
    make_queue: QueueFactory, peer: _Peer
) -> None:
    owner = make_queue()
    old = owner.enqueue("from the first owner", delay=FAR)
    assert peer.ask("enqueue refused")["error"] == "StoreLocked"

    owner.close()

    new_id = peer.ask("enqueue accepted")["id"]
    assert new_id > old.id
    assert peer.ask(f"get {old.id}") == {"payload": "from the first owner"}
    assert "error" not in peer.ask("start")


# --- write faults --------------------------------------------------------------


class FullDiskIO(FileIO):
    """Fails the named calls with ENOSPC while ``full`` is set."""

    def __init__(self, failing: str) -> None:
        self.failing = failing
        self.full = False

    def _check(self, name: str) -> None:
        if self.full and name == self.failing:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def write(self, fd: int, data: bytes) -> None:
        self._check("write")
        super().write(fd, data)

    def fsync(self, fd: int) -> None:
        self._check("fsync")
        super().fsync(fd)

    def replace(self, src: str, dst: str) -> None:
        self._check("replace")
        super().replace(src, dst)


FAULTS = ["write", "fsync", "replace"]


@pytest.mark.parametrize("failing", FAULTS)
def test_failed_save_raises_store_error_and_keeps_the_last_good_file(
    make_queue: QueueFactory, path: Path, failing: str
) -> None:
    io = FullDiskIO(failing)
    queue = make_queue(store=JsonFileStore(path, save_interval=FAR, io=io))
    queue.enqueue("saved", delay=FAR)
    queue.save()
    good = path.read_bytes()
    io.full = True

    with pytest.raises(jobq.StoreError, match="No space left"):
        queue.save()

    assert path.read_bytes() == good
    assert not [name for name in _names(path.parent) if name.endswith(".tmp")]
    io.full = False


@pytest.mark.parametrize("failing", FAULTS)
def test_queue_keeps_running_through_a_write_fault_and_saves_everything_after(
    make_queue: QueueFactory, path: Path, failing: str
) -> None:
    io = FullDiskIO(failing)
    ran = threading.Event()
    queue = make_queue(
        lambda job: ran.set(), store=JsonFileStore(path, save_interval=FAR, io=io)
    )
    kept = queue.enqueue("kept", delay=FAR)
    queue.enqueue("runs")
    io.full = True
    with pytest.raises(jobq.StoreError):
        queue.save()

    queue.start(workers=1)
    assert ran.wait(WAIT)
    queue.stop(timeout=WAIT)  # its outcome is recorded in memory; the save fails
    record = queue.get(kept)
    assert record is not None
    assert record.payload == "kept"

    io.full = False
    queue.save()

    assert {row["payload"] for row in _rows(path).values()} == {"kept"}


def test_a_running_job_shows_its_start_in_a_snapshot_and_to_a_reader(
    make_queue: QueueFactory, path: Path
) -> None:
    """The memory store keeps a running job's start beside its entry, not in
    it: the owner's list, the snapshot's row and a reader still show it."""
    queue = make_queue()
    job = queue.enqueue("x")
    start = time.time() + 1
    assert len(queue.store.claim_many(start, 1)) == 1
    [owned] = queue.store.list_jobs(jobq.JobState.RUNNING)

    queue.save()  # the snapshot holds the run; the journal after it, nothing
    reader = JsonFileStore(path, read_only=True)
    try:
        [read] = reader.list_jobs(jobq.JobState.RUNNING)
        assert reader.get(job.id, start) == read
    finally:
        reader.close()

    assert _rows(path)[job.id]["started_at"] == start
    for record in (owned, read):
        assert (record.started_at, record.finished_at) == (start, None)


def test_a_reader_sees_the_success_of_a_job_once_run_pending_returns(
    tmp_path: Path,
) -> None:
    """The journal holds a job's success when the call that ran it returns:
    a reader in another process sees it, and a crash would not run it again."""
    path = tmp_path / "jobs.json"
    ran: list[int] = []
    queue = jobq.JobQueue(lambda job: ran.append(job.id), store=JsonFileStore(path))
    try:
        first, second = queue.enqueue_many(["a", "b"])
        assert queue.run_pending(limit=2) == 2
        assert ran == [first.id, second.id]

        reader = JsonFileStore(path, read_only=True)
        try:
            stats = reader.stats()
            assert (stats.pending, stats.running) == (0, 0)
        finally:
            reader.close()
    finally:
        queue.close()


# --- join and other processes ----------------------------------------------------


class HeldWrites(FileIO):
    """Appends to the journal wait, once armed, until the test lets them go."""

    def __init__(self) -> None:
        self.armed = False
        self.waiting = threading.Event()
        self.go = threading.Event()

    def write(self, fd: int, data: bytes) -> None:
        if self.armed:
            self.waiting.set()
            assert self.go.wait(WAIT)
        super().write(fd, data)


def test_join_returns_only_once_the_outcome_is_in_the_file(
    make_queue: QueueFactory, path: Path
) -> None:
    """Another process reading the file right after ``join`` (``jobq dead``)
    sees the outcome: ``join`` used to wake when the job settled in memory,
    before its journal record was written."""
    io = HeldWrites()

    def handler(job: jobq.Job[Any]) -> None:
        io.armed = True  # the next append is this job's outcome
        raise jobq.Fatal("for the dead letters")

    queue = make_queue(handler, store=JsonFileStore(path, io=io))
    job = queue.enqueue("x")
    returned = threading.Event()

    def join() -> None:
        queue.join(WAIT)
        returned.set()

    waiter = threading.Thread(target=join)
    waiter.start()
    queue.start(workers=1)
    try:
        assert io.waiting.wait(WAIT)  # the outcome is settled in memory only
        assert not returned.wait(0.2)
        assert queue.stats().running == 1  # as the file says
    finally:
        io.armed = False
        io.go.set()
    waiter.join(WAIT)
    assert returned.is_set()
    reader = jobq.JobQueue(_ignore, store=JsonFileStore(path, read_only=True))
    record = reader.get(job)
    assert record is not None
    assert record.state is jobq.JobState.DEAD
    reader.close()
