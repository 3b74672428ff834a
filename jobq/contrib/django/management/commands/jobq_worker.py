"""``manage.py jobq_worker``: run the project queue's workers in the foreground.

Stops cleanly on SIGTERM or SIGINT: running jobs get ``--shutdown-timeout``
seconds to finish (a second signal exits at once), the rest stay queued.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobq import cli
from jobq.contrib.django import get_queue
from jobq.contrib.django.management import RawWriter


class Command(BaseCommand):
    stealth_options = ("stop",)  # a threading.Event, for tests
    help = "Run the workers of the project's jobq queue until SIGTERM or SIGINT."

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_worker_arguments(parser)
        parser.set_defaults(workers=None)  # None: JOBQ["WORKERS"]

    def handle(self, *args: Any, **options: Any) -> None:
        namespace = argparse.Namespace(**options)
        namespace.command = "jobq_worker"
        queue = get_queue()
        if namespace.workers is None:
            namespace.workers = queue.workers
        status = cli.run_worker(
            queue,
            namespace,
            cast(TextIO, RawWriter(self.stdout)),
            err=cast(TextIO, RawWriter(self.stderr)),
            stop=options.get("stop"),
        )
        if status:
            raise CommandError("the worker failed", returncode=status)
