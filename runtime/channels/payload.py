"""What a runtime message carries: records at a time, as one Arrow record batch.

A DATA message's payload is ``Time i64 (little-endian) | Arrow IPC stream`` (schema message, one record
batch, end-of-stream marker). Decoding reads the batch out of the payload without copying its buffers (the
batch's buffers are views into the bundle's bytes). Frontier payloads (sink staging files) are a JSON list of
the frontier's times (``[]`` = finished).
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pyarrow as pa

_TIME = struct.Struct("<q")

FINISHED_TS = 1 << 63
"""The bundle timestamp of a channel whose frontier is empty (one past the largest int64 time)."""


def encode_batch(time: int, batch: pa.RecordBatch) -> pa.Buffer:
    """The payload of a DATA message: records ``batch`` at ``time``."""
    sink = pa.BufferOutputStream()
    sink.write(_TIME.pack(time))
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue()


def decode_batch(payload: Any) -> tuple[int, pa.RecordBatch]:
    """``(time, batch)`` of a DATA message payload (any buffer); the batch's buffers view the payload."""
    buf = pa.py_buffer(payload)
    time = _TIME.unpack_from(buf)[0]
    return time, pa.ipc.open_stream(buf.slice(8)).read_next_batch()


def encode_frontier(elements: "list[int] | tuple[int, ...]") -> bytes:
    """The payload of a frontier record in a sink's staging file."""
    return json.dumps(list(elements)).encode()


def decode_frontier(payload: Any) -> tuple[int, ...]:
    """The frontier elements of a frontier payload."""
    return tuple(json.loads(bytes(payload)))
