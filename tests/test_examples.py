"""The examples in ``examples/`` run and do what they say."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import jobq

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


# -- examples/quickstart.py ----------------------------------------------------


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """Run the quickstart once in a subprocess: its output and its directory."""
    directory = tmp_path_factory.mktemp("quickstart")
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py"), str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, directory


def test_quickstart_retries_a_flaky_webhook_until_it_is_delivered(
    quickstart: tuple[str, Path],
) -> None:
    output, _ = quickstart
    assert "flaky.example/hooks (attempt 1): connection reset" in output
    assert "flaky.example/hooks (attempt 2): 429 Too Many Requests" in output
    assert "flaky.example/hooks (attempt 3): delivered" in output


def test_quickstart_shows_dead_letters_with_their_last_error(
    quickstart: tuple[str, Path],
) -> None:
    output, _ = quickstart
    assert "Settled: 2 delivered, 5 retries, 2 dead." in output
    assert "1 failed attempt(s), last_error='jobq.errors.Fatal: 410 Gone'" in output
    assert (
        "4 failed attempt(s), last_error='ConnectionRefusedError: connection refused'"
        in output
    )


def test_quickstart_runs_a_delayed_job_after_the_restart(
    quickstart: tuple[str, Path],
) -> None:
    output, _ = quickstart
    restart = output.index("A new JobQueue on the same file")
    assert "job 5 is still pending" in output[restart:]
    assert (
        "job 5 order.shipped -> https://shop.example/hooks (attempt 1): delivered"
        in output[restart:]
    )
    assert output.rstrip().endswith("to look at).")
    assert "Done: 0 pending, 1 dead" in output


def test_quickstart_leaves_only_the_fatal_job_in_its_file(
    quickstart: tuple[str, Path],
) -> None:
    _, directory = quickstart
    store = directory / "jobs.json"
    document = json.loads(store.read_text())
    assert document["format"] == "jobq"
    assert [(job["id"], job["state"]) for job in document["jobs"]] == [(3, "dead")]

    with jobq.JobQueue[Any](store=store) as queue:  # reads through the public API
        assert queue.stats().pending == 0
        [dead] = queue.dead_jobs()
    assert dead.payload == {"url": "https://gone.example/hooks", "event": "order.paid"}
    assert dead.last_error == "jobq.errors.Fatal: 410 Gone"
    assert dead.attempts == 1


# -- examples/flask_app.py -----------------------------------------------------


@pytest.fixture(scope="module")
def flask_example() -> ModuleType:
    pytest.importorskip("flask")
    spec = importlib.util.spec_from_file_location(
        "jobq_example_flask_app", EXAMPLES / "flask_app.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def app(flask_example: ModuleType, tmp_path: Path) -> Iterator[Any]:
    app = flask_example.create_app(
        {
            "JOBQ_STORE": str(tmp_path / "jobs.json"),
            "JOBQ_BASE_DELAY": 0.01,
            "OUTBOX": str(tmp_path / "outbox.jsonl"),
        }
    )
    yield app
    app.extensions["jobq"].queue.close(timeout=5)


def outbox(app: Any) -> list[dict[str, str]]:
    path = Path(app.config["OUTBOX"])
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_creating_the_flask_app_opens_nothing(
    flask_example: ModuleType, tmp_path: Path
) -> None:
    app = flask_example.create_app({"JOBQ_STORE": str(tmp_path / "jobs.json")})
    try:
        assert list(tmp_path.iterdir()) == []  # no file, no lock: reloader-safe
    finally:
        app.extensions["jobq"].queue.close()


def test_signup_enqueues_a_welcome_mail_that_a_worker_sends_after_a_retry(
    app: Any,
) -> None:
    client = app.test_client()

    response = client.post("/signup", json={"email": "ann@example.com"})

    assert response.status_code == 202
    assert response.get_json() == {"job": 1, "duplicate": False}
    assert app.extensions["jobq"].queue.join(timeout=10)
    assert outbox(app) == [{"to": "ann@example.com", "subject": "Welcome!"}]
    stats = client.get("/stats").get_json()
    assert stats == {
        "pending": 0,
        "running": 0,
        "dead": 0,
        "completed": 1,
        "retried": 1,  # the pretend mail server refused the first try
    }


def test_a_double_signup_while_queued_is_one_mail(app: Any) -> None:
    client = app.test_client()
    app.extensions["jobq"].queue.stop()  # keep the first job pending

    first = client.post("/signup", json={"email": "ann@example.com"}).get_json()
    second = client.post("/signup", json={"email": "ann@example.com"}).get_json()

    assert first == {"job": 1, "duplicate": False}
    assert second == {"job": 1, "duplicate": True}


def test_a_mail_that_cannot_be_delivered_is_a_dead_letter(app: Any) -> None:
    client = app.test_client()

    response = client.post("/signup", json={"email": "bob@nowhere.invalid"})

    assert response.status_code == 202
    queue = app.extensions["jobq"].queue
    assert queue.join(timeout=10)
    assert client.get("/stats").get_json()["dead"] == 1
    [dead] = queue.dead_jobs()
    assert dead.last_error == (
        "jobq.errors.Fatal: no mail server for bob@nowhere.invalid"
    )
    assert outbox(app) == []


def test_the_dead_letter_shows_in_flask_jobq_dead(app: Any) -> None:
    app.test_client().post("/signup", json={"email": "bob@nowhere.invalid"})
    assert app.extensions["jobq"].queue.join(timeout=10)

    result = app.test_cli_runner().invoke(args=["jobq", "dead"])

    assert result.exit_code == 0, result.output
    assert "Fatal: no mail server for bob@nowhere.invalid" in result.output


@pytest.mark.parametrize(
    "body", [{"email": "not-an-address"}, {"name": "ann"}, ["ann@example.com"]]
)
def test_signup_without_an_email_is_refused_and_enqueues_nothing(
    app: Any, body: object
) -> None:
    client = app.test_client()

    response = client.post("/signup", json=body)

    assert response.status_code == 400
    assert client.get("/stats").get_json()["pending"] == 0
    assert app.extensions["jobq"].queue.get(1) is None


# -- examples/workflow.py -----------------------------------------------------


def test_the_workflow_example_revives_a_dead_step_and_the_gallery_follows(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "workflow.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "  resize cat.raw: unreadable" in lines
    assert "The gallery waits on job(s) (2,)" in lines
    # The gallery ran once, after the revived step, with every result in order.
    gallery = [line for line in lines if line.startswith("  gallery")]
    assert gallery == [
        "  gallery 'Holidays': thumbs/beach.jpg, thumbs/cat.jpg, thumbs/dog.jpg"
    ]
    assert lines.index(gallery[0]) > lines.index("  resize cat.raw: done")
    assert lines[-1] == "Gallery: 'Holidays: 3 photos'"
    assert (tmp_path / "jobs.db").exists()
