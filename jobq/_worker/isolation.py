"""Isolated tasks (``@queue.task(isolate=True)``): each attempt runs in a
child process, which can be stopped for sure.

A thread cannot be killed, so a handler blocked in C code keeps its thread
once abandoned (see ``jobq._worker.limits``). An isolated task's attempt
runs in a child process instead (``jobq._worker.child``), started through
``multiprocessing`` with the forkserver (spawn where there is none), never
forked from this threaded process, and reused by later attempts while it
is healthy. The worker thread that runs the attempt waits for the child's
answer: at the job's limit it signals the child (``JobTimeout`` there), at
a cancellation likewise (``JobCancelled``), and if the child has not
answered ``grace`` seconds later it kills it; a child that dies (a
segfault, an out-of-memory kill, ``os._exit``) fails the attempt with
``ChildDied``. The worker thread itself is never abandoned.

Only JSON crosses: the job's payload as it is stored, and back the result's
JSON text or the failure as it is recorded. The child finds the task's
function by importing its module and qualified name; the queue's child
setup (``JobQueue.child_setup``) gives it an app context first.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

from jobq._failures import Reported
from jobq._json import decode
from jobq._worker import child as child_process
from jobq._worker.limits import isolating
from jobq.errors import ChildDied, Fatal, JobCancelled, JobTimeout, Retry
from jobq.stores.base import Claim
from jobq.types import AttemptError

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext
    from multiprocessing.process import BaseProcess

    from jobq.tasks import Task

#: Seconds a child asked to exit (an idle one, at ``stop`` or ``close``)
#: has before it is killed.
EXIT_WAIT = 1.0

#: Seconds a new child has to start and set up (import jobq, run the
#: queue's child setup) before its first attempt fails: its start does not
#: count towards that attempt's time limit.
READY_WAIT = 60.0

#: Seconds ``close`` waits for the attempts whose children it killed to
#: let them go.
CLOSE_WAIT = 5.0


def _context() -> BaseContext:
    """The forkserver where there is one (a fork of a small server process
    that never ran a thread), else spawn; never a fork of this process."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context(
        "forkserver" if "forkserver" in methods else "spawn"
    )


class ChildError(Reported):
    """A failure of the task in its child, recorded as it was there."""


class ChildRetry(Reported, Retry):
    """The task raised ``Retry`` in its child (``after``: its delay)."""


class ChildFatal(Reported, Fatal):
    """The task raised ``Fatal`` in its child: the job is dead at once."""


class _NotJson:
    """What an attempt whose result was no JSON value returned: the runner
    keeps ``None`` and logs it, as for a task run in a thread."""


class Child:
    """One child process, its pipe, and how to stop its attempt.

    Only the thread that runs its attempt (or holds it idle) touches the
    process object (a forkserver child's exit status is read once, from a
    pipe); other threads ``cancel`` or ``abort`` it, which wakes that
    thread."""

    def __init__(
        self, context: BaseContext, setup: tuple[str, list[Any]] | None
    ) -> None:
        _kill_children_at_exit()
        ours, theirs = context.Pipe()
        self.process: BaseProcess = context.Process(  # type: ignore[attr-defined]
            target=child_process.main, args=(theirs, setup), name="jobq-isolated"
        )
        self.process.start()
        theirs.close()
        self.conn = ours
        self.pid: int = self.process.pid
        self._wake_r, self._wake_w = os.pipe()
        #: The attempt it runs now was asked to stop (``cancel``).
        self.asked = False
        #: The queue closed: kill it now (``abort``).
        self.aborted = False
        #: It said it is set up (``child.READY``): a signal reaches its
        #: handlers, not the default action that ends the process.
        self.ready = False
        #: Its pipes were closed (``close``); with the lock, against ``cancel``.
        self._released = False
        self._lock = threading.Lock()

    def cancel(self) -> None:
        """From any thread: stop the attempt this child runs (a cancellation)."""
        self._wake("asked")

    def abort(self) -> None:
        """From any thread: have the thread running its attempt kill it."""
        self._wake("aborted")

    def _wake(self, flag: str) -> None:
        with self._lock:  # never a write to a descriptor closed meanwhile
            if self._released:
                return
            setattr(self, flag, True)
            with contextlib.suppress(OSError):  # full: it is awake already
                os.write(self._wake_w, b"x")

    def send(self, header: dict[str, Any], payload: str) -> None:
        self.conn.send_bytes(json.dumps(header).encode())
        self.conn.send_bytes(payload.encode())

    def wait(self, timeout: float | None) -> None:
        """Until the child answers, dies or is asked to stop, or ``timeout``."""
        ready = multiprocessing.connection.wait(
            [self.conn, self.process.sentinel, self._wake_r], timeout
        )
        if self._wake_r in ready:
            os.read(self._wake_r, 512)

    def answered(self) -> bool:
        return bool(self.conn.poll())

    def receive(self) -> dict[str, Any] | None:
        """Its answer; ``None`` if it died instead (the pipe's end)."""
        try:
            answer: dict[str, Any] = json.loads(self.conn.recv_bytes())
        except (EOFError, OSError):
            return None
        return answer

    def alive(self) -> bool:
        return self.process.is_alive()

    def signal(self, signum: int) -> None:
        """Send ``signum``, unless it has ended (its pid may be another's)."""
        if self.process.is_alive():
            with contextlib.suppress(OSError):  # it died meanwhile
                os.kill(self.pid, signum)

    def how_it_ended(self) -> str:
        code = self.process.exitcode
        if code is None:
            return "it did not answer"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by signal {signal.Signals(-code).name}"
            return f"killed by signal {-code}"
        return f"exited with status {code}"

    def kill(self) -> None:
        self.process.kill()
        self.process.join()

    def close(self) -> None:
        """Ask it to exit (killing it if it does not within ``EXIT_WAIT``)
        and release its pipes; once."""
        if self._released:
            return
        if self.process.exitcode is None:
            with contextlib.suppress(OSError):  # it is gone already
                self.conn.send_bytes(json.dumps({"exit": True}).encode())
            self.process.join(EXIT_WAIT)
            if self.process.exitcode is None:
                self.kill()
        with self._lock:
            self._released = True
            self.conn.close()
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)
        self.process.close()


class Isolation:
    """The child processes of one queue's isolated tasks: idle ones, kept
    for the next attempt, and busy ones, each running an attempt."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        #: The queue's child setup (``JobQueue.child_setup``): an import
        #: path and its JSON arguments, or ``None``.
        self.setup: tuple[str, list[Any]] | None = None
        self._context: BaseContext | None = None
        self._lock = threading.Lock()
        #: Notified as a busy child is let go (``close`` waits for it).
        self._given_back = threading.Condition(self._lock)
        self._idle: list[Child] = []
        self._busy: set[Child] = set()
        self._closed = False
        #: A forked process's copy never lets the parent's children go.
        self._pid = os.getpid()
        _isolations.add(self)

    def run(self, claim: Claim, task: Task[..., Any]) -> Any:
        """One attempt of ``claim``, a job of the isolated ``task``, in a
        child: what it returned, or its failure raised here."""
        function = task.func
        header = {
            "job": {"id": claim.id, "timeout": claim.timeout},
            "module": function.__module__,
            "qualname": function.__qualname__,
            "parents": [list(p) for p in claim.parents]
            if task.takes_parent_results
            else None,
        }
        child = self._take()
        child.asked = False  # not told of yet: no cancellation reaches it
        limit = isolating(claim)  # a worker thread's: cancellations reach the child
        if limit is not None:
            limit.isolate(child)
        reusable = False
        try:
            answer, reusable = self._attempt(child, claim, header)
        finally:
            self._give_back(child, reusable)
            if limit is not None:  # after: the thread's limit never sees it
                limit.isolate(None)
        return _outcome(answer)

    def _attempt(
        self, child: Child, claim: Claim, header: dict[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        """Send the attempt to ``child`` and wait for its answer, stopping
        it at the limit or at a cancellation; the answer, and whether the
        child may run another attempt (it was not interrupted)."""
        if not child.ready:
            self._until_ready(child, claim)
        deadline = math.inf
        if claim.timeout is not None:
            deadline = time.monotonic() + claim.timeout
        with contextlib.suppress(OSError):  # it died: seen below
            child.send(header, claim.payload)
        stop: type[JobTimeout | JobCancelled] | None = None
        kill_at = math.inf
        while True:
            now = time.monotonic()
            if child.aborted:
                child.kill()
                raise self._died(claim, child)
            if stop is None and (child.asked or now >= deadline):
                stop = JobCancelled if child.asked else JobTimeout
                signum = child_process.CANCEL_SIGNAL
                if stop is JobTimeout:
                    signum = child_process.TIMEOUT_SIGNAL
                child.signal(signum)
                kill_at = now + self.grace
            if now >= kill_at:
                child.kill()
                raise _killed(claim, child, stop, self.grace)
            until = deadline if stop is None else kill_at
            child.wait(None if until == math.inf else max(until - now, 0.0))
            if child.answered():
                answer = child.receive()
                if answer is None:
                    raise self._died(claim, child)
                return answer, stop is None and not answer.get("last")
            if not child.alive():
                raise self._died(claim, child)

    def _until_ready(self, child: Child, claim: Claim) -> None:
        """Wait for a new child to be set up (``READY_WAIT`` at most; its
        start does not count towards the attempt's limit): until then a
        signal would end it, so a cancellation kills it at once."""
        deadline = time.monotonic() + READY_WAIT
        while True:
            now = time.monotonic()
            if child.aborted:
                child.kill()
                raise self._died(claim, child)
            if child.asked:
                child.kill()
                raise JobCancelled(
                    f"job {claim.id} was cancelled while its child process "
                    f"{child.pid} started: it was killed"
                )
            if now >= deadline:
                child.kill()
                raise ChildDied(
                    f"job {claim.id}: its child process {child.pid} was not set "
                    f"up within {READY_WAIT:g} s, and was killed"
                )
            child.wait(deadline - now)
            if child.answered():
                if child.receive() is None:
                    raise self._died(claim, child)
                child.ready = True
                return
            if not child.alive():
                raise self._died(claim, child)

    def _died(self, claim: Claim, child: Child) -> ChildDied:
        child.process.join()
        how = "killed as the queue closed" if self._closed else child.how_it_ended()
        return ChildDied(
            f"job {claim.id}: its child process {child.pid} died while running "
            f"it ({how})"
        )

    def _take(self) -> Child:
        """An idle child that is alive, or a new one."""
        stale: list[Child] = []
        found = None
        with self._lock:
            self._refuse_if_closed()
            while self._idle and found is None:
                candidate = self._idle.pop()
                if candidate.alive():
                    found = candidate
                else:
                    stale.append(candidate)
            if found is not None:
                self._busy.add(found)
            context = self._context = self._context or _context()
        for child in stale:
            child.close()
        if found is not None:
            return found
        new = Child(context, self.setup)
        with self._lock:
            closed = self._closed
            if not closed:
                self._busy.add(new)
        if closed:
            new.close()
            self._refuse_if_closed()
        return new

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise ChildDied("the queue was closed: no child process starts")

    def _give_back(self, child: Child, reusable: bool) -> None:
        """Keep ``child`` for the next attempt if it may run one, else let
        it go."""
        with self._lock:
            keep = reusable and not self._closed and child.alive()
            if keep:
                self._busy.discard(child)
                self._idle.append(child)
        if not keep:
            child.close()
            with self._lock:
                self._busy.discard(child)
                self._given_back.notify_all()

    def close_idle(self) -> None:
        """Let the idle children go (the queue stopped); busy ones finish."""
        if self._pid != os.getpid():
            return
        with self._lock:
            idle, self._idle = self._idle, []
        for child in idle:
            child.close()

    def close(self) -> None:
        """Let every child go, killing those that run an attempt (each
        attempt fails with ``ChildDied``: its thread kills it, waited for up
        to ``CLOSE_WAIT``, then it is killed from here); no child starts
        afterwards."""
        if self._pid != os.getpid():
            return
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = list(self._busy)
        for child in busy:
            child.abort()
        for child in idle:
            child.close()
        with self._given_back:
            self._given_back.wait_for(lambda: not self._busy, CLOSE_WAIT)
            stuck = list(self._busy)
        for child in stuck:  # its thread did not come: no child outlives us
            with contextlib.suppress(OSError):
                os.kill(child.pid, signal.SIGKILL)


def _killed(
    claim: Claim,
    child: Child,
    stop: type[JobTimeout | JobCancelled] | None,
    grace: float,
) -> JobTimeout | JobCancelled:
    """The failure of an attempt whose child was killed after the grace."""
    if stop is JobCancelled:
        return JobCancelled(
            f"job {claim.id} was cancelled and did not stop within the {grace:g} s "
            f"grace: its child process {child.pid} was killed"
        )
    return JobTimeout(
        f"job {claim.id} ran past its time limit of {claim.timeout:g} s and did "
        f"not return within the {grace:g} s grace: its child process "
        f"{child.pid} was killed"
    )


def _outcome(answer: dict[str, Any]) -> Any:
    """What the attempt returned, as a task run here would, or its failure
    raised as it was recorded in the child."""
    if answer["ok"]:
        if answer.get("json") is False:
            return _NotJson()
        text = answer["result"]
        return None if text is None else decode(text)
    error = AttemptError(answer["type"], answer["message"], answer["traceback"], 0.0)
    if answer["kind"] == "fatal":
        raise ChildFatal(error)
    if answer["kind"] == "retry":
        retry = ChildRetry(error)
        retry.after = answer["after"]
        raise retry
    raise ChildError(error)


#: Every queue's children, for the exit hook.
_isolations: weakref.WeakSet[Isolation] = weakref.WeakSet()
_exit_hook = threading.Lock()
_hooked = False


def _kill_children_at_exit() -> None:
    """Register, once, an exit hook that lets every child go: registered
    after ``multiprocessing``'s own (which joins the children it started),
    so it runs before it, and a child busy for good never holds the exit."""
    global _hooked
    with _exit_hook:
        if not _hooked:
            import multiprocessing.util  # noqa: F401 - its exit hook first

            atexit.register(_close_all)
            _hooked = True


def _close_all() -> None:
    for isolation in list(_isolations):
        isolation.close()
