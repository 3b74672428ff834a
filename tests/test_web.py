"""The dashboard over WSGI (werkzeug's test client): every route and action
on every store, and the security checks the README promises."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import threading
from collections.abc import Callable
from typing import Any

import pytest
from dashboard_helpers import Client, banners, csrf_of
from limits_helpers import WhileHeld, hold_one, needs_limits
from werkzeug.test import TestResponse
from workflow_helpers import build, needs_workflows, step

import jobq
from jobq import Fatal, Job, JobState
from jobq.admin.operations import RELATIVES_SHOWN
from jobq.testing import Clock
from jobq.web import Dashboard, make_app
from jobq.web.security import CSRF_COOKIE, double_submit

MakeQueue = Callable[..., jobq.JobQueue[Any]]
XSS = "<script>alert(1)</script>"


def die(job: Job[Any]) -> None:
    raise Fatal(f"failed on {job.payload!r} {XSS}")


def dead_queue(
    make_queue: MakeQueue, count: int = 1, **options: Any
) -> jobq.JobQueue[Any]:
    queue = make_queue(die, **options)
    queue.enqueue_many([{"n": i} for i in range(count)])
    queue.run_pending()
    assert queue.stats().dead == count
    return queue


# -- pages, on every store ---------------------------------------------------------


def test_the_overview_shows_the_counts_and_refreshes_from_stats_json(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(die)
    client = Client(make_app(queue))
    queue.enqueue("dies")
    queue.run_pending()
    queue.enqueue("now")
    queue.enqueue("later", delay=3600)

    page = client.get("/")
    stats = client.get("/stats.json")

    assert page.status_code == 200
    for name, value in [("due", 1), ("delayed", 1), ("running", 0), ("dead", 1)]:
        assert f'data-count="{name}">{value}<' in page.text
    assert stats.json is not None
    assert stats.json["counts"] == {
        "due": 1, "delayed": 1, "retrying": 0, "running": 0, "waiting": 0, "dead": 1,
        "kept": 0, "cancelled": 0,
    }  # fmt: skip
    minutes = stats.json["minutes"]
    assert len(minutes) == 60
    assert [sum(row[i] for row in minutes) for i in (1, 2, 3, 4)] == [0, 1, 1, 0]
    assert "Completed by this process" not in page.text
    assert "{% block schedules %}" not in page.text
    assert 'data-count="kept"' not in page.text  # results are not kept


def test_the_overview_counts_retrying_jobs_apart_from_delayed_ones_with_a_link(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(fails_once, base_delay=60, jitter=False, clock=clock)
    queue.enqueue("fails")
    queue.run_pending()
    queue.enqueue("later", delay=3600)
    queue.enqueue("now")
    client = Client(make_app(queue))

    page = client.get("/").text
    counts = client.get("/stats.json").json

    for name, value in [("due", 1), ("delayed", 1), ("retrying", 1)]:
        assert f'data-count="{name}">{value}<' in page
    assert re.search(r'<a class="card retrying" href="/jobs/retrying">', page)
    assert counts is not None
    assert (counts["counts"]["delayed"], counts["counts"]["retrying"]) == (1, 1)
    clock.advance(60)  # the retry is due: it counts as due
    counts = client.get("/stats.json").json
    assert counts is not None
    assert [counts["counts"][name] for name in ("due", "delayed", "retrying")] == [
        2, 1, 0,
    ]  # fmt: skip


def fails_once(job: Job[Any]) -> None:
    if job.attempt == 1:
        raise ValueError(f"first try of {job.payload}")


def test_the_overview_counts_the_kept_completed_jobs_not_the_expired_ones(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(lambda job: None, keep_completed=60, clock=clock)
    queue.enqueue("first")
    queue.run_pending()
    clock.advance(30)
    queue.enqueue("second")
    queue.run_pending()
    client = Client(make_app(queue))
    assert 'data-count="kept">2<' in client.get("/").text

    clock.advance(45)  # the first expired; no finish purged it yet

    assert 'data-count="kept">1<' in client.get("/").text
    assert client.get("/stats.json").json["counts"]["kept"] == 1  # type: ignore[index]


def test_every_dashboard_of_a_shared_store_shows_the_same_figures(
    make_queue: MakeQueue,
) -> None:
    """The report: under gunicorn -w 2 the counts alternated with the process
    that answered, and a dashboard of its own showed 0 forever."""

    def handler(job: Job[Any]) -> None:
        if job.payload == "dies":
            raise Fatal("no")

    worker = make_queue(handler)
    worker.enqueue_many(["ok", "ok", "dies"])
    worker.run_pending()  # hands its counts to the store
    if not worker.store.shared_between_processes:
        pytest.skip("one process holds the store: it is the only one to ask")
    standalone = make_queue()  # the same store, no jobs run here
    clients = [Client(make_app(worker)), Client(make_app(standalone))]

    seen = [client.get("/stats.json").json for client in clients]

    assert seen[0] == seen[1]
    assert seen[0] is not None
    totals = [sum(row[i] for row in seen[0]["minutes"]) for i in (1, 2, 3)]
    assert totals == [2, 1, 1]  # succeeded, failed, dead
    pages = [client.get("/figures").text for client in clients]
    assert pages[0] == pages[1]
    assert 'aria-label="Attempts: 2 succeeded, 1 failed"' in pages[0]


def test_each_list_shows_its_jobs_with_filters_and_pages(make_queue: MakeQueue) -> None:
    queue = dead_queue(make_queue, 2)
    queue.enqueue_many(list(range(51)))
    queue.enqueue("later", delay=3600, key="k-later")
    client = Client(make_app(queue))

    first = client.get("/jobs/due")
    found = re.search(r'rel="next" href="/jobs/due\?after=([^"]+)"', first.text)
    assert found is not None
    second = client.get(f"/jobs/due?after={found.group(1)}")
    delayed = client.get("/jobs/delayed?key=k-later")
    dead = client.get("/jobs/dead?error=%7B%27n%27%3A+1%7D")  # "{'n': 1}"

    assert first.text.count('<a href="/job/') == 50
    assert second.text.count('<a href="/job/') == 1
    assert 'rel="next"' not in second.text
    assert delayed.text.count('<a href="/job/') == 1
    assert dead.text.count('<a href="/job/') == 1
    for view in ("running", "completed"):
        assert "No jobs." in client.get(f"/jobs/{view}").text


def test_the_job_page_shows_payload_errors_and_tracebacks(
    make_queue: MakeQueue,
) -> None:
    queue = dead_queue(make_queue)
    job = queue.dead_jobs()[0]
    client = Client(make_app(queue))

    page = client.get(f"/job/{job.id}")

    assert page.status_code == 200
    assert "&#34;n&#34;: 0" in page.text  # pretty JSON, escaped
    assert "jobq.errors.Fatal" in page.text
    assert "Traceback (most recent call last)" in page.text
    assert client.get("/job/999999").status_code == 404


@pytest.mark.parametrize(
    ("path", "status", "heading", "said"),
    [
        ("/job/999999", 404, "Not found", "no such job 999999 (any more)"),
        ("/jobs/everything", 404, "Not found", "no such list"),
        ("/nothing", 404, "Not found", "no such page"),
        ("/jobs/dead?after=nonsense", 400, "Bad request", "give the after"),
    ],
    ids=["job", "list", "page", "cursor"],
)
def test_a_page_that_cannot_be_shown_says_why_as_an_error_never_as_a_success(
    queue: jobq.JobQueue[Any], path: str, status: int, heading: str, said: str
) -> None:
    page = Client(make_app(queue)).get(path)

    assert page.status_code == status
    assert f"<h1>{heading}</h1>" in page.text
    found = banners(page.text)
    assert found["success"] == []
    assert len(found["error"]) == 1
    assert said in found["error"][0]


def test_an_action_that_changed_nothing_says_so_as_an_error(
    queue: jobq.JobQueue[Any],
) -> None:
    client = Client(make_app(queue))
    token = csrf_of(client.get("/job/1"))
    client.post("/job/1/delete", data={"csrf": token})
    queue.enqueue("again")  # job 2, pending: not dead

    again = client.post("/job/2/delete", data={"csrf": token})
    page = client.get(again.location)

    assert again.location == "/job/2?msg=unchanged"
    assert banners(page.text) == {
        "success": [],
        "error": ["Nothing changed: the job is no longer in that state."],
    }
    assert banners(client.get("/job/2?msg=retried").text)["error"] == []


def test_retry_delete_and_cancel_act_with_the_csrf_token(make_queue: MakeQueue) -> None:
    queue = dead_queue(make_queue, 2)
    first, second = (job.id for job in queue.dead_jobs())
    pending = queue.enqueue("waits", delay=3600).id
    client = Client(make_app(queue))
    token = csrf_of(client.get(f"/job/{first}"))

    retried = client.post(f"/job/{first}/retry", data={"csrf": token})
    deleted = client.post(f"/job/{second}/delete", data={"csrf": token})
    cancelled = client.post(f"/job/{pending}/cancel", data={"csrf": token})
    again = client.post(f"/job/{second}/delete", data={"csrf": token})

    assert (retried.status_code, retried.location) == (303, f"/job/{first}?msg=retried")
    assert deleted.location == "/jobs/dead?msg=deleted"
    assert cancelled.location == "/jobs/delayed?msg=cancelled-delayed"
    assert again.location == f"/job/{second}?msg=unchanged"
    record = queue.get(first)
    assert record is not None
    assert record.state is JobState.PENDING
    assert queue.get(second) is None
    kept = queue.get(pending)
    assert kept is not None
    assert kept.state is JobState.CANCELLED
    assert kept.cancellation is not None
    assert (kept.cancellation.by, kept.cancellation.attempt) == ("dashboard", None)


def test_cancelling_a_delayed_job_goes_back_to_the_delayed_list(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(clock=clock)
    delayed = queue.enqueue("later", delay=3600).id
    due = queue.enqueue("now").id
    client = Client(make_app(queue))
    token = csrf_of(client.get(f"/job/{delayed}"))

    from_delayed = client.post(f"/job/{delayed}/cancel", data={"csrf": token})
    from_due = client.post(f"/job/{due}/cancel", data={"csrf": token})

    assert from_delayed.location == "/jobs/delayed?msg=cancelled-delayed"
    assert banners(client.get(from_delayed.location).text)["success"] == [
        "The delayed job was cancelled."
    ]
    assert from_due.location == "/jobs/due?msg=cancelled"


def test_cancelling_a_retrying_job_goes_back_to_the_retrying_list(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(fails_once, base_delay=60, jitter=False, clock=clock)
    retrying = queue.enqueue("x").id
    queue.run_pending()
    client = Client(make_app(queue))
    token = csrf_of(client.get(f"/job/{retrying}"))

    cancelled = client.post(f"/job/{retrying}/cancel", data={"csrf": token})

    assert cancelled.location == "/jobs/retrying?msg=cancelled-retrying"
    assert banners(client.get(cancelled.location).text)["success"] == [
        "The retrying job was cancelled: it is not tried again."
    ]
    assert state_of(queue, retrying) is JobState.CANCELLED


def state_of(queue: jobq.JobQueue[Any], job: int) -> JobState | None:
    record = queue.get(job)
    return None if record is None else record.state


# -- workflows ---------------------------------------------------------------------


def relative_rows(page: str, table: str) -> list[str]:
    """The rows of the job page's ``parents`` or ``children`` table, as text."""
    found = re.search(rf'class="relatives" id="{table}">.*?<tbody>(.*?)</tbody>', page,
                      re.S)  # fmt: skip
    assert found is not None, page
    rows = re.findall(r"<tr>(.*?)</tr>", found.group(1), re.S)
    return [" ".join(re.sub(r"<[^>]+>", " ", row).split()) for row in rows]


def test_the_waiting_list_shows_what_each_job_waits_on_and_the_overview_counts_them(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(step, keep_completed=600, max_attempts=1)
    flow = build(queue)
    client = Client(make_app(queue))

    overview = client.get("/")
    listed = client.get("/jobs/waiting")

    assert 'data-count="waiting">2<' in overview.text
    assert '<a href="/jobs/waiting">Waiting</a>' in overview.text  # the nav
    assert client.get("/stats.json").json["counts"]["waiting"] == 2  # type: ignore[index]
    assert "<th>Waiting on</th>" in listed.text
    for job, parent in [(flow.child, flow.dead), (flow.grandchild, flow.child)]:
        assert re.search(
            rf'<a href="/job/{job}">{job}</a>.*?<a href="/job/{parent}">{parent}</a>',
            listed.text,
            re.S,
        )
    assert f'href="/job/{flow.orphan}"' not in listed.text  # pending
    assert f'href="/job/{flow.orphan}"' in client.get("/jobs/due").text


def test_the_job_page_shows_parents_and_children_with_their_states(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(step, keep_completed=600, max_attempts=1)
    flow = build(queue)
    client = Client(make_app(queue))

    child = client.get(f"/job/{flow.child}").text
    orphan = client.get(f"/job/{flow.orphan}").text
    parent = client.get(f"/job/{flow.done}").text

    assert relative_rows(child, "parents") == [
        f"{flow.dead} — dead waited on", f"{flow.done} — completed",
    ]  # fmt: skip
    assert relative_rows(child, "children") == [f"{flow.grandchild} — waiting"]
    assert f'<a href="/job/{flow.dead}">{flow.dead}</a>' in child
    assert "<strong>wait</strong>: it waits for the dead parent" in child
    assert "once its parents finished, not before" in child
    assert f"Cancel waiting job {flow.child}?" in child
    assert relative_rows(orphan, "parents") == [f"{flow.gone} — gone"]
    assert f'href="/job/{flow.gone}"' not in orphan  # no page to go to
    assert "<strong>run</strong>: it runs anyway" in orphan
    assert relative_rows(parent, "children") == [f"{flow.child} — waiting"]
    assert 'id="parents"' not in parent
    assert 'id="after-failure"' not in parent  # it has no parents
    dead = client.get(f"/job/{flow.dead}").text
    assert relative_rows(dead, "children") == [f"{flow.child} — waiting"]
    alone = queue.enqueue("alone").id
    assert 'id="workflow"' not in client.get(f"/job/{alone}").text


def test_a_child_cancelled_by_its_parent_s_end_says_which_parent_and_how(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(step, keep_completed=600, max_attempts=1)
    flow = build(queue)
    client = Client(make_app(queue))
    token = csrf_of(client.get(f"/job/{flow.dead}"))

    deleted = client.post(f"/job/{flow.dead}/delete", data={"csrf": token})
    child = client.get(f"/job/{flow.child}").text
    grandchild = client.get(f"/job/{flow.grandchild}").text

    assert deleted.location == "/jobs/dead?msg=deleted"
    assert re.search(
        rf'id="cancellation">[^<]* by parent job {flow.dead} was deleted<', child
    )
    assert relative_rows(child, "parents")[0] == f"{flow.dead} — gone waited on"
    assert relative_rows(child, "children") == [f"{flow.grandchild} — cancelled"]
    assert re.search(
        rf'id="cancellation">[^<]* by parent job {flow.child} was cancelled<',
        grandchild,
    )
    assert 'data-count="waiting">0<' in client.get("/").text


def test_cancel_cancels_a_waiting_job_back_to_the_waiting_list(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(step, keep_completed=600, max_attempts=1)
    flow = build(queue)
    client = Client(make_app(queue))
    token = csrf_of(client.get(f"/job/{flow.child}"))

    cancelled = client.post(f"/job/{flow.child}/cancel", data={"csrf": token})

    assert cancelled.location == "/jobs/waiting?msg=cancelled-waiting"
    assert "The waiting job was cancelled" in client.get(cancelled.location).text
    for job in (flow.child, flow.grandchild):  # its child was "cancel"
        record = queue.get(job)
        assert record is not None
        assert record.state is JobState.CANCELLED
    assert "No jobs." in client.get("/jobs/waiting").text


def test_relatives_are_escaped_and_counted_beyond_those_shown() -> None:
    queue: jobq.JobQueue[Any] = jobq.JobQueue(keep_completed=600)
    task = queue.task(name=XSS)(lambda: None)
    parent = task.enqueue().id
    queue.enqueue_many(range(RELATIVES_SHOWN + 2), after=[parent])
    needs_workflows(queue)
    client = Client(make_app(queue))

    page = client.get(f"/job/{parent}").text
    child = client.get(f"/job/{parent + 1}").text

    assert len(relative_rows(page, "children")) == RELATIVES_SHOWN + 1
    assert relative_rows(page, "children")[-1] == "and 2 more"
    assert XSS not in child
    assert relative_rows(child, "parents") == [
        f"{parent} &lt;script&gt;alert(1)&lt;/script&gt; pending waited on"
    ]
    queue.close()


WAIT = 30.0  # seconds; a cap so that a broken engine fails a test, never hangs it


def running_job(
    make_queue: MakeQueue,
) -> tuple[jobq.JobQueue[Any], int, threading.Event]:
    """A job whose handler runs until the event is set, then stops as one
    that saw the request would (raising ``JobCancelled``)."""
    started, release = threading.Event(), threading.Event()

    def handler(job: Job[Any]) -> None:
        started.set()
        release.wait(WAIT)
        raise jobq.JobCancelled

    queue = make_queue(handler, timeout_grace=WAIT)
    job = queue.enqueue("runs").id
    queue.start(workers=1)
    assert started.wait(WAIT)
    return queue, job, release


def test_cancel_asks_a_running_job_to_stop_and_its_page_says_who_and_when(
    make_queue: MakeQueue,
) -> None:
    queue, job, release = running_job(make_queue)
    client = Client(make_app(queue))
    try:
        page = client.get(f"/job/{job}")
        asked = client.post(
            f"/job/{job}/cancel",
            data={"csrf": csrf_of(page)},
            environ_base={"REMOTE_USER": "alice"},
        )
        stopping = client.get(f"/job/{job}")
        listed = client.get("/jobs/running")
    finally:
        release.set()
    assert queue.join(timeout=WAIT)
    cancelled = client.get(f"/job/{job}")

    assert f'data-confirm="Stop running job {job}? It ends cancelled."' in page.text
    assert (asked.status_code, asked.location) == (303, f"/job/{job}?msg=stopping")
    assert '<span class="state stopping">stopping</span>' in stopping.text
    assert "Asked to stop" in stopping.text
    assert "by dashboard (alice)" in stopping.text
    assert f"/job/{job}/cancel" not in stopping.text  # asked already
    assert "stopping</span>" in listed.text
    assert '<span class="state cancelled">cancelled</span>' in cancelled.text
    assert "by dashboard (alice)" in cancelled.text
    assert "attempt 1" in cancelled.text
    assert f'<a href="/job/{job}">{job}</a>' in client.get("/jobs/cancelled").text
    counts = client.get("/stats.json").json
    assert counts is not None
    assert counts["counts"]["cancelled"] == 1


def test_stopping_a_running_job_needs_a_post_the_csrf_token_and_a_writable_dashboard(
    make_queue: MakeQueue,
) -> None:
    queue, job, release = running_job(make_queue)
    client = Client(make_app(queue))
    read_only = Client(make_app(queue, read_only=True))
    try:
        token = csrf_of(client.get(f"/job/{job}"))
        got = client.get(f"/job/{job}/cancel")
        refused = [
            client.post(f"/job/{job}/cancel", data=form)
            for form in [{}, {"csrf": "x" * 43}]
        ]
        shown = read_only.get(f"/job/{job}")
        forbidden = read_only.post(f"/job/{job}/cancel", data={"csrf": token})
        record = queue.get(job)
        allowed = client.post(f"/job/{job}/cancel", data={"csrf": token})
    finally:
        release.set()

    assert got.status_code == 405
    assert [answer.status_code for answer in refused] == [403, 403]
    assert '<form method="post"' not in shown.text
    assert forbidden.status_code == 403
    assert record is not None
    assert (record.state, record.cancellation) == (JobState.RUNNING, None)
    assert allowed.status_code == 303


def test_bulk_actions_ask_first_then_act_on_the_filtered_dead_jobs(
    make_queue: MakeQueue,
) -> None:
    queue = dead_queue(make_queue, 3)
    client = Client(make_app(queue))
    token = csrf_of(client.get("/jobs/dead"))
    only_n1 = {"csrf": token, "error": "{'n': 1}"}

    asked = client.post("/jobs/dead/delete", data=only_n1)
    assert asked.status_code == 200
    assert 'name="confirmed" value="yes"' in asked.text
    assert queue.stats().dead == 3

    deleted = client.post("/jobs/dead/delete", data={**only_n1, "confirmed": "yes"})
    assert deleted.status_code == 303
    assert sorted(j.payload["n"] for j in queue.dead_jobs()) == [0, 2]

    client.post("/jobs/dead/retry", data={"csrf": token, "confirmed": "yes"})
    assert queue.stats().dead == 0
    assert queue.stats().pending == 2


def test_a_forged_cursor_or_a_filter_no_store_holds_answers_400_and_says_why(
    make_queue: MakeQueue,
) -> None:
    queue = dead_queue(make_queue)
    client = Client(make_app(queue))
    token = csrf_of(client.get("/jobs/dead"))

    beyond_64_bits = f"running?after=%5B{2**63 + 1}%5D"
    answers = {
        query: client.get(f"/jobs/{query}")
        for query in [
            "running?after=%5B" + "9" * 400 + "%5D",  # a 400-digit int
            beyond_64_bits,
            "dead?after=" + "%5B" * 5000,
            "dead?key=a%00b", "dead?task=a%00b", "dead?error=a%00b",
        ]
    }  # fmt: skip
    bulk = client.post(
        "/jobs/dead/delete", data={"csrf": token, "error": "a\x00", "confirmed": "yes"}
    )

    for query, answer in answers.items():
        assert answer.status_code == 400, query
    assert "give the after of the page before" in answers[beyond_64_bits].text
    assert "key must not contain NUL characters" in answers["dead?key=a%00b"].text
    assert bulk.status_code == 400
    assert queue.stats().dead == 1


# -- security ------------------------------------------------------------------------


@pytest.fixture
def queue() -> jobq.JobQueue[Any]:
    queue: jobq.JobQueue[Any] = jobq.JobQueue(die, clock=Clock())
    queue.enqueue(XSS, key=XSS)
    queue.run_pending()
    return queue


ROUTES = ["/", "/stats.json", "/static/dashboard.js", "/static/dashboard.css",
          "/static/favicon.svg", "/favicon.ico", "/jobs/dead", "/job/1"]  # fmt: skip


def test_every_answer_carries_the_security_headers(queue: jobq.JobQueue[Any]) -> None:
    client = Client(make_app(queue))
    for path in [*ROUTES, "/nothing"]:
        headers = client.get(path).headers
        assert "script-src 'self'" in headers["Content-Security-Policy"]
        assert "unsafe-inline" not in headers["Content-Security-Policy"]
        assert headers["X-Frame-Options"] == "DENY"
        assert headers["Referrer-Policy"] == "same-origin"
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Cache-Control"] == "no-store"


@pytest.mark.parametrize(
    ("path", "current"),
    [("/", "/"), ("/jobs/dead", "/jobs/dead"), ("/jobs/delayed?key=k", "/jobs/delayed"),
     ("/jobs/retrying", "/jobs/retrying"), ("/job/1", None)],
)  # fmt: skip
def test_the_navigation_marks_the_page_it_is_on(
    queue: jobq.JobQueue[Any], path: str, current: str | None
) -> None:
    page = Client(make_app(queue)).get(path).text

    nav = re.search(r"<nav>(.*?)</nav>", page, re.S)
    assert nav is not None
    marked = re.findall(r'<a href="([^"]+)" aria-current="page">', nav.group(1))
    assert marked == ([] if current is None else [current])


def test_the_icon_every_page_names_is_served_and_the_conventional_path_too(
    queue: jobq.JobQueue[Any],
) -> None:
    client = Client(make_app(queue))
    mounted = client.get("/jobs/dead", environ_overrides={"SCRIPT_NAME": "/q"})

    answers = [client.get(path) for path in ("/static/favicon.svg", "/favicon.ico")]

    link = '<link rel="icon" href="/q/static/favicon.svg" type="image/svg+xml">'
    assert link in mounted.text
    for answer in answers:
        assert answer.status_code == 200
        assert answer.headers["Content-Type"] == "image/svg+xml"
        assert answer.data.startswith(b"<svg ")
        assert "img-src 'self'" in answer.headers["Content-Security-Policy"]


def test_store_text_is_escaped_everywhere(queue: jobq.JobQueue[Any]) -> None:
    client = Client(make_app(queue))
    for path in ["/jobs/dead", "/job/1", "/jobs/dead?key=" + XSS]:
        text = client.get(path).text
        assert XSS not in text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<script" not in client.get("/job/1").text.replace(
        '<script src="/static/dashboard.js" defer></script>', ""
    )


def test_store_text_in_a_link_is_url_encoded(queue: jobq.JobQueue[Any]) -> None:
    for i in range(3):
        queue.enqueue(i, key=f'a&b"<{i}>')
    queue.run_pending()
    page = Client(make_app(queue)).get('/jobs/dead?error=Fatal&key=a%26b"<5>')

    assert 'href="/jobs/dead?key=a%26b%22%3C5%3E&amp;error=Fatal"' in page.text


@pytest.mark.parametrize("form", [{}, {"csrf": "x" * 43}], ids=["none", "wrong"])
def test_an_action_without_the_right_csrf_token_changes_nothing(
    queue: jobq.JobQueue[Any], form: dict[str, str]
) -> None:
    client = Client(make_app(queue))
    client.get("/")  # the cookie is set

    paths = ["/job/1/retry", "/job/1/delete", "/job/1/cancel", "/jobs/dead/delete"]
    for path in paths:
        answer = client.post(path, data={**form, "confirmed": "yes"})
        assert answer.status_code == 403
    assert queue.stats().dead == 1


def test_an_action_with_a_csrf_cookie_the_attacker_planted_changes_nothing(
    queue: jobq.JobQueue[Any],
) -> None:
    """A sibling subdomain, or a page over plain HTTP, can set the cookie to
    a value it chose and repeat it in its form."""
    client = Client(make_app(queue))
    planted = "a" * 43
    client.set_cookie(CSRF_COOKIE, planted)

    answers = [
        client.post(path, data={"csrf": planted, "confirmed": "yes"})
        for path in ["/job/1/retry", "/job/1/delete", "/jobs/dead/delete"]
    ]
    page = client.get("/jobs/dead")  # a fresh token replaces the planted one

    assert [answer.status_code for answer in answers] == [403] * 3
    assert queue.stats().dead == 1
    assert csrf_of(page) != planted
    assert client.post("/job/1/retry", data={"csrf": csrf_of(page)}).status_code == 303


def test_a_csrf_token_minted_under_another_secret_changes_nothing(
    queue: jobq.JobQueue[Any],
) -> None:
    first, second = "one secret of the first process", "another, of another one"
    minted = Client(make_app(queue, csrf_secret=first))
    token = csrf_of(minted.get("/jobs/dead"))
    elsewhere = [
        make_app(queue, csrf_secret=second),
        make_app(queue),  # a random key of its own
    ]

    for dashboard in elsewhere:
        client = Client(dashboard)
        client.set_cookie(CSRF_COOKIE, token)
        answer = client.post("/job/1/retry", data={"csrf": token})
        assert answer.status_code == 403
    assert queue.stats().dead == 1


def test_dashboards_given_one_csrf_secret_accept_each_others_tokens(
    queue: jobq.JobQueue[Any],
) -> None:
    """Several processes behind a load balancer: a form from one, posted to
    another."""
    secret = b"the secret every process is given"
    first = Client(make_app(queue, csrf_secret=secret))
    token = csrf_of(first.get("/jobs/dead"))
    second = Client(make_app(queue, csrf_secret=lambda: secret))
    second.set_cookie(CSRF_COOKIE, token)

    assert second.post("/job/1/retry", data={"csrf": token}).status_code == 303


def test_the_csrf_cookie_is_httponly_strict_and_secure_over_https(
    queue: jobq.JobQueue[Any],
) -> None:
    over_https = Client(make_app(queue)).get("/", base_url="https://localhost")
    over_http = Client(make_app(queue)).get("/")

    (secure,) = over_https.headers.getlist("Set-Cookie")
    (plain,) = over_http.headers.getlist("Set-Cookie")
    assert secure.startswith(CSRF_COOKIE + "=")
    assert secure.endswith("; Path=/; HttpOnly; SameSite=Strict; Secure")
    assert plain.endswith("; Path=/; HttpOnly; SameSite=Strict")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"csrf_secret": ""}, "must be non-empty text or bytes, not b''"),
        ({"csrf_secret": 123}, "must be non-empty text or bytes, not 123"),
        ({"csrf_secret": "s" * 32, "csrf": double_submit()}, "not both"),
    ],
    ids=["empty", "number", "both"],
)
def test_a_bad_csrf_secret_is_refused_when_the_dashboard_is_made(
    queue: jobq.JobQueue[Any], options: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=re.escape(message)):
        make_app(queue, **options)


def test_get_never_changes_anything(queue: jobq.JobQueue[Any]) -> None:
    client = Client(make_app(queue))
    for path in ["/job/1/retry", "/job/1/delete", "/job/1/cancel", "/jobs/dead/retry"]:
        assert client.get(path).status_code == 405
    assert client.post("/", data={}).status_code == 405
    assert queue.stats().dead == 1


def test_read_only_shows_no_action_and_refuses_them(queue: jobq.JobQueue[Any]) -> None:
    client = Client(make_app(queue, read_only=True, notice="A JSON file: read-only"))
    page = client.get("/job/1")

    assert '<form method="post"' not in page.text
    assert "A JSON file: read-only" in page.text
    assert '<form method="post"' not in client.get("/jobs/dead").text
    answer = client.post("/job/1/retry", data={"csrf": "x" * 43})
    assert answer.status_code == 403
    assert queue.stats().dead == 1


def test_without_a_check_only_loopback_addresses_are_served(
    queue: jobq.JobQueue[Any],
) -> None:
    client = Client(make_app(queue))
    for path in ROUTES:
        remote = client.get(path, environ_base={"REMOTE_ADDR": "203.0.113.9"})
        assert remote.status_code == 403, path
        assert client.get(path, environ_base={"REMOTE_ADDR": "::1"}).status_code == 200


#: A name of the attacker's that resolved to 127.0.0.1 (DNS rebinding): its
#: page reaches the dashboard from loopback, same-origin with it for the browser.
REBOUND = "rebind.attacker.example:8000"


def test_without_a_check_a_request_naming_another_host_is_refused(
    queue: jobq.JobQueue[Any],
) -> None:
    client = Client(make_app(queue))
    token = csrf_of(client.get("/jobs/dead"))
    client.set_cookie(CSRF_COOKIE, token, domain="rebind.attacker.example")

    pages = [client.get(path, base_url=f"http://{REBOUND}/") for path in ROUTES]
    bulk = client.post(
        "/jobs/dead/delete",
        data={"csrf": token, "confirmed": "yes"},
        base_url=f"http://{REBOUND}/",
    )

    assert [page.status_code for page in pages] == [400] * len(ROUTES)
    assert "localhost" in pages[0].text  # says where it is served
    assert bulk.status_code == 400
    assert queue.stats().dead == 1


@pytest.mark.parametrize(
    "host",
    ["localhost", "localhost:5000", "LocalHost.:5000", "app.localhost:5000",
     "127.0.0.1:8000", "127.1.2.3", "[::1]:8000", "[::ffff:127.0.0.1]:8000"],
)  # fmt: skip
def test_without_a_check_the_names_of_this_machine_are_served(
    queue: jobq.JobQueue[Any], host: str
) -> None:
    client = Client(make_app(queue))

    assert client.get("/", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize(
    "host",
    ["rebind.attacker.example", "localhost.attacker.example", "127.0.0.1.nip.io",
     "0.0.0.0:8000", "192.168.1.5:8000", "127.0.0.1%lo", "localhost:http", "[::1",
     ""],
)  # fmt: skip
def test_without_a_check_any_other_host_is_refused(
    queue: jobq.JobQueue[Any], host: str
) -> None:
    client = Client(make_app(queue))

    assert client.get("/", headers={"Host": host}).status_code == 400


def test_without_a_check_an_action_from_another_origin_is_refused(
    queue: jobq.JobQueue[Any],
) -> None:
    client = Client(make_app(queue))
    token = csrf_of(client.get("/jobs/dead"))

    refused = [
        client.post("/job/1/delete", data={"csrf": token}, headers={"Origin": origin})
        for origin in [f"http://{REBOUND}", "null", "http://localhost:9999",
                       "https://localhost", "http://127.0.0.1"]
    ]  # fmt: skip
    same = client.post(
        "/job/1/delete", data={"csrf": token}, headers={"Origin": "http://localhost"}
    )

    assert [answer.status_code for answer in refused] == [403] * 5
    assert same.status_code == 303
    assert queue.stats().dead == 0


def test_the_hosts_given_are_served_beside_this_machines_names(
    queue: jobq.JobQueue[Any],
) -> None:
    client = Client(make_app(queue, hosts=["devbox.test"]))
    token = csrf_of(client.get("/jobs/dead", base_url="http://devbox.test:5000/"))

    other = client.get("/", base_url="http://other.test:5000/")
    done = client.post(
        "/job/1/retry",
        data={"csrf": token},
        headers={"Origin": "http://DevBox.test:5000"},
        base_url="http://devbox.test:5000/",
    )

    assert client.get("/", headers={"Host": "localhost:5000"}).status_code == 200
    assert other.status_code == 400
    assert done.status_code == 303


@pytest.mark.parametrize(
    ("hosts", "error", "message"),
    [
        ("devbox.test", TypeError, "not the str 'devbox.test'; e.g. ['devbox.test']"),
        (["devbox.test:5000"], ValueError, "hosts holds 'devbox.test:5000': give a"),
        (["http://devbox.test"], ValueError, "without scheme or port"),
        ([5000], TypeError, "hosts must hold host names (str), not 5000"),
    ],
    ids=["a-str", "a-port", "a-url", "a-number"],
)
def test_hosts_that_are_not_host_names_are_refused_when_the_dashboard_is_made(
    queue: jobq.JobQueue[Any], hosts: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        make_app(queue, hosts=hosts)


def test_a_check_or_a_token_decides_whatever_the_host(
    queue: jobq.JobQueue[Any],
) -> None:
    """Their credentials are cookies or a session the browser keeps for the
    dashboard's own name: a page at another name has none of them."""
    checked = Client(make_app(queue, allow=lambda environ: True))
    token = "t" * 32
    with_token = Client(make_app(queue, token=token))
    machine = "http://devbox.lan:8000/"

    entered = with_token.get(f"/?token={token}", base_url=machine)

    assert checked.get("/", base_url=f"http://{REBOUND}/").status_code == 200
    assert entered.status_code == 303
    assert with_token.get("/", base_url=machine).status_code == 200
    assert with_token.get("/", base_url=f"http://{REBOUND}/").status_code == 403


@pytest.mark.parametrize(
    ("remote", "status"),
    [("::ffff:127.0.0.1", 200), ("::ffff:127.1.2.3", 200), ("::ffff:203.0.113.9", 403)],
)
def test_an_ipv4_mapped_address_is_judged_by_the_ipv4_address_it_maps(
    queue: jobq.JobQueue[Any], remote: str, status: int
) -> None:
    """A dual-stack listener (``::``) reports IPv4 peers as ``::ffff:a.b.c.d``."""
    client = Client(make_app(queue))

    assert client.get("/", environ_base={"REMOTE_ADDR": remote}).status_code == status


def test_the_application_check_decides_on_every_route(
    queue: jobq.JobQueue[Any],
) -> None:
    allowed = False
    client = Client(make_app(queue, allow=lambda environ: allowed))
    for path in ROUTES:
        assert client.get(path).status_code == 403, path
    assert client.post("/job/1/retry").status_code == 403
    allowed = True
    for path in ROUTES:
        assert client.get(path).status_code == 200, path


def test_a_token_is_asked_on_every_route_then_kept_in_a_cookie(
    queue: jobq.JobQueue[Any],
) -> None:
    token = "t" * 32
    client = Client(
        make_app(queue, token=token),
    )
    for path in ROUTES:
        assert client.get(path).status_code == 403, path
    assert client.get("/?token=wrong").status_code == 403

    entered = client.get(f"//evil.example/?token={token}")

    assert (entered.status_code, entered.location) == (303, "/")  # no open redirect
    for path in ROUTES:
        assert client.get(path).status_code == 200, path


def test_cookies_are_secure_over_https_only(queue: jobq.JobQueue[Any]) -> None:
    token = "t" * 32
    over_https = Client(make_app(queue, token=token)).get(
        f"/?token={token}", base_url="https://localhost"
    )
    over_http = Client(make_app(queue, token=token)).get(f"/?token={token}")

    cookies = over_https.headers.getlist("Set-Cookie")
    assert cookies
    assert all(c.endswith("; HttpOnly; SameSite=Strict; Secure") for c in cookies)
    plain = over_http.headers.getlist("Set-Cookie")
    assert plain
    assert all(c.endswith("; HttpOnly; SameSite=Strict") for c in plain)


def test_a_mount_point_prefixes_every_link_and_redirect(
    queue: jobq.JobQueue[Any],
) -> None:
    client = Client(make_app(queue))
    mounted = {"SCRIPT_NAME": "/admin/jobq"}
    page = client.get("/jobs/dead", environ_overrides=mounted)
    token = csrf_of(page)

    answer = client.post(
        "/job/1/retry", data={"csrf": token}, environ_overrides=mounted
    )

    assert 'href="/admin/jobq/job/1"' in page.text
    assert 'src="/admin/jobq/static/dashboard.js"' in page.text
    assert answer.location == "/admin/jobq/job/1?msg=retried"


def test_bad_input_answers_400_or_404(queue: jobq.JobQueue[Any]) -> None:
    client = Client(make_app(queue))
    assert client.get("/jobs/dead?after=nonsense").status_code == 400
    assert client.get("/jobs/everything").status_code == 404
    assert client.get("/static/../app.py").status_code == 404
    assert client.get("/job/99999999999999999999").status_code == 404


def test_the_dashboard_needs_a_queue() -> None:
    with pytest.raises(TypeError, match="needs a JobQueue"):
        Dashboard("not a queue")  # type: ignore[arg-type]


def test_the_overview_shows_the_periodic_jobs_with_their_slots(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(clock=clock)

    @queue.periodic(every=600, name="reports.hourly")
    def report() -> None: ...

    queue.run_pending()  # the first slot, enqueued and run
    page = Client(make_app(queue)).get("/")

    (schedule,) = queue.schedules()
    assert "Periodic jobs" in page.text
    assert "reports.hourly" in page.text
    assert schedule.next_slot is not None
    assert schedule.next_slot.strftime("%Y-%m-%d %H:%M:%S") in page.text


def test_a_schedule_whose_next_slot_no_datetime_holds_shows_none_on_the_overview(
    make_queue: MakeQueue,
) -> None:
    # An hour before the end of the year 9999: the next two-hourly slot is
    # in the year 10000, which no datetime holds.
    clock = Clock(dt.datetime(9999, 12, 31, 23, 0, tzinfo=dt.UTC).timestamp())
    queue = make_queue(clock=clock)
    queue.periodic(every=7200, name="reports.two_hourly")(lambda: None)

    page = Client(make_app(queue)).get("/")

    assert page.status_code == 200
    row = re.search(r"<td>reports\.two_hourly</td>.*?</tr>", page.text, re.S)
    assert row is not None, page.text
    assert "<td>—</td>" in row.group(0)


# -- limits --------------------------------------------------------------------------


def limit_row(page: str, name: str) -> list[str]:
    """The cells of the overview's row of limit ``name``, as text."""
    row = re.search(rf'<tr data-limit="{re.escape(name)}">(.*?)</tr>', page, re.S)
    assert row is not None, page
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in cells]


def test_the_overview_lists_the_limits_and_a_held_job_says_which_one_holds_it(
    make_queue: MakeQueue,
) -> None:
    handler: WhileHeld[dict[str, TestResponse]] = WhileHeld()
    queue = make_queue(handler)
    client = Client(make_app(queue))
    assert '<h2 id="limits">' not in client.get("/").text
    assert client.get("/stats.json").json["limits"] == []  # type: ignore[index]
    needs_limits(queue)
    queue.limit("smtp", concurrency=1, rate="10/s", burst=3)
    queue.limit("account:*", concurrency=1)

    def look(held: int) -> dict[str, TestResponse]:
        paths = ["/", "/stats.json", "/jobs/due", f"/job/{held}"]
        return {path: client.get(path) for path in paths}

    _, held, seen = hold_one(queue, handler, look, also=("account:42",))

    overview = seen["/"].text
    assert limit_row(overview, "smtp") == ["smtp", "1", "10/s, burst 3", "1", "1"]
    assert limit_row(overview, "account:*") == ["account:* each key", "1", "—", "0",
                                                "0"]  # fmt: skip
    assert seen["/stats.json"].json["limits"] == [  # type: ignore[index]
        {"name": "account:*", "running": 0, "waiting": 0},
        {"name": "smtp", "running": 1, "waiting": 1},
    ]
    page = seen[f"/job/{held}"].text
    assert '<span class="state held">held by smtp</span>' in page
    assert '<dd id="limits">smtp, account:42</dd>' in page
    assert re.search(r'<dd id="held-by">smtp: waits', page)
    due = seen["/jobs/due"].text
    assert f'{held}</a> <span class="state held">held by smtp' in due


def test_limits_and_held_jobs_are_shown_as_the_queue_tells_them_escaped(
    queue: jobq.JobQueue[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    usages = [jobq.LimitUsage(f"{XSS}:*", 2, None, 1, 5, 7),
              jobq.LimitUsage("api", None, "100/m", 1, 0, 3)]  # fmt: skip
    record = queue.get(1)
    assert record is not None
    held = dataclasses.replace(record, limits=(f"{XSS}:1", "api"), held_by="api")
    monkeypatch.setattr(queue, "limits", lambda: usages)
    monkeypatch.setattr(queue, "get", lambda job_id: held)
    client = Client(make_app(queue))

    overview = client.get("/").text
    page = client.get("/job/1").text

    assert XSS not in overview + page
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert limit_row(overview, f"{escaped}:*") == [f"{escaped}:* each key", "2", "—",
                                                   "5", "7"]  # fmt: skip
    assert limit_row(overview, "api") == ["api", "—", "100/m", "0", "3"]
    assert f'<dd id="limits">{escaped}:1, api</dd>' in page
    assert '<span class="state held">held by api</span>' in page
    assert client.get("/stats.json").json["limits"][0] == {  # type: ignore[index]
        "name": f"{XSS}:*", "running": 5, "waiting": 7,
    }  # fmt: skip
