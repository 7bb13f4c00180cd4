"""Record-batch messages of 2.x Arrow file segments assembled from parts, without a second pass through
pyarrow's IPC writer: the same bytes a reader sees as pyarrow's (one encapsulated IPC message, FORMAT.md
§4 and §4.1), at a fraction of the cost where pyarrow's writer is slow.

* A Messages event's ``_time`` and ``_seq`` columns hold one value each. zstd spends ~180 µs compressing
  80 KB of a small int64 (long zero runs are its slow case), twice per event — as long as the user's
  columns take. Here pyarrow compresses only the user's columns; the two constant columns are appended to
  its message as frames built directly (``zstd_frame.constant_int64_frame``, a few µs).
* A Progress event is an empty batch: its nodes and buffers never change, only its custom metadata, so the
  message is rebuilt around a template pyarrow wrote once per segment (no IPC writer call, no re-parse).

``parse`` reads the record-batch message pyarrow wrote; ``header`` writes the continuation marker, the
metadata length and a ``Message`` flatbuffer (Arrow ``format/Message.fbs``) laid out front to back, every
field aligned as flatbuffers' verifier (and so pyarrow) requires.
"""

from __future__ import annotations

import bisect
import struct
from typing import NamedTuple, Sequence

_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_NODE = struct.Struct("<qq")
_CONTINUATION = b"\xff\xff\xff\xff"
_RECORD_BATCH = 3
_V5 = 4
_LZ4_FRAME, _ZSTD = 0, 1


class BatchParts(NamedTuple):
    """What a record-batch message declares, as raw flatbuffer vectors (copied as they are)."""

    length: int
    """Rows."""
    nodes: bytes
    """The ``FieldNode`` structs (16 bytes each: length, null count)."""
    buffers: bytes
    """The ``Buffer`` structs (16 bytes each: offset, length within the body)."""
    compressed: bool
    """The body's buffers are frames of ``codec`` behind an int64 length (``BodyCompression``)."""
    variadic: bytes | None
    """``variadicBufferCounts`` (int64 each), None when absent."""
    body_start: int
    """Offset of the body in the message."""
    body_length: int
    codec: int = _ZSTD
    """The ``CompressionType`` of a compressed body: 0 LZ4_FRAME, 1 ZSTD."""


def parse(message: "bytes | memoryview") -> BatchParts:
    """The parts of the encapsulated record-batch message that pyarrow's IPC writer wrote (ValueError for
    anything else)."""
    buf = memoryview(message)
    if bytes(buf[:4]) != _CONTINUATION:
        raise ValueError("not an encapsulated IPC message")
    meta_len = _I32.unpack_from(buf, 4)[0]
    fb = buf[8 : 8 + meta_len]
    if len(fb) != meta_len:
        raise ValueError("IPC message shorter than its metadata")

    def table(pos: int) -> tuple[int, bytes]:
        vt = pos - _I32.unpack_from(fb, pos)[0]
        return pos, bytes(fb[vt : vt + _U16.unpack_from(fb, vt)[0]])

    def field(t: tuple[int, bytes], i: int) -> int:
        pos, vt = t
        at = 4 + 2 * i
        off = _U16.unpack_from(vt, at)[0] if at + 2 <= len(vt) else 0
        return pos + off if off else 0

    def ref(at: int) -> int:
        return at + _U32.unpack_from(fb, at)[0]

    def vector(t: tuple[int, bytes], i: int, size: int) -> bytes | None:
        at = field(t, i)
        if not at:
            return None
        start = ref(at)
        n = _U32.unpack_from(fb, start)[0]
        data = bytes(fb[start + 4 : start + 4 + n * size])
        if len(data) != n * size:
            raise ValueError("IPC metadata vector runs past the metadata")
        return data

    msg = table(ref(0))
    at = field(msg, 1)
    if not at or fb[at] != _RECORD_BATCH:
        raise ValueError("IPC message is not a record batch")
    at = field(msg, 3)
    body_length = struct.unpack_from("<q", fb, at)[0] if at else 0
    at = field(msg, 2)
    if not at:
        raise ValueError("record batch message without its header")
    rb = table(ref(at))
    at = field(rb, 0)
    length = struct.unpack_from("<q", fb, at)[0] if at else 0
    at = field(rb, 3)
    compressed = False
    codec = _ZSTD
    if at:
        c = table(ref(at))
        codec_at = field(c, 0)
        codec = struct.unpack_from("<b", fb, codec_at)[0] if codec_at else 0
        if codec not in (_LZ4_FRAME, _ZSTD):
            raise ValueError(f"IPC body compression {codec} is neither LZ4_FRAME (0) nor ZSTD (1)")
        compressed = True
    return BatchParts(length, vector(rb, 1, 16) or b"", vector(rb, 2, 16) or b"", compressed, vector(rb, 4, 8),
                      8 + meta_len, body_length, codec)


def split(chunks: "Sequence[bytes | memoryview]") -> "tuple[BatchParts, list]":
    """``parse`` of the message pyarrow's writer handed over as ``chunks`` (``DrainSink.drain_chunks``, or one
    buffer), and its body as the pieces they hold (the body buffers not copied)."""
    pieces = [memoryview(c) for c in chunks]

    def take(n: int) -> bytes:  # the next n bytes, consumed from the pieces
        out = b""
        while len(out) < n:
            if not pieces:
                raise ValueError("IPC message shorter than its metadata")
            c = pieces.pop(0)
            k = n - len(out)
            out += bytes(c[:k])
            if len(c) > k:
                pieces.insert(0, c[k:])
        return out

    start = take(8)
    parts = parse(start + take(max(0, _I32.unpack_from(start, 4)[0])))
    if sum(len(c) for c in pieces) < parts.body_length:
        raise ValueError("IPC message shorter than its body")
    return parts, pieces


def _pad(n: int, to: int = 8) -> bytes:
    return b"\0" * (-n % to)


def header(length: int, nodes: bytes, buffers: bytes, compressed: bool, variadic: "bytes | None", body_length: int,
           metadata: Sequence[tuple[bytes, bytes]], codec: int = _ZSTD) -> bytes:
    """The encapsulated message's start — ``FFFFFFFF``, the int32 metadata length, the ``Message`` flatbuffer
    (V5, a ``RecordBatch`` of ``length`` rows with these raw ``nodes``, ``buffers`` and ``variadic`` counts,
    a ``BodyCompression`` of ``codec`` (0 LZ4_FRAME, 1 ZSTD) when ``compressed``, ``body_length`` and the custom
    ``metadata`` pairs), padded to 8 bytes — to which the body is appended."""
    key = (len(nodes), len(buffers), compressed, -1 if variadic is None else len(variadic), len(metadata),
           codec if compressed else _ZSTD)
    shape = _SHAPES.get(key)
    if shape is None:
        shape = _SHAPES[key] = _Shape(*key)
    out = bytearray(shape.template)
    _Q.pack_into(out, shape.body_length_at, body_length)
    _Q.pack_into(out, shape.length_at, length)
    out[shape.nodes_at : shape.nodes_at + len(nodes)] = nodes
    out[shape.buffers_at : shape.buffers_at + len(buffers)] = buffers
    if variadic is not None:
        out[shape.variadic_at : shape.variadic_at + len(variadic)] = variadic
    slots = shape.slots_at
    kv_vt = shape.kv_vtable_at
    pos = len(out)
    pieces = [out]
    for i, (k, v) in enumerate(metadata):
        # KeyValue table (soffset | key | value), then the key and value strings (u32 length, bytes, NUL, pad)
        slot = slots + 4 * i
        _U32.pack_into(out, slot, pos - slot)
        k_len = 4 + len(k) + 1
        k_len += -k_len % 4
        v_len = 4 + len(v) + 1
        pieces.append(_KV.pack(pos - kv_vt, 8, 4 + k_len, len(k)))
        pieces.append(k)
        pieces.append(_ZEROS[: k_len - 4 - len(k)])
        pieces.append(_U32.pack(len(v)))
        pieces.append(v)
        pad = -(pos + 16 + k_len - 4 + v_len) % 4
        pieces.append(_ZEROS[: 1 + pad])
        pos += 12 + k_len + v_len + pad
    pieces.append(_ZEROS[: -pos % 8])
    pos += -pos % 8
    return _CONTINUATION + _I32.pack(pos) + b"".join(pieces)


_Q = struct.Struct("<q")
_KV = struct.Struct("<iIII")  # a KeyValue table (soffset, key uoffset, value uoffset) and the key's length
_ZEROS = bytes(16)


class _Shape:
    """The fixed part of ``header``'s flatbuffer for one shape (vector sizes, compression, metadata count):
    everything but the two lengths, the vectors' contents and the KeyValue tables, laid out once."""

    def __init__(self, nodes: int, buffers: int, compressed: bool, variadic: int, entries: int, codec: int) -> None:
        out = bytearray(4)  # root uoffset; every uoffset points forward, every vtable lies before its table
        patches: list[tuple[int, str]] = []
        places: dict[str, int] = {}

        def align(to: int, mod: int = 0) -> None:
            out.extend(b"\0" * ((mod - len(out)) % to))

        # Message: vtable (14 bytes), then the table at 4 mod 8 so that bodyLength (at +4) is 8-aligned;
        # table: soffset | bodyLength i64 | header uoffset | custom_metadata uoffset | version i16 | header_type u8
        align(2)
        vt = len(out)
        out += struct.pack("<7H", 14, 24, 20, 22, 12, 4, 16 if entries else 0)
        align(8, 4)
        table = len(out)
        out += struct.pack("<iqIIhBx", table - vt, 0, 0, 0, _V5, _RECORD_BATCH)
        _U32.pack_into(out, 0, table)
        self.body_length_at = table + 4
        patches += [(table + 12, "rb")] + ([(table + 16, "kv")] if entries else [])

        # RecordBatch: soffset | length i64 | nodes | buffers | compression | variadicBufferCounts (uoffsets)
        align(2)
        vt = len(out)
        out += struct.pack("<7H", 14, 28, 4, 12, 16, 20 if compressed else 0, 24 if variadic >= 0 else 0)
        align(8, 4)
        places["rb"] = rb = len(out)
        out += struct.pack("<iqIIII", rb - vt, 0, 0, 0, 0, 0)
        self.length_at = rb + 4
        patches += [(rb + 12, "nodes"), (rb + 16, "buffers")]
        if compressed:
            patches.append((rb + 20, "compression"))
        if variadic >= 0:
            patches.append((rb + 24, "variadic"))

        if compressed:  # BodyCompression: its codec (method BUFFER is the default, left out as pyarrow does)
            align(2)
            vt = len(out)
            if codec == _LZ4_FRAME:  # the codec's default value: left out of the table, as pyarrow does
                out += struct.pack("<2H", 4, 4)
                align(4)
                places["compression"] = len(out)
                out += struct.pack("<i", len(out) - vt)
            else:
                out += struct.pack("<3H", 6, 8, 4)
                align(4)
                places["compression"] = len(out)
                out += struct.pack("<ib3x", len(out) - vt, codec)

        self.variadic_at = 0
        for name, size, item in (("nodes", nodes, 16), ("buffers", buffers, 16), ("variadic", variadic, 8)):
            if size < 0:
                continue
            align(8, 4)  # elements (structs of int64s, int64s) 8-aligned after the u32 count
            places[name] = len(out)
            out += _U32.pack(size // item)
            setattr(self, f"{name}_at", len(out))
            out += bytes(size)

        self.slots_at = self.kv_vtable_at = 0
        if entries:  # custom_metadata: [KeyValue]; the tables (built per message) follow the shared vtable
            align(4)
            places["kv"] = len(out)
            out += _U32.pack(entries)
            self.slots_at = len(out)
            out += bytes(4 * entries)
            self.kv_vtable_at = len(out)
            out += struct.pack("<4H", 8, 12, 4, 8)  # 8 bytes: the first table starts 4-aligned
        for slot, name in patches:
            _U32.pack_into(out, slot, places[name] - slot)
        self.template = bytes(out)


_SHAPES: dict[tuple[int, int, bool, int, int, int], _Shape] = {}


def node(length: int, null_count: int = 0) -> bytes:
    """One ``FieldNode`` struct."""
    return _NODE.pack(length, null_count)


def buffer(offset: int, length: int) -> bytes:
    """One ``Buffer`` struct (offset and length within the body)."""
    return _NODE.pack(offset, length)


def totals(parts: BatchParts, body: "Sequence[bytes | memoryview]") -> tuple[int, int]:
    """``(values, decoded bytes)`` the message declares (FORMAT.md "Limits"): its node lengths summed, and
    its buffers' sizes once decompressed (``body`` is the message's body as ``split``'s pieces)."""
    values = sum(struct.unpack_from("<" + "q8x" * (len(parts.nodes) // 16), parts.nodes)) if parts.nodes else 0
    decoded = 0
    read = _reader(body)
    for offset, length in struct.iter_unpack("<qq", parts.buffers):
        if not parts.compressed or length == 0:
            decoded += length
            continue
        declared = int.from_bytes(read(offset), "little", signed=True)
        decoded += length - 8 if declared == -1 else declared
    return values, decoded


def _reader(chunks: "Sequence[bytes | memoryview]"):  # noqa: ANN202
    """The 8 bytes at a body offset, read across ``chunks`` (fewer at the body's end)."""
    starts = []
    pos = 0
    for c in chunks:
        starts.append(pos)
        pos += len(c)

    def read(at: int) -> bytes:
        out = b""
        j = max(0, bisect.bisect_right(starts, at) - 1)
        while len(out) < 8 and j < len(chunks):
            c = memoryview(chunks[j])
            lo = max(0, at + len(out) - starts[j])
            out += bytes(c[lo : lo + 8 - len(out)])
            j += 1
        return out

    return read


__all__ = ["BatchParts", "buffer", "header", "node", "parse", "split", "totals"]
