"""Pure-Python reference implementation of the bundle codec: the specification in code.

``schemas/BUNDLE.md`` is the prose; this module is the executable form that the native codec
(``eventlog/_bundle_native.c``) is held to, byte for byte on encode and error for error (class, byte
offset and message) on decode.  It is written for clarity, not speed: one ``struct`` call per field.

It also holds what both implementations share: the constants, :class:`BundleError`, the :class:`Bundle`
result class and the normalisation of ``encode`` arguments.  Use the public module
:mod:`eventlog.bundle`, which picks the native implementation when it is available.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator, Sequence
from typing import Any, Callable, Union

import numpy as np
import pyarrow as pa

from eventlog.errors import CorruptLogError

# --------------------------------------------------------------------------------------------------------
# Constants


class BundleType(enum.IntEnum):
    """The BundleType field of a bundle header (Ray Streaming's values)."""

    EMPTY = 1
    BARRIER = 2
    BUNDLE = 3


class MessageType(enum.IntEnum):
    """The MessageType field of a message header: Ray Streaming's 1 and 2, then eventlog's kinds."""

    BARRIER = 1
    DATA = 2
    EVENT_MESSAGES = 3
    EVENT_PROGRESS = 4
    STREAM_HEADER = 5


# Plain-int copies of the enum values for the hot paths (IntEnum member access is slow).
_EMPTY, _BARRIER, _BUNDLE = 1, 2, 3
_MSG_BARRIER, _MSG_DATA = 1, 2

_BUNDLE_ENUM = BundleType.BUNDLE
_BUNDLE_TYPES = (None, BundleType.EMPTY, BundleType.BARRIER, BundleType.BUNDLE)

MAGIC = 0xCAFEBABA
BUNDLE_HEADER_SIZE = 32
MESSAGE_HEADER_SIZE = 16
#: Largest RawBundleSize (a u32): the bytes of all message headers and payloads of one bundle.
MAX_RAW_SIZE = 0xFFFFFFFF
#: Largest payload length, and largest payload offset inside a bundle, that ``Bundle.payloads()`` can
#: express in an Arrow ``binary_view`` (int32 fields).
MAX_VIEW_OFFSET = 0x7FFFFFFF
#: Default reader-side limit on MessageListSize (decode raises BundleError above it).
DEFAULT_MAX_MESSAGES = 1 << 20

_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF
_BUNDLE_HEADER = struct.Struct("<IQQIII")  # magic, ts, last id, count, bundle type, raw size
_MESSAGE_HEADER = struct.Struct("<IQI")  # payload size, message id, message type
_VIEW_INLINE = 12
assert _BUNDLE_HEADER.size == BUNDLE_HEADER_SIZE and _MESSAGE_HEADER.size == MESSAGE_HEADER_SIZE


class BundleError(CorruptLogError):
    """Bytes that are not a valid bundle; ``offset`` is the byte offset of the offending field in the
    buffer given to ``decode``/``iter_bundles``."""


BundleError.__module__ = "eventlog.bundle"

#: What ``encode`` accepts as payloads: bytes-like objects, or an Arrow binary-like array.
Payloads = Union[Sequence[Any], pa.Array]

# --------------------------------------------------------------------------------------------------------
# The decode result


def _reference_views(buffer: Any, base: int, count: int, offsets: np.ndarray, lengths: np.ndarray) -> bytes:
    """Arrow ``binary_view`` views (16 bytes each) of the payloads, relative to byte ``base``."""
    mv = memoryview(buffer).cast("B")
    out = bytearray(16 * count)
    for i in range(count):
        off, length = int(offsets[i]), int(lengths[i])
        rel = off - base
        if length > MAX_VIEW_OFFSET or (length > _VIEW_INLINE and rel > MAX_VIEW_OFFSET):
            raise BundleError(
                f"message {i}: payload of {length} bytes at bundle offset {rel} does not fit the int32 offsets "
                f"of an Arrow binary_view (use payload(i))",
                offset=off - MESSAGE_HEADER_SIZE,
            )
        if length <= _VIEW_INLINE:
            struct.pack_into("<i", out, 16 * i, length)
            out[16 * i + 4 : 16 * i + 4 + length] = mv[off : off + length]
        else:
            struct.pack_into("<i4sii", out, 16 * i, length, bytes(mv[off : off + 4]), 0, rel)
    return bytes(out)


class Bundle:
    """One decoded bundle: its header fields and an index of its messages, over the input buffer.

    Nothing is copied: ``payload(i)`` is a memoryview into the input and ``payloads()`` an Arrow
    ``binary_view`` array whose data buffer is the input's bytes of this bundle.  The bundle keeps the
    input alive; if the input is mutable (bytearray, numpy), later writes to it show through.
    """

    __slots__ = (
        "magic",
        "ts",
        "last_id",
        "count",
        "type",
        "raw_size",
        "nbytes",
        "offset",
        "buffer",
        "offsets",
        "lengths",
        "types",
        "_ids",
        "_mv",
        "_payloads",
        "_views_fn",
    )

    magic: int
    """The magic number (always ``MAGIC`` once decoded)."""
    ts: int
    """BundleTs: the writer's timestamp in milliseconds since the epoch."""
    last_id: int
    """LastMessageId: the id of the last data message sent on the channel so far."""
    count: int
    """MessageListSize: the number of messages."""
    type: BundleType
    """BundleType: EMPTY, BARRIER or BUNDLE."""
    raw_size: int
    """RawBundleSize: the bytes of the messages (headers and payloads) after the 32-byte header."""
    nbytes: int
    """The bundle's total size, ``32 + raw_size``."""
    offset: int
    """Where the bundle starts in ``buffer`` (0 for ``decode``)."""
    buffer: Any
    """The input object the bundle was decoded from."""
    offsets: np.ndarray
    """int64 absolute byte offset in ``buffer`` of each payload."""
    lengths: np.ndarray
    """uint32 byte length of each payload."""
    types: np.ndarray
    """uint32 MessageType of each message."""

    def __init__(
        self,
        buffer: Any,
        offset: int,
        ts: int,
        last_id: int,
        count: int,
        bundle_type: int,
        raw_size: int,
        offsets: np.ndarray,
        lengths: np.ndarray,
        types: np.ndarray,
        views_fn: Callable[..., bytes] = _reference_views,
    ) -> None:
        self.magic = MAGIC
        self.ts = ts
        self.last_id = last_id
        self.count = count
        self.type = _BUNDLE_TYPES[bundle_type]
        self.raw_size = raw_size
        self.nbytes = BUNDLE_HEADER_SIZE + raw_size
        self.offset = offset
        self.buffer = buffer
        self.offsets = offsets
        self.lengths = lengths
        self.types = types
        self._ids: np.ndarray | None = None
        self._mv: memoryview | None = None
        self._payloads: pa.Array | None = None
        self._views_fn = views_fn

    @property
    def first_id(self) -> int | None:
        """Id of the first data message (``last_id - count + 1``) of a BUNDLE; None for EMPTY and BARRIER."""
        return self.last_id - self.count + 1 if self.type == _BUNDLE else None

    @property
    def ids(self) -> np.ndarray:
        """uint64 MessageId of each message: contiguous for a BUNDLE, all ``last_id`` for a BARRIER."""
        if self._ids is None:
            if self.type == _BUNDLE:
                ids = np.arange(self.count, dtype=np.uint64) + np.uint64(self.last_id - self.count + 1)
            else:
                ids = np.full(self.count, self.last_id, dtype=np.uint64)
            ids.flags.writeable = False
            self._ids = ids
        return self._ids

    def payload(self, i: int) -> memoryview:
        """Payload ``i`` (negative counts from the end) as a memoryview into the input buffer (read-only
        when the input is)."""
        if not -self.count <= i < self.count:
            raise IndexError(f"message index {i} out of range for a bundle of {self.count} messages")
        if self._mv is None:
            self._mv = memoryview(self.buffer).cast("B")
        off = int(self.offsets[i])
        return self._mv[off : off + int(self.lengths[i])]

    def payloads(self) -> pa.Array:
        """All payloads as a ``pa.binary_view`` array whose single data buffer *is* this bundle's bytes in
        the input (zero copy; payloads of up to 12 bytes are also inlined in the views, as Arrow requires).

        Raises BundleError when a payload longer than 12 bytes starts beyond 2**31 - 1 bytes into the
        bundle, or any payload is longer than that (the int32 limits of binary_view); bundles under 2 GiB
        always fit.
        """
        if self._payloads is None:
            views = self._views_fn(self.buffer, self.offset, self.count, self.offsets, self.lengths)
            data = pa.py_buffer(self.buffer).slice(self.offset, self.nbytes)
            self._payloads = pa.Array.from_buffers(pa.binary_view(), self.count, [None, pa.py_buffer(views), data])
        return self._payloads

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[memoryview]:
        return (self.payload(i) for i in range(self.count))

    def __repr__(self) -> str:
        return (
            f"Bundle(type={self.type.name}, ts={self.ts}, last_id={self.last_id}, count={self.count}, "
            f"raw_size={self.raw_size}, offset={self.offset})"
        )


# --------------------------------------------------------------------------------------------------------
# Encode arguments (shared by both implementations)


def _check_int(name: str, value: Any, lo: int, hi: int) -> int:
    if type(value) is int and lo <= value <= hi:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    v = int(value)
    if not lo <= v <= hi:
        raise ValueError(f"{name} {v} is outside [{lo}, {hi}]")
    return v


def _int_array(name: str, values: Any, n: int) -> np.ndarray:
    """A sequence of n ints as a 1-d integer numpy array (uint64 or int64), rejecting other dtypes."""
    if not isinstance(values, (Sequence, np.ndarray)) or isinstance(values, (str, bytes, bytearray)):
        raise TypeError(f"{name} must be an int or a sequence of ints, not {type(values).__name__}")
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name} must have one entry per payload ({n}), got shape {arr.shape}")
    if n and arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, not {arr.dtype}")
    return arr


def _plan(
    n: int, ids: Any, types: Any, bundle_type: int, last_id: int | None
) -> tuple[int, int, int, int, int | np.ndarray]:
    """Checks the id and type arguments of ``encode`` against the bundle rules.

    Returns ``(bundle_type, first_id, id_step, last_id, types)``: message ``i`` gets id
    ``first_id + i * id_step``; ``types`` is one int for every message or a '<u4' array.
    """
    if type(ids) is int and types is None and last_id is None and n and (
        bundle_type is _BUNDLE_ENUM or (type(bundle_type) is int and bundle_type == _BUNDLE)
    ):
        # Fast path of the common call encode(payloads, first_id, bundle_ts=...): same checks as below.
        if not 1 <= ids <= _U64 - n + 1:
            raise ValueError(f"ids must be in [1, 2**64 - 1], got first id {ids} for {n} messages")
        return _BUNDLE, ids, 1, ids + n - 1, _MSG_DATA
    btype = _check_int("bundle_type", bundle_type, 1, 3)
    if last_id is not None:
        last_id = _check_int("last_id", last_id, 0, _U64)

    if btype == _EMPTY:
        if n:
            raise ValueError(f"an EMPTY bundle has no messages, got {n} payloads")
        if ids is not None and not (isinstance(ids, (Sequence, np.ndarray)) and len(ids) == 0):
            raise ValueError("an EMPTY bundle has no message ids; pass the last data id as last_id")
        if types is not None and not (isinstance(types, (Sequence, np.ndarray)) and len(types) == 0):
            raise ValueError("an EMPTY bundle has no message types")
        if last_id is None:
            raise ValueError("an EMPTY bundle needs last_id: the last data message id sent so far (0 if none)")
        return btype, last_id, 0, last_id, 0

    if n == 0:
        raise ValueError(f"a {BundleType(btype).name} bundle needs at least one payload (use EMPTY)")

    if btype == _BARRIER:
        # Every barrier message carries the last data id (it does not advance the id sequence).
        if ids is not None:
            if isinstance(ids, (int, np.integer)) and not isinstance(ids, bool):
                value = _check_int("ids", ids, 0, _U64)
            else:
                arr = _int_array("ids", ids, n)
                value = int(arr[0])
                if (arr.dtype.kind == "i" and (arr < 0).any()) or not (arr == arr[0]).all():
                    raise ValueError("the messages of a BARRIER bundle all carry the last data id")
            if last_id is not None and last_id != value:
                raise ValueError(f"ids ({value}) and last_id ({last_id}) disagree for a BARRIER bundle")
            last_id = _check_int("ids", value, 0, _U64)
        if last_id is None:
            raise ValueError("a BARRIER bundle needs last_id: the last data message id sent so far (0 if none)")
        if types is None:
            types = _MSG_BARRIER
        norm = _types(types, n)
        if (norm != _MSG_BARRIER) if isinstance(norm, int) else (norm != _MSG_BARRIER).any():
            raise ValueError("the messages of a BARRIER bundle must all have MessageType BARRIER (1)")
        return btype, last_id, 0, last_id, norm

    # BUNDLE: contiguous ids first..last, first >= 1.
    if ids is None:
        if last_id is None:
            raise ValueError("a BUNDLE needs ids (the first id, or every id) or last_id")
        first = last_id - n + 1
    elif isinstance(ids, (int, np.integer)) and not isinstance(ids, bool):
        first = _check_int("ids", ids, 1, _U64)
    else:
        arr = _int_array("ids", ids, n)
        first = int(arr[0])
        if first < 1 or first + n - 1 > _U64:
            raise ValueError(f"ids must be in [1, 2**64 - 1], got first id {first} for {n} messages")
        if arr.dtype.kind == "i" and (arr < 0).any():
            raise ValueError("ids must be positive")
        expected = np.arange(n, dtype=np.uint64) + np.uint64(first)
        if not np.array_equal(arr.astype(np.uint64), expected):
            raise ValueError("the ids of a BUNDLE must be contiguous: ids[i] == ids[0] + i")
    if first < 1:
        raise ValueError(f"the first id of a BUNDLE must be >= 1, got {first}")
    last = first + n - 1
    if last > _U64:
        raise ValueError(f"ids overflow u64: first {first} + {n} messages")
    if last_id is not None and last_id != last:
        raise ValueError(f"last_id {last_id} does not match the ids ({first}..{last})")
    if types is None:
        types = _MSG_DATA
    norm = _types(types, n)
    if (norm < 2) if isinstance(norm, int) else (norm < 2).any():
        raise ValueError("messages of a BUNDLE must have MessageType >= 2 (BARRIER goes in BARRIER bundles)")
    return btype, first, 1, last, norm


def _types(types: Any, n: int) -> int | np.ndarray:
    if isinstance(types, (int, np.integer)) and not isinstance(types, bool):
        return _check_int("types", types, 0, _U32)
    arr = _int_array("types", types, n)
    if n and (int(arr.min()) < 0 or int(arr.max()) > _U32):
        raise ValueError("types must be in [0, 2**32 - 1]")
    return np.ascontiguousarray(arr, dtype="<u4")


def _check_ts(bundle_ts: Any) -> int:
    return _check_int("bundle_ts", bundle_ts, 0, _U64)


_ARROW_BINARY = (pa.binary(), pa.large_binary(), pa.binary_view())


def _payload_source(payloads: Any) -> list[Any] | tuple[Any, ...] | pa.Array:
    """Payloads as an Arrow binary-like array (checked: no nulls) or a list/tuple of objects."""
    if isinstance(payloads, pa.Array):
        if payloads.type not in _ARROW_BINARY:
            raise TypeError(f"an Arrow payload array must be binary, large_binary or binary_view, not {payloads.type}")
        if payloads.null_count:
            raise ValueError("payloads must not contain nulls")
        return payloads
    if isinstance(payloads, pa.ChunkedArray):
        raise TypeError("pass the chunks of a ChunkedArray one at a time (or combine_chunks())")
    if isinstance(payloads, (bytes, bytearray, memoryview, str)):
        raise TypeError("payloads must be a sequence of bytes-like objects, not a single one")
    if isinstance(payloads, (list, tuple)):
        return payloads
    return list(payloads)


def _byte_views(payloads: list[Any] | tuple[Any, ...] | pa.Array) -> list[memoryview]:
    """Each payload as a flat memoryview of its bytes."""
    if isinstance(payloads, pa.Array):
        return [memoryview(s.as_buffer()).cast("B") for s in payloads]
    out = []
    for i, p in enumerate(payloads):
        try:
            out.append(memoryview(p).cast("B"))
        except TypeError:
            raise TypeError(
                f"payload {i}: a contiguous bytes-like object is required, not '{type(p).__name__}'"
            ) from None
    return out


# --------------------------------------------------------------------------------------------------------
# Encode


def encoded_size(payloads: Payloads) -> int:
    """Bytes of the bundle that ``encode(payloads, ...)`` produces: ``32 + 16 * n + sum of lengths``."""
    views = _byte_views(_payload_source(payloads))
    return BUNDLE_HEADER_SIZE + sum(MESSAGE_HEADER_SIZE + v.nbytes for v in views)


def _write(dst: memoryview | None, payloads: Any, ids: Any, types: Any, bundle_ts: int, bundle_type: int,
           last_id: int | None) -> bytes | int:
    views = _byte_views(_payload_source(payloads))
    btype, first, step, last, norm = _plan(len(views), ids, types, bundle_type, last_id)
    ts = _check_ts(bundle_ts)
    raw = sum(MESSAGE_HEADER_SIZE + v.nbytes for v in views)
    if raw > MAX_RAW_SIZE:
        raise ValueError(f"bundle too large: RawBundleSize would be {raw} bytes, the limit is {MAX_RAW_SIZE}")
    total = BUNDLE_HEADER_SIZE + raw
    out: memoryview
    if dst is None:
        out = memoryview(bytearray(total))
    else:
        if dst.nbytes < total:
            raise ValueError(f"output buffer of {dst.nbytes} bytes is too small for the {total}-byte bundle")
        out = dst
    pos = BUNDLE_HEADER_SIZE
    for i, v in enumerate(views):
        mtype = norm if isinstance(norm, int) else int(norm[i])
        _MESSAGE_HEADER.pack_into(out, pos, v.nbytes, first + i * step, mtype)
        pos += MESSAGE_HEADER_SIZE
        out[pos : pos + v.nbytes] = v
        pos += v.nbytes
    _BUNDLE_HEADER.pack_into(out, 0, MAGIC, ts, last, len(views), btype, raw)
    return bytes(out) if dst is None else total


def encode(
    payloads: Payloads,
    ids: int | Sequence[int] | np.ndarray | None = None,
    types: int | Sequence[int] | np.ndarray | None = None,
    *,
    bundle_ts: int,
    bundle_type: int = BundleType.BUNDLE,
    last_id: int | None = None,
) -> bytes:
    """Encodes one bundle (see ``eventlog.bundle.encode`` for the argument rules)."""
    result = _write(None, payloads, ids, types, bundle_ts, bundle_type, last_id)
    assert isinstance(result, bytes)
    return result


def encode_into(
    out: Any,
    payloads: Payloads,
    ids: int | Sequence[int] | np.ndarray | None = None,
    types: int | Sequence[int] | np.ndarray | None = None,
    *,
    bundle_ts: int,
    bundle_type: int = BundleType.BUNDLE,
    last_id: int | None = None,
) -> int:
    """Encodes one bundle at the start of the writable buffer ``out``; returns the bytes written."""
    dst = memoryview(out)
    if dst.readonly:
        raise TypeError("encode_into needs a writable buffer")
    if not dst.c_contiguous:
        raise TypeError("encode_into needs a C-contiguous buffer")
    result = _write(dst.cast("B"), payloads, ids, types, bundle_ts, bundle_type, last_id)
    assert isinstance(result, int)
    return result


# --------------------------------------------------------------------------------------------------------
# Decode


def _check_max_messages(max_messages: Any) -> int:
    return _check_int("max_messages", max_messages, 0, (1 << 63) - 1)


def _decode_at(mv: memoryview, buffer: Any, start: int, max_messages: int, exact: bool) -> Bundle:
    """Validates and indexes the bundle at byte ``start`` of ``mv`` (the spec's validation order)."""
    length = mv.nbytes
    avail = length - start
    if avail < BUNDLE_HEADER_SIZE:
        raise BundleError(f"truncated bundle: {avail} of the 32 header bytes present", offset=start)
    magic, ts, last_id, count, btype, raw = _BUNDLE_HEADER.unpack_from(mv, start)
    if magic != MAGIC:
        raise BundleError(f"bad magic 0x{magic:08X} (expected 0xCAFEBABA)", offset=start)
    if btype not in (1, 2, 3):
        raise BundleError(f"unknown BundleType {btype}", offset=start + 24)
    if raw > avail - BUNDLE_HEADER_SIZE:
        raise BundleError(
            f"RawBundleSize {raw} exceeds the {avail - BUNDLE_HEADER_SIZE} bytes after the bundle header",
            offset=start + 28,
        )
    if count > max_messages:
        raise BundleError(f"MessageListSize {count} exceeds max_messages {max_messages}", offset=start + 20)
    if count * MESSAGE_HEADER_SIZE > raw:
        raise BundleError(
            f"MessageListSize {count} needs {count * MESSAGE_HEADER_SIZE} bytes of message headers "
            f"but RawBundleSize is {raw}",
            offset=start + 20,
        )
    if btype == _EMPTY:
        if count != 0:
            raise BundleError(f"EMPTY bundle with MessageListSize {count} (must be 0)", offset=start + 20)
        if raw != 0:
            raise BundleError(f"EMPTY bundle with RawBundleSize {raw} (must be 0)", offset=start + 28)
    else:
        if count == 0:
            raise BundleError(f"{BundleType(btype).name} bundle with no messages", offset=start + 20)
        if btype == _BUNDLE and last_id < count:
            raise BundleError(
                f"LastMessageId {last_id} is smaller than MessageListSize {count} (first id would be below 1)",
                offset=start + 12,
            )

    offsets = np.empty(count, dtype=np.int64)
    lengths = np.empty(count, dtype=np.uint32)
    types = np.empty(count, dtype=np.uint32)
    end = start + BUNDLE_HEADER_SIZE + raw
    first, step = (last_id - count + 1, 1) if btype == _BUNDLE else (last_id, 0)
    p = start + BUNDLE_HEADER_SIZE
    for i in range(count):
        left = end - p
        if left < MESSAGE_HEADER_SIZE:
            raise BundleError(f"message {i}: header overruns the bundle ({left} bytes left)", offset=p)
        size, mid, mtype = _MESSAGE_HEADER.unpack_from(mv, p)
        if size > left - MESSAGE_HEADER_SIZE:
            raise BundleError(
                f"message {i}: PayloadSize {size} exceeds the {left - MESSAGE_HEADER_SIZE} bytes left in the bundle",
                offset=p,
            )
        expected = first + i * step
        if mid != expected:
            raise BundleError(f"message {i}: MessageId {mid}, expected {expected}", offset=p + 4)
        if step and mtype <= _MSG_BARRIER:
            raise BundleError(
                f"message {i}: MessageType {mtype} is not allowed in a BUNDLE bundle (need >= 2)", offset=p + 12
            )
        if not step and mtype != _MSG_BARRIER:
            raise BundleError(
                f"message {i}: MessageType {mtype} is not allowed in a BARRIER bundle (need 1)", offset=p + 12
            )
        offsets[i] = p + MESSAGE_HEADER_SIZE
        lengths[i] = size
        types[i] = mtype
        p += MESSAGE_HEADER_SIZE + size
    if p != end:
        raise BundleError(
            f"RawBundleSize {raw} is larger than the {p - start - BUNDLE_HEADER_SIZE} bytes of its {count} messages",
            offset=p,
        )
    if exact and end != length:
        raise BundleError(f"{length - end} trailing bytes after the bundle", offset=end)
    for a in (offsets, lengths, types):
        a.flags.writeable = False
    return Bundle(buffer, start, ts, last_id, count, btype, raw, offsets, lengths, types)


def _bytes_view(buffer: Any) -> memoryview:
    mv = memoryview(buffer)
    if not mv.c_contiguous:
        raise TypeError("decoding needs a C-contiguous buffer")
    return mv.cast("B")


def decode(buffer: Any, *, max_messages: int = DEFAULT_MAX_MESSAGES) -> Bundle:
    """Decodes the one bundle that fills ``buffer`` exactly (see ``eventlog.bundle.decode``)."""
    return _decode_at(_bytes_view(buffer), buffer, 0, _check_max_messages(max_messages), True)


def iter_bundles(buffer: Any, *, max_messages: int = DEFAULT_MAX_MESSAGES) -> Iterator[Bundle]:
    """Decodes the concatenated bundles of ``buffer`` in order (see ``eventlog.bundle.iter_bundles``)."""
    limit = _check_max_messages(max_messages)
    return _iter(_bytes_view(buffer), buffer, limit)


def _iter(mv: memoryview, buffer: Any, limit: int) -> Iterator[Bundle]:
    pos = 0
    while pos < mv.nbytes:
        b = _decode_at(mv, buffer, pos, limit, False)
        yield b
        pos += b.nbytes
