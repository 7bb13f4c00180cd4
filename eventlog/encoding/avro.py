"""The Avro encoding: a segment is an Avro object container file (zstandard codec), one block per event.

Each block holds one ``eventlog.Event`` record (``schemas/avro/event.avsc`` with the stream's time type and
record schema filled in); a Messages event nests its records in the ``records`` array. See FORMAT.md.
"""

from __future__ import annotations

import hashlib
import io
import json
from importlib import resources
from typing import Any

import fastavro
import pyarrow as pa
import zstandard

from ..errors import CorruptLogError
from ..events import Event, Messages, Progress
from ..header import StreamHeader
from .sink import DrainSink
from .avro_types import avro_record_schema, strip_logical

MAX_EVENT_BYTES = 1 << 30
"""Largest decompressed event body the Avro decoder accepts (a bound against hostile input)."""

_SYNC_SIZE = 16


def event_schema(header: StreamHeader) -> tuple[dict[str, Any], pa.Schema]:
    """The concrete Avro event schema of a stream, and the raw Arrow schema of its record values."""
    record, raw_arrow = avro_record_schema(header.schema, header.stream)
    time = "long" if header.time_type.arity == 0 else {"type": "array", "items": "long"}
    template = json.loads(resources.files("schemas").joinpath("avro/event.avsc").read_text())

    def fill(node: Any) -> Any:
        if node == "eventlog.Time":
            return time
        if node == "eventlog.Record":
            return record
        if isinstance(node, list):
            return [fill(x) for x in node]
        if isinstance(node, dict):
            return {k: (v if k == "doc" else fill(v)) for k, v in node.items()}
        return node

    return fill(template), raw_arrow


def _read_long(buf: memoryview, pos: int) -> tuple[int, int]:
    """One zigzag varint (Avro ``long``) at ``pos``; returns ``(value, next_pos)``."""
    n = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated or overlong varint in block header")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (n >> 1) ^ -(n & 1), pos


def _cast_columns(batch: pa.RecordBatch, schema: pa.Schema, columns: list[int]) -> pa.RecordBatch:
    """``batch`` with ``schema``, casting only ``columns`` (whole-batch casts trip over some nested types)."""
    if not columns:
        return batch
    arrays = list(batch.columns)
    for i in columns:
        arrays[i] = arrays[i].cast(schema.field(i).type)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class _AvroSegmentEncoder:
    def __init__(self, codec: "AvroCodec", sync_marker: bytes | None = None) -> None:
        self._codec = codec
        self._sink = DrainSink()
        self._writer = fastavro.write.Writer(
            self._sink, codec.parsed, codec="zstandard", metadata={"eventlog.stream": codec.header.stream},
            sync_marker=sync_marker,
        )
        self.prefix = self._sink.drain()
        self.suffix = b""

    def encode(self, seq: int, event: Event) -> bytes:
        codec = self._codec
        if isinstance(event, Messages):
            batch = _cast_columns(event.records, codec.raw_schema, codec.cast_columns)
            t = list(event.time) if isinstance(event.time, tuple) else event.time
            rec = {"seq": seq, "kind": "MESSAGES", "time": t, "updates": [], "records": batch.to_pylist()}
        elif isinstance(event, Progress):
            updates = [{"time": list(t) if isinstance(t, tuple) else t, "delta": d} for t, d in event.updates]
            rec = {"seq": seq, "kind": "PROGRESS", "time": None, "updates": updates, "records": []}
        else:
            raise TypeError(f"not an event: {event!r}")
        self._writer.write(rec)
        self._writer.flush()
        return self._sink.drain()


class _AvroSegmentDecoder:
    def __init__(self, codec: "AvroCodec", sync: bytes) -> None:
        self._codec = codec
        self._sync = sync
        self._dctx = zstandard.ZstdDecompressor()

    def decode_at(self, segment: pa.Buffer, offset: int, length: int) -> tuple[int, Event]:
        return self.decode(memoryview(segment)[offset : offset + length])

    def decode(self, body) -> tuple[int, Event]:  # noqa: ANN001
        codec = self._codec
        buf = memoryview(body)
        try:
            count, pos = _read_long(buf, 0)
            size, pos = _read_long(buf, pos)
            if count != 1:
                raise ValueError(f"block holds {count} records, an event block holds 1")
            if size < 0 or pos + size + _SYNC_SIZE != len(buf):
                raise ValueError(f"block size {size} does not match the event's {len(buf)} bytes")
            if bytes(buf[pos + size :]) != self._sync:
                raise ValueError("block sync marker differs from the segment's")
            data = buf[pos : pos + size]
            declared = zstandard.frame_content_size(data)
            if declared > MAX_EVENT_BYTES:
                raise ValueError(f"event declares {declared} bytes, over the {MAX_EVENT_BYTES} limit")
            raw = self._dctx.decompress(data, max_output_size=MAX_EVENT_BYTES)
            rec = fastavro.schemaless_reader(io.BytesIO(raw), codec.raw_parsed, None)
            seq = rec["seq"]
            check = codec.header.time_type.check
            if rec["kind"] == "MESSAGES":
                rows = rec["records"]
                if not rows:
                    raise ValueError("messages event without records")
                batch = pa.RecordBatch.from_pylist(rows, schema=codec.raw_schema)
                batch = _cast_columns(batch, codec.header.schema, codec.cast_columns)
                t = rec["time"]
                return seq, Messages(check(tuple(t) if isinstance(t, list) else t), batch)
            updates = tuple(
                (check(tuple(u["time"]) if isinstance(u["time"], list) else u["time"]), u["delta"])
                for u in rec["updates"]
            )
            return seq, Progress(updates)
        except CorruptLogError:
            raise
        except (ValueError, KeyError, TypeError, EOFError, IndexError, zstandard.ZstdError, pa.ArrowException) as e:
            raise CorruptLogError(f"undecodable avro event: {type(e).__name__}: {e}") from None


class AvroCodec:
    """Avro object container segments for one stream header."""

    file_suffix = ".avro"

    def __init__(self, header: StreamHeader) -> None:
        self.header = header
        self.schema_json, self.raw_schema = event_schema(header)
        self.parsed = fastavro.parse_schema(self.schema_json)
        self.raw_parsed = fastavro.parse_schema(strip_logical(self.schema_json))
        self.cast_columns = [i for i, (a, b) in enumerate(zip(self.raw_schema, header.schema)) if not a.type.equals(b.type)]
        """Columns whose Arrow type differs from the integer storage type Avro holds."""

    def new_segment(self) -> _AvroSegmentEncoder:
        return _AvroSegmentEncoder(self)

    def _standalone_sync(self) -> bytes:
        """The sync marker of standalone bodies: fixed per stream, so no prefix needs storing."""
        return hashlib.blake2b(b"eventlog:" + self.header.stream.encode(), digest_size=_SYNC_SIZE).digest()

    def standalone_encoder(self) -> _AvroSegmentEncoder:
        return _AvroSegmentEncoder(self, self._standalone_sync())

    def standalone_decoder(self) -> _AvroSegmentDecoder:
        return _AvroSegmentDecoder(self, self._standalone_sync())

    def segment_decoder(self, prefix) -> _AvroSegmentDecoder:  # noqa: ANN001
        prefix = bytes(prefix)
        try:
            reader = fastavro.reader(io.BytesIO(prefix))
            stored = json.loads(reader.metadata["avro.schema"])
            codec = reader.codec
        except (ValueError, KeyError, TypeError, EOFError, StopIteration) as e:
            raise CorruptLogError(f"segment does not start with an Avro container header: {e}") from None
        if codec != "zstandard":
            raise CorruptLogError(f"segment uses Avro codec {codec!r}; eventlog writes 'zstandard'")
        if fastavro.parse_schema(stored) != self.parsed:
            raise CorruptLogError("segment's Avro schema does not match the stream header")
        return _AvroSegmentDecoder(self, prefix[-_SYNC_SIZE:])
