"""Connection strings of the PostgreSQL store: parsing and checking them, the
lowercase scheme libpq wants, and the password hidden wherever one is shown.

psycopg is imported by each function, not by this module.
"""

from __future__ import annotations

from typing import Any


def redacted(conninfo: str) -> str:
    """A connection string as it may be shown: the password replaced."""
    import psycopg.conninfo

    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "<malformed connection string>"
    if "password" in params:
        params["password"] = "***"  # noqa: S105 - a mask, not a password
    return psycopg.conninfo.make_conninfo("", **params)


def parse_conninfo(conninfo: str) -> dict[str, Any]:
    """The parameters of a ``postgresql://`` URL or ``key=value`` string.

    Raises ``ValueError`` for a malformed one (an unknown parameter, a port
    that is not a number between 1 and 65535, a URL without ``//``).
    """
    import psycopg
    import psycopg.conninfo

    if not isinstance(conninfo, str):
        raise TypeError(f"conninfo must be a str, not {conninfo!r}")
    lowered = conninfo.lower()
    if lowered.startswith(("postgresql:", "postgres:")) and not lowered.startswith(
        ("postgresql://", "postgres://")
    ):
        raise ValueError(
            f"malformed PostgreSQL store URL {_safe_url(conninfo)!r}: use "
            "postgresql://user@host:port/database"
        )
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.Error as exc:
        raise ValueError(
            f"malformed PostgreSQL connection string {_safe_url(conninfo)!r}: "
            f"{str(exc).strip()}"
        ) from None
    for port in str(params.get("port") or "").split(","):
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise ValueError(
                f"malformed PostgreSQL connection string {_safe_url(conninfo)!r}: "
                f"port {port!r} is not a number between 1 and 65535"
            )
    return params


def lower_scheme(conninfo: str) -> str:
    """``POSTGRESQL://...`` as libpq understands it (it wants a lowercase scheme)."""
    if not isinstance(conninfo, str):
        raise TypeError(f"conninfo must be a str, not {conninfo!r}")
    scheme, sep, rest = conninfo.partition("://")
    if sep and scheme.lower() in ("postgresql", "postgres"):
        return f"{scheme.lower()}{sep}{rest}"
    return conninfo


def _safe_url(text: str) -> str:
    """``text`` with a URL's password masked (for messages about bad URLs)."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        return text
    authority, slash, tail = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if at and ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***"
    return f"{scheme}{sep}{userinfo}{at}{host}{slash}{tail}"
