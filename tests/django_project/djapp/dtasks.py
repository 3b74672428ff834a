"""Tasks of Django's Tasks framework, run by ``JobqBackend``.

Written as Django's Tasks documentation writes them; on Python 3.11 the
framework is the ``django_tasks`` backport.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from django.core.mail import send_mail

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

#: What the tasks below saw, for the tests to look at.
seen: list[Any] = []


@task
def email_users(emails: list[str], subject: str, message: str) -> int:
    return send_mail(
        subject=subject, message=message, from_email=None, recipient_list=emails
    )


@task(priority=2, queue_name="emails")
def email_priority(emails: list[str], subject: str, message: str) -> int:
    return send_mail(
        subject=subject, message=message, from_email=None, recipient_list=emails
    )


@task(takes_context=True)
def email_with_context(context: Any, emails: list[str], subject: str) -> int:
    seen.append((context.attempt, context.task_result.id))
    return send_mail(
        subject=subject,
        message=f"Attempt {context.attempt}",
        from_email=None,
        recipient_list=emails,
    )


@task
def record(label: str) -> str:
    seen.append(label)
    return label


@task
def fail(message: str) -> None:
    raise ValueError(message)


@task
async def add_async(a: int, b: int) -> int:
    seen.append(threading.get_ident())
    return a + b


@task
def pair(a: int, b: int) -> tuple[int, int]:
    return (a, b)  # JSON has no tuples: the result is a list


class Declined(Exception):
    """An exception of the project's own, recorded by its import path."""


@task
def decline(reason: str) -> None:
    raise Declined(reason)


@task
def not_json() -> object:
    return object()


@task
def exit_now(code: int) -> None:
    raise SystemExit(code)


@task
def hold(started: str, seconds: float) -> None:
    """Say it started (a file: the test is another process), then run long."""
    Path(started).touch()
    time.sleep(seconds)


def plain_function(*args: Any) -> str:
    """Not a Task: a stored job naming it is refused."""
    seen.append("plain_function ran")
    return "ran"


def _renamed(a: int) -> int:
    return a


#: A Task whose import path (``djapp.dtasks._renamed``) is not this Task.
renamed = task(_renamed)


@task
def spin() -> None:
    """Loops until its time limit interrupts it, at a line of its own."""
    total = 0
    while True:
        total += 1


@task(limits=["smtp"])  # JobqBackend's task_class (JobqTask) takes jobq's limits
def send_limited(to: str) -> str:
    seen.append(to)
    return to
