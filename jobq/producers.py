"""Enqueue hooks: code that wraps every enqueue, in the caller's thread.

``queue.around_enqueue(hook)`` installs a hook and returns the function that
removes it. A hook is a callable ``(sending) -> context manager``: it
receives a ``Sending`` before the jobs are checked and written, may add
string headers to ``sending.meta`` (stored with each job, as ``meta=``
would: a trace context, a request id; what the hooks add or change has an
allowance of its own beside the caller's meta limits, see
``jobq._rules.check_sent_meta``), and its context manager is exited
once the write returned (``sending.added`` holds what ``enqueue`` returns)
or failed (with the exception, which goes on to the caller)::

    @contextlib.contextmanager
    def request_id(sending: jobq.Sending) -> Iterator[None]:
        sending.meta["request_id"] = current_request_id()
        yield

    queue.around_enqueue(request_id)

The first hook installed is the outermost. ``enqueue``, ``enqueue_many``,
``Task.enqueue`` and the integrations all enqueue through ``queue.send``,
which calls the hooks; with none installed it costs one truth test.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from jobq.types import Enqueued

__all__ = ["EnqueueHook", "Sending"]


@dataclass(slots=True)
class Sending:
    """One enqueue, as enqueue hooks see it: the named task's name (``None``
    for plain jobs), the ``meta`` every job of the call will carry (the
    caller's, copied: a hook may add to it), and after the write the
    ``Enqueued`` of each job (empty until then, or if the write failed;
    an integration that writes later, at a commit, shows its placeholders)."""

    task: str | None
    meta: dict[str, str]
    added: list[Enqueued] = field(default_factory=list)


#: ``(sending) -> context manager``: see the module's documentation.
EnqueueHook = Callable[[Sending], AbstractContextManager[object]]


class EnqueueHooks:
    """The hooks of one queue: a tuple replaced whole, read without a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.hooks: tuple[EnqueueHook, ...] = ()

    def install(self, hook: EnqueueHook) -> Callable[[], None]:
        """Add ``hook`` (innermost); the function returned removes it."""
        if not callable(hook):
            raise TypeError(f"an enqueue hook must be callable, not {hook!r}")
        # An identity of its own, called in C: no Python frame per enqueue.
        entry: EnqueueHook = functools.partial(hook)
        with self._lock:
            self.hooks = (*self.hooks, entry)

        def remove() -> None:
            with self._lock:
                self.hooks = tuple(h for h in self.hooks if h is not entry)

        return remove

    def around(self, sending: Sending) -> AbstractContextManager[object]:
        """All hooks entered around a block, the first outermost (one hook
        alone: its own context manager, the common case, with no stack)."""
        hooks = self.hooks
        return hooks[0](sending) if len(hooks) == 1 else _nested(hooks, sending)


@contextlib.contextmanager
def _nested(hooks: tuple[EnqueueHook, ...], sending: Sending) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for hook in hooks:
            stack.enter_context(hook(sending))
        yield
