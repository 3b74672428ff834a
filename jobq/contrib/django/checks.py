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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks

from jobq.contrib.django import conf


def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Never touches a database or a store."""
    return [
        checks.Error(problem.msg, hint=problem.hint, id=problem.id)
        for problem in [*conf.read().problems, *conf.dashboard_problems()]
    ]


def register_checks() -> None:
    checks.register(check_settings, "jobq")  # idempotent: a set of checks
