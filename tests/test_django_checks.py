"""``manage.py check`` in a new process, on the test project
(``tests/django_project``) with settings changed: a bad ``JOBQ`` is reported
as check errors, and a project without the jobq app hears it (``jobq.E006``)
whichever way jobq is first imported.

Each test writes a settings module (and, where it needs one, a small app) to
its ``tmp_path``; ``python -m django check`` runs with those settings.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import django.tasks  # noqa: F401
except ImportError:  # Django 5.2: the django_tasks backport, an app
    BACKPORT = True
else:
    BACKPORT = False

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "tests" / "django_project"
WITHOUT_THE_APP = (
    'INSTALLED_APPS = [a for a in INSTALLED_APPS if a != "jobq.contrib.django"]\n'
)
HINT = "Add 'jobq.contrib.django' to INSTALLED_APPS."

pytestmark = pytest.mark.timeout(120)


def run(
    tmp_path: Path, settings: str, *command: str, code: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m django COMMAND`` (or ``python -c CODE``) with the test
    project's settings followed by ``settings``."""
    (tmp_path / "changed_settings.py").write_text(
        f"from djproject.settings import *  # noqa: F403\n{settings}"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(PROJECT), str(ROOT)])
    env["DJANGO_SETTINGS_MODULE"] = "changed_settings"
    argv = ["-c", code] if code is not None else ["-m", "django", *command]
    return subprocess.run(
        [sys.executable, *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def an_app_importing_jobq_at_setup(tmp_path: Path) -> str:
    """An app whose models module imports ``jobq.contrib.django`` (as one
    enqueuing from a signal receiver does); the settings line adding it."""
    app = tmp_path / "earlyapp"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "models.py").write_text("from jobq.contrib.django import enqueue\n")
    return 'INSTALLED_APPS = [*INSTALLED_APPS, "earlyapp"]\n'


def test_bad_jobq_settings_are_check_errors_not_a_traceback(tmp_path: Path) -> None:
    done = run(tmp_path, 'JOBQ = {"WORKERS": 0, "BOGUS": 1}\n', "check")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "SystemCheckError" in done.stderr
    assert "(jobq.E002) settings.JOBQ has unknown keys: BOGUS." in done.stderr
    assert "(jobq.E003) settings.JOBQ['WORKERS'] must be an int" in done.stderr


def test_a_bad_store_url_is_a_check_error_not_a_traceback(tmp_path: Path) -> None:
    done = run(tmp_path, 'JOBQ = {"STORE": "redis://localhost/0"}\n', "check")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "(jobq.E004) settings.JOBQ['STORE'] is not a store" in done.stderr


def test_tasks_declared_under_bad_settings_run_as_calls_and_refuse_jobs(
    tmp_path: Path,
) -> None:
    code = """
import django
django.setup()  # the app's ready() imports djapp.tasks: @task must not raise
from django.core.exceptions import ImproperlyConfigured
from djapp.tasks import add
from jobq.contrib.django import get_queue
print(add(1, 2))
for call in (lambda: add.enqueue(1, 2), get_queue, lambda: add.queue.start()):
    try:
        call()
    except ImproperlyConfigured as exc:
        print(exc)
"""
    done = run(tmp_path, 'JOBQ = {"WORKERS": 0}\n', code=code)
    assert done.returncode == 0, done.stderr
    refused = "jobq.E003: settings.JOBQ['WORKERS'] must be an int of at least 1, not 0."
    assert done.stdout.splitlines() == ["3", refused, refused, refused]


@pytest.mark.parametrize("jobq", ["", 'JOBQ = {"WORKERS": 0}\n'])
def test_without_the_app_manage_py_check_fails_naming_it(
    tmp_path: Path, jobq: str
) -> None:
    # Nothing imports jobq before the checks run. On Django 5.2 the
    # django_tasks app registered the Tasks framework's check, which asks
    # JobqBackend: a check error per TASKS alias. On Django 6 no check can
    # say it: jobq is first imported by the URL check (the views import
    # djapp.tasks), whose @task then raises ImproperlyConfigured (with bad
    # JOBQ settings too, which no check of jobq is registered in time to say).
    done = run(tmp_path, WITHOUT_THE_APP + jobq, "check")
    assert done.returncode == 1
    if BACKPORT:
        assert "Traceback" not in done.stderr
        assert "(jobq.E006) JobqBackend is the Tasks backend 'default'" in done.stderr
        assert "(jobq.E006) JobqBackend is the Tasks backend 'secondary'" in done.stderr
        assert done.stderr.count(HINT) == 2
    else:
        last = done.stderr.rstrip().splitlines()[-1]
        assert last.startswith("django.core.exceptions.ImproperlyConfigured: jobq.E006")
        assert last.endswith(HINT)


@pytest.mark.parametrize("tasks", ["TASKS names JobqBackend", "no TASKS"])
def test_without_the_app_an_import_at_setup_makes_it_a_check_error(
    tmp_path: Path, tasks: str
) -> None:
    settings = WITHOUT_THE_APP + an_app_importing_jobq_at_setup(tmp_path)
    if tasks == "no TASKS":
        settings += "del TASKS\n"
    done = run(tmp_path, settings, "check")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "SystemCheckError" in done.stderr
    assert done.stderr.count("(jobq.E006) jobq.contrib.django is imported") == 1
    assert done.stderr.count(HINT) == 1


def test_without_the_app_the_first_enqueue_fails_naming_it(tmp_path: Path) -> None:
    code = """
import django
django.setup()
from django.core.exceptions import ImproperlyConfigured
from jobq.contrib.django import enqueue
try:
    enqueue({"n": 1})
except ImproperlyConfigured as exc:
    print(exc)
"""
    done = run(tmp_path, WITHOUT_THE_APP + "del TASKS\n", code=code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("jobq.E006: the jobq queue is used, but the jobq")
    assert done.stdout.rstrip().endswith(HINT)


def test_the_test_project_passes_manage_py_check(tmp_path: Path) -> None:
    done = run(tmp_path, "", "check")
    assert done.returncode == 0, done.stderr
    assert "no issues" in done.stdout
