"""Rendering: Jinja2 with autoescaping on, templates and assets shipped in
the package (no CDN, no build step)."""

from __future__ import annotations

import datetime as dt
import json
from importlib import resources
from typing import Any, Protocol

from jobq.queue import JobQueue
from jobq.web.http import Request, Response
from jobq.web.security import CsrfPolicy
from jobq.web.throughput import Throughput


class Site(Protocol):
    """What the views and the templates read of the dashboard they serve
    (``jobq.web.app.Dashboard`` is the one: a protocol, so that the views
    and this module import nothing of the application that routes to
    them)."""

    queue: JobQueue[Any]
    read_only: bool
    notice: str | None
    csrf: CsrfPolicy
    refresh_seconds: float
    renderer: Renderer
    throughput: Throughput


#: The lists, with their titles, in the navigation's order.
TITLES = {
    "due": "Pending (due)",
    "delayed": "Delayed",
    "running": "Running",
    "dead": "Dead",
    "completed": "Completed (kept)",
    "cancelled": "Cancelled",
}
#: The assets served under /static/, read once.
ASSET_TYPES = {"js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8"}


def when(value: float | None) -> str:
    """Epoch seconds as UTC text."""
    if value is None:
        return "—"
    return dt.datetime.fromtimestamp(value, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def slot(value: dt.datetime | None) -> str:
    """A schedule's slot (an aware datetime) as text in its own zone."""
    if value is None:
        return "—"
    return value.strftime("%Y-%m-%d %H:%M:%S %Z")


def pretty(value: Any) -> str:
    """A JSON value, indented (escaped by the template like any text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


class Renderer:
    """The templates of the dashboard, and its assets."""

    def __init__(self) -> None:
        try:
            import jinja2
        except ImportError:  # pragma: no cover - the extra is missing
            raise ImportError(
                "the jobq dashboard needs Jinja2: pip install 'jobq[web]'"
            ) from None
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("jobq.web", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.env.filters["when"] = when
        self.env.filters["pretty"] = pretty
        self.env.filters["slot"] = slot
        files = resources.files("jobq.web") / "static"
        self.assets = {
            item.name: item.read_bytes() for item in files.iterdir() if item.is_file()
        }

    def page(
        self, dashboard: Site, request: Request, name: str, status: int = 200,
        **context: Any,
    ) -> Response:  # fmt: skip
        """A template rendered with the dashboard's common context."""
        token, set_cookie = dashboard.csrf.token(request)
        body = self.env.get_template(name).render(
            base=request.script_name,
            csrf_field=dashboard.csrf.field,
            csrf_token=token,
            read_only=dashboard.read_only,
            notice=dashboard.notice,
            refresh_ms=int(dashboard.refresh_seconds * 1000),
            message=context.pop("message", None),
            titles=TITLES,
            **context,
        )
        response = Response(status, body.encode())
        if set_cookie is not None:
            response.headers.append(("Set-Cookie", set_cookie))
        return response
