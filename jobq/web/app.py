"""The dashboard as a WSGI application: who may look, which route, and the
headers every answer carries. The pages and actions are in ``views``."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypedDict, Unpack

from jobq.options import check_names
from jobq.queue import JobQueue
from jobq.web import figures, views
from jobq.web.http import Request, Response, redirect, text
from jobq.web.rendering import Renderer
from jobq.web.security import (
    TOKEN_COOKIE,
    CsrfPolicy,
    Secret,
    cookie,
    double_submit,
    host_names,
    local_host,
    loopback,
    same_origin,
    token_matches,
    with_headers,
)

logger = logging.getLogger("jobq.web")

#: Routes: (method, pattern) -> view; a view takes the dashboard, the
#: request and the pattern's groups.
View = Callable[..., Response]
ROUTES: list[tuple[str, re.Pattern[str], View]] = [
    ("GET", re.compile(r"/"), views.overview),
    ("GET", re.compile(r"/stats\.json"), views.stats_json),
    ("GET", re.compile(r"/figures"), figures.figures_fragment),
    ("GET", re.compile(r"/processes"), figures.processes_page),
    ("GET", re.compile(r"/tasks"), figures.tasks_page),
    ("GET", re.compile(r"/static/([a-z]+\.(?:js|css|svg))"), views.asset),
    ("GET", re.compile(r"/favicon\.ico"), views.favicon),
    ("GET", re.compile(r"/jobs/([a-z]+)"), views.job_list),
    ("GET", re.compile(r"/job/([0-9]{1,19})"), views.job_page),
    ("POST", re.compile(r"/job/([0-9]{1,19})/(retry|delete|cancel)"), views.job_action),
    ("POST", re.compile(r"/jobs/dead/(retry|delete)"), views.bulk_action),
    ("POST", re.compile(r"/jobs/([a-z]+)/selected"), views.selected_action),
    ("POST", re.compile(r"/schedules/(pause|resume|run)"), views.schedule_action),
    ("GET", re.compile(r"/find"), views.find_job),
]


_BAD_HOST = (
    "bad Host {host!r}: this dashboard serves this machine only, at localhost "
    "or a loopback address (e.g. http://localhost:PORT/); to open it by another "
    "name that resolves here, add the name to the dashboard's hosts "
    "(JOBQ_DASHBOARD_HOSTS in Flask)"
)
_NOT_LOOPBACK = (
    "forbidden: this dashboard serves this machine only, and no request through "
    "a proxy; to let others in, give it a check of who may look: "
    "JobQ(app, dashboard_auth=...) in Flask, make_app(queue, allow=...) elsewhere"
)
_FOREIGN_ORIGIN = (
    "forbidden: the form was sent from another origin ({origin!r}); open the "
    "dashboard at its own address and reload the page"
)


class DashboardOptions(TypedDict, total=False):
    """What a dashboard is made with (``make_app``, ``Dashboard``)."""

    #: Show no actions and refuse them (default ``False``) ...
    read_only: bool
    #: ... with this notice saying why, where it is not the user's choice.
    notice: str | None
    #: Who may see it: ``allow(environ)`` (the mounting application's check);
    #: default: loopback addresses only.
    allow: Callable[[Mapping[str, Any]], bool] | None
    #: A token a request must carry (``?token=`` once, then a cookie).
    token: str | None
    #: A framework's CSRF check instead of the dashboard's own ...
    csrf: CsrfPolicy | None
    #: ... or the key of the dashboard's own (default: random, per dashboard).
    csrf_secret: Secret | None
    #: How often the overview refreshes itself (default 3 s).
    refresh_seconds: float
    #: Host names served beside this machine's, under the loopback rule.
    hosts: Iterable[str]


DASHBOARD_OPTIONS = frozenset(DashboardOptions.__annotations__)


class Dashboard:
    """The dashboard of one queue, a WSGI application (see the README,
    "Dashboard"). ``read_only`` shows no actions and refuses them, with
    ``notice`` saying why where it is not the user's choice.

    Access: ``allow(environ)`` decides (the mounting application's check),
    else only loopback addresses are served; with ``token``, a request must
    also carry it (``?token=`` once, then a cookie). ``csrf``: the
    dashboard's own signed double-submit check unless a framework gives its
    own; ``csrf_secret`` keys its HMAC (text, bytes, or a callable giving
    them at each request; default: a random key of this dashboard), the same
    in every process that serves it behind one address.

    When the loopback rule decides (no ``allow``, no ``token``), the ``Host``
    must name this machine (``localhost``, a loopback address, or one of
    ``hosts``) and a POST's ``Origin`` be the ``Host``'s: see
    ``jobq.web.security`` (DNS rebinding).
    """

    def __init__(
        self, queue: JobQueue[Any], **options: Unpack[DashboardOptions]
    ) -> None:
        check_names(options, DASHBOARD_OPTIONS, "Dashboard")
        read_only = options.get("read_only", False)
        allow, token = options.get("allow"), options.get("token")
        csrf, csrf_secret = options.get("csrf"), options.get("csrf_secret")
        if not isinstance(queue, JobQueue):
            raise TypeError(f"the dashboard needs a JobQueue, not {queue!r}")
        if allow is not None and not callable(allow):
            raise TypeError(f"allow must be callable, not {allow!r}")
        if token is not None and len(token) < 16:
            raise ValueError("token must be a str of at least 16 characters")
        if csrf is not None and csrf_secret is not None:
            raise TypeError(
                "give csrf (a framework's check) or csrf_secret (for the "
                "dashboard's own), not both"
            )
        self.queue = queue
        self.read_only = bool(read_only)
        self.notice = options.get("notice")
        self.allow = allow
        self.token = token
        self.hosts = host_names(options.get("hosts", ()))
        self.csrf = csrf or double_submit(csrf_secret)
        self.refresh_seconds = options.get("refresh_seconds", 3.0)
        self.renderer = Renderer()

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        request = Request(environ)
        try:
            response = self.handle(request)
        except Exception:
            logger.exception(
                "the dashboard failed on %s %s", request.method, request.path
            )
            response = text(500, "the dashboard failed; see the log")
        return with_headers(response).start(start_response)

    def handle(self, request: Request) -> Response:
        refused = self._refuse(request)
        if refused is not None:
            return refused
        allowed = []
        for method, pattern, view in ROUTES:
            found = pattern.fullmatch(request.path)
            if found is None:
                continue
            if method != request.method:
                allowed.append(method)
                continue
            if method == "POST":
                refused = self._refuse_action(request)
                if refused is not None:
                    return refused
            try:
                return view(self, request, *found.groups())
            except ValueError as exc:
                return self.renderer.error(self, request, 400, str(exc))
        if allowed:
            return Response(
                405,
                b"method not allowed",
                "text/plain",
                [("Allow", ", ".join(allowed))],
            )
        return self.renderer.error(self, request, 404, "no such page")

    def _refuse(self, request: Request) -> Response | None:
        """403 unless the request may see the dashboard (see the class)."""
        if self.token is not None:
            given = request.query.get("token")
            if given is not None and token_matches(given, self.token):
                response = redirect(request.url("/"))
                response.headers.append(
                    ("Set-Cookie", cookie(TOKEN_COOKIE, self.token, request))
                )
                return response
            if not token_matches(request.cookies.get(TOKEN_COOKIE, ""), self.token):
                return text(
                    403, "forbidden: open the URL with the token the dashboard printed"
                )
        if self.allow is not None:
            if not self.allow(request.environ):
                return text(403, "forbidden")
        elif self.token is None:
            return self._refuse_by_loopback_rule(request)
        return None

    def _refuse_by_loopback_rule(self, request: Request) -> Response | None:
        """403 unless the request comes from this machine; 400 unless its
        ``Host`` names this machine, 403 for a POST from another origin (a
        page whose name was rebound to 127.0.0.1 sends its own name)."""
        if not loopback(request):
            return text(403, _NOT_LOOPBACK)
        environ = request.environ
        host = environ.get("HTTP_HOST")
        # Every browser sends a Host; a request without one is no page's.
        if host is not None and not local_host(host, self.hosts):
            return text(400, _BAD_HOST.format(host=host[:100]))
        origin = environ.get("HTTP_ORIGIN")
        scheme = environ.get("wsgi.url_scheme", "http")
        if request.method == "POST" and not same_origin(origin, host, scheme):
            return text(403, _FOREIGN_ORIGIN.format(origin=str(origin)[:100]))
        return None

    def _refuse_action(self, request: Request) -> Response | None:
        if self.read_only:
            return text(403, "forbidden: this dashboard is read-only")
        try:
            valid = self.csrf.check(request)
        except ValueError:
            return text(413, "form too large")
        if not valid:
            return text(403, "forbidden: missing or wrong CSRF token; reload the page")
        return None


def make_app(queue: JobQueue[Any], **options: Unpack[DashboardOptions]) -> Dashboard:
    """The dashboard of ``queue`` as a WSGI application (options: see
    ``Dashboard``)."""
    return Dashboard(queue, **options)
