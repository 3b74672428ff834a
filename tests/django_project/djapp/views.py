from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest, HttpResponse

from djapp.models import Note
from djapp.tasks import add


def add_note(request: HttpRequest) -> HttpResponse:
    with transaction.atomic():
        Note.objects.create(text="from a view")
        add.enqueue(1, 2)
    return HttpResponse("ok")
