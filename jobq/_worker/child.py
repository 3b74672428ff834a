"""The child process of isolated tasks (``@queue.task(isolate=True)``): it
runs one attempt at a time for its parent's worker, and may be killed.

Started by ``jobq._worker.isolation`` through ``multiprocessing`` (never
forked from the threaded parent), it first calls the queue's child setup,
if any (a Flask app's context, ``django.setup()``: see
``JobQueue.child_setup``), then answers requests on its pipe until the
parent closes it. A request names the task's function by module and
qualified name, which the child imports (the parent never sends code), and
carries the job's payload as the JSON text it is stored as; the answer is
JSON too: the result's JSON text, or the failure as an ``AttemptError``
would record it, with what steers the retry (``Retry``, ``Fatal``).

At the job's limit the parent sends ``SIGUSR1`` and the child raises
``JobTimeout`` in the task, wherever its main thread is (a signal handler
runs between bytecodes, and interrupts ``time.sleep`` or a blocking
read); a cancellation sends ``SIGUSR2`` for ``JobCancelled``. A task that
does not end within the grace, or code where no signal handler runs, is
killed by the parent.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import signal
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from multiprocessing.connection import Connection
from types import FrameType
from typing import Any

from jobq._failures import describe_failure
from jobq._json import decode, encode
from jobq._time import to_seconds
from jobq.errors import Fatal, JobCancelled, JobTimeout, Retry
from jobq.tasks import task_arguments

#: The signals the parent sends at the limit and at a cancellation.
TIMEOUT_SIGNAL = signal.SIGUSR1
CANCEL_SIGNAL = signal.SIGUSR2

#: What a new child says once it is set up, before its first attempt.
READY = b'{"ready": true}'

#: What each attempt runs in, from the child setup (``None``: nothing).
Around = Callable[[], AbstractContextManager[Any]]


class _Attempt:
    """The attempt the child runs now, for the signal handler: ``None``
    between attempts, when a late signal must not raise."""

    job: dict[str, Any] | None = None


def _interrupt(signum: int, frame: FrameType | None) -> None:
    job = _Attempt.job
    if job is None:
        return
    _Attempt.job = None  # once
    if signum == CANCEL_SIGNAL:
        raise JobCancelled(f"job {job['id']} was cancelled")
    raise JobTimeout(f"job {job['id']} ran past its time limit of {job['timeout']:g} s")


def main(conn: Connection, setup: tuple[str, list[Any]] | None) -> None:
    """The child's life: set up, then run attempts until the pipe closes."""
    signal.signal(TIMEOUT_SIGNAL, _interrupt)
    signal.signal(CANCEL_SIGNAL, _interrupt)
    around: Around | None = None
    failed: BaseException | None = None
    try:
        around = _set_up(setup)
    except BaseException as exc:  # noqa: BLE001 - told to the first attempt
        failed = exc
    conn.send_bytes(READY)  # the signals reach the handlers above from now on
    while True:
        try:
            header = json.loads(conn.recv_bytes())
            if header.get("exit"):
                return
            payload = conn.recv_bytes().decode()
        except (EOFError, OSError):  # the parent closed the pipe, or died
            return
        if failed is not None:  # the setup failed: say so, then go
            conn.send_bytes(_failure(failed, last=True))
            return
        conn.send_bytes(_run(header, payload, around))


def _set_up(setup: tuple[str, list[Any]] | None) -> Around | None:
    """Call the queue's child setup: what each attempt runs in."""
    if setup is None:
        return None
    path, args = setup
    function = _import(path)
    around: Around | None = function(*args)
    return around


def _import(path: str) -> Any:
    """What the import path ``module.name`` (or ``module:qualname``) names."""
    module, _, name = path.partition(":") if ":" in path else path.rpartition(".")
    found: Any = importlib.import_module(module)
    for part in name.split("."):
        found = getattr(found, part)
    return found


def target(module: str, qualname: str) -> Callable[..., Any]:
    """The function of a task, imported by its module and qualified name:
    the task object there stands for it (``@queue.task`` put a ``Task`` in
    the function's place), so its ``func`` is called. ``ImportError`` saying
    so if it cannot be found."""
    try:
        found = _import(f"{module}:{qualname}")
    except Exception as exc:
        raise ImportError(
            f"the child process could not import the task's function "
            f"{module}.{qualname} ({type(exc).__name__}: {exc}); it must be "
            "importable in a new process, as the parent's workers see it"
        ) from exc
    function = getattr(found, "func", None)
    return function if callable(function) else found  # type: ignore[no-any-return]


def _run(header: dict[str, Any], payload: str, around: Around | None) -> bytes:
    """One attempt: the answer to send."""
    try:
        function = target(header["module"], header["qualname"])
        args, kwargs = task_arguments(decode(payload))
        parents = header.get("parents")
        if parents is not None:
            kwargs["parent_results"] = [
                None if result is None or end != "completed" else decode(result)
                for _, end, result in parents
            ]
        with around() if around is not None else contextlib.nullcontext():
            _Attempt.job = header["job"]
            try:
                result = function(*args, **kwargs)
            finally:
                _Attempt.job = None
    except BaseException as exc:  # noqa: BLE001 - every failure is an attempt's
        return _failure(exc)
    if result is None:
        return json.dumps({"ok": True, "result": None}).encode()
    try:
        text = encode(result, "result")
    except Exception:  # noqa: BLE001 - the parent logs it, as for any task
        return json.dumps({"ok": True, "result": None, "json": False}).encode()
    return json.dumps({"ok": True, "result": text}).encode()


def _failure(exc: BaseException, *, last: bool = False) -> bytes:
    """The answer for a failed attempt: ``exc`` as the parent records it;
    ``last``: the child exits after it (its setup failed)."""
    error = describe_failure(exc, time.time())
    kind, after = "error", None
    if isinstance(exc, Fatal):
        kind = "fatal"
    elif isinstance(exc, Retry):
        kind = "retry"
        with contextlib.suppress(TypeError, ValueError):  # bad: the backoff
            after = None if exc.after is None else to_seconds(exc.after, "after")
    return json.dumps({
        "ok": False, "kind": kind, "after": after, "type": error.type,
        "message": error.message, "traceback": error.traceback, "last": last,
    }).encode()  # fmt: skip
