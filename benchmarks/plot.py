"""The growth plot: microseconds per operation against jobs queued, one panel
per operation, one line per store, both axes logarithmic (the stores' costs
differ a hundredfold; a flat line is the goal). Written with matplotlib's Agg
backend, so no display is needed.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from benchmarks.growth import GrowthTable
from benchmarks.harness import Table


def size_label(size: int) -> str:
    for scale, suffix in ((1_000_000, "M"), (1_000, "k")):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{suffix}"
    return f"{size:,}"


def write_growth(tables: Sequence[Table], path: str) -> bool:
    """Plot the growth table among ``tables`` to ``path`` (PNG); ``False``
    when there is none, or matplotlib is not installed."""
    table = next((t for t in tables if isinstance(t, GrowthTable)), None)
    if table is None:
        return False
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no growth plot", file=sys.stderr)
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    operations = list(dict.fromkeys(c.operation for c in table.curves))
    stores = list(dict.fromkeys(c.store for c in table.curves))
    sizes = sorted({size for c in table.curves for size in c.samples})
    figure, axes = plt.subplots(
        1,
        len(operations),
        figsize=(4.2 * len(operations), 4.6),
        squeeze=False,
        layout="constrained",
    )
    for axis, operation in zip(axes[0], operations, strict=True):
        for curve in (c for c in table.curves if c.operation == operation):
            xs = sorted(curve.samples)
            medians = [curve.median(x) for x in xs]
            below = [
                m - min(curve.samples[x]) for x, m in zip(xs, medians, strict=True)
            ]
            above = [
                max(curve.samples[x]) - m for x, m in zip(xs, medians, strict=True)
            ]
            axis.errorbar(
                xs,
                medians,
                yerr=[below, above],
                marker="o",
                capsize=3,
                color=f"C{stores.index(curve.store)}",
                label=curve.store,
            )
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xticks(sizes, [size_label(s) for s in sizes])
        axis.xaxis.set_minor_locator(NullLocator())
        axis.grid(True, which="major", alpha=0.3)
        axis.set_title(operation)
        axis.set_xlabel("jobs queued")
    axes[0][0].set_ylabel("µs per operation (median, min-max; lower is better)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncol=len(stores))
    figure.suptitle(table.title)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True
