"""What keeps the dashboard safe to mount: response headers, the CSRF check
of every action, and who may look.

CSRF: a signed double-submit token. A token lives in a cookie (HttpOnly,
SameSite=Strict, the mount's path) and in a hidden field of every form; an
action whose field does not match the cookie changes nothing and answers
403. The token is a random nonce and its HMAC under a server-side key, and
a cookie without the key's HMAC is refused: a plain double-submit cookie
passes whatever value a sibling subdomain, or a page over plain HTTP, planted
and repeated in its form, since neither can read the cookie but both can
set it. The key is random for each dashboard (its process) unless one is
given, so that several processes behind a load balancer agree: the Flask
mount uses the app's ``SECRET_KEY`` as Flask-WTF does. A framework with a
CSRF check of its own (Django) gives its token and field name instead
(``CsrfPolicy``), and checks before the dashboard runs.

Access: a callable of the mounting application decides; without one only
loopback addresses are served. The standalone server adds a token (printed
at its start): ``?token=...`` once, then a cookie.

The loopback rule trusts the address a request comes from, which a browser
does not protect: a page at ``rebind.attacker.example``, whose name then
resolves to 127.0.0.1 (DNS rebinding), reaches the dashboard from loopback
and is same-origin with it for the browser. So under that rule the ``Host``
must name this machine (``localhost``, ``*.localhost``, a loopback address,
or a name the mounting application gives), and a POST's ``Origin``, when
sent, must be the ``Host``'s. A check or a token needs none of this: its
credentials are cookies or a session the browser keeps for the dashboard's
own name, which a page at another name does not have.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
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


#: A CSRF secret: text or bytes, or a callable that gives it (or ``None``:
#: the dashboard's random key) at each request, e.g. an app's ``SECRET_KEY``.
Secret = bytes | str | Callable[[], bytes | str | None]


def double_submit(secret: Secret | None = None) -> CsrfPolicy:
    """The dashboard's own CSRF check, a signed double-submit token (see the
    module); ``secret``: the server-side secret its HMAC is keyed from
    (``None``: a random one for this policy, so for its process)."""
    fallback = secrets.token_bytes(32)
    if secret is not None and not callable(secret):
        _secret_bytes(secret)  # refuse a bad one now, not at the first request

    def key() -> bytes:
        found = secret() if callable(secret) else secret
        return csrf_key(fallback if found is None else _secret_bytes(found))

    def token(request: Request) -> tuple[str, str | None]:
        found = request.cookies.get(CSRF_COOKIE, "")
        if signed(found, key()):
            return found, None
        new = sign(secrets.token_urlsafe(32), key())
        return new, cookie(CSRF_COOKIE, new, request)

    def check(request: Request) -> bool:
        sent = request.form().get("csrf", "")
        held = request.cookies.get(CSRF_COOKIE, "")
        return signed(held, key()) and hmac.compare_digest(sent.encode(), held.encode())

    return CsrfPolicy("csrf", token, check)


def _secret_bytes(secret: object) -> bytes:
    """``secret`` as bytes; ``TypeError`` unless it is non-empty text or bytes
    (checked at run time: a callable may give anything)."""
    if isinstance(secret, str):
        secret = secret.encode("utf-8", "surrogatepass")
    if isinstance(secret, bytes) and secret:
        return secret
    raise TypeError(f"the CSRF secret must be non-empty text or bytes, not {secret!r}")


def csrf_key(secret: bytes) -> bytes:
    """The CSRF HMAC's key, derived from ``secret`` for this use alone (an
    app's ``SECRET_KEY`` also signs its sessions)."""
    return hmac.digest(secret, b"jobq.web csrf token", hashlib.sha256)


def sign(nonce: str, key: bytes) -> str:
    """A token: ``nonce.mac`` (URL- and cookie-safe text)."""
    mac = hmac.digest(key, nonce.encode(), hashlib.sha256)
    return f"{nonce}.{base64.urlsafe_b64encode(mac).decode().rstrip('=')}"


def signed(token: str, key: bytes) -> bool:
    """Whether ``token`` is a nonce with its mac under ``key``."""
    nonce, dot, _ = token.rpartition(".")
    if not dot or len(nonce) < 32 or not token.isascii():
        return False
    return hmac.compare_digest(sign(nonce, key).encode(), token.encode())


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


#: The port of a URL that names none.
DEFAULT_PORTS = {"http": 80, "https": 443}

#: A host name the mounting application may add (no port, no scheme).
HOST_NAME = re.compile(r"[a-z0-9_](?:[a-z0-9_.-]*[a-z0-9_])?")


def host_names(names: Iterable[str]) -> frozenset[str]:
    """The names a dashboard under the loopback rule also answers to, in
    lower case; ``TypeError`` or ``ValueError`` naming a bad one."""
    if isinstance(names, str):
        raise TypeError(
            f"hosts must be a list of host names, not the str {names!r}; "
            f"e.g. [{names!r}]"
        )
    found = set()
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"hosts must hold host names (str), not {name!r}")
        lowered = name.lower().removesuffix(".")
        if HOST_NAME.fullmatch(lowered) is None:
            raise ValueError(
                f"hosts holds {name!r}: give a host name without scheme or port, "
                "e.g. 'devbox.test'"
            )
        found.add(lowered)
    return frozenset(found)


def split_host(text: str) -> tuple[str, int | None] | None:
    """A ``Host`` header (or an origin's host part) as its name or address in
    lower case, without a final dot, and its port (``None``: the scheme's);
    ``None`` if it is malformed."""
    if text.startswith("["):
        name, bracket, rest = text[1:].partition("]")
        if not bracket:
            return None
    else:
        name, colon, port = text.partition(":")
        rest = colon + port
    port_text = rest[1:]
    if rest and not (
        rest[0] == ":" and port_text.isascii() and port_text.isdigit()
        and int(port_text) <= 65535
    ):  # fmt: skip
        return None
    name = name.lower().removesuffix(".")
    if not name:
        return None
    return name, int(port_text) if rest else None


def local_host(host: str, hosts: frozenset[str]) -> bool:
    """Whether a ``Host`` header names this machine: ``localhost`` or one of
    its subdomains (RFC 6761: never asked of DNS; Django's default
    ``ALLOWED_HOSTS`` in DEBUG takes them too), a loopback address, or one of
    ``hosts``. Not ``0.0.0.0``, which some browsers send to this machine from
    any page."""
    found = split_host(host)
    if found is None:
        return False
    name = found[0]
    return (
        name == "localhost"
        or name.endswith(".localhost")
        or name in hosts
        or ("%" not in name and loopback_address(name))
    )


def same_origin(origin: str | None, host: str | None, scheme: str) -> bool:
    """Whether a POST's ``Origin`` header is the ``Host``'s (same name and
    port, the scheme's default port where none is written); a request
    without ``Origin`` (not a browser's, or an old one's) passes, the CSRF
    token still checked. ``Origin: null`` (a sandboxed or opaque page) does
    not."""
    if origin is None:
        return True
    origin_scheme, sep, rest = origin.partition("://")
    if not sep or origin_scheme not in DEFAULT_PORTS or host is None:
        return False
    sent, served = split_host(rest), split_host(host)
    if sent is None or served is None:
        return False
    return _with_port(sent, origin_scheme) == _with_port(served, scheme)


def _with_port(found: tuple[str, int | None], scheme: str) -> tuple[str, int]:
    name, port = found
    return name, DEFAULT_PORTS.get(scheme, 80) if port is None else port


def token_matches(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def with_headers(response: Response) -> Response:
    response.headers.extend(HEADERS)
    return response
