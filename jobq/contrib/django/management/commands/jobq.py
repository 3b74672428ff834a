"""``manage.py jobq COMMAND``: the ``jobq`` command's ``stats``, ``dead``,
``cancelled``, ``schedules``, ``pause-schedule``, ``resume-schedule``,
``run-schedule``, ``limits``, ``show``, ``retry``, ``delete``, ``cancel``,
``purge-dead`` and ``migrate`` on the
project's queue (``settings.JOBQ["STORE"]``); workers run with ``manage.py
jobq_worker``.

The arguments are the ``jobq`` command's (``jobq.admin.arguments``), the
work is ``jobq.admin.operations``', the output ``jobq.admin.render``'s."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobq import admin
from jobq.admin import operations, render
from jobq.admin.arguments import SUBCOMMANDS
from jobq.contrib.django import get_queue
from jobq.errors import JobqError
from jobq.queue import JobQueue

#: The ``jobq`` commands this one offers (``worker`` is ``jobq_worker``).
NAMES = ("stats", "dead", "cancelled", "schedules", "pause-schedule",
         "resume-schedule", "run-schedule", "limits", "processes", "show",
         "retry", "delete", "cancel", "purge-dead", "migrate")  # fmt: skip
#: The commands that change the store (or, ``schedules``, declare them).
CHANGES = ("retry", "delete", "cancel", "schedules", "pause-schedule",
           "resume-schedule", "run-schedule")  # fmt: skip
#: Who ``pause-schedule`` and ``run-schedule`` say asked.
DJANGO_BY = "manage.py jobq"
COMMANDS = {name: SUBCOMMANDS[name] for name in NAMES}


class Command(BaseCommand):
    help = (
        "Look at the project's jobq queue, manage its dead jobs, cancel jobs, "
        "migrate its store's schema."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(
            dest="jobq_command", metavar="COMMAND", required=True
        )
        for command in COMMANDS.values():
            sub = commands.add_parser(command.name, help=command.help)
            command.add_arguments(sub)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            text = run(options["jobq_command"], get_queue(), options)
        except admin.CommandError as exc:
            raise CommandError(exc.message, returncode=exc.code) from None
        except JobqError as exc:
            raise CommandError(admin.command_error(exc).message) from None
        self.stdout.write(text, ending="")


def run(name: str, queue: JobQueue[Any], options: dict[str, Any]) -> str:
    """Command ``name`` on the project's ``queue``; the text to print."""
    as_json = bool(options["json"])
    if name == "migrate":
        done = operations.migrate(queue.store)
        return render.migration(done.store, done.version, as_json=as_json)
    # schedules: the project's own queue declares them (as jobq's --app does).
    changes = name in CHANGES or (name == "purge-dead" and options["yes"])
    with admin.queue_for_command(queue, read_only=not changes) as used:
        if name == "stats":
            return render.stats(operations.stats(used), as_json=as_json)
        if name == "dead":
            return render.dead(operations.dead(used), as_json=as_json)
        if name == "cancelled":
            return render.cancelled(operations.cancelled(used), as_json=as_json)
        if name == "schedules":
            return render.schedules(operations.schedules(used), as_json=as_json)
        if name in ("pause-schedule", "resume-schedule", "run-schedule"):
            return _schedule_action(name, used, options["name"], as_json)
        if name == "limits":
            return render.limits(operations.limits(used), as_json=as_json)
        if name == "processes":
            shown = operations.processes(used)
            return render.processes(shown, used.clock(), as_json=as_json)
        if name == "show":
            record = operations.show(used, options["id"])
            relatives = operations.family(used, record)
            return render.job(record, relatives, as_json=as_json)
        if name == "retry":
            retried = operations.retry(used, options["id"])
            return render.retried(retried, as_json=as_json)
        if name == "cancel":
            asked = operations.cancel(
                used, options["id"], wait=options["wait"], by="manage.py jobq cancel"
            )
            return render.cancel(asked.id, asked.was, asked.outcome, as_json=as_json)
        if name == "delete":
            deleted = operations.delete(used, options["id"])
            return render.deleted(deleted, as_json=as_json)
        purged = operations.purge_dead(used, yes=bool(options["yes"]))
        return render.purged(purged, as_json=as_json)


def _schedule_action(
    command: str, queue: JobQueue[Any], name: str, as_json: bool
) -> str:
    """``pause-schedule``, ``resume-schedule`` or ``run-schedule`` of ``name``."""
    if command == "run-schedule":
        job_id = operations.run_schedule(queue, name, by=DJANGO_BY)
        return render.schedule_run(name, job_id, as_json=as_json)
    if command == "pause-schedule":
        changed = operations.pause_schedule(queue, name, by=DJANGO_BY)
        return render.schedule_changed(name, "paused", changed, as_json=as_json)
    changed = operations.resume_schedule(queue, name)
    return render.schedule_changed(name, "resumed", changed, as_json=as_json)
