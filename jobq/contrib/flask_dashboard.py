"""The dashboard (``jobq.web``) mounted in a Flask app: ``JobQ(app,
dashboard="/jobq", dashboard_auth=...)`` or ``app.config["JOBQ_DASHBOARD"]``.

Every request to the prefix goes through a Flask view that hands it to the
dashboard's WSGI application, so the app's own request context is active:
``dashboard_auth`` (a callable without arguments, e.g. ``lambda:
current_user.is_admin``) decides who may look; without one, only requests
from this machine (and not through a proxy) are served, to a ``Host`` of
this machine (``localhost``, a loopback address, or one of ``hosts``).

The CSRF tokens of its forms are keyed from the app's ``SECRET_KEY`` (as
Flask-WTF's are), read in each request: every process of the app accepts
the tokens of the others. Without one, each process has a random key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from jobq.extras import requires

with requires("flask", "jobq.contrib.flask", "Flask"):
    from flask import Flask, Response, request
    from werkzeug.wrappers import Response as WerkzeugResponse

from jobq.contrib.options import FLASK_DASHBOARD_OPTIONS
from jobq.queue import JobQueue

#: The app.config keys of the dashboard (beside the queue's ``JOBQ_*``),
#: checked with the others (``jobq.contrib.options``).
CONFIG_KEYS = tuple("JOBQ_" + option.key for option in FLASK_DASHBOARD_OPTIONS)


def mount(
    app: Flask,
    queue: JobQueue[Any],
    prefix: str,
    auth: Callable[[], object] | None,
    read_only: bool,
    hosts: Iterable[str] = (),
) -> None:
    """Serve ``queue``'s dashboard under ``prefix`` in ``app``."""
    from jobq.web import make_app

    if not prefix.strip("/"):
        raise ValueError(
            f"the dashboard's prefix must be a path such as '/jobq', not {prefix!r}"
        )
    if auth is not None and not callable(auth):
        raise TypeError(f"dashboard_auth must be callable, not {auth!r}")
    prefix = "/" + prefix.strip("/")

    allow = None
    if auth is not None:
        check = auth

        def allow(environ: Mapping[str, Any]) -> bool:
            return bool(check())

    def secret() -> str | bytes | None:
        found: str | bytes | None = app.secret_key
        return found or None

    dashboard = make_app(
        queue, read_only=read_only, allow=allow, hosts=hosts, csrf_secret=secret
    )

    def view(path: str = "") -> WerkzeugResponse:
        environ = dict(request.environ)
        environ["SCRIPT_NAME"] = request.script_root + prefix
        environ["PATH_INFO"] = "/" + path
        return Response.from_app(dashboard, environ)

    methods = ["GET", "POST"]
    app.add_url_rule(prefix + "/", "jobq_dashboard", view, methods=methods)
    app.add_url_rule(prefix + "/<path:path>", "jobq_dashboard", view, methods=methods)
