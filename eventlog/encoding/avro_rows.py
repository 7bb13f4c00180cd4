"""The Avro encoding of format 2.x file segments: an Avro object container file whose rows are the records.

A segment is an Avro object container file any Avro reader opens (fastavro, polars' ``read_avro``, Spark's
Avro source, Debian's ``avrocat``): its header holds ``avro.schema`` (the row schema below), ``avro.codec``
(``deflate`` by default, ``zstandard`` or ``null`` when the log asks for it), ``eventlog.stream`` and the
writer's ``eventlog.epoch`` / ``eventlog.writer``. The row schema, record ``eventlog.Row``, holds the stream's
fields as the 1.x Avro encoding maps them (``avro_types.py``), each made nullable, then ``_time`` (the time:
``long`` or an array of longs), ``_seq`` (the sequence id), ``_ts`` (the write time, ``timestamp-millis``) and
``_updates`` (the capability changes of a Progress event).

**One event is one container block.** A Messages event is a block of its records, with its time and sequence
id in every row and ``_updates`` null; a Progress event is a block of one row whose data fields and ``_time``
are null and whose ``_updates`` holds the updates. So a reader that reads a segment's rows gets the records
where ``_time`` is not null. Decoding checks that every row of a block agrees on ``_time``, ``_seq`` and
``_ts``, and bounds the block's sizes and counts before anything is allocated for them. See FORMAT.md §5.1.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zlib
from typing import Any, Mapping

import fastavro
import pyarrow as pa
import zstandard

from ..errors import CorruptLogError, LogLimitError, SchemaMismatchError
from ..events import Event, Messages, Progress
from ..header import StreamHeader
from ..limits import (
    MAX_AVRO_EVENT_VALUES,
    MAX_EVENT_BYTES,
    MAX_EVENT_DECODED_BYTES,
    MAX_EVENT_RECORDS,
    MAX_EVENT_UPDATES,
    check_limit,
    decoded_bytes_bound,
)
from .arrow_file import now_ms
from .avro import (
    _DECODE_ERRORS,
    _MAGIC,
    _SYNC_SIZE,
    _cast_columns,
    _read_long,
    container_metadata,
    container_schema,
    count_values,
    parse_schemas,
)
from .avro_codecs import AVRO_CODECS, DEFAULT_AVRO_CODEC, check_avro_codec
from .avro_flat import row_encoder
from .avro_scan import UpdatesWalk, _Compiler, _Counter
from .avro_types import avro_record_schema
from .validate import validate_full
from .zstd_frame import bounded_decompress

ROW_COLUMNS = ("_time", "_seq", "_ts", "_updates")
"""The fields a 2.x Avro row appends to the stream's fields."""

_ERRORS = (*_DECODE_ERRORS, zlib.error)
_DEFLATE_LEVEL = 1
"""zlib's fastest level: on capture-like rows it compresses about as well as the default (6) at a sixth of the
time, which would otherwise be a fifth of the cost of writing an event."""


def _long(n: int) -> bytes:
    """The Avro binary encoding of the long ``n`` (a zigzag varint)."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _time_bytes(time: "int | list[int]") -> bytes:
    """A time's Avro encoding: a long, or an array of longs in one block."""
    if isinstance(time, int):
        return _long(time)
    return _long(len(time)) + b"".join(_long(x) for x in time) + b"\x00"


def row_schema(header: StreamHeader) -> tuple[dict[str, Any], pa.Schema]:
    """``(row, raw)``: the Avro record ``eventlog.Row`` of a stream's 2.x Avro segments, and the Arrow schema of
    the integer storage values its data fields hold (as the 1.x encoding's). Raises SchemaMismatchError when
    the stream has a field named like one the row appends, or one the Avro encoding cannot store."""
    taken = [n for n in ROW_COLUMNS if n in header.schema.names]
    if taken:
        raise SchemaMismatchError(
            f"the stream schema has column(s) {', '.join(taken)}, which format 2 avro segments add themselves "
            f"(the record's time, sequence id, write time and a progress event's updates): rename them, or drop "
            f"them if they came from a replay", stream=header.stream)
    record, raw = avro_record_schema(header.schema, header.stream)
    fields = [dict(f, type=_nullable(f["type"])) for f in record["fields"]]
    time: Any = "long" if header.time_type.arity == 0 else {"type": "array", "items": "long"}
    update = {"type": "record", "name": "Update",
              "fields": [{"name": "time", "type": time}, {"name": "delta", "type": "long"}]}
    fields += [
        {"name": "_time", "type": ["null", time]},
        {"name": "_seq", "type": "long"},
        {"name": "_ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "_updates", "type": ["null", {"type": "array", "items": update}]},
    ]
    return {"type": "record", "name": "Row", "namespace": "eventlog", "fields": fields}, raw


def _nullable(t: Any) -> Any:
    return t if t == "null" or (isinstance(t, list) and "null" in t) else ["null", t]


class _RowScanner:
    """Walks a block's rows without building anything: checks their shape and counts values (as FORMAT.md
    "Limits" counts them: every field once per row, list items with their own fields) and updates against
    the limits, refusing an array block before its items are walked."""

    def __init__(self, head: dict[str, Any], arity: int) -> None:
        """``head``: the row record without temporal logical types and without its last field, ``_updates``."""
        self._counter = _Counter()
        compiler = _Compiler(self._counter)
        self._head, weight, least = compiler.compile(head)
        self._arity = arity
        self._row_values = weight  # the head's fields (the record itself is no value) and the _updates slot
        per_byte = max(compiler.ratio, self._row_values / (least + 1), 1.0)  # time and update items: a byte each
        self._size_bound = int(min(MAX_AVRO_EVENT_VALUES / per_byte, MAX_EVENT_UPDATES * 2))

    def bounded_by_size(self, size: int) -> bool:
        """Whether every block of ``size`` decompressed bytes is within the limits on values and updates
        whatever its content (then fastavro meets the end of the bytes first; the scan may be skipped)."""
        return size <= self._size_bound

    def scan(self, buf: bytes, rows: int) -> None:
        """Walk ``rows`` rows filling ``buf``: LogLimitError over a limit (before walking what is over it),
        ValueError/IndexError when the bytes are not such rows."""
        counter = self._counter
        counter.values = 0
        counter.add(rows * self._row_values)
        walk = UpdatesWalk(self._arity)
        pos = 0
        head = self._head
        for _ in range(rows):
            pos = head(buf, pos)
            branch = buf[pos]
            pos += 1
            if branch == 2:
                pos = walk(buf, pos)
            elif branch:
                raise ValueError(f"_updates union branch byte {branch} out of range")
        if pos != len(buf):
            raise ValueError(f"the block's rows end at byte {pos} of {len(buf)}")


class _RowSegmentEncoder:
    """Encodes the events of one segment, one container block each."""

    def __init__(self, codec: "AvroRowsCodec", metadata: "Mapping[str, bytes] | None", sync: bytes) -> None:
        self._codec = codec
        self._sync = sync
        self.prefix = codec.container_header(metadata, sync)
        self.suffix = b""
        self._zstd = zstandard.ZstdCompressor() if codec.block_codec == "zstandard" else None

    def encode(self, seq: int, event: Event) -> bytes:
        """One container block holding ``event``'s rows; an event over the format's limits raises LimitError
        (nothing is returned, so nothing is written)."""
        codec = self._codec
        where = {"stream": codec.header.stream, "seq": seq}
        ts = now_ms()
        if isinstance(event, Messages):
            n = event.records.num_rows
            if n == 0:  # a block of no rows would be no event
                raise ValueError(f"a messages event holds at least one record (stream {codec.header.stream!r}, seq "
                                 f"{seq})")
            check_limit("records in one event", n, MAX_EVENT_RECORDS, **where)
            check_limit("values in one avro event", count_values(event.records) + n * codec.meta_values,
                        MAX_AVRO_EVENT_VALUES, **where)
            raw = codec.message_rows(seq, event, ts)
        elif isinstance(event, Progress):
            n = 1
            check_limit("updates in one event", len(event.updates), MAX_EVENT_UPDATES, **where)
            raw = codec.progress_row(seq, event, ts)
        else:
            raise TypeError(f"not an event: {event!r}")
        check_limit("decompressed size in bytes of one event", len(raw), MAX_EVENT_DECODED_BYTES, **where)
        data = self._compress(raw)
        body = b"".join((_long(n), _long(len(data)), data, self._sync))
        check_limit("stored size in bytes of one event", len(body), MAX_EVENT_BYTES, **where)
        check_limit(f"decompressed size in bytes of one event ({len(body)} bytes stored)", len(raw),
                    decoded_bytes_bound(len(body)), **where)
        return body

    def _compress(self, raw: bytes) -> bytes:
        name = self._codec.block_codec
        if name == "deflate":  # raw deflate (RFC 1951), as the Avro specification's deflate codec
            c = zlib.compressobj(_DEFLATE_LEVEL, zlib.DEFLATED, -15)
            return c.compress(raw) + c.flush()
        if name == "zstandard":
            assert self._zstd is not None
            return self._zstd.compress(raw)  # the frame declares its size, which readers check
        return raw


class _RowSegmentDecoder:
    """Decodes the blocks of one segment (its sync marker and codec read from its header)."""

    def __init__(self, codec: "AvroRowsCodec", sync: bytes, block_codec: str) -> None:
        self._codec = codec
        self._sync = sync
        self._block_codec = block_codec
        self._dctx = zstandard.ZstdDecompressor()
        self.last_ts: int | None = None
        """The write time (ms since the epoch) of the last event decoded."""

    def decode_at(self, segment: pa.Buffer, offset: int, length: int) -> tuple[int, Event]:
        return self.decode(memoryview(segment)[offset : offset + length])

    def decode(self, body) -> tuple[int, Event]:  # noqa: ANN001
        """``(seq, event)`` of one block. Its stored size, row count and decompressed size are checked
        before anything is allocated for them, then (by a scan of the bytes, unless the size alone bounds
        them) its values and updates; the records come back as a validated batch of the stream schema."""
        buf = memoryview(body)
        try:
            check_limit("stored size in bytes of one event", len(buf), MAX_EVENT_BYTES, reading=True)
            count, pos = _read_long(buf, 0)
            size, pos = _read_long(buf, pos)
            check_limit("records in one event", count, MAX_EVENT_RECORDS, reading=True)
            if count < 1:
                raise ValueError(f"block holds {count} rows, an event block at least 1")
            if size < 0 or pos + size + _SYNC_SIZE != len(buf):
                raise ValueError(f"block size {size} does not match the event's {len(buf)} bytes")
            if bytes(buf[pos + size :]) != self._sync:
                raise ValueError("block sync marker differs from the segment's")
            raw = self._decompress(buf[pos : pos + size], decoded_bytes_bound(len(buf)))
            seq, event, self.last_ts = self._codec.event_of(raw, count)
            return seq, event
        except CorruptLogError:
            raise
        except _ERRORS as e:
            raise CorruptLogError(f"undecodable avro event: {type(e).__name__}: {str(e)[:300]}") from None

    def _decompress(self, data: memoryview, limit: int) -> bytes:
        """The block's data decompressed, refused (LogLimitError) before more than ``limit`` bytes are made."""
        name = self._block_codec
        if name == "zstandard":
            return bounded_decompress(self._dctx, data, limit)
        if name == "deflate":
            d = zlib.decompressobj(-15)
            out = d.decompress(data, limit + 1)  # output stops one byte past the limit
            if len(out) > limit:
                raise LogLimitError(f"event's deflate data inflates to more than {limit} bytes, over the format's "
                                    f"limit for a body of {len(data)} bytes")
            if not d.eof:
                raise ValueError("deflate data is cut short")
            if d.unused_data:
                raise ValueError(f"{len(d.unused_data)} bytes after the deflate data")
            return out
        return bytes(data)


class AvroRowsCodec:
    """Avro object container segments of format 2.x, one block of rows per event, for one stream header
    (FORMAT.md §5.1). ``block_codec`` is the codec of the segments it creates (any of :data:`AVRO_CODECS` is
    read)."""

    flat_rows = True
    """Encode Messages rows of flat schemas with ``avro_flat`` (False: fastavro for every row; tests compare)."""

    file_suffix = ".avro"

    def __init__(self, header: StreamHeader, *, block_codec: str | None = None) -> None:
        """Raises SchemaMismatchError if the Avro encoding cannot store ``header.schema``."""
        self.header = header
        self.block_codec = check_avro_codec(header.compression or block_codec or DEFAULT_AVRO_CODEC)
        """The codec of the segments this codec creates: the header's choice, else ``block_codec`` (the log's)."""
        self.schema_json, self.raw_schema = row_schema(header)
        raw, self.parsed, self._row = parse_schemas(self.schema_json, header.stream)
        k = len(header.schema)
        self._data_fields = raw["fields"][:k]
        self._names = [f["name"] for f in self._data_fields]
        self._null_row = dict.fromkeys(self._names)
        self.scanner = _RowScanner(dict(raw, fields=raw["fields"][:-1]), header.time_type.arity)
        """Checks a block's rows against the limits before fastavro decodes them."""
        self.meta_values = len(ROW_COLUMNS) + header.time_type.arity
        """Values the fields after the data count in each row of a Messages event (its time's components too):
        what a row adds to ``count_values`` of its record, as the scan counts them."""
        self.cast_columns = [i for i, (a, b) in enumerate(zip(self.raw_schema, header.schema)) if not a.type.equals(b.type)]
        """Columns whose Arrow type differs from the integer storage type Avro holds."""
        self.required = [i for i, f in enumerate(header.schema) if not f.nullable and not pa.types.is_null(f.type)]
        """Columns the stream schema declares non-nullable (their Avro field is nullable for Progress rows)."""
        # Messages rows are written and read through a "view" of the row schema with the same binary encoding:
        # the fields after the data are one `fixed` holding their bytes, the same in every row of an event
        # (fastavro writes and reads a union value several times slower than a `fixed` one)
        self._meta_key = "_meta"
        while self._meta_key in self._names:
            self._meta_key += "_"
        self._views: dict[int, Any] = {}
        self._flat = row_encoder(self.raw_schema) if self.flat_rows else None
        """Flat schemas' Messages rows encoded column by column (``avro_flat``: fastavro's bytes, faster)."""

    # -- the row schema's views --------------------------------------------------------------------------

    def _view(self, meta_size: int) -> Any:
        """The parsed schema of an array of Messages rows whose fields after the data take ``meta_size`` bytes."""
        view = self._views.get(meta_size)
        if view is None:
            if len(self._views) > 64:  # (a handful of sizes in practice: the varints of time, seq and ts)
                self._views.clear()
            fields = [*self._data_fields,
                      {"name": self._meta_key, "type": {"type": "fixed", "name": "Meta", "size": meta_size}}]
            view = self._views[meta_size] = fastavro.parse_schema(
                {"type": "array", "items": {"type": "record", "name": "Row", "namespace": "eventlog", "fields": fields}})
        return view

    @staticmethod
    def _meta(time: "int | list[int]", seq: int, ts: int) -> bytes:
        """The bytes of a Messages row's ``_time``, ``_seq``, ``_ts`` and (null) ``_updates``."""
        return b"\x02" + _time_bytes(time) + _long(seq) + _long(ts) + b"\x00"

    # -- encoding ---------------------------------------------------------------------------------------

    def message_rows(self, seq: int, event: Messages, ts: int) -> bytes:
        """The binary rows of a Messages event (what its block compresses)."""
        batch = _cast_columns(event.records, self.raw_schema, self.cast_columns)
        n = batch.num_rows
        time = list(event.time) if isinstance(event.time, tuple) else event.time
        meta = self._meta(time, seq, ts)
        if self._flat is not None:
            return self._flat(batch, meta)
        rows = batch.to_pylist()
        key = self._meta_key
        for r in rows:
            r[key] = meta
        out = io.BytesIO()
        fastavro.schemaless_writer(out, self._view(len(meta)), rows)
        data = out.getbuffer()
        count, pos = _read_long(data, 0)  # an array of rows is: its count, the rows, a 0
        if count != n or data[-1] != 0:
            raise RuntimeError("fastavro wrote an array of rows in an unexpected form")
        return bytes(data[pos:-1])

    def progress_row(self, seq: int, event: Progress, ts: int) -> bytes:
        """The binary row of a Progress event (what its block compresses)."""
        updates = [{"time": list(t) if isinstance(t, tuple) else t, "delta": d} for t, d in event.updates]
        out = io.BytesIO()
        fastavro.schemaless_writer(out, self._row, {**self._null_row, "_time": None, "_seq": seq, "_ts": ts,
                                                    "_updates": updates})
        return out.getvalue()

    # -- decoding ---------------------------------------------------------------------------------------

    def event_of(self, raw: bytes, rows: int) -> tuple[int, Event, int]:
        """``(seq, event, write time)`` of the ``rows`` rows filling ``raw`` (a decompressed block); raises
        LogLimitError over a limit, ValueError (and what fastavro and pyarrow raise) when they are no event."""
        if not self.scanner.bounded_by_size(len(raw)):
            self.scanner.scan(raw, rows)  # counts before fastavro builds anything
        source = io.BytesIO(raw)
        first = fastavro.schemaless_reader(source, self._row, None)
        seq, ts, t, updates = first["_seq"], first["_ts"], first["_time"], first["_updates"]
        if seq < 1:
            raise ValueError(f"sequence id {seq} is not positive")
        if ts < 0:
            raise ValueError(f"write time {ts} is negative")
        check = self.header.time_type.check
        if updates is not None:
            if rows != 1 or source.tell() != len(raw):
                raise ValueError(f"a progress event's block holds {rows} rows, not one")
            if t is not None or any(first[name] is not None for name in self._names):
                raise ValueError("a progress row with a _time or data")
            check_limit("updates in one event", len(updates), MAX_EVENT_UPDATES, reading=True)
            return seq, Progress(tuple(
                (check(tuple(u["time"]) if isinstance(u["time"], list) else u["time"]), u["delta"]) for u in updates
            )), ts
        if t is None:
            raise ValueError("a row with neither a _time nor _updates")
        time = check(tuple(t) if isinstance(t, list) else t)
        meta = self._meta(t, seq, ts)
        framed = _long(rows) + raw + b"\x00"
        source = io.BytesIO(framed)
        records = fastavro.schemaless_reader(source, self._view(len(meta)), None)
        if source.tell() != len(framed):
            raise ValueError(f"the block's rows end at byte {source.tell() - 1} of {len(raw)}")
        key = self._meta_key
        if any(r[key] != meta for r in records):
            raise ValueError(f"the rows of one block disagree on _time, _seq or _ts (the first: {t}, {seq}, {ts}), or "
                             f"a row of a messages event has _updates")
        batch = pa.RecordBatch.from_pylist(records, schema=self.raw_schema)
        batch = _cast_columns(batch, self.header.schema, self.cast_columns)
        for i in self.required:
            if batch.column(i).null_count:
                raise ValueError(f"null in column {self._names[i]!r}, which the stream schema declares non-nullable")
        validate_full(batch)
        return seq, Messages(time, pa.RecordBatch.from_arrays(batch.columns, schema=self.header.schema)), ts

    # -- segments ---------------------------------------------------------------------------------------

    def container_header(self, metadata: "Mapping[str, bytes] | None", sync: bytes) -> bytes:
        """The Avro container header of a new segment: magic, metadata (schema, codec, stream, ``metadata``),
        sync marker."""
        meta = {"avro.schema": json.dumps(self.schema_json).encode(), "avro.codec": self.block_codec.encode(),
                "eventlog.stream": self.header.stream.encode(), **(metadata or {})}
        out = [_MAGIC, _long(len(meta))]
        for k, v in meta.items():
            key = k.encode()
            out += [_long(len(key)), key, _long(len(v)), bytes(v)]
        return b"".join([*out, _long(0), sync])

    def new_segment(self, metadata: "Mapping[str, bytes] | None" = None, *, part: int = 0) -> _RowSegmentEncoder:
        return _RowSegmentEncoder(self, metadata, os.urandom(_SYNC_SIZE))

    def segment_metadata(self, prefix) -> dict[bytes, bytes]:  # noqa: ANN001
        """The key/value metadata of a segment's Avro container header (without the ``avro.`` keys)."""
        return container_metadata(prefix)

    def segment_decoder(self, prefix, part: int | None = None) -> _RowSegmentDecoder:  # noqa: ANN001
        prefix = bytes(prefix)
        stored, block_codec = container_schema(prefix)
        if block_codec not in AVRO_CODECS:
            raise CorruptLogError(f"segment uses Avro codec {str(block_codec)[:40]!r}; eventlog reads "
                                  f"{', '.join(AVRO_CODECS)}")
        if stored != self.parsed:
            raise CorruptLogError("segment's Avro schema does not match the stream header's row schema")
        return _RowSegmentDecoder(self, prefix[-_SYNC_SIZE:], block_codec)

    def _standalone_sync(self) -> bytes:
        return hashlib.blake2b(b"eventlog-rows:" + self.header.stream.encode(), digest_size=_SYNC_SIZE).digest()

    def standalone_encoder(self) -> _RowSegmentEncoder:
        """An encoder of blocks whose sync marker derives from the stream name, so that they decode without a
        stored header (``standalone_decoder``), in this codec's ``block_codec``."""
        return _RowSegmentEncoder(self, None, self._standalone_sync())

    def standalone_decoder(self) -> _RowSegmentDecoder:
        """The decoder of ``standalone_encoder``'s blocks."""
        return _RowSegmentDecoder(self, self._standalone_sync(), self.block_codec)


__all__ = ["AVRO_CODECS", "DEFAULT_AVRO_CODEC", "ROW_COLUMNS", "AvroRowsCodec", "check_avro_codec", "row_schema"]
