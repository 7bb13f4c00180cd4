"""The Arrow encoding of format 2.x file segments: an Arrow IPC *file* any Arrow tool scans as a dataset.

A segment is ``ARROW1\\0\\0``, the schema message of the stream schema with two columns appended —
``_time`` (``int64``, or ``list<int64>`` for product times) and ``_seq`` (``int64``) —
one record-batch message per event as in format 1.x (custom metadata ``eventlog.seq``, ``eventlog.kind``,
``eventlog.time`` / ``eventlog.updates``, and ``eventlog.ts``: the write time in milliseconds since the
epoch), and, once sealed, the end-of-stream marker and the footer listing every batch (``ipc_file.py``).
A Messages batch holds the event's records with its time and sequence id in every row; a Progress batch has
no rows. The part is the folder's (``part=3``, Hive style), not a column, so that a part's files can move to
another part number (Spark's staged writes). So ``pyarrow.dataset(..., partitioning="hive")``,
``polars.scan_ipc(..., hive_partitioning=True)`` and DuckDB read a stream folder as one table of records with
their time, sequence id and part. See FORMAT.md §3.4 and §4.1.
"""

from __future__ import annotations

import json
import time as _clock
from concurrent.futures import Future
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from .. import workers
from ..errors import CorruptLogError, LimitError, LogLimitError, SchemaMismatchError
from ..events import Event, Messages, Progress
from ..header import StreamHeader
from ..limits import (
    MAX_EVENT_BYTES,
    MAX_EVENT_DECODED_BYTES,
    MAX_EVENT_METADATA_BYTES,
    MAX_EVENT_RECORDS,
    MAX_EVENT_UPDATES,
    MAX_EVENT_VALUES,
    check_limit,
    decoded_bytes_bound,
)
from ..records import constant_column, time_column
from . import ipc_build, lz4_frame, zstd_frame
from .arrow import _KIND, _SEQ, _TIME, _TS, _UPDATES, ArrowCodec, _ArrowSegmentDecoder, _BodyWriter, encode_event
from .ipc_file import LEADING_MAGIC, Block, block_of, footer
from .ipc_message import _native as _ipc_native
from .ipc_message import check_record_batch_message
from .validate import validate_full

_native_tail = _ipc_native.tail if _ipc_native is not None else None
"""A message's last nodes and buffers, read in C; None when the extension is not built (every column is
decoded)."""

META_COLUMNS = ("_time", "_seq")
"""The columns a 2.x Arrow file segment appends to the stream's records."""


def meta_fields(header: StreamHeader) -> list[pa.Field]:
    """The fields of :data:`META_COLUMNS` for ``header``'s time type (all non-nullable)."""
    time = pa.list_(pa.int64()) if header.time_type.arity else pa.int64()
    return [pa.field("_time", time, nullable=False), pa.field("_seq", pa.int64(), nullable=False)]


def check_no_meta_columns(header: StreamHeader) -> None:
    """Refuse a stream schema that already has a field named like a column the file format appends."""
    taken = [n for n in META_COLUMNS if n in header.schema.names]
    if taken:
        raise SchemaMismatchError(
            f"the stream schema has column(s) {', '.join(taken)}, which format 2 file segments add themselves "
            f"(the record's time and sequence id): rename them, or drop them if they came from a replay",
            stream=header.stream)


def now_ms() -> int:
    """The write time recorded with an event: the wall clock in milliseconds since the epoch."""
    return _clock.time_ns() // 1_000_000


class _FileSegmentEncoder:
    """Encodes the events of one 2.x segment and keeps the Blocks its footer lists."""

    def __init__(self, codec: "ArrowFileCodec", metadata: "Mapping[str, bytes] | None") -> None:
        self._codec = codec
        schema = codec.schema
        if metadata:  # segment metadata (the writer's epoch) rides in the schema message's custom metadata
            schema = schema.with_metadata({**(schema.metadata or {}), **{k.encode(): v for k, v in metadata.items()}})
        self._schema = schema
        message = schema.serialize().to_pybytes()
        self._message = message
        self.prefix = LEADING_MAGIC + message
        self._messages = _BodyWriter(schema, message, codec.write_options)
        self._progress = _BodyWriter(schema, message, ipc.IpcWriteOptions())
        self._empty = pa.RecordBatch.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)
        self._blocks: list[Block] = []
        self._offset = len(self.prefix)
        self._assembled = codec.assemble and not codec.header.time_type.arity and type(self)._rows is _ROWS
        """Messages and Progress messages are assembled (``ipc_build``): int64 times; product times (a list
        column) go through pyarrow's writer whole, and so do the batches of a ``_rows`` other than this class's
        (a subclass's, a test's)."""
        self._records: _BodyWriter | None = None
        """pyarrow's writer of the stream's own columns (assembled Messages)."""
        self._progress_parts: ipc_build.BatchParts | None = None
        """The empty batch's nodes and buffers, as pyarrow wrote them once (assembled Progress)."""
        self._progress_body = b""
        """The empty batch's body, as pyarrow wrote it (the single offset of each empty string or list)."""

    @property
    def suffix(self) -> bytes:
        """The end-of-stream marker and the footer listing every event encoded so far."""
        return footer(self._message, self._blocks)

    def _rows(self, event: Messages, seq: int) -> pa.RecordBatch:
        records = event.records
        n = records.num_rows
        cols = list(records.columns) + [time_column(event.time, n), constant_column(seq, n)]
        return pa.RecordBatch.from_arrays(cols, schema=self._schema)

    def encode(self, seq: int, event: Event, started: "Started | None" = None) -> bytes:
        """One record-batch message holding ``event`` with its write time; an event over the format's limits
        raises LimitError (nothing is returned, so nothing is written). ``started``: the event's records as
        ``ArrowFileCodec.start`` began to encode them (on a pool thread)."""
        if self._assembled:
            body = self._assemble(seq, event, started)
            self._blocks.append(block_of(body, self._offset))
            self._offset += len(body)
            return body
        rows = self._rows(event, seq) if isinstance(event, Messages) else None
        body = encode_event(self._codec.header.stream, seq, event, self._messages, self._progress, self._empty,
                            rows, {_TS: str(now_ms()).encode()})
        self._blocks.append(block_of(body, self._offset))
        self._offset += len(body)
        return body


    def _assemble(self, seq: int, event: Event, started: "Started | None" = None) -> bytes:
        """``encode``'s message built by ``ipc_build`` (the bytes readers see are those of pyarrow's writer:
        one record-batch message of the segment schema with the same custom metadata)."""
        stream = self._codec.header.stream
        where = {"stream": stream, "seq": seq}
        ts = str(now_ms()).encode()
        if isinstance(event, Messages):
            if started is not None:
                n = event.records.num_rows
                chunks = [started.message()]
            else:
                records = event.records
                n = check_limit("records in one event", records.num_rows, MAX_EVENT_RECORDS, **where)
                if self._records is None:
                    self._records = _BodyWriter(self._codec.header.schema, self._codec.records_message,
                                                self._codec.write_options)
                chunks = self._records.chunks(self._codec.conform(records), None)
            # pyarrow compressed the stream's own columns; its body buffers are joined into the message once
            parts, user_body = ipc_build.split(chunks)
            values, decoded = ipc_build.totals(parts, user_body)
            at = parts.body_length + (-parts.body_length % 8)
            columns = []  # (_time, _seq): one value each
            frame = _CONSTANT_FRAMES[parts.codec]
            for value in (event.time, seq):
                if not parts.compressed or not n:
                    data = value.to_bytes(8, "little", signed=True) * n
                elif columns and value == event.time:
                    data = columns[0][1]
                else:
                    data = (8 * n).to_bytes(8, "little") + frame(value, n)
                columns.append((at, data))
                at += len(data) + (-len(data) % 8)
            nodes = parts.nodes + ipc_build.node(n) + ipc_build.node(n)
            buffers = parts.buffers + b"".join(ipc_build.buffer(o, 0) + ipc_build.buffer(o, len(d)) for o, d in columns)
            meta = [(_SEQ, str(seq).encode()), (_KIND, b"messages"), (_TIME, _json_time(event.time)), (_TS, ts)]
            head = ipc_build.header(n, nodes, buffers, parts.compressed, parts.variadic, at, meta, parts.codec)
            pieces = [head, *_cut(user_body, parts.body_length), b"\0" * (-parts.body_length % 8)]
            for _, data in columns:
                pieces += [data, b"\0" * (-len(data) % 8)]
            body = b"".join(pieces)
            values += 2 * n
            decoded += 16 * n
        elif isinstance(event, Progress):
            check_limit("updates in one event", len(event.updates), MAX_EVENT_UPDATES, **where)
            if self._progress_parts is None:
                raw = self._progress.body(self._empty, None)
                self._progress_parts = ipc_build.parse(raw)
                self._progress_body = raw[self._progress_parts.body_start:]  # offsets of empty lists, strings...
            parts = self._progress_parts
            meta = [(_SEQ, str(seq).encode()), (_KIND, b"progress"), (_UPDATES, json.dumps(event.updates).encode()),
                    (_TS, ts)]
            body = ipc_build.header(0, parts.nodes, parts.buffers, False, parts.variadic, parts.body_length,
                                    meta) + self._progress_body
            values = decoded = 0
        else:
            raise TypeError(f"not an event: {event!r}")
        check_limit("stored size in bytes of one event", len(body), MAX_EVENT_BYTES, **where)
        meta_len = int.from_bytes(body[4:8], "little")
        if meta_len > MAX_EVENT_METADATA_BYTES or values > MAX_EVENT_VALUES or decoded > decoded_bytes_bound(len(body)):
            try:  # over a limit readers hold events to: raise what they would say
                check_record_batch_message(memoryview(body))
            except LogLimitError as e:
                raise LimitError(e.reason, **where) from None  # type: ignore[arg-type]
        return body


_ROWS = _FileSegmentEncoder._rows

_CONSTANT_FRAMES = {0: lz4_frame.constant_int64_frame, 1: zstd_frame.constant_int64_frame}
"""The frame of a constant int64 column built without a compressor, by IPC ``CompressionType`` (LZ4_FRAME, ZSTD)."""
_CONSTANT_VALUES = {0: lz4_frame.constant_int64_value, 1: zstd_frame.constant_int64_value}
"""The value of such a frame (None for any other frame), by ``CompressionType``."""


class Started:
    """A Messages event's own columns being encoded on a pool thread (``ArrowFileCodec.start``)."""

    def __init__(self, future: "Future[pa.Buffer]", nbytes: int) -> None:
        self._future = future
        self.nbytes = nbytes
        """The bytes of the records' copy being encoded (what the writer bounds)."""

    def done(self) -> bool:
        return self._future.done()

    def message(self) -> pa.Buffer:
        """The record-batch message pyarrow wrote (waits for it; raises what encoding raised)."""
        return self._future.result()


def _record_message(schema: pa.Schema, prefix: bytes, options: ipc.IpcWriteOptions,
                    records: pa.RecordBatch) -> pa.Buffer:
    """``records``' record-batch message as pyarrow's stream writer writes it, into a stream of its own: no
    Python callback and no shared state, so it runs on a pool thread with the GIL released."""
    sink = pa.BufferOutputStream()
    writer = ipc.new_stream(sink, schema, options=options)
    writer.write_batch(records)
    out = sink.getvalue()
    if out.size < len(prefix) or out.slice(0, len(prefix)) != pa.py_buffer(prefix):
        raise RuntimeError("pyarrow wrote an unexpected IPC schema message")
    return out.slice(len(prefix))


_FLAT = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_string,
         pa.types.is_binary, pa.types.is_large_string, pa.types.is_large_binary, pa.types.is_temporal,
         pa.types.is_decimal, pa.types.is_fixed_size_binary, pa.types.is_null)
_SAFE_BYTES = min(MAX_EVENT_BYTES, MAX_EVENT_DECODED_BYTES) // 2
"""Events whose buffers hold at most this many bytes are far inside the stored and decoded limits (zstd
expands nothing by more than a fraction of a percent)."""


def _json_time(time: object) -> bytes:
    """``json.dumps(time)`` as bytes (an int's decimal digits without the encoder's call)."""
    return str(time).encode() if type(time) is int else json.dumps(time).encode()


def _cut(chunks: list, length: int) -> list:
    """The pieces of ``chunks`` that make up their first ``length`` bytes (the message's body, without
    anything pyarrow wrote after it)."""
    out = []
    for c in chunks:
        if length <= 0:
            break
        if len(c) > length:
            c = memoryview(c)[:length]
        out.append(c)
        length -= len(c)
    return out


class _FileSegmentDecoder(_ArrowSegmentDecoder):
    """Decodes a 2.x segment's batches: checks that the appended columns agree with the event's metadata
    (the columns are never believed over the metadata, nor the other way round) and drops them.

    With int64 times, ``decode_at`` decodes only the stream's own columns: a ``_time`` or ``_seq`` buffer that
    is exactly the frame this package's writers build (``zstd_frame.constant_int64_frame``) holds one value
    known from its bytes, without decompressing 80 KB of it per 10k rows; any other buffer (another writer's
    compressor) has its two columns decoded on their own and checked as before, and the decoder reads the
    rest of that segment whole."""

    def __init__(self, codec: "ArrowFileCodec", prefix: bytes) -> None:
        super().__init__(codec, prefix, skip=len(LEADING_MAGIC))
        self._width = len(codec.header.schema)
        self._own_only = _native_tail is not None and not codec.header.time_type.arity
        """``decode_at`` reads the stream's own columns only (the meta columns are checked from their bytes)."""
        self._at: tuple[pa.Buffer, int] | None = None
        """The segment and offset of the message ``decode_at`` is decoding (own columns read only)."""
        self._meta_source: pa.BufferReader | None = None
        self._meta_reader: ipc.RecordBatchStreamReader | None = None

    def _options(self) -> ipc.IpcReadOptions | None:
        return self._fields(list(range(self._width))) if self._own_only else self.read_options

    def _fields(self, fields: list[int]) -> ipc.IpcReadOptions:
        """``read_options`` (pyarrow's threads or not) reading only the top-level ``fields``."""
        threads = self.read_options.use_threads if self.read_options is not None else True
        return ipc.IpcReadOptions(use_threads=threads, included_fields=fields)

    def decode_at(self, segment: pa.Buffer, offset: int, length: int) -> tuple[int, Event]:
        if segment is not self._segment:
            self._meta_reader = None
        self._at = (segment, offset) if self._own_only else None
        try:
            return super().decode_at(segment, offset, length)
        finally:
            self._at = None

    def _records(self, batch: pa.RecordBatch, seq: int, time) -> pa.RecordBatch:  # noqa: ANN001
        k = self._width
        if self._at is not None:
            if batch.num_columns != k:
                raise ValueError(f"batch has {batch.num_columns} of the stream's columns, its schema {k}")
            if not self._meta_by_bytes(batch.num_rows, seq, time):
                self._check_meta(self._meta_batch(), batch.num_rows, seq, time)
                # another writer's buffers (pyarrow's compressor): the segment's next events are read whole
                self._own_only, self._segment = False, None
            return pa.RecordBatch.from_arrays(batch.columns, schema=self._codec.header.schema)
        if batch.num_columns != k + len(META_COLUMNS):
            raise ValueError(f"batch has {batch.num_columns} columns, the segment's schema {k + len(META_COLUMNS)}")
        self._check_meta(batch.select([k, k + 1]), batch.num_rows, seq, time)
        return pa.RecordBatch.from_arrays(batch.columns[:k], schema=self._codec.header.schema)

    def _meta_by_bytes(self, n: int, seq: int, time: int) -> bool:
        """True when the message's ``_time`` and ``_seq`` buffers are this package's constant frames of ``n``
        rows holding ``time`` and ``seq`` (or raw int64s of those values); False when they must be decoded to
        tell. A frame of another value is a CorruptLogError's ValueError."""
        segment, offset = self._at  # type: ignore[misc]
        found = _native_tail(segment, offset, 2, 4)
        if found is None:
            return False
        codec, nodes, buffers = found
        if codec is True or codec is False:  # an extension built before codecs were told apart: zstd or none
            codec = 1 if codec else None
        if any(node != (n, 0) for node in nodes) or buffers[0][1] or buffers[2][1]:
            return False  # other lengths, nulls or a validity bitmap: pyarrow's checks say what is wrong
        for name, want, (at, size) in (("_time", time, buffers[1]), ("_seq", seq, buffers[3])):
            got = _buffer_constant(segment, at, size, n, codec)
            if got is None:
                return False
            if got != want:
                raise ValueError(f"the {name} column disagrees with the event's {name[1:]} {want}")
        return True

    def _meta_batch(self) -> pa.RecordBatch:
        """The message's ``_time`` and ``_seq`` columns, decoded (and fully validated) on their own."""
        segment, offset = self._at  # type: ignore[misc]
        if self._meta_reader is None:
            self._meta_source = pa.BufferReader(segment.slice(self._skip))
            self._meta_reader = ipc.open_stream(self._meta_source, options=self._fields([self._width,
                                                                                         self._width + 1]))
        assert self._meta_source is not None
        self._meta_source.seek(offset - self._skip)
        try:
            batch = self._meta_reader.read_next_batch()
        except BaseException:
            self._meta_reader = None
            raise
        validate_full(batch)
        return batch

    def _check_meta(self, meta: pa.RecordBatch, n: int, seq: int, time) -> None:  # noqa: ANN001
        """``meta``'s two columns (``_time``, ``_seq``) hold ``time`` and ``seq`` in each of ``n`` rows."""
        if meta.num_rows != n or meta.num_columns != 2:
            raise ValueError(f"the _time and _seq columns have {meta.num_rows} rows, the batch {n}")
        time_col, seq_col = meta.column(0), meta.column(1)
        if time_col.null_count or seq_col.null_count:
            raise ValueError("null in the _time or _seq column")
        if not _constant(seq_col, seq):
            raise ValueError(f"the _seq column disagrees with the event's seq {seq}")
        if isinstance(time, tuple):
            import pyarrow.compute as pc  # product times only: reading int64 streams imports no pyarrow.compute

            if not _constant(pc.list_value_length(time_col), len(time)):
                raise ValueError(f"the _time column disagrees with the event's time {list(time)}")
            values = np.asarray(time_col.flatten())
            if values.shape != (n * len(time),) or not (values.reshape(n, len(time)) == np.asarray(time)).all():
                raise ValueError(f"the _time column disagrees with the event's time {list(time)}")
        elif not _constant(time_col, time):
            raise ValueError(f"the _time column disagrees with the event's time {time}")


def _buffer_constant(segment: pa.Buffer, at: int, size: int, n: int, codec: int | None) -> int | None:
    """The one int64 value of the ``n``-row buffer at ``segment[at:at + size]`` when its bytes say it without
    decompressing (a constant frame of the message's ``codec``, or raw values all equal), else None."""
    view = memoryview(segment)
    if codec is not None:
        value_of = _CONSTANT_VALUES.get(codec)
        if size < 8 or value_of is None:
            return None
        declared = int.from_bytes(view[at : at + 8], "little", signed=True)
        if declared == 8 * n:
            return value_of(view[at + 8 : at + size], n)
        if declared != -1:  # a frame of another length: pyarrow says what is wrong
            return None
        at, size = at + 8, size - 8  # stored uncompressed
    if size != 8 * n:
        return None
    values = np.frombuffer(segment, np.int64, n, at)
    first = int(values[0])
    return first if bool((values == first).all()) else None


def _constant(col: pa.Array, value: int) -> bool:
    """Whether ``col`` (no nulls: checked before) has rows and every row is ``value``."""
    if col.type == pa.int64() and -(1 << 63) <= value < (1 << 63):  # the _seq and int64 _time columns
        values = col.to_numpy(zero_copy_only=True)  # a view: ~4 µs where min_max took ~20
        return values.size > 0 and bool((values == value).all())
    import pyarrow.compute as pc  # other columns (product times' lengths): int64 streams need no pyarrow.compute

    mm = pc.min_max(col)
    return mm["min"].as_py() == value and mm["max"].as_py() == value


class ArrowFileCodec(ArrowCodec):
    """Arrow IPC file segments of format 2.x for one stream header (FORMAT.md §3.4, §4.1)."""

    file_suffix = ".arrow"
    assemble = True
    """Build Messages and Progress messages with ``ipc_build`` (False: every event through pyarrow's writer;
    tests compare the two)."""

    def __init__(self, header: StreamHeader, *, compression: str | None = None) -> None:
        super().__init__(header, compression=compression)
        check_no_meta_columns(header)
        self.records_message = self.prefix
        """The IPC schema message of the stream's own columns."""
        self._flat = not header.time_type.arity and all(any(is_(f.type) for is_ in _FLAT) for f in header.schema)
        """Events can be encoded ahead (``start``): int64 times and columns without children."""
        self.schema = pa.schema(list(header.schema) + meta_fields(header), metadata=header.schema.metadata)
        self.prefix = LEADING_MAGIC + self.schema.serialize().to_pybytes()

    def new_segment(self, metadata: "Mapping[str, bytes] | None" = None, *, part: int = 0) -> _FileSegmentEncoder:
        return _FileSegmentEncoder(self, metadata)

    def conform(self, records: pa.RecordBatch) -> pa.RecordBatch:
        """``records`` with exactly the stream's schema object (nullability and metadata as declared)."""
        schema = self.header.schema
        if records.schema is not schema and not records.schema.equals(schema):
            records = pa.RecordBatch.from_arrays(records.columns, schema=schema)
        return records

    def start(self, event: Event, seq: int) -> "Started | None":
        """Begin encoding a copy of a Messages event's own columns on a pool thread, for a writer that appends
        it later (``encode(seq, event, started)``); None when the event is not one to encode ahead: another event kind,
        a nested schema or product times (encoded whole), or records that might come near a limit (encoded in
        the caller, so that LimitError is raised by the call that appends them). The checks a writer must
        raise at once (the record count) are made here."""
        if not isinstance(event, Messages) or not self._flat or not self.assemble:
            return None
        records = event.records
        n = check_limit("records in one event", records.num_rows, MAX_EVENT_RECORDS,
                        stream=self.header.stream, seq=seq)
        if (n * (len(self.header.schema) + 2) > MAX_EVENT_VALUES
                or records.get_total_buffer_size() + 16 * n > _SAFE_BYTES):
            return None
        # a copy the caller cannot change: a batch may share memory with the caller's numpy arrays, which
        # it may fill again as soon as send returns (one memcpy of 440 KB: 12 µs when the batch is in cache,
        # ~70 µs when it is cold in memory, against ~400 µs of zstd)
        copy = self.conform(records).serialize()
        records = ipc.read_record_batch(copy, self.header.schema)
        return Started(workers.pool().submit(_record_message, self.header.schema, self.records_message,
                                             self.write_options, records), copy.size)

    def segment_metadata(self, prefix) -> dict[bytes, bytes]:  # noqa: ANN001
        return dict(self._schema_of(self._message_of(prefix)).metadata or {})

    @staticmethod
    def _message_of(prefix) -> bytes:  # noqa: ANN001
        prefix = bytes(prefix)
        if not prefix.startswith(LEADING_MAGIC):
            raise CorruptLogError("segment does not start with the Arrow IPC file magic")
        return prefix[len(LEADING_MAGIC):]

    def segment_decoder(self, prefix, part: int | None = None) -> _FileSegmentDecoder:  # noqa: ANN001
        prefix = bytes(prefix)
        self._checked_schema(self._message_of(prefix), self.schema, " (with _time, _seq)")
        return _FileSegmentDecoder(self, prefix)


__all__ = ["META_COLUMNS", "ArrowFileCodec", "Started", "check_no_meta_columns", "meta_fields", "now_ms"]
