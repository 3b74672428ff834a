"""What keeps the dashboard safe to mount: response headers, the CSRF check
of every action, and who may look.

CSRF: a double-submit token. A random token lives in a cookie (HttpOnly,
SameSite=Strict, the mount's path) and in a hidden field of every form; an
action whose field does not match the cookie changes nothing and answers
403. A framework with a CSRF check of its own (Django) gives its token and
field name instead (``CsrfPolicy``), and checks before the dashboard runs.

Access: a callable of the mounting application decides; without one only
loopback addresses are served. The standalone server adds a token (printed
at its start): ``?token=...`` once, then a cookie.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from jobq.web.http import Request, Response

#: Sent with every response, assets and errors included.
HEADERS = [
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; "
        "img-src 'self'; connect-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'",
    ),
    ("X-Frame-Options", "DENY"),
    # Not "no-referrer": with it, a browser sends ``Origin: null`` with the
    # forms' POSTs, which origin-checking CSRF defences (Django's) refuse.
    ("Referrer-Policy", "same-origin"),
    ("X-Content-Type-Options", "nosniff"),
    ("Cache-Control", "no-store"),
]

CSRF_COOKIE = "jobq_csrf"
TOKEN_COOKIE = "jobq_token"  # noqa: S105 (a name, not a secret)


@dataclass(frozen=True)
class CsrfPolicy:
    """Where a form's CSRF token comes from and goes: ``field`` is the form
    field; ``token`` gives the token for a request (and the cookie to set,
    if any); ``check`` says whether a POST carries the right one."""

    field: str
    token: Callable[[Request], tuple[str, str | None]]
    check: Callable[[Request], bool]


def double_submit() -> CsrfPolicy:
    """The dashboard's own CSRF check (see the module)."""

    def token(request: Request) -> tuple[str, str | None]:
        found = request.cookies.get(CSRF_COOKIE, "")
        if len(found) >= 32:
            return found, None
        new = secrets.token_urlsafe(32)
        return new, cookie(CSRF_COOKIE, new, request)

    def check(request: Request) -> bool:
        sent = request.form().get("csrf", "")
        held = request.cookies.get(CSRF_COOKIE, "")
        return len(held) >= 32 and hmac.compare_digest(sent.encode(), held.encode())

    return CsrfPolicy("csrf", token, check)


def framework_csrf(field: str, token: Callable[[Mapping[str, Any]], str]) -> CsrfPolicy:
    """A framework's CSRF check (Django's): the framework rejects a bad token
    before the dashboard runs; the dashboard only puts ``token`` in forms."""
    return CsrfPolicy(
        field, lambda request: (token(request.environ), None), lambda _: True
    )


def cookie(name: str, value: str, request: Request) -> str:
    """A Set-Cookie value: HttpOnly, SameSite=Strict, for the mount's path;
    Secure when the request came over HTTPS (never sent over plain HTTP)."""
    path = request.script_name or "/"
    secure = "; Secure" if request.environ.get("wsgi.url_scheme") == "https" else ""
    return f"{name}={value}; Path={path}; HttpOnly; SameSite=Strict{secure}"


#: Headers a proxy adds: a request through one is not from this machine,
#: even when the proxy runs on it.
PROXY_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")


def loopback(request: Request) -> bool:
    """Whether the request comes from this machine, not through a proxy."""
    if any(name in request.environ for name in PROXY_HEADERS):
        return False
    return loopback_address(request.remote_addr)


def loopback_address(text: str) -> bool:
    """Whether ``text`` is a loopback address: ``127.0.0.0/8``, ``::1``, or an
    IPv4-mapped one (``::ffff:127.0.0.1``: how a dual-stack listener reports
    an IPv4 peer), a zone index (``%lo``) aside."""
    try:
        address = ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def token_matches(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def with_headers(response: Response) -> Response:
    response.headers.extend(HEADERS)
    return response
