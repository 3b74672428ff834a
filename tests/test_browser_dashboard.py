"""The dashboard in a real browser: Playwright driving Debian's Chromium
(``/usr/bin/chromium``, installed by ``.ci/run``; never a downloaded one).

Skipped when Chromium or Playwright is missing, unless JOBQ_REQUIRE_BROWSER=1
(as in CI): then they fail. Screenshots go to a temporary folder, or to
``$JOBQ_SCREENSHOTS`` (``JOBQ_SCREENSHOTS=docs pytest tests/test_browser_dashboard.py``
refreshes the documentation's: docs/dashboard-*.png).
"""

from __future__ import annotations

import contextlib
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
from workflow_helpers import build, step

import jobq
from jobq import Fatal, Job
from jobq.contrib.flask import JobQ
from jobq.stores import SqliteStore
from jobq.web import make_app

CHROMIUM = "/usr/bin/chromium"
PASSWORD = "a-password-for-tests"  # noqa: S105
WAIT = 20.0  # seconds: a cap, so that a broken run fails, never hangs

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


@contextlib.contextmanager
def served(app: Any, *, threaded: bool = True) -> Iterator[str]:
    """``app`` (WSGI) served on a free port of 127.0.0.1 meanwhile: its URL."""
    server = make_server("127.0.0.1", 0, app, threaded=threaded)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


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
    with served(app) as base:
        yield base + "/jobq", queue
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
    attempts = page.locator("#figures svg.chart >> nth=0")
    expect(attempts).to_have_attribute("aria-label", "Attempts: 1 succeeded, 1 failed")
    expect(page.locator(".schedules")).to_contain_text("reports.nightly")
    bury(queue, {"to": "bo@example.com", "template": "reset"})
    queue.enqueue_many([{"thumbnail": i} for i in range(3)])
    expect(dead).to_have_text("2")  # refreshed by itself, no reload
    expect(page.locator('[data-count="due"]')).to_have_text("3")
    # the charts too: redrawn by the server, put in place by the page
    expect(attempts).to_have_attribute("aria-label", "Attempts: 1 succeeded, 2 failed")
    expect(page.locator("#figures rect.failed")).to_have_count(1)
    page.screenshot(path=str(shots / "dashboard-overview.png"), full_page=True)
    page.locator("#figures summary").click()
    expect(page.locator("table.figures tbody tr")).to_have_count(60)

    page.click('a[href="/jobq/jobs/dead"] >> nth=0')
    page.click(f'a[href="/jobq/job/{first}"]')
    expect(page.locator("#payload")).to_contain_text('"to": "ann@example.com"')
    page.screenshot(path=str(shots / "dashboard-dead-job.png"), full_page=True)
    page.click('button:text-is("Retry")')
    expect(page.locator(".message")).to_have_text("The job is pending again.")
    page.goto(base + "/jobs/dead")
    expect(page.locator(f'a[href="/jobq/job/{first}"]')).to_have_count(0)


def test_a_schedule_is_paused_resumed_and_run_now_in_a_browser(
    flask_site: tuple[str, jobq.JobQueue[Any]], page: Any, shots: Path
) -> None:
    from playwright.sync_api import expect

    base, queue = flask_site
    page.goto(base + "/")
    row = page.locator('tr[data-schedule="reports.nightly"]')
    expect(row.locator("ol.slots li")).to_have_count(5)

    row.locator("button", has_text="Pause").click()  # asks first: accepted
    expect(page.locator(".message")).to_contain_text("The schedule was paused")
    expect(row.locator(".badge.paused")).to_have_text("paused")
    expect(row).to_contain_text("by dashboard")
    assert queue.schedules()[0].paused
    assert page.dialogs[-1][0] == "confirm"
    assert page.dialogs[-1][1].startswith("Pause reports.nightly?")
    page.screenshot(path=str(shots / "dashboard-schedules.png"), full_page=True)

    row.locator("button", has_text="Resume").click()
    expect(page.locator(".message")).to_contain_text("The schedule was resumed")
    expect(row.locator(".badge.paused")).to_have_count(0)
    assert not queue.schedules()[0].paused

    row.locator("button", has_text="Run now").click()
    expect(page.locator(".message")).to_contain_text("enqueued now")
    (job,) = queue.browse("due").jobs
    expect(page.locator('[data-count="due"]')).to_have_text("1")
    row.locator(f'a[href="/jobq/job/{job.id}"]').click()
    expect(page.locator("h1")).to_contain_text(f"Job {job.id}")
    expect(page.locator("main")).to_contain_text("reports.nightly")
    expect(page.locator("main")).to_contain_text("(run now)")


def test_the_processes_and_tasks_pages_show_a_worker_and_its_job(
    flask_site: tuple[str, jobq.JobQueue[Any]], page: Any, shots: Path
) -> None:
    from playwright.sync_api import expect

    base, queue = flask_site
    loop = Loop()
    report = queue.task(loop, name="reports.monthly")
    bury(queue, {"n": 1})  # a plain job that fails: the task page's other row
    job = report.enqueue({"month": "2026-11"})
    queue.start(workers=2)
    try:
        assert loop.started.wait(WAIT)
        page.goto(base + "/processes")
        # The page refreshes itself: the job shows once a beat has named it.
        link = page.locator(f'a[href="/jobq/job/{job.id}"]')
        row = page.locator("table.processes tbody tr").filter(has=link)
        expect(row).to_contain_text("1 busy, 1 idle", timeout=WAIT * 1000)
        page.screenshot(path=str(shots / "dashboard-processes.png"), full_page=True)
    finally:
        loop.release.set()
    queue.stop(timeout=WAIT)
    page.goto(base + "/tasks")
    task = page.locator('tr[data-task="reports.monthly"]')
    expect(task.locator("td >> nth=2")).to_have_text("1")  # succeeded
    plain = page.locator('tr[data-task=""] td.error')  # the plain job's last error
    expect(plain).to_contain_text("Fatal: could not deliver {'n': 1}")
    page.screenshot(path=str(shots / "dashboard-tasks.png"), full_page=True)
    page.click('tr[data-task="reports.monthly"] >> text=reports.monthly')
    expect(page).to_have_url(base + "/jobs/dead?task=reports.monthly")


PHONE = {"width": 390, "height": 844}


def test_on_a_phone_the_navigation_wraps_inside_the_header_and_tables_scroll(
    flask_site: tuple[str, jobq.JobQueue[Any]], browser: Any, shots: Path
) -> None:
    base, queue = flask_site
    job = bury(queue, {"n": "x" * 200}, key="k" * 100)  # long words
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    try:
        for path in ["/", "/jobs/dead", f"/job/{job}", "/jobs/completed", "/tasks",
                     "/processes"]:  # fmt: skip
            page.goto(base + path)
            header = page.locator("header").bounding_box()
            nav = page.locator("header nav").bounding_box()
            assert header["y"] + header["height"] >= nav["y"] + nav["height"], path
            assert header["x"] + header["width"] >= nav["x"] + nav["width"], path
            assert page.evaluate(
                "document.documentElement.scrollWidth <= innerWidth"
            ), path
        page.goto(base + "/jobs/dead")
        wrapper = page.locator(".scroll:has(table.jobs)")
        assert wrapper.evaluate("node => node.scrollWidth > node.clientWidth")
        assert wrapper.evaluate("node => getComputedStyle(node).overflowX") == "auto"
        page.screenshot(path=str(shots / "dashboard-phone.png"), full_page=True)
    finally:
        context.close()


def test_the_navigation_marks_the_current_page_and_no_page_asks_for_a_missing_file(
    flask_site: tuple[str, jobq.JobQueue[Any]], page: Any
) -> None:
    from playwright.sync_api import expect

    base, queue = flask_site
    job = bury(queue, {"n": 1})
    missing: list[str] = []
    page.on(
        "response",
        lambda answer: missing.append(answer.url) if answer.status >= 400 else None,
    )
    errors: list[str] = []  # a CSP violation is one
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

    with page.expect_response(lambda answer: "favicon" in answer.url) as icon:
        page.goto(base + "/jobs/dead")
    current = page.locator('header nav a[aria-current="page"]')
    expect(current).to_have_text("Dead")
    weights = page.locator("header nav a").evaluate_all(
        "links => links.map(a => getComputedStyle(a).fontWeight)"
    )
    page.goto(base + "/")
    expect(current).to_have_text("Overview")
    page.goto(base + f"/job/{job}")
    expect(current).to_have_count(0)
    for path, title in [("/tasks", "Tasks"), ("/processes", "Processes"),
                        ("/?range=24h", "Overview")]:  # fmt: skip
        page.goto(base + path)
        expect(current).to_have_text(title)

    assert icon.value.status == 200
    assert icon.value.header_value("content-type") == "image/svg+xml"
    assert sorted(set(weights)) == ["400", "600"]  # the current one stands out
    assert (missing, errors) == ([], [])


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
        "Deleted 3 of 3 dead jobs matching the filter."
    )
    assert [d[0] for d in page.dialogs] == ["confirm"]
    assert queue.stats().dead == 0


def test_rows_ticked_in_the_dead_list_are_retried_or_deleted_together(
    flask_site: tuple[str, jobq.JobQueue[Any]], page: Any
) -> None:
    from playwright.sync_api import expect

    base, queue = flask_site
    first, second, third = (bury(queue, {"n": i}) for i in range(3))
    page.goto(base + "/jobs/dead")
    delete = page.locator('button:has-text("Delete selected")')
    retry = page.locator('button:has-text("Retry selected")')
    every = page.locator("[data-select-all]")

    expect(delete).to_be_disabled()  # nothing ticked yet
    every.check()
    expect(page.locator('input[name="id"]:checked')).to_have_count(3)
    every.uncheck()
    page.check(f'input[name="id"][value="{first}"]')
    page.check(f'input[name="id"][value="{third}"]')
    expect(every).to_have_js_property("indeterminate", True)
    delete.click()

    expect(page.locator(".message")).to_have_text("Deleted 2 of 2 selected dead jobs.")
    assert page.dialogs == [("confirm", "Delete the selected jobs?")]
    assert [job.id for job in queue.dead_jobs()] == [second]
    page.check(f'input[name="id"][value="{second}"]')
    retry.click()
    expect(page.locator(".message")).to_have_text("Retried 1 of 1 selected dead jobs.")
    assert len(page.dialogs) == 1  # a retry does not ask
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
    with served(make_app(queue, refresh_seconds=0.2)) as base:
        yield base, queue, handler
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


def bounce(job: Job[Any]) -> None:
    """A mail server that refuses every attempt for now."""
    raise ConnectionRefusedError(f"smtp refused {job.payload['to']}")


def test_a_retrying_job_in_its_own_list_apart_from_the_delayed_ones(
    page: Any, shots: Path
) -> None:
    from playwright.sync_api import expect

    queue: jobq.JobQueue[Any] = jobq.JobQueue(bounce, base_delay=630, jitter=False)
    with served(make_app(queue, refresh_seconds=0.2)) as base:
        queue.enqueue({"to": "ann@example.com"}, delay=3600)  # delayed, never tried
        page.goto(base + "/")
        retrying = page.locator('[data-count="retrying"]')
        expect(retrying).to_have_text("0")
        job = bury(queue, {"to": "bob@example.com"})  # fails, retries in 10.5 min
        expect(retrying).to_have_text("1")  # refreshed by itself, no reload
        expect(page.locator('[data-count="delayed"]')).to_have_text("1")

        page.click("a.card.retrying")
        expect(page.locator("h1")).to_have_text("Retrying")
        expect(page.locator('header nav a[aria-current="page"]')).to_have_text(
            "Retrying"
        )
        rows = page.locator("table.jobs tbody tr")
        expect(rows).to_have_count(1)
        expect(rows).to_contain_text("failed 1 of 5 attempts; next in 10 min")
        expect(rows.locator("td.error")).to_have_text(
            "ConnectionRefusedError: smtp refused bob@example.com"
        )
        page.screenshot(path=str(shots / "dashboard-retrying.png"), full_page=True)
        rows.locator(f'input[name="id"][value="{job}"]').check()
        page.click('button:has-text("Cancel selected")')
        expect(page.locator(".message")).to_have_text(
            "Cancelled 1 of 1 selected pending jobs."
        )
        expect(page.locator("table.jobs")).to_contain_text("No jobs.")
        page.click('header nav a[href="/jobs/delayed"]')
        expect(page.locator("table.jobs tbody tr")).to_have_count(1)
        expect(page.locator("table.jobs")).to_contain_text("no attempt yet")
    queue.close()
    assert [d[0] for d in page.dialogs] == ["confirm"]


@pytest.fixture
def workflow_site() -> Iterator[tuple[str, jobq.JobQueue[Any]]]:
    """A dashboard (refreshing every 0.2 s) of a queue in memory that runs
    ``workflow_helpers.step``, served on a free port."""
    queue: jobq.JobQueue[Any] = jobq.JobQueue(step, keep_completed=600, max_attempts=1)
    with served(make_app(queue, refresh_seconds=0.2)) as base:
        yield base, queue
    queue.close()


def test_a_workflow_in_a_browser_the_waiting_list_and_a_child_s_page(
    workflow_site: tuple[str, jobq.JobQueue[Any]], page: Any, shots: Path
) -> None:
    from playwright.sync_api import expect

    base, queue = workflow_site
    flow = build(queue)

    page.goto(base + "/")
    waiting = page.locator('[data-count="waiting"]')
    expect(waiting).to_have_text("2")
    queue.enqueue("another", after=[flow.done, flow.child])
    expect(waiting).to_have_text("3")  # refreshed by itself, no reload
    page.click('nav a[href="/jobs/waiting"]')
    expect(page.locator("h1")).to_have_text("Waiting")
    expect(page.locator("table.jobs tbody tr")).to_have_count(3)
    page.click(f'table.jobs a[href="/job/{flow.child}"] >> nth=0')
    expect(page.locator("h1 .state")).to_have_text("waiting")
    parents = page.locator("#parents tbody tr")
    expect(parents).to_have_count(2)
    expect(parents.nth(0)).to_contain_text(f"{flow.dead}")
    expect(parents.nth(0).locator(".state")).to_have_text(["dead", "waited on"])
    expect(parents.nth(1).locator(".state")).to_have_text(["completed"])
    expect(page.locator("#children tbody tr")).to_have_count(2)
    expect(page.locator("#after-failure")).to_contain_text("wait")
    page.screenshot(path=str(shots / "dashboard-workflow.png"), full_page=True)

    page.click(f'#parents a[href="/job/{flow.dead}"]')
    page.click('button:has-text("Delete")')
    expect(page.locator(".message")).to_have_text("The dead job was deleted.")
    page.goto(base + f"/job/{flow.child}")
    expect(page.locator("h1 .state")).to_have_text("cancelled")
    expect(page.locator("#cancellation")).to_contain_text(
        f"by parent job {flow.dead} was deleted"
    )
    expect(page.locator("#parents tbody tr >> nth=0")).to_contain_text("gone")
    page.click(f'#children a[href="/job/{flow.grandchild}"]')
    expect(page.locator("#cancellation")).to_contain_text(
        f"by parent job {flow.child} was cancelled"
    )
    page.goto(base + f"/job/{flow.orphan}")
    expect(page.locator("#parents tbody tr")).to_contain_text(f"{flow.gone}")
    expect(page.locator("#parents .state")).to_have_text("gone")
    page.goto(base + "/jobs/waiting")
    expect(page.locator("table.jobs")).to_contain_text("No jobs.")
    assert [d[0] for d in page.dialogs] == ["confirm"]


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
        page.click('button:text-is("Retry")')
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

    with served(get_wsgi_application(), threaded=False) as base:
        yield base


# The test project's SQLite file is shared with test_django.py's processes:
# before SqliteStore stopped opening an existing file itself (see
# test_another_store_on_the_file_leaves_this_process_its_locks), their exit
# could delete its -wal and -shm files under this process's connections.
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_autostart")
def test_the_django_mounting_in_a_browser(
    django_site: str, page: Any, django_user_model: Any
) -> None:
    from playwright.sync_api import expect

    from jobq.contrib.django import get_queue

    job_id = django_dead_job()
    django_user_model.objects.create_user("cy", password=PASSWORD, is_staff=True)

    page.goto(f"{django_site}/admin/jobq/job/{job_id}")  # anonymous: log in first
    expect(page).to_have_url(
        f"{django_site}/admin/login/?next=/admin/jobq/job/{job_id}"
    )
    page.fill("#id_username", "cy")
    page.fill("#id_password", PASSWORD)
    page.click('input[type="submit"]')

    expect(page).to_have_url(f"{django_site}/admin/jobq/job/{job_id}")
    expect(page.locator("#branding")).to_have_text("Django administration")
    then = " \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} "  # &rsaquo;
    expect(page.locator("nav.breadcrumbs")).to_have_text(
        f"Home{then}jobq{then}Job {job_id}"
    )
    expect(page.locator("#user-tools")).to_contain_text("Welcome, cy.")
    expect(page.locator("#payload")).to_contain_text(XSS)
    page.click('button:text-is("Retry")')
    expect(page.locator(".message")).to_have_text("The job is pending again.")
    page.click('nav.breadcrumbs a:has-text("Home")')
    expect(page.locator("#jobq-dashboard-link")).to_contain_text("Dashboard")
    get_queue().cancel(job_id)
