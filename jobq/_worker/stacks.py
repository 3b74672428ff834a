"""The stack of another running thread, read without touching its frames.

On Python 3.11 reading another thread's frames from Python is unsafe: a
frame object is made on demand, the allocation can start a garbage
collection, a finalizer it runs can let that thread go on, and the thread
can pop the very frame the object is being made for; the object then points
into freed memory (jobq saw a module's globals as ``f_back``, then a
segmentation fault; so did the profilers of Sentry and Datadog). So jobq
never reads another thread's frames through frame objects on 3.11: the
frames a time limit may land in are noted by the handler's thread itself
(``interrupt``), and the stack of a thread given up at its limit comes from
``faulthandler``, which reads the interpreter's own frame records in C, the
GIL held, making no object.
"""

from __future__ import annotations

import faulthandler
import logging
import re
import tempfile
import traceback

logger = logging.getLogger("jobq")

_HEADER = re.compile(r"^(?:Current thread|Thread) 0x([0-9a-f]+) ")
_FRAME = re.compile(r'^  File "(.*)", line (\d+) in (.*)$')


def stack_of(ident: int) -> str | None:
    """The stack of the thread ``ident``, formatted as
    ``traceback.format_stack`` does (outermost call first); ``None`` if it
    has no Python frame or its stack cannot be read."""
    try:
        with tempfile.TemporaryFile() as dump:
            faulthandler.dump_traceback(dump, all_threads=True)
            dump.seek(0)
            text = dump.read().decode("utf-8", "replace")
    except (OSError, ValueError):  # no file to write to: no stack
        logger.debug("could not read the stack of thread %#x", ident, exc_info=True)
        return None
    frames = _frames_of(text, ident)
    if not frames:
        return None
    return "".join(traceback.StackSummary.from_list(reversed(frames)).format())


def _frames_of(text: str, ident: int) -> list[tuple[str, int, str, None]]:
    """The frames listed for ``ident`` in a ``faulthandler`` dump, innermost
    first (as it writes them)."""
    frames: list[tuple[str, int, str, None]] = []
    inside = False
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header is not None:
            if inside:
                break
            inside = int(header.group(1), 16) == ident
        elif inside and (frame := _FRAME.match(line)) is not None:
            frames.append((frame.group(1), int(frame.group(2)), frame.group(3), None))
    return frames
