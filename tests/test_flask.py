"""``jobq.contrib.flask``: the ``JobQ`` extension, its lazy start and ``flask jobq``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from limits_helpers import WhileHeld, hold_one, needs_limits
from servers import wait_for

pytest.importorskip("flask")

import flask
from flask import Flask, current_app

import jobq
from jobq import cli
from jobq.contrib.flask import JobQ, JobQState
from jobq.stores.sqlite.schema import SCHEMA_VERSION as SQLITE_SCHEMA

ROOT = Path(__file__).resolve().parents[1]

MakeApp = Callable[..., Flask]


def worker_threads() -> int:
    return sum(t.name.startswith("jobq-worker-") for t in threading.enumerate())


@pytest.fixture
def make_app(tmp_path: Path) -> Iterator[MakeApp]:
    """An app factory; every app's queue is closed after the test."""
    apps: list[Flask] = []

    def make(ext: JobQ, **config: Any) -> Flask:
        app = Flask(f"app{len(apps)}")
        app.config.update({"JOBQ_BASE_DELAY": 0.01, "JOBQ_WORKERS": 2, **config})
        ext.init_app(app)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.extensions["jobq"].queue.close(timeout=5)


def state(app: Flask) -> JobQState:
    found: JobQState = app.extensions["jobq"]
    return found


# -- jobs run inside the app context --------------------------------------------


def test_a_task_runs_inside_its_apps_context(make_app: MakeApp) -> None:
    jobs = JobQ()
    seen: list[str] = []

    @jobs.task(name="who")
    def who(greeting: str) -> None:
        seen.append(f"{greeting} from {current_app.name}")

    app = make_app(jobs)
    with app.app_context():
        who.enqueue("hello")
        assert jobs.queue.join(timeout=10)

    assert seen == ["hello from app0"]


def test_a_time_limit_interrupts_a_task_at_a_line_of_its_own(
    make_app: MakeApp,
) -> None:
    """Inside the app context the task's code is still the handler's:
    ``JobTimeout`` lands there, not after the grace."""
    jobs = JobQ()

    @jobs.task(name="spin", timeout=0.05)
    def spin() -> None:
        while current_app:
            pass

    app = make_app(jobs, JOBQ_MAX_ATTEMPTS=1, JOBQ_TIMEOUT_GRACE=30)
    with app.app_context():
        spin.enqueue()
        assert jobs.queue.join(timeout=10)
        [dead] = jobs.queue.dead_jobs()
        assert jobs.queue.stats().abandoned == 0
    error = dead.errors[-1]
    assert error.type == "jobq.errors.JobTimeout"
    assert error.traceback.splitlines()[-3].strip().endswith("in spin")


def test_an_isolated_task_runs_in_the_app_context_of_the_app_its_child_builds() -> None:
    """The child finds the app as the ``flask`` command does (here, the
    ``create_app`` factory of the app's module) and runs the task in its
    app context."""
    from isolated_flask_app import app_name, create_app

    app = create_app()
    queue = state(app).queue
    try:
        with app.app_context():
            job = app_name.enqueue()
            queue.start(workers=1)
            record = queue.wait(job, 30)
    finally:
        queue.close(timeout=5)

    assert record is not None
    assert record.state is jobq.JobState.COMPLETED, record.errors
    assert record.result["mark"] == "built by create_app"
    assert record.result["pid"] != os.getpid()


def test_a_plain_job_runs_inside_the_app_context_too(make_app: MakeApp) -> None:
    seen: list[Any] = []

    def handler(job: jobq.Job[Any]) -> None:
        seen.append((job.payload, current_app.config["MARK"]))

    jobs = JobQ(handler=handler)
    app = make_app(jobs, MARK="here")
    with app.app_context():
        jobs.queue.enqueue({"n": 1})
        assert jobs.queue.join(timeout=10)

    assert seen == [({"n": 1}, "here")]


def test_calling_a_task_runs_it_here_and_now(make_app: MakeApp) -> None:
    jobs = JobQ()

    @jobs.task(name="double")
    def double(n: int) -> int:
        return 2 * n

    assert double(21) == 42
    assert double.name == "double"
    assert double.__name__ == "double"


def test_a_task_s_using_passes_after_and_after_failure_through(
    make_app: MakeApp,
) -> None:
    jobs = JobQ()

    @jobs.task(name="fetch")
    def fetch(url: str) -> str:
        return f"page of {url} in {current_app.name}"

    @jobs.task(name="parse")
    def parse(parent_results: list[Any]) -> list[Any]:
        return parent_results

    app = make_app(jobs, JOBQ_AUTOSTART=False, JOBQ_KEEP_COMPLETED=600)
    with app.app_context():
        queue = jobs.queue
        fetched = fetch.enqueue("a.example")
        parsed = parse.using(after=[fetched], after_failure="run").enqueue()
        waiting = queue.get(parsed.id)
        assert queue.run_pending() == 2  # fetch, then parse once released
        done = queue.wait(parsed, timeout=10)

    assert waiting is not None
    assert (waiting.state, waiting.parents) == (jobq.JobState.WAITING, (fetched.id,))
    assert waiting.after_failure == "run"
    assert done is not None
    assert done.result == ["page of a.example in app0"]


# -- app factories ------------------------------------------------------------------


def test_one_extension_serves_many_apps_each_with_its_own_queue(
    make_app: MakeApp, tmp_path: Path
) -> None:
    jobs = JobQ()
    seen: list[tuple[str, int]] = []

    @jobs.task(name="before")
    def before(n: int) -> None:
        seen.append((current_app.name, n))

    first = make_app(jobs, JOBQ_STORE=f"sqlite:///{tmp_path / 'one.db'}")
    second = make_app(jobs, JOBQ_STORE=f"sqlite:///{tmp_path / 'two.db'}")

    @jobs.task(name="after")  # registered on the apps initialised already
    def after(n: int) -> None:
        seen.append((current_app.name, -n))

    for app, n in [(first, 1), (second, 2)]:
        with app.app_context():
            before.enqueue(n)
            after.enqueue(n)
            assert jobs.queue.join(timeout=10)
            assert jobs.queue.stats().completed == 2

    assert sorted(seen) == [("app0", -1), ("app0", 1), ("app1", -2), ("app1", 2)]
    assert state(first).queue is not state(second).queue
    assert (tmp_path / "one.db").exists()
    assert (tmp_path / "two.db").exists()


def test_the_extension_needs_an_app_it_was_initialised_on(make_app: MakeApp) -> None:
    jobs = JobQ()
    app = make_app(jobs)

    with pytest.raises(RuntimeError, match="application context"):
        _ = jobs.queue
    with app.app_context(), pytest.raises(RuntimeError, match="init_app"):
        _ = JobQ().queue
    with pytest.raises(RuntimeError, match="already initialised"):
        jobs.init_app(app)


def test_app_passed_to_the_constructor_is_initialised() -> None:
    app = Flask("direct")
    jobs = JobQ(app, handler=lambda job: None)
    try:
        assert state(app).extension is jobs
    finally:
        state(app).queue.close()


def test_two_tasks_with_one_name_are_refused() -> None:
    jobs = JobQ()
    jobs.task(name="same")(lambda: None)

    with pytest.raises(ValueError, match="already registered"):
        jobs.task(name="same")(lambda: None)


# -- config -------------------------------------------------------------------------


def test_config_keys_set_the_queue_and_constructor_options_are_defaults(
    make_app: MakeApp, tmp_path: Path
) -> None:
    jobs = JobQ(handler=lambda job: None, max_attempts=7, max_delay=60.0)
    app = make_app(
        jobs,
        JOBQ_STORE=f"sqlite:///{tmp_path / 'jobs.db'}",
        JOBQ_MAX_ATTEMPTS=3,
        JOBQ_BASE_DELAY=0.5,
        JOBQ_WORKERS=3,
    )
    queue = state(app).queue

    assert queue.policy.max_attempts == 3  # config wins
    assert queue.policy.base_delay == 0.5
    assert queue.policy.max_delay == 60.0  # from the constructor
    assert type(queue.store).__name__ == "SqliteStore"
    assert state(app).workers == 3
    assert app.config["JOBQ_AUTOSTART"] is True  # defaults show in the config
    before = worker_threads()
    app.test_client().get("/")  # a 404 is a request too
    assert worker_threads() == before + 3


def test_autostart_off_starts_nothing_on_requests(make_app: MakeApp) -> None:
    jobs = JobQ(handler=lambda job: None)
    app = make_app(jobs, JOBQ_AUTOSTART=False)
    before = worker_threads()

    app.test_client().get("/")
    with app.app_context():
        jobs.queue.enqueue({"n": 1})

    assert worker_threads() == before
    with app.app_context():
        assert jobs.queue.stats().pending == 1


def test_a_bad_config_value_fails_at_init_app() -> None:
    app = Flask("bad")
    app.config["JOBQ_MAX_ATTEMPTS"] = 0
    with pytest.raises(ValueError, match="max_attempts"):
        JobQ(app, handler=lambda job: None)


# -- lazy start ---------------------------------------------------------------------


def test_creating_the_app_starts_no_thread_the_first_request_does(
    make_app: MakeApp, tmp_path: Path
) -> None:
    jobs = JobQ(handler=lambda job: None)
    before = worker_threads()

    app = make_app(jobs, JOBQ_STORE=str(tmp_path / "jobs.json"))

    assert worker_threads() == before
    assert list(tmp_path.iterdir()) == []  # no file, no lock
    app.test_client().get("/")
    assert worker_threads() == before + 2
    app.test_client().get("/")
    assert worker_threads() == before + 2


def test_the_reloader_watcher_process_starts_nothing(
    make_app: MakeApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``flask run --debug`` loads the app in the watcher too
    (WERKZEUG_RUN_MAIN unset there), which never serves a request."""
    monkeypatch.delenv("WERKZEUG_RUN_MAIN", raising=False)
    jobs = JobQ(handler=lambda job: None)
    before = worker_threads()

    app = make_app(jobs, JOBQ_STORE=str(tmp_path / "jobs.json"))
    with app.app_context():
        jobs.queue.stats()  # what `flask jobq stats` does

    assert worker_threads() == before


def test_the_first_task_registered_after_init_app_is_started_lazily(
    make_app: MakeApp,
) -> None:
    jobs = JobQ()
    app = make_app(jobs)  # no handler, no task yet: nothing to start
    done = threading.Event()

    @jobs.task(name="late")
    def late() -> None:
        done.set()

    app.test_client().get("/")
    with app.app_context():
        late.enqueue()
    assert done.wait(10)


# -- flask jobq ...  ------------------------------------------------------------------


@pytest.fixture
def cli_app(make_app: MakeApp, tmp_path: Path) -> Flask:
    """An app with one dead job (1) and one completed job."""
    jobs = JobQ()

    @jobs.task(name="fails")
    def fails(n: int) -> None:
        raise jobq.Fatal(f"no {n}")

    app = make_app(
        jobs,
        JOBQ_STORE=f"sqlite:///{tmp_path / 'jobs.db'}",
        JOBQ_AUTOSTART=False,
    )
    with app.app_context():
        fails.enqueue(1)
        assert jobs.queue.run_pending() == 1
    return app


def invoke(app: Flask, *args: str) -> Any:
    return app.test_cli_runner().invoke(args=["jobq", *args])


def test_flask_jobq_pauses_resumes_and_runs_a_periodic_job(
    make_app: MakeApp, tmp_path: Path
) -> None:
    jobs = JobQ()
    ran: list[object] = []

    @jobs.periodic(every=3600, name="hourly")
    def hourly() -> None:
        ran.append(None)

    app = make_app(
        jobs, JOBQ_STORE=f"sqlite:///{tmp_path / 'jobs.db'}", JOBQ_AUTOSTART=False
    )
    with app.app_context():
        jobs.queue.stats()  # creates the store: a command never does

    paused = invoke(app, "pause-schedule", "hourly")
    listed = invoke(app, "schedules", "--json")
    resumed = invoke(app, "resume-schedule", "hourly", "--json")
    started = invoke(app, "run-schedule", "hourly", "--json")
    unknown = invoke(app, "pause-schedule", "nope")

    assert paused.output == "schedule 'hourly' paused\n"
    (shown,) = json.loads(listed.output)
    assert (shown["paused"], shown["paused_by"]) == (True, "flask jobq")
    assert json.loads(resumed.output)["changed"] is True
    job_id = json.loads(started.output)["id"]
    with app.app_context():
        record = jobs.queue.get(job_id)
        assert jobs.queue.run_pending() == 1
    assert record is not None
    assert dict(record.meta) == {"jobq.run_by": "flask jobq"}
    assert ran == [None]
    assert unknown.exit_code == 1
    assert "no schedule 'nope'" in unknown.output


def test_flask_jobq_stats(cli_app: Flask) -> None:
    result = invoke(cli_app, "stats", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {
        "pending": 0,
        "delayed": 0,
        "retrying": 0,
        "waiting": 0,
        "running": 0,
        "dead": 1,
        "kept": 0,
        "cancelled": 0,
        "abandoned": 0,
    }


def test_flask_jobq_cancel_and_cancelled(cli_app: Flask) -> None:
    with cli_app.app_context():
        queue = cli_app.extensions["jobq"].queue
        job = queue.enqueue("later", delay=3600).id

    result = invoke(cli_app, "cancel", str(job))
    listed = invoke(cli_app, "cancelled", "--json")

    assert (result.exit_code, result.output) == (
        0,
        f"job {job} cancelled (it was pending)\n",
    )
    (shown,) = json.loads(listed.output)
    assert (shown["id"], shown["state"]) == (job, "cancelled")
    assert shown["cancellation"]["by"] == "flask jobq cancel"
    dead = invoke(cli_app, "cancel", "1")
    assert dead.exit_code == 1
    assert "job 1 is dead; only a pending, waiting or running job can be cancelled" in (
        dead.output
    )
    assert invoke(cli_app, "cancel", str(job), "--wait", "nan").exit_code == 2


def test_flask_jobq_dead_lists_the_dead_letter(cli_app: Flask) -> None:
    result = invoke(cli_app, "dead")

    assert result.exit_code == 0, result.output
    assert "Fatal: no 1" in result.output
    assert json.loads(invoke(cli_app, "dead", "--json").output)[0]["id"] == 1


def test_flask_jobq_retry_makes_the_job_pending_again(cli_app: Flask) -> None:
    result = invoke(cli_app, "retry", "1")

    assert result.exit_code == 0, result.output
    assert "job 1 is pending again" in result.output
    with cli_app.app_context():
        assert state(cli_app).queue.stats().pending == 1
    again = invoke(cli_app, "retry", "1")
    assert again.exit_code == 1
    assert "not dead" in again.output


def test_flask_jobq_delete_removes_the_dead_job(cli_app: Flask) -> None:
    result = invoke(cli_app, "delete", "1")

    assert result.exit_code == 0, result.output
    assert "job 1 deleted" in result.output
    assert invoke(cli_app, "delete", "1").exit_code == 1
    assert invoke(cli_app, "delete", "0").exit_code == 2  # not a job id


def test_flask_jobq_purge_dead_needs_yes(cli_app: Flask) -> None:
    refused = invoke(cli_app, "purge-dead")
    assert refused.exit_code == 2
    assert "--yes" in refused.output

    result = invoke(cli_app, "purge-dead", "--yes")

    assert result.exit_code == 0, result.output
    assert "deleted 1 dead job" in result.output


def test_flask_jobq_show(cli_app: Flask) -> None:
    result = invoke(cli_app, "show", "1")

    assert result.exit_code == 0, result.output
    assert "Fatal: no 1" in result.output


def test_flask_jobq_limits_and_show_of_a_held_job(
    make_app: MakeApp, tmp_path: Path
) -> None:
    handler: WhileHeld[tuple[Any, Any]] = WhileHeld()
    jobs = JobQ(handler=handler)
    app = make_app(
        jobs, JOBQ_STORE=f"sqlite:///{tmp_path / 'jobs.db'}", JOBQ_AUTOSTART=False
    )
    queue = jobs.state(app).queue  # as create_app() declares its limits
    queue.stats()  # the store exists: a command never creates one

    nothing = invoke(app, "limits", "--json")

    assert nothing.exit_code == 0, nothing.output
    assert json.loads(nothing.output) == []
    needs_limits(queue)
    queue.limit("smtp", concurrency=1)

    def look(held: int) -> tuple[Any, Any]:
        return invoke(app, "limits"), invoke(app, "show", str(held), "--json")

    _, _, (listed, shown) = hold_one(queue, handler, look)

    assert (listed.exit_code, shown.exit_code) == (0, 0), listed.output
    assert listed.output.splitlines()[1].split() == ["smtp", "1", "-", "-", "1", "1"]
    details = json.loads(shown.output)
    assert (details["limits"], details["held_by"]) == (["smtp"], "smtp")


@pytest.mark.parametrize("timeout", ["inf", "nan", "-1"])
def test_flask_jobq_worker_refuses_a_shutdown_timeout_that_is_not_finite_seconds(
    cli_app: Flask, timeout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[object] = []
    monkeypatch.setattr(cli, "run_worker", lambda *args, **kwargs: ran.append(args))

    result = invoke(cli_app, "worker", "--shutdown-timeout", timeout)

    assert result.exit_code == 2, result.output
    assert "--shutdown-timeout" in result.output
    assert ran == []  # refused before any worker ran


def test_the_commands_start_no_workers(make_app: MakeApp, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'jobs.db'}"
    with jobq.JobQueue[Any](store=store) as first:  # the store the app made
        first.stats()
    jobs = JobQ(handler=lambda job: None)
    app = make_app(jobs, JOBQ_STORE=store)
    before = worker_threads()

    assert invoke(app, "stats").exit_code == 0
    assert invoke(app, "dead").exit_code == 0

    assert worker_threads() == before


def test_flask_jobq_migrate_creates_the_schema(
    make_app: MakeApp, tmp_path: Path
) -> None:
    path = tmp_path / "jobs.db"
    app = make_app(JobQ(), JOBQ_STORE=f"sqlite:///{path}", JOBQ_AUTOSTART=False)

    result = invoke(app, "migrate", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {
        "store": f"the SQLite file {path}",
        "schema_version": SQLITE_SCHEMA,
    }
    assert path.exists()


def test_flask_jobq_looks_at_a_json_store_without_taking_its_lock(
    make_app: MakeApp, tmp_path: Path
) -> None:
    path = tmp_path / "jobs.json"
    with jobq.JobQueue[Any](store=str(path)) as first:
        first.enqueue("x", delay=3600)
    app = make_app(JobQ(), JOBQ_STORE=str(path), JOBQ_AUTOSTART=False)

    looked = invoke(app, "stats", "--json")  # no one owns the file meanwhile
    with jobq.JobQueue[Any](store=str(path)) as owner:  # e.g. the web process
        owner.enqueue("y", delay=3600)  # no StoreLocked: the command took no lock
        assert owner.stats().pending == 2

    assert looked.exit_code == 0, looked.output
    assert json.loads(looked.output)["pending"] == 1


def test_flask_jobq_stats_refuses_a_store_that_does_not_exist_and_creates_none(
    make_app: MakeApp, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    app = make_app(JobQ(), JOBQ_STORE=f"sqlite:///{data / 'jobs.db'}")

    result = invoke(app, "stats")

    assert result.exit_code == 1
    assert result.output.startswith(f"Error: no SQLite store at {data / 'jobs.db'}")
    assert list(data.iterdir()) == []


def test_flask_jobq_refuses_a_queue_in_memory(make_app: MakeApp) -> None:
    app = make_app(JobQ(), JOBQ_AUTOSTART=False)

    result = invoke(app, "stats")

    assert result.exit_code == 2
    assert "in memory" in result.output


# -- real processes -----------------------------------------------------------------

APP_MODULE = """
import os
from pathlib import Path

from flask import Flask, current_app

from jobq.contrib.flask import JobQ

jobs = JobQ()


@jobs.task(name="note")
def note(text: str) -> None:
    with open(current_app.config["NOTES"], "a") as file:
        file.write(f"{text} {os.getpid()}\\n")


def create_app() -> Flask:
    app = Flask(__name__)
    app.config.update(
        JOBQ_STORE=os.environ["APP_STORE"],
        JOBQ_WORKERS=2,
        NOTES=os.environ["APP_NOTES"],
    )
    jobs.init_app(app)

    @app.post("/note")
    def add() -> dict[str, int]:
        return {"job": note.enqueue("from-request").id}

    return app
"""


def write_app(tmp_path: Path, store: str) -> dict[str, str]:
    (tmp_path / "noteapp.py").write_text(textwrap.dedent(APP_MODULE))
    env = dict(os.environ)
    env.pop("WERKZEUG_RUN_MAIN", None)
    env.update(
        APP_STORE=store,
        APP_NOTES=str(tmp_path / "notes.txt"),
        FLASK_APP="noteapp:create_app",
        PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]),
        PYTHONUNBUFFERED="1",
    )
    return env


def notes(tmp_path: Path) -> list[str]:
    path = tmp_path / "notes.txt"
    return path.read_text().splitlines() if path.exists() else []


def test_flask_jobq_worker_runs_jobs_and_stops_on_sigterm(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'jobs.db'}"
    env = write_app(tmp_path, store)
    with jobq.JobQueue[Any](store=store) as queue:  # e.g. the web process
        queue.task(lambda text: None, name="note").enqueue("queued")
    worker = subprocess.Popen(
        [sys.executable, "-m", "flask", "jobq", "worker", "--workers", "1"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for(lambda: len(notes(tmp_path)) == 1, 20), notes(tmp_path)
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, err
    assert notes(tmp_path)[0].startswith(f"queued {worker.pid}")
    assert "stopping (SIGTERM)" in err
    assert "stopped" in err


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def threads_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("Threads:")[1].split()[0])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_flask_run_debug_serves_jobs_and_its_watcher_starts_no_workers(
    tmp_path: Path,
) -> None:
    """The real reloader: the app is created in the watcher and in the
    serving child; a JSON store works because only the child opens it."""
    env = write_app(tmp_path, str(tmp_path / "jobs.json"))
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "flask", "run", "--debug", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/note"

    def post() -> bool:
        try:
            request = urllib.request.Request(url, data=b"", method="POST")
            with urllib.request.urlopen(request, timeout=2) as response:  # noqa: S310
                return bool(response.status == 200)
        except OSError:
            return False

    try:
        assert wait_for(post, timeout=30)
        assert wait_for(lambda: len(notes(tmp_path)) == 1, 20)
        [line] = notes(tmp_path)
        served_by = int(line.split()[1])
        assert served_by != server.pid  # the reloader's child ran the job
        assert threads_of(server.pid) == 1  # the watcher: no jobq threads
    finally:
        server.send_signal(signal.SIGINT)
        try:
            output, _ = server.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            output, _ = server.communicate()
    assert "StoreLocked" not in output, output
    assert "Traceback" not in output, output


def test_flask_is_imported_only_by_the_extension() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import jobq, sys; print('flask' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert done.stdout.strip() == "False"
    assert flask.__name__ == "flask"


# -- periodic tasks -----------------------------------------------------------------


def test_a_periodic_task_runs_each_slot_in_its_apps_context_and_is_listed(
    make_app: MakeApp, tmp_path: Path
) -> None:
    from jobq.testing.clock import Clock

    clock = Clock(600 * 3_000_000)
    jobs = JobQ(clock=clock)
    seen: list[str] = []

    @jobs.periodic(every=600, name="purge")
    def purge(scheduled_at: Any) -> None:
        seen.append(f"{current_app.name} {scheduled_at:%H:%M}")

    app = make_app(
        jobs, JOBQ_STORE=f"sqlite:///{tmp_path / 'jobs.db'}", JOBQ_AUTOSTART=False
    )
    with app.app_context():
        assert jobs.queue.run_pending() == 0
        clock.advance(600)
        assert jobs.queue.run_pending() == 1
    result = invoke(app, "schedules", "--json")

    assert seen == ["app0 08:10"]
    assert result.exit_code == 0, result.output
    (shown,) = json.loads(result.output)
    assert (shown["name"], shown["expression"], shown["last_slot"]) == (
        "purge", "every 600s", clock.now,
    )  # fmt: skip
    assert shown["orphaned"] is False
