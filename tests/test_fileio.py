"""Tests of durable writes, move-aside and the single-owner lock."""

from __future__ import annotations

import datetime as dt
import errno
import json
import logging
import os
import re
import stat
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from jobq.errors import StoreError, StoreLocked
from jobq.stores.jsonfile.fileio import (
    FileIO,
    OwnerLock,
    durable_replace,
    move_aside,
    read_owner_pid,
)

ROOT = Path(__file__).resolve().parents[1]
WAIT = 30  # seconds; a generous cap so that a broken test fails, never hangs

# Tries to take the lock once and reports the outcome as one JSON line.
TRY_ACQUIRE = """
import json, sys
from jobq.stores.jsonfile.fileio import OwnerLock
from jobq.errors import StoreLocked
try:
    OwnerLock(sys.argv[1]).acquire()
except StoreLocked as exc:
    print(json.dumps({"locked": True, "owner_pid": exc.owner_pid, "msg": str(exc)}))
else:
    print(json.dumps({"locked": False}))
"""

# Takes the lock, says "held", releases it on "release", exits on end of input.
HOLDER = """
import sys
from jobq.stores.jsonfile.fileio import OwnerLock
lock = OwnerLock(sys.argv[1])
lock.acquire()
print("held", flush=True)
for line in sys.stdin:
    if line.strip() == "release":
        lock.release()
        print("released", flush=True)
"""


class FailingIO(FileIO):
    """Raises ``OSError(code)`` at the first call of method ``at``."""

    def __init__(self, at: str, code: int) -> None:
        self.at = at
        self.code = code
        self.opened: list[int] = []
        self.closed: list[int] = []

    def _maybe_fail(self, name: str) -> None:
        if name == self.at:
            raise OSError(self.code, os.strerror(self.code))

    def open_new_temp(self, directory: str, prefix: str) -> tuple[int, str]:
        self._maybe_fail("open_new_temp")
        fd, path = super().open_new_temp(directory, prefix)
        self.opened.append(fd)
        return fd, path

    def write(self, fd: int, data: bytes) -> None:
        self._maybe_fail("write")
        super().write(fd, data)

    def fsync(self, fd: int) -> None:
        self._maybe_fail("fsync")
        super().fsync(fd)

    def close(self, fd: int) -> None:
        super().close(fd)  # the fd must not leak even when close "fails"
        self.closed.append(fd)
        self._maybe_fail("close")

    def replace(self, src: str, dst: str) -> None:
        self._maybe_fail("replace")
        super().replace(src, dst)

    def rename(self, src: str, dst: str) -> None:
        self._maybe_fail("rename")
        super().rename(src, dst)

    def fsync_dir(self, directory: str) -> None:
        self._maybe_fail("fsync_dir")
        super().fsync_dir(directory)


class RecordingIO(FileIO):
    """Records the name and main argument of every call, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def open_new_temp(self, directory: str, prefix: str) -> tuple[int, str]:
        fd, path = super().open_new_temp(directory, prefix)
        self.calls.append(("open_new_temp", fd))
        return fd, path

    def write(self, fd: int, data: bytes) -> None:
        self.calls.append(("write", fd))
        super().write(fd, data)

    def fsync(self, fd: int) -> None:
        self.calls.append(("fsync", fd))
        super().fsync(fd)

    def close(self, fd: int) -> None:
        self.calls.append(("close", fd))
        super().close(fd)

    def replace(self, src: str, dst: str) -> None:
        self.calls.append(("replace", dst))
        super().replace(src, dst)

    def rename(self, src: str, dst: str) -> None:
        self.calls.append(("rename", dst))
        super().rename(src, dst)

    def fsync_dir(self, directory: str) -> None:
        self.calls.append(("fsync_dir", directory))
        super().fsync_dir(directory)

    def exists(self, path: str) -> bool:
        self.calls.append(("exists", path))
        return super().exists(path)


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _try_acquire_elsewhere(path: Path) -> dict[str, object]:
    """Try the lock from a fresh interpreter; its outcome as a dict."""
    out = subprocess.run(
        [sys.executable, "-c", TRY_ACQUIRE, str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=True,
    ).stdout
    result: dict[str, object] = json.loads(out)
    return result


@contextmanager
def _holder(path: Path) -> Iterator[subprocess.Popen[str]]:
    """A process that holds the lock on ``path`` until told otherwise."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.kill()
        proc.communicate(timeout=WAIT)


@pytest.fixture
def lock(tmp_path: Path) -> Iterator[OwnerLock]:
    owner = OwnerLock(str(tmp_path / "q.json"))
    yield owner
    owner.release()


# --- durable_replace ---------------------------------------------------------


def test_durable_replace_writes_content_0600_without_leftovers(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    path.write_bytes(b"old")
    path.chmod(0o644)

    durable_replace(str(path), b'{"jobs": []}')

    assert path.read_bytes() == b'{"jobs": []}'
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert _names(tmp_path) == ["q.json"]


def test_durable_replace_creates_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "q.json"

    durable_replace(str(path), b"new")

    assert path.read_bytes() == b"new"


def test_write_loops_over_short_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write

    def three_bytes_at_most(fd: int, data: bytes) -> int:
        return real_write(fd, bytes(data[:3]))

    monkeypatch.setattr(os, "write", three_bytes_at_most)
    path = tmp_path / "q.json"

    durable_replace(str(path), b"0123456789abcdef")

    assert path.read_bytes() == b"0123456789abcdef"


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
@pytest.mark.parametrize("at", ["open_new_temp", "write", "fsync", "close", "replace"])
def test_failed_replace_keeps_old_file_and_removes_temp(
    tmp_path: Path, at: str, code: int
) -> None:
    path = tmp_path / "q.json"
    path.write_bytes(b"old")
    io = FailingIO(at, code)

    with pytest.raises(StoreError) as info:
        durable_replace(str(path), b"new", io=io)

    assert path.read_bytes() == b"old"
    assert _names(tmp_path) == ["q.json"]
    assert io.closed == io.opened
    assert str(path) in str(info.value)
    assert os.strerror(code) in str(info.value)
    assert isinstance(info.value.__cause__, OSError)
    assert info.value.__cause__.errno == code


def test_failed_directory_fsync_is_reported_not_swallowed(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    path.write_bytes(b"old")

    with pytest.raises(StoreError, match="Input/output error"):
        durable_replace(str(path), b"new", io=FailingIO("fsync_dir", errno.EIO))

    assert _names(tmp_path) == ["q.json"]


def test_durable_replace_fsyncs_file_then_renames_then_fsyncs_dir(
    tmp_path: Path,
) -> None:
    io = RecordingIO()
    path = tmp_path / "q.json"

    durable_replace(str(path), b"new", io=io)

    fd = io.calls[0][1]
    assert io.calls == [
        ("open_new_temp", fd),
        ("write", fd),
        ("fsync", fd),
        ("close", fd),
        ("replace", str(path)),
        ("fsync_dir", str(tmp_path)),
    ]


# --- move_aside --------------------------------------------------------------

NOW = dt.datetime(2026, 11, 29, 21, 15, 0, tzinfo=dt.UTC).timestamp()


def test_move_aside_names_file_with_reason_and_utc_time(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    path.write_bytes(b"garbage")

    moved = move_aside(str(path), "corrupt", now=NOW)

    assert moved == f"{path}.corrupt-20261129T211500"
    assert Path(moved).read_bytes() == b"garbage"
    assert not path.exists()


def test_move_aside_never_overwrites_an_earlier_aside_file(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    path.write_bytes(b"third")
    first = tmp_path / "q.json.corrupt-20261129T211500"
    second = tmp_path / "q.json.corrupt-20261129T211500-1"
    first.write_bytes(b"first")
    second.write_bytes(b"second")

    moved = move_aside(str(path), "corrupt", now=NOW)

    assert moved == f"{first}-2"
    assert Path(moved).read_bytes() == b"third"
    assert first.read_bytes() == b"first"
    assert second.read_bytes() == b"second"


def test_move_aside_logs_both_paths_at_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "q.json"
    path.write_bytes(b"garbage")

    with caplog.at_level(logging.ERROR, logger="jobq"):
        moved = move_aside(str(path), "corrupt", now=NOW)

    [record] = caplog.records
    assert record.levelno == logging.ERROR
    assert record.name.startswith("jobq.")
    assert str(path) in record.getMessage()
    assert moved in record.getMessage()


def test_move_aside_fsyncs_the_directory_after_renaming(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    path.write_bytes(b"garbage")
    io = RecordingIO()

    moved = move_aside(str(path), "corrupt", io=io, now=NOW)

    assert io.calls == [
        ("exists", moved),
        ("rename", moved),
        ("fsync_dir", str(tmp_path)),
    ]


def test_move_aside_failure_raises_store_error_and_keeps_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "q.json"
    path.write_bytes(b"garbage")

    with pytest.raises(StoreError, match=re.escape(str(path))):
        move_aside(str(path), "corrupt", io=FailingIO("rename", errno.EIO), now=NOW)

    assert path.read_bytes() == b"garbage"


def test_move_aside_rejects_a_reason_that_is_not_a_plain_word(
    tmp_path: Path,
) -> None:
    path = tmp_path / "q.json"
    path.write_bytes(b"garbage")

    with pytest.raises(ValueError, match="reason"):
        move_aside(str(path), "../evil", now=NOW)

    assert path.exists()


# --- OwnerLock ---------------------------------------------------------------


def test_owner_lock_constructor_opens_nothing(tmp_path: Path) -> None:
    OwnerLock(str(tmp_path / "q.json"))

    assert _names(tmp_path) == []


def test_owner_lock_locks_sibling_file_and_records_pid(
    tmp_path: Path, lock: OwnerLock
) -> None:
    lock.acquire()

    assert lock.held
    assert _names(tmp_path) == ["q.json.lock"]
    assert stat.S_IMODE((tmp_path / "q.json.lock").stat().st_mode) == 0o600
    assert read_owner_pid(str(tmp_path / "q.json")) == os.getpid()


def test_owner_lock_acquire_and_release_are_idempotent(lock: OwnerLock) -> None:
    lock.acquire()
    lock.acquire()
    assert lock.held

    lock.release()
    lock.release()
    assert not lock.held


def test_read_owner_pid_is_none_without_a_lock_file(tmp_path: Path) -> None:
    assert read_owner_pid(str(tmp_path / "q.json")) is None


def test_a_fifo_at_the_lock_path_is_refused_without_blocking(
    tmp_path: Path, lock: OwnerLock
) -> None:
    # Opened read-write, a FIFO never blocks the open; but taken as the lock,
    # the pid written to it would never be read back, and a second process
    # reading the pid would block for good. O_NONBLOCK keeps both from hanging.
    os.mkfifo(tmp_path / "q.json.lock")

    with pytest.raises(StoreError, match=r"q\.json\.lock: it is a FIFO, not a"):
        lock.acquire()

    assert not lock.held
    assert read_owner_pid(str(tmp_path / "q.json")) is None


def test_second_process_gets_store_locked_naming_owner_and_sqlite(
    tmp_path: Path, lock: OwnerLock
) -> None:
    lock.acquire()

    result = _try_acquire_elsewhere(tmp_path / "q.json")

    assert result["locked"] is True
    assert result["owner_pid"] == os.getpid()
    message = str(result["msg"])
    assert str(os.getpid()) in message
    assert "sqlite" in message.lower()


def test_lock_of_a_sigkilled_process_does_not_block(
    tmp_path: Path, lock: OwnerLock
) -> None:
    with _holder(tmp_path / "q.json") as holder:
        with pytest.raises(StoreLocked) as info:
            lock.acquire()
        assert info.value.owner_pid == holder.pid
        holder.kill()
        holder.wait(timeout=WAIT)

        lock.acquire()

    assert lock.held
    assert read_owner_pid(str(tmp_path / "q.json")) == os.getpid()


def test_lock_released_by_another_process_can_be_acquired(
    tmp_path: Path, lock: OwnerLock
) -> None:
    with _holder(tmp_path / "q.json") as holder:
        assert holder.stdin is not None
        assert holder.stdout is not None
        holder.stdin.write("release\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "released"

        lock.acquire()  # the holder is still alive but no longer owns the lock

        assert lock.held


def test_release_lets_another_process_acquire(tmp_path: Path, lock: OwnerLock) -> None:
    lock.acquire()
    lock.release()

    assert _try_acquire_elsewhere(tmp_path / "q.json") == {"locked": False}


def _in_forked_child(
    lock: OwnerLock, view: Callable[[OwnerLock], dict[str, object]]
) -> dict[str, object]:
    """Run ``view(lock)`` in a forked child; the dict it reported."""
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        # 3.12+ warns on fork with threads; the child only touches this lock.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # child: report through the pipe, never return into pytest
        status = 1
        try:
            os.close(read_end)
            data = json.dumps(view(lock)).encode()
            with os.fdopen(write_end, "wb") as out:
                out.write(data)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        raw = pipe.read()
    _, wait_status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(wait_status) == 0
    report: dict[str, object] = json.loads(raw)
    return report


def _child_held(lock: OwnerLock) -> dict[str, object]:
    return {"held": lock.held}


def _child_acquire(lock: OwnerLock) -> dict[str, object]:
    try:
        lock.acquire()
    except StoreLocked as exc:
        return {"acquire": "locked", "owner_pid": exc.owner_pid, "held": lock.held}
    return {"acquire": "acquired", "held": lock.held}


needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


@needs_fork
def test_forked_child_does_not_consider_itself_owner(
    tmp_path: Path, lock: OwnerLock
) -> None:
    lock.acquire()

    assert _in_forked_child(lock, _child_held) == {"held": False}

    assert lock.held
    assert _try_acquire_elsewhere(tmp_path / "q.json")["locked"] is True


@needs_fork
def test_forked_child_acquire_raises_store_locked_while_parent_holds(
    tmp_path: Path, lock: OwnerLock
) -> None:
    lock.acquire()

    report = _in_forked_child(lock, _child_acquire)

    assert report == {"acquire": "locked", "owner_pid": os.getpid(), "held": False}
    assert lock.held
    assert _try_acquire_elsewhere(tmp_path / "q.json")["locked"] is True
