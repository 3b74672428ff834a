"""JSON text in and out: how payloads and results are checked and stored.

Payloads cross the store boundary as compact JSON text, so a job never shares
an object with the code that enqueued it or with an earlier attempt. Both
coders are built once: building one per call costs more than the coding.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from json.encoder import (  # type: ignore[attr-defined]
    c_make_encoder,
    encode_basestring_ascii,
)
from types import MappingProxyType
from typing import Any

from jobq.types import NO_META

#: The decoder's scanner (C where the accelerator is): ``raw_decode``
#: without its Python frame, which ``decode`` pays once per job.
_scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _not_json(value: object) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _encoder() -> Callable[[object, int], Sequence[str]]:
    """The chunks of a value's JSON text. ``JSONEncoder.encode`` builds a C
    encoder on every call, which costs more than encoding a small payload:
    build it once, and call it from ``encode`` (no frame of its own). (No
    circular check: a cycle ends in ``RecursionError``, reported like any
    other bad value.)"""
    if c_make_encoder is None:  # an interpreter without the C accelerator
        whole = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
        return lambda value, _: (whole(value),)
    chunks: Callable[[object, int], Sequence[str]] = c_make_encoder(
        None, _not_json, encode_basestring_ascii, None, ":", ",", False, False, False
    )
    return chunks


_chunks = _encoder()


def encode(value: object, what: str = "payload") -> str:
    """``value`` as compact JSON text; ``TypeError`` if it is not a JSON value,
    or if JSON would lose part of it (two keys of a dict that become the same
    text, such as ``True`` and ``"true"``)."""
    try:
        _check_keys(value)
        return "".join(_chunks(value, 0))
    except (TypeError, ValueError, RecursionError) as exc:
        raise TypeError(f"{what} must be JSON-serializable: {exc}") from None


#: Values the key check need not look into (exact types: a subclass of
#: ``str`` could be anything).
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _check_keys(value: object) -> None:
    """Refuse a dict whose keys collide once JSON turns them into text: the
    encoder would silently keep only the last of them. Only dicts with a key
    that is not a ``str`` are looked at closely; for the rest, the cost of
    the check is one walk over the containers (about 0.2 us for a small
    payload)."""
    if isinstance(value, dict):
        plain = True
        for key, item in value.items():
            if type(key) is not str:
                plain = False
            if type(item) not in _SCALARS:
                _check_keys(item)
        if not plain:
            _check_coerced_keys(value)
    elif isinstance(value, list | tuple):
        for item in value:
            if type(item) not in _SCALARS:
                _check_keys(item)


def _check_coerced_keys(mapping: dict[Any, Any]) -> None:
    seen: dict[str, object] = {}
    for key in mapping:
        text = _key_text(key)
        if text is None:
            continue  # not a JSON key at all: the encoder says so
        if text in seen:
            raise TypeError(
                f"keys {seen[text]!r} and {key!r} are both {text!r} in JSON, "
                "so one would be lost"
            )
        seen[text] = key


def _key_text(key: object) -> str | None:
    """The text ``json`` makes of a dict key, as its encoder does it."""
    if isinstance(key, str):
        return str(key)
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, float):
        return float.__repr__(key)
    if isinstance(key, int):
        return int.__repr__(key)
    return None


def decode(text: str) -> Any:
    """The value of JSON text written by ``encode`` (fresh objects each call);
    ``json.JSONDecodeError`` where there is none, as ``raw_decode`` raises."""
    try:
        return _scan(text, 0)[0]
    except StopIteration as err:
        raise json.JSONDecodeError("Expecting value", text, err.value) from None


def decode_meta(text: str | None) -> Mapping[str, str]:
    """A job's ``meta`` from the JSON text stores keep: a read-only mapping,
    the shared empty one for ``None`` (most jobs: nothing to decode)."""
    if text is None:
        return NO_META
    return MappingProxyType(json.loads(text))
