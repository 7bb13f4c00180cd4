"""``replay diff``: compare two captures of a stream time by time, as multisets of records, whatever their
part counts.

Both captures are read together, a replayer each, a chunk of records from one and then from the other. The
records of a time wait until the time is complete in both captures (or both are read to their end); then the
waiting records are compared in bulk with pyarrow's hash group-by: both sides' records with a time column and a
side column (+1 in A, -1 in B), grouped on every column and the time, the side summed — a group whose sum is
not 0 is a record one side holds more often than the other. Columns pyarrow cannot group on (lists, structs,
maps) are grouped on a canonical text of each value, the JSON ``replay cat`` writes. A second pass reads the
first diverging time again on both sides to show records.
"""

from __future__ import annotations

import collections
import json
import math
from typing import Any, Callable, Iterator

import click
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eventlog.events import Messages
from eventlog.header import StreamHeader
from eventlog.log import Log
from eventlog.time import Time
from replay.replayer import Replayer

from ._common import EXIT_DIFFERENT, frontier_text, open_uri, progress, stream_header, time_text
from ._scan import open_cursors, total_events
from ._values import RecordConverter

_CHUNK_ROWS = 64 * 1024
"""Records read from one capture before turning to the other."""
_COMPARE_ROWS = 2 * 1024 * 1024
"""Records of complete times that wait before they are compared in one group-by."""


def _row_key(row: Any) -> str:
    return json.dumps(row, ensure_ascii=False, separators=(",", ":"))


class _Side:
    """One capture being read: its replayer, the records per time, and the records of the times not yet
    compared."""

    def __init__(self, label: str, log: Log, header: StreamHeader, advance: Callable[[int], None]) -> None:
        self.label, self.uri, self.stream = label, log.uri, header.stream
        self.counts: dict[Time, int] = {}
        """Records per time (every time with records)."""
        self.waiting: dict[Time, list[pa.RecordBatch]] = collections.defaultdict(list)
        """The records of the times not compared yet."""
        self.done = False
        self._replayer = Replayer(log, header.stream, 0, 1)
        self._events: Iterator = iter(self._replayer)
        self._advance = advance
        self._seen = 0

    @property
    def frontier(self) -> Any:
        """The capture's merged frontier after the events read (its final frontier once ``done``)."""
        return self._replayer.frontier

    def complete(self, t: Time) -> bool:
        """No record at ``t`` can follow in this capture (its frontier passed ``t``)."""
        return not self._replayer.frontier.less_equal(t)

    def read(self, rows: int) -> None:
        """Read events until ``rows`` more records arrived, or to the end (then ``done``)."""
        got = 0
        while got < rows:
            ev = next(self._events, None)
            if ev is None:
                self.done = True
                self._replayer.close()
                break
            if isinstance(ev, Messages):
                n = ev.records.num_rows
                self.counts[ev.time] = self.counts.get(ev.time, 0) + n
                self.waiting[ev.time].append(ev.records)
                got += n
        self._advance(self._replayer.events_read - self._seen)
        self._seen = self._replayer.events_read

    def close(self) -> None:
        self._replayer.close()


def _can_group(t: pa.DataType) -> bool:
    """True when pyarrow's hash group-by takes keys of type ``t``."""
    try:
        pa.table({"k": pa.array([], t)}).group_by("k").aggregate([])
        return True
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return False


def _group_key(field: pa.Field) -> Callable[[pa.ChunkedArray], "pa.ChunkedArray | pa.Array"]:
    """How a column becomes a group-by key equal exactly for equal values: as it is; floats with every NaN
    as one NaN; dictionaries decoded (their dictionaries differ between batches); and the columns pyarrow
    cannot group on as the JSON text of each value (nulls stay null)."""
    t = field.type
    if pa.types.is_dictionary(t):
        decoded = _group_key(field.with_type(t.value_type))
        return lambda col: decoded(col.cast(t.value_type))
    if pa.types.is_floating(t):
        wide = pa.float32() if pa.types.is_float16(t) else t
        nan = pa.scalar(math.nan, wide)
        return lambda col: pc.if_else(pc.is_nan(col.cast(wide)), nan, col.cast(wide))
    if not isinstance(t, pa.ExtensionType) and _can_group(t):
        return lambda col: col
    converter = RecordConverter(pa.schema([field.with_name("v")]), "hex")

    def as_text(col: pa.ChunkedArray) -> pa.Array:
        values = converter.columns(pa.table([col], names=["v"]))[0]
        return pa.array([None if v is None else _row_key(v) for v in values], pa.string())

    return as_text


class _Multisets:
    """Compares the records of both captures at a set of times (module doc)."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self._keys = [_group_key(f) for f in schema]
        self._names = [f"c{i}" for i in range(len(schema))] + ["_t"]

    def _table(self, times: list[Time], ids: dict[Time, int], side: dict[Time, list[pa.RecordBatch]],
               sign: int) -> pa.Table:
        batches = [b for t in times for b in side.get(t, ())]
        tids = np.fromiter((ids[t] for t in times for _ in side.get(t, ())), np.int32)
        lengths = np.fromiter((b.num_rows for b in batches), np.int64, len(batches))
        records = pa.Table.from_batches(batches) if batches else self.schema.empty_table()
        n = records.num_rows
        columns = [key(records.column(i)) for i, key in enumerate(self._keys)]
        columns += [pa.array(np.repeat(tids, lengths)), pa.array(np.full(n, sign, np.int8))]
        return pa.table(columns, names=self._names + ["_side"])

    def differing(self, times: list[Time], a: dict[Time, list[pa.RecordBatch]],
                  b: dict[Time, list[pa.RecordBatch]]) -> set[Time]:
        """The ``times`` at which the records in ``a`` and ``b`` (records per time) are different multisets."""
        if not times:
            return set()
        ids = {t: i for i, t in enumerate(times)}
        both = pa.concat_tables([self._table(times, ids, a, 1), self._table(times, ids, b, -1)])
        sums = both.group_by(self._names).aggregate([("_side", "sum")])
        odd = sums.filter(pc.not_equal(sums["_side_sum"], 0))
        return {times[i] for i in pc.unique(odd["_t"]).to_pylist()}


def _compare(a: _Side, b: _Side, multisets: _Multisets) -> set[Time]:
    """Read both captures to their end; the times whose records differ."""
    differing: set[Time] = set()
    ready: dict[str, dict[Time, list[pa.RecordBatch]]] = {"A": {}, "B": {}}
    ready_rows = 0

    def move(times: list[Time]) -> int:
        rows = 0
        for side in (a, b):
            for t in times:
                batches = side.waiting.pop(t, None)
                if batches:
                    ready[side.label][t] = batches
                    rows += sum(x.num_rows for x in batches)
        return rows

    def flush() -> None:
        nonlocal ready_rows
        times = list(ready["A"].keys() | ready["B"].keys())
        differing.update(multisets.differing(times, ready["A"], ready["B"]))
        ready["A"], ready["B"], ready_rows = {}, {}, 0

    seen = None  # the frontiers at the last look for complete times
    while not (a.done and b.done):
        for side in (a, b):
            if not side.done:
                side.read(_CHUNK_ROWS)
        if (a.frontier, b.frontier) != seen:
            seen = (a.frontier, b.frontier)
            ready_rows += move([t for t in a.waiting.keys() | b.waiting.keys() if a.complete(t) and b.complete(t)])
        if ready_rows >= _COMPARE_ROWS:
            flush()
    move(list(a.waiting.keys() | b.waiting.keys()))
    flush()
    return differing


def _records_at(log: Log, stream: str, t: Time, converter: RecordConverter,
                where: dict[str, list[tuple[int, int]]]) -> collections.Counter:
    """The records at time ``t`` (as JSON text, counted), each part read (committed) until ``t`` is complete in
    it; ``where`` gets the (part, seq) of every record, by its text."""
    rows: collections.Counter = collections.Counter()
    header = log.header(stream)
    for cursor in open_cursors(log, header, range(header.peers)):
        try:
            for entry in cursor.read():
                ev = entry.event
                if isinstance(ev, Messages) and ev.time == t:
                    for row in converter.rows(ev.records):
                        key = _row_key(row)
                        rows[key] += 1
                        where[key].append((cursor.part, entry.seq))
                elif not cursor.frontier.less_equal(t):
                    break  # t is complete in this part: no record at t follows
        finally:
            cursor.close()
    return rows


def _places(places: list[tuple[int, int]]) -> str:
    """The events a record was read from on its side (``part 1 seq 7``; up to three, then how many more): any
    copy of it may be the one the other side lacks."""
    distinct = list(dict.fromkeys(places))
    text = ", ".join(f"part {p} seq {s}" for p, s in distinct[:3])
    return text + (f", … {len(distinct) - 3} more" if len(distinct) > 3 else "")


def _schema_problems(ha: StreamHeader, hb: StreamHeader) -> list[str]:
    out = []
    if ha.time_type != hb.time_type:
        out.append(f"time types differ: A {ha.time_type}, B {hb.time_type}")
    if not ha.schema.equals(hb.schema, check_metadata=False):
        out.append(f"schemas differ:\n  A: {ha.schema.to_string(show_schema_metadata=False)}"
                   f"\n  B: {hb.schema.to_string(show_schema_metadata=False)}".replace("\n", "\n     "))
    return out


def compare_streams(log_a: Log, stream_a: str, log_b: Log, stream_b: str) -> str | None:
    """None when ``stream_a`` in ``log_a`` and ``stream_b`` in ``log_b`` hold the same multiset of records at
    every time and end at the same frontier (``replay diff``'s rule); else one line saying how they differ
    (the schemas, the first diverging time and its record counts, or the frontiers)."""
    ha, hb = log_a.header(stream_a), log_b.header(stream_b)
    problems = _schema_problems(ha, hb)
    if problems:
        return "; ".join(" ".join(p.split()) for p in problems)
    a, b = _Side("A", log_a, ha, lambda n: None), _Side("B", log_b, hb, lambda n: None)
    try:
        differing = _compare(a, b, _Multisets(ha.schema))
    finally:
        a.close()
        b.close()
    if differing:
        first = min(differing)
        return (f"records differ at {len(differing)} time(s); first {time_text(first)}: A has "
                f"{a.counts.get(first, 0)} records, B {b.counts.get(first, 0)}")
    if a.frontier != b.frontier:
        return f"frontiers differ: A {frontier_text(a.frontier)}, B {frontier_text(b.frontier)}"
    return None


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
    total = total_events(log_a, ha, range(ha.peers)) + total_events(log_b, hb, range(hb.peers))
    with progress("reading captures", total) as advance:
        a, b = _Side("A", log_a, ha, advance), _Side("B", log_b, hb, advance)
        try:
            differing = _compare(a, b, _Multisets(ha.schema))
        finally:
            a.close()
            b.close()
    times = sorted(a.counts.keys() | b.counts.keys())
    if completed_only:
        times = [t for t in times if a.complete(t) and b.complete(t)]
        differing = {t for t in differing if a.complete(t) and b.complete(t)}
    frontiers_differ = not completed_only and a.frontier != b.frontier
    if not differing and not frontiers_differ:
        records = sum(a.counts.get(t, 0) for t in times)
        click.echo(f"equal: {len(times)} times, {records} records"
                   + ("" if completed_only else f", frontier {frontier_text(a.frontier)}"))
        return
    click.echo(f"A: {uri_a} stream {stream!r}; B: {uri_b} stream {stream_b or stream!r}")
    if differing:
        ordered = sorted(differing)
        first = ordered[0]
        click.echo(f"captures differ at {len(ordered)} of {len(times)} times; first diverging time: "
                   f"{time_text(first)}")
        _report_time(first, log_a, a, log_b, b, RecordConverter(ha.schema, "hex"), sample)
        if len(ordered) > 1:
            rest = ", ".join(time_text(t) for t in ordered[1:11]) + (" …" if len(ordered) > 11 else "")
            click.echo(f"other differing times: {rest}")
    if frontiers_differ:
        click.echo(f"frontiers differ: A {frontier_text(a.frontier)}, B {frontier_text(b.frontier)}")
    raise click.exceptions.Exit(EXIT_DIFFERENT)


def _report_time(t: Time, log_a: Log, a: _Side, log_b: Log, b: _Side, converter: RecordConverter,
                 sample: int) -> None:
    where: dict[str, dict[str, list[tuple[int, int]]]] = {"A": collections.defaultdict(list),
                                                            "B": collections.defaultdict(list)}
    rows_a = _records_at(log_a, a.stream, t, converter, where["A"])
    rows_b = _records_at(log_b, b.stream, t, converter, where["B"])
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
            click.echo(f"    {key}" + (f"  (x{count})" if count > 1 else "")
                       + f"  [{_places(where[label][key])}]")
            shown += 1
        if n > shown and len(only) > shown:
            click.echo(f"    … {len(only) - shown} more distinct")
