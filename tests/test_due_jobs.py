"""The memory store's due jobs come out in run order however they went in."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jobq.stores._due import DueJobs

items = st.lists(
    st.tuples(st.integers(-2, 2), st.sampled_from([0.0, 1.0, 2.0]), st.integers(1, 50)),
    unique_by=lambda item: item[2],
)


@given(items, st.lists(st.booleans()))
def test_pops_come_out_in_run_order_with_pushes_in_between(
    pushed: list[tuple[int, float, int]], pop_after: list[bool]
) -> None:
    due = DueJobs()
    held: list[tuple[int, float, int]] = []

    def pop_next() -> None:
        assert due.peek() == min(held)
        assert due.pop() == min(held)
        held.remove(min(held))

    for item, pop in zip(pushed, pop_after + [False] * len(pushed), strict=False):
        due.push(item)
        held.append(item)
        if pop:
            pop_next()
    while held:
        pop_next()
    assert not due
    assert due.peek() is None
