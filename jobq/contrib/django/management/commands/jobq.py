"""``manage.py jobq COMMAND``: the ``jobq`` command's ``stats``, ``dead``,
``show``, ``retry``, ``delete`` and ``purge-dead`` on the project's queue
(``settings.JOBQ["STORE"]``); workers run with ``manage.py jobq_worker``."""

from __future__ import annotations

import argparse
import io
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobq import cli
from jobq.contrib.django import get_queue
from jobq.contrib.django.management import RawWriter
from jobq.errors import JobqError, StoreLocked

COMMANDS = {name: c for name, c in cli.COMMANDS.items() if name != "worker"}


class Command(BaseCommand):
    help = "Look at the project's jobq queue and manage its dead jobs."

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(
            dest="jobq_command", metavar="COMMAND", required=True
        )
        for command in COMMANDS.values():
            sub = commands.add_parser(command.name, help=command.help)
            command.add_arguments(sub)

    def handle(self, *args: Any, **options: Any) -> None:
        command = COMMANDS[options["jobq_command"]]
        namespace = argparse.Namespace(**options)
        namespace.command = command.name
        err = io.StringIO()  # its message becomes the CommandError's
        app_queue = get_queue()
        try:
            read_only = not command.changes(namespace)
            queue = cli._for_commands(app_queue, read_only=read_only)
            try:
                status = command.run(queue, namespace, RawWriter(self.stdout), err=err)
            finally:
                if queue is not app_queue:
                    queue.close()
        except cli.CommandError as exc:
            raise CommandError(exc.message, returncode=exc.code) from None
        except StoreLocked as exc:
            raise CommandError(
                f"{exc} Only the process that owns a JSON store can change it."
            ) from None
        except JobqError as exc:
            raise CommandError(str(exc)) from None
        if status:
            raise CommandError(
                err.getvalue().strip() or f"jobq {command.name} failed",
                returncode=status,
            )
        self.stderr.write(err.getvalue(), ending="")
