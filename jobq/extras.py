"""Importing what an extra brings, or saying which extra to install: public, so
that integrations (jobq's own under ``jobq.contrib``, or yours) say it alike.

Each integration imports its third-party packages inside ``requires``::

    with requires("flask", "jobq.contrib.flask", "Flask"):
        import click
        from flask import Flask

so that a missing one raises ``MissingExtra`` ("jobq.contrib.flask needs
Flask, which is not installed (no module named 'click'): pip install
'jobq[flask]'") rather than a bare ``ModuleNotFoundError`` naming some
dependency of a dependency.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from jobq.errors import MissingExtra


def install_hint(extra: str) -> str:
    """The command that installs ``extra``."""
    return f"pip install 'jobq[{extra}]'"


@contextlib.contextmanager
def requires(extra: str, part: str, packages: str) -> Iterator[None]:
    """Turn a ``ModuleNotFoundError`` raised inside into ``MissingExtra``:
    ``part`` of jobq needs ``packages`` (their names as people know them),
    which the extra ``extra`` installs. Only imports belong inside: any
    module missing there is taken for a missing dependency."""
    try:
        yield
    except ModuleNotFoundError as exc:
        raise MissingExtra(
            f"{part} needs {packages}, which is not installed (no module named "
            f"{exc.name!r}): {install_hint(extra)}",
            name=exc.name,
            extra=extra,
        ) from None
