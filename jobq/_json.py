"""JSON text in and out: how payloads and results are checked and stored.

Payloads cross the store boundary as compact JSON text, so a job never shares
an object with the code that enqueued it or with an earlier attempt. Both
coders are built once: building one per call costs more than the coding.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json.encoder import (  # type: ignore[attr-defined]
    c_make_encoder,
    encode_basestring_ascii,
)
from typing import Any

_decode = json.JSONDecoder().raw_decode


def _not_json(value: object) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _encoder() -> Callable[[object], str]:
    """``JSONEncoder.encode`` builds a C encoder on every call, which costs
    more than encoding a small payload: build it once. (No circular check:
    a cycle ends in ``RecursionError``, reported like any other bad value.)"""
    if c_make_encoder is None:  # an interpreter without the C accelerator
        return json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
    chunks = c_make_encoder(
        None, _not_json, encode_basestring_ascii, None, ":", ",", False, False, False
    )
    return lambda value: "".join(chunks(value, 0))


_encode = _encoder()


def encode(value: object, what: str = "payload") -> str:
    """``value`` as compact JSON text; ``TypeError`` if it is not a JSON value."""
    try:
        return _encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise TypeError(f"{what} must be JSON-serializable: {exc}") from None


def decode(text: str) -> Any:
    """The value of JSON text written by ``encode`` (fresh objects each call)."""
    return _decode(text)[0]
