"""The overview's charts, drawn on the server as SVG shapes (no script, no
CDN, nothing the page's CSP refuses): the geometry is computed here, the
template writes it out, and a table beside each chart gives the numbers.

A chart covers the last hour per minute, or the last day per ten minutes
(``RANGES``); counts are summed over a bin, the depth sampled last in it is
shown for it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from jobq.activity import ActivityMinute

#: The ranges a chart may show: minutes covered, and minutes per bin.
RANGES = {"1h": (60, 1), "24h": (1440, 10)}
WIDTH, HEIGHT = 600.0, 120.0


@dataclass(frozen=True, slots=True)
class Bin:
    """The minutes of one bin, summed (counts) or last sampled (depth)."""

    start: float
    succeeded: int
    failed: int
    dead: int
    cancelled: int
    pending: int | None
    running: int | None
    latency: float | None


@dataclass(frozen=True, slots=True)
class Rect:
    x: float
    y: float
    width: float
    height: float
    kind: str  # its CSS class
    title: str  # shown on hover


@dataclass(frozen=True, slots=True)
class Line:
    kind: str
    points: str  # the SVG polyline's
    title: str


@dataclass(frozen=True, slots=True)
class Chart:
    """What the template draws: bars or lines in a ``WIDTH`` by ``HEIGHT``
    box, the value at its top (``top``, the scale's) and a summary for
    screen readers (``label``)."""

    label: str
    top: str
    rects: tuple[Rect, ...] = ()
    lines: tuple[Line, ...] = ()
    width: float = WIDTH
    height: float = HEIGHT


def bins(minutes: Sequence[ActivityMinute], per: int) -> list[Bin]:
    """``minutes`` (oldest first) in bins of ``per`` minutes."""
    found = []
    for at in range(0, len(minutes), per):
        group = minutes[at : at + per]
        sampled = [m for m in group if m.pending is not None]
        last = sampled[-1] if sampled else None
        found.append(
            Bin(
                group[0].start,
                sum(m.succeeded for m in group),
                sum(m.failed for m in group),
                sum(m.dead for m in group),
                sum(m.cancelled for m in group),
                None if last is None else last.pending,
                None if last is None else last.running,
                None if last is None else last.latency,
            )
        )
    return found


def scale_top(largest: float) -> float:
    """The smallest of 1, 2 or 5 times a power of ten at or above
    ``largest`` (1 for nothing): the top of a chart's scale."""
    if largest <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(largest))
    for step in (1.0, 2.0, 5.0, 10.0):
        if largest <= step * power:
            return step * power
    return 10.0 * power  # pragma: no cover - the loop always returns


def outcomes_chart(shown: Sequence[Bin]) -> Chart:
    """Attempts per bin, stacked: succeeded below, failed above."""
    top = scale_top(max((b.succeeded + b.failed for b in shown), default=0))
    width = WIDTH / max(len(shown), 1)
    rects = []
    for index, b in enumerate(shown):
        x = index * width
        base = HEIGHT
        for kind, count in (("succeeded", b.succeeded), ("failed", b.failed)):
            if count:
                height = HEIGHT * count / top
                base -= height
                box = (round(x, 2), round(base, 2), round(width * 0.9, 2))
                rects.append(Rect(*box, round(height, 2), kind, f"{count} {kind}"))
    total = sum(b.succeeded for b in shown), sum(b.failed for b in shown)
    label = f"Attempts: {total[0]} succeeded, {total[1]} failed"
    return Chart(label, _number(top), tuple(rects))


def depth_chart(shown: Sequence[Bin]) -> Chart:
    """Jobs pending and running as sampled, a line each (gaps unsampled)."""
    values = [v for b in shown for v in (b.pending, b.running) if v is not None]
    top = scale_top(max(values, default=0))
    lines = tuple(
        Line(kind, _points([getattr(b, kind) for b in shown], top), kind)
        for kind in ("pending", "running")
    )
    last = next((b for b in reversed(shown) if b.pending is not None), None)
    label = (
        "Depth: not sampled (no process ran workers)"
        if last is None
        else f"Depth: {last.pending} pending, {last.running} running when last sampled"
    )
    return Chart(label, _number(top), lines=lines)


def latency_chart(shown: Sequence[Bin]) -> Chart:
    """How long the job claimed next had waited, as sampled (seconds)."""
    values = [b.latency for b in shown if b.latency is not None]
    top = scale_top(max(values, default=0.0))
    line = Line("latency", _points([b.latency for b in shown], top), "latency")
    label = (
        "Latency: nothing due when sampled"
        if not values
        else f"Latency: at most {max(values):.1f} s"
    )
    return Chart(label, f"{_number(top)} s", lines=(line,))


def _points(values: Sequence[float | None], top: float) -> str:
    """A polyline's points for ``values`` (one per bin, centred), skipping
    the unsampled ones."""
    width = WIDTH / max(len(values), 1)
    return " ".join(
        f"{round(index * width + width / 2, 2)},{round(HEIGHT - HEIGHT * v / top, 2)}"
        for index, v in enumerate(values)
        if v is not None
    )


def _number(value: float) -> str:
    return f"{value:g}"
