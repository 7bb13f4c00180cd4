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

import time as _clock
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from ..errors import CorruptLogError, SchemaMismatchError
from ..events import Event, Messages
from ..header import StreamHeader
from ..records import constant_column, time_column
from .arrow import _TS, ArrowCodec, _ArrowSegmentDecoder, _BodyWriter, encode_event
from .ipc_file import LEADING_MAGIC, Block, block_of, footer

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

    @property
    def suffix(self) -> bytes:
        """The end-of-stream marker and the footer listing every event encoded so far."""
        return footer(self._message, self._blocks)

    def _rows(self, event: Messages, seq: int) -> pa.RecordBatch:
        records = event.records
        n = records.num_rows
        cols = list(records.columns) + [time_column(event.time, n), constant_column(seq, n)]
        return pa.RecordBatch.from_arrays(cols, schema=self._schema)

    def encode(self, seq: int, event: Event) -> bytes:
        """One record-batch message holding ``event`` with its write time; an event over the format's limits
        raises LimitError (nothing is returned, so nothing is written)."""
        rows = self._rows(event, seq) if isinstance(event, Messages) else None
        body = encode_event(self._codec.header.stream, seq, event, self._messages, self._progress, self._empty,
                            rows, {_TS: str(now_ms()).encode()})
        self._blocks.append(block_of(body, self._offset))
        self._offset += len(body)
        return body


class _FileSegmentDecoder(_ArrowSegmentDecoder):
    """Decodes a 2.x segment's batches: checks that the appended columns agree with the event's metadata
    (the columns are never believed over the metadata, nor the other way round) and drops them."""

    def __init__(self, codec: "ArrowFileCodec", prefix: bytes) -> None:
        super().__init__(codec, prefix, skip=len(LEADING_MAGIC))
        self._width = len(codec.header.schema)

    def _records(self, batch: pa.RecordBatch, seq: int, time) -> pa.RecordBatch:  # noqa: ANN001
        k = self._width
        if batch.num_columns != k + len(META_COLUMNS):
            raise ValueError(f"batch has {batch.num_columns} columns, the segment's schema {k + len(META_COLUMNS)}")
        time_col, seq_col = batch.column(k), batch.column(k + 1)
        if time_col.null_count or seq_col.null_count:
            raise ValueError("null in the _time or _seq column")
        if not _constant(seq_col, seq):
            raise ValueError(f"the _seq column disagrees with the event's seq {seq}")
        if isinstance(time, tuple):
            n = batch.num_rows
            if not _constant(pc.list_value_length(time_col), len(time)):
                raise ValueError(f"the _time column disagrees with the event's time {list(time)}")
            values = np.asarray(time_col.flatten())
            if values.shape != (n * len(time),) or not (values.reshape(n, len(time)) == np.asarray(time)).all():
                raise ValueError(f"the _time column disagrees with the event's time {list(time)}")
        elif not _constant(time_col, time):
            raise ValueError(f"the _time column disagrees with the event's time {time}")
        return pa.RecordBatch.from_arrays(batch.columns[:k], schema=self._codec.header.schema)


def _constant(col: pa.Array, value: int) -> bool:
    mm = pc.min_max(col)
    return mm["min"].as_py() == value and mm["max"].as_py() == value


class ArrowFileCodec(ArrowCodec):
    """Arrow IPC file segments of format 2.x for one stream header (FORMAT.md §3.4, §4.1)."""

    file_suffix = ".arrow"

    def __init__(self, header: StreamHeader, *, compression: str | None = "zstd") -> None:
        super().__init__(header, compression=compression)
        check_no_meta_columns(header)
        self.schema = pa.schema(list(header.schema) + meta_fields(header), metadata=header.schema.metadata)
        self.prefix = LEADING_MAGIC + self.schema.serialize().to_pybytes()

    def new_segment(self, metadata: "Mapping[str, bytes] | None" = None, *, part: int = 0) -> _FileSegmentEncoder:
        return _FileSegmentEncoder(self, metadata)

    def segment_metadata(self, prefix) -> dict[bytes, bytes]:  # noqa: ANN001
        return dict(self._read_schema(self._message_of(prefix)).metadata or {})

    @staticmethod
    def _message_of(prefix) -> bytes:  # noqa: ANN001
        prefix = bytes(prefix)
        if not prefix.startswith(LEADING_MAGIC):
            raise CorruptLogError("segment does not start with the Arrow IPC file magic")
        return prefix[len(LEADING_MAGIC):]

    def segment_decoder(self, prefix, part: int | None = None) -> _FileSegmentDecoder:  # noqa: ANN001
        prefix = bytes(prefix)
        schema = self._read_schema(self._message_of(prefix))
        if not schema.equals(self.schema, check_metadata=False):
            raise CorruptLogError(f"segment schema does not match the stream header (with _time, _seq):\n"
                                  f"{schema}")
        return _FileSegmentDecoder(self, prefix)


__all__ = ["META_COLUMNS", "ArrowFileCodec", "check_no_meta_columns", "meta_fields", "now_ms"]
