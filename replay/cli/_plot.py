"""Drawing a stream's frontier history: a step line per part, the merged frontier as a wide band beneath
them, finished parts marked; against the wall clock (the events' write times) with a lag panel beneath where
the log records write times, else against the progress events in replay order. PNG and SVG through
matplotlib's Agg renderer, HTML as a page with the SVG inline (no other file, no script).

``frontier_series`` computes what is drawn, as data (tests check it rather than pixels).

matplotlib is imported here only, so commands that draw nothing start fast; no global backend is set
(the figure is rendered by its own Agg canvas).
"""

from __future__ import annotations

import html
import io
import math
import os
from dataclasses import dataclass, field
from typing import Any

from eventlog.antichain import Antichain, MutableAntichain
from eventlog.time import Time

from ._common import counted, frontier_text, time_text
from ._history import FrontierHistory, FrontierStep

_MARKER_LIMIT = 150
"""Draw a dot at each part's own events while there are at most this many progress events."""

_GAP_SHARE = 0.08
"""A stretch without any write longer than this share of the plotted span (and than ``_GAP_MIN_MS``) is shaded
as a pause."""
_GAP_MIN_MS = 5_000


def _value(f: Antichain, component: int | None) -> float:
    """The y value of a frontier: its least time (int times) or the least value of one component over its
    elements (product times, the lower bound); NaN when the frontier is empty (finished)."""
    if f.is_empty():
        return math.nan
    if component is None:
        return float(min(f))  # type: ignore[type-var]
    return float(min(t[component] for t in f))  # type: ignore[index]


@dataclass
class Line:
    """A step line (drawn ``steps-post``): ``ys[i]`` holds from ``xs[i]`` until ``xs[i + 1]``."""

    xs: list[float] = field(default_factory=list)
    ys: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Completion:
    """A time that became complete: when its first record was written and when the stream's frontier passed it
    (the write time of the Progress event that completed it), in ms since the epoch."""

    time: Time
    first_write: int
    completed: int

    @property
    def lag_ms(self) -> int:
        """Milliseconds from the first record's write to the completion (the writers' clocks)."""
        return self.completed - self.first_write


@dataclass
class FrontierSeries:
    """What the frontier plot draws, as data (``frontier_series``)."""

    wallclock: bool
    """x values are write times in ms since the epoch; otherwise step numbers (progress events in replay order)."""
    components: list[int | None]
    """One panel per entry: None for int times, the component index for product times."""
    x_range: tuple[float, float]
    """The x values the plot spans."""
    stream: dict[int | None, Line]
    """The stream's merged frontier per component; on the wall clock recomputed in write-time order (the meet of
    the parts' frontiers as written), otherwise after each event in replay order."""
    parts: dict[int, dict[int | None, Line]]
    """Each part's frontier per component (a point at each of its Progress events)."""
    finished: dict[int, float]
    """x where each finished part finished."""
    stream_finished: float | None
    """x where the stream's frontier became empty."""
    holds_back: set[int]
    """Open parts whose frontier holds the stream's frontier back at the end."""
    completions: list[Completion] = field(default_factory=list)
    """Wall clock only: each time with records that became complete, in completion order."""
    waiting: list[tuple[Time, int]] = field(default_factory=list)
    """Wall clock only: ``(time, first write)`` of the times with records that are not complete at the end."""
    pauses: list[tuple[int, int]] = field(default_factory=list)
    """Wall clock only: ``(from, to)`` stretches without any write (of the Progress events, and of the Messages
    events where the history has them), longer than a share of the span."""


def frontier_series(history: "FrontierHistory") -> FrontierSeries:
    """The lines, completions and pauses of ``history``'s plot. On the wall clock (every Progress event has a
    write time) x is the write time and the stream's frontier is replayed in write-time order; each part's
    events keep their own order (a write time earlier than the part's previous one counts as that one)."""
    header = history.header
    arity = header.time_type.arity
    comps: list[int | None] = [None] if arity == 0 else list(range(arity))
    minimum = header.time_type.minimum
    wallclock = history.wallclock
    running: dict[int, int] = {}

    def x_of(step: "FrontierStep") -> float:
        if not wallclock:
            return float(step.step)
        running[step.part] = max(running.get(step.part, step.ts), step.ts)  # type: ignore[arg-type]
        return float(running[step.part])

    placed = [(x_of(s), s) for s in history.steps]
    order = sorted(placed, key=lambda p: (p[0], p[1].step)) if wallclock else placed
    writes = [x for x, _ in placed] + [float(w) for w in history.message_writes] if wallclock else []
    if wallclock:
        lo, hi = min(writes), max(writes)
        if history.since_ts is not None:
            lo = max(lo, float(history.since_ts))
        hi = max(hi, lo + 1)
    else:
        lo, hi = 0.0, float(history.steps[-1].step if history.steps else 1)
    start = min([lo] + [x for x, _ in placed])  # lines start before the window when it cuts them
    stream = {c: Line([start], [_value(Antichain([minimum]), c)]) for c in comps}
    parts = {p: {c: Line([start], [_value(Antichain([minimum]), c)]) for c in comps} for p in range(header.peers)}
    finished: dict[int, float] = {}
    stream_finished = None
    counts = MutableAntichain([(minimum, header.peers)])
    pending = sorted(history.first_writes)
    completions: list[Completion] = []
    for x, s in order:
        for c in comps:
            parts[s.part][c].xs.append(x)
            parts[s.part][c].ys.append(_value(s.part_frontier, c))
        if s.part_frontier.is_empty():
            finished.setdefault(s.part, x)
        if counts.update_iter(s.updates):
            f = counts.frontier
            for c in comps:
                stream[c].xs.append(x)
                stream[c].ys.append(_value(f, c))
            if f.is_empty() and stream_finished is None:
                stream_finished = x
            if wallclock and pending:
                if arity == 0:  # int times complete in order: a prefix of the sorted pending times
                    n = next((i for i, t in enumerate(pending) if f.less_equal(t)), len(pending))
                    done, pending = pending[:n], pending[n:]
                else:
                    done = [t for t in pending if not f.less_equal(t)]
                    if done:
                        gone = set(done)
                        pending = [t for t in pending if t not in gone]
                completions += [Completion(t, history.first_writes[t], int(x)) for t in done]
    for p in parts:  # an open part holds its frontier to the end of the plot
        if p not in finished:
            for c in comps:
                parts[p][c].xs.append(hi)
                parts[p][c].ys.append(parts[p][c].ys[-1])
    if stream_finished is None:
        for c in comps:
            stream[c].xs.append(hi)
            stream[c].ys.append(stream[c].ys[-1])
    if start < lo:  # --since-ts: each line starts at the window with the value it held then
        for line in [*stream.values(), *(line for by_comp in parts.values() for line in by_comp.values())]:
            _clip(line, lo)
    final = history.final()
    last = counts.frontier if wallclock else (history.steps[-1].stream_frontier if history.steps
                                              else Antichain([minimum]))
    holds = {p for p, f in final.items() if not f.is_empty() and set(f) & set(last)}
    series = FrontierSeries(wallclock, comps, (lo, hi), stream, parts, finished, stream_finished, holds)
    if wallclock:
        series.completions = completions
        series.waiting = [(t, history.first_writes[t]) for t in pending]
        series.pauses = _pauses(sorted(writes), lo, hi)
    return series


def _clip(line: Line, lo: float) -> None:
    """Drop the points of a step line before ``lo``, starting it at ``lo`` with the value it held there."""
    held = [i for i, x in enumerate(line.xs) if x <= lo]
    if held:
        i = held[-1]
        line.xs[: i + 1] = [lo]
        line.ys[: i + 1] = [line.ys[i]]


def _pauses(writes: list[float], lo: float, hi: float) -> list[tuple[int, int]]:
    """The stretches between consecutive writes inside ``[lo, hi]`` long enough to call a pause."""
    least = max(_GAP_MIN_MS, _GAP_SHARE * (hi - lo))
    inside = [w for w in writes if lo <= w <= hi]
    return [(int(a), int(b)) for a, b in zip(inside, inside[1:]) if b - a >= least]


def _colors(n: int) -> list:
    from matplotlib import colormaps

    if n <= 20:
        cmap = colormaps["tab10" if n <= 10 else "tab20"]
        return [cmap(i) for i in range(n)]
    cmap = colormaps["viridis"]
    return [cmap(i / max(1, n - 1)) for i in range(n)]


def _duration(ms: float) -> str:
    """``850 ms``, ``12.5 s``, ``4 min 10 s``, ``2 h 5 min``."""
    if ms < 1000:
        return f"{ms:.0f} ms"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


def _lag_unit(max_ms: float) -> tuple[str, float]:
    """The unit the lag panel's y-axis counts in, and its size in ms."""
    if max_ms < 2_000:
        return "ms", 1.0
    if max_ms < 180_000:
        return "s", 1000.0
    if max_ms < 3 * 3_600_000:
        return "min", 60_000.0
    return "h", 3_600_000.0


def _figure(history: "FrontierHistory"):  # noqa: ANN202 - a matplotlib Figure
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    header = history.header
    series = frontier_series(history)
    wallclock = series.wallclock
    lag_panel = wallclock and bool(series.completions or series.waiting)
    comps = series.components
    many = header.peers > 6
    heights = [3.4] * len(comps) + ([2.4] if lag_panel else [])
    fig = Figure(figsize=(11 if many else 10, 1.6 + sum(heights)), dpi=120, layout="constrained")
    axes = fig.subplots(len(heights), 1, sharex=True, squeeze=False, height_ratios=heights)[:, 0]
    if wallclock:
        import datetime as dt

        from matplotlib import dates as mdates

        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)

        def to_x(ms: float) -> Any:
            return epoch + dt.timedelta(milliseconds=ms)

        locator = mdates.AutoDateLocator(tz=dt.timezone.utc, minticks=4, maxticks=9)
        axes[-1].xaxis.set_major_locator(locator)
        axes[-1].xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=dt.timezone.utc))
    else:
        def to_x(v: float) -> Any:
            return v
    colors = _colors(header.peers)
    small = len(history.steps) <= _MARKER_LIMIT
    fine = series.x_range[1] - series.x_range[0] < 120_000  # a short span: times with milliseconds
    # lower parts draw wider lines, so where parts share a frontier every colour stays visible
    widths = [3.2 - 2.0 * p / max(1, header.peers - 1) for p in range(header.peers)]
    for ax, comp in zip(axes, comps):
        band = series.stream[comp]
        ax.plot([to_x(x) for x in band.xs], band.ys, drawstyle="steps-post", color="black", alpha=0.22, linewidth=7,
                solid_capstyle="butt", label="stream (merged)", zorder=1)
        for p in range(header.peers):
            line = series.parts[p][comp]
            done = series.finished.get(p)
            when = (_clock(done, fine) if wallclock else f"{done:.0f}") if done is not None else ""
            label = f"part {p}" + (f" (finished at {when})" if done is not None else
                                   " (open, holds the stream back)" if p in series.holds_back else " (open)")
            n_own = len(line.xs) - (1 if done is None else 0)  # the last point of an open part is the plot's end
            ax.plot([to_x(x) for x in line.xs], line.ys, drawstyle="steps-post", color=colors[p], linewidth=widths[p],
                    label=label, zorder=3, marker="o" if small else None, markersize=3,
                    markevery=list(range(1, n_own)) if small else None)
            if done is not None:
                finite = [y for y in line.ys if not math.isnan(y)]
                ax.plot([to_x(done)], [finite[-1] if finite else 0], marker="X", markersize=8, color=colors[p],
                        zorder=4, linestyle="none")
        if series.stream_finished is not None:
            ax.axvline(to_x(series.stream_finished), color="black", linestyle=":", linewidth=1)
            ax.annotate("stream finished", xy=(to_x(series.stream_finished), 0.5), xycoords=("data", "axes fraction"),
                        xytext=(-3, 0), textcoords="offset points", ha="right", va="center", rotation=90, fontsize=9)
        ax.set_ylabel("frontier time" if comp is None else f"frontier, component {comp}\n(lower bound)")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        finite = [y for line in [series.stream[comp]] + [series.parts[p][comp] for p in series.parts]
                  for y in line.ys if not math.isnan(y)]
        if finite and max(finite) - min(finite) < 1:  # a flat panel: whole-number ticks around it
            ax.set_ylim(min(finite) - 1, max(finite) + 1)
        ax.grid(True, alpha=0.3)
        if not history.steps:
            ax.text(0.5, 0.5, "no progress events yet: every part is at the minimum time", ha="center",
                    va="center", transform=ax.transAxes)
    if lag_panel:
        _draw_lag(axes[-1], series, to_x)
    for ax in axes:
        for a, b in series.pauses:
            ax.axvspan(to_x(a), to_x(b), color="#f2c14e", alpha=0.18, linewidth=0, zorder=0)
    for a, b in series.pauses:
        axes[0].annotate(f"no writes for {_duration(b - a)}", xy=(to_x(a + (b - a) / 2), 0.02),
                         xycoords=("data", "axes fraction"), ha="center", va="bottom", fontsize=8, color="#8a6d1f")
    lo, hi = series.x_range
    pad = (hi - lo) * 0.01 if wallclock else max(0.5, hi * 0.01)
    axes[-1].set_xlim(to_x(lo), to_x(hi + pad))
    if wallclock:
        axes[-1].set_xlabel("write time (UTC, the writers' clocks)")
        span = f"written {_stamp(lo, fine)} – {_clock(hi, fine)} UTC ({_duration(hi - lo)})"
    else:
        axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
        axes[-1].set_xlabel("progress events, in replay order (lowest time first)")
        span = ("no write times in this log: x is the progress events in replay order" if history.steps
                else "no progress events yet")
    window = "" if history.since_ts is None and history.until_ts is None else (
        "   ·   --since-ts/--until-ts window")
    axes[0].set_title(
        f"Frontier of stream '{header.stream}': {header.peers} parts, {len(history.shown())} progress events, "
        f"{span}\n{history.uri}   ·   X = part finished   ·   band = merged frontier (the least of the parts')"
        f"{window}",
        fontsize=10, loc="left",
    )
    handles, labels = axes[0].get_legend_handles_labels()
    if many:
        fig.legend(handles, labels, loc="outside right upper", fontsize=8, ncols=1 if header.peers <= 20 else 2)
    else:
        axes[0].legend(handles, labels, loc="best", fontsize=8, framealpha=0.9)
    return fig


def _stamp(ms: float, fine: bool = False) -> str:
    """``2026-11-25 10:00:05`` (UTC), with milliseconds when ``fine``."""
    return _iso(ms)[:23 if fine else 19].replace("T", " ")


def _clock(ms: float, fine: bool = False) -> str:
    """``10:00:05`` (UTC), with milliseconds when ``fine``."""
    return _iso(ms)[11:23 if fine else 19]


def _iso(ms: float) -> str:
    from ._wallclock import ts_iso

    return ts_iso(int(ms))


def _draw_lag(ax: Any, series: FrontierSeries, to_x: Any) -> None:
    """The lag panel: per completed time, the wall-clock time from its first record's write to its completion,
    at the completion; times still open at the end as hollow markers with their wait so far."""
    done = series.completions
    _, hi = series.x_range
    waits = [(t, hi - w) for t, w in series.waiting]
    top = max([c.lag_ms for c in done] + [w for _, w in waits] + [1])
    unit, size = _lag_unit(top)
    lo, _ = series.x_range
    if done:
        # markers only: several times may complete at one write, and nothing completes during a pause
        ax.plot([to_x(c.completed) for c in done], [c.lag_ms / size for c in done], linestyle="none", color="#444444",
                marker="o", markersize=3.5, label="completed time: first record written → complete")
        worst = max(done, key=lambda c: c.lag_ms)
        right = worst.completed > lo + (hi - lo) * 0.6  # label on the side with room
        ax.annotate(f"time {time_text(worst.time)}: {_duration(worst.lag_ms)}",
                    xy=(to_x(worst.completed), worst.lag_ms / size), xytext=(0, 6), textcoords="offset points",
                    fontsize=8, va="bottom", ha="right" if right else "left")
    if waits:
        ax.plot([to_x(hi)] * len(waits), [w / size for _, w in waits], linestyle="none", marker="o", markersize=6,
                markerfacecolor="none", markeredgecolor="#c0392b",
                label=f"{counted(len(waits), 'time')} with records not complete at the end (waiting so far)")
    ax.set_ylabel(f"lag ({unit})")
    ax.set_ylim(0, top / size * 1.18)  # room above the highest point for its label
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8, framealpha=0.9)


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
