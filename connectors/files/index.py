"""The segment index: where each event of a segment lies, and its checksum.

Beside every segment ``<first_seq>.arrows|.avro`` lies ``<first_seq>.index``: a 16-byte header, then one
32-byte entry per event, little-endian (FORMAT.md, "Index files")::

    header: magic b"ELIX" | major u16 | minor u16 | first_seq u64
    entry:  seq u64 | offset u64 | length u32 | crc32 u32 | kind u8 | reserved 3 bytes | entry_crc32 u32

``crc32`` is zlib's CRC-32 of the event's bytes in the segment; ``entry_crc32`` covers the entry's first
28 bytes. An entry is written after its event, so an entry never points at bytes that were never written,
except after a crash that lost unsynced data; both cases are found by the checksums.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

try:  # ISA-L's CRC-32 gives zlib's values several times faster; zlib is the fallback
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - isal is a dependency, but the format never needs it
    _crc32 = zlib.crc32

from eventlog.errors import UnsupportedVersionError

MAGIC = b"ELIX"
INDEX_VERSION = (1, 0)
HEADER = struct.Struct("<4sHHQ")
ENTRY = struct.Struct("<QQIIB3xI")
_ENTRY_BODY = struct.Struct("<QQIIB3x")
HEADER_SIZE = HEADER.size  # 16
ENTRY_SIZE = ENTRY.size  # 32

KIND_MESSAGES = 1
KIND_PROGRESS = 2


class IndexEntry(NamedTuple):
    """One event's place in its segment."""

    seq: int
    offset: int
    length: int
    crc: int
    kind: int


def pack_header(first_seq: int) -> bytes:
    """The index header of a segment whose first event is ``first_seq``."""
    return HEADER.pack(MAGIC, INDEX_VERSION[0], INDEX_VERSION[1], first_seq)


def unpack_header(data: bytes) -> tuple[tuple[int, int], int]:
    """``((major, minor), first_seq)``; raises ValueError on a wrong magic and UnsupportedVersionError on a
    newer major version."""
    magic, major, minor, first_seq = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ValueError(f"bad index magic {magic!r}")
    if major != INDEX_VERSION[0]:
        raise UnsupportedVersionError(f"index has format version {major}.{minor}; this eventlog reads 1.x")
    return (major, minor), first_seq


def pack_entry(e: IndexEntry) -> bytes:
    """The 32 bytes of one entry, with its own checksum."""
    body = _ENTRY_BODY.pack(e.seq, e.offset, e.length, e.crc, e.kind)
    return body + struct.pack("<I", zlib.crc32(body))


def unpack_entry(data: bytes | memoryview, pos: int) -> IndexEntry | None:
    """The entry at ``pos``, or None when its checksum fails (a torn or damaged entry)."""
    seq, offset, length, crc, kind, entry_crc = ENTRY.unpack_from(data, pos)
    if zlib.crc32(memoryview(data)[pos : pos + ENTRY_SIZE - 4]) != entry_crc:
        return None
    return IndexEntry(seq, offset, length, crc, kind)


def entry_position(first_seq: int, seq: int) -> int:
    """Byte offset of the entry of event ``seq`` in the index of the segment starting at ``first_seq``."""
    return HEADER_SIZE + (seq - first_seq) * ENTRY_SIZE


_PIECE = 5 << 10
"""Bytes summed per call: ISA-L's and zlib's CRC-32 let the GIL go for more than 5 KiB, and a pool thread
decoding ahead then waits to get it back behind the replaying thread's Python (issue 38). Pieces keep it: a
300 kB event takes ~10 µs instead of ~5 µs, and a 1M-row replay by 3 workers went from 32.6 to 29.7 ms."""


def checksum(data: bytes | memoryview) -> int:
    """The event checksum: CRC-32 as ``zlib.crc32`` computes it (ISA-L's implementation when present), summed
    in pieces of ``_PIECE`` bytes so that the calling thread keeps the GIL."""
    n = len(data)
    if n <= _PIECE:
        return _crc32(data)
    view = memoryview(data)
    crc = 0
    for at in range(0, n, _PIECE):
        crc = _crc32(view[at : at + _PIECE], crc)
    return crc
