"""The Arrow IPC *file* format's framing around an IPC stream: the leading magic and the trailing footer.

A sealed format-2.0 Arrow segment (FORMAT.md §3.4) is an Arrow IPC file: ``ARROW1\\0\\0``, the schema
message, the event messages exactly as an IPC stream holds them, the end-of-stream marker, then the footer —
a flatbuffer ``Footer`` (Arrow ``format/File.fbs``) listing every record batch as a ``Block`` (offset,
metadata length, body length) — its length as int32 and ``ARROW1``. ``pyarrow.ipc.open_file``,
``polars.scan_ipc`` and DuckDB (through pyarrow) need the footer; eventlog's own readers use the index.

The footer is built here rather than by pyarrow's file writer so that a segment can be sealed by whoever
holds its bytes — the writer at rotation or close, or the next writer repairing what a crashed one left —
without re-encoding a single event.
"""

from __future__ import annotations

import struct
from typing import Iterable, NamedTuple

FILE_MAGIC = b"ARROW1"
LEADING_MAGIC = FILE_MAGIC + b"\x00\x00"
"""The 8 bytes an Arrow IPC file starts with (the magic padded to 8)."""
EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_TRAILER = 4 + len(FILE_MAGIC)  # int32 footer length + magic
_V5 = 4  # MetadataVersion.V5
_BLOCK = struct.Struct("<qi4xq")  # offset, metaDataLength, (padding), bodyLength


class Block(NamedTuple):
    """One record-batch message of the file: where it starts, its metadata length (the 8-byte prefix,
    flatbuffer and padding) and its body length."""

    offset: int
    meta_length: int
    body_length: int


def block_of(message: "bytes | memoryview", offset: int) -> Block:
    """The Block of an IPC message (``FFFFFFFF``, int32 metadata length, metadata, body) at ``offset``."""
    meta = 8 + int.from_bytes(bytes(message[4:8]), "little", signed=True)
    return Block(offset, meta, len(message) - meta)


def _schema_table(message: bytes) -> int:
    """Position of the ``Schema`` table inside a Schema message's flatbuffer (``Message.header``)."""
    table = struct.unpack_from("<I", message, 0)[0]
    vtable = table - struct.unpack_from("<i", message, table)[0]
    vt_size = struct.unpack_from("<H", message, vtable)[0]
    if vt_size < 4 + 2 * 3:
        raise ValueError("schema message has no header")
    rel = struct.unpack_from("<H", message, vtable + 4 + 2 * 2)[0]  # field 2: header
    if not rel:
        raise ValueError("schema message has no header")
    at = table + rel
    return at + struct.unpack_from("<I", message, at)[0]


def footer(schema_message: bytes, blocks: Iterable[Block]) -> bytes:
    """The bytes that follow the last record-batch message of a sealed segment: the end-of-stream marker,
    the ``Footer`` flatbuffer (the schema of ``schema_message`` — an IPC Schema message as in the segment's
    prefix, continuation and length included — and ``blocks``), its length and the magic."""
    meta_len = int.from_bytes(schema_message[4:8], "little", signed=True)
    fb = bytes(schema_message[8 : 8 + meta_len])  # the Message flatbuffer, copied whole (offsets are relative)
    schema_at = _schema_table(fb)
    blocks = list(blocks)
    # layout: root offset | vtable | Footer table | dictionaries [] | recordBatches [Block] | Message copy
    vtable_at, table_at = 4, 16
    out = bytearray(struct.pack("<I", table_at))
    out += struct.pack("<HHHHHH", 12, 20, 4, 8, 12, 16)  # vtable: sizes, then version, schema, dicts, batches
    assert len(out) == table_at
    out += struct.pack("<ih2x", table_at - vtable_at, _V5)
    slots = len(out)
    out += b"\0" * 12  # three uoffsets, filled below
    out += b"\0" * (-(len(out) + 4) % 8)  # vector elements are 8-aligned: the length lies at 4 mod 8
    dicts_at = len(out)
    out += struct.pack("<I", 0)
    out += b"\0" * (-(len(out) + 4) % 8)
    batches_at = len(out)
    out += struct.pack("<I", len(blocks))
    for b in blocks:
        out += _BLOCK.pack(b.offset, b.meta_length, b.body_length)
    out += b"\0" * (-len(out) % 8)
    message_at = len(out)
    out += fb
    out += b"\0" * (-len(out) % 8)
    for i, target in enumerate((message_at + schema_at, dicts_at, batches_at)):
        at = slots + 4 * i
        struct.pack_into("<I", out, at, target - at)
    return EOS + bytes(out) + struct.pack("<i", len(out)) + FILE_MAGIC


def footer_blocks(data: "bytes | memoryview") -> list[Block]:
    """The record-batch Blocks listed by the footer ``data`` (the flatbuffer alone, without its length and
    magic). Raises ValueError when it is not a well-formed footer."""
    data = bytes(data)

    def u(fmt: str, pos: int) -> int:
        if not 0 <= pos <= len(data) - struct.calcsize(fmt):
            raise ValueError("footer points outside itself")
        return struct.unpack_from(fmt, data, pos)[0]

    table = u("<I", 0)
    vtable = table - u("<i", table)
    vt_size = u("<H", vtable)
    if vt_size < 4 + 2 * 4 or vt_size % 2:
        raise ValueError("footer without record batches")
    rel = u("<H", vtable + 4 + 2 * 3)  # field 3: recordBatches
    if not rel:
        return []
    at = table + rel
    vec = at + u("<I", at)
    n = u("<I", vec)
    if n > (len(data) - vec - 4) // _BLOCK.size:
        raise ValueError(f"footer declares {n} blocks, more than it holds")
    start = vec + 4
    return [Block(*_BLOCK.unpack_from(data, start + i * _BLOCK.size)) for i in range(n)]


def trailer_length(data: "bytes | memoryview", size: int) -> int | None:
    """Length of the footer, its length field and magic at the end of a file of ``size`` bytes whose last
    bytes are ``data`` (at least 10 of them); None when the file does not end with the magic."""
    if len(data) < _TRAILER or bytes(data[-len(FILE_MAGIC):]) != FILE_MAGIC:
        return None
    n = int.from_bytes(bytes(data[-_TRAILER : -len(FILE_MAGIC)]), "little", signed=True)
    if not 0 < n <= size - _TRAILER:
        return None
    return n + _TRAILER


__all__ = ["Block", "EOS", "FILE_MAGIC", "LEADING_MAGIC", "block_of", "footer", "footer_blocks", "trailer_length"]
