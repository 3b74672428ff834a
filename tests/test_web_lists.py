"""The dashboard's lists: relative times with the UTC time on hover,
durations, "go to job", and actions on the rows ticked (and the counts
every action on several jobs reports), on every store."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from dashboard_helpers import XSS, Client, banners, csrf_of
from werkzeug.test import TestResponse

import jobq
from jobq import Fatal, Job, JobState
from jobq.testing import Clock
from jobq.web import make_app
from jobq.web.rendering import ago, iso, when

MakeQueue = Callable[..., jobq.JobQueue[Any]]


def die(job: Job[Any]) -> None:
    raise Fatal(f"failed on {job.payload!r}")


def dead_jobs(queue: jobq.JobQueue[Any], count: int, **options: Any) -> list[int]:
    ids = [queue.enqueue({"n": i}, **options).id for i in range(count)]
    queue.run_pending()
    return ids


def cells(page: str, job: int) -> list[str]:
    """The cells of job ``job``'s row in a list, as HTML."""
    start = r"<tr>\s*(?:<td><input[^>]*></td>)?\s*"
    row = re.search(rf'{start}<td><a href="[^"]*/job/{job}">.*?</tr>', page, re.S)
    assert row is not None, page
    return re.findall(r"<td[^>]*>(.*?)</td>", row.group(0), re.S)


# -- times ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("moment", "said"),
    [(1000.0, "now"), (999.5, "now"), (997.0, "3 s ago"), (820.0, "3 min ago"),
     (1000.0 + 7300, "in 2 h"), (1000.0 - 3 * 86400, "3 d ago"), (1059.0, "in 59 s")],
)  # fmt: skip
def test_a_moment_is_told_relative_to_now(moment: float, said: str) -> None:
    assert ago(moment, 1000.0) == said


def test_lists_tell_times_relative_to_now_with_the_utc_time_on_hover(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(die, clock=clock)
    (dead,) = dead_jobs(queue, 1)
    later = queue.enqueue("later", delay=7300).id
    clock.advance(180)
    client = Client(make_app(queue))

    died = moment_of(cells(client.get("/jobs/dead").text, dead))
    due = moment_of(cells(client.get("/jobs/delayed").text, later))

    record = queue.get(dead)
    assert record is not None
    assert record.finished_at is not None
    finished = record.finished_at
    assert died == (
        f'<time datetime="{iso(finished)}" title="{when(finished)}">3 min ago</time>'
    )
    assert iso(finished).endswith("+00:00")
    assert due.endswith(">in 1 h</time>")  # 7300 - 180 s


def moment_of(row: list[str]) -> str:
    (found,) = [cell for cell in row if "<time" in cell]
    return found


def test_finished_lists_say_how_long_the_last_attempt_took(
    make_queue: MakeQueue, clock: Clock
) -> None:
    def slow(job: Job[Any]) -> None:
        clock.advance(2.5)
        if job.payload == "dies":
            raise Fatal("no")

    queue = make_queue(slow, clock=clock, keep_completed=600)
    dead = queue.enqueue("dies").id
    done = queue.enqueue("ok").id
    queue.run_pending()
    client = Client(make_app(queue))

    dead_page = client.get("/jobs/dead").text
    done_page = client.get("/jobs/completed").text

    assert "<th>Took</th>" in dead_page
    assert "2.5 s" in cells(dead_page, dead)
    assert "2.5 s" in cells(done_page, done)
    assert "<th>Took</th>" not in client.get("/jobs/due").text


def test_a_list_tells_attempts_in_words_and_a_completed_job_s_error_as_earlier(
    make_queue: MakeQueue, clock: Clock
) -> None:
    def fails_once(job: Job[Any]) -> None:
        if job.attempt == 1:
            raise ValueError("first try")

    queue = make_queue(fails_once, clock=clock, keep_completed=86400, max_attempts=3)
    job = queue.enqueue("x").id
    for _ in range(3):
        queue.run_pending()
        clock.advance(3600)

    page = Client(make_app(queue)).get("/jobs/completed").text

    row = cells(page, job)
    assert "succeeded on attempt 2 of 3" in row
    assert "<th>Earlier error</th>" in page
    assert '<td class="earlier">ValueError: first try</td>' in page
    assert 'class="error"' not in page


def test_the_retrying_list_says_how_many_attempts_failed_when_the_next_is_and_why(
    make_queue: MakeQueue, clock: Clock
) -> None:
    def fails(job: Job[Any]) -> None:
        raise ValueError(f"mailbox of {job.payload} full")

    queue = make_queue(fails, base_delay=180, jitter=False, clock=clock)
    retrying = queue.enqueue("ann").id
    queue.run_pending()
    delayed = queue.enqueue("bob", delay=60).id
    clock.advance(60)
    client = Client(make_app(queue))

    page = client.get("/jobs/retrying").text

    attempts, failed, error = cells(page, retrying)[-3:]
    assert attempts.startswith("failed 1 of 5 attempts; next <time ")
    assert attempts.endswith(">in 2 min</time>")  # 180 - 60 s
    assert failed.endswith(">1 min ago</time>")
    assert error == "ValueError: mailbox of ann full"
    assert "<th>Failed</th>" in page
    assert f'/job/{delayed}"' not in page
    assert f'/job/{retrying}"' not in client.get("/jobs/delayed").text


def test_the_retrying_list_filters_by_task_key_and_error(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(clock=clock, base_delay=60, jitter=False)

    @queue.task(name="mail.send")
    def send(to: str) -> None:
        raise ValueError(f"mailbox of {to} full")

    @queue.task(name="sms.send")
    def text(to: str) -> None:
        raise ValueError(f"no signal for {to}")

    ann = send.using(key="k-ann").enqueue("ann").id
    bob = send.enqueue("bob").id
    cat = text.enqueue("cat").id
    queue.run_pending()
    client = Client(make_app(queue))

    def listed(query: str) -> list[int]:
        page = client.get(f"/jobs/retrying?{query}").text
        return [int(found) for found in re.findall(r'<a href="/job/(\d+)">', page)]

    assert listed("") == [ann, bob, cat]
    assert listed("task=sms.send") == [cat]
    assert listed("key=k-ann") == [ann]
    assert listed("error=of+bob") == [bob]
    assert (
        'name="error" value="of bob"' in client.get("/jobs/retrying?error=of+bob").text
    )


# -- go to job -----------------------------------------------------------------------


def test_go_to_job_opens_the_job_and_says_so_of_one_there_is_not(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue()
    job = queue.enqueue("x").id
    client = Client(make_app(queue))

    found = client.get(f"/find?id=+{job}+")
    mounted = client.get(f"/find?id={job}", environ_overrides={"SCRIPT_NAME": "/q"})
    absent = client.get("/find?id=424242")
    too_long = client.get("/find?id=" + "9" * 40)

    assert 'action="/find" role="search"' in client.get("/jobs/due").text
    assert (found.status_code, found.location) == (303, f"/job/{job}")
    assert mounted.location == f"/q/job/{job}"
    for answer, said in [(absent, "424242"), (too_long, "9" * 40)]:
        assert answer.status_code == 404
        assert banners(answer.text)["error"] == [f"no such job {said} (any more)"]


@pytest.mark.parametrize("given", ["abc", "", "4 2", "-1", "1.5", "٤٢", XSS])
def test_go_to_job_refuses_what_is_not_an_id_saying_what_one_is(given: str) -> None:
    queue: jobq.JobQueue[Any] = jobq.JobQueue()
    answer = Client(make_app(queue)).get("/find", query_string={"id": given})

    assert answer.status_code == 400
    (said,) = banners(answer.text)["error"]
    assert said.startswith("a job id is a whole number such as 42")
    assert XSS not in answer.text


# -- the rows ticked -----------------------------------------------------------------


def select(
    client: Client, view: str, action: str, ids: list[Any], **fields: str
) -> TestResponse:
    token = csrf_of(client.get("/jobs/dead"))  # a page with forms: dead jobs
    form = {"csrf": token, "action": action, "id": [str(one) for one in ids], **fields}
    return client.post(f"/jobs/{view}/selected", data=form)


def test_the_dead_list_ticks_rows_to_retry_or_delete_and_says_how_many_changed(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(die)
    first, second, third, fourth = dead_jobs(queue, 4)
    client = Client(make_app(queue))

    page = client.get("/jobs/dead").text
    retried = select(client, "dead", "retry", [first, second, first])
    deleted = select(client, "dead", "delete", [third, first], key="k")

    boxes = re.findall(r'name="id" value="(\d+)" form="selected"', page)
    assert sorted(int(one) for one in boxes) == [first, second, third, fourth]
    assert retried.location == "/jobs/dead?msg=selected-retried&done=2&of=2"
    assert banners(client.get(retried.location).text) == {
        "success": ["Retried 2 of 2 selected dead jobs."], "error": [],
    }  # fmt: skip
    assert deleted.location == "/jobs/dead?key=k&msg=selected-deleted&done=1&of=2"
    assert banners(client.get(deleted.location).text)["error"] == [
        "Deleted 1 of 2 selected dead jobs: 1 was no longer dead."
    ]
    assert [job.id for job in queue.dead_jobs()] == [fourth]
    assert queue.get(third) is None
    for job in (first, second):
        record = queue.get(job)
        assert record is not None
        assert record.state is JobState.PENDING


def test_the_pending_lists_tick_rows_to_cancel_pending_jobs_only(
    make_queue: MakeQueue,
) -> None:
    def handler(job: Job[Any]) -> None:
        if job.payload == "retries":
            raise ValueError("try again")
        raise Fatal("no")

    queue = make_queue(handler, base_delay=600, jitter=False)
    (dead,) = dead_jobs(queue, 1)
    retrying = queue.enqueue("retries").id
    queue.run_pending()
    due = queue.enqueue("now").id
    later = queue.enqueue("later", delay=3600).id
    client = Client(make_app(queue))
    assert 'form="selected"' in client.get("/jobs/retrying").text

    from_due = select(client, "due", "cancel", [due, dead])
    from_delayed = select(client, "delayed", "cancel", [later])
    from_retrying = select(client, "retrying", "cancel", [retrying])

    assert from_due.location == "/jobs/due?msg=selected-cancelled&done=1&of=2"
    assert banners(client.get(from_due.location).text)["error"] == [
        "Cancelled 1 of 2 selected pending jobs: 1 was no longer pending."
    ]
    assert from_delayed.location == "/jobs/delayed?msg=selected-cancelled&done=1&of=1"
    assert from_retrying.location == "/jobs/retrying?msg=selected-cancelled&done=1&of=1"
    assert [state_of(queue, job) for job in (due, later, retrying, dead)] == [
        JobState.CANCELLED, JobState.CANCELLED, JobState.CANCELLED, JobState.DEAD,
    ]  # fmt: skip
    for view in ("running", "waiting", "completed", "cancelled"):
        assert 'form="selected"' not in client.get(f"/jobs/{view}").text


def state_of(queue: jobq.JobQueue[Any], job: int) -> JobState | None:
    record = queue.get(job)
    return None if record is None else record.state


@pytest.mark.parametrize(
    ("view", "action", "ids", "said"),
    [
        ("dead", "retry", [], "no job was selected"),
        ("dead", "retry", list(range(1, 52)), "51 jobs were selected: at most 50"),
        ("dead", "delete", ["1", "2x"], "a job id is a whole number such as 42, "
         "not '2x'"),
        ("dead", "delete", ["9" * 20], "a job id is a whole number"),
        ("dead", "delete", [XSS], "a job id is a whole number"),
        ("dead", "cancel", ["1"], "the dead list has no action 'cancel'"),
        ("due", "delete", ["1"], "the due list has no action 'delete'"),
        ("running", "cancel", ["1"], "the running list has no action 'cancel'"),
        ("dead", XSS, ["1"], "the dead list has no action"),
    ],
    ids=["none", "too-many", "not-digits", "too-long", "script", "dead-cancel",
         "due-delete", "running", "script-action"],
)  # fmt: skip
def test_a_selection_that_is_not_one_answers_400_and_changes_nothing(
    make_queue: MakeQueue, view: str, action: str, ids: list[Any], said: str
) -> None:
    queue = make_queue(die)
    dead_jobs(queue, 2)
    client = Client(make_app(queue))

    answer = select(client, view, action, ids)

    assert answer.status_code == 400
    (error,) = banners(answer.text)["error"]
    assert error.startswith(said.replace("'", "&#39;"))
    assert XSS not in answer.text
    assert queue.stats().dead == 2


def test_a_selection_needs_a_post_the_csrf_token_and_a_writable_dashboard(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(die)
    first, _ = dead_jobs(queue, 2)
    client = Client(make_app(queue))
    read_only = Client(make_app(queue, read_only=True))
    form = {"action": "delete", "id": str(first)}

    got = client.get(f"/jobs/dead/selected?action=delete&id={first}")
    without_token = client.post("/jobs/dead/selected", data=form)
    wrong_token = client.post("/jobs/dead/selected", data={**form, "csrf": "x" * 43})
    shown = read_only.get("/jobs/dead").text
    token = csrf_of(client.get("/jobs/dead"))
    refused = read_only.post("/jobs/dead/selected", data={**form, "csrf": token})

    assert got.status_code == 405
    assert [without_token.status_code, wrong_token.status_code] == [403, 403]
    assert 'type="checkbox"' not in shown
    assert 'id="selected"' not in shown
    assert refused.status_code == 403
    assert queue.stats().dead == 2


def test_a_huge_selection_is_refused_before_it_is_read(make_queue: MakeQueue) -> None:
    queue = make_queue(die)
    dead_jobs(queue, 1)
    client = Client(make_app(queue))
    token = csrf_of(client.get("/jobs/dead"))
    ids = "&".join(f"id={i}" for i in range(20_000))

    answer = client.post(
        "/jobs/dead/selected",
        data=f"csrf={token}&action=delete&{ids}",
        content_type="application/x-www-form-urlencoded",
    )

    assert answer.status_code == 413
    assert queue.stats().dead == 1


# -- the filter's bulk actions -------------------------------------------------------


def test_the_filter_s_bulk_actions_say_how_many_they_changed(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(die)
    dead_jobs(queue, 3)
    client = Client(make_app(queue))
    token = csrf_of(client.get("/jobs/dead"))

    retried = client.post(
        "/jobs/dead/retry", data={"csrf": token, "error": "'n': 1", "confirmed": "yes"}
    )
    deleted = client.post("/jobs/dead/delete", data={"csrf": token, "confirmed": "yes"})

    assert retried.location == (
        "/jobs/dead?error=%27n%27%3A+1&msg=bulk-retried&done=1&of=1"
    )
    assert banners(client.get(retried.location).text)["success"] == [
        "Retried 1 of 1 dead jobs matching the filter."
    ]
    assert banners(client.get(deleted.location).text)["success"] == [
        "Deleted 2 of 2 dead jobs matching the filter."
    ]
    assert queue.stats().dead == 0


@pytest.mark.parametrize(
    "query",
    ["msg=bulk-retried&done=3", "msg=bulk-retried&done=4&of=3",
     "msg=bulk-retried&done=-1&of=3", "msg=bulk-retried&done=1" + "0" * 12 + "&of=9",
     f"msg={XSS}&done=1&of=1", "msg=selected-deleted&done=%D9%A4&of=%D9%A4"],
)  # fmt: skip
def test_a_count_that_is_not_one_of_ours_says_nothing(query: str) -> None:
    queue: jobq.JobQueue[Any] = jobq.JobQueue()

    page = Client(make_app(queue)).get(f"/jobs/dead?{query}")

    assert page.status_code == 200
    assert banners(page.text) == {"success": [], "error": []}
