"""The dashboard (``jobq.web``) in a Django project:
``path("jobq/", include("jobq.contrib.django.urls"))``.

Staff only by default (``user.is_active and user.is_staff``, which needs
Django's auth middleware); ``settings.JOBQ_DASHBOARD_ACCESS`` names another
check (a dotted path to a function of the request returning a bool), and
``settings.JOBQ_DASHBOARD_READ_ONLY = True`` makes it read-only (both are
checked as the ``JOBQ`` setting is: ``manage.py check``, and
``ImproperlyConfigured`` in a request). Actions use Django's own CSRF check
(``csrf_protect``) and token, and its session.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.middleware.csrf import get_token
from django.utils.module_loading import import_string
from django.views.decorators.csrf import csrf_protect

from jobq.web import Dashboard, framework_csrf, make_app

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
    """Hand the request to the dashboard, below the prefix it came by."""
    _check_settings()
    if not _access()(request):
        return HttpResponseForbidden("forbidden")
    # The form as Django parsed it (its CSRF check read the body), as the
    # urlencoded body the dashboard reads.
    body = request.POST.urlencode().encode()
    environ = dict(request.META)
    environ.update({
        "CONTENT_TYPE": "application/x-www-form-urlencoded",
        "SCRIPT_NAME": request.path[: len(request.path) - len(path)].rstrip("/"),
        "PATH_INFO": "/" + path,
        "wsgi.input": io.BytesIO(body),
        "CONTENT_LENGTH": str(len(body)),
        TOKEN_KEY: get_token(request),
    })  # fmt: skip
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:  # who cancels (REMOTE_USER)
        environ["REMOTE_USER"] = user.get_username()
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        answer["status"], answer["headers"] = int(status.split()[0]), headers

    content = b"".join(_dashboard()(environ, start_response))
    response = HttpResponse(content, status=answer["status"])
    for name, value in answer["headers"]:
        response[name] = value
    return response
