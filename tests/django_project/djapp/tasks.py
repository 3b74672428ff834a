"""Tasks of the test app: found by ``autodiscover_modules("tasks")``."""

from __future__ import annotations

from djapp.models import Note
from jobq.contrib.django import task


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def note(text: str) -> int:
    return Note.objects.create(text=text).pk
