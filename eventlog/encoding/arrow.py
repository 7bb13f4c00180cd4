"""The Arrow encoding: a segment is an Arrow IPC stream, one record batch per event (zstd buffers).

Messages events are batches of the stream schema (buffers compressed with the stream's codec: zstd unless its
header chooses lz4 or none, FORMAT.md §13); Progress events are empty
batches (uncompressed: there is nothing to compress). The event itself is
described in the batch's custom metadata: ``eventlog.seq``, ``eventlog.kind`` (``messages``/``progress``),
``eventlog.time`` (JSON time) or ``eventlog.updates`` (JSON ``[[time, delta], …]``). See FORMAT.md.
"""

from __future__ import annotations

import json
from typing import Mapping

import pyarrow as pa
import pyarrow.ipc as ipc

from ..errors import CorruptLogError, LimitError, LogLimitError, SchemaMismatchError
from ..events import Event, Messages, Progress
from ..header import StreamHeader
from ..limits import MAX_EVENT_BYTES, MAX_EVENT_RECORDS, MAX_EVENT_UPDATES, MAX_HEADER_BYTES, MAX_SEQ, check_limit
from .ipc_message import BatchMessage, check_record_batch_message
from .ipc_message import _native as _ipc_native
from .sink import DrainSink
from .validate import validate_full

_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_SEQ, _KIND, _TIME, _UPDATES = b"eventlog.seq", b"eventlog.kind", b"eventlog.time", b"eventlog.updates"
_TS = b"eventlog.ts"


class _BodyWriter:
    """An IPC stream writer whose output is cut into one body per batch (the schema message dropped)."""

    def __init__(self, schema: pa.Schema, prefix: bytes, options: ipc.IpcWriteOptions) -> None:
        self._sink = DrainSink()
        self._writer = ipc.new_stream(self._sink, schema, options=options)
        self._prefix = prefix
        self._started = False

    def body(self, batch: pa.RecordBatch, meta: dict) -> bytes:
        self._writer.write_batch(batch, custom_metadata=meta)
        body = self._sink.drain()
        if not self._started:  # pyarrow writes the schema message lazily, before the first batch
            if not body.startswith(self._prefix):
                raise RuntimeError("pyarrow wrote an unexpected IPC schema message")
            body = body[len(self._prefix) :]
            self._started = True
        return body

    def chunks(self, batch: pa.RecordBatch, meta: "dict | None") -> "list[bytes | pa.Buffer]":
        """``body``'s message as the pieces pyarrow wrote (its body buffers not copied)."""
        if not self._started:
            return [self.body(batch, meta)]
        self._writer.write_batch(batch, custom_metadata=meta)
        return self._sink.drain_chunks()


class _ArrowSegmentEncoder:
    def __init__(self, codec: "ArrowCodec", metadata: "Mapping[str, bytes] | None" = None) -> None:
        self._codec = codec
        schema = codec.header.schema
        self.prefix = codec.prefix
        if metadata:  # segment metadata (the writer's epoch) rides in the schema message's custom metadata
            schema = schema.with_metadata({**(schema.metadata or {}), **{k.encode(): v for k, v in metadata.items()}})
            self.prefix = schema.serialize().to_pybytes()
        self.suffix = _EOS
        self._messages = _BodyWriter(schema, self.prefix, codec.write_options)
        # Progress events are empty batches: compressing them costs a trip through pyarrow's thread pool
        # per event and saves nothing. IPC compression is per message, so the stream stays standard.
        self._progress = _BodyWriter(schema, self.prefix, ipc.IpcWriteOptions())

    def encode(self, seq: int, event: Event) -> bytes:
        """One record-batch message holding ``event``; an event over the format's limits raises LimitError
        (nothing is returned, so nothing is written)."""
        return encode_event(self._codec.header.stream, seq, event, self._messages, self._progress,
                            self._codec.empty_batch)


def encode_event(stream: str, seq: int, event: Event, messages: _BodyWriter, progress: _BodyWriter,
                 empty: pa.RecordBatch, records: "pa.RecordBatch | None" = None, extra: "dict | None" = None) -> bytes:
    """The record-batch message of ``event`` (format §4): ``records`` (default: the event's) through
    ``messages``, or ``empty`` through ``progress``, with the event's custom metadata and ``extra`` keys. An
    event over the format's limits raises LimitError (nothing is returned, so nothing is written)."""
    meta = event_metadata(stream, seq, event, extra)
    if isinstance(event, Messages):
        body = messages.body(event.records if records is None else records, meta)
    else:
        body = progress.body(empty, meta)
    check_body(stream, seq, body)
    return body


def event_metadata(stream: str, seq: int, event: Event, extra: "dict | None" = None) -> dict:
    """The custom metadata of ``event``'s record batch (format §4), with ``extra`` keys; an event with more
    records or updates than the format allows raises LimitError."""
    where = {"stream": stream, "seq": seq}
    if isinstance(event, Messages):
        check_limit("records in one event", event.records.num_rows, MAX_EVENT_RECORDS, **where)
        return {_SEQ: str(seq).encode(), _KIND: b"messages", _TIME: json.dumps(event.time).encode(), **(extra or {})}
    if isinstance(event, Progress):
        check_limit("updates in one event", len(event.updates), MAX_EVENT_UPDATES, **where)
        return {_SEQ: str(seq).encode(), _KIND: b"progress", _UPDATES: json.dumps(event.updates).encode(),
                **(extra or {})}
    raise TypeError(f"not an event: {event!r}")


def check_body(stream: str, seq: int, body: "bytes | memoryview") -> None:
    """Raise LimitError unless the record-batch message ``body`` of event ``seq`` is within what readers accept
    (its stored size, and what ``check_record_batch_message`` checks), so that every event written can be read."""
    where = {"stream": stream, "seq": seq}
    check_limit("stored size in bytes of one event", len(body), MAX_EVENT_BYTES, **where)
    try:
        check_record_batch_message(memoryview(body))
    except LogLimitError as e:
        raise LimitError(e.reason, **where) from None  # type: ignore[arg-type]


class _ArrowSegmentDecoder:
    """Decodes record-batch messages of segments that start with ``prefix``; the IPC stream starts ``skip``
    bytes into the segment (after an IPC file's magic)."""

    def __init__(self, codec: "ArrowCodec", prefix: bytes, *, skip: int = 0) -> None:
        self._codec = codec
        self._strip_metadata = prefix is not codec.prefix and prefix != codec.prefix
        self._prefix = prefix[skip:]
        self._skip = skip
        self.last_ts: int | None = None
        """The write time (ms since the epoch) the last event decoded carries, None when it has none."""
        self._segment: pa.Buffer | None = None
        self._source: pa.BufferReader | None = None
        self._reader: ipc.RecordBatchStreamReader | None = None
        self.read_options: ipc.IpcReadOptions | None = None
        """pyarrow's read options for ``decode_at`` (None: its defaults, buffers decompressed on its threads)."""

    def decode(self, body) -> tuple[int, Event]:  # noqa: ANN001
        try:
            view = memoryview(body)
            _check_message(view, 0, len(view))
            source = pa.BufferReader(pa.py_buffer(self._prefix + bytes(view)))
            reader = ipc.open_stream(source)
            batch, meta = reader.read_next_batch_with_custom_metadata()
            if source.tell() != len(self._prefix) + len(view):
                raise ValueError(f"the event's IPC message ends at byte {source.tell() - len(self._prefix)}, "
                                 f"not {len(view)}")
            return self._event(batch, meta)
        except CorruptLogError:
            raise
        except _DECODE_ERRORS as e:
            raise CorruptLogError(f"undecodable arrow event: {type(e).__name__}: {str(e)[:300]}") from None

    def decode_at(self, segment: pa.Buffer, offset: int, length: int) -> tuple[int, Event]:
        try:
            if _check_message(memoryview(segment), offset, length).rows == 0 and _native_empty is not None:
                found = self._without_rows(segment, offset)
                if found is not None:
                    return found
            if segment is not self._segment:  # one stream reader per (mapped) segment, positioned per event
                self._segment = segment
                self._source = pa.BufferReader(segment.slice(self._skip) if self._skip else segment)
                self._reader = ipc.open_stream(self._source, options=self._options())
            assert self._source is not None and self._reader is not None
            self._source.seek(offset - self._skip)
            batch, meta = self._reader.read_next_batch_with_custom_metadata()
            if self._source.tell() + self._skip != offset + length:
                raise ValueError(f"the event's IPC message ends at byte {self._source.tell() + self._skip}, "
                                 f"not {offset + length}")
            return self._event(batch, meta)
        except CorruptLogError:
            raise
        except _DECODE_ERRORS as e:
            self._segment = None  # the reader's state is unknown after an error
            raise CorruptLogError(f"undecodable arrow event: {type(e).__name__}: {str(e)[:300]}") from None

    def _without_rows(self, segment: pa.Buffer, offset: int) -> tuple[int, Event] | None:
        """The event of a message without rows (a Progress event) from its custom metadata alone, read in C:
        pyarrow would build an empty batch and give the GIL away and back for it (on a replaying thread, each
        time behind the threads decoding ahead). None when the message is not shaped like the segment's empty
        batch or repeats a key: pyarrow decodes it and says what is wrong."""
        found = _native_empty(segment, offset)
        if found is None:
            return None
        _, nodes, buffers, pairs = found
        meta = dict(pairs)
        if (nodes, buffers) != self._empty_shape() or len(meta) != len(pairs):
            return None
        return self._event(self._codec.empty_batch, meta)

    def _empty_shape(self) -> tuple[int, int]:
        """How many FieldNodes and Buffers an empty batch of the segment's schema has."""
        shape = _EMPTY_SHAPES.get(self._prefix)
        if shape is None:
            schema = ipc.read_schema(pa.py_buffer(self._prefix))
            empty = pa.RecordBatch.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)
            _, nodes, buffers, _ = _native_empty(empty.serialize(), 0)
            if len(_EMPTY_SHAPES) >= 16:
                _EMPTY_SHAPES.clear()
            shape = _EMPTY_SHAPES[self._prefix] = (nodes, buffers)
        return shape

    def _options(self) -> ipc.IpcReadOptions | None:
        """The options ``decode_at`` reads a segment with."""
        return self.read_options

    def _event(self, batch: pa.RecordBatch, meta) -> tuple[int, Event]:  # noqa: ANN001
        if meta is None:
            raise ValueError("record batch without eventlog metadata")
        raw_seq = meta[_SEQ]
        if not (raw_seq.isdigit() and len(raw_seq) <= 20):
            raise ValueError(f"sequence id {raw_seq[:30]!r} is not a decimal number")
        seq = int(raw_seq)
        if not 1 <= seq <= MAX_SEQ:
            raise ValueError(f"sequence id {seq} is outside 1..2**63-1")
        kind = meta[_KIND]
        check = self._codec.time_type.check
        self.last_ts = self._ts(meta)
        if kind == b"messages":
            if batch.num_rows == 0:
                raise ValueError("messages event without records")
            validate_full(batch)  # offsets, lengths and UTF-8 of every array: nothing unsafe leaves here
            time = check(_tuples(_json(meta[_TIME])))
            batch = self._records(batch, seq, time)
            if self._strip_metadata:  # the segment's own metadata (writer epoch) is not the records'
                batch = batch.replace_schema_metadata(self._codec.header.schema.metadata)
            return seq, Messages(time, batch)
        if kind == b"progress":
            if batch.num_rows != 0:
                raise ValueError(f"progress event with {batch.num_rows} rows")
            updates = _json(meta[_UPDATES])
            if not isinstance(updates, list):
                raise ValueError("progress updates are not a JSON array")
            check_limit("updates in one event", len(updates), MAX_EVENT_UPDATES, reading=True)
            out = []
            for u in updates:
                if not (isinstance(u, list) and len(u) == 2):
                    raise ValueError(f"progress update {str(u)[:60]} is not a [time, delta] pair")
                t, d = u
                if isinstance(d, bool) or not isinstance(d, int) or not -(1 << 63) <= d < 1 << 63:
                    raise ValueError(f"progress delta {str(d)[:30]} is not an int64")
                out.append((check(_tuples(t)), d))
            return seq, Progress(tuple(out))
        raise ValueError(f"unknown event kind {kind[:30]!r}")

    def _records(self, batch: pa.RecordBatch, seq: int, time) -> pa.RecordBatch:  # noqa: ANN001
        """The stream's records of a Messages batch (the file format's decoder checks and drops its columns)."""
        return batch

    def _ts(self, meta) -> int | None:  # noqa: ANN001
        """The write time in ``meta`` (format 2.x files), None when absent."""
        raw = meta.get(_TS) if meta is not None else None
        if raw is None:
            return None
        if not (raw.isdigit() and len(raw) <= 18):
            raise ValueError(f"write time {raw[:30]!r} is not a decimal number of milliseconds")
        return int(raw)


_DECODE_ERRORS = (pa.ArrowException, OSError, ValueError, KeyError, TypeError, StopIteration, RecursionError)
"""What pyarrow and json raise on bytes that are not an event (pa.ArrowInvalid, OSError from the IPC reader,
JSONDecodeError, ...): each becomes a CorruptLogError."""


def _check_message(view: memoryview, offset: int, length: int) -> BatchMessage:
    """Bound the record-batch message filling ``view[offset:offset + length]`` before pyarrow reads it; what it
    declares."""
    check_limit("stored size in bytes of one event", length, MAX_EVENT_BYTES, reading=True)
    if offset < 0 or offset + length > len(view):
        raise ValueError(f"event at {offset} (+{length}) lies outside the {len(view)}-byte segment")
    msg = check_record_batch_message(view[offset : offset + length])
    if msg.end != length:
        raise ValueError(f"the event's IPC message is {msg.end} bytes, its body {length}")
    return msg


_EMPTY_SHAPES: dict[bytes, tuple[int, int]] = {}
_KEEP_SCHEMAS = 64
"""Distinct segment schema messages a codec remembers parsed (``ArrowCodec._schema_of``)."""
"""``_ArrowSegmentDecoder._empty_shape`` by segment prefix (the last few)."""

_native_empty = _ipc_native.empty if _ipc_native is not None else None
"""A message's counts and custom metadata, read in C; None when the extension is not built (every message goes
through pyarrow)."""


class _ArrowRecordEncoder:
    """Whole Arrow IPC streams of one event: the schema message, the event's batch, the end-of-stream marker.

    ``encode_value`` has pyarrow write each value into one buffer of its own (a stream writer per event, as a
    user of pyarrow writes a Kafka record): nothing of it is copied in Python, and a producer takes the buffer
    as it is. The bytes are those of one stream writer cut per event (the segment encoder's), unchanged."""

    prefix = b""
    suffix = b""

    def __init__(self, codec: "ArrowCodec") -> None:
        self._codec = codec
        self._prefix = codec.prefix
        # the stream's compression, on the writing thread: handing one event's buffers to pyarrow's pool and
        # waiting for them took 1.8x as long on a busy 2-core machine (a 100 kB event)
        self._options = ipc.IpcWriteOptions(compression=codec.write_options.compression, use_threads=False)
        self._plain = ipc.IpcWriteOptions(use_threads=False)  # Progress events: nothing to compress

    def encode(self, seq: int, event: Event) -> bytes:
        return self.encode_value(seq, event).to_pybytes()

    def encode_value(self, seq: int, event: Event) -> pa.Buffer:
        """``encode``'s value as the buffer pyarrow wrote it into (a read-only bytes-like object)."""
        stream = self._codec.header.stream
        meta = event_metadata(stream, seq, event)
        if isinstance(event, Messages):
            batch, options = event.records, self._options
        else:
            batch, options = self._codec.empty_batch, self._plain
        sink = pa.BufferOutputStream()
        with ipc.new_stream(sink, self._codec.header.schema, options=options) as writer:
            writer.write_batch(batch, custom_metadata=meta)
        value = sink.getvalue()
        view, start = memoryview(value).cast("B"), len(self._prefix)
        if view[:start] != self._prefix or view[len(view) - len(_EOS):] != _EOS:
            raise RuntimeError("pyarrow wrote an unexpected IPC stream for one event")
        check_body(stream, seq, view[start : len(view) - len(_EOS)])
        return value


class _ArrowRecordDecoder:
    """Reads whole Arrow IPC streams of one event. The schema message must describe the stream's schema; one
    whose bytes differ from the header's (another pyarrow, other metadata) is parsed and compared once."""

    # One record is one event: pyarrow decompresses its buffers on the reading thread. Handing each buffer to
    # pyarrow's pool and waiting for it took twice as long on a busy 2-core machine (a 100 kB record).
    _READ_OPTIONS = ipc.IpcReadOptions(use_threads=False)

    def __init__(self, codec: "ArrowCodec") -> None:
        self._codec = codec
        self._decoders: dict[bytes, _ArrowSegmentDecoder] = {codec.prefix: self._reading(_ArrowSegmentDecoder(codec, codec.prefix))}

    def _reading(self, decoder: _ArrowSegmentDecoder) -> _ArrowSegmentDecoder:
        decoder.read_options = self._READ_OPTIONS
        return decoder

    def decode(self, value) -> tuple[int, Event]:  # noqa: ANN001
        view = memoryview(value)
        try:
            check_limit("stored size in bytes of one event", len(view), MAX_EVENT_BYTES + MAX_HEADER_BYTES, reading=True)
            if len(view) < 8 or bytes(view[:4]) != b"\xff\xff\xff\xff":
                raise ValueError("the value does not start with an Arrow IPC message")
            end = 8 + int.from_bytes(view[4:8], "little", signed=True)
            check_limit("size in bytes of a schema message", end - 8, MAX_HEADER_BYTES, reading=True)
            if not 8 < end <= len(view) - len(_EOS):
                raise ValueError(f"the schema message's length {end - 8} does not fit the {len(view)}-byte value")
            if bytes(view[len(view) - len(_EOS):]) != _EOS:
                raise ValueError("the value does not end with the Arrow end-of-stream marker")
        except ValueError as e:
            raise CorruptLogError(f"undecodable arrow event: {e}") from None
        prefix = bytes(view[:end])
        decoder = self._decoders.get(prefix)
        if decoder is None:
            decoder = self._reading(self._codec.segment_decoder(prefix))  # CorruptLogError unless the stream's schema
            if len(self._decoders) < 16:
                self._decoders[prefix] = decoder
        # the value is the event's IPC stream: pyarrow reads the batch where it lies (no copy of the body)
        return decoder.decode_at(pa.py_buffer(value), end, len(view) - len(_EOS) - end)

    def decode_at(self, segment: pa.Buffer, offset: int, length: int) -> tuple[int, Event]:
        return self.decode(memoryview(segment)[offset : offset + length])


def _tuples(t):  # noqa: ANN001, ANN202 - JSON lists back to product-time tuples
    return tuple(t) if isinstance(t, list) else t


def _json(raw: bytes):  # noqa: ANN202 - a JSON time or updates list, integers only
    if type(raw) is bytes and raw.isdigit() and (len(raw) == 1 or raw[:1] != b"0"):
        return int(raw)  # an int time: what json.loads reads from its digits, without building a decoder per event
    return json.loads(raw, parse_float=_no_float, parse_constant=_no_float)


def _no_float(text: str):  # noqa: ANN202
    raise ValueError(f"{text[:30]} is not an integer")


_IPC_CODECS = {"zstd": "zstd", "lz4": "lz4", "none": None}
"""The stream header's Arrow compressions, as pyarrow's IPC writer names them (``lz4``: LZ4 frames)."""


class ArrowCodec:
    """Arrow IPC stream segments for one stream header (SchemaMismatchError if its schema has no IPC form)."""

    file_suffix = ".arrows"

    def __init__(self, header: StreamHeader, *, compression: str | None = None) -> None:
        self.header = header
        self.time_type = header.time_type
        if header.encoding != "arrow":
            raise ValueError(f"an arrow codec for a stream of the {header.encoding} encoding")
        self.compression = compression or header.arrow_compression
        """The IPC body compression of Messages events: ``zstd``, ``lz4`` or ``none`` (the header's by default)."""
        if self.compression not in _IPC_CODECS:
            raise ValueError(f"unknown arrow compression {self.compression!r}: expected one of {tuple(_IPC_CODECS)}")
        self.write_options = ipc.IpcWriteOptions(compression=_IPC_CODECS[self.compression])
        self._schemas: dict[bytes, pa.Schema] = {}
        self._matched: set[bytes] = set()
        try:
            self.prefix = header.schema.serialize().to_pybytes()
            self.empty_batch = pa.RecordBatch.from_arrays([pa.nulls(0, f.type) for f in header.schema],
                                                          schema=header.schema)
        except pa.ArrowException as e:
            raise SchemaMismatchError(f"the arrow encoding cannot store this schema: {e}",
                                      stream=header.stream) from None

    def new_segment(self, metadata: "Mapping[str, bytes] | None" = None, *, part: int = 0) -> _ArrowSegmentEncoder:
        return _ArrowSegmentEncoder(self, metadata)

    def segment_metadata(self, prefix) -> dict[bytes, bytes]:  # noqa: ANN001
        """The key/value metadata a segment's prefix carries (its schema message's custom metadata)."""
        return dict(self._schema_of(bytes(prefix)).metadata or {})

    def _schema_of(self, message: bytes) -> pa.Schema:
        """The schema message ``message`` read, each distinct message once per codec (the file log shares a
        codec among the readers of a stream, and a replay opens every part's segments, which mostly carry the
        same prefix: ~20 µs a parse, several per segment)."""
        schemas = self._schemas
        schema = schemas.get(message)
        if schema is None:
            schema = self._read_schema(message)
            if len(schemas) >= _KEEP_SCHEMAS:
                schemas.clear()
            schemas[message] = schema
        return schema

    def _checked_schema(self, message: bytes, expected: pa.Schema, what: str) -> None:
        """CorruptLogError unless the schema message ``message`` holds ``expected`` (metadata aside); a message
        that matched once is not parsed or compared again."""
        matched = self._matched
        if message in matched:
            return
        schema = self._schema_of(message)
        if not schema.equals(expected, check_metadata=False):
            raise CorruptLogError(f"segment schema does not match the stream header{what}:\n{schema}")
        if len(matched) >= _KEEP_SCHEMAS:
            matched.clear()
        matched.add(message)

    @staticmethod
    def _read_schema(prefix) -> pa.Schema:  # noqa: ANN001
        try:
            return ipc.read_schema(pa.py_buffer(bytes(prefix)))
        except (pa.ArrowException, OSError, ValueError) as e:  # pyarrow raises OSError for a bad flatbuffer
            raise CorruptLogError(f"segment does not start with an Arrow IPC schema: {type(e).__name__}: "
                                  f"{str(e)[:300]}") from None

    def standalone_encoder(self) -> _ArrowSegmentEncoder:
        return _ArrowSegmentEncoder(self)  # the prefix is the schema message: the header rebuilds it

    def standalone_decoder(self) -> _ArrowSegmentDecoder:
        return _ArrowSegmentDecoder(self, self.prefix)

    def record_encoder(self) -> _ArrowRecordEncoder:
        return _ArrowRecordEncoder(self)

    def record_decoder(self) -> _ArrowRecordDecoder:
        return _ArrowRecordDecoder(self)

    def segment_decoder(self, prefix, part: int | None = None) -> _ArrowSegmentDecoder:  # noqa: ANN001
        prefix = bytes(prefix)
        self._checked_schema(prefix, self.header.schema, "")
        return _ArrowSegmentDecoder(self, prefix)
