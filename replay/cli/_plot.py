"""Drawing a stream's frontier history: a step line per part, the merged frontier as a wide band beneath
them, finished parts marked; PNG and SVG through matplotlib's Agg renderer, HTML as a page with the SVG
inline (no other file, no script).

matplotlib is imported here only, so commands that draw nothing start fast; no global backend is set
(the figure is rendered by its own Agg canvas).
"""

from __future__ import annotations

import html
import io
import math
import os
from typing import TYPE_CHECKING

from eventlog.antichain import Antichain

from ._common import frontier_text

if TYPE_CHECKING:
    from .frontier import FrontierHistory

_MARKER_LIMIT = 150
"""Draw a dot at each part's own events while there are at most this many progress events."""


def _value(f: Antichain, component: int | None) -> float:
    """The y value of a frontier: its least time (int times) or the least value of one component over its
    elements (product times, the lower bound); NaN when the frontier is empty (finished)."""
    if f.is_empty():
        return math.nan
    if component is None:
        return float(min(f))  # type: ignore[type-var]
    return float(min(t[component] for t in f))  # type: ignore[index]


def _colors(n: int) -> list:
    from matplotlib import colormaps

    if n <= 20:
        cmap = colormaps["tab10" if n <= 10 else "tab20"]
        return [cmap(i) for i in range(n)]
    cmap = colormaps["viridis"]
    return [cmap(i / max(1, n - 1)) for i in range(n)]


def _figure(history: "FrontierHistory"):  # noqa: ANN202 - a matplotlib Figure
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    header = history.header
    arity = header.time_type.arity
    panels = [None] if arity == 0 else list(range(arity))
    steps = history.steps
    last_x = steps[-1].step if steps else 1
    minimum = Antichain([header.time_type.minimum])
    many = header.peers > 6
    fig = Figure(figsize=(11 if many else 10, 1.6 + 3.4 * len(panels)), dpi=120, layout="constrained")
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    colors = _colors(header.peers)
    final = history.final()
    final_stream = steps[-1].stream_frontier if steps else minimum
    # lower parts draw wider lines, so where parts share a frontier every colour stays visible
    widths = [3.2 - 2.0 * p / max(1, header.peers - 1) for p in range(header.peers)]
    for ax, comp in zip(axes, panels):
        # the merged frontier: a wide translucent band under the parts' lines
        xs = [0] + [s.step for s in steps]
        ys = [_value(minimum, comp)] + [_value(s.stream_frontier, comp) for s in steps]
        xs.append(last_x)
        ys.append(ys[-1])
        ax.plot(xs, ys, drawstyle="steps-post", color="black", alpha=0.22, linewidth=7, solid_capstyle="butt",
                label="stream (merged)", zorder=1)
        finished_at = next((s.step for s in steps if s.stream_frontier.is_empty()), None)
        for p in range(header.peers):
            own = [s for s in steps if s.part == p]
            pxs = [0] + [s.step for s in own]
            pys = [_value(minimum, comp)] + [_value(s.part_frontier, comp) for s in own]
            done = next((s.step for s in own if s.part_frontier.is_empty()), None)
            if done is None:
                pxs.append(last_x)
                pys.append(pys[-1])
            holds = done is None and bool(set(final[p]) & set(final_stream))
            label = f"part {p}" + (f" (finished at {done})" if done is not None else
                                   " (open, holds the stream back)" if holds else " (open)")
            small = len(steps) <= _MARKER_LIMIT
            ax.plot(pxs, pys, drawstyle="steps-post", color=colors[p], linewidth=widths[p], label=label, zorder=3,
                    marker="o" if small else None, markersize=3,
                    markevery=list(range(1, len(own) + 1)) if small else None)
            if done is not None:
                finite = [y for y in pys if not math.isnan(y)]
                ax.plot([done], [finite[-1] if finite else 0], marker="X", markersize=8, color=colors[p], zorder=4,
                        linestyle="none")
        if finished_at is not None:
            ax.axvline(finished_at, color="black", linestyle=":", linewidth=1)
            ax.annotate("stream finished", xy=(finished_at, 1), xycoords=("data", "axes fraction"),
                        xytext=(-4, -4), textcoords="offset points", ha="right", va="top", fontsize=9)
        ax.set_ylabel("frontier time" if comp is None else f"frontier, component {comp}\n(lower bound)")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
        ax.set_xlim(0, last_x + max(0.5, last_x * 0.01))
        if not steps:
            ax.text(0.5, 0.5, "no progress events yet: every part is at the minimum time", ha="center",
                    va="center", transform=ax.transAxes)
    axes[-1].set_xlabel("progress events, in replay order (lowest time first)")
    axes[0].set_title(
        f"Frontier of stream '{header.stream}': {header.peers} parts, {len(steps)} progress events\n"
        f"{history.uri}   ·   X = part finished   ·   band = merged frontier (the least of the parts')",
        fontsize=10, loc="left",
    )
    handles, labels = axes[0].get_legend_handles_labels()
    if many:
        fig.legend(handles, labels, loc="outside right upper", fontsize=8, ncols=1 if header.peers <= 20 else 2)
    else:
        axes[0].legend(handles, labels, loc="lower right", fontsize=8)
    return fig


def write_plot(history: "FrontierHistory", path: str) -> None:
    """Write the frontier plot to ``path``: ``.png``, ``.svg``, or ``.html`` (a page with the SVG inline
    and a table of the final frontiers)."""
    fig = _figure(history)
    suffix = os.path.splitext(path)[1].lower()
    if suffix in (".png", ".svg"):
        fig.savefig(path, format=suffix[1:])
        return
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]  # drop the XML declaration and doctype: the SVG sits inside HTML
    rows = "\n".join(
        f"<tr><td>{p}</td><td>{html.escape(frontier_text(f))}</td></tr>" for p, f in history.final().items()
    )
    title = html.escape(f"Frontier of stream {history.header.stream}")
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
svg {{ max-width: 100%; height: auto; }}
table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 0.2em 0.8em; text-align: left; }}
</style>
</head>
<body>
<h1>{title}</h1>
<p>Log {html.escape(history.uri)}: {history.header.peers} parts, {len(history.steps)} progress events,
time type {html.escape(history.header.time_type.name)}.</p>
{svg}
<h2>Final frontiers</h2>
<table><tr><th>part</th><th>frontier</th></tr>
{rows}
</table>
</body>
</html>
"""
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
