"""Management commands: ``jobq_worker`` and ``jobq``."""

from __future__ import annotations

import io
from typing import Any


class RawWriter(io.TextIOBase):
    """A text stream over a command's ``self.stdout``/``self.stderr`` that
    writes exactly what it is given (``OutputWrapper.write`` adds newlines)."""

    def __init__(self, wrapper: Any) -> None:
        self._wrapper = wrapper

    def write(self, text: str) -> int:
        self._wrapper.write(text, ending="")
        return len(text)

    def flush(self) -> None:
        self._wrapper.flush()
