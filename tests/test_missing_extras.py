"""Each part of jobq whose extra is missing says which extra to install: a
``MissingExtra`` (a ``ModuleNotFoundError``) when the integration is
imported, one line from ``jobq dashboard``.

Every test runs a new interpreter whose import system hides some packages,
as if they were not installed (a finder first on ``sys.meta_path``), so
nothing is uninstalled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DJANGO_PROJECT = ROOT / "tests" / "django_project"

#: Prepended to the code a test runs: hides the top-level packages in HIDDEN.
HIDE = """
import sys

class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NotInstalled())
"""

#: Prints what the code under it raised, as JSON.
REPORT = """
import json
try:
{code}
except ImportError as exc:
    print(json.dumps({{
        "type": type(exc).__name__,
        "module_not_found": isinstance(exc, ModuleNotFoundError),
        "extra": getattr(exc, "extra", None),
        "name": exc.name,
        "message": str(exc),
    }}))
else:
    print("null")
"""


def hidden_run(
    hidden: set[str], code: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new interpreter in which ``hidden`` are not installed."""
    return subprocess.run(
        [sys.executable, "-c", f"HIDDEN = {sorted(hidden)!r}\n{HIDE}\n{code}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def raised(hidden: set[str], code: str, env: dict[str, str] | None = None) -> object:
    """What ``code`` raised with ``hidden`` not installed (``None``: nothing)."""
    body = "\n".join("    " + line for line in code.strip().splitlines())
    done = hidden_run(hidden, REPORT.format(code=body), env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


FLASK = {"flask", "click", "werkzeug", "itsdangerous", "blinker"}


@pytest.mark.parametrize(
    ("extra", "hidden", "code", "missing"),
    [
        ("flask", FLASK, "from jobq.contrib.flask import JobQ", "click"),
        ("flask", {"flask"}, "from jobq.contrib.flask import JobQ", "flask"),
        ("django", {"django"}, "import jobq.contrib.django", "django"),
        ("django", {"django"}, "from jobq.contrib.django import task", "django"),
        (
            "django",
            {"django"},
            "from jobq.contrib.django.tasks import JobqBackend",
            "django",
        ),
        (
            "prometheus",
            {"prometheus_client"},
            "from jobq.contrib.prometheus import instrument",
            "prometheus_client",
        ),
        (
            "opentelemetry",
            {"opentelemetry"},
            "from jobq.contrib.opentelemetry import instrument",
            "opentelemetry",
        ),
        ("web", {"jinja2"}, "from jobq.web import make_app", "jinja2"),
        ("testing", {"pytest", "_pytest"}, "import jobq.testing", "pytest"),
        (
            "cron",
            {"cronsim"},
            "import jobq; jobq.JobQueue(None).periodic(cron='0 3 * * *')",
            "cronsim",
        ),
        (
            "postgres",
            {"psycopg", "psycopg_pool"},
            "import jobq; jobq.JobQueue(None, store='postgresql://localhost/db')",
            "psycopg",
        ),
    ],
)
def test_a_missing_extra_is_named_with_the_command_that_installs_it(
    extra: str, hidden: set[str], code: str, missing: str
) -> None:
    found = raised(hidden, code)
    assert isinstance(found, dict), found
    assert found["type"] == "MissingExtra"
    assert found["module_not_found"]
    assert found["extra"] == extra
    assert found["name"] == missing
    assert f"pip install 'jobq[{extra}]'" in found["message"]
    assert f"no module named {missing!r}" in found["message"]


def test_the_flask_message_names_flask_not_its_dependency() -> None:
    found = raised(FLASK, "from jobq.contrib.flask import JobQ")
    assert isinstance(found, dict)
    assert found["message"] == (
        "jobq.contrib.flask needs Flask, which is not installed (no module named "
        "'click'): pip install 'jobq[flask]'"
    )


def test_import_jobq_and_its_command_need_no_extra() -> None:
    every_extra = {
        *FLASK,
        "django",
        "django_tasks",
        "jinja2",
        "cronsim",
        "prometheus_client",
        "opentelemetry",
        "psycopg",
        "psycopg_pool",
        "pytest",
        "waitress",
    }
    code = "import jobq, jobq.cli, jobq.stores\njobq.JobQueue(None).enqueue(1)"
    assert raised(every_extra, code) is None


def test_the_django_dashboard_without_jinja2_names_the_web_extra() -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(DJANGO_PROJECT), str(ROOT)])
    env["DJANGO_SETTINGS_MODULE"] = "djproject.settings"
    code = "import django; django.setup()\nimport jobq.contrib.django.urls"
    found = raised({"jinja2"}, code, env)
    assert isinstance(found, dict)
    assert (found["type"], found["extra"]) == ("MissingExtra", "web")


def test_jobq_dashboard_without_jinja2_says_what_to_install_in_one_line(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'jobs.db'}"
    migrate = [sys.executable, "-m", "jobq.cli", "migrate", "--store", store]
    subprocess.run(migrate, cwd=ROOT, capture_output=True, timeout=60, check=True)
    code = "from jobq.cli import main\nsys.exit(main(['dashboard', '--store', STORE]))"
    code = code.replace("STORE", repr(store))
    done = hidden_run({"jinja2"}, code)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "jobq dashboard: the jobq dashboard (jobq.web) needs Jinja2, which is not "
        "installed (no module named 'jinja2'): pip install 'jobq[web]'\n"
    )
