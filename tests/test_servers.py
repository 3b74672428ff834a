"""Real servers (issue 5): gunicorn ``--preload`` with the README's hooks, and
Django's ``runserver`` with its autoreloader.

The checks: every job runs exactly once, in a serving process (a gunicorn
worker, runserver's child), and the process that only loads the app (the
gunicorn master, the autoreloader's parent) starts no jobq thread. Python
names OS threads (``/proc/<pid>/task/*/comm``) only from 3.14 on, so the
checks that bite on older versions are the thread counts of ``/proc`` and the
thread names the master reports from gunicorn's ``on_exit`` hook.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from servers import (
    free_port,
    post,
    start_gunicorn,
    stop,
    wait_for,
    wait_for_server,
    wait_until_done,
)

ROOT = Path(__file__).resolve().parents[1]
DJANGO_PROJECT = ROOT / "tests" / "django_project"

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc"),
]


def thread_count(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("Threads:")[1].split()[0])


def thread_names(pid: int) -> list[str]:
    return [
        (task / "comm").read_text().strip()
        for task in Path(f"/proc/{pid}/task").iterdir()
    ]


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


# -- gunicorn --preload -----------------------------------------------------------

FLASK_APP = """
import os
import threading

from flask import Flask, current_app

from jobq.contrib.flask import JobQ

jobs = JobQ()


@jobs.task(name="note")
def note(token: str) -> dict:
    with open(current_app.config["NOTES"], "a") as file:
        file.write(f"{token} {os.getpid()}\\n")
    return {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "thread": threading.current_thread().name,
    }


def create_app() -> Flask:
    app = Flask(__name__)
    app.config.update(
        JOBQ_STORE=os.environ["APP_STORE"],
        JOBQ_WORKERS=2,
        JOBQ_KEEP_COMPLETED=3600,
        NOTES=os.environ["APP_NOTES"],
    )
    jobs.init_app(app)

    @app.post("/note/<token>")
    def add(token: str) -> dict:
        return {"job": note.enqueue(token).id}

    return app
"""

#: Not from the README: the master's thread names when it exits.
ON_EXIT_HOOK = """

def on_exit(server):
    import json, os, threading
    with open(os.environ["MASTER_THREADS"], "w") as file:
        json.dump([t.name for t in threading.enumerate()], file)
"""


def readme_gunicorn_conf() -> str:
    """The ``gunicorn.conf.py`` of docs/deploying/servers.md, as written there."""
    readme = (ROOT / "docs" / "deploying/servers.md").read_text()
    found = re.search(r"```python\n( *# gunicorn\.conf\.py\n.*?) *```", readme, re.S)
    assert found, "docs/deploying/servers.md has no gunicorn.conf.py example"
    conf = textwrap.dedent(found.group(1))
    assert "def worker_exit(server, worker):" in conf
    return conf


def test_gunicorn_preload_runs_each_job_once_in_a_worker_never_in_the_master(
    tmp_path: Path,
) -> None:
    pytest.importorskip("gunicorn", reason="gunicorn is not installed")
    (tmp_path / "noteapp.py").write_text(textwrap.dedent(FLASK_APP))
    (tmp_path / "gunicorn.conf.py").write_text(readme_gunicorn_conf() + ON_EXIT_HOOK)
    store = f"sqlite:///{tmp_path / 'jobs.db'}"
    notes = tmp_path / "notes.txt"
    server, port = start_gunicorn(
        tmp_path,
        "noteapp:create_app()",
        ["--preload", "-w", "2"],
        {
            "APP_STORE": store,
            "APP_NOTES": str(notes),
            "MASTER_THREADS": str(tmp_path / "master-threads.json"),
        },
    )
    log = tmp_path / "gunicorn.log"
    url = f"http://127.0.0.1:{port}/note"
    try:
        first = wait_for_server(f"{url}/t0", server)
        answers = [first] + [post(f"{url}/t{n}") for n in range(1, 20)]
        ids = [answer["job"] for answer in answers if answer is not None]
        assert len(set(ids)) == 20

        records = wait_until_done(store, ids)

        master = server.pid
        # gunicorn forks its workers up to 0.1 s apart: the first may have
        # served every request before the second exists
        assert wait_for(lambda: len(children_of(master)) == 2), log.read_text()
        workers = set(children_of(master))
        ran = [record.result for record in records.values()]
        assert all(record.attempts == 0 for record in records.values())
        assert {r["pid"] for r in ran} <= workers  # in the workers only
        assert {r["ppid"] for r in ran} == {master}
        assert all(r["thread"].startswith("jobq-worker-") for r in ran)
        tokens = [line.split()[0] for line in notes.read_text().splitlines()]
        assert sorted(tokens) == sorted(f"t{n}" for n in range(20))  # each once
        assert thread_count(master) == 1  # only its main thread
        assert not any("jobq-worker" in name for name in thread_names(master))
        counts = {pid: thread_count(pid) for pid in workers}
    finally:
        code = stop(server, signal.SIGTERM, timeout=15)
    text = log.read_text()
    assert code == 0, text
    assert "Traceback" not in text, text
    assert json.loads((tmp_path / "master-threads.json").read_text()) == ["MainThread"]
    ran_in = sorted({r["pid"] for r in ran})
    print(f"master {master}: 1 thread; workers' threads {counts}; jobs ran in {ran_in}")


# -- Django runserver with the autoreloader -------------------------------------

DJANGO_SETTINGS = """
from djproject.settings import *  # the test project's, JOBQ included

ROOT_URLCONF = "srvurls"
ALLOWED_HOSTS = ["127.0.0.1"]
"""

DJANGO_URLS = """
import os
import threading

from django.http import JsonResponse
from django.urls import path

from jobq.contrib.django import task


@task(name="whoami")
def whoami() -> dict:
    return {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "thread": threading.current_thread().name,
    }


def enqueue(request):
    return JsonResponse({"job": whoami.enqueue().id})


urlpatterns = [path("enqueue/", enqueue)]
"""


def test_django_runserver_runs_the_job_in_the_child_not_the_reloader_parent(
    tmp_path: Path,
) -> None:
    pytest.importorskip("django", reason="Django is not installed")
    (tmp_path / "srvsettings.py").write_text(textwrap.dedent(DJANGO_SETTINGS))
    (tmp_path / "srvurls.py").write_text(textwrap.dedent(DJANGO_URLS))
    store = f"sqlite:///{tmp_path / 'jobs.db'}"
    env = dict(os.environ)
    env.pop("RUN_MAIN", None)
    env.update(
        DJANGO_SETTINGS_MODULE="srvsettings",
        JOBQ_DJANGO_TEST_STORE=store,
        PYTHONPATH=os.pathsep.join([str(DJANGO_PROJECT), str(ROOT), str(tmp_path)]),
        PYTHONUNBUFFERED="1",
    )
    port = free_port()
    log = tmp_path / "runserver.log"
    with log.open("wb") as output:
        server = subprocess.Popen(
            [sys.executable, "-m", "django", "runserver", f"127.0.0.1:{port}"],
            cwd=DJANGO_PROJECT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        answer = wait_for_server(f"http://127.0.0.1:{port}/enqueue/", server)
        [record] = wait_until_done(store, [answer["job"]]).values()

        parent = server.pid
        [child] = children_of(parent)
        assert record.attempts == 0
        assert record.result["pid"] == child
        assert record.result["ppid"] == parent
        assert record.result["thread"].startswith("jobq-worker-")
        assert thread_count(parent) == 1  # the reloader's parent: no jobq threads
        assert not any("jobq-worker" in name for name in thread_names(parent))
        # the child: main (file watcher), django-main-thread, 2 jobq workers
        child_threads = thread_count(child)
        assert child_threads >= 4
        assert children_of(child) == []
    finally:
        code = stop(server, signal.SIGINT, timeout=15)  # Ctrl-C: the group
    text = log.read_text()
    assert code == 0, text
    assert "Traceback" not in text, text
    print(f"parent {parent}: 1 thread; child {child}: {child_threads} threads")
