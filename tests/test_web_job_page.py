"""The dashboard's job page in words: where a job stands among its
attempts, its meta without jobq's own keys, a task's arguments, and
tracebacks with jobq's frames folded away (``jobq.web.describe``)."""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Callable
from typing import Any

import pytest
from dashboard_helpers import XSS, Client

import jobq
from jobq import Cancellation, Fatal, Job, JobRecord, JobState
from jobq.testing import Clock
from jobq.web import make_app
from jobq.web.describe import JOBQ_FOLDER, attempts, traceback_parts
from jobq.web.rendering import duration

MakeQueue = Callable[..., jobq.JobQueue[Any]]
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def text_of(fragment: str) -> str:
    """What a browser shows of an HTML fragment: its text, unescaped."""
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def section(page: str, start: str, end: str) -> str:
    found = re.search(f"{start}(.*?){end}", page, re.S)
    assert found is not None, page
    return found.group(1)


def rows(page: str, table_id: str) -> list[list[str]]:
    """The body rows of the table ``id=table_id``, as cell texts."""
    body = section(page, f'<table[^>]* id="{table_id}">.*?<tbody>', "</tbody>")
    return [
        [text_of(cell) for cell in re.findall(r"<td>(.*?)</td>", row, re.S)]
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)
    ]


def fails_twice(job: Job[Any]) -> str:
    if job.attempt < 3:
        raise ValueError(f"attempt {job.attempt} failed")
    return "done"


def run_until_settled(queue: jobq.JobQueue[Any], clock: Clock) -> None:
    """Run the queue's due jobs, moving the clock past every retry's delay."""
    for _ in range(10):
        queue.run_pending()
        clock.advance(3600)


# -- attempts ------------------------------------------------------------------------


def test_a_job_that_succeeded_after_failures_says_on_which_attempt(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(fails_twice, clock=clock, keep_completed=86400, max_attempts=5)
    job = queue.enqueue("flaky").id
    run_until_settled(queue, clock)

    page = Client(make_app(queue)).get(f"/job/{job}").text

    assert '<dd id="attempts">succeeded on attempt 3 of 5</dd>' in page
    labels = re.findall(r'<span class="label">(.*?)</span>', page)
    assert labels == ["earlier failed attempt"] * 2
    assert "the attempt it died of" not in page
    assert '<details class="attempt" open>' not in page  # history, folded
    assert re.search(r'id="last-attempt">[^<]* \(took \d+ ms\)</dd>', page)


def test_a_dead_job_says_which_attempt_it_died_of(make_queue: MakeQueue) -> None:
    def dies(job: Job[Any]) -> None:
        raise Fatal("no retry")

    queue = make_queue(dies, max_attempts=4)
    job = queue.enqueue("x").id
    queue.run_pending()

    page = Client(make_app(queue)).get(f"/job/{job}").text

    assert '<dd id="attempts">died on attempt 1 of 4</dd>' in page
    assert '<details class="attempt died" open>' in page
    assert '<span class="label">the attempt it died of</span>' in page


def record(state: JobState, failed: int, **fields: Any) -> JobRecord[Any]:
    return JobRecord(
        id=1, payload=None, attempts=failed, state=state, run_at=0.0,
        created_at=0.0, last_error=None, key=None, priority=0, result=None,
        task=None, errors=(), max_attempts=5, **fields,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("job", "said"),
    [
        (record(JobState.PENDING, 0), "no attempt yet (up to 5)"),
        (record(JobState.PENDING, 2), "failed 2 of 5 attempts; attempt 3 is next"),
        (record(JobState.WAITING, 0), "no attempt yet (up to 5)"),
        (record(JobState.RUNNING, 1), "attempt 2 of 5 running"),
        (record(JobState.COMPLETED, 0), "succeeded on attempt 1 of 5"),
        (record(JobState.COMPLETED, 4), "succeeded on attempt 5 of 5"),
        (record(JobState.DEAD, 5), "failed 5 of 5 attempts"),
        (record(JobState.DEAD, 2), "died on attempt 2 of 5"),
        (record(JobState.DEAD, 0), "dead before any attempt ran (up to 5)"),
        (
            record(JobState.CANCELLED, 1, cancellation=Cancellation(0, "me", 2)),
            "cancelled during attempt 2 of 5",
        ),
        (
            record(JobState.CANCELLED, 1, cancellation=Cancellation(0, "me", None)),
            "cancelled while pending, after 1 of 5 attempts failed",
        ),
        (record(JobState.CANCELLED, 0), "cancelled before any attempt ran"),
    ],
)
def test_attempts_are_told_in_words_for_every_state(
    job: JobRecord[Any], said: str
) -> None:
    assert attempts(job) == said


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(0.0004, "0 ms"), (0.25, "250 ms"), (3.24, "3.2 s"), (42.4, "42 s"),
     (245, "4 min 5 s"), (7380, "2 h 3 min"), (273600, "3 d 4 h")],
)  # fmt: skip
def test_durations_are_told_in_the_largest_two_units(seconds: float, said: str) -> None:
    assert duration(seconds) == said


# -- meta and arguments --------------------------------------------------------------


def test_meta_is_a_table_of_the_application_s_keys_with_jobq_s_own_folded_away(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue()
    job = queue.enqueue(
        "x",
        meta={
            "traceparent": "00-4bf9-01",
            XSS: XSS,
            "django.backend": "default",
            "django.announcement": "token",
            "django.elsewhere": "an application's own",  # not jobq's
        },
    ).id

    page = Client(make_app(queue)).get(f"/job/{job}").text

    assert rows(page, "meta") == [
        [XSS, f'"{XSS}"'],
        ["django.elsewhere", '"an application\'s own"'],
        ["traceparent", '"00-4bf9-01"'],
    ]
    internal = section(
        page, '<details class="internal" id="internal-meta">', "</details>"
    )
    assert "2 keys jobq keeps for itself" in internal
    assert "django.announcement" in internal
    assert "django.backend" in internal
    assert XSS not in page
    assert ESCAPED in page


def test_a_job_without_meta_shows_no_meta(make_queue: MakeQueue) -> None:
    queue = make_queue()
    job = queue.enqueue("x").id

    page = Client(make_app(queue)).get(f"/job/{job}").text

    assert "<h2>Meta</h2>" not in page


def test_a_named_task_s_job_shows_its_arguments_and_a_plain_job_its_payload(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue()
    send = queue.task(name="shop.send")(lambda *args, **kwargs: None)
    task_job = send.enqueue(42, XSS, to=[XSS], cc=None).id
    bare = send.enqueue().id
    plain = queue.enqueue({"args": [1], "kwargs": {}}).id  # no task: as JSON
    client = Client(make_app(queue))

    page = client.get(f"/job/{task_job}").text
    empty = client.get(f"/job/{bare}").text
    payload = client.get(f"/job/{plain}").text

    assert rows(page, "positional") == [["0", "42"], ["1", f'"{XSS}"']]
    assert rows(page, "keyword") == [["cc", "null"], ["to", f'["{XSS}"]']]
    assert XSS not in page
    assert "<h2>Payload</h2>" not in page
    assert "No arguments." in empty
    assert '<pre class="json" id="payload">' in payload
    assert "<h2>Arguments</h2>" not in payload


def test_a_task_job_whose_payload_is_not_a_task_s_shows_it_as_json(
    make_queue: MakeQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = make_queue()
    job = queue.task(name="shop.send")(lambda: None).enqueue()
    stored = queue.get(job)
    assert stored is not None
    odd = dataclasses.replace(stored, payload={"args": "not a list", "x": 1})
    monkeypatch.setattr(queue, "get", lambda job_id: odd)

    page = Client(make_app(queue)).get(f"/job/{job.id}").text

    assert '<pre class="json" id="payload">' in page
    assert "&#34;not a list&#34;" in page


# -- tracebacks ----------------------------------------------------------------------


def test_a_traceback_folds_jobq_s_frames_and_keeps_every_line(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(fails_twice, max_attempts=1)
    job = queue.enqueue(XSS).id
    queue.run_pending()
    stored = queue.get(job)
    assert stored is not None
    traceback = stored.errors[0].traceback

    page = Client(make_app(queue)).get(f"/job/{job}").text

    shown = section(page, '<div class="traceback">', "</div>")
    folded = re.findall(
        r'<details class="frames"><summary>(\d+) jobq frames?</summary>'
        r"<pre>(.*?)</pre>",
        shown,
        re.S,
    )
    assert len(folded) == 1
    count, frames = folded[0]
    assert int(count) == html.unescape(frames).count('  File "') >= 1
    assert JOBQ_FOLDER in html.unescape(frames)
    assert "in fails_twice" not in frames  # the application's frame is shown
    pres = re.findall(r"<pre>(.*?)</pre>", shown, re.S)
    assert "".join(html.unescape(text) for text in pres) == traceback
    assert XSS not in page


def frame(path: str, name: str, lead: str = "  ") -> str:
    return f'{lead}File "{path}", line 7, in {name}\n{lead}  {name}()\n{lead}  ~~~~^^\n'


JOBQ = JOBQ_FOLDER + "_worker/runner.py"

CHAINED = (
    "Traceback (most recent call last):\n"
    + frame("/app/shop.py", "load")
    + "KeyError: 'k'\n\nDuring handling of the above exception, another "
    "exception occurred:\n\nTraceback (most recent call last):\n"
    + frame(JOBQ, "run_one")
    + frame(JOBQ, "_invoke")
    + frame("/app/shop.py", "handler")
    + "  [Previous line repeated 2 more times]\n"
    + "ValueError: bad\n  with a second line\n"
)

GROUP = (
    "  + Exception Group Traceback (most recent call last):\n"
    + frame(JOBQ, "run_one", "  |   ")
    + "  | ExceptionGroup: two (2 sub-exceptions)\n"
    "  +-+---------------- 1 ----------------\n"
    "    | Traceback (most recent call last):\n"
    + frame("/app/shop.py", "handler", "    |   ")
    + frame(JOBQ, "call", "    |   ")
    + "    | ValueError: x\n    +------------------------------------\n"
)


@pytest.mark.parametrize("text", [CHAINED, GROUP, "", "no frames at all\n"])
def test_traceback_parts_join_to_the_whole_text(text: str) -> None:
    assert "".join(part.text for part in traceback_parts(text)) == text


def test_traceback_parts_fold_each_run_of_jobq_frames_apart() -> None:
    chained = traceback_parts(CHAINED)
    group = traceback_parts(GROUP)

    assert [part.frames for part in chained] == [0, 2, 0]
    assert chained[1].text == frame(JOBQ, "run_one") + frame(JOBQ, "_invoke")
    assert [part.frames for part in group] == [0, 1, 0, 1, 0]
    assert group[3].text == frame(JOBQ, "call", "    |   ")


def test_a_frame_of_a_file_outside_the_installed_jobq_is_the_application_s() -> None:
    lookalike = JOBQ_FOLDER.rstrip("/") + "_extras/tool.py"  # jobq_extras/

    parts = traceback_parts(frame(lookalike, "tool") + frame("jobq/x.py", "rel"))

    assert [part.frames for part in parts] == [0]
