"""System checks for ``settings.JOBQ`` (``jobq.E001`` ... ``jobq.E005``) and
the dashboard's ``settings.JOBQ_DASHBOARD_ACCESS`` and
``settings.JOBQ_DASHBOARD_READ_ONLY`` (``jobq.E003``, ``jobq.E005``).

``jobq.E006`` (the jobq app missing while ``TASKS`` names ``JobqBackend``)
is ``JobqBackend.check()``'s: without the app, nothing here is registered.

* ``jobq.E001``: ``JOBQ`` is not a dict.
* ``jobq.E002``: unknown keys.
* ``jobq.E003``: a value of the wrong type or out of range.
* ``jobq.E004``: ``STORE`` is not a store (e.g. a malformed or unknown URL).
* ``jobq.E005``: ``HANDLER`` (or ``JOBQ_DASHBOARD_ACCESS``) cannot be imported
  or is not callable.
* ``jobq.W001`` (a URL check): the dashboard's URLs are in the URLconf, but
  another view answers them first: the admin's catch-all, for an include
  after ``path("admin/", admin.site.urls)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.urls import NoReverseMatch, Resolver404, resolve, reverse

from jobq.contrib.django import conf


def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Never touches a database or a store."""
    return [
        checks.Error(problem.msg, hint=problem.hint, id=problem.id)
        for problem in [*conf.read().problems, *conf.dashboard_problems()]
    ]


#: A page of the dashboard the URL check resolves.
_PROBE = "jobs/dead"


def check_dashboard_urls(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """``jobq.W001`` if a page of the included dashboard resolves to another
    view (Django's resolver takes the first pattern that matches, and the
    admin's last one matches everything below it)."""
    try:
        url = reverse("jobq:dashboard-path", kwargs={"path": _PROBE})
    except NoReverseMatch:  # not mounted (or under another namespace)
        return []
    from jobq.contrib.django.dashboard import dashboard  # mounted: imported

    try:
        found = resolve(url).func
    except Resolver404:
        found = None
    if found is dashboard:
        return []
    prefix = url.removesuffix(_PROBE)
    return [
        checks.Warning(
            f"the jobq dashboard at {prefix} is never reached: another URL "
            f"pattern answers its pages first ({url} goes to {_name(found)}).",
            hint=f'Put path("{prefix.lstrip("/")}", include("jobq.contrib.django.'
            'urls")) before path("admin/", admin.site.urls) in urlpatterns: the '
            "admin answers every URL below its own.",
            id="jobq.W001",
        )
    ]


def _name(view: Any) -> str:
    if view is None:
        return "no view"
    return f"{view.__module__}.{getattr(view, '__qualname__', view)}"


def register_checks() -> None:
    checks.register(check_settings, "jobq")  # idempotent: a set of checks
    checks.register(check_dashboard_urls, checks.Tags.urls)
