"""Helpers of the tests that start real servers (gunicorn, runserver)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

import jobq


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
