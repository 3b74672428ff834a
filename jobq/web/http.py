"""The little HTTP the dashboard needs, over WSGI: a parsed request and a
response, with no framework (the dashboard mounts in any of them)."""

from __future__ import annotations

import contextlib
import http.cookies
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

#: The largest form body read (a bulk action's filters, a CSRF token).
MAX_FORM_BYTES = 64 * 1024

STATUS_TEXT = {
    200: "OK", 303: "See Other", 400: "Bad Request", 403: "Forbidden",
    404: "Not Found", 405: "Method Not Allowed", 409: "Conflict",
    413: "Content Too Large", 500: "Internal Server Error",
}  # fmt: skip


class Request:
    """One request: method, path below the mount point, query, cookies, form."""

    def __init__(self, environ: Mapping[str, Any]) -> None:
        self.environ = environ
        self.method: str = environ.get("REQUEST_METHOD", "GET").upper()
        self.script_name: str = environ.get("SCRIPT_NAME", "").rstrip("/")
        self.path: str = environ.get("PATH_INFO", "") or "/"
        self.query = _first_values(environ.get("QUERY_STRING", ""))
        self.remote_addr: str = environ.get("REMOTE_ADDR", "")
        cookies = http.cookies.SimpleCookie()
        # A malformed cookie header: as if there were none.
        with contextlib.suppress(http.cookies.CookieError):
            cookies.load(environ.get("HTTP_COOKIE", ""))
        self.cookies = {name: morsel.value for name, morsel in cookies.items()}
        self._fields: dict[str, list[str]] | None = None

    def form(self) -> dict[str, str]:
        """The urlencoded body of a POST (the first value of each field);
        ``ValueError`` if it is too large."""
        return {name: values[0] for name, values in self._form_fields().items()}

    def form_values(self, name: str) -> list[str]:
        """Every value of one field of the form (checkboxes of one name), in
        the order sent; ``ValueError`` if the form is too large."""
        return self._form_fields().get(name, [])

    def _form_fields(self) -> dict[str, list[str]]:
        if self._fields is None:
            try:
                length = int(self.environ.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            if length > MAX_FORM_BYTES:
                raise ValueError("form too large")
            body = self.environ["wsgi.input"].read(length) if length > 0 else b""
            self._fields = parse_qs(body.decode("utf-8", "replace"))
        return self._fields

    def url(self, path: str) -> str:
        """An absolute path below the mount point (``path`` starts with /)."""
        return f"{self.script_name}{path}"


def _first_values(text: str) -> dict[str, str]:
    return {name: values[0] for name, values in parse_qs(text).items()}


@dataclass
class Response:
    """A response to send: status, body, and headers beyond the defaults."""

    status: int = 200
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)

    def start(self, start_response: Any) -> Iterable[bytes]:
        status = f"{self.status} {STATUS_TEXT.get(self.status, 'Unknown')}"
        headers = [
            ("Content-Type", self.content_type),
            ("Content-Length", str(len(self.body))),
            *self.headers,
        ]
        start_response(status, headers)
        return [self.body]


def redirect(location: str) -> Response:
    """A 303 to a path this app built (never one taken from the request)."""
    return Response(303, b"", headers=[("Location", location)])


def text(status: int, message: str) -> Response:
    return Response(status, message.encode(), "text/plain; charset=utf-8")
