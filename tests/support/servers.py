"""Helpers of the tests that start real servers (gunicorn, runserver)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import jobq

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def post(url: str) -> dict[str, Any] | None:
    """The JSON answer to a POST; ``None`` while nothing listens."""
    request = urllib.request.Request(url, data=b"", method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            answer: dict[str, Any] = json.loads(response.read())
            return answer
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionError):
            return None
        raise


def stop(server: subprocess.Popen[bytes], sig: signal.Signals, timeout: float) -> int:
    """Send ``sig``; the exit status, or kill and fail after ``timeout``."""
    if server.poll() is None:
        os.killpg(server.pid, sig)
    try:
        return server.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
        pytest.fail(f"no exit within {timeout} s of {sig.name}")


def wait_until_done(store: str, ids: list[int]) -> dict[int, jobq.JobRecord[Any]]:
    """Every job completed (polling the store), with its record."""
    records: dict[int, jobq.JobRecord[Any]] = {}
    with jobq.JobQueue[Any](store=store) as queue:

        def done() -> bool:
            for job_id in ids:
                record = queue.get(job_id)
                if record is None or record.state != jobq.JobState.COMPLETED:
                    return False
                records[job_id] = record
            return True

        assert wait_for(done), {i: queue.get(i) for i in ids}
    return records


def wait_for_server(url: str, server: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The first POST that gets through (the server is starting)."""
    answers: list[dict[str, Any]] = []

    def first() -> bool:
        assert server.poll() is None, "the server exited"
        answer = post(url)
        if answer is not None:
            answers.append(answer)
        return bool(answers)

    assert wait_for(first, timeout=10)
    return answers[0]


def start_gunicorn(
    folder: Path, app: str, options: list[str], env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], int]:
    """gunicorn serving ``app`` (``module:factory()`` in ``folder``, with
    ``folder/gunicorn.conf.py``) on a free local port, in a session of its
    own, logging to ``folder/gunicorn.log``; ``env`` is added to this
    process's environment, with this checkout and ``folder`` on the path."""
    port = free_port()
    environment = dict(os.environ)
    environment.update(
        env,
        PYTHONPATH=os.pathsep.join([str(ROOT), str(folder)]),
        PYTHONUNBUFFERED="1",
    )
    with (folder / "gunicorn.log").open("wb") as output:
        server = subprocess.Popen(
            [
                *[sys.executable, "-m", "gunicorn", *options],
                *["-b", f"127.0.0.1:{port}", "-c", "gunicorn.conf.py"],
                # gunicorn's own control-socket thread (in ~/.gunicorn/ by
                # default, shared) off: the master's thread count is exact
                "--no-control-socket",
                app,
            ],
            cwd=folder,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return server, port
