"""The dashboard's periodic jobs: Pause, Resume and Run now as POST actions
behind the CSRF check and the read-only rule, the paused badge and the next
slots, on every store; names of an attacker's never echoed or run."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any

import pytest
from dashboard_helpers import XSS, Client, banners, csrf_of

import jobq
from jobq.testing import Clock
from jobq.web import make_app

MakeQueue = Callable[..., jobq.JobQueue[Any]]


def scheduled(
    make_queue: MakeQueue, clock: Clock, name: str = "tick", **options: Any
) -> jobq.JobQueue[Any]:
    """A queue with periodic job ``name`` every 10 minutes, looked at once."""
    queue = make_queue(clock=clock)
    clock.now = 600 * (clock.now // 600) + 1
    queue.periodic(every=600, name=name, **options)(lambda: None)
    assert queue.run_pending() == 0
    return queue


def post(client: Client, action: str, name: str, **form: str) -> Any:
    """A schedule action as the overview's button sends it."""
    token = csrf_of(client.get("/"))
    return client.post(f"/schedules/{action}", data={"csrf": token, "name": name,
                                                     **form})  # fmt: skip


def row_of(page: str, name: str) -> str:
    found = re.search(rf'<tr data-schedule="{re.escape(name)}".*?</tr>', page, re.S)
    assert found is not None, page
    return found.group(0)


def test_pause_and_resume_act_with_the_csrf_token_and_say_so(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = scheduled(make_queue, clock)
    client = Client(make_app(queue))

    paused = post(client, "pause", "tick")
    page = client.get(paused.location).text
    resumed = post(client, "resume", "tick")

    assert (paused.status_code, paused.location) == (
        303, "/?msg=schedule-paused#schedules",
    )  # fmt: skip
    assert banners(page)["success"] == [
        "The schedule was paused: every process passes its slots over until it is "
        "resumed."
    ]
    row = row_of(page, "tick")
    assert '<span class="badge paused">paused</span>' in row
    assert "by dashboard" in row
    assert 'action="/schedules/resume"' in row
    assert resumed.location == "/?msg=schedule-resumed#schedules"
    assert not queue.schedules()[0].paused


def test_a_paused_schedule_s_slot_is_passed_over_by_the_workers(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = scheduled(make_queue, clock)
    client = Client(make_app(queue))
    post(client, "pause", "tick")

    clock.advance(600)

    assert queue.run_pending() == 0
    assert queue.stats().pending == 0


def test_pausing_a_paused_schedule_says_nothing_changed(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = scheduled(make_queue, clock)
    client = Client(make_app(queue))
    post(client, "pause", "tick")

    again = post(client, "pause", "tick")

    assert again.location == "/?msg=schedule-unchanged#schedules"
    assert banners(client.get(again.location).text)["error"] == [
        "Nothing changed: the schedule was paused, or running, already."
    ]


def test_run_now_enqueues_one_job_that_shows_as_the_last_job(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = scheduled(make_queue, clock)
    client = Client(make_app(queue))

    ran = post(client, "run", "tick")

    assert ran.location == "/?msg=schedule-run#schedules"
    (job,) = queue.browse("due").jobs
    assert job.key is not None
    assert job.key.endswith(" (run now)")
    assert dict(job.meta) == {"jobq.run_by": "dashboard"}
    row = row_of(client.get(ran.location).text, "tick")
    assert f'<a href="/job/{job.id}">{job.id}</a>' in row


def test_run_now_says_why_not_while_the_last_job_is_live_with_overlap_skip(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = scheduled(make_queue, clock)
    client = Client(make_app(queue))
    post(client, "run", "tick")

    refused = post(client, "run", "tick")

    assert refused.location == "/?msg=schedule-busy#schedules"
    assert queue.stats().pending == 1
    (said,) = banners(client.get(refused.location).text)["error"]
    assert "overlap='skip'" in html.unescape(said)


def test_the_overview_lists_the_next_five_slots(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = scheduled(make_queue, clock)

    row = row_of(Client(make_app(queue)).get("/").text, "tick")

    slots = re.findall(r"<li>([^<]*)</li>", row)
    expected = [s.strftime("%Y-%m-%d %H:%M:%S %Z") for s in queue.schedules()[0]
                .next_slots]  # fmt: skip
    assert slots == expected
    assert len(slots) == 5


@pytest.mark.parametrize("action", ["pause", "resume", "run"])
@pytest.mark.parametrize("name", ["tock", "", "\x00" * 3, "x" * 10_000, XSS])
def test_an_unknown_schedule_gives_an_error_banner_without_its_name(
    make_queue: MakeQueue, clock: Clock, action: str, name: str
) -> None:
    queue = scheduled(make_queue, clock)
    client = Client(make_app(queue))

    answer = post(client, action, name)

    assert answer.location == "/?msg=no-such-schedule#schedules"
    page = client.get(answer.location).text
    assert banners(page)["error"] == [
        "No such schedule: no code here declares it and the store does not keep it."
    ]
    assert XSS not in page
    assert not queue.schedules()[0].paused
    assert queue.stats().pending == 0


def test_a_schedule_named_as_an_attack_is_escaped_and_acted_on_by_its_name(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = scheduled(make_queue, clock, name=XSS)
    client = Client(make_app(queue))

    page = client.get("/").text
    paused = post(client, "pause", XSS)

    assert XSS not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert paused.location == "/?msg=schedule-paused#schedules"
    assert queue.schedules()[0].paused


def test_run_now_of_a_schedule_no_code_here_declares_says_where_to_run_it(
    make_queue: MakeQueue, clock: Clock
) -> None:
    app = scheduled(make_queue, clock)
    if not app.store.shared_between_processes:
        pytest.skip("one process holds the store: no other dashboard shares it")
    clock.advance(600)
    assert app.run_pending() == 1  # the store keeps the schedule now
    standalone = make_queue(clock=clock)  # as `jobq dashboard --store` has it
    client = Client(make_app(standalone))

    page = client.get("/").text
    refused = post(client, "run", "tick")
    paused = post(client, "pause", "tick")

    assert 'action="/schedules/run"' not in row_of(page, "tick")
    assert refused.location == "/?msg=schedule-not-here#schedules"
    assert paused.location == "/?msg=schedule-paused#schedules"
    assert app.schedules()[0].paused  # the application's processes obey it


@pytest.mark.parametrize("form", [{}, {"csrf": "x" * 43}], ids=["none", "wrong"])
@pytest.mark.parametrize("action", ["pause", "resume", "run"])
def test_a_schedule_action_without_the_right_csrf_token_changes_nothing(
    make_queue: MakeQueue, clock: Clock, form: dict[str, str], action: str
) -> None:
    queue = scheduled(make_queue, clock)
    queue.pause_schedule("tick") if action == "resume" else None
    client = Client(make_app(queue))
    client.get("/")  # the cookie is set

    answer = client.post(f"/schedules/{action}", data={**form, "name": "tick"})

    assert answer.status_code == 403
    assert queue.schedules()[0].paused == (action == "resume")
    assert queue.stats().pending == 0


@pytest.mark.parametrize("action", ["pause", "resume", "run"])
def test_a_read_only_dashboard_shows_no_schedule_action_and_refuses_them(
    make_queue: MakeQueue, clock: Clock, action: str
) -> None:
    queue = scheduled(make_queue, clock)
    client = Client(make_app(queue, read_only=True))

    page = client.get("/").text
    answer = client.post(f"/schedules/{action}", data={"csrf": "x" * 43,
                                                       "name": "tick"})  # fmt: skip

    assert "/schedules/" not in page
    assert answer.status_code == 403
    assert not queue.schedules()[0].paused
    assert queue.stats().pending == 0


def test_a_schedule_action_is_a_post(make_queue: MakeQueue, clock: Clock) -> None:
    queue = scheduled(make_queue, clock)
    client = Client(make_app(queue))

    answer = client.get("/schedules/pause?name=tick")

    assert answer.status_code == 405
    assert not queue.schedules()[0].paused
