"""What the dashboard's Django tests share (WSGI and browser): a dead job in
the project's queue, and requests that start no workers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jobq import Fatal, JobState

XSS = "<script>alert(1)</script>"


def explode(text: str) -> None:
    raise Fatal(text)


def django_dead_job() -> int:
    """A job of the project's queue that died, with ``XSS`` as its argument."""
    from jobq.contrib.django import get_queue

    queue = get_queue()
    found = queue.tasks.get("tests.web.explode")
    if found is None:
        found = queue.task(explode, name="tests.web.explode")
    job = found.enqueue(XSS)
    queue.run_pending()
    record = queue.get(job)
    assert record is not None
    assert record.state is JobState.DEAD
    return job.id


@pytest.fixture
def no_autostart() -> Iterator[None]:
    """The project's first request would start its workers (AUTOSTART), for
    the rest of the session: not these requests."""
    from django.core.signals import request_started

    from jobq.contrib.django import start_lazily

    request_started.disconnect(dispatch_uid="jobq.start_lazily")
    yield
    request_started.connect(start_lazily, dispatch_uid="jobq.start_lazily")
