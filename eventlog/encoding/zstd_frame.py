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


# -- a constant column's frame, written without a compressor ---------------------------------------------------

_ML_CODES = ((35, 1), (37, 1), (39, 1), (41, 1), (43, 2), (47, 2), (51, 3), (59, 3), (67, 4), (83, 4), (99, 5),
             (131, 7), (259, 8), (515, 9), (1027, 10), (2051, 11), (4099, 12), (8195, 13), (16387, 14), (32771, 15),
             (65539, 16))
"""Match_Length codes 32…52: (baseline, extra bits) (RFC 8878, 3.1.1.3.2.1.1); codes 0…31 are lengths 3…34."""
_OFFSET_VALUE = 8 + 3
"""Offset_Value of a match 8 bytes back (values 1…3 are repeat codes)."""
_OF_CODE = _OFFSET_VALUE.bit_length() - 1  # 3: the value is 1 << 3 plus 3 extra bits


def _match_code(length: int) -> tuple[int, int, int]:
    """``(code, extra, extra_bits)`` of a match of ``length`` (3 … 131 074) bytes."""
    if length <= 34:
        return length - 3, 0, 0
    for i in range(len(_ML_CODES) - 1, -1, -1):
        base, bits = _ML_CODES[i]
        if length >= base:
            return 32 + i, length - base, bits
    raise AssertionError("unreachable")


def _match_block(literals: bytes, length: int, last: bool) -> bytes:
    """A compressed block that emits ``literals`` (raw, at most 31 bytes), then one match of ``length`` bytes
    8 back: one sequence, its three symbol tables in RLE mode (so no FSE state bits are written)."""
    ml_code, ml_extra, ml_bits = _match_code(length)
    # the bitstream is read backwards: the decoder reads the offset's extra bits, then the match length's,
    # then the literal length's (0 bits: lengths 0…15 have codes of their own); states take 0 bits in RLE mode
    bits = ml_extra | ((_OFFSET_VALUE - (1 << _OF_CODE)) << ml_bits) | (1 << (ml_bits + _OF_CODE))  # end mark
    stream = bits.to_bytes((ml_bits + _OF_CODE + 8) // 8, "little")
    content = (bytes((len(literals) << 3,)) + literals  # Raw_Literals_Block, 1-byte header
               + bytes((1, 0x54, len(literals), _OF_CODE, ml_code))  # 1 sequence; LL, OF, ML tables RLE; symbols
               + stream)
    header = int(last) | (2 << 1) | (len(content) << 3)  # Compressed_Block
    return header.to_bytes(3, "little") + content


def constant_int64_frame(value: int, count: int) -> bytes:
    """A Zstandard frame whose content is ``count`` copies of the int64 ``value``, little-endian (an Arrow
    column of one value), built directly: the 8 bytes as literals, then matches 8 bytes back, one block per
    128 KiB. zstd's own compressor spends ~180 µs on 80 KB of a small number (long zero runs are its slow case);
    this takes a few µs and is a few dozen bytes. Only the 8 literal bytes depend on ``value``: the frame of
    a count is built once (for the last few counts) and the value spliced in."""
    if count < 1:
        raise ValueError("a frame of no values: write an empty buffer instead")
    head, tail = _shape(count)
    return head + (value & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little") + tail


def _shape(count: int) -> tuple[bytes, bytes]:
    """The frame of ``count`` values before and after the value's 8 bytes (kept for the last few counts)."""
    shape = _SHAPES.get(count)
    if shape is None:
        if len(_SHAPES) >= 16:
            _SHAPES.clear()
        frame, at = _build_constant_frame(0, count), _literals_at(count)
        shape = _SHAPES[count] = (frame[:at], frame[at + 8 :])
    return shape


def constant_int64_value(frame: "bytes | memoryview", count: int) -> int | None:
    """The int64 ``value`` when ``frame`` is exactly ``constant_int64_frame(value, count)``, else None (another
    compressor's frame of the same values included: the caller decodes those). Its content is then known
    without decompressing it."""
    if count < 1:
        return None
    head, tail = _shape(count)
    if len(frame) != len(head) + 8 + len(tail):
        return None
    frame = bytes(frame)  # a few dozen bytes; a memoryview of signed chars would not compare equal to bytes
    if not (frame.startswith(head) and frame.endswith(tail)):
        return None
    return int.from_bytes(frame[len(head) : len(head) + 8], "little", signed=True)


def _literals_at(count: int) -> int:
    """Where the value's 8 bytes sit in the frame of ``count`` values: after the frame header (magic,
    descriptor, window, content size) and the first block's 3-byte header, plus the literals' 1-byte header
    when that block is compressed (more than one value)."""
    fcs = 4 if 8 * count < 1 << 32 else 8
    return 4 + 2 + fcs + 3 + (1 if count > 1 else 0)


_SHAPES: dict[int, tuple[bytes, bytes]] = {}


def _build_constant_frame(value: int, count: int) -> bytes:
    """``constant_int64_frame``, built from scratch."""
    pattern = (value & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little")
    size = 8 * count
    # Frame_Header_Descriptor: 4-byte Frame_Content_Size (8 bytes past 4 GiB), no single segment, no checksum;
    # Window_Descriptor 0x38: a 128 KiB window (the matches reach 8 bytes back; blocks regenerate 128 KiB)
    fcs = 4 if size < 1 << 32 else 8
    head = _MAGIC.to_bytes(4, "little") + bytes(((2 if fcs == 4 else 3) << 6, 0x38)) + size.to_bytes(fcs, "little")
    if count == 1:
        return head + (1 | (8 << 3)).to_bytes(3, "little") + pattern  # one Raw_Block
    first = min(size, _MAX_BLOCK)
    blocks = [_match_block(pattern, first - 8, last=first == size)]
    rest = size - first
    if rest:
        full, tail = divmod(rest, _MAX_BLOCK)
        if tail:
            blocks.append(_match_block(b"", _MAX_BLOCK, last=False) * full)
            blocks.append(_match_block(b"", tail, last=True))
        else:
            blocks.append(_match_block(b"", _MAX_BLOCK, last=False) * (full - 1))
            blocks.append(_match_block(b"", _MAX_BLOCK, last=True))
    return head + b"".join(blocks)
