"""Making objects safe to use in a child after ``os.fork()`` (gunicorn ``--preload``).

A forked child has only the thread that forked; every other thread is gone,
and a lock one of them held stays held forever. Objects that own threads,
locks, files or connections register here and rebuild them in the child.
"""

from __future__ import annotations

import logging
import os
import weakref
from typing import Protocol

logger = logging.getLogger("jobq")


class ForkAware(Protocol):
    def _after_fork_in_child(self) -> None:
        """Drop what belonged to the parent's threads; reopen lazily on next use."""


_registered: weakref.WeakSet[ForkAware] = weakref.WeakSet()
_pid = os.getpid()


def current_pid() -> int:
    """``os.getpid()`` without its system call (the owner lock of a JSON
    store asks at every change); right in a forked child too, even in the
    child hooks below, which run after it is updated."""
    return _pid


def reset_after_fork(obj: ForkAware) -> None:
    """Call ``obj._after_fork_in_child()`` in every child forked from now on."""
    _registered.add(obj)


def _reset_all() -> None:
    global _pid  # the one process id, updated in the child
    _pid = os.getpid()
    for obj in list(_registered):
        try:
            obj._after_fork_in_child()
        except Exception:
            logger.exception("resetting %r after fork failed", obj)


os.register_at_fork(after_in_child=_reset_all)
