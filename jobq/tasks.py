"""Named tasks: ``@queue.task`` turns a module-level function into a kind of job.

A task is found by a stable name: ``module.qualname`` of its function, or the
``name=`` given to the decorator. A task job is stored with that name in
``JobRecord.task`` and its arguments as its payload, a JSON object that always
has both keys::

    {"args": [...], "kwargs": {...}}

At run time the name is looked up in the registry that ``@queue.task`` fills
in this process, never imported from stored data, and the function is called
with those arguments (after a JSON round trip: tuples arrive as lists). A name
that nothing registered here makes the job dead at once (``UnknownTask``),
like ``Fatal``: retrying cannot make a task appear.
"""

from __future__ import annotations

import inspect
import threading
import types
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, Unpack

from jobq._rules import (
    check_job_limits,
    check_max_attempts,
    check_priority,
    check_timeout,
)
from jobq._worker.interrupt import hands_over
from jobq.errors import Fatal
from jobq.options import (
    TASK_OPTIONS,
    SendOptions,
    TaskOptions,
    check,
    check_names,
    merged,
)
from jobq.retry import RetryPolicy
from jobq.stores.base import Store
from jobq.types import Enqueued

P = ParamSpec("P")
R = TypeVar("R")

#: The keys of a task job's payload.
PAYLOAD_KEYS = frozenset({"args", "kwargs"})

#: Guards check-then-register in every queue's registry.
_registering = threading.Lock()


class TaskQueue(Protocol):
    """What a ``Task`` needs of the queue it belongs to: ``JobQueue`` is
    one. (A protocol, not ``JobQueue`` itself: the queue builds its tasks,
    so ``jobq.queue`` imports this module and not the other way round.)"""

    @property
    def store(self) -> Store: ...

    @property
    def policy(self) -> RetryPolicy: ...

    def send(
        self,
        payloads: Iterable[object],
        *,
        task: str | None = None,
        max_attempts: int | None = None,
        what: str = "payload",
        **options: Unpack[SendOptions],
    ) -> list[Enqueued]: ...


class UnknownTask(Fatal):
    """Recorded for a stored task job whose name no ``@queue.task`` registered
    in this process: the job is dead at once."""


class InvalidTaskPayload(Fatal):
    """Recorded for a stored task job whose payload is not
    ``{"args": [...], "kwargs": {...}}``: the job is dead at once."""


class Task(Generic[P, R]):
    """A function registered with a queue under a stable ``name``.

    Built by ``@queue.task``; calling it runs the function here and now, as
    a plain call. ``enqueue(*args, **kwargs)`` adds a job that calls it with
    those arguments on a worker; ``using(...)`` returns a copy with options
    for those jobs (delay, due time, key, priority, meta, timeout). A
    ``Task`` never changes: ``using`` returns a new one.

    Attributes: ``name``, ``func``, ``queue``, ``max_attempts``,
    ``priority`` and ``timeout`` (the defaults of its jobs; a ``timeout`` of
    ``None`` means the queue's), ``isolate`` (each attempt runs in a child
    process); ``__wrapped__`` is ``func``.
    """

    name: str
    func: Callable[P, R]
    queue: TaskQueue
    max_attempts: int
    priority: int
    timeout: float | None
    limits: tuple[str, ...]
    isolate: bool
    #: It declares ``parent_results``: its jobs are called with what their
    #: parents (``after=``) returned, in that order.
    takes_parent_results: bool
    __wrapped__: Callable[P, R]
    __name__: str
    _options: Mapping[str, Any]  # what using() gave, checked
    _sent: dict[str, Any]  # what enqueue sends: the task's defaults, then those
    _signature: inspect.Signature | None

    def __init__(
        self,
        queue: TaskQueue,
        func: Callable[P, R],
        *,
        name: str,
        max_attempts: int,
        priority: int,
        timeout: float | None = None,
        limits: tuple[str, ...] = (),
        isolate: bool = False,
        _options: Mapping[str, Any] | None = None,
        _signature: inspect.Signature | None = None,
    ) -> None:
        assign = object.__setattr__  # the class refuses assignment afterwards
        assign(self, "queue", queue)
        assign(self, "func", func)
        assign(self, "name", name)
        assign(self, "max_attempts", max_attempts)
        assign(self, "priority", priority)
        assign(self, "timeout", timeout)
        assign(self, "limits", limits)
        assign(self, "isolate", isolate)
        assign(self, "_options", MappingProxyType(dict(_options or {})))
        defaults = {"priority": priority, "timeout": timeout, "limits": limits or None}
        assign(self, "_sent", merged(defaults, self._options))
        assign(self, "_signature", _signature)
        takes = _signature is not None and PARENT_RESULTS in _signature.parameters
        assign(self, "takes_parent_results", takes)
        assign(self, "__wrapped__", func)
        for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
            value = getattr(func, attribute, None)
            if value is not None:
                assign(self, attribute, value)

    @hands_over
    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function in this thread, now: a plain call."""
        return self.func(*args, **kwargs)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Enqueued:
        """Add a job that calls the function with these arguments.

        The arguments must fit the function's signature and be JSON values;
        ``TypeError`` otherwise, and nothing is added. With a ``key`` held by
        a pending or running job, that job is returned with ``duplicate=True``.
        """
        if self._signature is not None:
            if self.takes_parent_results and PARENT_RESULTS in kwargs:
                raise TypeError(
                    f"task {self.name!r}: parent_results is given by jobq, from "
                    "the jobs this one runs after (after=); do not pass it"
                )
            given: dict[str, Any] = {}
            if self.takes_parent_results:
                given[PARENT_RESULTS] = []
            try:
                self._signature.bind(*args, **kwargs, **given)
            except TypeError as exc:
                raise TypeError(f"task {self.name!r}: {exc}") from None
        return self.queue.send(
            [{"args": list(args), "kwargs": dict(kwargs)}],
            task=self.name,
            max_attempts=self.max_attempts,
            what=f"the arguments of task {self.name!r}",
            **self._sent,
        )[0]

    def using(self, **options: Unpack[SendOptions]) -> Task[P, R]:
        """A copy of this task whose ``enqueue`` uses these options
        (``jobq.options.SendOptions``).

        Each option given replaces the one set before (``None``: keep it);
        ``delay`` and ``at`` are one choice, so giving one drops the other.
        Options mean what they mean for ``JobQueue.enqueue`` and are checked
        here, at once: ``TypeError`` or ``ValueError`` as there.
        """
        given = check(options, "using")
        if given.connection is not None and not self.queue.store.transactional_add:
            raise TypeError(
                f"{type(self.queue.store).__name__} cannot add jobs in the "
                "caller's transaction (connection=...); the PostgreSQL store can"
            )
        return Task(
            self.queue,
            self.func,
            name=self.name,
            max_attempts=self.max_attempts,
            priority=self.priority,
            timeout=self.timeout,
            limits=self.limits,
            isolate=self.isolate,
            _options=merged(self._options, given.given()),
            _signature=self._signature,
        )

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(
            f"a Task is immutable (cannot set {name!r}); use .using(...) for "
            "options of its jobs"
        )

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a Task is immutable (cannot delete {name!r})")

    def __repr__(self) -> str:
        shown = " ".join(
            f"{name}={dict(value) if name == 'meta' else value!r}"
            for name, value in self._options.items()
            if name != "connection"
        )
        return f"<jobq.Task {self.name!r}{' ' + shown if shown else ''}>"


#: The parameter through which a task receives its parents' results.
PARENT_RESULTS = "parent_results"


def register(
    queue: TaskQueue,
    registry: dict[str, Task[Any, Any]],
    func: Callable[P, R],
    **options: Unpack[TaskOptions],
) -> Task[P, R]:
    """Check ``func`` and the options, then register a ``Task`` in ``registry``.

    Raises ``TypeError`` (not a function, an async function, bad option
    types, ``isolate=True`` for a function a child process cannot import)
    or ``ValueError`` (a name that is not stable or already taken by another
    function).
    """
    if not callable(func):
        raise TypeError(f"@queue.task needs a function, not {func!r}")
    if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func):
        raise TypeError(
            f"{_describe(func)} is an async function; jobq runs tasks in worker "
            "threads, so a task must be a plain function"
        )
    check_names(options, TASK_OPTIONS, "task")
    found = task_name(func, options.get("name"))
    max_attempts = options.get("max_attempts")
    if max_attempts is None:
        max_attempts = queue.policy.max_attempts
    else:
        check_max_attempts(max_attempts)
    isolate = options.get("isolate", False)
    if not isinstance(isolate, bool):
        raise TypeError(f"isolate must be a bool, not {isolate!r}")
    if isolate:
        check_importable(func)
    try:
        signature: inspect.Signature | None = inspect.signature(func)
    except (TypeError, ValueError):  # some builtins: arguments are not checked
        signature = None
    task = Task(
        queue,
        func,
        name=found,
        max_attempts=max_attempts,
        priority=check_priority(options.get("priority", 0)),
        timeout=check_timeout(options.get("timeout")),
        limits=_task_limits(options.get("limits")),
        isolate=isolate,
        _signature=signature,
    )
    with _registering:
        existing = registry.get(found)
        if existing is not None and not _redefinition(existing.func, func):
            raise ValueError(
                f"a task named {found!r} is already registered with this "
                f"queue, for {_describe(existing.func)}; give "
                f"{_describe(func)} another name with @queue.task(name=...)"
            )
        registry[found] = task
    return task


def check_importable(func: Callable[..., Any]) -> None:
    """``TypeError`` unless ``func`` is a module-level function that another
    process finds by importing its module and qualified name: an isolated
    task's child process imports it so (a plain handler, a lambda, a nested
    function, a callable object or a function of ``__main__``, whose name
    differs in the child, cannot be isolated)."""
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", None)
    if (
        not isinstance(func, types.FunctionType)
        or not isinstance(module, str)
        or not isinstance(qualname, str)
        or module == "__main__"
        or "<" in qualname
    ):
        raise TypeError(
            f"isolate=True runs each attempt in a child process, which imports "
            f"the task's function by its module and name; {_describe(func)} is "
            "not a function defined at the top level of a module other than "
            "__main__, so no child process can find it"
        )


def _task_limits(value: object) -> tuple[str, ...]:
    """A task's ``limits`` (checked as a job's; declared limits are checked
    when its jobs are enqueued, as limits may be declared after the task)."""
    return () if value is None else check_job_limits(value)


def task_arguments(payload: object) -> tuple[list[Any], dict[str, Any]]:
    """The ``args`` and ``kwargs`` in a task job's payload (decoded).

    A missing key means none of that kind; anything else that is not
    ``{"args": [...], "kwargs": {...}}`` raises ``InvalidTaskPayload``.
    """
    value = payload
    if isinstance(value, dict) and value.keys() <= PAYLOAD_KEYS:
        args = value.get("args", [])
        kwargs = value.get("kwargs", {})
        if isinstance(args, list) and isinstance(kwargs, dict):
            return args, kwargs
    raise InvalidTaskPayload(
        'a task job\'s payload must be {"args": [...], "kwargs": {...}}, '
        f"not {repr(payload)[:200]}"
    )


def unknown_task(name: str) -> UnknownTask:
    return UnknownTask(f"no task named {name!r} is registered with this queue")


def check_task_name(name: object) -> str:
    """``name`` if a task may be called so: non-empty printable text (no
    control character, NUL or lone surrogate) without surrounding spaces;
    ``TypeError`` or ``ValueError`` otherwise."""
    if not isinstance(name, str):
        raise TypeError(f"a task's name must be a str, not {name!r}")
    if not name or not name.isprintable() or name.strip() != name:
        raise ValueError(
            "a task's name must be non-empty printable text without "
            f"surrounding spaces, not {name!r}"
        )
    return name


def task_name(func: Callable[..., Any], name: str | None = None) -> str:
    """The name a task of ``func`` is registered and stored by: ``name``
    checked, or ``module.qualname`` if that is stable across processes.
    ``TypeError`` or ``ValueError`` saying why there is none (what
    ``@queue.task`` raises); for integrations that register tasks later."""
    if name is not None:
        return check_task_name(name)
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise ValueError(
            f"{func!r} has no module and qualified name to find it by; "
            "pass @queue.task(name=...)"
        )
    if module == "__main__":
        raise ValueError(
            f"{qualname} is defined in __main__, whose name differs between "
            "processes (a worker that imports your script sees another module "
            "name); pass @queue.task(name=...), or move it into a module"
        )
    if "<" in qualname:  # <locals> (a nested function), <lambda>
        raise ValueError(
            f"{module}.{qualname} is not a module-level function, so it has no "
            "name another process can find it by; pass @queue.task(name=...) "
            "(and register it in every process), or define it at module level"
        )
    return f"{module}.{qualname}"


def _redefinition(old: Callable[..., Any], new: Callable[..., Any]) -> bool:
    """Whether ``new`` is the same module-level function defined again (a
    module reloaded, a notebook cell run again): it then replaces ``old``."""
    qualname = getattr(new, "__qualname__", None)
    return (
        isinstance(qualname, str)
        and "<" not in qualname
        and qualname == getattr(old, "__qualname__", None)
        and getattr(new, "__module__", None) == getattr(old, "__module__", None)
    )


def _describe(func: object) -> str:
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str):
        return f"{module}.{qualname}"
    return repr(func)
