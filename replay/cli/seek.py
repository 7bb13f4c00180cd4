"""``replay seek``: which sequence id each part wrote at a wall-clock instant (kcat's ``-o s@MS``): the first event
of each part written at or after WHEN, or ``end`` (the next sequence id) where a part wrote nothing since.

Each part is read as ``--since-ts`` reads it (``PartCursor``: Kafka logs seek by record timestamp, other logs
start after the last Progress event written before WHEN), in sequence order (uncommitted: the raw events), and
reading stops at the first event written at or after WHEN.
"""

from __future__ import annotations

import json
import re
from typing import Any

import click

from eventlog.events import Messages
from eventlog.header import StreamHeader
from eventlog.log import Log

from ._common import check_part, frontier_json, open_uri, print_json, print_rich, stream_header, time_json
from ._wallclock import FORMS_HELP, WallClockParam, first_write_time, no_write_times_reason, ts_iso

_KCAT_MS = re.compile(r"s@(\d+)")
_DURATION_ARG = re.compile(r"-\d\S*")
"""An argument that is a duration before now (``-10m``), or meant as one: no option of ``seek`` starts with a
digit."""
_SHIELD = "\0"
"""Put before a duration argument (``-10m``) so that click does not read it as short options (``-1h`` holds
``-h``, the help); ``SeekWhenParam`` takes it off."""


class _SeekCommand(click.Command):
    """A command whose WHEN argument may be a duration before now, ``-10m``, which starts like an option."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        shielded = [_SHIELD + a if _DURATION_ARG.fullmatch(a) and (i == 0 or args[i - 1] not in ("-p", "--part"))
                    else a for i, a in enumerate(args)]
        return super().parse_args(ctx, shielded)


class SeekWhenParam(WallClockParam):
    """A write time as ``--since-ts`` takes it (``parse_when``), or kcat's ``s@MS`` (milliseconds since the
    epoch)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            value = value.removeprefix(_SHIELD)
            m = _KCAT_MS.fullmatch(value.strip())
            if m:
                return int(m.group(1))
        return super().convert(value, param, ctx)


def seek_part(log: Log, header: StreamHeader, part: int, when: int) -> dict[str, Any]:
    """The first event of ``part`` written at or after ``when`` (ms since the epoch), as a JSON-ready dict: part,
    seq, ts (ISO-8601), ts_ms, kind, time (Messages) or updates (Progress), records, and the part's frontier
    before the event (where a reader starting at seq begins); or ``end: true`` and the part's next seq."""
    from ._scan import PartCursor

    cursor = PartCursor(log, header, part, since_ts=when, isolation="uncommitted")
    try:
        for entry in cursor.pull():
            if entry.ts is not None and entry.ts >= when:
                ev = entry.event
                row: dict[str, Any] = {"part": part, "seq": entry.seq, "ts": ts_iso(entry.ts), "ts_ms": entry.ts,
                                       "end": False, "frontier": frontier_json(cursor.frontier)}
                if isinstance(ev, Messages):
                    row.update(kind="messages", time=time_json(ev.time), records=ev.records.num_rows)
                else:
                    row.update(kind="progress", updates=[[time_json(t), d] for t, d in ev.updates])
                return row
            cursor.apply(entry)
        return {"part": part, "seq": cursor.next_seq, "ts": None, "ts_ms": None, "end": True,
                "frontier": frontier_json(cursor.frontier)}
    finally:
        cursor.close()


def _event_text(row: dict[str, Any]) -> str:
    if row["end"]:
        return "end: nothing written at or after WHEN (the next event gets this seq)"
    if row["kind"] == "messages":
        n = row["records"]
        return f"messages at {_json(row['time'])} ({n} record{'' if n == 1 else 's'})"
    return "progress " + _json(row["updates"])


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


SEEK_HELP = """For each part of STREAM (or --part), the first event written at or after WHEN: its sequence id, write time,
kind and time (as kcat -o s@MS finds a Kafka offset), and the part's frontier before it. A part that wrote
nothing since says `end` with the sequence id its next event gets. `replay cat URI STREAM --part P --offset SEQ` then reads
from there.

WHEN is a write time as --since-ts takes it: """ + FORMS_HELP + """; or s@MS, milliseconds since the epoch
(kcat's form). A stream that records no write times (format 1.x file logs) is refused.

\b
Example:
  replay seek /tmp/cap numbers 2026-11-25T10:00:00Z
  replay seek /tmp/cap numbers -10m --part 0 --json
  replay seek /tmp/cap numbers s@1764064800000
"""


@click.command("seek", short_help="The sequence id each part wrote at a wall-clock time.", help=SEEK_HELP, cls=_SeekCommand)
@click.argument("uri")
@click.argument("stream")
@click.argument("when", type=SeekWhenParam(), metavar="WHEN")
@click.option("--part", "-p", type=click.IntRange(min=0), help="Only part P.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON array instead of a table.")
def seek(uri: str, stream: str, when: int, part: int | None, as_json: bool) -> None:
    log = open_uri(uri)
    header = stream_header(log, stream)
    check_part(header, part)
    parts = [part] if part is not None else list(range(header.peers))
    first = first_write_time(log, header, parts)
    if first is not None and first[2] is None:
        p, seq, _ = first
        raise click.UsageError(
            f"replay seek needs the time each event was written, and stream {stream!r} in {log.uri} has none (part "
            f"{p}, seq {seq}): {no_write_times_reason(header)}")
    rows = [seek_part(log, header, p, when) for p in parts]
    if as_json:
        print_json(rows)
        return
    from rich.table import Table

    table = Table(title=f"{stream!r}: first event written at or after {ts_iso(when)}", title_justify="left")
    for label, justify in (("part", "right"), ("seq", "right"), ("written", "left"), ("event", "left"),
                           ("frontier before", "left")):
        table.add_column(label, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        before = _json(row["frontier"]) + ("" if row["frontier"] else " finished")
        table.add_row(str(row["part"]), str(row["seq"]), row["ts"] or "-", _event_text(row), before)
    print_rich(table)
