"""Wake-up datagrams between the processes that share one SQLite database.

SQLite tells no process about another's commits: polling ``PRAGMA
data_version`` either wakes up every few milliseconds or delays another
process's job by its interval. So each open store binds a Unix datagram
socket in a directory beside the database file (``jobs.db-wake/``), and a
process that commits a change other processes should hear of sends one small
datagram to every other socket there (``Doorbell.ring``). The kernel wakes
the thread blocked on a socket at once; an idle process costs nothing.

The directory and the sockets take their permissions from the database file:
each class of users (owner, group, others) that may write the database may
ring, and nobody else (mode 0700 and 0600 for a file of mode 0600).

Only stores that run jobs are rung: a socket is bound as
``<pid>.<nonce>.quiet`` and renamed ``<pid>.<nonce>.sock`` the first time its
store claims or is joined (``want_rings``), so that the processes of a web
app that only enqueue are never woken by each other's enqueues.

Ringing is on the hot path of every enqueue, so it is a few system calls:
the list of sockets is kept, and read again only when the directory's
modification time changed (a socket was bound, renamed or removed), or while
that time is too recent to tell a later change within the same clock tick
apart. A socket whose process died without closing (``ECONNREFUSED``) is
removed by the first process that rings it (quiet ones, never rung, by the
next store that opens); a full socket buffer means its reader is awake
already; a socket this process may not write is skipped until the directory
changes.

Unix socket paths are limited to about 108 bytes. A longer one is reached
through this process's descriptor of the directory (``/proc/self/fd/N/...``)
where there is a ``/proc`` (Linux); elsewhere there is no doorbell, and the
store polls instead (see ``wakeups``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import stat
import sys
import threading
import time
from collections.abc import Sequence

logger = logging.getLogger("jobq.stores.sqlite")

#: The suffix of the names of sockets to ring (``<pid>.<nonce>.sock``), of
#: stores that run jobs; nothing else in the directory is rung.
SUFFIX = ".sock"
#: The suffix of sockets of stores that have not run jobs yet.
QUIET = ".quiet"
#: Longest socket path: ``sun_path`` holds 108 bytes on Linux, 104 on macOS
#: and the BSDs, with a terminating NUL.
MAX_ADDRESS = 107 if sys.platform.startswith("linux") else 103
#: A directory modified less than this long ago (ns) is listed again at the
#: next ring: its timestamp's clock ticks coarsely, so a socket bound in the
#: same tick after a listing would leave the timestamp unchanged.
RECENT_NS = 1_000_000_000
#: Meanwhile it is listed again at most this often (ns), not at every ring
#: (an enqueue rings): a socket bound in the same tick is rung this late.
RELIST_NS = 2_000_000
#: Bytes read per datagram; a message is a letter and a count.
MESSAGE_MAX = 32
#: Attempts to bind when the directory vanishes in between (a last process
#: removed it as it closed).
BIND_ATTEMPTS = 3


def directory_of(database: str) -> str:
    """The wake-up directory of a database file: beside it, like ``-wal``."""
    return database + "-wake"


def modes(database: str) -> tuple[int, int]:
    """The directory's and the sockets' modes: rwx and rw- for each class of
    users (owner, group, others) that may write the database file."""
    writable = os.stat(database).st_mode | stat.S_IWUSR
    directory = sockets = 0
    for shift in (6, 3, 0):
        if writable & (0o2 << shift):
            directory |= 0o7 << shift
            sockets |= 0o6 << shift
    return directory, sockets


class Doorbell:
    """This store's socket in the wake-up directory of a database, and the
    other stores' sockets there, to ring after a commit.

    ``Doorbell(database)`` creates the directory if needed and opens it
    (``OSError`` where it cannot: no doorbell then); ``bind`` makes a socket
    others can ring (``OSError`` where it cannot: the doorbell can still
    ring others). Thread-safe: many threads ring while one receives.
    """

    def __init__(self, database: str) -> None:
        self.directory = directory_of(database)
        self._modes = modes(database)
        self._lock = threading.Lock()
        self._dir_fd = -1
        self._open_directory()
        try:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        except BaseException:
            os.close(self._dir_fd)
            raise
        #: This store's socket's name, once bound.
        self.name: str | None = None
        self.rung = False  # whether others ring it (its name ends in SUFFIX)
        #: The other sockets: (name, address) pairs, replaced, never changed.
        self._peers: tuple[tuple[str, str], ...] = ()
        self._listed: int | None = None  # the directory's mtime then; None: list
        #: Whether that listing is final: the mtime was not recent then.
        self._settled = False
        self._relist_at = 0  # when to list again if not settled (monotonic ns)

    def _open_directory(self) -> None:
        directory, _ = self._modes
        try:
            os.mkdir(self.directory, directory)
        except FileExistsError:
            pass
        else:
            os.chmod(self.directory, directory)  # mkdir's mode met the umask
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW
        fd = os.open(self.directory, flags)
        if self._dir_fd >= 0:
            os.close(self._dir_fd)
        self._dir_fd = fd

    def fileno(self) -> int:
        """The socket's descriptor, to wait on for datagrams."""
        return self._sock.fileno()

    def bind(self) -> None:
        """Bind this store's socket (``<pid>.<nonce>.quiet``) in the directory,
        and remove the quiet sockets of processes that died."""
        _, mode = self._modes
        for _ in range(BIND_ATTEMPTS):
            name = f"{os.getpid()}.{secrets.token_hex(4)}{QUIET}"
            try:
                self._sock.bind(self._address(name))
            except FileNotFoundError:
                pass  # the directory was removed (a last process closed)
            else:
                if os.fstat(self._dir_fd).st_nlink:
                    os.chmod(name, mode, dir_fd=self._dir_fd)
                    self.name = name
                    self._sweep()
                    return
                # Removed, and made again by another process before our bind:
                # the socket is in the new directory, ours is gone.
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.directory, name))
                self._sock.close()
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._open_directory()
        raise FileNotFoundError(f"{self.directory} kept vanishing")

    def want_rings(self) -> None:
        """Be rung from now on (once this store runs jobs, or is joined): a
        change another process commits after this returns rings it."""
        if self.rung:
            return
        with self._lock:
            name = self.name
            if name is not None and name.endswith(QUIET) and self._dir_fd >= 0:
                rung = name[: -len(QUIET)] + SUFFIX
                fd = self._dir_fd
                try:
                    os.rename(name, rung, src_dir_fd=fd, dst_dir_fd=fd)
                except OSError as exc:
                    logger.warning(
                        "jobq cannot rename its wake-up socket in %s (%s): jobs "
                        "other processes enqueue are noticed within a second",
                        self.directory,
                        exc,
                    )
                else:
                    self.name = rung
            self.rung = True  # tried (or nothing to rename): never again

    def _sweep(self) -> None:
        """Remove quiet sockets nobody reads (their processes died); rung
        ones are removed by whoever rings them next."""
        try:
            with os.scandir(self._dir_fd) as entries:
                names = [e.name for e in entries if e.name.endswith(QUIET)]
        except OSError:
            return
        for name in names:
            if name == self.name:
                continue
            try:  # an empty datagram: its reader, if any, ignores it
                self._sock.sendto(b"", socket.MSG_DONTWAIT, self._address(name))
            except ConnectionRefusedError:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=self._dir_fd)
            except OSError:
                pass

    def _address(self, name: str) -> str:
        """The path to bind or ring ``name`` at: through the directory's
        name, or through our descriptor of it when that is too long."""
        address = os.path.join(self.directory, name)
        if len(os.fsencode(address)) <= MAX_ADDRESS:
            return address
        short = f"/proc/self/fd/{self._dir_fd}/{name}"
        if len(short) <= MAX_ADDRESS and os.path.isdir(f"/proc/self/fd/{self._dir_fd}"):
            return short
        raise OSError(f"{address!r} is too long for a Unix socket")

    def ring(self, message: bytes) -> None:
        """Send ``message`` to every other socket, never waiting."""
        for name, address in self._others():
            try:
                self._sock.sendto(message, socket.MSG_DONTWAIT, address)
            except BlockingIOError:
                pass  # its buffer is full: its reader is awake already
            except ConnectionRefusedError:
                self._forget(name, remove=True)  # nobody reads it: dead
            except OSError as exc:
                # Gone (ENOENT), not ours to write (EACCES), or the doorbell
                # was closed under us (EBADF): skip it until the next listing.
                logger.debug("cannot ring %s in %s: %s", name, self.directory, exc)
                self._forget(name, remove=False)

    def receive(self) -> list[bytes]:
        """The datagrams waiting, without waiting (none: an empty list)."""
        messages = []
        while True:
            try:
                messages.append(self._sock.recv(MESSAGE_MAX, socket.MSG_DONTWAIT))
            except (BlockingIOError, InterruptedError):
                return messages

    def _others(self) -> Sequence[tuple[str, str]]:
        """The other sockets, listed again if the directory changed."""
        try:
            modified = os.fstat(self._dir_fd).st_mtime_ns
        except OSError:
            return ()  # closed
        if modified == self._listed and (
            self._settled or time.monotonic_ns() < self._relist_at
        ):
            return self._peers
        with self._lock:
            if self._dir_fd < 0:
                return ()
            peers = []
            try:
                with os.scandir(self._dir_fd) as entries:
                    for entry in entries:
                        name = entry.name
                        if name.endswith(SUFFIX) and name != self.name:
                            peers.append((name, self._address(name)))
            except OSError as exc:
                logger.debug("cannot list %s: %s", self.directory, exc)
                return self._peers
            self._peers = tuple(peers)
            self._listed = modified
            self._settled = time.time_ns() - modified >= RECENT_NS
            self._relist_at = time.monotonic_ns() + RELIST_NS
            return self._peers

    def _forget(self, name: str, *, remove: bool) -> None:
        with self._lock:
            self._peers = tuple(p for p in self._peers if p[0] != name)
            if remove and self._dir_fd >= 0:
                # Removed by another process already, or not ours to remove.
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=self._dir_fd)

    def close(self) -> None:
        """Remove this store's socket, and the directory if it is empty now;
        idempotent."""
        with self._lock:
            name, self.name = self.name, None
            fd, self._dir_fd = self._dir_fd, -1
            self._peers, self._listed = (), None
            if fd < 0:
                return
            try:
                if name is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=fd)
                with contextlib.suppress(OSError):  # others' sockets are in it
                    os.rmdir(self.directory)
            finally:
                self._sock.close()
                os.close(fd)

    def abandon(self) -> None:
        """In a forked child: close this process's copies of the descriptors,
        removing nothing (the socket is the parent's)."""
        with contextlib.suppress(OSError):
            self._sock.close()
        fd, self._dir_fd = self._dir_fd, -1
        self.name = None
        self._peers = ()
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
