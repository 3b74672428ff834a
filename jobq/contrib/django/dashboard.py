"""The dashboard (``jobq.web``) in a Django project:
``path("admin/jobq/", include("jobq.contrib.django.urls"))``, before
``path("admin/", admin.site.urls)`` (whose last pattern answers every URL
below it: ``jobq.W001`` says so).

Staff only by default (``user.is_active and user.is_staff``, which needs
Django's auth middleware); an anonymous user is sent to log in (the
admin's login, else ``LOGIN_URL``) and back, a signed-in one the check
refuses gets a 403. ``settings.JOBQ_DASHBOARD_ACCESS`` names another check
(a dotted path to a function of the request returning a bool), and
``settings.JOBQ_DASHBOARD_READ_ONLY = True`` makes it read-only (both are
checked as the ``JOBQ`` setting is: ``manage.py check``, and
``ImproperlyConfigured`` in a request). Actions use Django's own CSRF check
(``csrf_protect``) and token, and its session. Below the admin, the pages
carry the admin's header, user links and breadcrumbs (``admin_frame``).
"""

from __future__ import annotations

import contextlib
import io
import threading
from collections.abc import Callable, Mapping
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.middleware.csrf import get_token
from django.shortcuts import resolve_url
from django.urls import NoReverseMatch, resolve, reverse
from django.utils.module_loading import import_string
from django.views.decorators.csrf import csrf_protect

from jobq.web import FRAME_KEY, Dashboard, Frame, framework_csrf, make_app

from . import conf, get_queue

_lock = threading.Lock()
_dashboards: dict[bool, Dashboard] = {}

#: Where the view leaves Django's CSRF token for the dashboard's forms.
TOKEN_KEY = "jobq.csrf_token"  # noqa: S105 (an environ key)


def is_staff(request: HttpRequest) -> bool:
    """The default check: an active staff user."""
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_active and user.is_staff)


def _check_settings() -> None:
    """``ImproperlyConfigured`` naming each dashboard setting that is wrong
    (a string ``"false"`` would otherwise mean read-only, a number fail deep
    in ``import_string``)."""
    problems = conf.dashboard_problems()
    if problems:
        raise ImproperlyConfigured(" ".join(f"{p.id}: {p.msg}" for p in problems))


def _access() -> Callable[[HttpRequest], bool]:
    name = getattr(settings, "JOBQ_DASHBOARD_ACCESS", None)
    return is_staff if name is None else import_string(name)


def _token(environ: Mapping[str, Any]) -> str:
    return str(environ[TOKEN_KEY])


def _dashboard() -> Dashboard:
    """The process's dashboard (one per read-only setting), built on first use."""
    read_only: bool = getattr(settings, "JOBQ_DASHBOARD_READ_ONLY", False)
    with _lock:
        found = _dashboards.get(read_only)
        if found is None:
            found = _dashboards[read_only] = make_app(
                get_queue(),
                read_only=read_only,
                allow=lambda environ: True,  # the view checked
                csrf=framework_csrf("csrfmiddlewaretoken", _token),
            )
        return found


@csrf_protect
def dashboard(request: HttpRequest, path: str = "") -> HttpResponse:
    """Hand the request to the dashboard, below the prefix it came by; an
    anonymous user is sent to log in first (the admin's login where the
    admin is installed, else ``LOGIN_URL``), back here afterwards."""
    _check_settings()
    user = getattr(request, "user", None)
    if not _access()(request):
        if user is not None and not user.is_authenticated:
            # Imported here: a project without django.contrib.auth has no user.
            from django.contrib.auth.views import redirect_to_login

            return redirect_to_login(request.get_full_path(), _login_url())
        return HttpResponseForbidden("forbidden: the jobq dashboard is for staff")
    # The form as Django parsed it (its CSRF check read the body), as the
    # urlencoded body the dashboard reads.
    body = request.POST.urlencode().encode()
    script_name = request.path[: len(request.path) - len(path)].rstrip("/")
    environ = dict(request.META)
    environ.update({
        "CONTENT_TYPE": "application/x-www-form-urlencoded",
        "SCRIPT_NAME": script_name,
        "PATH_INFO": "/" + path,
        "wsgi.input": io.BytesIO(body),
        "CONTENT_LENGTH": str(len(body)),
        TOKEN_KEY: get_token(request),
    })  # fmt: skip
    if user is not None and user.is_authenticated:  # who cancels (REMOTE_USER)
        environ["REMOTE_USER"] = user.get_username()
    frame = admin_frame(request, script_name)
    if frame is not None:
        environ[FRAME_KEY] = frame
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        answer["status"], answer["headers"] = int(status.split()[0]), headers

    content = b"".join(_dashboard()(environ, start_response))
    response = HttpResponse(content, status=answer["status"])
    for name, value in answer["headers"]:
        response[name] = value
    return response


def _login_url() -> str:
    """Where an anonymous user logs in: the admin's login, else ``LOGIN_URL``."""
    if apps.is_installed("django.contrib.admin"):
        with contextlib.suppress(NoReverseMatch):
            return reverse("admin:login")
    return str(resolve_url(settings.LOGIN_URL))


def admin_frame(request: HttpRequest, script_name: str) -> Frame | None:
    """The admin's header, user links and breadcrumbs around the dashboard's
    pages when it is mounted below the admin (``admin/jobq/``); ``None``
    elsewhere."""
    if not apps.is_installed("django.contrib.admin"):
        return None
    try:
        home = reverse("admin:index")
    except NoReverseMatch:
        return None
    if not (script_name + "/").startswith(home):
        return None
    site = _admin_site(home)
    crumbs = (("Home", home), ("jobq", script_name + "/"))
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:  # a check of yours let it in
        return Frame(str(site.site_header), home, crumbs)
    return Frame(
        str(site.site_header), home, crumbs,
        user=user.get_short_name() or user.get_username(),
        links=_user_links(site, user),
        logout=reverse("admin:logout"),
    )  # fmt: skip


def _admin_site(home: str) -> Any:
    """The admin site serving ``home`` (its index view knows it), else the
    default one; imported only where the admin is installed."""
    from django.contrib.admin import site as default_site

    return getattr(resolve(home).func, "admin_site", default_site)


def _user_links(site: Any, user: Any) -> tuple[tuple[str, str], ...]:
    """The admin's links for a signed-in user, as its header has them."""
    links = []
    if site.site_url:
        links.append(("View site", str(site.site_url)))
    if user.has_usable_password():
        links.append(("Change password", reverse("admin:password_change")))
    return tuple(links)
