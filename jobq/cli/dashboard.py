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
import errno
import importlib.util
import ipaddress
import logging
import secrets
import socket
import sys
import wsgiref.simple_server
from collections.abc import Callable, Mapping
from typing import Any

from jobq.admin.operations import EXIT_USAGE, CommandError
from jobq.queue import JobQueue
from jobq.stores.base import capabilities_of

logger = logging.getLogger("jobq.cli")

#: What the dashboard says for a store only its owner writes (a JSON file),
#: shown by another process.
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
    """``HOST:PORT`` (``[IPv6]:PORT`` too) as a host and a port.

    A host that can only be an address literal must be a valid one (digits
    and dots: IPv4; in brackets or with a colon: IPv6), so that
    ``999.1.1.1`` is a usage error (status 2) like a malformed ``--bind``;
    whether a name resolves or an address is this host's is the system's
    answer, when the dashboard listens (status 1)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise CommandError(
            f"--bind must be HOST:PORT (e.g. 127.0.0.1:8000, [::1]:8000; port 0: "
            f"any free one), not {text!r}",
            EXIT_USAGE,
        )
    bare = host.removeprefix("[").removesuffix("]")
    literal = bare != host or ":" in bare
    if literal or all(part.isdigit() for part in bare.split(".")):
        try:
            ipaddress.ip_address(bare)
        except ValueError:
            raise CommandError(
                f"--bind {text!r}: {bare!r} is not an IP address; give one of this "
                "host's addresses (127.0.0.1, 0.0.0.0, [::1]) or its name",
                EXIT_USAGE,
            ) from None
    return bare, int(port)


def run_dashboard(queue: JobQueue[Any], args: argparse.Namespace) -> str:
    """Serve the dashboard until the process is interrupted; prints its URL
    (with the token) once it listens and its store opened. A ``--bind`` it
    cannot listen on, or a store that cannot be opened, is a one-line
    ``CommandError``."""
    from jobq.web import make_app

    host, port = parse_bind(args.bind)
    owned = capabilities_of(queue.store).owner_writes  # a JSON file
    token = None if args.no_token else secrets.token_urlsafe(24)
    app = make_app(
        queue,
        read_only=args.read_only or owned,
        notice=JSON_NOTICE if owned else None,
        token=token,
        allow=_anyone if args.no_token else None,
    )
    serve, bound = _listen(app, host, port, args.bind)
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


def _listen(
    app: Any, host: str, port: int, bind: str
) -> tuple[Callable[[], None], int]:
    """A function that serves ``app`` forever on ``host:port``, and the port
    it listens on. ``CommandError`` (status 1, as a store that cannot be
    opened: the system refused, the value was well formed) for a host name
    that does not resolve, an address that is not this host's, a port in
    use or not allowed; ``bind`` is the option as given, for the message."""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise CommandError(
            f"--bind {bind!r}: cannot resolve host {host!r} ({_reason(exc)}); give "
            "one of this host's addresses (127.0.0.1, 0.0.0.0, [::1]) or its name"
        ) from None
    try:
        return _server(app, host, port)
    except OSError as exc:
        raise CommandError(
            f"--bind {bind!r}: cannot listen there: {_why(exc)}"
        ) from None
    except ValueError as exc:  # waitress: "Invalid host/port specified."
        raise CommandError(
            f"--bind {bind!r}: cannot listen there: {exc}; pick another HOST:PORT"
        ) from None


def _why(exc: OSError) -> str:
    """Why binding failed, and what to do about it."""
    reason = _reason(exc)
    if exc.errno == errno.EADDRINUSE:
        return f"{reason}; stop what uses that port, or pick another (0: any free one)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return (
            f"{reason}: not an address of this host; give one of its addresses "
            "(127.0.0.1, 0.0.0.0 for all)"
        )
    if exc.errno == errno.EACCES:
        return f"{reason}; pick a port above 1023, or 0 for any free one"
    return f"{reason}; pick another HOST:PORT"


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "strerror", None) or exc)


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
