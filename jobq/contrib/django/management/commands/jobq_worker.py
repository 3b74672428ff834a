"""``manage.py jobq_worker``: run the project queue's workers in the foreground.

Stops cleanly on SIGTERM or SIGINT: running jobs get ``--shutdown-timeout``
seconds to finish (a second signal exits at once), the rest stay queued.
The arguments are ``jobq worker``'s; the work is ``jobq.admin.run_worker``.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobq import admin
from jobq.admin.arguments import add_worker_arguments
from jobq.contrib.django import get_queue
from jobq.contrib.django.management import RawWriter
from jobq.errors import JobqError


class Command(BaseCommand):
    stealth_options = ("stop",)  # a threading.Event, for tests
    help = "Run the workers of the project's jobq queue until SIGTERM or SIGINT."

    def add_arguments(self, parser: CommandParser) -> None:
        add_worker_arguments(parser)
        parser.set_defaults(workers=None)  # None: JOBQ["WORKERS"]

    def handle(self, *args: Any, **options: Any) -> None:
        queue = get_queue()
        try:
            admin.run_worker(
                queue,
                workers=options["workers"] or queue.workers,
                shutdown_timeout=options["shutdown_timeout"],
                log_level=options["log_level"],
                err=RawWriter(self.stderr),
                stop=options.get("stop"),
            )
        except admin.CommandError as exc:
            raise CommandError(exc.message, returncode=exc.code) from None
        except JobqError as exc:
            raise CommandError(admin.command_error(exc).message) from None
