"""Reading what an Arrow IPC record-batch message declares, before pyarrow allocates anything for it.

pyarrow trusts a message's sizes: the row count, each array's length, each compressed buffer's
uncompressed length. ``check_record_batch_message`` reads them from the message's flatbuffer metadata
(Arrow ``format/Message.fbs``, ``Schema.fbs``) with bounds checks on every offset, and holds them to the
format's limits, so that pyarrow only ever decodes messages of bounded cost.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import LogLimitError
from ..limits import (
    MAX_EVENT_DECODED_BYTES,
    MAX_EVENT_METADATA_BYTES,
    MAX_EVENT_RECORDS,
    MAX_EVENT_VALUES,
    MAX_EXPANSION_RATIO,
    decoded_bytes_bound,
)

try:  # the same walk in C (built by pip install); the Python one below is the specification and says why
    from . import _ipc_native as _native
except ImportError:  # not built: every message goes through the Python check
    _native = None

_CONTINUATION = 0xFFFFFFFF
_RECORD_BATCH = 3  # MessageHeader union: NONE, Schema, DictionaryBatch, RecordBatch, Tensor, SparseTensor
_LZ4_FRAME, _ZSTD = 0, 1  # CompressionType: LZ4_FRAME, ZSTD
CODECS = (_LZ4_FRAME, _ZSTD)
"""The IPC body compressions readers decompress (``BodyCompression.codec``: LZ4 frames, zstd; FORMAT.md §13)."""
_STRUCTS: dict[str, struct.Struct] = {}


class _Flatbuffer:
    """Bounds-checked reads of a flatbuffer: every read past the buffer raises ValueError."""

    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.n = len(buf)

    def _get(self, fmt: str, pos: int) -> int:
        s = _STRUCTS.get(fmt) or _STRUCTS.setdefault(fmt, struct.Struct(fmt))
        if not 0 <= pos <= self.n - s.size:
            raise ValueError(f"IPC metadata offset {pos} is outside its {self.n} bytes")
        return s.unpack_from(self.buf, pos)[0]

    def items(self, fmt: str, start: int, count: int) -> list[tuple[int, ...]]:
        """``count`` structs of ``fmt`` from ``start`` (a vector that ``_Table.vector`` bounded)."""
        size = struct.calcsize(fmt)
        if not 0 <= start <= self.n - size * count:
            raise ValueError(f"IPC metadata offset {start} is outside its {self.n} bytes")
        return list(struct.iter_unpack(fmt, self.buf[start : start + size * count]))

    def table(self, pos: int) -> "_Table":
        vtable = pos - self._get("<i", pos)
        vt_size = self._get("<H", vtable)
        if vt_size < 4 or vt_size % 2:
            raise ValueError(f"IPC metadata vtable of {vt_size} bytes")
        self._get("<H", vtable + vt_size - 2)  # the whole vtable lies inside the buffer
        return _Table(self, pos, vtable, vt_size)

    def ref(self, pos: int) -> int:
        """The target of the uoffset stored at ``pos``."""
        return pos + self._get("<I", pos)


@dataclass
class _Table:
    fb: _Flatbuffer
    pos: int
    vtable: int
    vt_size: int

    def _field(self, i: int) -> int:
        """Absolute position of field ``i``, or 0 when absent."""
        at = 4 + 2 * i
        if at >= self.vt_size:
            return 0
        off = self.fb._get("<H", self.vtable + at)
        return self.pos + off if off else 0

    def scalar(self, i: int, fmt: str, default: int = 0) -> int:
        at = self._field(i)
        return self.fb._get(fmt, at) if at else default

    def table(self, i: int) -> "_Table | None":
        at = self._field(i)
        return self.fb.table(self.fb.ref(at)) if at else None

    def vector(self, i: int, item_size: int) -> tuple[int, int]:
        """``(start, count)`` of the vector field ``i`` (``(0, 0)`` when absent)."""
        at = self._field(i)
        if not at:
            return 0, 0
        start = self.fb.ref(at)
        count = self.fb._get("<I", start)
        if count * item_size > self.fb.n - start - 4:
            raise ValueError(f"IPC metadata vector of {count} items runs past the metadata")
        return start + 4, count


@dataclass(frozen=True)
class BatchMessage:
    """What a record-batch message declares."""

    rows: int
    """Its row count."""
    values: int
    """The summed lengths of its arrays (FORMAT.md "Limits")."""
    decoded_bytes: int
    """Bytes its buffers take once decompressed."""
    end: int
    """Offset just past the message (metadata and body) in the bytes given."""


def check_record_batch_message(data: memoryview, start: int = 0) -> BatchMessage:
    """Read the encapsulated IPC message at ``start`` of ``data`` and check it is one record batch within
    the format's limits: LogLimitError over a limit, ValueError for anything malformed (sizes or offsets
    that do not fit the bytes given, another message type, an unknown compression)."""
    if _native is not None:
        found = _native.check(data, start, MAX_EVENT_METADATA_BYTES, MAX_EVENT_RECORDS, MAX_EVENT_VALUES,
                              MAX_EVENT_DECODED_BYTES, MAX_EXPANSION_RATIO)
        if found is not None:
            return BatchMessage(*found)
    return check_in_python(data, start)


def check_in_python(data: memoryview, start: int = 0) -> BatchMessage:
    """``check_record_batch_message`` in Python, whatever is built: what the C walk is held to (it accepts
    exactly the messages this accepts, with the same figures), and what says why a message is refused."""
    buf = memoryview(data)
    pos = start
    if len(buf) - pos < 8:
        raise ValueError("IPC message is truncated")
    size = int.from_bytes(buf[pos : pos + 4], "little")
    if size == _CONTINUATION:
        pos += 4
        size = int.from_bytes(buf[pos : pos + 4], "little")
    pos += 4
    if size > MAX_EVENT_METADATA_BYTES:
        raise LogLimitError(f"event's IPC metadata is {size} bytes, over the format's limit of "
                            f"{MAX_EVENT_METADATA_BYTES}")
    if size < 8 or size > len(buf) - pos:
        raise ValueError(f"IPC metadata of {size} bytes does not fit the {len(buf) - pos} bytes left")
    fb = _Flatbuffer(buf[pos : pos + size])
    message = fb.table(fb.ref(0))
    if message.scalar(1, "<B") != _RECORD_BATCH:
        raise ValueError("IPC message is not a record batch")
    body_len = message.scalar(3, "<q")
    body = pos + size
    if not 0 <= body_len <= len(buf) - body:
        raise ValueError(f"IPC body of {body_len} bytes does not fit the {len(buf) - body} bytes left")
    batch = message.table(2)
    if batch is None:
        raise ValueError("IPC record batch message without its header")
    rows = batch.scalar(0, "<q")
    if rows < 0:
        raise ValueError(f"record batch declares {rows} rows")
    if rows > MAX_EVENT_RECORDS:
        raise LogLimitError(f"event holds {rows} records, over the format's limit of {MAX_EVENT_RECORDS}")
    nodes_at, nodes = batch.vector(1, 16)
    values = 0
    for i, (length, _) in enumerate(fb.items("<qq", nodes_at, nodes)):
        if length < 0:
            raise ValueError(f"array {i} declares length {length}")
        values += length
    if values > MAX_EVENT_VALUES:
        raise LogLimitError(f"event holds {values} values (array slots), over the format's limit of "
                            f"{MAX_EVENT_VALUES}")
    compression = batch.table(3)
    codec = None if compression is None else compression.scalar(0, "<b")
    if codec is not None and codec not in CODECS:
        raise ValueError(f"IPC body compression {codec} is neither LZ4_FRAME (0) nor ZSTD (1)")
    bufs_at, nbufs = batch.vector(2, 16)
    decoded = 0
    for i, (offset, length) in enumerate(fb.items("<qq", bufs_at, nbufs)):
        if offset < 0 or length < 0 or offset + length > body_len:
            raise ValueError(f"IPC buffer {i} ({offset}, {length}) lies outside the {body_len}-byte body")
        if codec is None or length == 0:
            decoded += length
            continue
        if length < 8:
            raise ValueError(f"compressed IPC buffer {i} of {length} bytes has no length prefix")
        declared = int.from_bytes(buf[body + offset : body + offset + 8], "little", signed=True)
        if declared < -1:
            raise ValueError(f"compressed IPC buffer {i} declares {declared} bytes")
        decoded += length - 8 if declared == -1 else declared
    counts_at, ncounts = batch.vector(4, 8)
    counts = [c for (c,) in fb.items("<q", counts_at, ncounts)]
    variadic = sum(counts)
    if min(counts, default=0) < 0 or variadic > nbufs:
        raise ValueError(f"record batch declares {variadic} variadic buffers, it has {nbufs}")
    end = body + body_len
    bound = decoded_bytes_bound(end - start)
    if decoded > bound:
        raise LogLimitError(f"event's buffers declare {decoded} bytes once decompressed, over the format's "
                            f"limit of {bound} for an event of {end - start} bytes")
    return BatchMessage(rows, values, decoded, end)
