"""The app config: ``ready()`` imports the apps' tasks and connects a signal
receiver, nothing else (the system checks are registered by importing
``jobq.contrib.django``, which Django does for the app).

No thread is started and no store is opened here: ``ready()`` runs for every
management command (``migrate``, ``test``, ``shell`` ...) and in runserver's
reloader parent. Workers start on the serving process's first request
(``request_started``), or in ``manage.py jobq_worker``.
"""

from __future__ import annotations

from django.apps import AppConfig
from django.core.signals import request_started
from django.utils.module_loading import autodiscover_modules


class JobqConfig(AppConfig):
    name = "jobq.contrib.django"
    label = "jobq"
    verbose_name = "jobq"

    def ready(self) -> None:
        from jobq.contrib.django import start_lazily

        # Register every app's tasks in each process (workers included), the
        # way the admin finds admin.py; importing them opens nothing.
        autodiscover_modules("tasks")
        request_started.connect(start_lazily, dispatch_uid="jobq.start_lazily")
