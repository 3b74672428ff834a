"""Starting the helper threads of stores, also while the interpreter exits.

From Python 3.12 on, ``Thread.start`` raises ``RuntimeError`` once the
interpreter has begun to shut down (an ``atexit`` hook runs then). A store
opened by a late hook (a script's last ``enqueue``) must still work: its
helper threads (wake-ups, notifications, compaction) only make it faster or
tidier, and ``close`` does their work anyway, so they are simply not started.
"""

from __future__ import annotations

import logging
import threading

logger = logging.getLogger("jobq")


def start_helper(thread: threading.Thread) -> bool:
    """Start ``thread``; ``False`` (logged at DEBUG) if the interpreter is
    shutting down and refuses new threads."""
    try:
        thread.start()
    except RuntimeError as exc:
        if "shutdown" not in str(exc):
            raise
        logger.debug("not starting %s: the interpreter is exiting", thread.name)
        return False
    return True
