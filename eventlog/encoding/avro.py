"""The Avro encoding: a segment is an Avro object container file (zstandard codec), one block per event.

Each block holds one ``eventlog.Event`` record (``schemas/avro/event.avsc`` with the stream's time type and
record schema filled in); a Messages event nests its records in the ``records`` array. See FORMAT.md.
"""

from __future__ import annotations

import decimal
import hashlib
import io
import json
import struct
from importlib import resources
from typing import Any, Mapping

import fastavro
import pyarrow as pa
import zstandard

from ..errors import CorruptLogError, SchemaMismatchError
from ..events import Event, Messages, Progress
from ..header import StreamHeader
from ..limits import (
    MAX_AVRO_EVENT_VALUES,
    MAX_EVENT_BYTES,
    MAX_EVENT_RECORDS,
    MAX_EVENT_UPDATES,
    check_limit,
    decoded_bytes_bound,
)
from .avro_scan import EventScanner
from .avro_types import avro_record_schema, strip_logical
from .sink import DrainSink
from .validate import validate_full
from .zstd_frame import bounded_decompress, frame_bounds

_SYNC_SIZE = 16
_MAGIC = b"Obj\x01"


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


def _event_record(codec: "AvroCodec", seq: int, event: Event) -> dict[str, Any]:
    """The ``eventlog.Event`` record of an event; one over the format's limits raises LimitError."""
    stream = codec.header.stream
    if isinstance(event, Messages):
        check_limit("records in one event", event.records.num_rows, MAX_EVENT_RECORDS, stream=stream, seq=seq)
        check_limit("values in one avro event", count_values(event.records), MAX_AVRO_EVENT_VALUES,
                    stream=stream, seq=seq)
        batch = _cast_columns(event.records, codec.raw_schema, codec.cast_columns)
        t = list(event.time) if isinstance(event.time, tuple) else event.time
        return {"seq": seq, "kind": "MESSAGES", "time": t, "updates": [], "records": batch.to_pylist()}
    if isinstance(event, Progress):
        check_limit("updates in one event", len(event.updates), MAX_EVENT_UPDATES, stream=stream, seq=seq)
        updates = [{"time": list(t) if isinstance(t, tuple) else t, "delta": d} for t, d in event.updates]
        return {"seq": seq, "kind": "PROGRESS", "time": None, "updates": updates, "records": []}
    raise TypeError(f"not an event: {event!r}")


class _AvroSegmentEncoder:
    def __init__(self, codec: "AvroCodec", sync_marker: bytes | None = None,
                 metadata: "Mapping[str, bytes] | None" = None) -> None:
        self._codec = codec
        self._sink = DrainSink()
        meta = {"eventlog.stream": codec.header.stream}
        meta.update({k: v.decode("ascii") for k, v in (metadata or {}).items()})
        self._writer = fastavro.write.Writer(
            self._sink, codec.parsed, codec="zstandard", metadata=meta, sync_marker=sync_marker,
        )
        self.prefix = self._sink.drain()
        self.suffix = b""

    def encode(self, seq: int, event: Event) -> bytes:
        """One block holding ``event``; an event over the format's limits raises LimitError (nothing is
        returned, so nothing is written)."""
        codec = self._codec
        stream = codec.header.stream
        self._writer.write(_event_record(codec, seq, event))
        self._writer.flush()
        body = self._sink.drain()
        check_limit("stored size in bytes of one event", len(body), MAX_EVENT_BYTES, stream=stream, seq=seq)
        count, pos = _read_long(memoryview(body), 0)
        size, pos = _read_long(memoryview(body), pos)
        data = memoryview(body)[pos : pos + size]
        declared = zstandard.frame_content_size(data)
        decoded = declared if declared >= 0 else frame_bounds(data)[1]
        check_limit(f"decompressed size in bytes of one event ({len(body)} bytes stored)", decoded,
                    decoded_bytes_bound(len(body)), stream=stream, seq=seq)
        return body


class _AvroSegmentDecoder:
    def __init__(self, codec: "AvroCodec", sync: bytes) -> None:
        self._codec = codec
        self._sync = sync
        self._dctx = zstandard.ZstdDecompressor()

    def decode_at(self, segment: pa.Buffer, offset: int, length: int) -> tuple[int, Event]:
        return self.decode(memoryview(segment)[offset : offset + length])

    def decode(self, body) -> tuple[int, Event]:  # noqa: ANN001
        """``(seq, event)`` of one block. Sizes are checked before anything is allocated for them: the
        block's stored and decompressed sizes, then (by a scan of the bytes, unless the size alone bounds
        them) its records, updates and values; the records come back as a validated batch of the schema."""
        buf = memoryview(body)
        try:
            check_limit("stored size in bytes of one event", len(buf), MAX_EVENT_BYTES, reading=True)
            count, pos = _read_long(buf, 0)
            size, pos = _read_long(buf, pos)
            if count != 1:
                raise ValueError(f"block holds {count} records, an event block holds 1")
            if size < 0 or pos + size + _SYNC_SIZE != len(buf):
                raise ValueError(f"block size {size} does not match the event's {len(buf)} bytes")
            if bytes(buf[pos + size :]) != self._sync:
                raise ValueError("block sync marker differs from the segment's")
            raw = bounded_decompress(self._dctx, buf[pos : pos + size], decoded_bytes_bound(len(buf)))
            return self._datum(raw)
        except CorruptLogError:
            raise
        except _DECODE_ERRORS as e:
            raise CorruptLogError(f"undecodable avro event: {type(e).__name__}: {str(e)[:300]}") from None

    def _datum(self, raw) -> tuple[int, Event]:  # noqa: ANN001
        """``(seq, event)`` of one binary ``eventlog.Event`` datum filling ``raw``, its counts bounded first."""
        codec = self._codec
        if not codec.scanner.bounded_by_size(len(raw)):
            codec.scanner.scan(raw)  # counts before fastavro builds anything
        source = io.BytesIO(raw)
        rec = fastavro.schemaless_reader(source, codec.raw_parsed, None)
        if source.tell() != len(raw):
            raise ValueError(f"event record ends at byte {source.tell()} of {len(raw)}")
        return self._event(rec)

    def _event(self, rec: dict[str, Any]) -> tuple[int, Event]:
        codec = self._codec
        seq = rec["seq"]
        if seq < 1:
            raise ValueError(f"sequence id {seq} is not positive")
        check = codec.header.time_type.check
        t = rec["time"]
        if rec["kind"] == "MESSAGES":
            rows = rec["records"]
            check_limit("records in one event", len(rows), MAX_EVENT_RECORDS, reading=True)
            if not rows:
                raise ValueError("messages event without records")
            if rec["updates"]:
                raise ValueError("messages event with updates")
            batch = pa.RecordBatch.from_pylist(rows, schema=codec.raw_schema)
            batch = _cast_columns(batch, codec.header.schema, codec.cast_columns)
            validate_full(batch)
            return seq, Messages(check(tuple(t) if isinstance(t, list) else t), batch)
        if t is not None or rec["records"]:
            raise ValueError("progress event with a time or records")
        check_limit("updates in one event", len(rec["updates"]), MAX_EVENT_UPDATES, reading=True)
        updates = tuple(
            (check(tuple(u["time"]) if isinstance(u["time"], list) else u["time"]), u["delta"])
            for u in rec["updates"]
        )
        return seq, Progress(updates)


_DECODE_ERRORS = (ValueError, KeyError, TypeError, EOFError, IndexError, OverflowError, struct.error,
                  decimal.DecimalException, zstandard.ZstdError, pa.ArrowException, OSError)
"""What fastavro, zstandard and pyarrow raise on bytes that are not an event: each becomes a CorruptLogError."""

SINGLE_OBJECT_MARKER = b"\xc3\x01"
"""The two bytes that open an Avro single-object encoding (Avro specification, "Single-object encoding")."""


class _AvroRecordEncoder:
    """Avro single-object encodings of one event: the marker, the schema's CRC-64-AVRO fingerprint, the datum."""

    prefix = b""
    suffix = b""

    def __init__(self, codec: "AvroCodec") -> None:
        self._codec = codec
        self._head = SINGLE_OBJECT_MARKER + codec.fingerprint

    def encode(self, seq: int, event: Event) -> bytes:
        out = io.BytesIO()
        out.write(self._head)
        fastavro.schemaless_writer(out, self._codec.parsed, _event_record(self._codec, seq, event))
        value = out.getvalue()
        check_limit("stored size in bytes of one event", len(value), MAX_EVENT_BYTES, stream=self._codec.header.stream,
                    seq=seq)
        return value


class _AvroRecordDecoder(_AvroSegmentDecoder):
    """Reads Avro single-object encodings of one event written with the stream's event schema."""

    def __init__(self, codec: "AvroCodec") -> None:
        super().__init__(codec, b"")
        self._head = SINGLE_OBJECT_MARKER + codec.fingerprint

    def decode(self, body) -> tuple[int, Event]:  # noqa: ANN001
        buf = memoryview(body)
        try:
            check_limit("stored size in bytes of one event", len(buf), MAX_EVENT_BYTES, reading=True)
            head = bytes(buf[: len(self._head)])
            if head[:2] != SINGLE_OBJECT_MARKER:
                raise ValueError("the value does not start with the Avro single-object marker C3 01")
            if head != self._head:
                raise ValueError(f"the value's schema fingerprint {head[2:].hex()} is not the stream's event schema "
                                 f"({self._head[2:].hex()}, CRC-64-AVRO)")
            return self._datum(buf[len(self._head):])
        except CorruptLogError:
            raise
        except _DECODE_ERRORS as e:
            raise CorruptLogError(f"undecodable avro event: {type(e).__name__}: {str(e)[:300]}") from None


def count_values(batch: pa.RecordBatch) -> int:
    """The values of ``batch`` as FORMAT.md "Limits" counts them: the summed lengths of its arrays, each
    column once per row, struct fields once per row of their struct, list items with their own fields."""
    todo: list[pa.Array] = list(batch.columns)
    total = 0
    while todo:
        arr = todo.pop()
        total += len(arr)
        t = arr.type
        if pa.types.is_struct(t):
            todo.extend(arr.flatten())
        elif t.num_fields:  # lists of any kind (the Avro encoding holds no maps or unions)
            todo.append(arr.flatten())
    return total


class AvroCodec:
    """Avro object container segments for one stream header."""

    file_suffix = ".avro"

    def __init__(self, header: StreamHeader) -> None:
        """Raises SchemaMismatchError if the Avro encoding cannot store ``header.schema``, ValueError if the header
        chooses a compression this form has not: Kafka records hold each event uncompressed (the producer's
        ``compression.type`` compresses on the wire), 1.x segments use zstandard blocks."""
        if header.compression not in (None, "null"):
            raise ValueError(f"compression {header.compression!r} is for the Avro segments of 2.x file logs: Kafka "
                             "records hold Avro events uncompressed (set the producer's compression.type) and 1.x "
                             "file segments use zstandard blocks")
        self.header = header
        self.schema_json, self.raw_schema = event_schema(header)
        raw_json, self.parsed, self.raw_parsed = parse_schemas(self.schema_json, header.stream)
        records = next(f for f in raw_json["fields"] if f["name"] == "records")["type"]["items"]
        self.scanner = EventScanner(records, header.time_type.arity)
        """Checks an event's bytes against the limits before fastavro decodes them."""
        self.fingerprint = bytes.fromhex(fastavro.schema.fingerprint(
            fastavro.schema.to_parsing_canonical_form(self.schema_json), "CRC-64-AVRO"))
        """The CRC-64-AVRO fingerprint of the event schema's Parsing Canonical Form (8 bytes, little-endian)."""
        self.cast_columns = [i for i, (a, b) in enumerate(zip(self.raw_schema, header.schema)) if not a.type.equals(b.type)]
        """Columns whose Arrow type differs from the integer storage type Avro holds."""

    def new_segment(self, metadata: "Mapping[str, bytes] | None" = None, *, part: int = 0) -> _AvroSegmentEncoder:
        return _AvroSegmentEncoder(self, metadata=metadata)

    def segment_metadata(self, prefix) -> dict[bytes, bytes]:  # noqa: ANN001
        """The key/value metadata of a segment's Avro container header (without the ``avro.`` keys)."""
        return container_metadata(prefix)

    def _standalone_sync(self) -> bytes:
        """The sync marker of standalone bodies: fixed per stream, so no prefix needs storing."""
        return hashlib.blake2b(b"eventlog:" + self.header.stream.encode(), digest_size=_SYNC_SIZE).digest()

    def standalone_encoder(self) -> _AvroSegmentEncoder:
        return _AvroSegmentEncoder(self, self._standalone_sync())

    def standalone_decoder(self) -> _AvroSegmentDecoder:
        return _AvroSegmentDecoder(self, self._standalone_sync())

    def record_encoder(self) -> _AvroRecordEncoder:
        return _AvroRecordEncoder(self)

    def record_decoder(self) -> _AvroRecordDecoder:
        return _AvroRecordDecoder(self)

    def segment_decoder(self, prefix, part: int | None = None) -> _AvroSegmentDecoder:  # noqa: ANN001
        prefix = bytes(prefix)
        stored, codec = container_schema(prefix)
        if codec != "zstandard":
            raise CorruptLogError(f"segment uses Avro codec {str(codec)[:40]!r}; eventlog writes 'zstandard'")
        if stored != self.parsed:
            raise CorruptLogError("segment's Avro schema does not match the stream header")
        return _AvroSegmentDecoder(self, prefix[-_SYNC_SIZE:])


def parse_schemas(schema_json: dict[str, Any], stream: str) -> tuple[dict[str, Any], Any, Any]:
    """``(raw_json, parsed, raw_parsed)``: an Avro schema without its temporal logical types (how eventlog
    reads and writes their integer values), and fastavro's parse of both; SchemaMismatchError naming
    ``stream`` when fastavro refuses them."""
    raw_json = strip_logical(schema_json)
    try:
        return raw_json, fastavro.parse_schema(schema_json), fastavro.parse_schema(raw_json)
    except Exception as e:  # noqa: BLE001 - fastavro's SchemaParseException and friends
        raise SchemaMismatchError(f"the stream schema has no Avro form: {type(e).__name__}: {e}",
                                  stream=stream) from None


def container_metadata(prefix) -> dict[bytes, bytes]:  # noqa: ANN001
    """The key/value metadata of an Avro object container header (without the ``avro.`` keys); damaged bytes
    raise CorruptLogError."""
    try:
        meta = fastavro.reader(io.BytesIO(bytes(prefix))).metadata
    except Exception as e:  # noqa: BLE001 - whatever fastavro raises on damaged bytes
        raise CorruptLogError(f"segment does not start with an Avro container header: {type(e).__name__}: "
                              f"{str(e)[:300]}") from None
    return {k.encode("utf-8", "surrogateescape"): (v if isinstance(v, bytes) else str(v).encode("utf-8", "surrogateescape"))
            for k, v in meta.items() if not k.startswith("avro.")}


def container_schema(prefix) -> tuple[Any, str]:  # noqa: ANN001
    """``(schema, codec)``: the schema an Avro object container header declares (parsed by fastavro, to
    compare with ``fastavro.parse_schema`` of the expected one) and its codec name; damaged bytes raise
    CorruptLogError."""
    if bytes(prefix[:4]) != _MAGIC:  # (fastavro does not check it)
        raise CorruptLogError("segment does not start with the Avro container magic Obj\\x01")
    try:
        reader = fastavro.reader(io.BytesIO(bytes(prefix)))
        stored = fastavro.parse_schema(json.loads(reader.metadata["avro.schema"]))
        return stored, reader.codec
    except Exception as e:  # noqa: BLE001 - whatever fastavro raises on damaged bytes (SchemaParseException, ...)
        raise CorruptLogError(f"segment does not start with an Avro container header of an eventlog stream: "
                              f"{type(e).__name__}: {str(e)[:300]}") from None
