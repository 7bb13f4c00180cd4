"""LZ4 frames (the LZ4 frame format, Arrow IPC's ``LZ4_FRAME`` body compression) of a constant int64 column,
built without a compressor, as ``zstd_frame.constant_int64_frame`` builds the zstd ones.

A 2.x Arrow segment's ``_time`` and ``_seq`` columns hold one value per event (FORMAT.md §4.1). Their frame
here: the frame header (no content size, no checksums, independent blocks of at most 4 MiB), then per block of
``8 k`` bytes one sequence of the value's 8 bytes as literals and a match 8 bytes back of ``8 k - 16`` bytes,
and a last sequence of the value's 8 bytes again (the block format ends with at least 5 literals, and its
last match starts at least 12 bytes before the end); a block of one or two values is stored uncompressed.
The JVM tap's ``ConstantFrame.lz4Int64`` builds the same bytes.
"""

from __future__ import annotations

_MAGIC = (0x184D2204).to_bytes(4, "little")
_FLG = 0x60
"""Version 01, independent blocks; no block checksum, content size, content checksum or dictionary."""
_BD = 0x70
"""Block maximum size 4 MiB."""
_BLOCK_BYTES = 4 << 20
_UNCOMPRESSED = 1 << 31
_M32 = 0xFFFFFFFF


def _xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of fewer than 16 bytes (the frame descriptor's header checksum)."""
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    assert len(data) < 16

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & _M32

    h = (seed + p5 + len(data)) & _M32
    i = 0
    while i + 4 <= len(data):
        h = (rotl((h + int.from_bytes(data[i : i + 4], "little") * p3) & _M32, 17) * p4) & _M32
        i += 4
    for b in data[i:]:
        h = (rotl((h + b * p5) & _M32, 11) * p1) & _M32
    h ^= h >> 15
    h = (h * p2) & _M32
    h ^= h >> 13
    h = (h * p3) & _M32
    return h ^ (h >> 16)


_HEADER = _MAGIC + bytes((_FLG, _BD, (_xxh32(bytes((_FLG, _BD))) >> 8) & 0xFF))
_END = bytes(4)


def _block(pattern: bytes, size: int) -> bytes:
    """One block regenerating ``size`` bytes (a multiple of 8) of ``pattern`` repeated."""
    if size < 24:  # too short for a match followed by the last literals: stored as it is
        return (size | _UNCOMPRESSED).to_bytes(4, "little") + pattern * (size // 8)
    match = size - 16 - 4  # past the minimum match of 4: the token holds up to 15, bytes of 255 and one less the rest
    if match < 15:
        first = bytes((0x80 | match,)) + pattern + b"\x08\x00"
    else:
        extra = match - 15
        first = bytes((0x8F,)) + pattern + b"\x08\x00" + b"\xff" * (extra // 255) + bytes((extra % 255,))
    content = first + bytes((0x80,)) + pattern
    return len(content).to_bytes(4, "little") + content


def constant_int64_frame(value: int, count: int) -> bytes:
    """An LZ4 frame whose content is ``count`` (at least 1) little-endian copies of the int64 ``value``."""
    if count < 1:
        raise ValueError("a frame of no values: write an empty buffer instead")
    pattern = (value & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little")
    size = 8 * count
    full, rest = divmod(size, _BLOCK_BYTES)
    blocks = [_block(pattern, _BLOCK_BYTES)] * full + ([_block(pattern, rest)] if rest else [])
    return _HEADER + b"".join(blocks) + _END


def constant_int64_value(frame: "bytes | memoryview", count: int) -> int | None:
    """The int64 ``value`` when ``frame`` is exactly ``constant_int64_frame(value, count)``, else None (another
    compressor's frame of the same values included: the caller decodes those)."""
    if count < 1 or len(frame) < len(_HEADER) + 4 + 1 + 8:
        return None
    at = len(_HEADER) + 4 + (0 if 8 * min(count, _BLOCK_BYTES // 8) < 24 else 1)
    value = int.from_bytes(bytes(frame[at : at + 8]), "little", signed=True)
    return value if bytes(frame) == constant_int64_frame(value, count) else None


__all__ = ["constant_int64_frame", "constant_int64_value"]
