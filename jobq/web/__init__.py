"""The jobq dashboard: a WSGI application to see the queue and fix dead jobs
from a browser (``pip install 'jobq[web]'``; see the README, "Dashboard").

``make_app(queue)`` builds it; the Flask and Django integrations and the
``jobq dashboard`` command mount it. Jinja2 is imported by this package
only (``MissingExtra`` without it), so ``import jobq`` still needs nothing
beyond the standard library.
"""

from __future__ import annotations

from jobq.web.app import Dashboard, DashboardOptions, make_app
from jobq.web.rendering import FRAME_KEY, Frame
from jobq.web.security import CsrfPolicy, framework_csrf

__all__ = [
    "FRAME_KEY",
    "CsrfPolicy",
    "Dashboard",
    "DashboardOptions",
    "Frame",
    "framework_csrf",
    "make_app",
]
