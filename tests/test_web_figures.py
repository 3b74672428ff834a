"""The dashboard's figures of the whole queue over WSGI, on every store: the
overview's charts and their numbers, the ranges, the processes page and the
tasks page; hostile names escaped; a store that keeps no figures says so."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from dashboard_helpers import XSS, Client
from dict_store import DictStore, Shelf

import jobq
from jobq import Fatal, Job
from jobq.activity import Beat, ProcessInfo, RunningJob
from jobq.stores.base import ActivityStore
from jobq.testing.clock import Clock
from jobq.web import make_app

MakeQueue = Callable[..., jobq.JobQueue[Any]]
WAIT = 20.0


def wait_for(check: Callable[[], Any]) -> Any:
    """``check()`` once truthy: the registry follows a beat (no event)."""
    deadline = time.monotonic() + WAIT
    while not (found := check()):
        assert time.monotonic() < deadline, "never came"
        threading.Event().wait(0.05)
    return found


def handler(job: Job[Any]) -> None:
    if job.payload == "dies":
        raise Fatal(f"no {XSS}")


def test_the_overview_draws_the_last_hour_and_gives_its_numbers(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(handler, max_attempts=1)
    queue.enqueue_many(["ok", "ok", "dies"])
    queue.run_pending()
    client = Client(make_app(queue))

    page = client.get("/").text

    assert page.count('<svg class="chart"') == 3
    assert 'role="img" aria-label="Attempts: 2 succeeded, 1 failed"' in page
    assert page.count('<rect class="succeeded"') == 1  # this minute's
    numbers = re.search(r'<table class="figures">.*?</table>', page, re.S)
    assert numbers is not None
    assert numbers.group(0).count("<tr>") == 61  # the header, 60 minutes
    assert "<td>2</td><td>1</td><td>1</td><td>0</td>" in numbers.group(0)
    assert 'href="/?range=24h"' in page


def test_the_day_is_drawn_per_ten_minutes_and_an_unknown_range_is_the_hour(
    make_queue: MakeQueue,
) -> None:
    client = Client(make_app(make_queue(handler)))

    day = client.get("/?range=24h").text
    odd = client.get("/figures?range=<script>").text

    numbers = re.search(r'<table class="figures">.*?</table>', day, re.S)
    assert numbers is not None
    assert numbers.group(0).count("<tr>") == 145  # the header, 144 bins
    assert "per 10 minutes" in day
    assert 'data-refresh="/figures?range=1h"' in odd
    assert "<script>" not in odd
    assert "<html" not in odd  # a fragment, for the page to put in place


def beat(queue: jobq.JobQueue[Any], info: ProcessInfo, now: float) -> None:
    """Another process's beat, as it would write it."""
    queue.stats()  # the store opened
    store: ActivityStore = queue.store  # type: ignore[assignment]
    store.beat(Beat(info, (), None, 15.0), now)


def test_the_processes_page_lists_each_process_its_jobs_and_the_gone_ones(
    make_queue: MakeQueue,
) -> None:
    release, entered = threading.Event(), threading.Event()

    def blocks(job: Job[Any]) -> None:
        entered.set()
        release.wait(WAIT)

    queue = make_queue(blocks)
    now = queue.clock()
    beat(queue, ProcessInfo("gone-1", XSS, 7, now - 600, now - 300, 4, 1,
                            (RunningJob(99, XSS, now - 320),)), now)  # fmt: skip
    job = queue.enqueue("blocks")
    queue.start(workers=2)
    client = Client(make_app(queue))
    try:
        assert entered.wait(WAIT)
        listed = wait_for(
            lambda: (
                (page := client.get("/processes").text)
                and f'<a href="/job/{job.id}">' in page
                and page
            )
        )
    finally:
        release.set()
    queue.stop(timeout=WAIT)

    assert f'<a href="/job/{job.id}">{job.id}</a> (plain) for' in listed
    assert '<span class="idle">1</span> idle' in listed
    assert '<span class="state gone">gone</span>' in listed
    assert XSS not in listed
    assert "&lt;script&gt;" in listed
    assert 'aria-current="page">Processes<' in listed


def test_the_tasks_page_shows_each_task_s_outcomes_rates_and_last_error(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(handler, max_attempts=1)
    ok = queue.task(lambda: None, name="mail.send")
    nasty = queue.task(lambda: (_ for _ in ()).throw(ValueError(XSS)), name="x&y <b>")
    ok.enqueue()
    ok.enqueue()
    nasty.enqueue()
    queue.run_pending()
    dead = queue.dead_jobs()[0]
    client = Client(make_app(queue))

    page = client.get("/tasks").text

    rows = dict(re.findall(r'<tr data-task="([^"]*)">(.*?)</tr>', page, re.S))
    cells = re.findall(r"<td[^>]*>(.*?)</td>", rows["mail.send"], re.S)
    assert [c.strip() for c in cells[1:7]] == ["0", "2", "0", "0", "0", "0.0 %"]
    assert cells[7].startswith("≤ ")
    nasty_row = rows["x&amp;y &lt;b&gt;"]
    assert f'href="/jobs/dead?task={quote("x&y <b>")}"' in nasty_row
    assert f'<a href="/job/{dead.id}">' in nasty_row
    assert "100.0 %" in nasty_row
    assert XSS not in page


def divide(kind: str) -> float:
    if kind == "fatal":
        raise Fatal("gone")
    return 1 / 0


def test_the_tasks_page_shows_the_newest_failed_attempts_error_dead_or_not(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(handler, max_attempts=2, base_delay=60, clock=clock)
    flaky = queue.task(divide, name="flaky")
    dead = flaky.enqueue("fatal").id
    queue.run_pending()
    clock.advance(1)
    retrying = flaky.enqueue("zero").id
    queue.run_pending()  # its first attempt failed: it waits out its backoff
    assert queue.delete_dead(dead)  # the error is the figures', not a job's
    client = Client(make_app(queue))

    page = client.get("/tasks").text

    row = dict(re.findall(r'<tr data-task="([^"]*)">(.*?)</tr>', page, re.S))["flaky"]
    assert f'<a href="/job/{retrying}">ZeroDivisionError: division by zero</a>' in row
    assert f'title="job {retrying}, now"' in row


def test_a_store_that_keeps_no_figures_says_so_on_each_page() -> None:
    with jobq.JobQueue(handler, store=DictStore(Shelf())) as queue:
        client = Client(make_app(queue))
        pages = [client.get(path).text for path in ("/", "/processes", "/tasks")]
        stats = client.get("/stats.json").json

    assert all('id="no-figures"' in page for page in pages)
    assert stats is not None
    assert stats["minutes"] is None


def test_the_lists_task_filter_offers_the_known_task_names(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(handler)
    queue.task(lambda: None, name="mail.send")
    ran_elsewhere = make_queue(handler)  # the same store, another queue object
    ran_elsewhere.task(lambda: None, name=f"report {XSS}").enqueue()
    ran_elsewhere.run_pending()
    client = Client(make_app(queue))

    page = client.get("/jobs/dead").text

    options = re.findall(r'<option value="([^"]*)">', page)
    assert "mail.send" in options
    if queue.store.shared_between_processes:  # the other one's, from the store
        assert "report &lt;script&gt;alert(1)&lt;/script&gt;" in options
    assert 'list="known-tasks"' in page
    assert XSS not in page
