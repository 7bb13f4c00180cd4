"""``replay diff``: compare two captures of a stream time by time, as multisets of records, whatever their
part counts: the first pass keeps an order-independent digest per time, a second pass reads the first
diverging time again on both sides to show records that differ."""

from __future__ import annotations

import collections
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import click

from eventlog.antichain import Antichain
from eventlog.events import Messages
from eventlog.header import StreamHeader
from eventlog.log import Log
from eventlog.time import Time
from replay.replayer import Replayer

from ._common import EXIT_DIFFERENT, frontier_text, open_uri, progress, stream_header, time_text
from ._scan import total_events
from ._values import RecordConverter

_MASK = (1 << 64) - 1


def _row_key(row: dict[str, Any]) -> str:
    return json.dumps(row, ensure_ascii=False, separators=(",", ":"))


@dataclass
class _Digest:
    """An order-independent digest of a multiset of records: count and two sums of 64-bit row hashes."""

    count: int = 0
    a: int = 0
    b: int = 0

    def add(self, key: str) -> None:
        h = hashlib.blake2b(key.encode(), digest_size=16).digest()
        self.count += 1
        self.a = (self.a + int.from_bytes(h[:8], "little")) & _MASK
        self.b = (self.b + int.from_bytes(h[8:], "little")) & _MASK


@dataclass
class _Side:
    """What one capture holds: a digest per time, and its merged frontier at the end."""

    label: str
    uri: str
    stream: str
    digests: dict = field(default_factory=lambda: collections.defaultdict(_Digest))
    frontier: Antichain = field(default_factory=Antichain)

    def complete(self, t: Time) -> bool:
        return not self.frontier.less_equal(t)


def _read_side(label: str, log: Log, header: StreamHeader, converter: RecordConverter, advance: Any) -> _Side:
    side = _Side(label, log.uri, header.stream)
    with Replayer(log, header.stream, 0, 1) as r:
        seen = 0
        for ev in r:
            if isinstance(ev, Messages):
                digest = side.digests[ev.time]
                for row in converter.rows(ev.records):
                    digest.add(_row_key(row))
            advance(r.events_read - seen)
            seen = r.events_read
        side.frontier = r.frontier
    return side


def _records_at(log: Log, stream: str, t: Time, converter: RecordConverter) -> collections.Counter:
    rows: collections.Counter = collections.Counter()
    with Replayer(log, stream, 0, 1, since=t) as r:
        for ev in r:
            if isinstance(ev, Messages) and ev.time == t:
                rows.update(_row_key(row) for row in converter.rows(ev.records))
    return rows


def _schema_problems(ha: StreamHeader, hb: StreamHeader) -> list[str]:
    out = []
    if ha.time_type != hb.time_type:
        out.append(f"time types differ: A {ha.time_type}, B {hb.time_type}")
    if not ha.schema.equals(hb.schema, check_metadata=False):
        out.append(f"schemas differ:\n  A: {ha.schema.to_string(show_schema_metadata=False)}"
                   f"\n  B: {hb.schema.to_string(show_schema_metadata=False)}".replace("\n", "\n     "))
    return out


@click.command("diff", short_help="Compare two captures time by time.")
@click.argument("uri_a", metavar="A")
@click.argument("uri_b", metavar="B")
@click.argument("stream")
@click.option("--stream-b", help="The stream's name in B (default: STREAM).")
@click.option("--completed", "completed_only", is_flag=True,
              help="Compare only the times complete in both captures, and not their frontiers.")
@click.option("--sample", type=click.IntRange(min=0), default=5, show_default=True,
              help="Differing records to show per side.")
def diff(uri_a: str, uri_b: str, stream: str, stream_b: str | None, completed_only: bool, sample: int) -> None:
    """Compare two captures of STREAM (in logs A and B) time by time: at each time, the multiset of records
    must be equal, however the records are spread over parts and events. By default every time with
    records is compared and the final frontiers must agree too; --completed compares only the times
    complete in both.

    Exit 0 when equal; 1 with a report of the first diverging time (in time order) and a sample of
    records found only in A or only in B.

    \b
    Example:
      replay diff /tmp/run1 /tmp/run2 numbers
      replay diff /tmp/cap /tmp/cap numbers --stream-b numbers-copy --completed
    """
    log_a, log_b = open_uri(uri_a), open_uri(uri_b)
    ha, hb = stream_header(log_a, stream), stream_header(log_b, stream_b or stream)
    problems = _schema_problems(ha, hb)
    if problems:
        click.echo("captures differ: " + "; ".join(problems))
        raise click.exceptions.Exit(EXIT_DIFFERENT)
    converter = RecordConverter(ha.schema, "hex")
    total = total_events(log_a, ha, range(ha.peers)) + total_events(log_b, hb, range(hb.peers))
    with progress("reading captures", total) as advance:
        a = _read_side("A", log_a, ha, converter, advance)
        b = _read_side("B", log_b, hb, converter, advance)
    times = sorted(set(a.digests) | set(b.digests))
    if completed_only:
        times = [t for t in times if a.complete(t) and b.complete(t)]
    differing = [t for t in times if a.digests.get(t, _Digest()) != b.digests.get(t, _Digest())]
    frontiers_differ = not completed_only and a.frontier != b.frontier
    if not differing and not frontiers_differ:
        records = sum(a.digests[t].count for t in times if t in a.digests)
        click.echo(f"equal: {len(times)} times, {records} records"
                   + ("" if completed_only else f", frontier {frontier_text(a.frontier)}"))
        return
    click.echo(f"A: {uri_a} stream {stream!r}; B: {uri_b} stream {stream_b or stream!r}")
    if differing:
        first = differing[0]
        click.echo(f"captures differ at {len(differing)} of {len(times)} times; first diverging time: "
                   f"{time_text(first)}")
        _report_time(first, log_a, a, log_b, b, converter, sample)
        if len(differing) > 1:
            rest = ", ".join(time_text(t) for t in differing[1:11]) + (" …" if len(differing) > 11 else "")
            click.echo(f"other differing times: {rest}")
    if frontiers_differ:
        click.echo(f"frontiers differ: A {frontier_text(a.frontier)}, B {frontier_text(b.frontier)}")
    raise click.exceptions.Exit(EXIT_DIFFERENT)


def _report_time(t: Time, log_a: Log, a: _Side, log_b: Log, b: _Side, converter: RecordConverter,
                 sample: int) -> None:
    rows_a = _records_at(log_a, a.stream, t, converter)
    rows_b = _records_at(log_b, b.stream, t, converter)
    state = {s.label: "complete" if s.complete(t) else "not complete" for s in (a, b)}
    click.echo(f"time {time_text(t)}: A has {sum(rows_a.values())} records ({state['A']}), "
               f"B has {sum(rows_b.values())} records ({state['B']})")
    for label, only in (("A", rows_a - rows_b), ("B", rows_b - rows_a)):
        n = sum(only.values())
        if not n:
            continue
        click.echo(f"  only in {label} ({n}):")
        shown = 0
        for key, count in only.items():
            if shown >= sample:
                break
            click.echo(f"    {key}" + (f"  (x{count})" if count > 1 else ""))
            shown += 1
        if n > shown and len(only) > shown:
            click.echo(f"    … {len(only) - shown} more distinct")
