"""``replay frontier``: how each part's frontier and the stream's merged frontier advanced, as a table or
a plot (PNG, SVG or a self-contained HTML page)."""

from __future__ import annotations

import os
from dataclasses import dataclass
import click
from rich.table import Table
from rich.text import Text

from eventlog._extras import require
from eventlog.antichain import Antichain, MutableAntichain
from eventlog.events import Progress
from eventlog.header import StreamHeader
from eventlog.log import Log

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


@dataclass
class FrontierHistory:
    """Every Progress event of a stream with the frontiers it produced."""

    header: StreamHeader
    uri: str
    steps: list[FrontierStep]
    tail_problems: dict[int, str]

    def final(self) -> dict[int, Antichain]:
        """Each part's frontier after its last event."""
        initial = Antichain([self.header.time_type.minimum])
        last = {p: initial for p in range(self.header.peers)}
        for s in self.steps:
            last[s.part] = s.part_frontier
        return last


def frontier_history(log: Log, header: StreamHeader) -> FrontierHistory:
    """Read the Progress events of every part (Messages are skipped undecoded), merged lowest time first."""
    parts = range(header.peers)
    cursors = open_cursors(log, header, parts, ends=part_ends(log, header, parts), progress_only=True)
    stream = MutableAntichain([(header.time_type.minimum, header.peers)])
    steps: list[FrontierStep] = []
    try:
        with progress("reading progress", total_events(log, header, parts)) as advance:
            for cursor, entry in merged(cursors):
                advance(1)
                ev = entry.event
                if not isinstance(ev, Progress):
                    continue
                moved = bool(stream.update_iter(ev.updates))
                steps.append(FrontierStep(len(steps) + 1, cursor.part, entry.seq, ev.updates, cursor.frontier,
                                          stream.frontier, moved))
        problems = {c.part: problem for c in cursors if (problem := c.check_tail())}
    finally:
        for c in cursors:
            c.close()
    return FrontierHistory(header, log.uri, steps, problems)


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
def frontier(uri: str, stream: str, plot_path: str | None, moves_only: bool, as_json: bool, limit: int) -> None:
    """Show how the frontier of each part and of the whole stream advanced: one row per Progress event,
    in the order a replayer merges the parts (lowest time first), with the part's and the stream's
    frontier after it (the stream's frontier is the least of the parts'). The table shows the last --limit
    rows (default 50); a last line on stderr says how many were left out.

    The plot draws one step line per part and the merged frontier (x: progress events in that order,
    y: frontier time; product times get one panel per component of the frontier's lower bound).

    \b
    Examples:
      replay frontier /tmp/cap numbers
      replay frontier /tmp/cap numbers --moves-only --limit 0
      replay frontier /tmp/cap numbers --plot numbers-frontier.png
      replay frontier /tmp/cap numbers --plot report.html
    """
    if plot_path is not None and os.path.splitext(plot_path)[1].lower() not in PLOT_SUFFIXES:
        raise click.BadParameter(f"the plot file must end in {', '.join(PLOT_SUFFIXES)}", param_hint="'--plot'")
    if plot_path is not None:
        check_output_file(plot_path, "'--plot'", force=None)
        require("matplotlib", "plot", "replay frontier --plot")  # before reading the log, not after
    log = open_uri(uri)
    header = stream_header(log, stream)
    history = frontier_history(log, header)
    final = history.final()
    if plot_path is not None:
        from ._plot import write_plot

        write_plot(history, plot_path)
        note(f"wrote {plot_path}")
    elif as_json:
        print_json({
            "stream": stream,
            "frontier": frontier_json(history.steps[-1].stream_frontier if history.steps
                                      else Antichain([header.time_type.minimum])),
            "parts": [{"part": p, "frontier": frontier_json(f)} for p, f in final.items()],
            "steps": [
                {"step": s.step, "part": s.part, "seq": s.seq, "updates": [[time_json(t), d] for t, d in s.updates],
                 "part_frontier": frontier_json(s.part_frontier), "stream_frontier": frontier_json(s.stream_frontier),
                 "moved": s.moved}
                for s in history.steps
            ],
        })
    else:
        _print_table(history, moves_only, limit)
    for p, problem in history.tail_problems.items():
        warn(f"part {p} ends in a torn tail: {problem}")


def _print_table(history: FrontierHistory, moves_only: bool, limit: int) -> None:
    steps = [s for s in history.steps if s.moved or not moves_only]
    shown = steps[-limit:] if limit else steps  # the latest events: where the stream is now
    cut = len(steps) - len(shown)
    table = Table(title=f"frontier of stream {history.header.stream} ({history.header.peers} parts)",
                  title_justify="left")
    for c in ("step", "part", "seq", "updates", "part frontier", "stream frontier"):
        table.add_column(c, justify="right" if c in ("step", "part", "seq") else "left")
    if cut:  # the rows left out come first
        table.add_row(*["…"] * len(table.columns), style="dim")
    for s in shown:
        table.add_row(str(s.step), str(s.part), str(s.seq), Text(_updates_text(s.updates)),
                      Text(frontier_text(s.part_frontier)),
                      Text(frontier_text(s.stream_frontier), style="bold" if s.moved else "dim"))
    print_rich(table)
    if cut:
        left_out_note([counted(cut, "earlier move") + " of the stream's frontier" if moves_only
                       else counted(cut, "earlier progress event")],
                      limit, "" if moves_only else ", --moves-only only those that moved the stream's frontier")
