"""jobq.contrib.django: settings checks, on_commit deferral, database
connections around jobs, lazy start, and the management commands.

The project is ``tests/django_project`` (``DJANGO_SETTINGS_MODULE`` in
pyproject.toml); its queue keeps jobs in a SQLite file of this session.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import transaction
from django.test import Client, override_settings
from limits_helpers import needs_limits

import jobq
from jobq.contrib.django import Deferred, DjangoJobQueue, config, get_queue
from jobq.contrib.django import checks as jobq_checks
from jobq.stores import MemoryStore
from jobq.stores.sqlite.schema import SCHEMA_VERSION as SQLITE_SCHEMA

PROJECT = Path(__file__).parent / "django_project"

pytestmark = [pytest.mark.timeout(60), pytest.mark.django_db(transaction=True)]


def _queue() -> DjangoJobQueue:
    return get_queue()


def _drain() -> None:
    _queue().run_pending()


def _ids(settings_value: Any) -> list[str]:
    with override_settings(JOBQ=settings_value):
        return [message.id or "" for message in jobq_checks.check_settings()]


# -- settings and checks -----------------------------------------------------------


def test_the_project_settings_pass_the_checks() -> None:
    assert jobq_checks.check_settings() == []
    call_command("check", stdout=io.StringIO())


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (["STORE"], ["jobq.E001"]),
        ({"STORE": None, "WROKERS": 4}, ["jobq.E002"]),
        ({"WORKERS": 0}, ["jobq.E003"]),
        ({"WORKERS": "4"}, ["jobq.E003"]),
        ({"AUTOSTART": "yes"}, ["jobq.E003"]),
        ({"MAX_ATTEMPTS": 0}, ["jobq.E003"]),
        ({"BASE_DELAY": -1}, ["jobq.E003"]),
        ({"STORE": "redis://localhost/0"}, ["jobq.E004"]),
        ({"STORE": "sqlite://"}, ["jobq.E004"]),
        ({"STORE": 42}, ["jobq.E004"]),
        ({"HANDLER": "djapp.nowhere.handler"}, ["jobq.E005"]),
        ({"HANDLER": "djproject.settings.SECRET_KEY"}, ["jobq.E005"]),
        ({"STORE": None, "MAX_ATTEMPTS": 2, "HANDLER": "djapp.tasks.add"}, []),
    ],
)
def test_checks_report_bad_settings(value: Any, expected: list[str]) -> None:
    assert _ids(value) == expected


def test_checks_report_every_problem_at_once() -> None:
    assert _ids({"BOGUS": 1, "WORKERS": -1, "STORE": "ftp://x"}) == [
        "jobq.E002",
        "jobq.E004",
        "jobq.E003",
    ]


def test_bad_settings_fail_manage_py_check() -> None:
    with override_settings(JOBQ={"WORKERS": 0}), pytest.raises(CommandError) as info:
        call_command("check", stdout=io.StringIO(), stderr=io.StringIO())
    assert "jobq.E003" in str(info.value)


def test_building_the_queue_from_bad_settings_raises() -> None:
    with (
        override_settings(JOBQ={"STORE": "redis://x"}),
        pytest.raises(ImproperlyConfigured, match=r"jobq\.E004"),
    ):
        config()


def test_the_queue_follows_the_settings() -> None:
    queue = _queue()
    assert isinstance(queue, jobq.JobQueue)
    assert queue is get_queue()
    assert queue.workers == 2
    assert queue.policy.max_attempts == 3
    assert type(queue.store).__name__ == "SqliteStore"


# -- enqueue inside a transaction -----------------------------------------------------


def test_a_job_enqueued_in_a_rolled_back_transaction_never_exists() -> None:
    from djapp.models import Note
    from djapp.tasks import note

    _drain()
    before = _queue().stats().pending
    results: list[jobq.Enqueued] = []
    pending: list[int] = []

    def enqueue_then_fail() -> None:
        with transaction.atomic():
            Note.objects.create(text="rolled back")
            results.append(note.enqueue("rolled back"))
            pending.append(_queue().stats().pending)  # not written yet
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        enqueue_then_fail()
    assert results == [Deferred(0, False)]
    assert pending == [before]
    assert _queue().stats().pending == before
    assert not Note.objects.exists()


def test_a_job_enqueued_in_a_committed_transaction_exists_after_commit() -> None:
    from djapp.models import Note
    from djapp.tasks import note

    _drain()
    before = _queue().stats().pending
    with transaction.atomic():
        result = note.enqueue("committed")
        assert isinstance(result, Deferred)
        with transaction.atomic():  # a savepoint: still waits for the outer commit
            note.enqueue("nested")
        assert _queue().stats().pending == before
    assert _queue().stats().pending == before + 2
    assert _queue().run_pending() == 2
    assert sorted(Note.objects.values_list("text", flat=True)) == [
        "committed",
        "nested",
    ]


def test_outside_a_transaction_enqueue_writes_at_once() -> None:
    from djapp.tasks import add

    result = add.enqueue(2, 3)
    assert not isinstance(result, Deferred)
    assert result.id > 0
    _drain()
    record = _queue().get(result)
    assert record is not None
    assert record.result == 5


def test_a_payload_that_cannot_be_stored_fails_at_enqueue_even_when_deferred() -> None:
    from djapp.tasks import add

    with transaction.atomic(), pytest.raises(TypeError):
        add.enqueue(object(), 1)  # type: ignore[arg-type]


def test_on_commit_false_writes_inside_the_transaction() -> None:
    queue = DjangoJobQueue(lambda job: None, on_commit=False)
    with transaction.atomic():
        assert queue.enqueue({"n": 1}).id == 1
    queue.close()


def test_enqueue_passes_after_and_after_failure_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import jobq.contrib.django as contrib

    queue = DjangoJobQueue(lambda job: job.payload, store=MemoryStore())
    monkeypatch.setattr(contrib, "get_queue", lambda: queue)
    parent = contrib.enqueue("first")
    child, sibling = contrib.enqueue_many(
        ["second", "third"], after=[parent], after_failure="cancel"
    )
    record = queue.get(child.id)
    assert record is not None
    assert (record.state, record.parents) == (jobq.JobState.WAITING, (parent.id,))
    assert record.after_failure == "cancel"
    assert queue.get(parent.id).children == (child.id, sibling.id)  # type: ignore[union-attr]
    with transaction.atomic():
        deferred = contrib.enqueue("written at the commit")
        assert isinstance(deferred, Deferred)
        with pytest.raises(ValueError, match="not written yet"):
            contrib.enqueue("child", after=[deferred])
    assert queue.run_pending() == 4  # "first" released both
    queue.close()


# -- database connections around jobs -----------------------------------------------


def test_old_connections_are_closed_before_and_after_each_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from djapp.tasks import add, note

    import jobq.contrib.django as contrib

    _drain()
    calls: list[str] = []
    monkeypatch.setattr(contrib, "close_old_connections", lambda: calls.append("close"))
    add.enqueue(1, 1)
    note.enqueue("x")
    assert _queue().run_pending() == 2
    assert calls == ["close"] * 4


def test_connections_are_left_alone_inside_an_atomic_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import jobq.contrib.django as contrib

    _drain()
    calls: list[str] = []
    monkeypatch.setattr(contrib, "close_old_connections", lambda: calls.append("close"))
    queue = DjangoJobQueue(lambda job: None)
    queue.enqueue({"n": 1})
    with transaction.atomic():
        assert queue.run_pending() == 1
    assert calls == []
    queue.close()


def test_worker_threads_close_old_connections_around_each_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading

    import jobq.contrib.django as contrib

    closed_in: list[str] = []
    ran_in: list[str] = []
    monkeypatch.setattr(
        contrib,
        "close_old_connections",
        lambda: closed_in.append(threading.current_thread().name),
    )

    def handler(job: jobq.Job[Any]) -> None:
        ran_in.append(threading.current_thread().name)

    with DjangoJobQueue(handler).start(workers=1) as queue:
        queue.enqueue({})
        queue.enqueue({})
        assert queue.join(timeout=10)
    assert len(ran_in) == 2
    assert closed_in == [ran_in[0]] * 4


def test_an_isolated_task_runs_in_a_child_set_up_as_django_is() -> None:
    """The child sets up Django from this process's settings module and
    runs the task there, with a database connection of its own."""
    import isolated_tasks

    queue = _queue()
    task = queue.task(isolated_tasks.django_database, isolate=True)
    job = task.enqueue()

    _drain()  # in this thread; the attempt itself in a child

    record = queue.get(job)
    assert record is not None
    assert record.state is jobq.JobState.COMPLETED, record.errors
    assert record.result["settings"] == "djproject.settings"
    assert record.result["one"] == 1
    assert record.result["pid"] != os.getpid()


# -- lazy start ---------------------------------------------------------------------


def test_setup_and_management_commands_start_no_workers() -> None:
    code = (
        "import threading, django; django.setup();"
        "from django.core.management import call_command;"
        "call_command('check');"
        "from djapp.tasks import add; add.enqueue(1, 2);"
        "from jobq.contrib.django import get_queue;"
        "print(get_queue().ensure_started(),"
        " sum(t.name.startswith('jobq-worker') for t in threading.enumerate()))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stdout.split()[-2:] == ["False", "0"]


def test_the_first_request_starts_the_workers() -> None:
    from djapp.models import Note

    queue = _queue()
    _drain()
    assert not queue.ensure_started()
    try:
        response = Client().get("/notes/")
        assert response.status_code == 200
        assert queue.ensure_started()
        assert queue.join(timeout=10)
        assert Note.objects.filter(text="from a view").exists()
    finally:
        queue.stop()


# -- management commands ------------------------------------------------------------


def test_manage_py_jobq_stats() -> None:
    queue = _queue()
    _drain()
    stats = queue.stats()
    out = io.StringIO()
    call_command("jobq", "stats", stdout=out)
    assert out.getvalue() == (
        f"pending    {stats.pending}\ndelayed    {stats.delayed}\n"
        f"retrying   {stats.retrying}\nwaiting    0\n"
        f"running    {stats.running}\ndead       {stats.dead}\n"
        f"kept       {stats.kept}\ncancelled  {stats.cancelled}\nabandoned  0\n"
    )
    out = io.StringIO()
    call_command("jobq", "stats", "--json", stdout=out)
    assert json.loads(out.getvalue()) == {
        "pending": stats.pending,
        "delayed": stats.delayed,
        "retrying": stats.retrying,
        "waiting": 0,
        "running": stats.running,
        "dead": stats.dead,
        "kept": stats.kept,
        "cancelled": stats.cancelled,
        "abandoned": 0,
    }


def test_manage_py_jobq_reports_a_missing_job() -> None:
    with pytest.raises(CommandError, match="no job 999999") as info:
        call_command("jobq", "show", "999999", stdout=io.StringIO())
    assert info.value.returncode == 1


def test_manage_py_jobq_retries_a_dead_job() -> None:
    from djapp.tasks import add

    queue = _queue()
    _drain()
    job = add.enqueue(1, "x")  # type: ignore[arg-type]
    for _ in range(3):
        queue.run_pending()
        time.sleep(0.15)  # past BASE_DELAY
    queue.run_pending()
    record = queue.get(job)
    assert record is not None
    assert record.state == jobq.JobState.DEAD
    out = io.StringIO()
    call_command("jobq", "retry", str(job.id), stdout=out)
    after = queue.get(job)
    assert after is not None
    assert after.state == jobq.JobState.PENDING
    queue.cancel(job)


def test_manage_py_jobq_cancels_a_pending_job() -> None:
    queue = _queue()
    job = queue.enqueue("later", delay=3600).id
    out = io.StringIO()
    call_command("jobq", "cancel", str(job), "--json", stdout=out)
    assert json.loads(out.getvalue()) == {
        "id": job,
        "was": "pending",
        "outcome": "cancelled",
    }
    out = io.StringIO()
    call_command("jobq", "cancelled", "--json", stdout=out)
    listed = {shown["id"]: shown for shown in json.loads(out.getvalue())}
    assert listed[job]["cancellation"]["by"] == "manage.py jobq cancel"
    with pytest.raises(CommandError, match="only a pending, waiting") as info:
        call_command("jobq", "cancel", str(job), stdout=io.StringIO())
    assert info.value.returncode == 1


def test_manage_py_jobq_schedules_lists_the_periodic_tasks_of_the_apps() -> None:
    out = io.StringIO()
    call_command("jobq", "schedules", "--json", stdout=out)

    shown = {s["name"]: s for s in json.loads(out.getvalue())}
    report = shown["djapp.tasks.new_year_report"]
    assert (report["expression"], report["tz"], report["orphaned"]) == (
        "0 3 1 1 *", "Europe/Berlin", False,
    )  # fmt: skip
    berlin = ZoneInfo("Europe/Berlin")
    next_slot = dt.datetime.fromtimestamp(report["next_slot"], berlin)
    assert (next_slot.month, next_slot.day, next_slot.hour) == (1, 1, 3)
    assert "djapp.tasks.new_year_report" in _queue().tasks


def test_manage_py_jobq_pauses_resumes_and_runs_a_periodic_job() -> None:
    name = "djapp.tasks.new_year_report"
    _drain()  # the store exists: a command never creates one
    out = io.StringIO()

    call_command("jobq", "pause-schedule", name, stdout=out)
    call_command("jobq", "schedules", "--json", stdout=(listed := io.StringIO()))
    call_command("jobq", "resume-schedule", name, stdout=out)
    call_command("jobq", "run-schedule", name, "--json", stdout=(ran := io.StringIO()))

    shown = {s["name"]: s for s in json.loads(listed.getvalue())}
    assert (shown[name]["paused"], shown[name]["paused_by"]) == (
        True, "manage.py jobq",
    )  # fmt: skip
    assert out.getvalue() == f"schedule {name!r} paused\nschedule {name!r} resumed\n"
    record = _queue().get(json.loads(ran.getvalue())["id"])
    assert record is not None
    assert (record.task, dict(record.meta)) == (name, {"jobq.run_by": "manage.py jobq"})
    with pytest.raises(CommandError, match="no schedule 'nope'") as info:
        call_command("jobq", "pause-schedule", "nope", stdout=io.StringIO())
    assert info.value.returncode == 1
    _drain()


def test_manage_py_jobq_limits_lists_what_the_store_holds() -> None:
    queue = _queue()
    _drain()  # the store exists: a command never creates one
    out = io.StringIO()
    call_command("jobq", "limits", "--json", stdout=out)
    assert all(shown["name"] != "reports" for shown in json.loads(out.getvalue()))
    needs_limits(queue)
    queue.limit("reports", concurrency=2, rate="5/m")

    out = io.StringIO()
    call_command("jobq", "limits", stdout=out)

    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["NAME", "CONCURRENCY", "RATE", "BURST", "RUNNING",
                                "WAITING"]  # fmt: skip
    assert ["reports", "2", "5/m", "1", "0", "0"] in [line.split() for line in lines]


def test_manage_py_jobq_migrate() -> None:
    out = io.StringIO()
    call_command("jobq", "migrate", "--json", stdout=out)
    assert json.loads(out.getvalue())["schema_version"] == SQLITE_SCHEMA


def test_manage_py_jobq_worker_runs_jobs_and_stops_on_sigterm() -> None:
    from djapp.tasks import add

    queue = _queue()
    _drain()
    job = add.enqueue(20, 22)
    worker = subprocess.Popen(
        [sys.executable, "-m", "django", "jobq_worker", "--workers", "1"],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            record = queue.get(job)
            if record is not None and record.state == jobq.JobState.COMPLETED:
                break
            time.sleep(0.1)
        record = queue.get(job)
        assert record is not None
        assert record.result == 42
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, err
    assert "stopping (SIGTERM)" in err


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(PROJECT), str(Path(__file__).parents[1]), env.get("PYTHONPATH", "")]
    )
    env["DJANGO_SETTINGS_MODULE"] = "djproject.settings"
    return env


# -- examples/django_project ----------------------------------------------------------


def test_the_example_project_runs(tmp_path: Path) -> None:
    example = Path(__file__).parents[1] / "examples" / "django_project"
    env = _env()
    env["DJANGO_SETTINGS_MODULE"] = "mysite.settings"
    env["JOBQ_EXAMPLE_DIR"] = str(tmp_path)
    env["PYTHONPATH"] = str(Path(__file__).parents[1])
    done = subprocess.run(
        [sys.executable, "manage.py", "demo"],
        cwd=example,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "jobs run: 1",
        "order 1 receipt sent: True",
        "pending    0",
        "delayed    0",
        "retrying   0",
        "waiting    0",
        "running    0",
        "dead       0",
        "kept       1",  # its Django Tasks result
        "cancelled  0",
        "abandoned  0",
    ]
