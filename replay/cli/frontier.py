"""``replay frontier``: how each part's frontier and the stream's merged frontier advanced, as a table or
a plot (PNG, SVG or a self-contained HTML page)."""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, field
import click
from rich.table import Table
from rich.text import Text

from eventlog._extras import require
from eventlog.antichain import Antichain, MutableAntichain
from eventlog.events import Messages, Progress
from eventlog.header import StreamHeader
from eventlog.log import Log
from eventlog.time import Time

from ._common import (
    check_output_file,
    counted,
    frontier_json,
    frontier_text,
    left_out_note,
    limit_option,
    note,
    open_uri,
    print_json,
    progress,
    print_rich,
    stream_header,
    time_json,
    time_text,
    warn,
)
from ._scan import merged, open_cursors, part_ends, total_events
from ._wallclock import check_window, records_write_times, require_write_times, ts_iso, ts_json, ts_options

PLOT_SUFFIXES = (".png", ".svg", ".html")
"""The plot files ``--plot`` writes, chosen by the file's suffix."""


@dataclass(frozen=True)
class FrontierStep:
    """One Progress event in merged order, and the frontiers right after it."""

    step: int
    """1, 2, 3, … in the order a replayer merges the parts (lowest time first)."""
    part: int
    seq: int
    updates: tuple
    part_frontier: Antichain
    """The frontier of the event's part after the event."""
    stream_frontier: Antichain
    """The stream's merged frontier after the event."""
    moved: bool
    """True when this event moved the stream's frontier."""
    ts: int | None = None
    """When the event was written (ms since the epoch, the writer's clock); None where the log does not record it."""


@dataclass
class FrontierHistory:
    """Every Progress event of a stream with the frontiers it produced."""

    header: StreamHeader
    uri: str
    steps: list[FrontierStep]
    """Every Progress event up to ``until_ts`` (also those before ``since_ts``: they make the frontiers)."""
    tail_problems: dict[int, str]
    first_writes: dict[Time, int] = field(default_factory=dict)
    """Per time, when its first record was written (ms): filled by ``frontier_history(first_writes=True)`` on logs
    that record write times."""
    message_writes: "array[int]" = field(default_factory=lambda: array("q"))
    """When each Messages event was written (ms, in merged order): filled with ``first_writes``."""
    since_ts: int | None = None
    """``--since-ts``: the steps written before it are not shown (``shown``)."""
    until_ts: int | None = None
    """``--until-ts``: every part was read up to its last event written at or before it."""

    @property
    def wallclock(self) -> bool:
        """True when every Progress event has a write time (the plot's x-axis is then the wall clock)."""
        return bool(self.steps) and all(s.ts is not None for s in self.steps)

    def shown(self) -> list[FrontierStep]:
        """The steps written at or after ``since_ts`` (every step without it)."""
        if self.since_ts is None:
            return self.steps
        return [s for s in self.steps if s.ts is None or s.ts >= self.since_ts]

    def final(self) -> dict[int, Antichain]:
        """Each part's frontier after its last event."""
        initial = Antichain([self.header.time_type.minimum])
        last = {p: initial for p in range(self.header.peers)}
        for s in self.steps:
            last[s.part] = s.part_frontier
        return last


def frontier_history(log: Log, header: StreamHeader, *, since_ts: int | None = None, until_ts: int | None = None,
                     first_writes: bool = False) -> FrontierHistory:
    """Read the Progress events of every part, merged lowest time first, each part up to its last event written
    at or before ``until_ts``. Messages are skipped undecoded, unless ``first_writes``: then they are read (every
    one written, committed or not) for the time each time's first record was written (the plot's lag)."""
    parts = range(header.peers)
    cursors = open_cursors(log, header, parts, ends=part_ends(log, header, parts), progress_only=not first_writes,
                           isolation="uncommitted", until_ts=until_ts)
    stream = MutableAntichain([(header.time_type.minimum, header.peers)])
    steps: list[FrontierStep] = []
    firsts: dict[Time, int] = {}
    writes = array("q")
    try:
        with progress("reading progress" if not first_writes else "reading events",
                      total_events(log, header, parts)) as advance:
            for cursor, entry in merged(cursors):
                advance(1)
                ev = entry.event
                if isinstance(ev, Messages):
                    if entry.ts is not None:
                        writes.append(entry.ts)
                        if ev.time not in firsts or entry.ts < firsts[ev.time]:
                            firsts[ev.time] = entry.ts
                    continue
                assert isinstance(ev, Progress)
                moved = bool(stream.update_iter(ev.updates))
                steps.append(FrontierStep(len(steps) + 1, cursor.part, entry.seq, ev.updates, cursor.frontier,
                                          stream.frontier, moved, entry.ts))
        problems = {c.part: problem for c in cursors if (problem := c.check_tail())}
    finally:
        for c in cursors:
            c.close()
    return FrontierHistory(header, log.uri, steps, problems, firsts, writes, since_ts, until_ts)


def _updates_text(updates: tuple) -> str:
    return " ".join(f"{time_text(t)}:{d:+d}" for t, d in updates)


@click.command("frontier", short_help="How the frontiers advanced (table or plot).")
@click.argument("uri")
@click.argument("stream")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, writable=True),
              help="Write a plot instead of the table: FILE.png, FILE.svg or FILE.html (self-contained); "
                   "an existing regular file is overwritten, anything else refused.")
@click.option("--moves-only", is_flag=True, help="Table: only the events that moved the stream's frontier.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
@limit_option("the last N progress events (the plot draws them all)")
@ts_options
def frontier(uri: str, stream: str, plot_path: str | None, moves_only: bool, as_json: bool, limit: int,
             since_ts: int | None, until_ts: int | None) -> None:
    """Show how the frontier of each part and of the whole stream advanced: one row per Progress event,
    in the order a replayer merges the parts (lowest time first), with the part's and the stream's
    frontier after it (the stream's frontier is the least of the parts'). The table shows the last --limit
    rows (default 50); a last line on stderr says how many were left out.

    Where the log records write times, each row shows when its event was written, and the plot draws one
    step line per part and the merged frontier against the wall clock (x: write time, UTC; y: frontier time;
    product times get one panel per component of the frontier's lower bound), and beneath them the lag of
    each completed time: from its first record's write to the write that completed it. Without write times
    (format 1.x file logs, memory logs) x is the progress events in replay order, and there is no lag panel.
    --since-ts shows the events written since then (the frontiers still count every earlier one);
    --until-ts shows the stream as it was then.

    \b
    Examples:
      replay frontier /tmp/cap numbers
      replay frontier /tmp/cap numbers --moves-only --limit 0
      replay frontier /tmp/cap numbers --plot numbers-frontier.png
      replay frontier /tmp/cap numbers --plot report.html
      replay frontier /tmp/cap numbers --since-ts -2h --plot last-2h.png
    """
    if plot_path is not None and os.path.splitext(plot_path)[1].lower() not in PLOT_SUFFIXES:
        raise click.BadParameter(f"the plot file must end in {', '.join(PLOT_SUFFIXES)}", param_hint="'--plot'")
    if plot_path is not None:
        check_output_file(plot_path, "'--plot'", force=None)
        require("matplotlib", "plot", "replay frontier --plot")  # before reading the log, not after
    check_window(since_ts, until_ts)
    log = open_uri(uri)
    header = stream_header(log, stream)
    parts = range(header.peers)
    require_write_times(log, header, parts, since_ts, until_ts)
    lag = plot_path is not None and records_write_times(log, header, parts)
    history = frontier_history(log, header, since_ts=since_ts, until_ts=until_ts, first_writes=lag)
    final = history.final()
    if plot_path is not None:
        from ._plot import write_plot

        write_plot(history, plot_path)
        if not history.wallclock and history.steps:
            note(f"stream {stream!r} records no write times, so the plot's x-axis is the progress events in "
                 "replay order, and it has no lag panel")
        note(f"wrote {plot_path}")
    elif as_json:
        print_json({
            "stream": stream,
            "frontier": frontier_json(history.steps[-1].stream_frontier if history.steps
                                      else Antichain([header.time_type.minimum])),
            "parts": [{"part": p, "frontier": frontier_json(f)} for p, f in final.items()],
            "steps": [
                {"step": s.step, "part": s.part, "seq": s.seq, "ts": ts_json(s.ts),
                 "updates": [[time_json(t), d] for t, d in s.updates],
                 "part_frontier": frontier_json(s.part_frontier), "stream_frontier": frontier_json(s.stream_frontier),
                 "moved": s.moved}
                for s in history.shown()
            ],
        })
    else:
        _print_table(history, moves_only, limit)
    for p, problem in history.tail_problems.items():
        warn(f"part {p} ends in a torn tail: {problem}")


def _print_table(history: FrontierHistory, moves_only: bool, limit: int) -> None:
    steps = [s for s in history.shown() if s.moved or not moves_only]
    shown = steps[-limit:] if limit else steps  # the latest events: where the stream is now
    cut = len(steps) - len(shown)
    table = Table(title=f"frontier of stream {history.header.stream} ({history.header.peers} parts)",
                  title_justify="left")
    written = any(s.ts is not None for s in steps)
    for c in ("step", "part", "seq") + (("written",) if written else ()) + ("updates", "part frontier",
                                                                              "stream frontier"):
        table.add_column(c, justify="right" if c in ("step", "part", "seq") else "left")
    if cut:  # the rows left out come first
        table.add_row(*["…"] * len(table.columns), style="dim")
    for s in shown:
        place = [str(s.step), str(s.part), str(s.seq)]
        if written:
            place.append(ts_iso(s.ts) if s.ts is not None else "-")
        table.add_row(*place, Text(_updates_text(s.updates)), Text(frontier_text(s.part_frontier)),
                      Text(frontier_text(s.stream_frontier), style="bold" if s.moved else "dim"))
    print_rich(table)
    if cut:
        left_out_note([counted(cut, "earlier move") + " of the stream's frontier" if moves_only
                       else counted(cut, "earlier progress event")],
                      limit, "" if moves_only else ", --moves-only only those that moved the stream's frontier")
