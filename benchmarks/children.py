"""Child processes for the multi-process figures: ``Children`` spawns them
(``python -m ...``), each gets ready (starts, imports, opens its store),
says "ready", waits for "go" on stdin, works, and prints one JSON line (a
report) before it exits, so process start-up stays off the clock; every
child still running is killed when the ``with`` block ends.

The parent side (``Children``, ``wait_for``) and the child side
(``protocol_channel``, ``ready_then_wait``, ``send_report``), for jobq's
children (``benchmarks.processes``, ``benchmarks.latency``) and RQ's and
Procrastinate's workers (``benchmarks.brokers``).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from benchmarks.common import DEADLINE

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = DEADLINE  # a child silent for this long is stuck
#: How often a parent looks at a store's count of finished jobs: small
#: against a round of a second or more, cheap for the store.
POLL = 0.005


# -- the plumbing: parent side ------------------------------------------------


class ChildFailed(RuntimeError):
    """A child process exited, hung or said something unexpected."""


class Children:
    """Child processes that get ready (start, import, open their store),
    print "ready", wait for "go" on stdin, work, and print one JSON line (a
    report) before they exit: process start-up stays off the clock.

    A context manager: on exit every child still running is killed, so no
    round leaves a process behind, whatever failed. A child's stderr goes to
    a temporary file, quoted when it fails.
    """

    def __init__(self, commands: Sequence[Sequence[str]]) -> None:
        self.commands = commands
        self.procs: list[subprocess.Popen[str]] = []
        self._stderr: list[IO[str]] = []
        self._files = contextlib.ExitStack()  # the stderr files
        self._reports: dict[int, dict[str, Any]] = {}  # by index in procs

    def __enter__(self) -> Children:
        try:
            for command in self.commands:
                self._spawn(command)
            for proc in self.procs:
                if self._read_line(proc, TIMEOUT) != "ready":
                    raise ChildFailed(self._failure(proc, "did not get ready"))
        except BaseException:
            self._kill_all()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._kill_all()

    def _spawn(self, command: Sequence[str]) -> None:
        file = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115
        stderr = self._files.enter_context(file)  # closed by _kill_all
        self._stderr.append(stderr)
        self.procs.append(
            subprocess.Popen(
                [sys.executable, "-m", *command],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        )

    def go(self) -> float:
        """Let every child start at once; the clock's start."""
        start = time.perf_counter()
        for proc in self.procs:
            if proc.stdin is None:
                raise ChildFailed("no pipe to a child")
            proc.stdin.write("go\n")
            proc.stdin.flush()
        return start

    def first_report(self) -> dict[str, Any]:
        """The report of whichever child finishes first."""
        streams = {
            proc.stdout: i
            for i, proc in enumerate(self.procs)
            if proc.stdout and i not in self._reports
        }
        ready, _, _ = select.select(list(streams), [], [], TIMEOUT)
        if not ready:
            raise ChildFailed(f"no child finished within {TIMEOUT:.0f} s")
        return self._report(streams[ready[0]])

    def reports(self) -> list[dict[str, Any]]:
        """Every child's report, once each has finished."""
        return [self._report(i) for i in range(len(self.procs))]

    def stop(self) -> list[dict[str, Any]]:
        """Ask the children to stop (SIGTERM: a warm shutdown for RQ's and
        Procrastinate's workers), then their reports."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        return self.reports()

    def check(self) -> None:
        """Raise if a child died: a poll loop must not wait for it."""
        for proc in self.procs:
            if proc.poll() not in (None, 0):
                raise ChildFailed(self._failure(proc, "died"))

    def _report(self, i: int) -> dict[str, Any]:
        if i not in self._reports:
            proc = self.procs[i]
            line = self._read_line(proc, TIMEOUT)
            try:
                self._reports[i] = json.loads(line)
            except json.JSONDecodeError:
                raise ChildFailed(self._failure(proc, f"said {line!r}")) from None
        return self._reports[i]

    def _read_line(self, proc: subprocess.Popen[str], timeout: float) -> str:
        if proc.stdout is None:
            raise ChildFailed("no pipe from a child")
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        if not ready:
            raise ChildFailed(self._failure(proc, f"was silent for {timeout:.0f} s"))
        return proc.stdout.readline().strip()

    def _failure(self, proc: subprocess.Popen[str], what: str) -> str:
        index = self.procs.index(proc)
        stderr = self._stderr[index]
        stderr.seek(0)
        tail = stderr.read()[-2000:]
        command = " ".join(self.commands[index])
        return f"child {command!r} {what} (exit {proc.poll()}):\n{tail}"

    def _kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
        self._files.close()


def wait_for(count: Callable[[], int], n: int, children: Children) -> float:
    """Poll ``count`` (jobs finished, as a store records them) until it
    reaches ``n``: how a parent sees another process's workers finish. The
    clock's end; raises if a child dies or time runs out."""
    deadline = time.perf_counter() + TIMEOUT
    while (done := count()) < n:
        children.check()
        if time.perf_counter() > deadline:
            raise ChildFailed(f"only {done} of {n} jobs finished in {TIMEOUT:.0f} s")
        time.sleep(POLL)
    if done > n:
        raise RuntimeError(f"{done} jobs finished, {n} were queued")
    return time.perf_counter()


# -- the plumbing: child side -------------------------------------------------


def protocol_channel() -> IO[str]:
    """The pipe to the parent, kept apart from stdout, which now goes to
    stderr: libraries that log to stdout (RQ does) cannot garble a report."""
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    return channel


def ready_then_wait(channel: IO[str]) -> None:
    """Say "ready" and block until the parent says "go"."""
    channel.write("ready\n")
    channel.flush()
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("the parent went away")


def send_report(channel: IO[str], report: dict[str, Any]) -> None:
    channel.write(json.dumps(report) + "\n")
    channel.flush()


def count_processes(count: int) -> str:
    """Contender names read as prose: "1 process", "2 processes"."""
    return "1 process" if count == 1 else f"{count} processes"
