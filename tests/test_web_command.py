"""``jobq dashboard``: a process of its own, its printed token, loopback by
default, read-only on a JSON file."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import pytest

import jobq
from jobq import Fatal, Job
from jobq.stores import JsonFileStore, SqliteStore

Start = Callable[..., tuple[str, str]]


def die(job: Job[Any]) -> None:
    raise Fatal("<script>alert(1)</script>")


@pytest.fixture
def start_dashboard() -> Iterator[Start]:
    """Starts ``jobq dashboard ARGS`` and returns its base URL and token,
    read from the line it prints once it listens; stops it afterwards."""
    processes: list[subprocess.Popen[str]] = []

    def start(*args: str, waitress: bool = True) -> tuple[str, str]:
        # Without waitress (as if not installed): the standard library's server.
        hide = "" if waitress else "sys.modules['waitress'] = None; "
        code = f"import sys; {hide}from jobq.cli import main; sys.exit(main())"
        process = subprocess.Popen(
            [sys.executable, "-c", code, "dashboard", "--bind", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        processes.append(process)
        assert process.stdout is not None
        line = process.stdout.readline()
        found = re.fullmatch(
            r"jobq dashboard: serving (http://[^/]+/)(?:\?token=(\S+))?\n", line
        )
        assert found is not None, line + (
            process.stderr.read() if process.stderr else ""
        )
        return found.group(1), found.group(2) or ""

    yield start
    for process in processes:
        process.terminate()
        process.communicate(timeout=10)


def opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))


def status(browser: urllib.request.OpenerDirector, url: str) -> int:
    try:
        with browser.open(url, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code


def sqlite_with_a_dead_job(tmp_path: Path) -> str:
    path = tmp_path / "jobs.db"
    with jobq.JobQueue(die, store=SqliteStore(path)) as queue:
        queue.enqueue("x")
        queue.run_pending()
    return f"sqlite:///{path}"


@pytest.mark.parametrize("waitress", [True, False], ids=["waitress", "wsgiref"])
def test_the_command_serves_with_the_token_it_prints(
    tmp_path: Path, start_dashboard: Start, waitress: bool
) -> None:
    store = sqlite_with_a_dead_job(tmp_path)
    base, token = start_dashboard("--store", store, waitress=waitress)
    browser = opener()

    assert len(token) >= 16
    assert status(browser, base) == 403
    assert status(browser, base + "static/dashboard.js") == 403
    with browser.open(f"{base}?token={token}", timeout=10) as answer:
        page = answer.read().decode()  # redirected to /, the cookie kept
    assert 'data-count="dead">1<' in page
    with browser.open(base + "job/1", timeout=10) as answer:
        job = answer.read().decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in job
    assert 'action="/job/1/retry"' in job


def test_the_command_on_a_json_file_is_read_only_and_says_so(
    tmp_path: Path, start_dashboard: Start
) -> None:
    path = tmp_path / "jobs.json"
    with jobq.JobQueue(die, store=JsonFileStore(path)) as queue:
        queue.enqueue("x")
        queue.run_pending()
    base, _ = start_dashboard("--store", str(path), "--no-token")

    with opener().open(base + "job/1", timeout=10) as answer:
        page = answer.read().decode()

    assert "read-only" in page
    assert "JSON file store" in page
    assert 'method="post"' not in page


def test_a_bad_bind_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jobq.cli", "dashboard", "--bind", "nowhere",
         "--store", sqlite_with_a_dead_job(tmp_path)],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip

    assert done.returncode == 2
    assert "--bind must be HOST:PORT" in done.stderr
