"""``replay frontier``: how each part's frontier and the stream's merged frontier advanced, as a table or
a plot (PNG, SVG or a self-contained HTML page)."""

from __future__ import annotations

import os

import click
from rich.table import Table
from rich.text import Text

from eventlog._extras import require
from eventlog.antichain import Antichain

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
    print_rich,
    stream_header,
    time_json,
    time_text,
    warn,
)
from ._history import FrontierHistory, frontier_history
from ._plot import write_plot
from ._wallclock import check_window, records_write_times, require_write_times, ts_iso, ts_json, ts_options

PLOT_SUFFIXES = (".png", ".svg", ".html")
"""The plot files ``--plot`` writes, chosen by the file's suffix."""


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
    (format 1.x file logs) x is the progress events in replay order, and there is no lag panel.
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
