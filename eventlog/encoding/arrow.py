"""The Arrow encoding: a segment is an Arrow IPC stream, one record batch per event (zstd buffers).

Messages events are batches of the stream schema (zstd-compressed buffers); Progress events are empty
batches (uncompressed: there is nothing to compress). The event itself is
described in the batch's custom metadata: ``eventlog.seq``, ``eventlog.kind`` (``messages``/``progress``),
``eventlog.time`` (JSON time) or ``eventlog.updates`` (JSON ``[[time, delta], …]``). See FORMAT.md.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.ipc as ipc

from ..errors import CorruptLogError
from ..events import Event, Messages, Progress
from ..header import StreamHeader
from .sink import DrainSink

_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_SEQ, _KIND, _TIME, _UPDATES = b"eventlog.seq", b"eventlog.kind", b"eventlog.time", b"eventlog.updates"


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


class _ArrowSegmentEncoder:
    def __init__(self, codec: "ArrowCodec") -> None:
        self._codec = codec
        self.prefix = codec.prefix
        self.suffix = _EOS
        schema = codec.header.schema
        self._messages = _BodyWriter(schema, codec.prefix, codec.write_options)
        # Progress events are empty batches: compressing them costs a trip through pyarrow's thread pool
        # per event and saves nothing. IPC compression is per message, so the stream stays standard.
        self._progress = _BodyWriter(schema, codec.prefix, ipc.IpcWriteOptions())

    def encode(self, seq: int, event: Event) -> bytes:
        if isinstance(event, Messages):
            meta = {_SEQ: str(seq).encode(), _KIND: b"messages", _TIME: json.dumps(event.time).encode()}
            return self._messages.body(event.records, meta)
        if isinstance(event, Progress):
            meta = {_SEQ: str(seq).encode(), _KIND: b"progress", _UPDATES: json.dumps(event.updates).encode()}
            return self._progress.body(self._codec.empty_batch, meta)
        raise TypeError(f"not an event: {event!r}")


class _ArrowSegmentDecoder:
    def __init__(self, codec: "ArrowCodec", prefix: bytes) -> None:
        self._codec = codec
        self._prefix = prefix
        self._segment: pa.Buffer | None = None
        self._source: pa.BufferReader | None = None
        self._reader: ipc.RecordBatchStreamReader | None = None

    def decode(self, body) -> tuple[int, Event]:  # noqa: ANN001
        try:
            reader = ipc.open_stream(pa.py_buffer(self._prefix + bytes(body)))
            return self._event(*reader.read_next_batch_with_custom_metadata())
        except CorruptLogError:
            raise
        except (pa.ArrowException, ValueError, KeyError, TypeError, StopIteration) as e:
            raise CorruptLogError(f"undecodable arrow event: {type(e).__name__}: {e}") from None

    def decode_at(self, segment: pa.Buffer, offset: int, length: int) -> tuple[int, Event]:
        try:
            if segment is not self._segment:  # one stream reader per (mapped) segment, positioned per event
                self._segment = segment
                self._source = pa.BufferReader(segment)
                self._reader = ipc.open_stream(self._source)
            assert self._source is not None and self._reader is not None
            self._source.seek(offset)
            batch, meta = self._reader.read_next_batch_with_custom_metadata()
            if self._source.tell() != offset + length:
                raise ValueError(f"the event's IPC message ends at byte {self._source.tell()}, not {offset + length}")
            return self._event(batch, meta)
        except CorruptLogError:
            raise
        except (pa.ArrowException, ValueError, KeyError, TypeError, StopIteration) as e:
            self._segment = None  # the reader's state is unknown after an error
            raise CorruptLogError(f"undecodable arrow event: {type(e).__name__}: {e}") from None

    def _event(self, batch: pa.RecordBatch, meta) -> tuple[int, Event]:  # noqa: ANN001
        if meta is None:
            raise ValueError("record batch without eventlog metadata")
        seq = int(meta[_SEQ])
        kind = meta[_KIND]
        check = self._codec.time_type.check
        if kind == b"messages":
            if batch.num_rows == 0:
                raise ValueError("messages event without records")
            return seq, Messages(check(_tuples(json.loads(meta[_TIME]))), batch)
        if kind == b"progress":
            updates = json.loads(meta[_UPDATES])
            return seq, Progress(tuple((check(_tuples(t)), int(d)) for t, d in updates))
        raise ValueError(f"unknown event kind {kind!r}")


def _tuples(t):  # noqa: ANN001, ANN202 - JSON lists back to product-time tuples
    return tuple(t) if isinstance(t, list) else t


class ArrowCodec:
    """Arrow IPC stream segments for one stream header."""

    file_suffix = ".arrows"

    def __init__(self, header: StreamHeader, *, compression: str | None = "zstd") -> None:
        self.header = header
        self.time_type = header.time_type
        self.write_options = ipc.IpcWriteOptions(compression=compression)
        self.prefix = header.schema.serialize().to_pybytes()
        self.empty_batch = pa.RecordBatch.from_pylist([], schema=header.schema)

    def new_segment(self) -> _ArrowSegmentEncoder:
        return _ArrowSegmentEncoder(self)

    def standalone_encoder(self) -> _ArrowSegmentEncoder:
        return _ArrowSegmentEncoder(self)  # the prefix is the schema message: the header rebuilds it

    def standalone_decoder(self) -> _ArrowSegmentDecoder:
        return _ArrowSegmentDecoder(self, self.prefix)

    def segment_decoder(self, prefix) -> _ArrowSegmentDecoder:  # noqa: ANN001
        prefix = bytes(prefix)
        try:
            schema = ipc.read_schema(pa.py_buffer(prefix))
        except pa.ArrowException as e:
            raise CorruptLogError(f"segment does not start with an Arrow IPC schema: {e}") from None
        if not schema.equals(self.header.schema, check_metadata=False):
            raise CorruptLogError(f"segment schema does not match the stream header:\n{schema}")
        return _ArrowSegmentDecoder(self, prefix)
