"""JSON text in and out: how payloads and results are checked and stored.

Payloads cross the store boundary as compact JSON text, so a job never shares
an object with the code that enqueued it or with an earlier attempt. Both
coders are built once: building one per call costs more than the coding.
"""

from __future__ import annotations

import json
from typing import Any

_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
_decode = json.JSONDecoder().raw_decode


def encode(value: object, what: str = "payload") -> str:
    """``value`` as compact JSON text; ``TypeError`` if it is not a JSON value."""
    try:
        return _encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise TypeError(f"{what} must be JSON-serializable: {exc}") from None


def decode(text: str) -> Any:
    """The value of JSON text written by ``encode`` (fresh objects each call)."""
    return _decode(text)[0]
