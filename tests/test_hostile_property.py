"""The standing test of hostile input: any call either refuses with a
documented error and changes nothing, or succeeds and survives a restart.

A Hypothesis state machine drives the public API of a queue on every store
with arbitrary text (lone surrogates, NUL, control characters, 10 KB
strings) in keys, task names, payloads and handler errors, and arbitrary
ints for priorities, job ids and limits. After each call:

- if it raised, the error is one the README documents (``TypeError``,
  ``ValueError`` that is not a raw codec error, ``QueueFull``) and the queue
  shows exactly what it showed before;
- if it returned, a new queue on the same store (a restart) shows exactly
  what the queue showed after the call (the memory store keeps nothing
  across a restart: there only the first half is checked).

Failed attempts are recorded with their real error, never as a process
that died. The examples are few and fixed (``derandomize``), so CI runs the
same inputs each time in a few seconds per store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test
from places import Place, places

import jobq
from jobq import JobState
from jobq.stores import Store

EXAMPLES = {"memory": 100, "json": 40, "sqlite": 40, "postgres": 15}
STEPS = 12

#: Characters that break naive code: NUL, lone surrogates, controls, bidi.
ODD = ["\x00", "\udcff", "\ud800", "\x1b", "\n", "\r", "\x9b", "\u202e", "é",
       "\U0001f600"]  # fmt: skip
TEXT = st.one_of(
    st.text(max_size=8),
    st.text(st.sampled_from(ODD), max_size=6),
    st.text(st.characters(categories=["Cs", "Cc", "Zl"]), max_size=6),
    st.builds(lambda c, n: c * n, st.sampled_from(["x", "\udcff", "\x00"]),
              st.integers(10_000, 10_240)),
)  # fmt: skip
INTS = st.one_of(
    st.integers(-3, 3),
    st.integers(),
    st.sampled_from([2**31 - 1, 2**31, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1,
                     10**30, 10**400]),
)  # fmt: skip
KEYS = st.one_of(st.none(), st.sampled_from(["a", "b"]), TEXT)
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), TEXT,
                   st.floats(allow_nan=False, allow_infinity=False))  # fmt: skip
JSON = st.recursive(
    LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.one_of(TEXT, st.integers(), st.booleans()), inner, max_size=3
        )
    ),
    max_leaves=6,
)
#: A payload that makes the handler fail with this text, or one that succeeds.
PAYLOADS = st.one_of(JSON, st.builds(lambda text: {"fail": text}, TEXT))


def handler(job: jobq.Job[Any]) -> None:
    payload = job.payload
    if isinstance(payload, dict) and isinstance(payload.get("fail"), str):
        raise ValueError(payload["fail"])


def task_function(*args: Any, **kwargs: Any) -> None:
    if isinstance(kwargs.get("fail"), str):
        raise ValueError(kwargs["fail"])


def documented(exc: BaseException) -> bool:
    """Whether ``exc`` is an error the README promises for bad input."""
    if isinstance(exc, UnicodeError):
        return False  # a raw codec error leaked out of a store
    return isinstance(exc, TypeError | ValueError | jobq.QueueFull)


class HostileMachine(RuleBasedStateMachine):
    new_place: ClassVar[Callable[[], Place]]

    def __init__(self) -> None:
        super().__init__()
        self.place = self.new_place()
        self.tasks: dict[str, jobq.Task[..., None]] = {}
        self.options: dict[str, Any] = {}
        self.queue = self.open_queue()
        self.ids: list[int] = []

    def open_queue(self) -> jobq.JobQueue[Any]:
        queue: jobq.JobQueue[Any] = jobq.JobQueue(
            handler, store=self.place.store(), max_attempts=1, **self.options
        )
        for name in self.tasks:
            self.tasks[name] = queue.task(name=name)(task_function)
        return queue

    def teardown(self) -> None:
        self.queue.close()
        self.place.remove()

    # -- what the queue shows ---------------------------------------------------------

    def shown(self, queue: jobq.JobQueue[Any] | None = None) -> tuple[Any, ...]:
        queue = queue or self.queue
        stats = queue.stats()
        pending = queue.store.list_jobs(JobState.PENDING)
        dead = queue.dead_jobs()
        for record in dead:
            assert record.errors, record
            assert record.errors[-1].type == "ValueError", record  # never ProcessDied
        return (
            (stats.pending, stats.running, stats.dead),
            [(r.id, r.payload, r.key, r.priority, r.task) for r in pending],
            [(r.id, r.payload, r.key, r.last_error, r.errors[-1].traceback)
             for r in dead],
        )  # fmt: skip

    def attempt(self, call: Callable[[], Any]) -> Any:
        """Run ``call`` and check the promise above; what it returned."""
        before = self.shown()
        try:
            result = call()
        except Exception as exc:  # checked below, outside the handler
            error: Exception | None = exc
        else:
            error = None
        if error is not None:
            assert documented(error), f"undocumented error: {error!r}"
            assert self.shown() == before, f"{error!r} changed the queue"
            return None
        after = self.shown()
        if self.place.persistent:
            self.queue.close()
            self.queue = self.open_queue()
            assert self.shown() == after, "a restart changed what the queue shows"
        return result

    def remember(self, added: Any) -> None:
        if isinstance(added, jobq.Enqueued):
            added = [added]
        for enqueued in added or []:
            self.ids.append(enqueued.id)

    # -- the rules ------------------------------------------------------------------

    @rule(payload=PAYLOADS, key=KEYS, priority=INTS)
    def enqueue(self, payload: Any, key: Any, priority: Any) -> None:
        added = self.attempt(
            lambda: self.queue.enqueue(payload, key=key, priority=priority)
        )
        self.remember(added)

    @rule(payloads=st.lists(PAYLOADS, max_size=3), key=KEYS)
    def enqueue_many(self, payloads: list[Any], key: Any) -> None:
        self.remember(self.attempt(lambda: self.queue.enqueue_many(payloads, key=key)))

    @rule(name=TEXT, max_attempts=st.one_of(st.none(), INTS), priority=INTS)
    def register_task(self, name: str, max_attempts: Any, priority: Any) -> None:
        def register() -> None:
            self.tasks[name] = self.queue.task(
                name=name, max_attempts=max_attempts, priority=priority
            )(task_function)

        self.attempt(register)

    @rule(data=st.data(), fail=st.one_of(st.none(), TEXT), key=KEYS)
    def enqueue_task(self, data: st.DataObject, fail: Any, key: Any) -> None:
        if not self.tasks:
            return
        task = self.tasks[data.draw(st.sampled_from(sorted(self.tasks)))]
        kwargs = {} if fail is None else {"fail": fail}
        self.remember(self.attempt(lambda: task.using(key=key).enqueue(**kwargs)))

    @rule()
    def run_pending(self) -> None:
        self.attempt(self.queue.run_pending)

    @rule(job_id=INTS, use_known=st.booleans())
    def manage(self, job_id: int, use_known: bool) -> None:
        if use_known and self.ids:
            job_id = self.ids[job_id % len(self.ids)]
        self.attempt(lambda: self.queue.get(job_id))
        self.attempt(lambda: self.queue.cancel(job_id))
        self.attempt(lambda: self.queue.retry_dead(job_id))
        self.attempt(lambda: self.queue.delete_dead(job_id))

    @rule(
        max_pending=st.one_of(st.none(), INTS),
        dead_letter_limit=INTS,
        max_payload_bytes=st.one_of(st.none(), INTS),
    )
    def reconfigure(
        self, max_pending: Any, dead_letter_limit: Any, max_payload_bytes: Any
    ) -> None:
        """A restart with other limits: refused at construction, or in force."""
        options = {
            "max_pending": max_pending,
            "dead_letter_limit": dead_letter_limit,
            "max_payload_bytes": max_payload_bytes,
        }
        try:
            jobq.JobQueue(handler, **options)
        except (TypeError, ValueError):
            return  # refused at construction, as documented
        self.options = options
        self.attempt(self.restart)

    def restart(self) -> None:
        self.queue.close()
        self.queue = self.open_queue()


def test_hostile_calls_refuse_cleanly_or_survive_a_restart(
    store_kind: str, make_store: Callable[..., Store]
) -> None:
    template = make_store(queue_clock=True)  # PostgreSQL: skips without a server
    machine = type(
        "Hostile", (HostileMachine,),
        {"new_place": staticmethod(places(store_kind, template))},
    )  # fmt: skip
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=EXAMPLES[store_kind],
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        ),
    )


def test_the_strategies_reach_the_odd_cases() -> None:
    """The text strategy yields what the test is for (a guard against a
    strategy that quietly stopped producing surrogates or NUL)."""
    seen: set[str] = set()

    @given(TEXT)
    @settings(max_examples=300, derandomize=True, database=None)
    def draw(text: str) -> None:
        seen.update(c for c in text if c == "\x00" or "\ud800" <= c <= "\udfff")

    draw()
    assert "\x00" in seen
    assert any("\ud800" <= c <= "\udfff" for c in seen)
