"""``replay cat`` and ``replay tail``: print a stream's events, one row per record (Messages) or per Progress
event, as a table for people or JSON lines / JSON / CSV for programs; ``tail -f`` follows a live log."""

from __future__ import annotations

import time as _time
from typing import Any, Callable, Iterable

import click

from eventlog.events import Entry, Messages
from eventlog.header import StreamHeader
from eventlog.time import Time, less_equal

from . import _live
from ._common import (
    OFFSET,
    TIME,
    as_time,
    check_part,
    frontier_json,
    frontier_text,
    note,
    open_uri,
    start_seq,
    stream_header,
    time_json,
    uncommitted_option,
    warn,
)
from ._live import LiveTail
from ._output import FORMATS, RowWriter, default_format, row_writer
from ._scan import PartCursor, held_notes, merged, merged_frontier, open_cursors
from ._values import BINARY_ENCODINGS, RecordConverter
from ._wallclock import check_window, records_write_times, require_write_times, ts_iso, ts_options

KINDS = ("messages", "progress", "all")
"""Which events ``cat``/``tail`` show."""

_META = ("part", "seq", "kind", "time")


def _columns(header: StreamHeader, kind: str, write_times: bool) -> list[tuple[str, str]]:
    """``(key, label)`` of the table and CSV columns: the event's place (with its write time ``ts`` when the
    stream records them), then progress or record fields."""
    meta = _META[:2] + ("ts",) + _META[2:] if write_times else _META
    cols = [(k, k) for k in meta]
    if kind != "messages":
        cols += [("updates", "updates"), ("frontier", "frontier")]
    if kind != "progress":
        taken = {label for _, label in cols}
        cols += [(f"record.{n}", n if n not in taken else f"record.{n}") for n in header.schema.names]
    return cols


class _Printer:
    """Turns entries into rows, applying the kind and time filters and the limits: ``max_rows`` rows printed
    (records and Progress events, what ``-n`` counts) and ``max_events`` events shown (``--events``)."""

    def __init__(self, header: StreamHeader, writer: RowWriter, kind: str, since: Time | None,
                 until: Time | None, max_rows: int | None, max_events: int | None, binary: str) -> None:
        self.writer = writer
        self.kind = kind
        self.since, self.until = since, until
        self.max_rows, self.max_events = max_rows, max_events
        self.rows = 0
        """Rows printed: one per record of a Messages event, one per Progress event."""
        self.events = 0
        """Events shown (a Messages event counts once, however many of its records were printed)."""
        self._records = RecordConverter(header.schema, binary)

    def _in_range(self, t: Time) -> bool:
        if self.since is not None and not less_equal(self.since, t):
            return False
        return self.until is None or not less_equal(self.until, t)

    @property
    def full(self) -> bool:
        """True once ``max_rows`` rows or ``max_events`` events were shown."""
        return ((self.max_rows is not None and self.rows >= self.max_rows)
                or (self.max_events is not None and self.events >= self.max_events))

    def show(self, cursor: PartCursor, entry: Entry) -> None:
        """Print ``entry`` of ``cursor``'s part if it passes the filters (the cursor's frontier already
        includes it); a Messages event is cut after the record that reaches ``max_rows``."""
        if self.full or not cursor.in_window(entry):
            return
        ev = entry.event
        place: dict[str, Any] = {"part": cursor.part, "seq": entry.seq}
        if entry.ts is not None:
            place["ts"] = ts_iso(entry.ts)
        if isinstance(ev, Messages):
            if self.kind == "progress" or not self._in_range(ev.time):
                return
            records = ev.records
            if self.max_rows is not None and records.num_rows > self.max_rows - self.rows:
                records = records.slice(0, self.max_rows - self.rows)
            place.update(kind="messages", time=time_json(ev.time))
            for record in self._records.rows(records):
                self.writer.write({**place, "record": record})
            self.rows += records.num_rows
        else:
            if self.kind == "messages":
                return
            if (self.since is not None or self.until is not None) and not any(self._in_range(t) for t, _ in ev.updates):
                return
            self.writer.write({
                **place, "kind": "progress",
                "updates": [[time_json(t), d] for t, d in ev.updates], "frontier": frontier_json(cursor.frontier),
            })
            self.rows += 1
        self.events += 1


def _done(cursors: list[PartCursor], until: Time | None) -> bool:
    """Nothing more can arrive: every part finished, past ``--until-ts``, or has every time before ``until``
    complete."""
    return all(c.finished or c.at_end or (until is not None and all(less_equal(until, e) for e in c.frontier))
               for c in cursors)


def _read(cursors: list[PartCursor], printer: _Printer) -> None:
    for cursor, entry in merged(cursors):
        if printer.full:
            return
        printer.show(cursor, entry)


def _run(uri: str, stream: str, part: int | None, offset: tuple[str, int], since: Any, until: Any,
         max_rows: int | None, max_events: int | None, kind: str, fmt: str | None, binary: str, follow: bool, interval: float,
         isolation: str, since_ts: int | None = None, until_ts: int | None = None) -> None:
    check_window(since_ts, until_ts)
    log = open_uri(uri)
    header = stream_header(log, stream)
    check_part(header, part)
    since_t, until_t = as_time(since, header, "--since"), as_time(until, header, "--until")
    parts = [part] if part is not None else list(range(header.peers))
    require_write_times(log, header, parts, since_ts, until_ts)
    starts, ends = {}, {}
    for p in parts:
        st = log.part_stats(stream, p)
        starts[p] = start_seq(offset, st.first_seq, st.next_seq)
        ends[p] = st.next_seq
    # without --follow: every event up to where each part ends now (a reader's pass may stop short of it)
    cursors = open_cursors(log, header, parts, starts=starts, ends=None if follow else ends,
                           progress_only=kind == "progress", isolation=isolation, since_ts=since_ts,
                           until_ts=until_ts)
    live: LiveTail | None = None
    writer: RowWriter
    table = follow and fmt in (None, "table") and (console := _live.live_console()).is_terminal
    fmt = None if table else fmt or default_format()
    columns = _columns(header, kind, fmt in (None, "table", "csv") and records_write_times(log, header, parts))
    if table:
        writer = live = LiveTail(columns, header.schema, console, stream)
    else:
        writer = row_writer(fmt, columns)
    printer = _Printer(header, writer, kind, since_t, until_t, max_rows, max_events, binary)

    def poll() -> None:
        _read(cursors, printer)
        if live is not None:
            live.status(len(cursors), sum(c.finished for c in cursors),
                        frontier_text(merged_frontier(c.frontier for c in cursors)), printer.events)
        writer.flush()

    try:
        poll()
        while follow and not printer.full and not _done(cursors, until_t):
            _time.sleep(interval)
            poll()
        torn = {} if follow or printer.full else {c.part: p for c in cursors if (p := c.check_tail())}
        held = [] if printer.full else held_notes(cursors)
    finally:
        writer.close()
        for c in cursors:
            c.close()
    for p, problem in torn.items():
        warn(f"part {p} ends in a torn tail: {problem}")
    for line in held:
        note(line)


def _common_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The arguments and options ``cat`` and ``tail`` share."""
    options: Iterable[Callable[..., Any]] = (
            click.argument("uri"),
            click.argument("stream"),
            click.option("--part", "-p", type=int, help="Only this part (default: every part, merged lowest "
                         "time first)."),
            click.option("--since", type=TIME, help="Only times t with SINCE <= t (product times: 1,2)."),
            click.option("--until", type=TIME, help="Only times t that are not >= UNTIL."),
            ts_options,
            click.option("--kind", "-k", type=click.Choice(KINDS), default="all", show_default=True,
                         help="Which events to show."),
            click.option("--format", "fmt", type=click.Choice(FORMATS),
                         help="Output format (default: table on a terminal, jsonl when piped)."),
            click.option("--bytes", "binary", type=click.Choice(BINARY_ENCODINGS), default="base64",
                         show_default=True, help="How binary values are written."),
            uncommitted_option,
        )
    for opt in reversed(list(options)):
        f = opt(f)
    return f


@click.command("cat", short_help="Print events and records.")
@_common_options
@click.option("--offset", "-o", type=OFFSET, default="beginning", show_default=True,
              help="Where each part starts: beginning, end, a sequence id N, or -N (its last N events).")
@click.option("-n", "--count", "max_rows", type=click.IntRange(min=0), metavar="N",
              help="Stop after N rows (records and Progress events), like head -n.")
@click.option("--events", "max_events", type=click.IntRange(min=0), metavar="N",
              help="Stop after N events (a Messages event is one event, however many records it holds).")
def cat(uri: str, stream: str, part: int | None, since: Any, until: Any, since_ts: int | None, until_ts: int | None,
        kind: str, fmt: str | None, binary: str, isolation: str, offset: tuple[str, int], max_rows: int | None,
        max_events: int | None) -> None:
    """Print the events of STREAM: one row per record of a Messages event (part, seq, kind, time, record)
    and one per Progress event (part, seq, kind, updates, and the part's frontier after it).

    Parts are merged lowest time first, each in its own order. -n N stops after N rows (records and
    Progress events), --events N after N events. A table on a terminal, JSON lines when piped. In JSON, times are ints or arrays (product times), timestamps ISO-8601 strings, binary base64
    (--bytes hex), decimals strings, NaN/Infinity strings.

    \b
    Examples:
      replay cat /tmp/cap numbers -n 20
      replay cat /tmp/cap numbers --events 3 --kind messages
      replay cat /tmp/cap numbers --part 2 --offset -5 --kind progress
      replay cat /tmp/cap numbers --since 3 --until 5 | jq -c '.record'
      replay cat /tmp/cap grid --since 1,0 --format csv > grid.csv
      replay cat /tmp/cap numbers --since-ts -10m      # written in the last 10 minutes
    """
    _run(uri, stream, part, offset, since, until, max_rows, max_events, kind, fmt, binary, follow=False, interval=0,
         isolation=isolation, since_ts=since_ts, until_ts=until_ts)


@click.command("tail", short_help="Print the last events; -f follows a live log.")
@_common_options
@click.option("--follow", "-f", is_flag=True,
              help="Keep printing events as they are appended, until every part is finished (or Ctrl-C).")
@click.option("-n", "--lines", "last", type=click.IntRange(min=0), default=10, show_default=True,
              help="Start with the last N events of each part.")
@click.option("--interval", type=click.FloatRange(min=0.001), default=0.2, show_default=True,
              help="Seconds between polls when following.")
def tail(uri: str, stream: str, part: int | None, since: Any, until: Any, since_ts: int | None,
         until_ts: int | None, kind: str, fmt: str | None, binary: str, isolation: str, follow: bool, last: int,
         interval: float) -> None:
    """Print the last events of each part of STREAM (like cat --offset -N); with -f, keep following the
    log as it grows. Following ends with exit code 0 once every part is finished (or every time before
    --until is complete), and with 130 on Ctrl-C.

    \b
    Examples:
      replay tail /tmp/cap numbers -n 3
      replay tail -f /tmp/cap numbers --kind messages | jq -c '[.time, .record]'
      replay tail /tmp/cap numbers -n 100 --since-ts 2026-11-25T10:00Z
    """
    offset = ("last", last) if last else ("end", 0)
    _run(uri, stream, part, offset, since, until, None, None, kind, fmt, binary, follow=follow, interval=interval,
         isolation=isolation, since_ts=since_ts, until_ts=until_ts)
