"""The dashboard in a real browser: Playwright driving Debian's Chromium
(``/usr/bin/chromium``, installed by ``.ci/run``; never a downloaded one).

Skipped when Chromium or Playwright is missing, unless JOBQ_REQUIRE_BROWSER=1
(as in CI): then they fail. Screenshots go to a temporary folder, or to
``$JOBQ_SCREENSHOTS`` (``JOBQ_SCREENSHOTS=docs pytest tests/test_browser_dashboard.py``
refreshes the README's).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboard_helpers import XSS, django_dead_job, no_autostart  # noqa: F401 (fixture)
from flask import Flask
from limits_helpers import WhileHeld, hold_one, needs_limits
from werkzeug.serving import make_server

import jobq
from jobq import Fatal, Job
from jobq.contrib.flask import JobQ
from jobq.stores import SqliteStore
from jobq.web import make_app

CHROMIUM = "/usr/bin/chromium"

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium for this module's tests (not the session's: Playwright's
    sync API keeps an event loop running in this thread while it lives,
    where other tests call ``asyncio.run``)."""
    required = os.environ.get("JOBQ_REQUIRE_BROWSER") == "1"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if required:
            raise
        pytest.skip("Playwright is not installed")
    if not os.path.exists(CHROMIUM):
        if required:
            pytest.fail(f"JOBQ_REQUIRE_BROWSER=1 but {CHROMIUM} is missing")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    # With that event loop running, Django refuses database calls in this
    # thread unless told (the Django test).
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM)
            yield chromium
            chromium.close()
    finally:
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page; fails the test if any dialog other than a confirmation
    opens (an alert would be a script the dashboard let through)."""
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.dialogs = []

    def on_dialog(dialog: Any) -> None:
        page.dialogs.append((dialog.type, dialog.message))
        if dialog.type == "confirm":
            dialog.accept()
        else:
            dialog.dismiss()

    page.on("dialog", on_dialog)
    yield page
    context.close()
    assert [d for d in page.dialogs if d[0] != "confirm"] == []


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = os.environ.get("JOBQ_SCREENSHOTS")
    return Path(folder) if folder else tmp_path


class Loop:
    """A handler that runs lines of its own until released: a cancellation
    stops it at its next line (``JobCancelled``)."""

    def __init__(self) -> None:
        self.started, self.release = threading.Event(), threading.Event()

    def __call__(self, job: Job[Any]) -> str:
        self.started.set()
        while not self.release.wait(0.01):
            pass
        return "released"  # never cancelled: the test fails on "completed"


#: The loops that jobs with the payload ``{"loop": name}`` run.
LOOPS: dict[str, Loop] = {}


def fail(job: Job[Any]) -> str:
    """Thumbnails are made, loops run; every other job dies."""
    if isinstance(job.payload, dict) and "thumbnail" in job.payload:
        return "made"
    if isinstance(job.payload, dict) and "loop" in job.payload:
        return LOOPS[job.payload["loop"]](job)
    raise Fatal(f"could not deliver {job.payload!r}")


def nightly_report() -> None:
    """A periodic job, for the overview's table of them."""


@pytest.fixture
def flask_site(tmp_path: Path) -> Iterator[tuple[str, jobq.JobQueue[Any]]]:
    """A Flask app with the dashboard at /jobq, served on a free port."""
    app = Flask("browser_test")
    app.config["JOBQ_AUTOSTART"] = False
    jobs = JobQ(
        app, handler=fail, store=SqliteStore(tmp_path / "jobs.db"), dashboard="/jobq",
        keep_completed=3600,
    )  # fmt: skip
    queue = jobs.state(app).queue
    queue.periodic(cron="0 3 * * *", tz="UTC", name="reports.nightly")(nightly_report)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/jobq", queue
    server.shutdown()
    thread.join()
    server.server_close()
    queue.close()


def bury(queue: jobq.JobQueue[Any], payload: Any, **options: Any) -> int:
    job = queue.enqueue(payload, **options)
    queue.run_pending()
    return job.id


def test_flask_overview_updates_itself_then_a_dead_job_is_retried(
    flask_site: tuple[str, jobq.JobQueue[Any]], page: Any, shots: Path
) -> None:
    from playwright.sync_api import expect

    base, queue = flask_site
    first = bury(queue, {"to": "ann@example.com", "template": "welcome"}, key="mail-1")
    bury(queue, {"thumbnail": "cover.jpg"})  # made, and kept for an hour
    queue.enqueue({"report": "monthly"}, delay=3600)

    page.goto(base + "/")
    dead = page.locator('[data-count="dead"]')
    expect(dead).to_have_text("1")
    expect(page.locator('[data-count="kept"]')).to_have_text("1")
    expect(page.locator(".throughput th")).to_have_text(
        ["Minute (UTC)", "Succeeded", "Failed", "Completed", "Died"]
    )
    expect(page.locator(".schedules")).to_contain_text("reports.nightly")
    bury(queue, {"to": "bo@example.com", "template": "reset"})
    queue.enqueue_many([{"thumbnail": i} for i in range(3)])
    expect(dead).to_have_text("2")  # refreshed by itself, no reload
    expect(page.locator('[data-count="due"]')).to_have_text("3")
    # the refreshed rows keep every column (this process's and the store's)
    expect(page.locator("#throughput tr >> nth=0 >> td")).to_have_count(5)
    page.screenshot(path=str(shots / "dashboard-overview.png"), full_page=True)

    page.click('a[href="/jobq/jobs/dead"] >> nth=0')
    page.click(f'a[href="/jobq/job/{first}"]')
    expect(page.locator("#payload")).to_contain_text('"to": "ann@example.com"')
    page.screenshot(path=str(shots / "dashboard-dead-job.png"), full_page=True)
    page.click("text=Retry")
    expect(page.locator(".message")).to_have_text("The job is pending again.")
    page.goto(base + "/jobs/dead")
    expect(page.locator(f'a[href="/jobq/job/{first}"]')).to_have_count(0)


def test_cancel_stops_a_running_job_which_ends_in_the_cancelled_list(
    flask_site: tuple[str, jobq.JobQueue[Any]], page: Any, shots: Path
) -> None:
    from playwright.sync_api import expect

    base, queue = flask_site
    loop = LOOPS["export"] = Loop()
    job = queue.enqueue({"loop": "export"}).id
    queue.start(workers=1)
    try:
        assert loop.started.wait(30)
        page.goto(base + "/jobs/running")
        page.click(f'a[href="/jobq/job/{job}"]')
        page.click('button:has-text("Cancel")')
        expect(page.locator(".message")).to_contain_text("asked to stop")
        assert page.dialogs == [
            ("confirm", f"Stop running job {job}? It ends cancelled.")
        ]
        assert queue.join(timeout=30)
    finally:
        loop.release.set()
        del LOOPS["export"]

    page.goto(base + "/")
    expect(page.locator('[data-count="cancelled"]')).to_have_text("1")
    page.click('a[href="/jobq/jobs/cancelled"] >> nth=0')
    expect(page.locator("h1")).to_have_text("Cancelled")
    page.click(f'a[href="/jobq/job/{job}"]')
    expect(page.locator("h1 .state")).to_have_text("cancelled")
    expect(page.locator("#cancellation")).to_contain_text("by dashboard")
    expect(page.locator("main")).to_contain_text("attempt 1")
    page.screenshot(path=str(shots / "dashboard-cancelled-job.png"), full_page=True)


def test_a_bulk_delete_asks_first(
    flask_site: tuple[str, jobq.JobQueue[Any]], page: Any
) -> None:
    from playwright.sync_api import expect

    base, queue = flask_site
    for i in range(3):
        bury(queue, {"n": i})

    page.goto(base + "/jobs/dead")
    page.click("text=Delete all matching")

    expect(page.locator(".message")).to_have_text(
        "Deleted the dead jobs matching the filter."
    )
    assert [d[0] for d in page.dialogs] == ["confirm"]
    assert queue.stats().dead == 0


def test_a_script_in_a_payload_is_shown_as_text(
    flask_site: tuple[str, jobq.JobQueue[Any]], page: Any
) -> None:
    from playwright.sync_api import expect

    base, queue = flask_site
    job_id = bury(queue, XSS, key=XSS)

    for path in ["/jobs/dead", f"/job/{job_id}", "/jobs/dead?key=" + XSS]:
        page.goto(base + path)
    expect(page.locator("#payload")).to_have_count(0)  # the filtered list page
    page.goto(base + f"/job/{job_id}")
    expect(page.locator("#payload")).to_have_text(f'"{XSS}"')
    assert page.dialogs == []


@pytest.fixture
def limited_site() -> Iterator[tuple[str, jobq.JobQueue[Any], WhileHeld[None]]]:
    """A dashboard (refreshing every 0.2 s) of a queue in memory with a
    limit, served on a free port; its handler holds a job back (see
    ``limits_helpers``)."""
    handler: WhileHeld[None] = WhileHeld()
    queue: jobq.JobQueue[Any] = jobq.JobQueue(handler)
    needs_limits(queue)
    queue.limit("smtp", concurrency=1)
    queue.limit("account:*", concurrency=1)
    server = make_server("127.0.0.1", 0, make_app(queue, refresh_seconds=0.2),
                         threaded=True)  # fmt: skip
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", queue, handler
    server.shutdown()
    thread.join()
    server.server_close()
    queue.close()


def test_a_limit_s_counts_and_a_held_job_in_a_browser(
    limited_site: tuple[str, jobq.JobQueue[Any], WhileHeld[None]],
    page: Any,
    shots: Path,
) -> None:
    from playwright.sync_api import expect

    base, queue, handler = limited_site

    def look(held: int) -> None:
        """While the first job holds smtp's one slot, and the second waits."""
        page.goto(base + "/")
        smtp = page.locator('tr[data-limit="smtp"]')
        expect(smtp.locator('[data-limit-count="running"]')).to_have_text("1")
        expect(smtp.locator('[data-limit-count="waiting"]')).to_have_text("1")
        expect(page.locator('tr[data-limit="account:*"]')).to_contain_text("each key")
        queue.enqueue("waits too", limits=["smtp"])
        assert queue.run_pending() == 0  # held as well
        expect(smtp.locator('[data-limit-count="waiting"]')).to_have_text("2")
        page.screenshot(path=str(shots / "dashboard-limits.png"), full_page=True)
        page.click('a[href="/jobs/due"] >> nth=0')
        expect(page.locator(f'a[href="/job/{held}"] + .state.held')).to_have_text(
            "held by smtp"
        )
        page.click(f'a[href="/job/{held}"]')
        expect(page.locator("h1 .state.held")).to_have_text("held by smtp")
        expect(page.locator("#limits")).to_have_text("smtp, account:42")
        expect(page.locator("#held-by")).to_contain_text("smtp: waits")

    hold_one(queue, handler, look, also=("account:42",))

    assert queue.run_pending() == 0  # both ran once the slot was free
    assert queue.stats().pending == 0
    page.goto(base + "/")
    smtp = page.locator('tr[data-limit="smtp"]')
    expect(smtp.locator('[data-limit-count="running"]')).to_have_text("0")
    expect(smtp.locator('[data-limit-count="waiting"]')).to_have_text("0")


def test_the_standalone_command_in_a_browser(tmp_path: Path, page: Any) -> None:
    from playwright.sync_api import expect

    path = tmp_path / "jobs.db"
    with jobq.JobQueue(fail, store=SqliteStore(path)) as queue:
        bury(queue, XSS)
    process = subprocess.Popen(
        [sys.executable, "-m", "jobq.cli", "dashboard", "--bind", "127.0.0.1:0",
         "--store", f"sqlite:///{path}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        found = re.search(r"serving (\S+)", process.stdout.readline())
        assert found is not None
        page.goto(found.group(1))
        expect(page.locator('[data-count="dead"]')).to_have_text("1")
        page.goto(found.group(1).split("?")[0] + "job/1")
        page.click("text=Retry")
        expect(page.locator(".message")).to_have_text("The job is pending again.")
    finally:
        process.terminate()
        process.communicate(timeout=10)


@pytest.fixture
def django_site() -> Iterator[str]:
    """The test project served one request at a time. Not pytest-django's
    live_server: its threads share one database connection (that of an
    in-memory SQLite database), and a page's assets are asked for at once,
    so two threads used it together (a request refused as anonymous, once a
    segmentation fault). Here the server thread has its own connection to
    the test database, a file (see the project's settings)."""
    from django.core.wsgi import get_wsgi_application

    server = make_server("127.0.0.1", 0, get_wsgi_application(), threaded=False)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join()
    server.server_close()


# The test project's SQLite file is shared with test_django.py's processes:
# before SqliteStore stopped opening an existing file itself (see
# test_another_store_on_the_file_leaves_this_process_its_locks), their exit
# could delete its -wal and -shm files under this process's connections.
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_autostart")
def test_the_django_mounting_in_a_browser(
    django_site: str, page: Any, django_user_model: Any
) -> None:
    from django.test import Client
    from playwright.sync_api import expect

    from jobq.contrib.django import get_queue

    job_id = django_dead_job()
    client = Client()
    client.force_login(django_user_model.objects.create_user("cy", is_staff=True))
    session = client.cookies["sessionid"].value
    page.context.add_cookies(
        [{"name": "sessionid", "value": session, "url": django_site}]
    )

    page.goto(f"{django_site}/admin/jobq/job/{job_id}")
    expect(page.locator("#payload")).to_contain_text(XSS)
    page.click("text=Retry")

    expect(page.locator(".message")).to_have_text("The job is pending again.")
    get_queue().cancel(job_id)
