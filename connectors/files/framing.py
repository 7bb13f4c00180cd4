"""Finding events in a segment's bytes without its index: the framing of Arrow IPC streams and Avro
object container files.

A segment is the truth and its index an accelerator (FORMAT.md 3.3): a reader whose index is missing,
short or damaged, and a writer rebuilding an index, find each event's body by the container's own framing:

* Arrow: every IPC message is ``FFFFFFFF | metadata length i32 | flatbuffer Message | body``, the body
  length being the Message's ``bodyLength``; the prefix is a Schema message, each event one RecordBatch
  message, and ``FFFFFFFF 00000000`` ends the stream.
* Avro: the prefix is the container header (magic, metadata map, 16-byte sync marker); each event is one
  block ``count | size | size bytes | sync marker``.

The functions here are *prefix-closed*: any prefix of valid bytes (a body still being written, or cut by
a crash) frames as incomplete (``None``), never as malformed; :class:`Malformed` means the bytes present
cannot start a valid prefix or body. They read through ``read(offset, n)`` (fewer bytes at the end of the
file) and never allocate more than the bytes they are shown, so hostile lengths cost nothing.
"""

from __future__ import annotations

import struct
from typing import Callable

from eventlog.encoding.ipc_file import LEADING_MAGIC, trailer_length
from eventlog.limits import MAX_EVENT_BYTES, MAX_EVENT_METADATA_BYTES, MAX_EVENT_RECORDS

Read = Callable[[int, int], bytes]
"""``read(offset, n)``: up to ``n`` bytes of the segment at ``offset`` (fewer at its end)."""

END = -1
"""What :func:`frame_body` returns at the Arrow end-of-stream marker (the suffix)."""

MAX_PREFIX_BYTES = 64 << 20
"""Largest segment prefix (Arrow schema message, Avro container header) the framing accepts."""

_CONTINUATION = b"\xff\xff\xff\xff"
_SCHEMA, _RECORD_BATCH = 1, 3  # Arrow MessageHeader union tags
_AVRO_MAGIC = b"Obj\x01"
_SYNC_SIZE = 16
_MAX_MAP_ENTRIES = 1 << 16


class Malformed(Exception):
    """The bytes at ``offset`` cannot be (the start of) a segment prefix or event body."""

    def __init__(self, reason: str, offset: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.offset = offset


class Framing:
    """The framing of one encoding's segments; a segment's Avro sync marker is learnt from its prefix."""

    suffix: bytes = b""
    """The fixed suffix of a cleanly closed 1.x segment (empty when there is none or it varies)."""
    marker: bytes = b""
    """Bytes that open (Arrow) or precede (Avro: the sync marker) every event: what a recovery probes for."""

    def suffix_end(self, read: Read, size: int, offset: int) -> int | None:
        """Where the suffix that starts at ``offset`` (where :meth:`body_length` returned :data:`END`) ends;
        None while it is not whole."""
        return offset + len(self.suffix)

    def prefix_length(self, read: Read, size: int) -> int | None:
        """Length of the segment prefix, None while the bytes present are a proper prefix of one."""
        raise NotImplementedError

    def body_length(self, read: Read, size: int, offset: int) -> int | None:
        """Length of the whole body at ``offset``; None when incomplete (or nothing there); :data:`END`
        at the end-of-stream suffix."""
        raise NotImplementedError


def framing_for(encoding: str, major: int = 1) -> Framing:
    """A fresh framing for segments of ``encoding`` (``arrow`` or ``avro``) of format ``major``: Arrow 2.x
    segments are IPC files (leading magic, a footer after the end-of-stream marker once sealed)."""
    if encoding == "arrow":
        return ArrowFileFraming() if major >= 2 else ArrowFraming()
    if encoding == "avro":
        return AvroFraming(MAX_EVENT_RECORDS if major >= 2 else 1)
    raise ValueError(f"unknown encoding {encoding!r}")


# -- Arrow IPC --------------------------------------------------------------------------------------------


def _u(fmt: str, buf: bytes, pos: int, offset: int) -> int:
    if not 0 <= pos <= len(buf) - struct.calcsize(fmt):
        raise Malformed("IPC message metadata points outside itself", offset)
    return struct.unpack_from(fmt, buf, pos)[0]


def _message_header(meta: bytes, offset: int) -> tuple[int, int]:
    """``(header_type, bodyLength)`` of a flatbuffer ``Message`` (Arrow ``format/Message.fbs``)."""
    table = _u("<I", meta, 0, offset)
    vtable = table - _u("<i", meta, table, offset)
    vt_size = _u("<H", meta, vtable, offset)
    if vt_size < 4 or vt_size % 2:
        raise Malformed("IPC message metadata has a malformed vtable", offset)

    def field(i: int) -> int:
        at = 4 + 2 * i
        if at + 2 > vt_size:
            return 0
        rel = _u("<H", meta, vtable + at, offset)
        return table + rel if rel else 0

    header_type = _u("<B", meta, field(1), offset) if field(1) else 0
    body = _u("<q", meta, field(3), offset) if field(3) else 0
    return header_type, body


class ArrowFraming(Framing):
    """Arrow IPC stream framing (continuation marker and 8-byte aligned metadata, as pyarrow writes)."""

    suffix = _CONTINUATION + b"\x00\x00\x00\x00"
    marker = _CONTINUATION

    def _message(self, read: Read, size: int, offset: int, want: int) -> int | None:
        head = read(offset, 8)
        if len(head) < 8:
            if head != _CONTINUATION[: len(head)] and not (
                len(head) > 4 and head[:4] == _CONTINUATION
            ):
                raise Malformed("bytes that are not an Arrow IPC message", offset)
            return None
        if head[:4] != _CONTINUATION:
            raise Malformed("bytes that are not an Arrow IPC message (no continuation marker)", offset)
        meta_len = struct.unpack_from("<i", head, 4)[0]
        if meta_len == 0:
            return END
        limit = MAX_PREFIX_BYTES if want == _SCHEMA else MAX_EVENT_METADATA_BYTES
        if not 8 <= meta_len <= limit:
            raise Malformed(f"Arrow IPC message declares {meta_len} bytes of metadata", offset)
        if offset + 8 + meta_len > size:
            return None
        meta = read(offset + 8, meta_len)
        if len(meta) < meta_len:
            return None
        header_type, body = _message_header(meta, offset)
        if header_type != want:
            what = "schema" if want == _SCHEMA else "record batch"
            raise Malformed(f"Arrow IPC message of type {header_type} where a {what} belongs", offset)
        if not 0 <= body <= (0 if want == _SCHEMA else MAX_EVENT_BYTES):
            raise Malformed(f"Arrow IPC message declares a body of {body} bytes", offset)
        if offset + 8 + meta_len + body > size:
            return None
        return 8 + meta_len + body

    def prefix_length(self, read: Read, size: int) -> int | None:
        n = self._message(read, size, 0, _SCHEMA)
        if n == END:
            raise Malformed("segment starts with an end-of-stream marker, not a schema", 0)
        return n

    def body_length(self, read: Read, size: int, offset: int) -> int | None:
        return self._message(read, size, offset, _RECORD_BATCH)


class ArrowFileFraming(ArrowFraming):
    """Arrow IPC file framing (format 2.x segments): ``ARROW1\\0\\0``, then an IPC stream; once sealed, the
    end-of-stream marker is followed by the footer, its int32 length and ``ARROW1`` (``ipc_file.py``)."""

    suffix = b""

    def prefix_length(self, read: Read, size: int) -> int | None:
        head = read(0, len(LEADING_MAGIC))
        if head != LEADING_MAGIC[: len(head)]:
            raise Malformed("segment does not start with the Arrow IPC file magic", 0)
        if len(head) < len(LEADING_MAGIC):
            return None
        n = self._message(read, size, len(LEADING_MAGIC), _SCHEMA)
        if n == END:
            raise Malformed("segment starts with an end-of-stream marker, not a schema", len(LEADING_MAGIC))
        return None if n is None else len(LEADING_MAGIC) + n

    def suffix_end(self, read: Read, size: int, offset: int) -> int | None:
        """The end of the file when the footer after the end-of-stream marker at ``offset`` is whole (its
        length and magic end the file and account for every byte after the marker), else None."""
        start = offset + len(ArrowFraming.suffix)
        n = trailer_length(read(max(start, size - 16), 16), size)
        if n is None or size - n != start:
            return None
        return size


# -- Avro object container --------------------------------------------------------------------------------


class _Incomplete(Exception):
    pass


class _Bytes:
    """A window of the segment from ``start``; reading past it raises _Incomplete."""

    def __init__(self, data: bytes, start: int) -> None:
        self.data, self.start = data, start

    def long(self, pos: int) -> tuple[int, int]:
        """The zigzag varint at absolute ``pos``: ``(value, next_pos)``."""
        n = shift = 0
        i = pos - self.start
        for _ in range(10):
            if i >= len(self.data):
                raise _Incomplete
            b = self.data[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return (n >> 1) ^ -(n & 1), self.start + i
        raise Malformed("overlong varint", pos)


class AvroFraming(Framing):
    """Avro object container framing; a block is one event: exactly one record (1.x, the ``eventlog.Event``)
    or 1 … ``max_records`` rows (2.x, a Messages event's records or a Progress event's one row)."""

    def __init__(self, max_records: int = 1) -> None:
        self.sync: bytes | None = None
        """The segment's sync marker, known once :meth:`prefix_length` framed the header."""
        self.max_records = max_records
        """The most records (rows) a block may declare."""

    def prefix_length(self, read: Read, size: int) -> int | None:
        window = min(size, 1 << 16)
        while True:
            data = read(0, window)
            if data[:4] != _AVRO_MAGIC[: min(4, len(data))]:
                raise Malformed("segment does not start with the Avro container magic", 0)
            try:
                end = self._header_end(_Bytes(data, 0))
            except _Incomplete:
                if len(data) >= size:
                    return None
                if window >= MAX_PREFIX_BYTES:
                    raise Malformed(f"Avro container header longer than {MAX_PREFIX_BYTES} bytes", 0) from None
                window = min(size, window * 4)
                continue
            self.sync = self.marker = bytes(data[end - _SYNC_SIZE : end])
            return end

    @staticmethod
    def _header_end(b: _Bytes) -> int:
        if len(b.data) < 4:
            raise _Incomplete
        pos = 4
        entries = 0
        while True:
            count, pos = b.long(pos)
            if count == 0:
                break
            if count < 0:
                count = -count
                _, pos = b.long(pos)  # the block's byte size
            entries += count
            if entries > _MAX_MAP_ENTRIES:
                raise Malformed("Avro container header with too many metadata entries", 0)
            for _ in range(2 * count):  # key string, value bytes
                n, pos = b.long(pos)
                if n < 0 or n > MAX_PREFIX_BYTES:
                    raise Malformed(f"Avro container header holds a string of {n} bytes", 0)
                pos += n
                if pos > len(b.data):
                    raise _Incomplete
        if pos + _SYNC_SIZE > len(b.data):
            raise _Incomplete
        return pos + _SYNC_SIZE

    def body_length(self, read: Read, size: int, offset: int) -> int | None:
        if self.sync is None:
            raise RuntimeError("frame the prefix first")
        if offset >= size:
            return None
        head = _Bytes(read(offset, 20), offset)
        try:
            count, pos = head.long(offset)
            length, pos = head.long(pos)
        except _Incomplete:
            if offset + len(head.data) < size:  # pragma: no cover - read() returned less than was there
                raise Malformed("short read", offset) from None
            return None
        if self.max_records == 1 and count != 1:
            raise Malformed(f"Avro block of {count} records, an event block holds 1", offset)
        if not 1 <= count <= self.max_records:  # bounded before the block is read, let alone decoded
            raise Malformed(f"Avro block of {count} rows, an event block holds 1 to {self.max_records}", offset)
        if not 0 <= length <= MAX_EVENT_BYTES:
            raise Malformed(f"Avro block declares {length} bytes", offset)
        end = pos + length + _SYNC_SIZE
        if end > size:
            present = read(pos + length, _SYNC_SIZE) if pos + length < size else b""
            if present != self.sync[: len(present)]:
                raise Malformed("Avro block does not end with the segment's sync marker", offset)
            return None
        if read(pos + length, _SYNC_SIZE) != self.sync:
            raise Malformed("Avro block does not end with the segment's sync marker", offset)
        return end - offset
