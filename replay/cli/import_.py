"""``replay import``: rows of a plain file (JSON lines, Parquet, Arrow IPC, Avro) written into a stream, one
column giving each row's time — the inverse of ``replay export``.

The input is read in chunks of ``--batch-size`` rows. An input of at most ``--sort-rows`` rows is sorted by
time as a whole; a larger one is streamed chunk by chunk (each chunk sorted by time), and no row of a later
chunk may lie behind the part's frontier the earlier chunks left (the last time written so far stays open).
Every chunk is checked against the parts' frontiers before anything of it is written.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Iterator

import click
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from capture import Capture
from eventlog.antichain import Antichain
from eventlog.errors import EventLogError, InvalidTimeError, ProgressError, SchemaMismatchError, StreamNotFoundError
from eventlog.header import ENCODINGS
from eventlog.log import Log
from eventlog.schema_history import check_evolution
from eventlog.time import Time, TimeType, less_equal
from replay.keyhash import worker_of

from ._common import TIME, frontier_text, note, open_uri, progress, time_text

IMPORT_FORMATS = ("jsonl", "parquet", "arrow", "avro")
"""What ``import --format`` reads; ``arrow`` is an Arrow IPC file or stream (Feather v2 included)."""

SUFFIX_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".pq": "parquet",
                  ".arrow": "arrow", ".arrows": "arrow", ".feather": "arrow", ".ipc": "arrow", ".avro": "avro"}

EXPORT_META = ("_part", "_seq")
"""Columns ``replay export`` adds beside ``_time``; dropped when importing with ``--time _time``."""

DEFAULT_BATCH_ROWS = 64 * 1024
DEFAULT_SORT_ROWS = 1_000_000


class ImportInputError(EventLogError):
    """The input file cannot be read as the format it was given as."""


# -- reading the input ------------------------------------------------------------------------------------------


def _binary_stdin() -> Any:
    return sys.stdin.buffer


def _read_batches(src: str, fmt: str, batch_rows: int, schema_from: pa.Schema | None,
                  json_schema: pa.Schema | None, files: contextlib.ExitStack
                  ) -> "tuple[pa.Schema | None, int | None, Iterator[pa.RecordBatch]]":
    """The input's schema (None when it has no rows and no schema: empty JSON lines), its rows when known up
    front, and its record batches; the files it opens are closed with ``files``."""
    try:
        if fmt == "jsonl":
            return _read_jsonl(src, batch_rows, schema_from or json_schema, files)
        if src == "-" and fmt != "arrow":
            raise click.BadParameter(f"stdin is read as jsonl or an arrow stream, not {fmt}", param_hint="'--format'")
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(src)
            return pf.schema_arrow, pf.metadata.num_rows, pf.iter_batches(batch_size=batch_rows)
        if fmt == "arrow":
            return _read_arrow(src)
        if fmt == "avro":
            return _read_avro(src, batch_rows, files)
    except (pa.ArrowInvalid, ValueError) as e:
        if isinstance(e, click.ClickException):
            raise
        raise ImportInputError(f"cannot read the input as {fmt}: {e}", path=src) from None
    raise ValueError(f"unknown import format {fmt!r}")


def _read_jsonl(src: str, batch_rows: int, explicit: pa.Schema | None, files: contextlib.ExitStack
                ) -> "tuple[pa.Schema | None, None, Iterator[pa.RecordBatch]]":
    import pyarrow.json as pj

    stream = _binary_stdin() if src == "-" else files.enter_context(open(src, "rb"))
    parse = pj.ParseOptions(explicit_schema=explicit, unexpected_field_behavior="infer") if explicit else None
    # blocks of about 1 MiB, at least: a JSON line cannot span two blocks
    read = pj.ReadOptions(block_size=1 << 20)
    try:
        reader = pj.open_json(stream, read_options=read, parse_options=parse)
    except pa.ArrowInvalid as e:
        if "Empty" in str(e) or "empty" in str(e):
            return explicit, 0, iter(())
        raise

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            for b in reader:
                yield from _slices(b, batch_rows)
        except pa.ArrowInvalid as e:
            raise ImportInputError(f"cannot read the input as jsonl: {e}", path=src) from None

    return reader.schema, None, batches()


def _slices(b: pa.RecordBatch, rows: int) -> Iterator[pa.RecordBatch]:
    for off in range(0, b.num_rows, rows):
        yield b.slice(off, rows)


def _read_arrow(src: str) -> "tuple[pa.Schema, int | None, Iterator[pa.RecordBatch]]":
    if src != "-":
        try:
            f = pa.ipc.open_file(src)
            return f.schema, sum(f.get_batch(i).num_rows for i in range(f.num_record_batches)) if \
                f.num_record_batches < 10_000 else None, (f.get_batch(i) for i in range(f.num_record_batches))
        except pa.ArrowInvalid:
            pass  # not a file: a stream
    r = pa.ipc.open_stream(_binary_stdin() if src == "-" else src)
    return r.schema, None, iter(r)


def _read_avro(src: str, batch_rows: int, files: contextlib.ExitStack) -> "tuple[pa.Schema | None, None, Iterator[pa.RecordBatch]]":
    import fastavro

    f = files.enter_context(open(src, "rb"))
    reader = fastavro.reader(f)
    rows: list[dict] = []
    first: list[pa.RecordBatch] = []
    it = iter(reader)
    for row in it:  # the schema from the first chunk, then every chunk converts to it
        rows.append(row)
        if len(rows) == batch_rows:
            break
    if rows:
        first.append(pa.RecordBatch.from_pylist(rows))
    schema = first[0].schema if first else None

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            yield from first
            chunk: list[dict] = []
            for row in it:
                chunk.append(row)
                if len(chunk) == batch_rows:
                    yield pa.RecordBatch.from_pylist(chunk, schema=schema)
                    chunk = []
            if chunk:
                yield pa.RecordBatch.from_pylist(chunk, schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as e:
            raise ImportInputError(f"cannot read the input as avro: {e}", path=src) from None

    return schema, None, batches()


def _schema_of_file(path: str) -> pa.Schema:
    """The schema of a Parquet, Arrow or Avro file (``--schema-from``)."""
    fmt = SUFFIX_FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt not in ("parquet", "arrow", "avro"):
        raise click.BadParameter(f"{path}: a .parquet, .arrow/.feather or .avro file gives the schema",
                                 param_hint="'--schema-from'")
    with contextlib.ExitStack() as files:
        schema, _, _ = _read_batches(path, fmt, 1024, None, None, files)
    if schema is None:
        raise click.BadParameter(f"{path} has no rows to take a schema from", param_hint="'--schema-from'")
    return schema


# -- times --------------------------------------------------------------------------------------------------------


def _time_columns(batch: pa.RecordBatch, names: list[str], arity: int) -> list[np.ndarray]:
    """The time components of each row as int64 arrays (one for int64 times, K for product:K)."""
    if len(names) == 1 and arity > 0:  # one list<int> column (what export writes for product times)
        col = batch.column(names[0])
        if col.null_count:
            raise InvalidTimeError(f"time column {names[0]!r} has nulls")
        lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
        if len(lengths) and (lengths != arity).any():
            raise InvalidTimeError(f"time column {names[0]!r} holds a list of {int(lengths[lengths != arity][0])} "
                                   f"ints, not {arity} (time type product:{arity})")
        flat = pc.list_flatten(col).cast(pa.int64()).to_numpy(zero_copy_only=False).reshape(-1, arity)
        return [flat[:, i] for i in range(arity)]
    out = []
    for name in names:
        col = batch.column(name)
        if col.null_count:
            raise InvalidTimeError(f"time column {name!r} has nulls")
        try:
            out.append(col.cast(pa.int64()).to_numpy(zero_copy_only=False))
        except pa.ArrowInvalid as e:
            raise InvalidTimeError(f"time column {name!r} has a value outside int64: {e}") from None
    return out


def _time_arity(schema: pa.Schema, names: list[str], first: pa.RecordBatch | None) -> int:
    """0 for int64 times, K for product:K; a usage error when a time column is not an integer column."""
    for name in names:
        if name not in schema.names:
            raise click.BadParameter(f"no column {name!r} in the input ({', '.join(schema.names)})",
                                     param_hint="'--time'")
    if len(names) > 1:
        for name in names:
            if not pa.types.is_integer(schema.field(name).type):
                raise click.BadParameter(f"column {name!r} is {schema.field(name).type}, not integers",
                                         param_hint="'--time'")
        return len(names)
    t = schema.field(names[0]).type
    if pa.types.is_integer(t):
        return 0
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) and \
            pa.types.is_integer(t.value_type):
        if pa.types.is_fixed_size_list(t):
            return t.list_size
        col = first.column(names[0]) if first is not None and first.num_rows else None
        if col is None:
            raise click.BadParameter(f"column {names[0]!r} is a list with no rows to tell its length",
                                     param_hint="'--time'")
        return len(col[0].as_py() or [])
    raise click.BadParameter(f"column {names[0]!r} is {t}: a time column holds integers (int64 times) or lists "
                             "of integers (product times)", param_hint="'--time'")


class _Part:
    """One part being written: its capture and what it wrote."""

    def __init__(self, cap: Capture) -> None:
        self.cap = cap
        self.rows = 0
        self.events = 0


def _plan(order_keys: list[np.ndarray]) -> "tuple[np.ndarray, list[tuple[int, int]]]":
    """Stable sort by time (lexicographic for product times): the row order and (start, end) of each time."""
    n = len(order_keys[0])
    if len(order_keys) == 1:
        idx = np.argsort(order_keys[0], kind="stable")
    else:
        idx = np.lexsort(order_keys[::-1])
    sorted_keys = [k[idx] for k in order_keys]
    change = np.zeros(n, dtype=bool)
    if n:
        change[0] = True
        for k in sorted_keys:
            change[1:] |= k[1:] != k[:-1]
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], n)
    return idx, list(zip(starts.tolist(), ends.tolist()))


def _suffix_frontiers(times: list[Time]) -> list[Antichain]:
    """For distinct times d_0 … d_k in sorted order: the frontier once d_i is complete, the minimal elements
    of d_{i+1} … d_k; the last time stays open (``{d_k}``)."""
    if not times:
        return []
    if isinstance(times[0], int):
        return [Antichain([t]) for t in times[1:]] + [Antichain([times[-1]])]
    out = [Antichain([times[-1]])]
    minimal: list[Time] = [times[-1]]
    for t in reversed(times[1:]):  # minimal elements of times[i+1:], from the end
        minimal = [m for m in minimal if not less_equal(t, m)] + [t]
        out.append(Antichain(minimal))
    # out = [{d_k}, min(d_k), min(d_{k-1}, d_k), …, min(d_1 … d_k)]
    return list(reversed(out[1:])) + [out[0]]


# -- the command --------------------------------------------------------------------------------------------------


@click.command("import", short_help="Write rows of JSON lines, Parquet, Arrow or Avro into a stream.")
@click.argument("src_file", metavar="SRC_FILE")
@click.argument("uri", metavar="LOG")
@click.argument("stream")
@click.option("--time", "time_cols", metavar="COLUMN[,COLUMN…]",
              help="The column of each row's time: integers (int64 times), a list of K integers, or K columns "
                   "a,b (product:K times).")
@click.option("--time-const", type=TIME, help="Write every row at this one time instead of --time.")
@click.option("--keep-time", is_flag=True, help="Keep the time column(s) in the records too.")
@click.option("--drop", multiple=True, metavar="COLUMN", help="Leave this column out of the records (repeat).")
@click.option("--format", "fmt", type=click.Choice(IMPORT_FORMATS),
              help="Input format (default: from SRC_FILE's suffix; stdin '-' is jsonl).")
@click.option("--workers", "-w", type=click.IntRange(min=1),
              help="Parts of a new stream (default 1; an existing stream keeps its parts).")
@click.option("--key", multiple=True, metavar="COLUMN",
              help="Assign rows to parts by the stable hash of this column (repeat for several); default: "
                   "round-robin by batch.")
@click.option("--encoding", type=click.Choice(ENCODINGS), help="Encoding of a new stream (default arrow).")
@click.option("--schema-from", type=click.Path(exists=True, dir_okay=False),
              help="JSON lines: parse with the schema of this .parquet/.arrow/.avro file instead of inferring it.")
@click.option("--evolve", is_flag=True,
              help="Let the input change an existing stream's schema compatibly: its columns the stream lacks are "
                   "added (nullable), the stream's nullable columns it lacks are written as nulls.")
@click.option("--open", "leave_open", is_flag=True,
              help="Leave the parts unfinished (at the last time written) so more can be appended later.")
@click.option("--batch-size", type=click.IntRange(min=1), default=DEFAULT_BATCH_ROWS, show_default=True,
              help="Rows per chunk read and at most per Messages event.")
@click.option("--sort-rows", type=click.IntRange(min=0), default=DEFAULT_SORT_ROWS, show_default=True,
              help="An input of at most this many rows is sorted by time as a whole; a larger one is streamed "
                   "and its times must not go back behind earlier chunks.")
def import_(src_file: str, uri: str, stream: str, time_cols: str | None, time_const: Any, keep_time: bool,
            drop: tuple[str, ...], fmt: str | None, workers: int | None, key: tuple[str, ...],
            encoding: str | None, schema_from: str | None, evolve: bool, leave_open: bool, batch_size: int,
            sort_rows: int) -> None:
    """Write the rows of SRC_FILE (JSON lines, Parquet, an Arrow IPC file or stream, Avro; '-' reads JSON lines
    from stdin) into STREAM of the log LOG, each at the time its --time column holds. Rows are grouped by
    time into Messages events; each part's frontier advances past every completed time, and the parts are
    finished at the end unless --open. A new stream takes the input's schema; appending to an existing stream
    needs the same columns (values are cast safely to its types) and times in advance of its frontier; with
    --evolve the input may add columns (the stream's schema gains them, as a writer's compatible change does:
    earlier records read them as null) and leave out nullable ones (written as nulls).

    \b
    Example:
      replay import counts.parquet /tmp/cap counts --time _time
      replay import events.jsonl /tmp/cap events --time ts --workers 4 --key user
      kcat -C -t events -e | replay import - /tmp/cap events --time-const 0
      replay import day2.parquet /tmp/cap events --time ts --evolve   # day 2 has a new column
    """
    if (time_cols is None) == (time_const is None):
        raise click.UsageError("pass either --time COLUMN or --time-const T")
    if fmt is None:
        fmt = "jsonl" if src_file == "-" else SUFFIX_FORMATS.get(os.path.splitext(src_file)[1].lower())
        if fmt is None:
            raise click.BadParameter(f"cannot tell the format from {src_file!r}: pass --format "
                                     f"{'|'.join(IMPORT_FORMATS)}", param_hint="'--format'")
    if src_file != "-" and not os.path.exists(src_file):
        raise click.BadParameter(f"{src_file}: no such file", param_hint="SRC_FILE")
    log = open_uri(uri, must_exist=False)
    try:
        stored = log.header(stream)
    except StreamNotFoundError:
        stored = None
    except ValueError as e:  # an invalid stream name
        raise click.BadParameter(str(e), param_hint="STREAM") from None
    if stored is not None:
        if workers is not None and workers != stored.peers:
            raise click.BadParameter(f"stream {stream!r} exists with {stored.peers} parts, not {workers}",
                                     param_hint="'--workers'")
        if encoding is not None and encoding != stored.encoding:
            raise click.BadParameter(f"stream {stream!r} exists with encoding {stored.encoding}",
                                     param_hint="'--encoding'")
    names = [n.strip() for n in time_cols.split(",")] if time_cols else []
    explicit = _schema_of_file(schema_from) if schema_from else None
    json_schema = stored.schema if (stored is not None and explicit is None and fmt == "jsonl") else None
    if json_schema is not None:  # parse JSON into the stream's types; the time column is inferred
        json_schema = pa.schema([f.with_nullable(True) for f in json_schema if f.name not in names])
    with contextlib.ExitStack() as files:
        _import(log, stream, stored, src_file, fmt, names, time_const, keep_time, drop, workers, key, encoding,
                explicit, json_schema, evolve, leave_open, batch_size, sort_rows, files)


def _import(log: Log, stream: str, stored: Any, src_file: str, fmt: str, names: list[str], time_const: Any,
            keep_time: bool, drop: tuple[str, ...], workers: int | None, key: tuple[str, ...], encoding: str | None,
            explicit: pa.Schema | None, json_schema: pa.Schema | None, evolve: bool, leave_open: bool,
            batch_size: int, sort_rows: int, files: contextlib.ExitStack) -> None:
    in_schema, total, batches = _read_batches(src_file, fmt, batch_size, explicit, json_schema, files)
    batches = iter(batches)
    first = next(batches, None)
    if in_schema is None and first is not None:
        in_schema = first.schema
    if in_schema is None:
        if stored is None:
            raise ImportInputError("the input has no rows and no schema: nothing to create the stream from",
                                   path=src_file)
        in_schema = pa.schema([])

    # the time type and the record schema
    if time_const is not None:
        arity = len(time_const) if isinstance(time_const, tuple) else 0
        const_time = TimeType(arity).check(time_const)
    else:
        arity = _time_arity(in_schema, names, first)
        const_time = None
    time_type = TimeType(arity)
    dropped = list(drop)
    for name in dropped:
        if name not in in_schema.names:
            raise click.BadParameter(f"no column {name!r} in the input ({', '.join(in_schema.names)})",
                                     param_hint="'--drop'")
    if names == ["_time"] and all(m in in_schema.names for m in EXPORT_META) and not drop:
        dropped += [m for m in EXPORT_META]
        note("dropping the columns _part and _seq that replay export adds (--drop names columns to drop instead)")
    if not keep_time:
        dropped += names
    record_names = [n for n in in_schema.names if n not in dropped]
    for k in key:
        if k not in in_schema.names:
            raise click.BadParameter(f"no column {k!r} in the input ({', '.join(in_schema.names)})",
                                     param_hint="'--key'")
    record_schema = pa.schema([in_schema.field(n) for n in record_names], metadata=in_schema.metadata)
    if stored is not None:
        if stored.time_type != time_type:
            raise SchemaMismatchError(f"the input's times are {time_type}, the stream's {stored.time_type}",
                                      stream=stream)
        schema = _evolved(record_schema, stored.schema, stream) if evolve else stored.schema
        _check_schema(record_schema, schema, stream, evolve)
        peers = stored.peers
    else:
        schema = record_schema
        peers = workers or 1

    parts: list[_Part] = []
    try:
        for p in range(peers):
            parts.append(_Part(Capture(log, stream, p, peers, schema=schema, encoding=encoding or
                                       (stored.encoding if stored else "arrow"), time=time_type.name,
                                       continues=stored is not None)))
        writer = _Writer(parts, schema, record_names, names, const_time, time_type, list(key), batch_size, stream)
        with progress(f"importing into {stream!r}", total) as advance:
            chunk: list[pa.RecordBatch] = [] if first is None else [first]
            rows = 0 if first is None else first.num_rows
            streaming = False
            for b in batches:
                chunk.append(b)
                rows += b.num_rows
                if rows > sort_rows:
                    streaming = True
                    break
            if not streaming:
                writer.write(chunk, advance)
            else:
                note(f"the input has more than {sort_rows} rows (--sort-rows): streamed in chunks of "
                     f"{batch_size} rows, each sorted by time; times must not go back behind earlier chunks")
                for b in chunk:
                    writer.write([b], advance)
                for b in batches:
                    writer.write([b], advance)
        for part in parts:
            if leave_open:
                part.cap.abort()
            else:
                part.cap.close()
    except BaseException:
        for part in parts:
            part.cap.abort()
        raise
    events = sum(p.events for p in parts)
    rows_written = sum(p.rows for p in parts)
    note(f"imported {rows_written} rows in {events} events into {log.uri}/{stream} ({peers} "
         f"{'part' if peers == 1 else 'parts'}"
         + (", left open at " + ", ".join(frontier_text(p.cap.frontier) for p in parts) if leave_open else "")
         + ")")


def _evolved(got: pa.Schema, current: pa.Schema, stream: str) -> pa.Schema:
    """The stream's schema with the input's columns it lacks added as nullable (``--evolve``); says what changes.
    ``SchemaEvolutionError`` (from ``check_evolution``) when the change is not one readers can convert."""
    if current.names and not any(n in current.names for n in got.names):
        raise SchemaMismatchError(f"the input shares no column with the stream ({', '.join(current.names[:8])}): "
                                  "another stream's rows, not a change of this one", stream=stream)
    extra = [got.field(n).with_nullable(True) for n in got.names if n not in current.names]
    if not extra:
        return current
    schema = pa.schema([*current, *extra], metadata=current.metadata)
    changes = check_evolution(current, schema, stream=stream)
    note(f"the schema of stream {stream!r} changes: {'; '.join(changes)} (earlier records read the new columns as "
         "null; replay info lists the versions)")
    return schema


def _check_schema(got: pa.Schema, want: pa.Schema, stream: str, evolve: bool = False) -> None:
    """The input's records have the stream's columns, of types that cast safely (with ``evolve``, its nullable
    columns may be missing: written as nulls); else SchemaMismatchError."""
    missing = [n for n in want.names if n not in got.names and not (evolve and want.field(n).nullable)]
    extra = [n for n in got.names if n not in want.names]
    problems = []
    if missing:
        problems.append(f"the input lacks {', '.join(map(repr, missing))}" + (
            "" if evolve else " (--evolve writes the stream's nullable columns the input lacks as nulls)"))
    if extra:
        problems.append(f"the input has {', '.join(map(repr, extra))} not in the stream (--evolve adds them to its "
                        "schema)")
    for f in want:
        if f.name in got.names:
            t = got.field(f.name).type
            if not t.equals(f.type) and not _castable(t, f.type):
                problems.append(f"{f.name!r} is {t} in the input, {f.type} in the stream")
    if problems:
        raise SchemaMismatchError("the input does not match the stream's schema: " + "; ".join(problems)
                                  + f" (stream: {', '.join(f'{f.name}: {f.type}' for f in want)})", stream=stream)


def _castable(a: pa.DataType, b: pa.DataType) -> bool:
    try:
        pa.array([], a).cast(b)
        return True
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False


class _Writer:
    """Writes chunks of input rows into the parts: each chunk is split by part, sorted by time and checked
    against every part's frontier before anything of it is written."""

    def __init__(self, parts: list[_Part], schema: pa.Schema, record_names: list[str], time_names: list[str],
                 const_time: Time | None, time_type: TimeType, key: list[str], batch_rows: int, stream: str) -> None:
        self.parts, self.schema, self.record_names = parts, schema, record_names
        self.time_names, self.const_time, self.time_type = time_names, const_time, time_type
        self.key, self.batch_rows, self.stream = key, batch_rows, stream
        self.batches_seen = 0

    def _records(self, table: pa.Table) -> pa.Table:
        cols = []
        for f in self.schema:
            if f.name not in table.column_names:   # --evolve: a nullable column the input lacks
                cols.append(pa.nulls(table.num_rows, f.type))
                continue
            col = table.column(f.name)
            if not col.type.equals(f.type):
                try:
                    col = col.cast(f.type)  # safe: overflow or lost precision raise
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                    raise SchemaMismatchError(f"column {f.name!r} does not convert to {f.type}: {e}",
                                              stream=self.stream) from None
            cols.append(col)
        return pa.Table.from_arrays(cols, schema=self.schema)

    def write(self, batches: list[pa.RecordBatch], advance: Any) -> None:
        batches = [b for b in batches if b.num_rows]
        if not batches:
            return
        table = pa.Table.from_batches(batches).combine_chunks()
        n = table.num_rows
        peers = len(self.parts)
        if self.key:
            owner = worker_of(table.select(self.key).to_batches()[0], self.key, peers)
        else:  # round-robin by batch of --batch-size input rows
            owner = (self.batches_seen + np.arange(n) // self.batch_rows) % peers
        self.batches_seen += -(-n // self.batch_rows)
        if self.const_time is not None:
            comps = [np.zeros(n, dtype=np.int64)]
        else:
            comps = _time_columns(table.to_batches()[0], self.time_names, self.time_type.arity)
        records = self._records(table)
        plans = []
        for p, part in enumerate(self.parts):
            rows = np.flatnonzero(owner == p)
            if not len(rows):
                continue
            idx, groups = _plan([c[rows] for c in comps])
            order = rows[idx]
            times = [self._time(comps, int(order[s])) for s, _ in groups]
            for t in times:
                if not part.cap.frontier.less_equal(t):
                    raise ProgressError(
                        f"time {time_text(t)} is behind the part's frontier {frontier_text(part.cap.frontier)}: "
                        "times must not go back (an input of more than --sort-rows rows is not sorted as a whole, "
                        "an existing stream continues at its frontier); nothing of this chunk was written",
                        stream=self.stream, part=p)
            plans.append((part, order, groups, times))
        for part, order, groups, times in plans:
            sorted_records = records.take(pa.array(order))
            frontiers = _suffix_frontiers(times)
            for (s, e), t, f in zip(groups, times, frontiers):
                for off in range(s, e, self.batch_rows):
                    piece = sorted_records.slice(off, min(self.batch_rows, e - off))
                    part.cap.send(t, piece)
                    part.rows += piece.num_rows
                    part.events += 1
                    advance(piece.num_rows)
                if f != part.cap.frontier:
                    part.cap.advance_to(f)

    def _time(self, comps: list[np.ndarray], row: int) -> Time:
        if self.const_time is not None:
            return self.const_time
        if self.time_type.arity == 0:
            return self.time_type.check(int(comps[0][row]))
        return self.time_type.check(tuple(int(c[row]) for c in comps))
