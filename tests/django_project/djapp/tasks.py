"""Tasks of the test app: found by ``autodiscover_modules("tasks")``."""

from __future__ import annotations

from djapp.models import Note
from jobq.contrib.django import periodic, task


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def note(text: str) -> int:
    return Note.objects.create(text=text).pk


# Once a year, so that it never runs during the other tests.
@periodic(cron="0 3 1 1 *", tz="Europe/Berlin")
def new_year_report() -> None:
    Note.objects.create(text="happy new year")
