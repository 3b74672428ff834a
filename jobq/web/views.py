"""The dashboard's pages and actions. Each takes the dashboard, the request
and its route's groups, and returns a ``Response``; GET never changes
anything, and every POST has passed the CSRF and read-only checks."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from jobq.admin.operations import family
from jobq.queue import JobQueue
from jobq.stores.pages import VIEWS, pending_view
from jobq.types import JobState
from jobq.web import describe
from jobq.web.figures import chosen_range, figures
from jobq.web.http import Request, Response, redirect
from jobq.web.messages import banner, counted
from jobq.web.rendering import ASSET_TYPES, Site

PAST = {"retry": "retried", "delete": "deleted", "cancel": "cancelled"}
#: What a child does when a parent fails, by its ``after_failure``.
AFTER_FAILURE = {
    "wait": "it waits for the dead parent to be retried (deleting that parent "
    "cancels it)",
    "cancel": "it is cancelled",
    "run": "it runs anyway",
}
#: Jobs a bulk action reads per page.
BULK_PAGE = 500
#: Jobs a list shows per page: the most one selection of rows may name.
LIST_PAGE = 50
#: What the ticked rows of each list can have done to them.
SELECTABLE = {
    "dead": ("retry", "delete"),
    "due": ("cancel",),
    "delayed": ("cancel",),
    "retrying": ("cancel",),
}
#: A job id as a request gives it (the routes' own pattern).
JOB_ID = re.compile(r"[0-9]{1,19}")
FILTERS = ("task", "key", "error")
#: Who a cancellation from the dashboard says asked (``Cancellation.by``),
#: with the user the server or framework authenticated (``REMOTE_USER``).
REQUESTER = "dashboard"
#: The longest user name kept in ``Cancellation.by``.
USER_CHARS = 100


def counts(dashboard: Site) -> dict[str, int]:
    """The jobs by state as stored: the same whichever process answers. Each
    pending job in one count, as in one list: due, delayed (never attempted)
    or retrying."""
    stats = dashboard.queue.stats()
    return {
        "due": stats.pending - stats.delayed,
        "delayed": stats.delayed - stats.retrying,
        "retrying": stats.retrying,
        "running": stats.running,
        "waiting": stats.waiting,
        "dead": stats.dead,
        "kept": stats.kept,
        "cancelled": stats.cancelled,
    }


def minutes(dashboard: Site) -> list[list[Any]] | None:
    """The last hour per minute, as the store holds it from every process:
    ``[start, succeeded, failed, dead, cancelled, pending, running,
    waiting, latency]`` each (the depth ``null`` where unsampled); ``None``
    where the store keeps no figures."""
    found = dashboard.queue.activity(60)
    if found is None:
        return None
    return [
        [m.start, m.succeeded, m.failed, m.dead, m.cancelled, m.pending, m.running,
         m.waiting, m.latency]
        for m in found
    ]  # fmt: skip


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
        shown=figures(dashboard, chosen_range(request)),
        schedules=dashboard.queue.schedules(),
        current="overview",
        limits=dashboard.queue.limits(),
        banner=banner(request.query),
    )  # fmt: skip


def stats_json(dashboard: Site, request: Request) -> Response:
    """What the overview refreshes itself with."""
    body = {
        "counts": counts(dashboard),
        "minutes": minutes(dashboard),
        "limits": limits(dashboard),
    }
    return Response(200, json.dumps(body).encode(), "application/json")


def asset(dashboard: Site, request: Request, name: str) -> Response:
    data = dashboard.renderer.assets.get(name)
    if data is None:
        return Response(404, b"no such asset", "text/plain")
    return Response(200, data, ASSET_TYPES[name.rsplit(".", 1)[1]])


def favicon(dashboard: Site, request: Request) -> Response:
    """The icon, for a browser that asks at the conventional path (every
    page names ``/static/favicon.svg``)."""
    return asset(dashboard, request, "favicon.svg")


def job_list(dashboard: Site, request: Request, view: str) -> Response:
    if view not in VIEWS:
        return dashboard.renderer.error(dashboard, request, 404, "no such list")
    filters = {name: request.query.get(name) or None for name in FILTERS}
    page = dashboard.queue.browse(
        view, limit=LIST_PAGE, after=request.query.get("after") or None, **filters
    )
    shown = {name: value for name, value in filters.items() if value}
    return dashboard.renderer.page(
        dashboard, request, "list.html",
        view=view, page=page, filters=filters, current=view,
        now=dashboard.queue.clock(), selectable=SELECTABLE.get(view, ()),
        known_tasks=known_tasks(dashboard),
        first_query=urlencode(shown),
        next_query=None if page.after is None
        else urlencode({**shown, "after": page.after}),
        banner=banner(request.query),
    )  # fmt: skip


def known_tasks(dashboard: Site) -> list[str]:
    """The task names the filter offers: those this process registered and
    those any process ran in the last hour (the store's figures)."""
    queue = dashboard.queue
    ran = queue.task_activity(60) or ()
    return sorted({*queue.tasks, *(t.task for t in ran if t.task is not None)})


def find_job(dashboard: Site, request: Request) -> Response:
    """The page of the job whose id the lists' "go to job" box asks for."""
    given = request.query.get("id", "").strip()
    if not (given.isascii() and given.isdigit()):
        said = f"not {given[:30]!r}" if given else "and none was given"
        return dashboard.renderer.error(
            dashboard, request, 400, f"a job id is a whole number such as 42, {said}"
        )
    if JOB_ID.fullmatch(given) is None or dashboard.queue.get(int(given)) is None:
        return _no_such_job(dashboard, request, given)
    return redirect(request.url(f"/job/{int(given)}"))


def _no_such_job(dashboard: Site, request: Request, job_id: str) -> Response:
    return dashboard.renderer.error(
        dashboard, request, 404, f"no such job {job_id.lstrip('0') or 0} (any more)"
    )


def job_page(dashboard: Site, request: Request, job_id: str) -> Response:
    job = dashboard.queue.get(int(job_id))
    if job is None:
        return _no_such_job(dashboard, request, job_id)
    return dashboard.renderer.page(
        dashboard, request, "job.html", job=job,
        family=family(dashboard.queue, job), after_failure=AFTER_FAILURE,
        arguments=describe.arguments(job), meta=describe.meta_rows(job.meta),
        banner=banner(request.query),
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
    return _retry_dead(queue, number, request), "retried", f"/job/{number}"


def _delete(queue: JobQueue[Any], number: int, request: Request) -> Outcome:
    return _delete_dead(queue, number, request), "deleted", "/jobs/dead"


def _cancel(queue: JobQueue[Any], number: int, request: Request) -> Outcome:
    """Cancel a pending or waiting job (back to the list it was in: due,
    delayed, retrying or waiting), or ask a running one to stop (to its page,
    which says whether it has)."""
    before = queue.get(number)
    if not queue.cancel(number, by=requester(request)):
        return False, "", ""
    if before is not None and before.state is JobState.WAITING:
        return True, "cancelled-waiting", "/jobs/waiting"
    if before is not None and before.state is JobState.PENDING:
        view = pending_view(before.run_at, before.attempts, queue.clock())
        return True, CANCELLED_FROM[view], f"/jobs/{view}"
    if before is None:
        return True, "cancelled", "/jobs/due"
    after = queue.get(number)
    running = after is not None and after.state is JobState.RUNNING
    return True, "stopping" if running else "stopped", f"/job/{number}"


#: What cancelling a pending job says, by the list it was in.
CANCELLED_FROM = {
    "due": "cancelled",
    "delayed": "cancelled-delayed",
    "retrying": "cancelled-retrying",
}


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


def schedule_action(dashboard: Site, request: Request, action: str) -> Response:
    """Pause, resume or run now the periodic job the form names (``name``),
    then back to the overview's schedules, saying what happened: a code,
    never the name."""
    name = request.form().get("name", "")
    queue = dashboard.queue
    shown = next((s for s in queue.schedules() if s.name == name), None)
    if shown is None:
        code = "no-such-schedule"
    elif action == "run" and shown.orphaned:
        code = "schedule-not-here"  # its task and options are in the code
    else:
        code = SCHEDULE_ACTIONS[action](queue, name, request)
    return redirect(request.url(f"/?msg={code}#schedules"))


def _pause_schedule(queue: JobQueue[Any], name: str, request: Request) -> str:
    paused = queue.pause_schedule(name, by=requester(request))
    return "schedule-paused" if paused else "schedule-unchanged"


def _resume_schedule(queue: JobQueue[Any], name: str, request: Request) -> str:
    return "schedule-resumed" if queue.resume_schedule(name) else "schedule-unchanged"


def _run_schedule(queue: JobQueue[Any], name: str, request: Request) -> str:
    added = queue.run_schedule(name, by=requester(request))
    return "schedule-busy" if added.duplicate else "schedule-run"


#: What each action on a schedule does: the code of the message it leaves.
SCHEDULE_ACTIONS: dict[str, Callable[[JobQueue[Any], str, Request], str]] = {
    "pause": _pause_schedule,
    "resume": _resume_schedule,
    "run": _run_schedule,
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
    change = CHANGES[action]
    done = of = 0
    after = None
    while True:
        page = queue.browse("dead", limit=BULK_PAGE, after=after, **filters)
        for job in page.jobs:
            of += 1
            done += change(queue, job.id, request)
        if page.after is None:
            break
        after = page.after
    said = counted(f"bulk-{PAST[action]}", done, of)
    return _back_to_list(request, "dead", filters, said)


def selected_action(dashboard: Site, request: Request, view: str) -> Response:
    """Do the form's ``action`` to each job whose row was ticked (``id``
    fields: a page's at most), then back to the list, saying how many
    changed."""
    form = request.form()
    action = form.get("action", "")
    if action not in SELECTABLE.get(view, ()):
        raise ValueError(f"the {view[:20]} list has no action {action[:20]!r}")
    numbers = selected_ids(request)
    queue = dashboard.queue
    done = sum(CHANGES[action](queue, number, request) for number in numbers)
    filters = {name: form.get(name) or None for name in FILTERS}
    code = f"selected-{PAST[action]}"
    return _back_to_list(request, view, filters, counted(code, done, len(numbers)))


def selected_ids(request: Request) -> list[int]:
    """The ids of the ticked rows, each once; ``ValueError`` saying what is
    wrong with them (none, too many, one that is not an id)."""
    given = request.form_values("id")
    if not given:
        raise ValueError("no job was selected: tick the rows of the jobs first")
    if len(given) > LIST_PAGE:
        raise ValueError(
            f"{len(given)} jobs were selected: at most {LIST_PAGE} (a page's) at once"
        )
    for one in given:
        if JOB_ID.fullmatch(one) is None:
            raise ValueError(f"a job id is a whole number such as 42, not {one[:30]!r}")
    return list(dict.fromkeys(int(one) for one in given))


def _back_to_list(
    request: Request, view: str, filters: dict[str, str | None], said: dict[str, str]
) -> Response:
    """To the list an action came from, with its filters, saying ``said``."""
    shown = {name: value for name, value in filters.items() if value}
    return redirect(request.url(f"/jobs/{view}?{urlencode({**shown, **said})}"))


def _retry_dead(queue: JobQueue[Any], number: int, request: Request) -> bool:
    return queue.retry_dead(number)


def _delete_dead(queue: JobQueue[Any], number: int, request: Request) -> bool:
    return queue.delete_dead(number)


def _cancel_pending(queue: JobQueue[Any], number: int, request: Request) -> bool:
    """Cancel a job of the due, delayed or retrying list, not one that
    started (or went elsewhere) since the list was shown."""
    found = queue.get(number)
    if found is None or found.state is not JobState.PENDING:
        return False
    return queue.cancel(number, by=requester(request))


#: What an action on several jobs does to each: whether it changed it.
CHANGES: dict[str, Callable[[JobQueue[Any], int, Request], bool]] = {
    "retry": _retry_dead,
    "delete": _delete_dead,
    "cancel": _cancel_pending,
}
