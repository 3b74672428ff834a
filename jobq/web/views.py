"""The dashboard's pages and actions. Each takes the dashboard, the request
and its route's groups, and returns a ``Response``; GET never changes
anything, and every POST has passed the CSRF and read-only checks."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from jobq.queue import JobQueue
from jobq.stores.pages import VIEWS
from jobq.types import JobState
from jobq.web.http import Request, Response, redirect
from jobq.web.rendering import ASSET_TYPES, Site
from jobq.web.throughput import MINUTES, table

#: What an action's redirect may say (a code from here, never request text).
MESSAGES = {
    "retried": "The job is pending again.",
    "deleted": "The dead job was deleted.",
    "cancelled": "The pending job was cancelled.",
    "stopping": "The running job was asked to stop: it ends cancelled when its "
    "handler stops (or is abandoned after its grace).",
    "stopped": "The running job was asked to stop, and has stopped.",
    "unchanged": "Nothing changed: the job is no longer in that state.",
    "bulk-retried": "Retried the dead jobs matching the filter.",
    "bulk-deleted": "Deleted the dead jobs matching the filter.",
}
PAST = {"retry": "retried", "delete": "deleted"}
#: Jobs a bulk action reads per page.
BULK_PAGE = 500
FILTERS = ("task", "key", "error")
#: Who a cancellation from the dashboard says asked (``Cancellation.by``),
#: with the user the server or framework authenticated (``REMOTE_USER``).
REQUESTER = "dashboard"
#: The longest user name kept in ``Cancellation.by``.
USER_CHARS = 100


def counts(dashboard: Site) -> dict[str, int]:
    stats = dashboard.queue.stats()
    return {
        "due": stats.pending - stats.delayed,
        "delayed": stats.delayed,
        "running": stats.running,
        "dead": stats.dead,
        "completed": stats.completed,
        "kept": stats.kept,
        "cancelled": stats.cancelled,
        "retried": stats.retried,
    }


def throughput(dashboard: Site) -> dict[str, Any]:
    """The throughput table: ``columns`` and ``rows`` (see ``table``), and
    whether the store's columns are there (``stored``)."""
    queue = dashboard.queue
    stored = queue.finished_per_minute(MINUTES)
    columns, rows = table(
        dashboard.throughput.recent(time.time()), stored, queue.keep_completed > 0
    )
    return {"columns": columns, "rows": rows, "stored": stored is not None}


def limits(dashboard: Site) -> list[dict[str, Any]]:
    """The limits the store holds, by name, with the attempts running and
    the jobs waiting under each now (a family's summed over its keys)."""
    return [
        {"name": usage.name, "running": usage.running, "waiting": usage.waiting}
        for usage in dashboard.queue.limits()
    ]


def overview(dashboard: Site, request: Request) -> Response:
    return dashboard.renderer.page(
        dashboard, request, "overview.html",
        counts=counts(dashboard),
        keeps_results=dashboard.queue.keep_completed > 0,
        throughput=throughput(dashboard),
        schedules=dashboard.queue.schedules(),
        limits=dashboard.queue.limits(),
        message=MESSAGES.get(request.query.get("msg", "")),
    )  # fmt: skip


def stats_json(dashboard: Site, request: Request) -> Response:
    """What the overview refreshes itself with."""
    body = {
        "counts": counts(dashboard),
        "throughput": throughput(dashboard)["rows"],
        "limits": limits(dashboard),
    }
    return Response(200, json.dumps(body).encode(), "application/json")


def asset(dashboard: Site, request: Request, name: str) -> Response:
    data = dashboard.renderer.assets.get(name)
    if data is None:
        return Response(404, b"no such asset", "text/plain")
    return Response(200, data, ASSET_TYPES[name.rsplit(".", 1)[1]])


def job_list(dashboard: Site, request: Request, view: str) -> Response:
    if view not in VIEWS:
        return dashboard.renderer.page(
            dashboard, request, "error.html", 404, message="no such list"
        )
    filters = {name: request.query.get(name) or None for name in FILTERS}
    page = dashboard.queue.browse(
        view, limit=50, after=request.query.get("after") or None, **filters
    )
    shown = {name: value for name, value in filters.items() if value}
    return dashboard.renderer.page(
        dashboard, request, "list.html",
        view=view, page=page, filters=filters,
        first_query=urlencode(shown),
        next_query=None if page.after is None
        else urlencode({**shown, "after": page.after}),
        message=MESSAGES.get(request.query.get("msg", "")),
    )  # fmt: skip


def job_page(dashboard: Site, request: Request, job_id: str) -> Response:
    job = dashboard.queue.get(int(job_id))
    if job is None:
        return dashboard.renderer.page(
            dashboard, request, "error.html", 404, message="no such job (any more)"
        )
    return dashboard.renderer.page(
        dashboard, request, "job.html", job=job,
        message=MESSAGES.get(request.query.get("msg", "")),
    )  # fmt: skip


#: What an action did: whether it changed the job, the message's code and
#: the page to go to.
Outcome = tuple[bool, str, str]


def job_action(dashboard: Site, request: Request, job_id: str, action: str) -> Response:
    number = int(job_id)
    done, code, target = ACTIONS[action](dashboard.queue, number, request)
    if not done:
        code, target = "unchanged", f"/job/{number}"
    return redirect(request.url(f"{target}?msg={code}"))


def _retry(queue: JobQueue[Any], number: int, request: Request) -> Outcome:
    return queue.retry_dead(number), "retried", f"/job/{number}"


def _delete(queue: JobQueue[Any], number: int, request: Request) -> Outcome:
    return queue.delete_dead(number), "deleted", "/jobs/dead"


def _cancel(queue: JobQueue[Any], number: int, request: Request) -> Outcome:
    """Cancel a pending job (back to the due list), or ask a running one to
    stop (to its page, which says whether it has)."""
    before = queue.get(number)
    if not queue.cancel(number, by=requester(request)):
        return False, "", ""
    if before is None or before.state is JobState.PENDING:
        return True, "cancelled", "/jobs/due"
    after = queue.get(number)
    running = after is not None and after.state is JobState.RUNNING
    return True, "stopping" if running else "stopped", f"/job/{number}"


def requester(request: Request) -> str:
    """``dashboard``, or ``dashboard (alice)`` when the server or the
    framework mounting it authenticated a user (``REMOTE_USER``)."""
    user = request.environ.get("REMOTE_USER")
    if not isinstance(user, str) or not user:
        return REQUESTER
    return f"{REQUESTER} ({user[:USER_CHARS]})"


ACTIONS: dict[str, Callable[[JobQueue[Any], int, Request], Outcome]] = {
    "retry": _retry,
    "delete": _delete,
    "cancel": _cancel,
}


def bulk_action(dashboard: Site, request: Request, action: str) -> Response:
    """Retry or delete every dead job the form's filters match; without
    ``confirmed`` (no JavaScript to ask), a page that asks first."""
    form = request.form()
    filters = {name: form.get(name) or None for name in FILTERS}
    if form.get("confirmed") != "yes":
        return dashboard.renderer.page(
            dashboard, request, "confirm.html",
            action=action, filters=filters,
        )  # fmt: skip
    queue = dashboard.queue
    change = queue.retry_dead if action == "retry" else queue.delete_dead
    after = None
    while True:
        page = queue.browse("dead", limit=BULK_PAGE, after=after, **filters)
        for job in page.jobs:
            change(job.id)
        if page.after is None:
            break
        after = page.after
    shown = {name: value for name, value in filters.items() if value}
    query = urlencode({**shown, "msg": f"bulk-{PAST[action]}"})
    return redirect(request.url(f"/jobs/dead?{query}"))
