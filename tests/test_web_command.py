"""``jobq dashboard``: a process of its own, its printed token, loopback by
default, read-only on a JSON file."""

from __future__ import annotations

import os
import re
import socket
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
from jobq import Fatal, Job, cli
from jobq.stores import JsonFileStore, SqliteStore

Start = Callable[..., tuple[str, str]]

ROOT = Path(__file__).resolve().parents[1]


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


@pytest.fixture
def port_in_use() -> Iterator[int]:
    """A port of 127.0.0.1 that something else listens on."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield int(taken.getsockname()[1])


@pytest.mark.parametrize("waitress", [True, False], ids=["waitress", "wsgiref"])
@pytest.mark.parametrize(
    ("bind", "code", "says"),
    [
        ("in use", 1, "cannot listen there: Address already in use; stop what uses "),
        ("192.0.2.1:0", 1, "not an address of this host; give one of its addresses"),
        ("999.1.1.1:0", 2, "error: --bind '999.1.1.1:0': '999.1.1.1' is not an IP"),
        ("[zz]:0", 2, "error: --bind '[zz]:0': 'zz' is not an IP address"),
    ],
    ids=["in-use", "not-this-host", "no-ipv4", "no-ipv6"],
)
def test_a_bind_the_command_cannot_listen_on_is_one_line_and_creates_nothing(
    tmp_path: Path,
    port_in_use: int,
    bind: str,
    code: int,
    says: str,
    waitress: bool,
) -> None:
    store = sqlite_with_a_dead_job(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    bind = f"127.0.0.1:{port_in_use}" if bind == "in use" else bind
    hide = "" if waitress else "sys.modules['waitress'] = None; "
    code_text = f"import sys; {hide}from jobq.cli import main; sys.exit(main())"
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])

    done = subprocess.run(
        [sys.executable, "-c", code_text, "dashboard", "--bind", bind,
         "--store", store],
        capture_output=True, text=True, timeout=30, check=False,
        env={**os.environ, "PYTHONPATH": path},
    )  # fmt: skip

    assert done.returncode == code
    assert done.stdout == ""
    assert done.stderr.startswith("jobq dashboard: ")
    assert done.stderr.count("\n") == 1  # one line, no traceback
    assert says in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_host_that_does_not_resolve_is_one_line_and_exits_1(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unknown(*args: object, **kwargs: object) -> object:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unknown)  # no DNS asked

    status = cli.main(
        ["dashboard", "--bind", "nowhere.invalid:0", "--store",
         sqlite_with_a_dead_job(tmp_path)]
    )  # fmt: skip

    assert status == 1
    assert capsys.readouterr().err == (
        "jobq dashboard: --bind 'nowhere.invalid:0': cannot resolve host "
        "'nowhere.invalid' (Name or service not known); give one of this host's "
        "addresses (127.0.0.1, 0.0.0.0, [::1]) or its name\n"
    )
