"""``replay stats``: records and bytes per time and part, and how far each part lags behind the others."""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass, field
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from eventlog.antichain import Antichain
from eventlog.events import Messages
from eventlog.time import Time

from ._common import (
    counted,
    frontier_json,
    frontier_text,
    human_bytes,
    left_out_note,
    limit_option,
    open_uri,
    print_json,
    print_rich,
    progress,
    stream_header,
    time_json,
    time_text,
    warn,
)
from ._scan import PartCursor, merged_frontier, total_events
from ._wallclock import check_window, require_write_times, ts_json, ts_options, written_within

_WIDE = 8
"""Up to this many parts, the per-time table has a column per part; beyond, min/max per part."""


@dataclass
class _PartTally:
    part: int
    last_seq: int = 0
    events: int = 0
    records: int = 0
    bytes: int = 0
    stored_bytes: int | None = 0
    frontier: Antichain = field(default_factory=Antichain)
    tail_problem: str | None = None
    per_time: dict = field(default_factory=lambda: collections.defaultdict(lambda: [0, 0, [None, None]]))
    """Per time: records, bytes, and the first and last write time of its Messages events (None: unknown)."""
    written: list = field(default_factory=lambda: [None, None])
    """The first and last write time of the part's events counted (None: unknown)."""
    times: set = field(default_factory=set)
    """Every time the part sent records at (also before ``--since-ts``): what its lag is measured in."""


def _widen(span: list, ts: int | None) -> None:
    """Stretch ``[first, last]`` write times to include ``ts``."""
    if ts is not None:
        span[0] = ts if span[0] is None else min(span[0], ts)
        span[1] = ts if span[1] is None else max(span[1], ts)


def _tally(cursor: PartCursor, stored_bytes: int | None, advance: Any, since_ts: int | None) -> _PartTally:
    tally = _PartTally(cursor.part, last_seq=cursor.first_seq - 1, stored_bytes=stored_bytes)
    for entry in cursor.read():
        advance(1)
        if isinstance(entry.event, Messages):
            tally.times.add(entry.event.time)
        if not written_within(entry.ts, since_ts, None):  # before --since-ts: counted for the lag only
            continue
        tally.events += 1
        _widen(tally.written, entry.ts)
        if isinstance(entry.event, Messages):
            n, b = entry.event.records.num_rows, entry.event.records.nbytes
            cell = tally.per_time[entry.event.time]
            cell[0] += n
            cell[1] += b
            _widen(cell[2], entry.ts)
            tally.records += n
            tally.bytes += b
    tally.last_seq = cursor.last_seq
    tally.frontier = cursor.frontier
    tally.tail_problem = cursor.check_tail()
    return tally


def _lags(tallies: list[_PartTally], times: list[Time]) -> tuple[dict[int, int], dict[int, int]]:
    """Per part: sequence ids behind the longest part, and captured times that the most advanced part has
    completed but this part still holds open."""
    longest = max(t.last_seq for t in tallies)
    completed = {t.part: sum(1 for x in times if not t.frontier.less_equal(x)) for t in tallies}
    best = max(completed.values())
    return ({t.part: longest - t.last_seq for t in tallies}, {p: best - c for p, c in completed.items()})


@click.command("stats", short_help="Records and bytes per time and part; part lag.")
@click.argument("uri")
@click.argument("stream")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@limit_option("the last N times, and the N parts most behind")
@ts_options
def stats(uri: str, stream: str, as_json: bool, limit: int, since_ts: int | None, until_ts: int | None) -> None:
    """Per time: records and bytes (Arrow in-memory size of the records) of each part. Per part: events,
    records, bytes, frontier, and its lag: "seq behind" = events fewer than the longest part,
    "times behind" = captured times the most advanced part has completed but this part still holds.
    The stream's frontier is held back by the parts with the most times behind.

    The tables show the last --limit times (default 50) and, of many parts, those most behind; a last line
    on stderr says how many rows were left out. Where the log records write times, each time shows when its
    records were written (first and last). --since-ts counts only events written since then; --until-ts
    shows the stream as it was then (frontiers and lag included).

    \b
    Example:
      replay stats /tmp/cap numbers
      replay stats /tmp/cap numbers --limit 0          # every time and part
      replay stats /tmp/cap numbers --json | jq '.parts[] | select(.times_behind > 0)'
      replay stats /tmp/cap numbers --since-ts -1h     # what the last hour wrote
    """
    check_window(since_ts, until_ts)
    log = open_uri(uri)
    header = stream_header(log, stream)
    require_write_times(log, header, range(header.peers), since_ts, until_ts)
    tallies = []
    with progress("reading parts", total_events(log, header, range(header.peers))) as advance:
        for p in range(header.peers):
            st = log.part_stats(stream, p)
            # every event is read (lag counts every time); --since-ts selects what is counted
            cursor = PartCursor(log, header, p, end=st.next_seq, isolation="uncommitted", until_ts=until_ts)
            try:
                tallies.append(_tally(cursor, st.bytes, advance, since_ts))
            finally:
                cursor.close()
    times = sorted(set().union(*(t.per_time for t in tallies)))
    seq_behind, times_behind = _lags(tallies, sorted(set().union(*(t.times for t in tallies))))
    frontier = merged_frontier(t.frontier for t in tallies)
    mark = log.retention(stream)
    doc = {
        "stream": stream,
        "frontier": frontier_json(frontier),
        "retained_since": frontier_json(mark.since) if mark is not None else None,
        "times": [
            {
                "time": time_json(x),
                "records": sum(t.per_time[x][0] for t in tallies if x in t.per_time),
                "bytes": sum(t.per_time[x][1] for t in tallies if x in t.per_time),
                **_written_json([t.per_time[x][2] for t in tallies if x in t.per_time]),
                "parts": [{"part": t.part, "records": t.per_time[x][0], "bytes": t.per_time[x][1]}
                          for t in tallies if x in t.per_time],
            }
            for x in times
        ],
        "parts": [
            {
                "part": t.part, "events": t.events, "last_seq": t.last_seq, "records": t.records, "bytes": t.bytes,
                "stored_bytes": t.stored_bytes, "frontier": frontier_json(t.frontier),
                "finished": t.frontier.is_empty(), "seq_behind": seq_behind[t.part],
                "times_behind": times_behind[t.part], **_written_json([t.written]),
            }
            for t in tallies
        ],
    }
    if as_json:
        print_json(doc)
    else:
        _print_tables(doc, tallies, times, frontier, limit)
    for t in tallies:
        if t.tail_problem:
            warn(f"part {t.part} ends in a torn tail: {t.tail_problem}")


def _written_json(spans: list) -> dict[str, str | None]:
    """``written_from``/``written_to``: the first and last write time of ``[first, last]`` spans (ISO-8601 UTC,
    None when unknown)."""
    firsts = [a for a, _ in spans if a is not None]
    lasts = [b for _, b in spans if b is not None]
    return {"written_from": ts_json(min(firsts, default=None)), "written_to": ts_json(max(lasts, default=None))}


def _most_behind(parts: list[dict[str, Any]], limit: int) -> set[int]:
    """The ``limit`` parts most behind (times behind, then seq behind; ties: lower part first)."""
    ranked = sorted(parts, key=lambda p: (-p["times_behind"], -p["seq_behind"], p["part"]))
    return {p["part"] for p in ranked[:limit]}


def _print_tables(doc: dict[str, Any], tallies: list[_PartTally], times: list[Time], frontier: Antichain,
                  limit: int) -> None:
    wide = len(tallies) <= _WIDE
    shown_times = list(range(len(times)))
    if limit and len(times) > limit:
        shown_times = shown_times[-limit:]  # the newest times: where a live or stuck stream is
    cut_times = len(times) - len(shown_times)
    by_time = Table(title=f"stream {doc['stream']}: records (bytes) per time", title_justify="left")
    by_time.add_column("time")
    by_time.add_column("records", justify="right")
    by_time.add_column("bytes", justify="right")
    if wide:
        for t in tallies:
            by_time.add_column(f"part {t.part}", justify="right")
    else:
        for c in ("parts", "min/part", "max/part"):
            by_time.add_column(c, justify="right")
    written = any(row["written_from"] for row in doc["times"])
    if written:
        by_time.add_column("written from")
        by_time.add_column("written to")
    if cut_times:  # the rows left out come first
        by_time.add_row(*["…"] * len(by_time.columns), style="dim")
    for i in shown_times:
        x, row = times[i], doc["times"][i]
        cells = [time_text(x), str(row["records"]), human_bytes(row["bytes"])]
        if wide:
            cells += [f"{t.per_time[x][0]} ({human_bytes(t.per_time[x][1])})" if x in t.per_time else "-"
                      for t in tallies]
        else:
            counts = [t.per_time[x][0] if x in t.per_time else 0 for t in tallies]
            cells += [str(sum(1 for c in counts if c)), str(min(counts)), str(max(counts))]
        if written:
            cells += [row["written_from"] or "-", row["written_to"] or "-"]
        by_time.add_row(*cells)
    shown_parts = {p["part"] for p in doc["parts"]}
    if limit and len(doc["parts"]) > limit:
        shown_parts = _most_behind(doc["parts"], limit)
    cut_parts = len(doc["parts"]) - len(shown_parts)
    retained = doc.get("retained_since")
    since = f"; times before {json.dumps(retained, separators=(',', ':'))} trimmed" if retained is not None else ""
    parts = Table(title=f"parts (stream frontier {frontier_text(frontier)}{since})", title_justify="left")
    for c in ("part", "events", "records", "bytes", "stored", "frontier", "seq behind", "times behind"):
        parts.add_column(c, justify="left" if c == "frontier" else "right")
    worst = max((p["times_behind"] for p in doc["parts"]), default=0)
    for t, p in zip(tallies, doc["parts"]):
        if t.part not in shown_parts:
            continue
        behind = Text(str(p["times_behind"]), style="bold red" if worst and p["times_behind"] == worst else "")
        parts.add_row(str(t.part), str(t.events), str(t.records), human_bytes(t.bytes), human_bytes(t.stored_bytes),
                      Text(frontier_text(t.frontier)), str(p["seq_behind"]), behind)
    if cut_parts:  # parts less behind, anywhere between those shown
        parts.add_row(*["…"] * len(parts.columns), style="dim")
    print_rich(by_time, parts)
    left_out_note([counted(cut_times, "earlier time") if cut_times else "",
                   counted(cut_parts, "part") + " less behind" if cut_parts else ""], limit)
