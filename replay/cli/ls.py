"""``replay ls``: the streams of a log with their peers, encoding, events, bytes, time range, frontier and
open parts (with the age of their last event); on a Kafka cluster without a prefix, the prefixes that hold
streams."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import click
from rich.table import Table
from rich.text import Text

from eventlog.errors import EventLogError
from eventlog.log import Log
from eventlog.uri import scheme_of, with_path

from ._common import (
    EXIT_LOG_ERROR,
    frontier_json,
    frontier_text,
    human_bytes,
    open_uri,
    print_json,
    print_rich,
    progress,
    time_json,
    time_text,
    total_bytes,
    warn,
)
from ._scan import merged_frontier, summarise_part

_COLUMNS = ("stream", "peers", "encoding", "time", "events", "bytes")
_SCAN_COLUMNS = ("records", "times", "frontier", "state")


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
    try:
        mark = log.retention(stream)
    except (EventLogError, OSError) as e:
        return _Listing({"stream": stream, "error": str(e)}, error=str(e))
    doc: dict[str, Any] = {
        "stream": stream, "peers": header.peers, "encoding": header.encoding, "time": header.time_type.name,
        "events": sum(s.events for s in stats), "bytes": total_bytes(s.bytes for s in stats),
        "retained_since": frontier_json(mark.since) if mark is not None else None,
    }
    cells = [stream, str(header.peers), header.encoding, header.time_type.name, str(doc["events"]),
             human_bytes(doc["bytes"])]
    if quick:
        return _Listing(doc, cells)
    times = set().union(*(p.times for p in parts))
    frontier = merged_frontier(p.frontier for p in parts)
    open_ = [p.part for p in parts if not p.frontier.is_empty()]
    writes = [w for w in (_last_write(log, stream, p) for p in open_) if w is not None]
    last = max(writes) if writes else None
    doc.update(
        records=sum(p.records for p in parts),
        times=len(times),
        first_time=time_json(min(times)) if times else None,
        last_time=time_json(max(times)) if times else None,
        frontier=frontier_json(frontier),
        finished=not open_,
        open_parts=len(open_),
        last_event=_iso(last) if last is not None else None,
        last_event_age_s=round(max(0.0, time.time() - last), 1) if last is not None else None,
    )
    span = f"{time_text(min(times))}..{time_text(max(times))} ({len(times)})" if times else "-"
    if mark is not None:
        span += " trimmed"  # the times before were dropped (replay info says from where)
    cells += [str(doc["records"]), span, frontier_text(frontier), _state_text(len(open_), header.peers, last)]
    return _Listing(doc, cells, torn_parts=[p.part for p in parts if p.tail_problem])


def _last_write(log: Log, stream: str, part: int) -> float | None:
    try:
        return log.last_write(stream, part)
    except (EventLogError, OSError):
        return None  # the age is a hint: a part that cannot tell shows none


def _iso(when: float) -> str:
    return dt.datetime.fromtimestamp(when, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def age_text(seconds: float) -> str:
    """A duration for humans: ``12 s``, ``5 min``, ``3 h``, ``2 d`` (rounded down)."""
    seconds = max(0.0, seconds)
    for unit, size, up_to in (("s", 1, 90), ("min", 60, 90 * 60), ("h", 3600, 48 * 3600)):
        if seconds < up_to:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds // 86400)} d"


def _state_text(open_parts: int, peers: int, last: float | None) -> str:
    """``finished``, or ``2 of 3 open, last event 3 h ago``: parts whose writer has not finished them (a
    capture never closed leaves its readers waiting) and how long the newest write among them is ago."""
    if not open_parts:
        return "finished"
    text = f"{open_parts} of {peers} open" if open_parts < peers else f"{open_parts} open"
    return text + (f", last event {age_text(time.time() - last)} ago" if last is not None else "")


def _kafka_prefixes(log: Log) -> dict[str, list[str]] | None:
    """The prefixes holding streams when ``log`` is a Kafka cluster named without a prefix, else None."""
    if scheme_of(log.uri) != "kafka":
        return None
    from connectors.kafka import KafkaLog

    if not isinstance(log, KafkaLog) or log.target.prefix:
        return None
    return log.prefixes()


def _prefix_uri(uri: str, prefix: str) -> str:
    """``uri`` (a Kafka URI without a prefix) naming ``prefix``, its settings kept."""
    return with_path(uri, "/" + prefix)


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
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def ls(uri: str, quick: bool, as_json: bool) -> None:
    """List the streams of the log at URI: peers, encoding, time type, events, bytes, records, the range
    and number of distinct times, the merged frontier (empty = every part finished) and the state:
    "finished", or how many parts are open and how long ago the newest of them was written (a capture
    never closed leaves readers waiting).

    Reads every event to find times and frontiers (a progress bar on stderr); --quick reads none.
    An unreadable stream is listed with its error, and the exit code is then 3.

    On a Kafka cluster without a prefix (kafka://host:port) it lists the prefixes holding streams and the
    URI of each, then the streams without a prefix (--json: {"prefixes": [...], "streams": [...]}).

    \b
    Example:
      replay ls file:///tmp/cap
      replay ls /tmp/cap --json | jq -r '.[].stream'
      replay ls kafka://127.0.0.1:9092
    """
    log = open_uri(uri)
    prefixes = _kafka_prefixes(log)
    names = prefixes.pop("", []) if prefixes is not None else log.streams()
    with progress("reading streams", 0 if quick else _events_to_read(log, names)) as advance:
        listings = [_list_stream(log, s, quick, advance) for s in names]
    found = [{"prefix": p, "streams": s, "uri": _prefix_uri(log.uri, p)} for p, s in (prefixes or {}).items()]
    if as_json:
        docs = [x.doc for x in listings]
        print_json(docs if prefixes is None else {"prefixes": found, "streams": docs})
    elif not names and not found:
        warn(f"no streams in log {log.uri}" + ("" if prefixes is None else
                                                  " (no topic of the cluster opens with an eventlog stream header)"))
    else:
        if found:
            table = Table(title=f"prefixes holding streams on kafka cluster {log.target.bootstrap}",  # type: ignore[attr-defined]
                          title_justify="left")
            for c in ("prefix", "streams", "names", "uri"):
                table.add_column(c, justify="right" if c == "streams" else "left")
            for f in found:
                table.add_row(Text(f["prefix"]), Text(str(len(f["streams"]))), Text(_names_text(f["streams"])),
                              Text(f["uri"]))
            print_rich(table)
        if names:
            _print_streams(log, listings, quick, title=f"log {log.uri}" + (" (streams without a prefix)" if found else ""))
    for x in listings:
        for p in x.torn_parts:
            warn(f"stream {x.doc['stream']!r} part {p} ends in a torn tail (`{_verify_command(uri, x.doc['stream'])}` "
                 "tells more)")
    errors = [x for x in listings if x.error is not None]
    for x in errors:
        warn(f"stream {x.doc['stream']!r} is unreadable: {x.error}")
    if errors:
        raise click.exceptions.Exit(EXIT_LOG_ERROR)


def _verify_command(uri: str, stream: str) -> str:
    """The command that checks ``stream`` of the log at ``uri``, shell-quoted."""
    import shlex

    return shlex.join(["replay", "verify", uri, stream])


def _names_text(names: list[str], shown: int = 5) -> str:
    return ", ".join(names[:shown]) + (f", … ({len(names) - shown} more)" if len(names) > shown else "")


def _print_streams(log: Log, listings: list[_Listing], quick: bool, title: str) -> None:
    cols = _COLUMNS + (() if quick else _SCAN_COLUMNS)
    table = Table(title=title, title_justify="left")
    for c in cols:
        table.add_column(c, justify="right" if c in ("peers", "events", "bytes", "records") else "left")
    for x in listings:
        if x.error is not None:
            table.add_row(Text(x.doc["stream"]), *[""] * (len(cols) - 2),
                          Text(f"unreadable: {x.error}", style="red"))
        else:
            table.add_row(*(Text(c) for c in x.cells))
    print_rich(table)
