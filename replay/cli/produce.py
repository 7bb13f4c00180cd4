"""``replay produce``: write records into one part by hand, as ``kcat -P`` does: JSON lines from stdin (or a file)
appended at a time, then optionally the part's frontier moved (``--advance-to``) or the part finished
(``--finish``). Without records, ``--advance-to``/``--finish`` release the readers of a part whose writer died
for good.

Every record is converted to the stream's schema before anything is written: a bad record is an error naming
its line and field, and nothing is appended. Values are read as ``replay cat`` writes them (records as JSON,
docs/cli.md): timestamps as ISO-8601 strings (or integers of the type's unit), binary as base64 (``--bytes
hex``), decimals as strings or numbers, ``"NaN"``/``"Infinity"``/``"-Infinity"`` for floats, maps as arrays of
``[key, value]`` pairs (or objects).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import difflib
import json
import math
import re
import sys
from typing import IO, Any, Callable, Iterator

import click
import pyarrow as pa

from eventlog.antichain import Antichain
from eventlog.errors import PartLockedError, ProgressError, SchemaMismatchError
from eventlog.header import StreamHeader
from eventlog.log import Log

from ._common import TIME, as_time, check_part, frontier_text, note, open_uri, stream_header, time_text
from ._values import BINARY_ENCODINGS

MAX_ROWS_PER_EVENT = 64 * 1024
"""Records per Messages event: a larger input is appended as several events at the same time."""


class BadRecordError(SchemaMismatchError):
    """A line of the input is not a record of the stream's schema."""


class _Bad(Exception):
    """A value that does not convert; ``path`` is where in the record (``field``, ``field.child``, ``field[2]``)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.message, self.path = message, path


# -- JSON values to Arrow values -------------------------------------------------------------------------------

Converter = Callable[[Any], Any]

_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_FRACTION = re.compile(r"^(.*?T?\d{2}:\d{2}:\d{2})\.(\d+)(.*)$")
_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def _integer(t: pa.DataType) -> Converter:
    bits = t.bit_width
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if pa.types.is_signed_integer(t) else (0, (1 << bits) - 1)

    def conv(v: Any) -> int:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise _Bad(f"expected an integer ({t}), got {_show(v)}")
        if not lo <= v <= hi:
            raise _Bad(f"{v} is out of range of {t} ({lo}..{hi})")
        return v

    return conv


def _floating(t: pa.DataType) -> Converter:
    def conv(v: Any) -> float:
        if isinstance(v, str) and v in _FLOAT_WORDS:
            return _FLOAT_WORDS[v]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _Bad(f"expected a number ({t}; \"NaN\", \"Infinity\", \"-Infinity\" as strings), got {_show(v)}")
        return float(v)

    return conv


def _boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise _Bad(f"expected true or false, got {_show(v)}")
    return v


def _string(v: Any) -> str:
    if not isinstance(v, str):
        raise _Bad(f"expected a string, got {_show(v)}")
    return v


def _binary(encoding: str, size: int | None = None) -> Converter:
    def conv(v: Any) -> bytes:
        if not isinstance(v, str):
            raise _Bad(f"expected a {encoding} string (binary), got {_show(v)}")
        try:
            data = bytes.fromhex(v) if encoding == "hex" else base64.b64decode(v, validate=True)
        except (ValueError, binascii.Error):
            raise _Bad(f"expected {encoding} (binary), got {_show(v)}") from None
        if size is not None and len(data) != size:
            raise _Bad(f"expected {size} bytes, got {len(data)}")
        return data

    return conv


def _instant(text: str, unit: str) -> int:
    """An ISO-8601 date and time as an integer count of ``unit`` since the epoch (no zone: UTC); the fraction is
    kept exactly, to the unit's digits."""
    digits = len(str(_PER_SECOND[unit])) - 1
    frac = 0
    m = _FRACTION.match(text)
    if m:
        text, fraction = m.group(1) + m.group(3), m.group(2)
        if len(fraction) > digits and fraction[digits:].strip("0"):
            raise ValueError(f"more digits than the unit {unit} holds")
        frac = int(fraction[:digits].ljust(digits, "0")) if digits else 0
    when = dt.datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    seconds = (when - _EPOCH) // dt.timedelta(seconds=1)
    return seconds * _PER_SECOND[unit] + frac


def _timestamp(t: pa.TimestampType) -> Converter:
    def conv(v: Any) -> int:
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        if isinstance(v, str):
            try:
                return _instant(v, t.unit)
            except ValueError as e:
                raise _Bad(f"{_show(v)} is not an ISO-8601 time ({t}): {e}") from None
        raise _Bad(f"expected an ISO-8601 string or an integer count of {t.unit} ({t}), got {_show(v)}")

    return conv


def _date(t: pa.DataType) -> Converter:
    per_day = 86_400_000 if pa.types.is_date64(t) else 1

    def conv(v: Any) -> int:
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        if isinstance(v, str):
            try:
                days = (dt.date.fromisoformat(v) - dt.date(1970, 1, 1)).days
            except ValueError:
                raise _Bad(f"{_show(v)} is not a date (2024-05-01)") from None
            return days * per_day
        raise _Bad(f"expected a date string (2024-05-01) or an integer ({t}), got {_show(v)}")

    return conv


def _time_of_day(t: pa.DataType) -> Converter:
    unit = t.unit

    def conv(v: Any) -> int:
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        if isinstance(v, str):
            try:
                return _instant(f"1970-01-01T{v}", unit)
            except ValueError:
                raise _Bad(f"{_show(v)} is not a time of day (12:00:00.500)") from None
        raise _Bad(f"expected a time of day (12:00:00.500) or an integer of {unit} ({t}), got {_show(v)}")

    return conv


def _decimal(t: pa.DataType) -> Converter:
    def conv(v: Any) -> decimal.Decimal:
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise _Bad(f"expected a decimal as a string or number ({t}), got {_show(v)}")
        try:
            return decimal.Decimal(str(v))
        except decimal.InvalidOperation:
            raise _Bad(f"{_show(v)} is not a decimal ({t})") from None

    return conv


def _struct(t: pa.StructType, binary: str) -> Converter:
    fields = [t.field(i) for i in range(t.num_fields)]
    convs = {f.name: _field_converter(f, binary) for f in fields}

    def conv(v: Any) -> dict:
        if not isinstance(v, dict):
            raise _Bad(f"expected an object ({t}), got {_show(v)}")
        extra = [k for k in v if k not in convs]
        if extra:
            raise _Bad(f"has no field {extra[0]!r} (fields: {', '.join(convs)})")
        out = {}
        for name, c in convs.items():
            try:
                out[name] = c(v.get(name))
            except _Bad as e:
                raise _Bad(e.message, f".{name}{e.path}") from None
        return out

    return conv


def _list(t: pa.DataType, binary: str) -> Converter:
    item = _field_converter(t.value_field, binary)
    size = t.list_size if pa.types.is_fixed_size_list(t) else None

    def conv(v: Any) -> list:
        if not isinstance(v, list):
            raise _Bad(f"expected an array ({t}), got {_show(v)}")
        if size is not None and len(v) != size:
            raise _Bad(f"expected {size} items, got {len(v)}")
        out = []
        for i, x in enumerate(v):
            try:
                out.append(item(x))
            except _Bad as e:
                raise _Bad(e.message, f"[{i}]{e.path}") from None
        return out

    return conv


def _map(t: pa.MapType, binary: str) -> Converter:
    key = _field_converter(t.key_field, binary)
    value = _field_converter(t.item_field, binary)

    def conv(v: Any) -> list:
        pairs = list(v.items()) if isinstance(v, dict) else v
        if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
            raise _Bad(f"expected an array of [key, value] pairs or an object ({t}), got {_show(v)}")
        out = []
        for i, (k, x) in enumerate(pairs):
            try:
                out.append((key(k), value(x)))
            except _Bad as e:
                raise _Bad(e.message, f"[{i}]{e.path}") from None
        return out

    return conv


def _converter(t: pa.DataType, binary: str) -> Converter:  # noqa: C901 - one branch per type family
    """The function turning a JSON value into a Python value ``pa.array`` takes for type ``t`` (not null)."""
    T = pa.types
    if isinstance(t, pa.ExtensionType):
        return _converter(t.storage_type, binary)
    if T.is_integer(t):
        return _integer(t)
    if T.is_floating(t):
        return _floating(t)
    if T.is_boolean(t):
        return _boolean
    if T.is_string(t) or T.is_large_string(t) or T.is_string_view(t):
        return _string
    if T.is_timestamp(t):
        return _timestamp(t)
    if T.is_date(t):
        return _date(t)
    if T.is_time(t):
        return _time_of_day(t)
    if T.is_duration(t):
        return _integer(pa.int64())
    if T.is_fixed_size_binary(t):
        return _binary(binary, t.byte_width)
    if T.is_binary(t) or T.is_large_binary(t) or T.is_binary_view(t):
        return _binary(binary)
    if T.is_decimal(t):
        return _decimal(t)
    if T.is_struct(t):
        return _struct(t, binary)
    if T.is_map(t):
        return _map(t, binary)
    if T.is_list(t) or T.is_large_list(t) or T.is_fixed_size_list(t) or T.is_list_view(t) \
            or T.is_large_list_view(t):
        return _list(t, binary)
    return lambda v: v  # other types: as pyarrow converts the JSON value


def _field_converter(f: pa.Field, binary: str) -> Converter:
    """``_converter`` of the field's type, with nulls (refused where the field is not nullable)."""
    conv = _converter(f.type, binary)
    nullable = f.nullable or pa.types.is_null(f.type)

    def with_null(v: Any) -> Any:
        if v is None:
            if not nullable:
                raise _Bad("is null, but the field is not nullable")
            return None
        return conv(v)

    return with_null


class RecordParser:
    """Turns JSON lines into record batches of ``schema``, checking every value; a bad line raises
    ``BadRecordError`` naming the line number and field."""

    def __init__(self, header: StreamHeader, part: int, source: str, binary: str = "base64") -> None:
        self.header, self.part, self.source = header, part, source
        self.schema = header.schema
        self.names = list(self.schema.names)
        self._convs = [_field_converter(f, binary) for f in self.schema]
        self.columns: list[list[Any]] = [[] for _ in self.names]
        self.lines: list[int] = []
        """The input line of each record (for errors found when building the columns)."""

    def _error(self, line: int, message: str) -> BadRecordError:
        return BadRecordError(f"line {line} of {self.source}: {message}; nothing was written",
                              stream=self.header.stream, part=self.part)

    def add(self, line: int, text: str) -> None:
        """Parse one non-empty line and keep its values."""
        text = text.rstrip("\r\n")
        try:
            row = json.loads(text)
        except json.JSONDecodeError as e:
            raise self._error(line, f"not JSON ({e.msg} at column {e.pos + 1})") from None
        if not isinstance(row, dict):
            raise self._error(line, f"expected a JSON object (a record), got {_show(row)}")
        extra = [k for k in row if k not in self.names]
        if extra:
            close = difflib.get_close_matches(extra[0], [n for n in self.names if n not in row], n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise self._error(line, f"field {extra[0]!r} is not in the stream's schema ({hint}its fields: "
                                    f"{', '.join(self.names)})")
        values = []
        for name, f, conv in zip(self.names, self.schema, self._convs):
            if name not in row and not f.nullable:
                raise self._error(line, f"field {name!r} is missing (it is not nullable)")
            try:
                values.append(conv(row.get(name)))
            except _Bad as e:
                raise self._error(line, f"field {name + e.path!r}: {e.message}") from None
        for column, v in zip(self.columns, values):
            column.append(v)
        self.lines.append(line)

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The records kept, as batches of at most ``MAX_ROWS_PER_EVENT`` records."""
        arrays = [self._array(i, f) for i, f in enumerate(self.schema)]
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        for off in range(0, table.num_rows, MAX_ROWS_PER_EVENT):
            yield table.slice(off, MAX_ROWS_PER_EVENT).combine_chunks().to_batches()[0]

    def _array(self, i: int, f: pa.Field) -> pa.Array:
        try:
            return pa.array(self.columns[i], type=f.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            pass
        for line, v in zip(self.lines, self.columns[i]):  # find the record that does not convert
            try:
                pa.array([v], type=f.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
                raise self._error(line, f"field {f.name!r}: {e}") from None
        raise self._error(self.lines[0], f"field {f.name!r} does not convert to {f.type}")

    @property
    def rows(self) -> int:
        return len(self.lines)


def read_records(stream: IO[str], parser: RecordParser) -> None:
    """Every non-blank line of ``stream`` into ``parser``."""
    for n, text in enumerate(stream, start=1):
        if text.strip():
            parser.add(n, text)


# -- the part before writing -----------------------------------------------------------------------------------


def _trailing_messages(log: Log, header: StreamHeader, part: int) -> int:
    """Messages events after the part's last Progress event: what its last writer left uncommitted (read from
    the Progress events alone, Messages skipped undecoded)."""
    from eventlog.parts import CheckedPart

    stats = log.part_stats(header.stream, part)
    last_progress = stats.first_seq - 1
    with CheckedPart(log, header, part, start=stats.first_seq, progress_only=True, end=stats.next_seq) as r:
        for entry in r.read():
            last_progress = entry.seq
    return max(0, stats.next_seq - 1 - last_progress)


def _send_time(frontier: Antichain, header: StreamHeader, time: Any) -> Any:
    """The time to append at: ``--time``, else the part's frontier when it is one time."""
    if time is not None:
        return as_time(time, header, "--time")
    times = list(frontier)
    if not times:
        raise click.UsageError("the part is finished (its frontier is empty): nothing more can be written to it")
    if len(times) != 1:
        raise click.UsageError(f"the part's frontier {frontier_text(frontier)} is not one time: pass --time")
    return times[0]


@click.command("produce", short_help="Append records (JSON lines) to a part by hand; advance or finish it.")
@click.argument("uri")
@click.argument("stream")
@click.option("--part", "-p", type=click.IntRange(min=0), required=True, help="The part written.")
@click.option("--file", "-f", "path", type=click.Path(exists=True, dir_okay=False, allow_dash=True), default="-",
              help="Read the records from this file of JSON lines (default: stdin, `-`).")
@click.option("--time", "-t", type=TIME, help="The time of the records (default: the part's frontier, the lowest "
              "time it may still send).")
@click.option("--advance-to", "advance_to", type=TIME, metavar="TIME",
              help="Then move the part's frontier to TIME (the part may no longer send before it).")
@click.option("--finish", is_flag=True, help="Then finish the part (its frontier empty: it sends nothing more).")
@click.option("--no-records", is_flag=True, help="Read no records (do not wait for stdin): only --advance-to or "
              "--finish.")
@click.option("--bytes", "binary", type=click.Choice(BINARY_ENCODINGS), default="base64", show_default=True,
              help="How binary values are written in the input.")
@click.option("--new-writer", is_flag=True, help="Open the part as a new writer incarnation: committed readers "
              "then void the messages its last writer left at times it had not completed, as when a job restarts "
              "(default: continue the last writer, whose messages are committed once the frontier passes them).")
def produce(uri: str, stream: str, part: int, path: str, time: Any, advance_to: Any, finish: bool, no_records: bool,
            binary: str, new_writer: bool) -> None:
    """Append records to part --part of STREAM by hand (as kcat -P): JSON lines, one record a line, from stdin
    or --file, with the stream's fields (values as `replay cat` prints them; a missing nullable field is
    null), at --time (default: the part's frontier). Then --advance-to moves the part's frontier, or --finish
    finishes the part. Every record is checked first: a bad one is an error naming its line and field, and
    nothing is written. A time behind the part's frontier is refused.

    Without records (--no-records, or empty input), --advance-to or --finish releases the readers of a part
    whose job died for good: following replayers and `tail -f` wait for an unfinished part forever.

    Records appended without --advance-to/--finish stay uncommitted (committed readers hold them) until the
    part's frontier passes their time.

    Careful: this writes the part as its writer. On Kafka, opening the part fences a live writer of it (its
    next write fails); on a file log a live writer holds the part's lock, and produce stops with an error.

    \b
    Example:
      echo '{"n": 7, "word": "seven"}' | replay produce /tmp/cap numbers --part 0 --advance-to 6
      replay produce /tmp/cap numbers --part 1 --file more.jsonl --time 5
      replay produce /tmp/cap numbers --part 2 --no-records --finish    # its job died: release readers
    """
    from eventlog.parts.capture import Capture

    if finish and advance_to is not None:
        raise click.UsageError("--advance-to and --finish exclude each other (--finish empties the frontier)")
    if no_records and path != "-":
        raise click.UsageError("--no-records and --file exclude each other")
    log = open_uri(uri)
    header = stream_header(log, stream)
    check_part(header, part)
    target = as_time(advance_to, header, "--advance-to")
    source = "stdin" if path == "-" else path
    parser = RecordParser(header, part, source, binary)
    if not no_records:
        if path == "-":
            if sys.stdin.isatty():
                note("reading records from the terminal: one JSON object a line, Ctrl-D ends (--no-records reads "
                     "none)")
            read_records(sys.stdin, parser)
        else:
            with open(path, encoding="utf-8") as f:
                read_records(f, parser)
    batches = list(parser.batches()) if parser.rows else []
    if not batches and target is None and not finish:
        raise click.UsageError(f"no records in {source} and neither --advance-to nor --finish: nothing to write")
    trailing = 0 if log.part_stats(stream, part).events == 0 else _trailing_messages(log, header, part)
    try:
        cap = Capture(log, stream, part, header.peers, continues=not new_writer)
    except PartLockedError as e:
        if type(e) is not PartLockedError:
            raise
        raise PartLockedError(
            "a live writer holds the part (its lock): stop its job first; produce writes the part as its only "
            "writer", stream=stream, part=part, path=e.path) from None
    try:
        before = cap.frontier
        t: Any = _send_time(before, header, time) if batches else None
        _check_progress(cap, before, t, target)
        seqs: list[int] = []
        for batch in batches:
            seqs.append(cap.next_seq)
            cap.send(t, batch)
        moved_at = cap.next_seq
        if finish:
            cap.close()
        elif target is not None:
            cap.advance_to(target)
        else:
            cap.flush()
        progress_seq = moved_at if cap.next_seq > moved_at else None
        after = cap.frontier
    finally:
        cap.abort()  # after close(): nothing; else the part stays open at its frontier
    _report(log, header, part, parser.rows, t, seqs, progress_seq, before, after, trailing, new_writer)


def _check_progress(cap: Any, frontier: Antichain, t: Any, target: Any) -> None:
    """Before anything is written: the records' time and the frontier to advance to are in advance of the part's
    frontier (``Capture`` checks them too, but only as it writes each)."""
    if t is not None and not frontier.less_equal(t):
        raise ProgressError(f"cannot send at time {time_text(t)}: not in advance of the part's frontier "
                            f"{frontier_text(frontier)}; nothing was written", stream=cap.stream, part=cap.worker,
                            seq=cap.next_seq)
    if target is not None and not frontier.dominates(Antichain([target])):
        raise ProgressError(f"cannot move the frontier backwards from {frontier_text(frontier)} to "
                            f"[{time_text(target)}]; nothing was written", stream=cap.stream, part=cap.worker,
                            seq=cap.next_seq)


def _seq_text(seqs: list[int]) -> str:
    return f"seq {seqs[0]}" if len(seqs) == 1 else f"seq {seqs[0]}-{seqs[-1]}"


def _report(log: Log, header: StreamHeader, part: int, rows: int, t: Any, seqs: list[int], progress_seq: int | None,
            before: Antichain, after: Antichain, trailing: int, new_writer: bool) -> None:
    where = f"part {part} of {header.stream!r} in {log.uri}"
    if rows:
        events = f"{len(seqs)} Messages event{'s' if len(seqs) > 1 else ''}"
        note(f"appended {rows} record{'s' if rows != 1 else ''} at time {time_text(t)} to {where}: "
             f"{_seq_text(seqs)} ({events})")
    if progress_seq is not None:
        note(f"frontier of part {part}: {frontier_text(before)} -> {frontier_text(after)} (Progress event seq "
             f"{progress_seq})")
    else:
        note(f"frontier of part {part}: {frontier_text(before)} (unchanged)")
    if trailing and (rows or progress_seq is not None):
        what = (f"{trailing} Messages event{'s' if trailing > 1 else ''} the part's last writer left after its last "
                f"Progress event {'are' if trailing > 1 else 'is'}")
        if new_writer:
            note(f"{what} void for committed readers now (--new-writer)")
        elif progress_seq is not None:
            note(f"{what} kept, committed once the frontier passes {'their times' if trailing > 1 else 'its time'} "
                 "(--new-writer voids them)")
    if rows and after.less_equal(t):
        import shlex

        base = shlex.join(["replay", "produce", log.uri, header.stream, "--part", str(part), "--no-records"])
        nxt = t + 1 if isinstance(t, int) else None
        advance = f"{base} --advance-to {nxt}" if nxt is not None else f"{base} --advance-to T"
        note(f"the records are not committed yet: committed readers hold them until the part's frontier passes "
             f"time {time_text(t)}: {advance} (or --finish)")


__all__ = ["RecordParser", "produce"]
