"""Exceptions raised by jobq, and the two a handler raises to steer retries."""

from __future__ import annotations

import datetime as dt


class JobqError(Exception):
    """Base class of every error jobq raises on its own account."""


class QueueClosed(JobqError):
    """The queue was closed; create a new one to go on."""


class QueueFull(JobqError):
    """The queue holds its maximum number of pending jobs; nothing was added."""


class StoreLocked(JobqError):
    """Another process owns this single-owner store (the JSON file)."""

    def __init__(self, path: str, owner_pid: int | None) -> None:
        owner = f"process {owner_pid}" if owner_pid else "another process"
        super().__init__(
            f"{path} is in use by {owner}; a JSON store has one owner. "
            "To share a queue between processes use the SQLite store "
            "(store='sqlite:///jobs.db')."
        )
        self.path = path
        self.owner_pid = owner_pid


class MissingExtra(JobqError, ModuleNotFoundError):
    """A part of jobq needs a package that is not installed; the message
    names the extra that brings it (``pip install 'jobq[flask]'``).

    A ``ModuleNotFoundError`` whose ``name`` is the missing module, raised
    when the integration is imported (or the dashboard started); ``extra``
    is the extra's name.
    """

    def __init__(self, message: str, *, name: str | None, extra: str) -> None:
        super().__init__(message, name=name)
        self.extra = extra


class StoreError(JobqError):
    """The store could not do what was asked (a write failed, a file is unusable)."""


class OutcomeUnknown(StoreError):
    """The connection to the store was lost after a change was sent and
    before its answer came: it may or may not have been carried out. An
    enqueue that raises it may have added its job; retried with the same
    ``key``, it finds that job instead of adding a second one. Every other
    ``StoreError`` from a change means that nothing was changed."""


class JobTimeout(JobqError):
    """Raised inside a handler's thread when its job's time limit passes.

    It arrives at the start of the handler's next line of its own code:
    never inside jobq's code, the standard library's or an installed
    library's, nor at a line where it would skip cleanup (a ``with``
    statement's exit, a ``finally`` body). A handler may catch it to clean
    up: what it returns or raises within ``timeout_grace`` is its outcome;
    after that the attempt is recorded as a failed ``JobTimeout`` anyway and
    the thread is abandoned (see the README's section "Time limits").
    """

    #: What it says when raised in a handler's thread, which can only be
    #: given the class; the failed attempt names the job and its limit.
    DEFAULT = "the job ran past its time limit"

    def __init__(self, message: str = DEFAULT) -> None:
        super().__init__(message)


class JobCancelled(JobqError):
    """Raised inside a handler's thread when its job was asked to stop
    (``queue.cancel``, from any process), delivered as ``JobTimeout`` is: at
    the handler's next line of its own code. A handler that returns normally
    afterwards keeps its success; anything it raises ends the job
    ``cancelled``. One that still runs ``timeout_grace`` seconds after the
    request is abandoned. A handler that asks ``jobq.cancel_requested()``
    stops of its own accord instead: the exception is not raised in it (see
    the README's section "Cancelling jobs")."""

    #: What it says when raised in a handler's thread (see ``JobTimeout``).
    DEFAULT = "the job was cancelled"

    def __init__(self, message: str = DEFAULT) -> None:
        super().__init__(message)


class ChildDied(JobqError):
    """The child process running an attempt of an isolated task
    (``@queue.task(isolate=True)``) died before it answered: a segfault,
    an out-of-memory kill, ``os._exit``, or ``close()`` stopping it. The
    attempt fails with it, and is retried like any other."""


class ProcessDied(JobqError):
    """Never raised: the type recorded for an attempt whose process died (or
    stopped renewing its lease) while it ran, so that a recorded error's
    type always names a real class (``jobq.errors.ProcessDied``)."""


class Retry(Exception):
    """Raised by a handler: this attempt failed, try again.

    ``after`` (seconds or a ``timedelta``) replaces the backoff delay exactly;
    the attempt still counts towards ``max_attempts``.
    """

    def __init__(
        self, message: str = "", *, after: float | dt.timedelta | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.after = after


class Fatal(Exception):
    """Raised by a handler: this job can never succeed; bury it now."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message
