"""Durable file writes, moving bad files aside, and single-owner locking.

The JSON store does all of its file I/O through one ``FileIO`` object, so a
test can swap in a storage double that injects ENOSPC/EIO or forgets whatever
was not fsynced. The helpers here follow the recipe that survives power loss
(temp file in the same directory, fsync, rename, fsync the directory) and
never report success after a failed step: after a failed fsync, Linux marks
the lost pages clean, so a retry would "succeed" on data that is gone.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import logging
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterable

from jobq._fork import current_pid
from jobq.errors import StoreError, StoreLocked

__all__ = [
    "DEFAULT_IO",
    "FileIO",
    "NotRegularFile",
    "OwnerLock",
    "durable_replace",
    "move_aside",
    "read_owner_pid",
]

logger = logging.getLogger("jobq._fileio")  # its name before it moved here

_REASON = re.compile(r"[A-Za-z0-9_-]+")

#: ``durable_replace`` gathers chunks into writes of about this many bytes.
WRITE_SIZE = 1 << 20


class NotRegularFile(OSError):
    """A store file that is a FIFO, a device, a directory or a socket.

    An ``OSError`` like any other failure to read, so callers report it the
    same way: "cannot read PATH: a FIFO, not a regular file".
    """

    def __init__(self, path: str, mode: int) -> None:
        kind = _kind(mode)
        if os.path.islink(path):
            kind = f"a symbolic link to {kind} ({os.path.realpath(path)})"
        super().__init__(errno.EINVAL, f"it is {kind}, not a regular file", path)


def _kind(mode: int) -> str:
    """What a file of ``mode`` is, for an error message."""
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "a special file")


def _require_regular(path: str, mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise NotRegularFile(path, mode)


class FileIO:
    """Thin wrappers over ``os``: the one seam for the store's file I/O.

    Every method raises ``OSError`` as the OS reports it; callers decide what
    a failure means. Subclass and override a method to inject faults.
    """

    def open_new_temp(self, directory: str, prefix: str) -> tuple[int, str]:
        """Create a new file in ``directory`` (mode 0600, O_EXCL): fd and path.

        The same directory as the target, so the later rename stays within
        one filesystem and is atomic.
        """
        return tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=directory)

    def open_append(self, path: str) -> int:
        """Open ``path`` for appending, creating it with mode 0600.

        O_NOFOLLOW: a symlink planted at our path must not redirect writes.
        """
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
        return os.open(path, flags, 0o600)

    def write(self, fd: int, data: bytes) -> None:
        """Write all of ``data``; ``os.write`` may write only part of it."""
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            if written <= 0:  # never loop forever on a device that takes nothing
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            view = view[written:]

    def fsync(self, fd: int) -> None:
        """Push the file's data and size to the device, not just the kernel."""
        if sys.platform == "darwin":  # macOS fsync leaves data in the drive cache
            fcntl.fcntl(fd, fcntl.F_FULLFSYNC)
        else:
            os.fsync(fd)

    def close(self, fd: int) -> None:
        """Close ``fd``; some filesystems report write errors only here."""
        os.close(fd)

    def replace(self, src: str, dst: str) -> None:
        """Atomically swap ``dst`` for ``src``: readers see old or new, never half."""
        os.replace(src, dst)

    def rename(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst`` (the caller made sure ``dst`` is free)."""
        os.rename(src, dst)

    def fsync_dir(self, directory: str) -> None:
        """Make renames and creations in ``directory`` survive power loss."""
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def read(self, path: str) -> bytes:
        """Return the content of ``path``, a regular file (or a link to one).

        Anything else raises ``NotRegularFile`` before a byte is read: a FIFO
        would block the first ``stats()`` until some writer came along, and
        ``/dev/zero`` would be read until ``MemoryError``. A device is refused
        before it is opened (opening some has effects); O_NONBLOCK keeps a
        FIFO swapped in after that check from blocking the open, and the
        check is repeated on what was opened. At most the size ``fstat``
        reports is read, so a file that grows meanwhile (the owner appending
        to a segment) reads as it was: the rest, a torn tail for now, is read
        on the next reload.
        """
        _require_regular(path, os.stat(path).st_mode)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as f:  # closes fd
            st = os.fstat(fd)
            _require_regular(path, st.st_mode)
            return f.read(st.st_size)

    def listdir(self, directory: str) -> list[str]:
        """The names in ``directory`` (to find journal segments)."""
        return os.listdir(directory)

    def unlink(self, path: str) -> None:
        """Remove ``path``."""
        os.unlink(path)

    def truncate(self, fd: int, size: int) -> None:
        """Cut the open file to ``size`` bytes (a torn journal tail, say)."""
        os.ftruncate(fd, size)

    def exists(self, path: str) -> bool:
        """Whether a directory entry named ``path`` exists, dangling symlinks too.

        ``lexists`` so that a name is never taken as free while something,
        even a broken link, sits there.
        """
        return os.path.lexists(path)


#: The real file system; stores use it unless a test passes a double.
DEFAULT_IO = FileIO()


def _describe(exc: OSError) -> str:
    return exc.strerror or str(exc)


def durable_replace(
    path: str, data: bytes | Iterable[bytes], io: FileIO = DEFAULT_IO
) -> int:
    """Replace ``path`` with ``data`` so that a crash leaves old or new, whole.

    ``data`` may come in chunks (a large snapshot is serialized piece by
    piece, so no single step holds the GIL for long); they are written in
    writes of about ``WRITE_SIZE`` bytes. Returns the number of bytes written.

    The new file has mode 0600. On failure the old file is untouched, the temp
    file is removed and ``StoreError`` is raised; if only the final directory
    fsync fails the new content is in place but may not survive power loss,
    and the error is still raised, since success must mean durable.
    """
    directory = os.path.dirname(os.path.abspath(path))
    prefix = f".{os.path.basename(path)}."
    tmp: str | None = None
    step = "create a temp file for"
    try:
        fd, tmp = io.open_new_temp(directory, prefix)
        try:
            step = "write"
            size = _write_chunks(io, fd, [data] if isinstance(data, bytes) else data)
            step = "fsync"
            io.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                io.close(fd)
            raise
        step = "close"
        io.close(fd)
        step = "replace"
        io.replace(tmp, path)
        tmp = None  # the temp name is gone: it is the file now
        step = "fsync the directory of"
        io.fsync_dir(directory)
    except OSError as exc:
        _discard(io, tmp)
        raise StoreError(f"could not {step} {path}: {_describe(exc)}") from exc
    except BaseException:
        _discard(io, tmp)
        raise
    return size


def _write_chunks(io: FileIO, fd: int, chunks: Iterable[bytes]) -> int:
    """Write ``chunks`` in writes of about ``WRITE_SIZE``; the bytes written."""
    pending: list[bytes] = []
    pending_size = size = 0
    for chunk in chunks:
        pending.append(chunk)
        pending_size += len(chunk)
        if pending_size >= WRITE_SIZE:
            io.write(fd, b"".join(pending))
            size += pending_size
            pending, pending_size = [], 0
    if pending or not size:
        io.write(fd, b"".join(pending))
        size += pending_size
    return size


def _discard(io: FileIO, tmp: str | None) -> None:
    """Remove a leftover temp file; the original error matters more than this."""
    if tmp is not None:
        with contextlib.suppress(OSError):
            io.unlink(tmp)


def move_aside(
    path: str, reason: str, io: FileIO = DEFAULT_IO, now: float | None = None
) -> str:
    """Rename an unusable file to ``{path}.{reason}-{UTC time}`` and return that.

    Nothing is ever deleted or overwritten, so an operator can still inspect
    or repair the file; a taken name gets ``-1``, ``-2``, ... appended. The
    caller holds the store's ``OwnerLock``, so no one races for the name.
    """
    if not _REASON.fullmatch(reason):
        raise ValueError(f"reason must be letters, digits, '_' or '-': {reason!r}")
    moment = (
        dt.datetime.now(dt.UTC)
        if now is None
        else dt.datetime.fromtimestamp(now, dt.UTC)
    )
    base = f"{path}.{reason}-{moment:%Y%m%dT%H%M%S}"
    try:
        target = base
        n = 0
        while io.exists(target):
            n += 1
            target = f"{base}-{n}"
        io.rename(path, target)
        io.fsync_dir(os.path.dirname(os.path.abspath(path)))
    except OSError as exc:
        raise StoreError(
            f"could not move {path} aside ({reason}): {_describe(exc)}"
        ) from exc
    logger.error("moved %s file %s aside to %s", reason, path, target)
    return target


def read_owner_pid(path: str) -> int | None:
    """The pid recorded in the lock file of store ``path``, if readable.

    For error messages only: the pid may be stale or being rewritten. A lock
    file that is not a regular file (a FIFO would block) gives ``None``.
    """
    try:
        fd = os.open(path + ".lock", os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            raw = os.read(fd, 32)
        finally:
            os.close(fd)
        pid = int(raw.strip() or b"0")
    except (OSError, ValueError):
        return None
    return pid if pid > 0 else None


class OwnerLock:
    """Single-owner lock for a store file, held with ``flock`` on ``path.lock``.

    The sibling file, never the data file: ``os.replace`` swaps in a new inode,
    and a lock on the old one would protect nothing. The kernel drops the lock
    when the process dies, so a crash never leaves a stale lock. Not
    thread-safe: the store calls it under its own lock.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock_path = path + ".lock"
        self._fd: int | None = None
        self._owner_pid: int | None = None

    @property
    def held(self) -> bool:
        """Whether this process owns the lock (a forked child never does)."""
        self._drop_if_inherited()
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise ``StoreLocked``; a no-op if already ours."""
        self._drop_if_inherited()
        if self._fd is not None:
            return
        # Python fds are non-inheritable, so a subprocess a handler spawns
        # cannot keep the lock alive after we die. O_NONBLOCK: a FIFO planted
        # at our path must not block the open (it is refused just below).
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(self.lock_path, flags, 0o600)
        except OSError as exc:
            raise StoreError(
                f"could not open lock file {self.lock_path}: {_describe(exc)}"
            ) from exc
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise StoreError(
                f"could not open lock file {self.lock_path}: it is {_kind(mode)}, "
                "not a regular file"
            )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLocked(self.path, read_owner_pid(self.path)) from None
        except OSError as exc:
            os.close(fd)
            raise StoreError(
                f"could not lock {self.lock_path}: {_describe(exc)}"
            ) from exc
        self._fd = fd
        self._owner_pid = current_pid()
        self._record_pid(fd)

    def release(self) -> None:
        """Give the lock up; a no-op if not held.

        The lock file stays: deleting it would race with a process that has
        just opened it and would then lock an unlinked inode.
        """
        if self._fd is None:
            return
        if self._owner_pid != current_pid():
            self._drop_if_inherited()
            return
        fd = self._fd
        self._fd = None
        self._owner_pid = None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _drop_if_inherited(self) -> None:
        """Forget an fd inherited through ``fork`` without unlocking it.

        A forked child shares the parent's flock through the duplicated fd;
        LOCK_UN here would free the parent's lock too, while a plain close of
        the duplicate leaves it held as long as the parent keeps its fd.
        """
        if self._fd is None or self._owner_pid == current_pid():
            return
        fd = self._fd
        self._fd = None
        self._owner_pid = None
        with contextlib.suppress(OSError):
            os.close(fd)

    def _record_pid(self, fd: int) -> None:
        """Write our pid for others' error messages; failing here is harmless."""
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:
            logger.warning(
                "could not record pid in %s: %s", self.lock_path, _describe(exc)
            )
