"""Bounding a Zstandard frame before decompressing it (RFC 8878, section 3.1.1).

Walks the frame's block headers (no decompression) to find where the frame ends and the most bytes it can
produce: a raw or RLE block regenerates exactly its stated size, a compressed block at most 128 KiB (no
block may state more: Block_Maximum_Size), so no frame expands more than 32 768 times. A
frame's *declared* content size is optional and may lie; this bound does not depend on it.
"""

from __future__ import annotations

import zstandard

from ..errors import LogLimitError

_MAGIC = 0xFD2FB528
_MAX_BLOCK = 128 * 1024
"""Block_Maximum_Size: no block of any frame regenerates more (RFC 8878, 3.1.1.2.3)."""


def frame_bounds(data: memoryview | bytes) -> tuple[int, int]:
    """``(frame_length, max_output)`` of the single Zstandard frame that must fill ``data`` exactly: raises
    ValueError for a truncated or malformed frame, a reserved block type or bytes after the frame."""
    buf = memoryview(data)
    n = len(buf)
    if n < 6 or int.from_bytes(buf[:4], "little") != _MAGIC:
        raise ValueError("not a Zstandard frame (bad magic number)")
    fhd = buf[4]
    if fhd & 0x08:
        raise ValueError("Zstandard frame header has its reserved bit set")
    single = bool(fhd & 0x20)
    fcs_flag = fhd >> 6
    fcs_size = (1 if single else 0, 2, 4, 8)[fcs_flag]
    did_size = (0, 1, 2, 4)[fhd & 0x03]
    pos = 5 + (0 if single else 1) + did_size + fcs_size
    out = 0
    while True:
        if pos + 3 > n:
            raise ValueError("Zstandard frame is truncated (block header)")
        bh = int.from_bytes(buf[pos : pos + 3], "little")
        pos += 3
        last, kind, size = bh & 1, (bh >> 1) & 3, bh >> 3
        if size > _MAX_BLOCK:
            raise ValueError(f"Zstandard block of {size} bytes exceeds the maximum block size")
        if kind == 0:  # raw
            pos += size
            out += size
        elif kind == 1:  # RLE: one byte repeated `size` times
            pos += 1
            out += size
        elif kind == 2:  # compressed
            pos += size
            out += _MAX_BLOCK
        else:
            raise ValueError("Zstandard block has the reserved block type")
        if pos > n:
            raise ValueError("Zstandard frame is truncated (block data)")
        if last:
            break
    if fhd & 0x04:
        pos += 4  # content checksum
    if pos != n:
        raise ValueError(f"Zstandard frame ends at byte {pos} of {n}" if pos < n else "Zstandard frame is truncated")
    return pos, out


def bounded_decompress(dctx: zstandard.ZstdDecompressor, data: memoryview | bytes, limit: int) -> bytes:
    """Decompress the single frame filling ``data``, allocating at most ``min(limit, frame bound)`` bytes.
    Raises LogLimitError if the frame may produce (or declares) more than ``limit`` bytes, ValueError if it
    is malformed or cannot produce what it declares, ``zstandard.ZstdError`` if its content fails to decode."""
    _, bound = frame_bounds(data)
    declared = zstandard.frame_content_size(data)
    if declared > limit or (declared < 0 and bound > limit):
        size = f"declares {declared}" if declared >= 0 else f"may produce {bound}"
        raise LogLimitError(f"event's Zstandard frame {size} bytes, over the format's limit of {limit} for a body "
                            f"of {len(data)} bytes")
    if declared > bound:
        raise ValueError(f"Zstandard frame declares {declared} bytes but its blocks hold at most {bound}")
    if declared < 0:
        return dctx.decompress(data, max_output_size=max(bound, 1))
    out = dctx.decompress(data)  # sized by the declared content size, which zstd checks while decoding
    if len(out) != declared:
        raise ValueError(f"Zstandard frame produced {len(out)} bytes, it declares {declared}")
    return out
