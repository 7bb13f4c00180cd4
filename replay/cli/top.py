"""``replay top``: the numbers of ``replay ui`` refreshing in the terminal (rich ``Live``), for a machine without a
browser: per stream its completed frontier, lag and rates, per part its frontier, state, lag, rates and last write."""

from __future__ import annotations

import time as _time
from typing import Any

import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ._common import human_bytes, open_uri

_STATE_STYLE = {"stalled": "bold red", "holding back": "magenta", "finished": "dim", "error": "bold red",
                "running": "green"}


def _duration(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


def _count(n: float) -> str:
    for unit in ("", "k", "M", "G"):
        if abs(n) < 1000:
            return f"{n:.0f}{unit}" if unit == "" or n >= 100 else f"{n:.1f}{unit}"
        n /= 1000
    return f"{n:.1f}T"


def _frontier(f: list | None) -> str:
    if f is None:
        return "-"
    return "finished" if not f else " ".join(str(tuple(t)) if isinstance(t, list) else str(t) for t in f)


def _state(p: dict[str, Any]) -> str:
    if p["error"]:
        return "error"
    if p["finished"]:
        return "finished"
    if p["stalled"]:
        return "stalled"
    return "holding back" if p["holding"] else "running"


def frame(snap: dict[str, Any], height: int, width: int) -> Group:
    """One screen of ``replay top``: a title line, then per stream a line of its numbers and a table of its parts
    (the parts most behind first when they do not all fit ``height`` lines)."""
    now = snap.get("now_ms", 0)
    streams = snap.get("streams", [])
    room = max(3, (height - 2 - 4 * len(streams)) // max(1, len(streams)))
    out: list[Any] = [Text(f"replay top · {len(streams)} stream(s) · look took {snap.get('poll_ms', 0)} ms · "
                           f"{snap.get('log')} · Ctrl-C quits", style="reverse", overflow="ellipsis", no_wrap=True)]
    if not streams:
        out.append(Text("no stream in this log yet", style="dim"))
    for e in snap.get("errors", []):
        out.append(Text(e, style="red"))
    for s in streams:
        head = Text(f"{s['stream']}", style="bold")
        head.append(f"  frontier {_frontier(s['frontier'])} · lag {_duration(s['lag_s'])} · completed-time lag "
                    f"{_duration(s['completed_lag_s'])} · {_count(s['records_per_s'])} rec/s · "
                    f"{human_bytes(int(s['bytes_per_s']))}/s")
        if s["stalled_parts"]:
            head.append(f" · {s['stalled_parts']} stalled", style="bold red")
        if s["holding"]:
            head.append(f" · held back by part(s) {', '.join(map(str, s['holding']))}", style="magenta")
        out.append(head)
        table = Table(box=None, padding=(0, 1, 0, 0), header_style="bold", expand=False)
        for c in ("part", "frontier", "state", "lag", "rec/s", "bytes/s", "records", "events", "idle"):
            table.add_column(c, justify="left" if c in ("frontier", "state") else "right", no_wrap=True,
                             overflow="ellipsis")
        parts = s["parts"]
        if len(parts) > room:
            rank = {"error": 0, "stalled": 1, "holding back": 2}
            parts = sorted(sorted(parts, key=lambda p: (rank.get(_state(p), 3), -p["lag_s"], p["part"]))[:room - 1],
                           key=lambda p: p["part"])
        for p in parts:
            st = _state(p)
            last = "never" if p["last_write_ms"] is None else _duration(max(0, now - p["last_write_ms"]) / 1000)
            table.add_row(str(p["part"]), _frontier(p["frontier"]), Text(st, style=_STATE_STYLE[st]),
                          "-" if p["finished"] else _duration(p["lag_s"]), _count(p["records_per_s"]),
                          human_bytes(int(p["bytes_per_s"])) + "/s", _count(p["records"]),
                          _count(max(0, p["next_seq"] - p["first_seq"])), last)
        if len(parts) < len(s["parts"]):
            table.add_row("…", f"{len(s['parts']) - len(parts)} more parts, less behind", "", "", "", "", "", "", "",
                          style="dim")
        out.append(table)
    return Group(*out)


@click.command("top", short_help="Per-part frontiers, lag and rates, refreshing in the terminal.")
@click.argument("uri")
@click.option("--stream", "streams", multiple=True, metavar="NAME", help="Watch only this stream (repeat).")
@click.option("--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True, metavar="SECONDS",
              help="Seconds between two looks at the log.")
@click.option("--stall-after", type=click.FloatRange(min=0.1), default=30.0, show_default=True, metavar="SECONDS",
              help="A part that is not finished and wrote nothing for this long is marked stalled.")
@click.option("--iterations", "-n", type=click.IntRange(min=1), metavar="N",
              help="Stop after N looks (as top -n); default: until Ctrl-C on a terminal, one look otherwise.")
@click.option("--lookback", type=click.IntRange(min=0), default=200, show_default=True, metavar="EVENTS",
              help="Events at the end of each part decoded at the start (earlier ones: Progress only).")
def top(uri: str, streams: tuple[str, ...], interval: float, stall_after: float, iterations: int | None,
        lookback: int) -> None:
    """Show, refreshing every --interval seconds, what replay ui shows for each stream of the log at URI: its
    completed frontier, lag, completed-time lag and rates, and per part its frontier, state (running, holding
    the stream back, stalled, finished), lag, records and bytes per second, records, events and idle time
    (since its last write).
    When stdout is not a terminal it prints one look (or --iterations N looks) and exits.

    \b
    Examples:
      replay top /tmp/cap
      replay top kafka://127.0.0.1:9092/jobA --stream counts --stall-after 120
      replay top /tmp/cap -n 1 > now.txt
    """
    from ._web.watch import LogWatch

    log = open_uri(uri, must_exist=False)
    watch = LogWatch(log, streams=streams, stall_after=stall_after, lookback=lookback)
    console = Console(highlight=False)
    live_mode = console.is_terminal and iterations != 1
    if iterations is None and not console.is_terminal:
        iterations = 1
    done = 0
    try:
        if not live_mode:
            while True:
                snap = watch.poll()
                done += 1
                console.print(frame(snap, 10**6, console.width))
                if iterations is not None and done >= iterations:
                    return
                _time.sleep(interval)
        with Live(console=console, auto_refresh=False, screen=False, transient=False) as live:
            while True:
                started = _time.monotonic()
                snap = watch.poll()
                done += 1
                live.update(frame(snap, console.height, console.width), refresh=True)
                if iterations is not None and done >= iterations:
                    return
                _time.sleep(max(0.0, interval - (_time.monotonic() - started)))
    except KeyboardInterrupt:
        pass
    finally:
        watch.close()
