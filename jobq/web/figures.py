"""The dashboard's figures of the whole queue, read from the store and the
same whichever process serves the page (``jobq.activity``): the overview's
charts, the processes serving the queue, and the tasks."""

from __future__ import annotations

from collections import Counter
from typing import Any

from jobq.activity import ActivityMinute
from jobq.web.charts import RANGES, bins, depth_chart, latency_chart, outcomes_chart
from jobq.web.http import Request, Response
from jobq.web.rendering import Site

#: The range shown when the request names none (or one not in ``RANGES``).
DEFAULT_RANGE = "1h"


def chosen_range(request: Request) -> str:
    wanted = request.query.get("range", DEFAULT_RANGE)
    return wanted if wanted in RANGES else DEFAULT_RANGE


def figures(dashboard: Site, shown: str) -> dict[str, Any]:
    """What the overview's figures section draws for the range ``shown``:
    ``None`` for ``charts`` where the store keeps no figures."""
    minutes, per = RANGES[shown]
    found: list[ActivityMinute] | None = dashboard.queue.activity(minutes)
    if found is None:
        return {"range": shown, "ranges": list(RANGES), "charts": None, "bins": []}
    grouped = bins(found, per)
    charts = [outcomes_chart(grouped), depth_chart(grouped), latency_chart(grouped)]
    return {
        "range": shown,
        "ranges": list(RANGES),
        "charts": charts,
        "bins": grouped,
        "per": per,
    }


def figures_fragment(dashboard: Site, request: Request) -> Response:
    """The overview's figures alone, for the page to refresh them in place."""
    return dashboard.renderer.page(
        dashboard,
        request,
        "figures.html",
        shown=figures(dashboard, chosen_range(request)),
    )


def processes_page(dashboard: Site, request: Request) -> Response:
    queue = dashboard.queue
    return dashboard.renderer.page(
        dashboard, request, "processes.html", current="processes",
        processes=queue.processes(), now=queue.clock(),
    )  # fmt: skip


def tasks_page(dashboard: Site, request: Request) -> Response:
    """One row per task over the range: outcomes, p50/p95 durations and
    failure rate, the attempts running now, and the error of its newest
    failed attempt (from the figures: no job is read)."""
    queue = dashboard.queue
    shown = chosen_range(request)
    minutes, _ = RANGES[shown]
    tasks = queue.task_activity(minutes)
    running = Counter(
        job.task for info in queue.processes() or () if not info.gone
        for job in info.running
    )  # fmt: skip
    return dashboard.renderer.page(
        dashboard, request, "tasks.html", current="tasks",
        tasks=tasks, running=running, shown=shown, ranges=list(RANGES),
        now=queue.clock(),
    )  # fmt: skip
