"""``replay ls``: the streams of a log with their peers, encoding, events, bytes, time range and frontier."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import click
from rich.table import Table
from rich.text import Text

from eventlog.errors import EventLogError
from eventlog.log import Log

from ._common import (
    EXIT_LOG_ERROR,
    frontier_json,
    frontier_text,
    human_bytes,
    open_uri,
    print_json,
    progress,
    print_rich,
    time_json,
    time_text,
    total_bytes,
    warn,
)
from ._scan import merged_frontier, summarise_part

_COLUMNS = ("stream", "peers", "encoding", "time", "events", "bytes")
_SCAN_COLUMNS = ("records", "times", "frontier")


@dataclass
class _Listing:
    """One stream's line: a JSON object and the table cells."""

    doc: dict[str, Any]
    cells: list[str] = field(default_factory=list)
    torn_parts: list[int] = field(default_factory=list)
    error: str | None = None


def _list_stream(log: Log, stream: str, quick: bool, advance: Callable[[int], None]) -> _Listing:
    try:
        header = log.header(stream)
        stats = [log.part_stats(stream, p) for p in range(header.peers)]
        parts = [] if quick else [summarise_part(log, header, p, advance=advance) for p in range(header.peers)]
    except (EventLogError, OSError) as e:
        return _Listing({"stream": stream, "error": str(e)}, error=str(e))
    doc: dict[str, Any] = {
        "stream": stream, "peers": header.peers, "encoding": header.encoding, "time": header.time_type.name,
        "events": sum(s.events for s in stats), "bytes": total_bytes(s.bytes for s in stats),
    }
    cells = [stream, str(header.peers), header.encoding, header.time_type.name, str(doc["events"]),
             human_bytes(doc["bytes"])]
    if quick:
        return _Listing(doc, cells)
    times = set().union(*(p.times for p in parts))
    frontier = merged_frontier(p.frontier for p in parts)
    open_parts = sum(1 for p in parts if not p.frontier.is_empty())
    doc.update(
        records=sum(p.records for p in parts),
        times=len(times),
        first_time=time_json(min(times)) if times else None,
        last_time=time_json(max(times)) if times else None,
        frontier=frontier_json(frontier),
        open_parts=open_parts,
    )
    span = f"{time_text(min(times))}..{time_text(max(times))} ({len(times)})" if times else "-"
    state = frontier_text(frontier) + (f" ({open_parts} of {header.peers} parts open)" if open_parts else "")
    cells += [str(doc["records"]), span, state]
    return _Listing(doc, cells, torn_parts=[p.part for p in parts if p.tail_problem])


def _events_to_read(log: Log, names: list[str]) -> int:
    total = 0
    for s in names:
        try:
            total += sum(log.part_stats(s, p).events for p in range(log.header(s).peers))
        except (EventLogError, OSError):
            pass  # listed as unreadable
    return total


@click.command("ls", short_help="List the streams of a log.")
@click.argument("uri")
@click.option("--quick", is_flag=True, help="Only headers and sizes: read no events (no records, times, frontier).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
def ls(uri: str, quick: bool, as_json: bool) -> None:
    """List the streams of the log at URI: peers, encoding, time type, events, bytes, records, the range
    and number of distinct times, and the merged frontier (empty = every part finished).

    Reads every event to find times and frontiers (a progress bar on stderr); --quick reads none.
    An unreadable stream is listed with its error, and the exit code is then 3.

    \b
    Example:
      replay ls file:///tmp/cap
      replay ls /tmp/cap --json | jq -r '.[].stream'
    """
    log = open_uri(uri)
    names = log.streams()
    with progress("reading streams", 0 if quick else _events_to_read(log, names)) as advance:
        listings = [_list_stream(log, s, quick, advance) for s in names]
    if as_json:
        print_json([x.doc for x in listings])
    elif not names:
        warn(f"no streams in log {log.uri}")
    else:
        cols = _COLUMNS + (() if quick else _SCAN_COLUMNS)
        table = Table(title=f"log {log.uri}", title_justify="left")
        for c in cols:
            table.add_column(c, justify="right" if c in ("peers", "events", "bytes", "records") else "left")
        for x in listings:
            if x.error is not None:
                table.add_row(Text(x.doc["stream"]), *[""] * (len(cols) - 2),
                              Text(f"unreadable: {x.error}", style="red"))
            else:
                table.add_row(*(Text(c) for c in x.cells))
        print_rich(table)
    for x in listings:
        for p in x.torn_parts:
            warn(f"stream {x.doc['stream']!r} part {p} ends in a torn tail (`replay verify` tells more)")
    errors = [x for x in listings if x.error is not None]
    for x in errors:
        warn(f"stream {x.doc['stream']!r} is unreadable: {x.error}")
    if errors:
        raise click.exceptions.Exit(EXIT_LOG_ERROR)
