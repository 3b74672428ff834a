"""The dashboard's pages and actions. Each takes the dashboard, the request
and its route's groups, and returns a ``Response``; GET never changes
anything, and every POST has passed the CSRF and read-only checks."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlencode

from jobq.stores.pages import VIEWS
from jobq.web.http import Request, Response, redirect
from jobq.web.rendering import ASSET_TYPES, Site
from jobq.web.throughput import MINUTES, table

#: What an action's redirect may say (a code from here, never request text).
MESSAGES = {
    "retried": "The job is pending again.",
    "deleted": "The dead job was deleted.",
    "cancelled": "The pending job was cancelled.",
    "unchanged": "Nothing changed: the job is no longer in that state.",
    "bulk-retried": "Retried the dead jobs matching the filter.",
    "bulk-deleted": "Deleted the dead jobs matching the filter.",
}
PAST = {"retry": "retried", "delete": "deleted"}
#: Jobs a bulk action reads per page.
BULK_PAGE = 500
FILTERS = ("task", "key", "error")


def counts(dashboard: Site) -> dict[str, int]:
    stats = dashboard.queue.stats()
    return {
        "due": stats.pending - stats.delayed,
        "delayed": stats.delayed,
        "running": stats.running,
        "dead": stats.dead,
        "completed": stats.completed,
        "kept": stats.kept,
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


def overview(dashboard: Site, request: Request) -> Response:
    return dashboard.renderer.page(
        dashboard, request, "overview.html",
        counts=counts(dashboard),
        keeps_results=dashboard.queue.keep_completed > 0,
        throughput=throughput(dashboard),
        schedules=dashboard.queue.schedules(),
        message=MESSAGES.get(request.query.get("msg", "")),
    )  # fmt: skip


def stats_json(dashboard: Site, request: Request) -> Response:
    """What the overview refreshes itself with."""
    body = {"counts": counts(dashboard), "throughput": throughput(dashboard)["rows"]}
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


def job_action(dashboard: Site, request: Request, job_id: str, action: str) -> Response:
    queue, number = dashboard.queue, int(job_id)
    if action == "retry":
        done, code = queue.retry_dead(number), "retried"
        target = f"/job/{number}"
    elif action == "delete":
        done, code, target = queue.delete_dead(number), "deleted", "/jobs/dead"
    else:
        done, code, target = queue.cancel(number), "cancelled", "/jobs/due"
    if not done:
        code, target = "unchanged", f"/job/{number}"
    return redirect(request.url(f"{target}?msg={code}"))


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
