"""The package as it is published: the sdist and the wheel built from this
tree hold the license and the dashboard's files, the wheel installs into a
new virtualenv with no package index and runs the quickstart there, away
from the source tree, and README.md reads right on a package index page
(images and file links absolute, to files that exist).

The build runs here, with the ``build`` and ``hatchling`` of the test
dependency group (``--no-isolation``: nothing is downloaded); ``.ci/run``
builds again as a release does, in isolation, and runs ``twine check``.
"""

from __future__ import annotations

import email.parser
import email.policy
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.message import Message
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The repository the package's metadata and README.md point at (a
#: placeholder until the project is published: pyproject.toml says so).
REPOSITORY = "https://github.com/jobq-dev/jobq"
RAW = "https://raw.githubusercontent.com/jobq-dev/jobq/main/"
BLOB = f"{REPOSITORY}/blob/main/"

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel, built from this tree."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    (found,) = dist.glob("jobq-*.whl")
    return found


@pytest.fixture(scope="module")
def sdist(dist: Path) -> Path:
    (found,) = dist.glob("jobq-*.tar.gz")
    return found


@pytest.fixture(scope="module")
def metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        text = archive.read(name).decode()
    return email.parser.Parser(policy=email.policy.compat32).parsestr(text)


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtualenv with only the wheel installed, from no index."""
    where = tmp_path_factory.mktemp("venv")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(where)],
        check=True,
        timeout=60,
    )
    pip = [sys.executable, "-m", "pip", "--python", str(where / "bin" / "python")]
    done = subprocess.run(
        [*pip, "install", "-q", "--no-index", "--no-cache-dir", str(wheel)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return where


def _run(venv: Path, *command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a program of the virtualenv, with nothing of this tree on its path."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    return subprocess.run(
        [str(venv / "bin" / command[0]), *command[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_installed_wheel_runs_the_quickstart_away_from_the_source_tree(
    venv: Path, tmp_path: Path
) -> None:
    shutil.copy(ROOT / "examples" / "quickstart.py", tmp_path)
    done = _run(venv, "python", "quickstart.py", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Settled: 2 delivered, 5 retries, 2 dead." in done.stdout
    assert done.stdout.rstrip().endswith(
        "(the 410 stays in the dead-letter list for a human to look at)."
    )
    where = _run(
        venv, "python", "-c", "import jobq; print(jobq.__file__)", cwd=tmp_path
    )
    assert Path(where.stdout.strip()).is_relative_to(venv)


def test_the_installed_wheel_has_the_jobq_command(venv: Path, tmp_path: Path) -> None:
    store = tmp_path / "jobs.db"
    done = _run(venv, "jobq", "migrate", "--store", f"sqlite:///{store}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    done = _run(venv, "jobq", "stats", "--store", f"sqlite:///{store}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:2] == ["pending", "0"]


def test_the_sdist_and_the_wheel_hold_the_mit_license(
    sdist: Path, wheel: Path, metadata: Message
) -> None:
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.startswith("MIT License\n")
    with tarfile.open(sdist) as archive:
        member = archive.extractfile(f"{sdist.name.removesuffix('.tar.gz')}/LICENSE")
        assert member is not None
        assert member.read().decode() == license_text
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [
            n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")
        ]
        assert archive.read(name).decode() == license_text
    assert metadata["License-Expression"] == "MIT"


def test_the_wheel_holds_the_dashboard_and_django_templates_and_py_typed(
    wheel: Path,
) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {
        "jobq/py.typed",
        "jobq/web/templates/base.html",
        "jobq/web/static/dashboard.css",
        "jobq/web/static/dashboard.js",
        "jobq/contrib/django/templates/jobq/admin_index.html",
    } <= names
    assert not any(name.startswith(("tests/", "benchmarks/")) for name in names)


def test_the_published_extras_are_the_integrations_and_nothing_is_required(
    metadata: Message,
) -> None:
    assert sorted(metadata.get_all("Provides-Extra") or []) == [
        "cron",
        "django",
        "flask",
        "opentelemetry",
        "postgres",
        "prometheus",
        "testing",
        "web",
    ]
    requires = metadata.get_all("Requires-Dist") or []
    assert all("extra ==" in requirement for requirement in requires)


def test_the_metadata_links_to_the_repository(metadata: Message) -> None:
    urls = dict(entry.split(", ", 1) for entry in metadata.get_all("Project-URL") or [])
    assert sorted(urls) == ["Changelog", "Documentation", "Homepage", "Issues"]
    assert all(url.startswith(REPOSITORY) for url in urls.values())
    assert metadata["Description-Content-Type"] == "text/markdown"


def test_readme_images_and_file_links_are_absolute_and_their_files_exist() -> None:
    targets = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    files = [t for t in targets if not t.startswith(("#", "http://", "https://"))]
    assert files == [], "relative links break on a package index page"
    ours = [t for t in targets if t.startswith((RAW, BLOB))]
    assert len(ours) >= 6  # the dashboard's pictures, the benchmarks, the changelog
    for target in ours:
        path = target.removeprefix(RAW).removeprefix(BLOB)
        assert (ROOT / path).is_file(), target
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    assert images
    assert all(image.startswith(RAW) for image in images)
