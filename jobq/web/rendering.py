"""Rendering: Jinja2 with autoescaping on, templates and assets shipped in
the package (no CDN, no build step)."""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any, NamedTuple, Protocol

from jobq.extras import requires
from jobq.queue import JobQueue
from jobq.types import JobRecord
from jobq.web import describe
from jobq.web.http import Request, Response
from jobq.web.security import CsrfPolicy

with requires("web", "the jobq dashboard (jobq.web)", "Jinja2"):
    import jinja2


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


#: The lists, with their titles, in the navigation's order.
TITLES = {
    "due": "Pending (due)",
    "delayed": "Delayed",
    "retrying": "Retrying",
    "running": "Running",
    "waiting": "Waiting",
    "dead": "Dead",
    "completed": "Completed (kept)",
    "cancelled": "Cancelled",
}


class Banner(NamedTuple):
    """What a page says above its content: a success (``message``), or a
    failure (``error``), each shown as what it is."""

    message: str | None = None
    error: str | None = None


NO_BANNER = Banner()

#: The environ key of a request's ``Frame``.
FRAME_KEY = "jobq.web.frame"


@dataclass(frozen=True)
class Frame:
    """The application's own page around the dashboard, for one request
    (``environ[FRAME_KEY]``): its header (``title``, a link to ``home``),
    the signed-in ``user`` with the application's ``links`` and a
    ``logout`` URL the page POSTs to (with the request's CSRF token), and
    the ``crumbs`` leading to the dashboard, the page's own title after
    them. The Django mount under the admin gives one: Django
    administration's header, Home, jobq."""

    title: str
    home: str
    crumbs: tuple[tuple[str, str], ...] = ()
    user: str | None = None
    links: tuple[tuple[str, str], ...] = ()
    logout: str | None = None


#: The heading of an error page, by status.
ERROR_HEADINGS = {400: "Bad request", 404: "Not found"}
#: The assets served under /static/, read once.
ASSET_TYPES = {
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "svg": "image/svg+xml",
}


def when(value: float | None) -> str:
    """Epoch seconds as UTC text."""
    if value is None:
        return "—"
    return dt.datetime.fromtimestamp(value, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(value: float) -> str:
    """Epoch seconds as ISO 8601 in UTC (a ``<time>``'s ``datetime``)."""
    return dt.datetime.fromtimestamp(value, dt.UTC).isoformat(timespec="seconds")


def ago(value: float, now: float) -> str:
    """A moment relative to ``now``, for people: ``3 min ago``, ``in 2 h``."""
    seconds = abs(now - value)
    if seconds < 1:
        return "now"
    unit, size = next((unit, size) for unit, size in _AGO_UNITS if seconds >= size)
    amount = f"{int(seconds // size)} {unit}"
    return f"{amount} ago" if value < now else f"in {amount}"


#: The units of ``ago``, largest first.
_AGO_UNITS = [("d", 86400), ("h", 3600), ("min", 60), ("s", 1)]


def slot(value: dt.datetime | None) -> str:
    """A schedule's slot (an aware datetime) as text in its own zone."""
    if value is None:
        return "—"
    return value.strftime("%Y-%m-%d %H:%M:%S %Z")


def duration(seconds: float) -> str:
    """A length of time for people: ``120 ms``, ``3.2 s``, ``4 min 5 s``,
    ``2 h 3 min``, ``3 d 4 h``."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    for unit, size, smaller, small_size in _UNITS:
        if whole >= size:
            return f"{whole // size} {unit} {whole % size // small_size} {smaller}"
    return f"{whole} s"


#: The units of ``duration`` beyond seconds: each with the next smaller one.
_UNITS = [("d", 86400, "h", 3600), ("h", 3600, "min", 60), ("min", 60, "s", 1)]


def took(record: JobRecord[Any]) -> str | None:
    """How long a job's last attempt took (``None`` while it runs, or
    before any ran)."""
    if record.started_at is None or record.finished_at is None:
        return None
    return duration(max(0.0, record.finished_at - record.started_at))


def pretty(value: Any) -> str:
    """A JSON value, indented (escaped by the template like any text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def frame_of(request: Request) -> Frame | None:
    """The request's ``Frame``, if its mount gave one."""
    found = request.environ.get(FRAME_KEY)
    return found if isinstance(found, Frame) else None


class Renderer:
    """The templates of the dashboard, and its assets."""

    def __init__(self) -> None:
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("jobq.web", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.env.filters["when"] = when
        self.env.filters["pretty"] = pretty
        self.env.filters["slot"] = slot
        self.env.filters["attempts"] = describe.attempts
        self.env.filters["failures"] = describe.failures
        self.env.filters["took"] = took
        self.env.filters["iso"] = iso
        self.env.filters["ago"] = ago
        self.env.filters["duration"] = duration
        self.env.globals["inf"] = math.inf
        self.env.filters["traceback_parts"] = describe.traceback_parts
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
            banner=context.pop("banner", NO_BANNER),
            frame=frame_of(request),
            titles=TITLES,
            current=context.pop("current", None),
            **context,
        )
        response = Response(status, body.encode())
        if set_cookie is not None:
            response.headers.append(("Set-Cookie", set_cookie))
        return response

    def error(
        self, dashboard: Site, request: Request, status: int, error: str
    ) -> Response:
        """A page saying what went wrong, as an error (never in the banner of
        a success)."""
        return self.page(dashboard, request, "error.html", status,
                         banner=Banner(error=error),
                         heading=ERROR_HEADINGS.get(status, "Error"))  # fmt: skip
