"""System checks for ``settings.JOBQ`` (``jobq.E001`` ... ``jobq.E005``),
the dashboard's ``settings.JOBQ_DASHBOARD_ACCESS`` and
``settings.JOBQ_DASHBOARD_READ_ONLY`` (``jobq.E003``, ``jobq.E005``), and
the jobq app itself (``jobq.E006``).

They are registered when ``jobq.contrib.django`` is first imported (this
module is imported by it), not by the app's ``ready()``: so they also run in
a project that uses jobq without ``"jobq.contrib.django"`` in
``INSTALLED_APPS``, to say so, when something imported jobq's Django
modules while Django set up the apps (an app's models or ``ready()``). A
check registered later may miss the check run under way: Django takes the
list of checks when a run starts, and the URL check imports the URLconf's
views, and so often the tasks, during the run. Without the app, then:

* imported during the setup: ``check_app_installed`` says it;
* ``TASKS`` names ``JobqBackend`` and the Tasks framework's check runs (the
  ``django_tasks`` backport is an app; Django 6's ``django.tasks`` is
  checked only if it was imported before the run): ``JobqBackend.check()``
  says it, once for each alias (unless the first case holds);
* otherwise no check can: ``get_queue()`` raises ``ImproperlyConfigured``
  (``jobq.E006``) when the queue is first built (a ``@task`` declared, a
  job enqueued), since no worker would ever run its jobs.

* ``jobq.E001``: ``JOBQ`` is not a dict.
* ``jobq.E002``: unknown keys.
* ``jobq.E003``: a value of the wrong type or out of range.
* ``jobq.E004``: ``STORE`` is not a store (e.g. a malformed or unknown URL).
* ``jobq.E005``: ``HANDLER`` (or ``JOBQ_DASHBOARD_ACCESS``) cannot be imported
  or is not callable.
* ``jobq.E006``: ``"jobq.contrib.django"`` is not in ``INSTALLED_APPS``, so
  no worker starts and no app's ``tasks`` module is imported (see above).
* ``jobq.W001`` (a URL check): the dashboard's URLs are in the URLconf, but
  another view answers them first: the admin's catch-all, for an include
  after ``path("admin/", admin.site.urls)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.apps import AppConfig, apps
from django.core import checks
from django.urls import NoReverseMatch, Resolver404, resolve, reverse

from jobq.contrib.django import conf

#: The app's name, for ``INSTALLED_APPS``.
APP = "jobq.contrib.django"

#: Whether these checks were registered before Django's setup ended (this
#: module imported as the app, by an app's models or ``ready()``, or before
#: ``django.setup()``): then they are in every check run.
REGISTERED_EARLY = not apps.ready


@checks.register("jobq")
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Never touches a database or a store."""
    return [
        checks.Error(problem.msg, hint=problem.hint, id=problem.id)
        for problem in [*conf.read().problems, *conf.dashboard_problems()]
    ]


@checks.register("jobq")
def check_app_installed(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """``jobq.E006`` without the jobq app."""
    if apps.is_installed(APP):
        return []
    return [app_missing("jobq.contrib.django is imported")]


def reported_without_the_app(serves_django_tasks: Callable[[], bool]) -> bool:
    """Whether every check run says that the jobq app is missing: these
    checks are in every run, or the backport's app (whose ``ready()``
    registers the Tasks framework's check) runs ``JobqBackend.check()``,
    as it does if ``serves_django_tasks()`` (passed in, so that the checks
    import nothing of the package that registers them)."""
    if REGISTERED_EARLY:
        return True
    if not apps.is_installed("django_tasks"):
        return False
    return serves_django_tasks()


def app_missing(what: str) -> checks.Error:
    """``jobq.E006``: ``what`` needs the jobq app, which is not installed."""
    return checks.Error(
        f"{what}, but the jobq app is not installed: no worker starts and no "
        "app's tasks module is imported",
        hint=f"Add {APP!r} to INSTALLED_APPS.",
        id="jobq.E006",
    )


#: A page of the dashboard the URL check resolves.
_PROBE = "jobs/dead"


@checks.register(checks.Tags.urls)
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
    try:
        match = resolve(url)
    except Resolver404:
        found = None
    else:
        if match.view_name == "jobq:dashboard-path":  # its own pattern answers
            return []
        found = match.func
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
