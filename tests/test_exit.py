"""Interpreter exit: a script that never calls ``stop()`` still ends promptly,
lets running jobs finish, and leaves its JSON file saved.

Each test runs a real script in a fresh interpreter. The JSON scripts use a
``save_interval`` of an hour, so anything in the file was written by the
queue's own stop at exit, not by the background writer.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import jobq

ROOT = Path(__file__).resolve().parents[1]
WAIT = 20  # seconds; a cap so that a hanging exit fails the test
PROMPT = 5.0  # seconds from the script's last line to its exit; EXIT_TIMEOUT is 10

# Runs quick jobs and one slow job on argv[1] ("memory" or a JSON path), then
# ends while the slow job is still running. Prints the job ids when the slow
# job has started; the handler prints "finished slow" when it returns.
FINISHES = """
import json, sys, threading, time
import jobq
from jobq.stores import JsonFileStore

target = sys.argv[1]
store = None if target == "memory" else JsonFileStore(target, save_interval=3600)
started, gate, quick_ran = threading.Event(), threading.Event(), threading.Event()
ran = []

def handler(job):
    if job.payload == "slow":
        started.set()
        gate.wait()
        print("finished slow", flush=True)
    else:
        ran.append(job.id)
        if len(ran) == 3:
            quick_ran.set()

queue = jobq.JobQueue(handler, store=store).start(workers=2)
quick = [queue.enqueue(f"quick {n}").id for n in range(3)]
later = queue.enqueue("later", delay=3600).id
quick_ran.wait()  # else a stop may give back a quick one not started yet
slow = queue.enqueue("slow").id
started.wait()
ids = {"quick": quick, "later": later, "slow": slow}
print(json.dumps({**ids, "at": time.monotonic()}), flush=True)
gate.set()
"""

# Enqueues into the JSON file argv[1] without any worker running (argv[2]:
# "never-started", or "stopped" after a start and stop), then ends.
ENQUEUES_ONLY = """
import json, sys, time
import jobq
from jobq.stores import JsonFileStore

store = JsonFileStore(sys.argv[1], save_interval=3600)
queue = jobq.JobQueue(lambda job: None, store=store)
if sys.argv[2] == "stopped":
    queue.start(workers=1)
    queue.stop()
job = queue.enqueue("for the worker process")
print(json.dumps({"id": job.id, "at": time.monotonic()}), flush=True)
"""

# A handler that never returns; the exit wait is cut to half a second.
BLOCKS = """
import json, sys, threading, time
import jobq, jobq.queue
from jobq.stores import JsonFileStore

jobq.queue.EXIT_TIMEOUT = 0.5
started = threading.Event()

def handler(job):
    started.set()
    threading.Event().wait()

store = JsonFileStore(sys.argv[1], save_interval=3600)
queue = jobq.JobQueue(handler, store=store).start(workers=1)
job = queue.enqueue("stuck")
started.wait()
print(json.dumps({"id": job.id, "at": time.monotonic()}), flush=True)
"""


@dataclass
class Ended:
    returncode: int
    ids: dict[str, Any]  # what the script printed first
    output: str  # the rest of its output
    errors: str
    exit_seconds: float  # from the script's first line to its exit


def _run(script: str, *args: str) -> Ended:
    """Run ``script`` to its end.

    Its first line is JSON with ``at``, its ``time.monotonic()`` then (a
    system-wide clock), so the time it took to exit needs no reading of the
    output while it runs.
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        output, errors = proc.communicate(timeout=WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the script did not exit")
    exited = time.monotonic()
    first, _, rest = output.partition("\n")
    if not first:
        pytest.fail(f"the script failed before its first line:\n{errors}")
    ids = json.loads(first)
    return Ended(proc.returncode, ids, rest, errors, exited - ids.pop("at"))


def _rows(path: Path) -> dict[int, dict[str, Any]]:
    return {row["id"]: row for row in json.loads(path.read_bytes())["jobs"]}


def test_script_that_never_stops_its_queue_exits_promptly_and_cleanly() -> None:
    ended = _run(FINISHES, "memory")

    assert ended.returncode == 0, ended.errors
    assert ended.exit_seconds < PROMPT
    assert ended.errors == ""


def test_running_job_finishes_before_the_interpreter_exits() -> None:
    ended = _run(FINISHES, "memory")

    assert ended.output.splitlines() == ["finished slow"]


def test_exit_without_stop_saves_the_json_file(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"

    ended = _run(FINISHES, str(path))

    assert ended.returncode == 0, ended.errors
    assert ended.exit_seconds < PROMPT
    rows = _rows(path)
    assert list(rows) == [ended.ids["later"]]  # finished jobs are gone
    assert rows[ended.ids["later"]]["state"] == "pending"


@pytest.mark.parametrize("workers", ["never-started", "stopped"])
def test_jobs_enqueued_without_running_workers_are_saved_at_exit(
    tmp_path: Path, workers: str
) -> None:
    path = tmp_path / "jobs.json"

    ended = _run(ENQUEUES_ONLY, str(path), workers)

    assert ended.returncode == 0, ended.errors
    assert path.exists(), "the enqueued job was lost at exit"
    assert _rows(path)[ended.ids["id"]]["payload"] == "for the worker process"


@pytest.fixture(scope="module")
def blocked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Ended, Path]:
    """One run of the script whose handler never returns, and its file."""
    path = tmp_path_factory.mktemp("blocked") / "jobs.json"
    return _run(BLOCKS, str(path)), path


def test_handler_that_never_returns_does_not_hang_exit(
    blocked: tuple[Ended, Path],
) -> None:
    ended, path = blocked

    assert ended.returncode == 0, ended.errors
    assert ended.exit_seconds < PROMPT  # bounded by EXIT_TIMEOUT (0.5 s here)
    assert _rows(path)[ended.ids["id"]]["state"] == "running"


def test_job_blocked_at_exit_runs_again_on_next_start(
    blocked: tuple[Ended, Path], tmp_path: Path
) -> None:
    ended, original = blocked
    path = tmp_path / "jobs.json"
    shutil.copyfile(original, path)  # leave the shared run's file as it was
    queue: jobq.JobQueue[Any] = jobq.JobQueue(store=path)

    try:
        record = queue.get(ended.ids["id"])
    finally:
        queue.close()

    assert record is not None
    assert record.state is jobq.JobState.PENDING
    assert record.attempts == 1
    assert record.last_error is not None
    assert "process died" in record.last_error
