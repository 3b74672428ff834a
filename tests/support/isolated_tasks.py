"""Functions the isolated-task tests register with ``isolate=True``: each
child process imports them from here by module and name (so they live at
the top level of a module that is not ``__main__``)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import time
from collections.abc import Iterator
from typing import Any

import jobq


def identify(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Where it ran, and what it was given."""
    return {"pid": os.getpid(), "args": list(args), "kwargs": kwargs}


def noop() -> None:
    pass


def sleep_for_ever(note: str | None = None) -> None:
    """Blocked in C code (``time.sleep``): a signal handler still runs."""
    if note is not None:
        with open(note, "a") as file:
            file.write(f"{os.getpid()}\n")
    time.sleep(3600)


def read_for_ever() -> None:
    """A blocking read of a socket that never answers."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.recv(1)


def ignore_the_limit() -> None:
    """Catches ``JobTimeout`` and blocks again: only a kill ends it."""
    while True:
        try:
            time.sleep(3600)
        except jobq.JobTimeout:
            continue


def segfault() -> None:
    ctypes.string_at(0)


def exit_3() -> None:
    os._exit(3)


def fail() -> None:
    raise ValueError("no good")


def retry_later() -> None:
    raise jobq.Retry("rate limited", after=30)


def bury() -> None:
    raise jobq.Fatal("no such address")


def not_json() -> object:
    return object()


def add(parent_results: list[Any]) -> int:
    return sum(parent_results)


def three() -> int:
    return 3


def app_name() -> dict[str, Any]:
    """The current Flask app's ``MARK`` and this process."""
    from flask import current_app

    return {"pid": os.getpid(), "mark": current_app.config["MARK"]}


def django_database() -> dict[str, Any]:
    """Django's settings as the child sees them, and a query."""
    from django.conf import settings
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        (one,) = cursor.fetchone()
    return {"pid": os.getpid(), "settings": settings.SETTINGS_MODULE, "one": one}


#: What ``marking_setup`` was given, and whether an attempt runs inside the
#: context it returned (in the child).
SETUP: list[Any] | None = None
INSIDE = False


def marking_setup(*args: Any) -> Any:
    """A child setup: notes its arguments; each attempt runs in ``_around``."""
    global SETUP
    SETUP = list(args)
    return _around


@contextlib.contextmanager
def _around() -> Iterator[None]:
    global INSIDE
    INSIDE = True
    try:
        yield
    finally:
        INSIDE = False


def setup_seen() -> dict[str, Any]:
    return {"setup": SETUP, "inside": INSIDE}


def broken_setup() -> None:
    raise RuntimeError("no app here")
