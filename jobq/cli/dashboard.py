"""``jobq dashboard``: the dashboard (``jobq.web``) as a process of its own,
for a store other processes use (SQLite, PostgreSQL; a JSON file read-only).

It serves with waitress where it is installed (a production-grade WSGI
server, pure Python) and with the standard library's ``wsgiref`` otherwise;
it binds to loopback by default and asks for a token it prints at its start,
as Jupyter does (``--no-token``: anyone who reaches it, e.g. behind an
authenticating proxy).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import secrets
import sys
import wsgiref.simple_server
from collections.abc import Callable, Mapping
from typing import Any

from jobq.cli.operations import EXIT_USAGE, CommandError
from jobq.queue import JobQueue
from jobq.stores import JsonFileStore

logger = logging.getLogger("jobq.cli")

#: What the dashboard says when a JSON file is shown by another process.
JSON_NOTICE = (
    "This is a JSON file store: its owning process writes it, so this "
    "separate dashboard is read-only. Mount the dashboard in that process "
    "to act on its jobs."
)


def add_dashboard_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bind",
        default="127.0.0.1:8000",
        metavar="HOST:PORT",
        help="address to listen on (default: 127.0.0.1:8000; port 0: any free one)",
    )
    parser.add_argument(
        "--read-only", action="store_true", help="show no actions and refuse them"
    )
    parser.add_argument(
        "--no-token",
        action="store_true",
        help="serve anyone who reaches the address, without the printed token "
        "(only behind something that authenticates, such as a proxy)",
    )


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[IPv6]:PORT`` too) as a host and a port."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise CommandError(f"--bind must be HOST:PORT, not {text!r}", EXIT_USAGE)
    return host.removeprefix("[").removesuffix("]"), int(port)


def run_dashboard(queue: JobQueue[Any], args: argparse.Namespace) -> str:
    """Serve the dashboard until the process is interrupted; prints its URL
    (with the token) once it listens."""
    from jobq.web import make_app

    host, port = parse_bind(args.bind)
    json_file = isinstance(queue.store, JsonFileStore)
    token = None if args.no_token else secrets.token_urlsafe(24)
    app = make_app(
        queue,
        read_only=args.read_only or json_file,
        notice=JSON_NOTICE if json_file else None,
        token=token,
        allow=_anyone if args.no_token else None,
    )
    serve, bound = _server(app, host, port)
    # Open the store now (after the address, which opens nothing on disk):
    # a missing schema or an unreachable server is one line, not every page.
    queue.stats()
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/" + (f"?token={token}" if token else "")
    sys.stdout.write(f"jobq dashboard: serving {url}\n")
    sys.stdout.flush()
    serve()
    return ""


def _anyone(environ: Mapping[str, Any]) -> bool:
    return True


def _server(app: Any, host: str, port: int) -> tuple[Callable[[], None], int]:
    """A function that serves ``app`` forever, and the port it listens on."""
    if importlib.util.find_spec("waitress") is not None:
        import waitress  # type: ignore[import-untyped]

        server = waitress.create_server(app, host=host, port=port, threads=4)
        return server.run, int(server.effective_port)
    httpd = wsgiref.simple_server.make_server(
        host, port, app, handler_class=_QuietHandler
    )
    return httpd.serve_forever, int(httpd.server_port)


class _QuietHandler(wsgiref.simple_server.WSGIRequestHandler):
    """Request lines go to jobq's logger, not to stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("dashboard: %s", format % args)
