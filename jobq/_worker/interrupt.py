"""Interrupting a handler's thread, only where it is safe: at a line of the
handler's own code.

jobq runs handlers in threads of the app's own process, and a thread cannot
be killed, so to stop a handler (at its time limit) jobq raises an exception
inside its thread. Raised at whatever bytecode the thread happens to run, as
``PyThreadState_SetAsyncExc`` does, it lands as often in code the handler
merely called: inside jobq's own store transaction (the transaction stays
open and the database locked), between a logging handler's ``acquire()``
and its ``try`` (the lock is never released), inside ``threading`` or
``queue``. So jobq raises it only from a callback that runs *in the
handler's thread* at the start of a line, after checking that thread's own
stack (``may_land``): every frame between the handler call and that line is
the app's code, none the standard library's or jobq's. Nothing else runs
in between, so nothing can be left half-done by the interruption itself.

The callback comes from the interpreter's own line events, switched on only
for a thread with a request waiting:

- Python 3.12+: ``sys.monitoring`` LINE events, for the code objects of the
  frames the exception may land in (the code of other threads that runs
  the same functions checks one dict and returns);
- Python 3.11: the thread's trace function, set from outside the thread
  through ``_PyEval_SetTrace`` (what ``threading.settrace_all_threads``
  does on 3.12) to a C-callable trampoline that, once called inside the
  thread, installs a Python trace function there for the frames of its
  stack.

A thread blocked in C code (a ``time.sleep``, a socket read, a lock) or
inside the standard library produces no line of the handler's code: the
request waits, and whoever made it decides when to give up on the thread.
"""

from __future__ import annotations

import ast
import ctypes
import enum
import linecache
import logging
import os
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterable, Iterator
from types import CodeType, FrameType
from typing import Any, Protocol, TypeVar

from jobq._worker.stacks import stack_of

logger = logging.getLogger("jobq")

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class Place(enum.IntEnum):
    """Where a code object comes from, for where an interruption may land."""

    #: The app's own code: not the standard library, jobq, nor an installed
    #: package. An interruption may land here.
    OWN = 0
    #: An installed package (``site-packages``): a library the handler
    #: calls, whose state (a connection, a pool) the app shares. An
    #: interruption lands here only in the handler's own package, when the
    #: handler is itself installed.
    LIBRARY = 1
    #: The standard library and jobq: never.
    FENCED = 2


def _prefixes(*paths: str | None) -> tuple[str, ...]:
    """Each directory as it is and resolved, ending with a separator."""
    found: set[str] = set()
    for path in paths:
        if path:
            for form in (os.path.abspath(path), os.path.realpath(path)):
                found.add(form.rstrip(os.sep) + os.sep)
    return tuple(sorted(found))


_JOBQ = _prefixes(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # jobq/
_PATHS = sysconfig.get_paths()
_STDLIB = _prefixes(_PATHS.get("stdlib"), _PATHS.get("platstdlib"))
_INSTALLED = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")

#: ``Place`` by file name; file names are few, code objects may be many.
_places: dict[str, Place] = {}

#: The code of jobq's functions that call into the handler's code: the
#: walk of ``may_land`` ends at the first one (see ``hands_over``).
_ENTRIES: set[CodeType] = set()


def hands_over(function: F) -> F:
    """Mark a jobq function that calls the handler's code (a task, the
    handler, the middleware): the frames it calls are the handler's."""
    _ENTRIES.add(function.__code__)
    return function


def place_of(filename: str) -> Place:
    """The ``Place`` of the code in ``filename`` (cached)."""
    place = _places.get(filename)
    if place is None:
        place = _places[filename] = _classify(filename)
    return place


def _classify(filename: str) -> Place:
    if filename.startswith(("<frozen ", *_JOBQ)):
        return Place.FENCED
    if any(part in filename for part in _INSTALLED):
        return Place.LIBRARY
    if filename.startswith(_STDLIB):
        return Place.FENCED
    return Place.OWN


def _package_of(filename: str) -> str:
    """The installed top-level package (or module) ``filename`` belongs to,
    as a path prefix: ``.../site-packages/shop/`` for ``.../shop/tasks.py``."""
    for part in _INSTALLED:
        at = filename.rfind(part)
        if at >= 0:
            start = at + len(part)
            end = filename.find(os.sep, start)
            return filename if end < 0 else filename[: end + 1]
    return filename


def handler_frames(frame: FrameType | None) -> list[FrameType] | None:
    """The frames from ``frame`` out to the handler call (innermost first),
    or ``None`` if ``frame`` is not inside one.

    A link that leads to an object that is no frame (seen on 3.11 when
    another thread read these frames, which jobq no longer does there: see
    ``stacks``) is "not inside one", never an error that would stop the
    thread that looks."""
    frames: list[FrameType] = []
    current: object = frame  # what a link reads may be no frame: checked
    while current is not None:
        if not isinstance(current, FrameType):
            return None
        if current.f_code in _ENTRIES:
            return frames
        frames.append(current)
        current = current.f_back
    return None


#: The lines of each file where an interruption would skip cleanup, by
#: file name (``learn_cleanup_lines``); ``None``: its source is unknown.
_cleanups: dict[str, frozenset[int] | None] = {}
_learning = threading.Lock()


def cleanup_lines(filename: str) -> frozenset[int] | None:
    """The lines of ``filename`` where an exception raised at the start of
    the line would skip cleanup or come too early, or ``None`` if they are
    not known (then no line of it is safe): the file was not learnt yet
    (``learn_cleanup_lines``), or its source cannot be read.

    - a ``with`` statement's header: its exit (``__exit__(None, None,
      None)``) runs as a line of its own, outside the block it protects;
    - a ``try`` line: between a ``lock.acquire()`` and the ``try``;
    - the bodies of ``except`` and ``finally`` clauses: a ``finally`` body
      runs inline when nothing was raised, unprotected by itself.
    """
    return _cleanups.get(filename)


def learn_cleanup_lines(filenames: Iterable[str]) -> None:
    """Read and parse the files not known yet, for ``cleanup_lines``.

    Called by the thread that interrupts, one parse at a time, never in a
    handler's thread at a line event: two threads parsing at once on 3.11
    can fail ("AST constructor recursion depth mismatch", a CPython bug),
    and a handler's thread must not be held up by a parse. A parse that
    fails that way is tried again at the next look."""
    for filename in filenames:
        if filename in _cleanups:
            continue
        with _learning:
            source = "".join(linecache.getlines(filename))
            try:
                tree = ast.parse(source, filename) if source else None
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                tree = None
            except SystemError:  # the CPython bug above: another thread parsed
                continue
            _cleanups[filename] = (
                None if tree is None else frozenset(_unsafe_lines(tree))
            )


def _unsafe_lines(tree: ast.AST) -> Iterator[int]:
    for node in ast.walk(tree):
        if isinstance(node, ast.With | ast.AsyncWith):
            yield from range(node.lineno, max(node.body[0].lineno, node.lineno + 1))
        elif isinstance(node, ast.Try | ast.TryStar):
            yield node.lineno
            for handler in node.handlers:
                yield from _spanned(handler)
            if node.finalbody:
                first, last = node.finalbody[0], node.finalbody[-1]
                yield from range(first.lineno - 1, (last.end_lineno or last.lineno) + 1)


def _spanned(node: ast.excepthandler) -> range:
    return range(node.lineno, (node.end_lineno or node.lineno) + 1)


def landing_places(frames: list[FrameType]) -> list[bool]:
    """For each of ``frames`` (``handler_frames``), whether an interruption
    may land there: in the app's own code, or in an installed package's
    when it is the package of the handler itself."""
    if not frames:
        return []
    root = frames[-1].f_code.co_filename
    own_package = _package_of(root) if place_of(root) is Place.LIBRARY else None
    landing = []
    for frame in frames:
        filename = frame.f_code.co_filename
        place = place_of(filename)
        landing.append(
            place is Place.OWN
            or (
                place is Place.LIBRARY
                and own_package is not None
                and filename.startswith(own_package)
            )
        )
    return landing


def _clear_of_cleanup(frames: list[FrameType]) -> bool:
    """No frame is at a line of ``cleanup_lines``: an exception raised now
    skips no ``with`` exit or ``finally`` body of any of them."""
    for frame in frames:
        unsafe = cleanup_lines(frame.f_code.co_filename)
        if unsafe is None or frame.f_lineno in unsafe:
            return False
    return True


def may_land(frame: FrameType) -> bool:
    """Whether an exception raised at the start of ``frame``'s current line
    lands in the handler's code only, and safely: every frame from it out
    to the handler call is one an interruption may land in (none is the
    standard library's or jobq's, as when the handler's code is a callback
    they call), and none is at a line where it would skip cleanup."""
    frames = handler_frames(frame)
    return (
        bool(frames)
        and frames is not None
        and all(landing_places(frames))
        and _clear_of_cleanup(frames)
    )


class Interruptible:
    """A thread that runs handlers, as seen by whoever may interrupt it.

    ``call`` runs a handler inside it; ``request`` (from any thread) asks
    for an exception to be raised in the handler at its next safe line;
    ``delivered`` says whether it was. A request made outside a handler
    call, or after one was delivered, is refused; one not delivered when
    the call ends is dropped.

    A call is named by a token, ``current`` while it runs. The thread may
    also set ``current`` itself around a handler call, with no lock and no
    wrapper (a worker, for every job: the cost of ``call`` is a few percent
    of a no-op job); then it calls ``leave`` after it if ``pending``. A
    request lands only while ``current`` is still its token (checked in the
    thread, at delivery), so one that raced with the call's end never
    reaches the thread's next call; it is dropped there.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.thread = threading.current_thread()
        self.ident = threading.get_ident()
        #: The token of the call the thread runs now (``None``: none), set
        #: in the thread without the lock: requests name the call they mean.
        self.current: object = None
        self._requested: object = None  # the token of the request waiting
        #: A request was made (waiting or delivered): ``leave`` must drop it
        #: once the call is over (a plain attribute: read after every job).
        self.pending = False
        self.delivered = False
        #: Given up by whoever interrupts it: what the thread does after its
        #: call returns is no longer the caller's (it ends). ``stuck_at``:
        #: its stack then.
        self.abandoned = False
        self.stuck_at: str | None = None
        self._exception: Callable[[], BaseException] | None = None
        self.thread_state = _current_thread_state()
        self._delivery = _delivery().for_thread(self)
        self._delivery.note_trace()  # for the calls not made through ``call``

    @hands_over
    def call(self, function: Callable[[], T], token: object = None) -> T:
        """``function()``, interruptible while it runs; ``token`` names this
        call in ``request`` and ``abandon``."""
        self._delivery.note_trace()
        self.current = token
        try:
            return function()
        except BaseException as exc:
            if self.delivered:
                trim_callbacks(exc)
            raise
        finally:
            self.leave()

    def leave(self) -> None:
        """Out of the handler (in its own thread): no exception reaches it
        any more; a request not delivered is dropped."""
        with self.lock:
            self.current = None
            self._drop()

    def _drop(self) -> None:
        """Forget the request (in the thread, the lock held)."""
        if self._exception is not None:
            self._exception = None
            self._requested = None
            self.pending = self.delivered = False
            _waiting.pop(self.ident, None)
            self._delivery.stop()

    def request(self, exception: Callable[[], BaseException], token: object) -> bool:
        """Raise ``exception()`` in the call ``token`` at its next line that
        ``may_land``; whether the request was taken (that call runs, and no
        request is waiting or delivered in it; one left from an earlier
        call is replaced)."""
        with self.lock:
            if not self._runs(token) or self._requested is token:
                return False
            self._exception = exception
            self._requested = token
            self.pending, self.delivered = True, False
            _waiting[self.ident] = self
            self._delivery.start()
            return True

    def files_to_learn(self) -> list[str]:
        """The files of the frames a waiting request may land in, as its
        delivery found them so far, for the caller to learn their cleanup
        lines (``learn_cleanup_lines``, outside the lock)."""
        return list(self._delivery.files)

    def renew(self) -> None:
        """Look again for the frames a waiting request may land in: the
        handler may have entered other functions since."""
        with self.lock:
            if self._exception is not None and not self.delivered:
                self._delivery.start()

    def abandon(self, token: object) -> bool:
        """Give up on the thread while it is still inside the call
        ``token`` (noting where it is stuck: ``stuck_at``, its stack as
        text, read without frame objects: see ``stacks``); whether it was
        (a call that ended is not given up)."""
        with self.lock:
            if not self._runs(token):
                return False
            self.abandoned = True
            self.stuck_at = stack_of(self.ident)
            return True

    def _runs(self, token: object) -> bool:
        return token is not None and self.current is token and not self.abandoned

    def deliver(self) -> BaseException | None:
        """The exception to raise now (in the thread, at a line that
        ``may_land``), once; ``None`` if none is waiting, or if the call it
        was meant for is over (``leave`` drops it after the call the thread
        runs now)."""
        with self.lock:
            if (
                self._exception is None
                or self.delivered
                or self.current is not self._requested
            ):
                return None
            self.delivered = True
            _waiting.pop(self.ident, None)
            return self._exception()


#: Threads with a request waiting, by thread id: what the line callbacks,
#: which run in every thread executing the watched code, look up.
_waiting: dict[int, Interruptible] = {}


def _on_line(frame: FrameType) -> None:
    """A line event of ``frame`` in the current thread: raise the requested
    exception if one waits here and may land at this line."""
    target = _waiting.get(threading.get_ident())
    if target is None or not may_land(frame):
        return
    exception = target.deliver()
    if exception is not None:
        raise exception


class _ThreadDelivery(Protocol):
    """How requests reach one thread (made in that thread)."""

    #: The files of the frames the waiting request may land in, found so
    #: far (appended to only, from any thread; cleared by ``stop``).
    files: list[str]

    def note_trace(self) -> None:
        """In the thread, as a call begins: note what ``stop`` restores."""

    def start(self) -> None:
        """From any thread, the target's lock held while it is inside a
        call: have line events of the frames a request may land in call
        ``_on_line`` in the target's thread."""

    def stop(self) -> None:
        """In the target's thread, its lock held: no more of them."""


def trim_callbacks(exc: BaseException) -> None:
    """Cut the frames of the callbacks that raised a delivered exception
    from its traceback: it ends at the handler's line, where it landed."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        if tb.tb_next.tb_frame.f_code in _CALLBACKS:
            tb.tb_next = None
            return
        tb = tb.tb_next


# -- another thread's state, through the C API ----------------------------------------

_thread_state_get = ctypes.pythonapi.PyThreadState_Get
_thread_state_get.restype = ctypes.c_void_p
_get_frame = ctypes.pythonapi.PyThreadState_GetFrame
_get_frame.argtypes = [ctypes.c_void_p]
_get_frame.restype = ctypes.py_object


def _current_thread_state() -> int | None:
    """The calling thread's ``PyThreadState``, as an address."""
    state: int | None = _thread_state_get()
    return state


def _frame_of(thread_state: int | None) -> FrameType | None:
    """The frame a live thread runs now (``PyThreadState_GetFrame``)."""
    try:
        frame: FrameType = _get_frame(thread_state)
    except ValueError:  # NULL: no frame
        return None
    return frame


# -- Python 3.12+: sys.monitoring ----------------------------------------------------


class _Monitoring:
    """LINE events of ``sys.monitoring`` on the code objects of the frames
    a request may land in, counted per code object (two threads may wait
    in the same function)."""

    def __init__(self, tool: int) -> None:
        self.tool = tool
        self.lock = threading.Lock()
        self.watched: dict[CodeType, int] = {}
        monitoring = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
        self.line = monitoring.events.LINE
        monitoring.register_callback(tool, self.line, self._callback)

    @staticmethod
    def _callback(code: CodeType, line: int) -> None:
        if _waiting:  # a lookup only while some thread waits
            _on_line(sys._getframe(1))

    def for_thread(self, target: Interruptible) -> _Watch:
        return _Watch(self, target)


class _Watch:
    """The code objects watched for one thread's request."""

    def __init__(self, monitoring: _Monitoring, target: Interruptible) -> None:
        self._monitoring = monitoring
        self._target = target
        self._codes: set[CodeType] = set()
        self.files: list[str] = []

    def note_trace(self) -> None:
        """Nothing to note: monitoring leaves trace functions alone."""

    def start(self) -> None:
        """Watch the code of the target's frames, read from this thread:
        safe from 3.12 on, where making a frame object cannot start a
        garbage collection (it waits for the eval loop), so the target
        cannot pop the frame meanwhile (see ``stacks``)."""
        frames = handler_frames(_frame_of(self._target.thread_state)) or []
        codes = [
            frame.f_code
            for frame, landing in zip(frames, landing_places(frames), strict=True)
            if landing and frame.f_code not in self._codes
        ]
        self.files.extend(
            code.co_filename for code in codes if code.co_filename not in self.files
        )
        shared = self._monitoring
        events = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
        with shared.lock:
            for code in codes:
                self._codes.add(code)
                count = shared.watched.get(code, 0)
                shared.watched[code] = count + 1
                if not count:
                    events.set_local_events(shared.tool, code, shared.line)

    def stop(self) -> None:
        shared = self._monitoring
        events = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
        with shared.lock:
            for code in self._codes:
                count = shared.watched.pop(code, 1) - 1
                if count:
                    shared.watched[code] = count
                else:
                    events.set_local_events(shared.tool, code, 0)
        self._codes.clear()
        self.files.clear()


# -- Python 3.11: the thread's trace function ---------------------------------------

#: ``Py_tracefunc``: ``int (*)(PyObject *, PyFrameObject *, int, PyObject *)``.
_TRACEFUNC = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p
)


class _Tracing:
    """The thread's trace function, switched on from outside the thread."""

    def __init__(self) -> None:
        api = ctypes.pythonapi
        self.set_trace = api._PyEval_SetTrace
        self.set_trace.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self.set_trace.restype = ctypes.c_int
        self._trampoline = _TRACEFUNC(_switch)  # kept alive here
        self.trampoline = ctypes.cast(self._trampoline, ctypes.c_void_p)

    def for_thread(self, target: Interruptible) -> _Traced:
        return _Traced(self, target.thread_state)


class _Traced:
    """One thread's trace function, switched on for a request."""

    def __init__(self, tracing: _Tracing, thread_state: int | None) -> None:
        self._tracing = tracing
        self._thread_state = thread_state
        self._started = False
        #: The trace function to restore (a debugger's, coverage's): only
        #: the thread itself can read it, so each call notes it.
        self._previous: Any = None
        self.frames: list[FrameType] = []
        #: Noted in the target's thread, at its own events: on 3.11 no
        #: other thread reads its frames (see ``stacks``).
        self.files: list[str] = []

    def note_trace(self) -> None:
        self._previous = sys.gettrace()

    def start(self) -> None:
        if not self._started:
            self._started = True
            # The target is inside a call (its lock is held): its thread and
            # thread state are alive.
            self._tracing.set_trace(self._thread_state, self._tracing.trampoline, None)

    def stop(self) -> None:
        """The trace function the thread had before, and no frame traced."""
        for frame in self.frames:
            frame.f_trace = None
        self.frames.clear()
        self.files.clear()
        if self._started:
            self._started = False
            sys.settrace(self._previous)


def _switch(obj: int | None, frame: int | None, what: int, arg: int | None) -> int:
    """The trampoline, called by the interpreter in the target thread at its
    next event: trace its stack with ``_trace`` from now on (the frames a
    request may land in; ``_trace`` picks up the ones entered later)."""
    target = _waiting.get(threading.get_ident())
    if target is None:  # the request was dropped meanwhile
        sys.settrace(None)
        return 0
    traced = target._delivery
    assert isinstance(traced, _Traced)  # noqa: S101 - this interpreter's
    sys.settrace(_trace)
    frames = handler_frames(sys._getframe(1)) or []
    for current, landing in zip(frames, landing_places(frames), strict=True):
        if landing:
            current.f_trace = _trace
            traced.frames.append(current)
            _note_file(traced.files, current.f_code.co_filename)
    return 0


def _note_file(files: list[str], filename: str) -> None:
    """Note ``filename`` for the interrupting thread to learn, once."""
    if filename not in _cleanups and filename not in files:
        files.append(filename)


def _trace(frame: FrameType, event: str, arg: object) -> Any:
    """The Python trace function of a thread with a request waiting: line
    events of the frames it may land in, no others."""
    if event == "call":
        filename = frame.f_code.co_filename
        if place_of(filename) is Place.FENCED:
            return None
        target = _waiting.get(threading.get_ident())
        if target is not None:
            traced = target._delivery
            assert isinstance(traced, _Traced)  # noqa: S101 - this interpreter's
            _note_file(traced.files, filename)
        return _trace
    if event == "line":
        _on_line(frame)
    return _trace


# -- the delivery of this interpreter ---------------------------------------------

_Delivery = _Monitoring | _Tracing
_chosen: _Delivery | None = None
_choosing = threading.Lock()


def _delivery() -> _Delivery:
    """The way this interpreter delivers, set up once (the first thread
    that runs limited handlers)."""
    global _chosen
    with _choosing:
        if _chosen is None:
            _chosen = _Tracing() if sys.version_info < (3, 12) else _Monitoring(_tool())
        return _chosen


def _tool() -> int:
    """A ``sys.monitoring`` tool id for jobq: one no other tool uses (3 and
    4 are free by convention; 0-2 and 5 are the debugger's, coverage's,
    the profiler's and the optimizer's)."""
    monitoring = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
    for tool in (4, 3):
        if monitoring.get_tool(tool) is None:
            monitoring.use_tool_id(tool, "jobq")
            return tool
    raise RuntimeError(
        "jobq needs a free sys.monitoring tool id (3 or 4) to interrupt "
        "handlers at their time limit; both are taken by other tools"
    )


#: The code of the callbacks that raise a delivered exception (``_trim``).
_CALLBACKS = frozenset(
    {_on_line.__code__, _trace.__code__, _Monitoring._callback.__code__}
)
