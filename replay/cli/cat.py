"""``replay cat`` and ``replay tail``: print a stream's events, one row per record (Messages) or per Progress
event, as a table for people or JSON lines / JSON / CSV for programs; ``tail -f`` follows a live log."""

from __future__ import annotations

import sys
import time as _time
from typing import Any, Callable, Iterable

import click

from eventlog.events import Entry, Messages
from eventlog.header import StreamHeader
from eventlog.retention import TrimmedError
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
        self.next_seq: dict[int, int] = {}
        """Per part, one past the last event handed to ``show`` while not full (shown or filtered out)."""

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
        if self.full:
            return
        self.next_seq[cursor.part] = entry.seq + 1
        if not cursor.in_window(entry):
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
                "updates": [[time_json(t), d] for t, d in ev.updates],
                "frontier": None if cursor.frontier is None else frontier_json(cursor.frontier),
            })
            self.rows += 1
        self.events += 1


class _Template:
    """A ``RowWriter`` printing each row through a ``str.format`` template, as kcat's ``-f``: fields ``part``,
    ``seq``, ``ts``, ``kind``, ``time``, ``updates``, ``frontier`` and ``record`` (``{record[word]}``); a field a
    row lacks prints empty; ``\\n``/``\\t`` are a newline/tab; a newline ends each row unless the template
    ends with one."""

    FIELDS = ("part", "seq", "ts", "kind", "time", "updates", "frontier", "record")

    def __init__(self, template: str) -> None:
        import string

        text = template.replace("\\n", "\n").replace("\\t", "\t")
        self._text = text if text.endswith("\n") else text + "\n"
        formatter = self._formatter = string.Formatter()
        try:
            names = [f for _, f, _, _ in formatter.parse(self._text) if f is not None]
        except ValueError as e:
            raise click.BadParameter(f"{template!r}: {e}", param_hint="'--template'") from None
        for name in names:
            root = name.split(".", 1)[0].split("[", 1)[0]
            if root not in self.FIELDS:
                raise click.BadParameter(f"no field {root!r} in {template!r}: fields are "
                                         f"{', '.join(self.FIELDS)} (a record's as {{record[NAME]}})",
                                         param_hint="'--template'")
        self._out = sys.stdout

    def write(self, row: dict[str, Any]) -> None:
        values = {k: ("" if row.get(k) is None else row[k]) for k in self.FIELDS}
        values["record"] = _Lenient(row.get("record") or {})
        self._out.write(self._formatter.vformat(self._text, (), values))

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        self._out.flush()


class _Lenient(dict):
    """A record for a template: a field it lacks (a Progress row's) is empty, not an error."""

    def __missing__(self, key: str) -> str:
        return ""


def _read_positions(path: str, stream: str, parts: list[int]) -> dict[int, int]:
    """The next sequence id of each part a position file holds (empty when the file does not exist yet)."""
    import json
    import os

    if not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            doc = json.load(f)
        if doc.get("stream") != stream:
            raise click.BadParameter(f"{path} holds positions of stream {doc.get('stream')!r}, not {stream!r}",
                                     param_hint="'--position-file'")
        return {int(p): int(seq) for p, seq in doc["next"].items() if int(p) in parts}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise click.BadParameter(f"{path} is not a position file this command wrote ({e})",
                                 param_hint="'--position-file'") from None


def _write_positions(path: str, uri: str, stream: str, cursors: list[PartCursor], shown: dict[int, int]) -> None:
    """Save where each part continues atomically, for the next run: after the last event this run handed out
    (``shown``), or at the first event it held back (reading committed) if that comes first."""
    import json
    import os

    from connectors.files.storage import temp_beside

    doc = {"log": uri, "stream": stream,
           "next": {str(c.part): min(c.position, shown.get(c.part, c.start)) for c in cursors}}
    fd, tmp = temp_beside(path)
    with open(fd, "w") as f:
        json.dump(doc, f)
        f.write("\n")
    os.replace(tmp, path)


class _SalvagedPart:
    """The part a salvaged entry came from, for the printer: a part read past damage has no known frontier."""

    frontier = None

    def __init__(self, part: int) -> None:
        self.part = part

    @staticmethod
    def in_window(entry: Entry) -> bool:
        return True


def _salvage(log: Any, header: StreamHeader, parts: list[int], starts: dict[int, int], printer: _Printer) -> int:
    """``cat --skip-damaged``: each part in turn read past its damage (``replay.salvage``), what was skipped said
    on stderr; returns how many runs of events were skipped."""
    from replay.salvage import Skipped, salvage_part

    skipped = 0
    for p in parts:
        place = _SalvagedPart(p)
        for item in salvage_part(log, header, p, starts.get(p, 1)):
            if printer.full:
                return skipped
            if isinstance(item, Skipped):
                skipped += 1
                warn(item.describe())
            else:
                printer.show(place, item)  # type: ignore[arg-type]
    return skipped


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


WAIT_POLL = 0.1
"""Seconds at least between two looks for a stream ``tail -f`` waits for (a Kafka look asks the cluster)."""


def _open_stream(uri: str, stream: str, wait: bool, timeout: float | None,
                 interval: float) -> "tuple[Any, StreamHeader, bool]":
    """The log at ``uri``, the header of ``stream`` in it, and whether it had to be waited for. With ``wait``
    (``tail -f``), a log or stream that does not exist yet is waited for — said once on stderr — for up to
    ``timeout`` seconds (None: until Ctrl-C), looking every ``interval`` (at least ``WAIT_POLL``) seconds; a
    timeout is a log error, as a missing stream is without ``wait``. A local folder holding no stream folder
    yet is waited on too (a job may be creating its first stream in it). Anything else that is wrong (a file,
    a stream's or part's folder, an invalid stream name, an unreachable cluster) is an error at once."""
    if not wait or (timeout is not None and timeout <= 0):
        log = open_uri(uri)
        return log, stream_header(log, stream), False
    from eventlog.errors import EventLogError, StreamNotFoundError
    from eventlog.header import check_stream_name

    from ._common import close_name

    started = None if timeout is None else _time.monotonic()
    try:
        check_stream_name(stream)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="STREAM") from None
    log = open_uri(uri, must_exist=False)  # a folder that does not exist yet is an empty log
    try:
        return log, log.header(stream), False
    except StreamNotFoundError:
        pass
    try:
        close = close_name(stream, log.streams())
    except (EventLogError, OSError):  # no log folder yet
        close = None
    typo = "" if close is None else f"did you mean {close!r}? "
    limit = "" if timeout is None else f"up to {timeout:g} s, --wait-timeout; "
    note(f"waiting for stream {stream!r} in {log.uri} to be created ({typo}{limit}Ctrl-C to stop)")
    while True:
        left = None if started is None or timeout is None else started + timeout - _time.monotonic()
        if left is not None and left <= 0:
            raise EventLogError(f"no stream {stream!r} in log {log.uri} after waiting {timeout:g} s (--wait-timeout)")
        pause = max(interval, WAIT_POLL)
        _time.sleep(pause if left is None else min(pause, left))
        try:
            return log, log.header(stream), True
        except StreamNotFoundError:
            continue


def _run(uri: str, stream: str, part: int | None, offset: tuple[str, int], since: Any, until: Any,
         max_rows: int | None, max_events: int | None, kind: str, fmt: str | None, binary: str, follow: bool, interval: float,
         isolation: str, since_ts: int | None = None, until_ts: int | None = None,
         wait_timeout: float | None = None, template: str | None = None, positions: str | None = None,
         skip_damaged: bool = False) -> None:
    check_window(since_ts, until_ts)
    log, header, waited = _open_stream(uri, stream, follow, wait_timeout, interval)
    if waited:  # a stream created after the follower started: every event of it is new
        offset = ("beginning", 0)
    check_part(header, part)
    since_t, until_t = as_time(since, header, "--since"), as_time(until, header, "--until")
    parts = [part] if part is not None else list(range(header.peers))
    require_write_times(log, header, parts, since_ts, until_ts)
    starts, ends = {}, {}
    saved = _read_positions(positions, stream, parts) if positions else {}
    for p in parts:
        st = log.part_stats(stream, p)
        if p in saved and saved[p] < st.first_seq:  # what this reader had not read yet is gone: never skip silently
            raise TrimmedError(f"the position file {positions} continues at sequence id {saved[p]}, which was dropped "
                               f"(a trim, or Kafka's retention); the earliest event still there is {st.first_seq}: "
                               f"remove the file to start there", earliest=st.first_seq, stream=stream, part=p,
                               seq=saved[p])
        starts[p] = saved[p] if p in saved else start_seq(offset, st.first_seq, st.next_seq)
        ends[p] = st.next_seq
    if skip_damaged:
        writer = _Template(template) if template else row_writer(fmt or default_format(), _columns(
            header, kind, fmt in (None, "table", "csv") and records_write_times(log, header, parts)))
        printer = _Printer(header, writer, kind, since_t, until_t, max_rows, max_events, binary)
        try:
            skipped = _salvage(log, header, parts, starts, printer)
        finally:
            writer.close()
        if skipped:
            warn(f"{skipped} run(s) of damaged events skipped (--skip-damaged reads uncommitted, past the damage; "
                 f"`replay verify {uri} {stream}` lists every problem)")
        return
    # without --follow: every event up to where each part ends now (a reader's pass may stop short of it)
    cursors = open_cursors(log, header, parts, starts=starts, ends=None if follow else ends,
                           progress_only=kind == "progress", isolation=isolation, since_ts=since_ts,
                           until_ts=until_ts)
    live: LiveTail | None = None
    writer: RowWriter
    table = not template and follow and fmt in (None, "table") and (console := _live.live_console()).is_terminal
    fmt = None if table else fmt or default_format()
    columns = _columns(header, kind, fmt in (None, "table", "csv") and records_write_times(log, header, parts))
    if template:
        writer = _Template(template)
        live = None
    elif table:
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
        if positions:
            _write_positions(positions, log.uri, stream, cursors, printer.next_seq)

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
            click.option("--template", "-F", metavar="TEMPLATE",
                         help="Print each row through a template instead of a format, as kcat -f: "
                              "'{part} {seq} {ts} {kind} {time} {record[NAME]}' (also {updates}, {frontier}; "
                              "\\t and \\n work; a newline ends each row)."),
            click.option("--position-file", "positions", type=click.Path(dir_okay=False), metavar="FILE",
                         help="Start each part where the last run with this file stopped (else at --offset), and "
                              "save where this run stops (after every poll with -f)."),
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
@click.option("--skip-damaged", is_flag=True,
              help="Read past damaged events instead of stopping (avro-tools repair): each part in turn, "
                   "uncommitted, what was skipped said on stderr (part, seqs, file, offset).")
def cat(uri: str, stream: str, part: int | None, since: Any, until: Any, since_ts: int | None, until_ts: int | None,
        kind: str, fmt: str | None, binary: str, template: str | None, positions: str | None, isolation: str,
        offset: tuple[str, int], max_rows: int | None, max_events: int | None, skip_damaged: bool) -> None:
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
      replay cat /tmp/cap numbers -F '{part}:{seq} {record[word]}'
      replay cat /tmp/cap numbers --position-file pos.json  # again later: only what is new
      replay cat /tmp/damaged numbers --skip-damaged
    """
    if skip_damaged and (positions or since_ts is not None or until_ts is not None):
        raise click.UsageError("--skip-damaged reads whole parts: not with --position-file, --since-ts or --until-ts")
    _run(uri, stream, part, offset, since, until, max_rows, max_events, kind, fmt, binary, follow=False, interval=0,
         isolation=isolation, since_ts=since_ts, until_ts=until_ts, template=template, positions=positions,
         skip_damaged=skip_damaged)


@click.command("tail", short_help="Print the last events; -f follows a live log.")
@_common_options
@click.option("--follow", "-f", is_flag=True,
              help="Keep printing events as they are appended, until every part is finished (or Ctrl-C).")
@click.option("-n", "--lines", "last", type=click.IntRange(min=0), default=10, show_default=True,
              help="Start with the last N events of each part.")
@click.option("--interval", type=click.FloatRange(min=0.001), default=0.2, show_default=True,
              help="Seconds between polls when following.")
@click.option("--wait-timeout", "wait_timeout", type=click.FloatRange(min=0), metavar="SECONDS",
              help="With -f: how long to wait for a log or stream that does not exist yet (default: until it "
                   "appears, or Ctrl-C); then exit 3 as without -f. 0: do not wait.")
def tail(uri: str, stream: str, part: int | None, since: Any, until: Any, since_ts: int | None,
         until_ts: int | None, kind: str, fmt: str | None, binary: str, template: str | None, positions: str | None,
         isolation: str, follow: bool, last: int, interval: float, wait_timeout: float | None) -> None:
    """Print the last events of each part of STREAM (like cat --offset -N); with -f, keep following the
    log as it grows. Following ends with exit code 0 once every part is finished (or every time before
    --until is complete), and with 130 on Ctrl-C.

    With -f, a log or stream that does not exist yet is waited for (as tail -F waits for a file; a note on
    stderr says so), then followed from its first event; --wait-timeout SECONDS gives up after that long
    (exit 3). Without -f, a missing log or stream is an error at once (exit 3).

    \b
    Examples:
      replay tail /tmp/cap numbers -n 3
      replay tail -f /tmp/cap numbers --kind messages | jq -c '[.time, .record]'
      replay tail -f /tmp/new-job numbers --wait-timeout 60   # started before the job creates it
      replay tail /tmp/cap numbers -n 100 --since-ts 2026-11-25T10:00Z
    """
    if wait_timeout is not None and not follow:
        raise click.UsageError("--wait-timeout is how long tail -f waits for a stream to appear; without -f a "
                               "missing stream is an error at once")
    offset = ("last", last) if last else ("end", 0)
    _run(uri, stream, part, offset, since, until, None, None, kind, fmt, binary, follow=follow, interval=interval,
         isolation=isolation, since_ts=since_ts, until_ts=until_ts, wait_timeout=wait_timeout, template=template,
         positions=positions)
