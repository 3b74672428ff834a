"""The memory store's due jobs, in run order: (-priority, run_at, id).

One heap would do, but popping a heap of a million items misses the CPU cache
at every level, so a claim cost twice as much with 1M jobs queued as with 1k.
Jobs mostly arrive in run order (due now, each id larger than the last), so
each priority has a FIFO lane for those, O(1) at both ends, and only jobs that
arrive out of order (retries, revived jobs, delayed jobs falling due) go to
the heap. The next job is the smallest of the heap's top and the lanes' heads
(one lane per priority in use: a handful).
"""

from __future__ import annotations

import heapq
from collections import deque

Item = tuple[int, float, int]  # (-priority, run_at, id)


class DueJobs:
    __slots__ = ("_heap", "_lanes")

    def __init__(self) -> None:
        self._heap: list[Item] = []
        self._lanes: dict[int, deque[Item]] = {}  # by -priority

    def __bool__(self) -> bool:
        return bool(self._heap or self._lanes)

    def push(self, item: Item) -> None:
        lane = self._lanes.get(item[0])
        if lane is None:
            self._lanes[item[0]] = deque((item,))
        elif lane[-1] < item:
            lane.append(item)
        else:
            heapq.heappush(self._heap, item)

    def peek(self) -> Item | None:
        """The next item, left in place; ``None`` if there is none."""
        best = self._heap[0] if self._heap else None
        for lane in self._lanes.values():
            if best is None or lane[0] < best:
                best = lane[0]
        return best

    def pop(self) -> Item:
        """Remove and return the next item (``IndexError`` if there is none).
        ``peek``'s search, inlined: a claim pops once per job."""
        heap = self._heap
        best = heap[0] if heap else None
        found = None  # the lane that holds ``best``; None: the heap does
        for lane in self._lanes.values():
            if best is None or lane[0] < best:
                best, found = lane[0], lane
        if found is not None:
            head = found.popleft()
            if not found:
                del self._lanes[head[0]]
            return head
        if best is None:
            raise IndexError("no due jobs")
        return heapq.heappop(heap)
