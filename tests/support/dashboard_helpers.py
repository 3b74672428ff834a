"""What the dashboard's tests share: a test client from this machine and
what they read of a page (its CSRF token, its banners); for the Django
tests (WSGI and browser), a dead job in the project's queue, and requests
that start no workers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from werkzeug.test import Client as WerkzeugClient
from werkzeug.test import TestResponse

from jobq import Fatal, JobState

XSS = "<script>alert(1)</script>"


class Client(WerkzeugClient):
    """werkzeug's test client, from 127.0.0.1 unless told otherwise."""

    def open(self, *args: Any, **kwargs: Any) -> TestResponse:
        kwargs["environ_base"] = {
            "REMOTE_ADDR": "127.0.0.1",
            **kwargs.get("environ_base", {}),
        }
        return super().open(*args, **kwargs)


def csrf_of(page: TestResponse) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None, page.text
    return found.group(1)


def banners(page: str) -> dict[str, list[str]]:
    """The texts of a page's success banners and of its error banners."""
    return {
        "success": re.findall(r'<p class="message" role="status">(.*?)</p>', page),
        "error": re.findall(r'<p class="message failed" role="alert">(.*?)</p>', page),
    }


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
