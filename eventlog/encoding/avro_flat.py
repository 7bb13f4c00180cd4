"""The rows of a 2.x Avro Messages event encoded column by column with numpy, for flat schemas: the bytes
fastavro writes for the same rows (``AvroRowsCodec.message_rows``), at a fraction of its per-field cost.

A Messages row is its data fields, each ``["null", T]`` (the union's branch as a zigzag varint: ``0x00`` for
null, ``0x02`` then the value), then the same suffix in every row (``_time``, ``_seq``, ``_ts``, ``_updates``).
Values: ``int``/``long`` zigzag varints, ``float``/``double`` little-endian IEEE, ``boolean`` one byte,
``string``/``bytes`` a long length then the bytes, ``fixed`` its bytes; a ``null`` field takes no bytes. Each
column yields its pieces' per-row lengths; the rows' starts follow from their sums, and every piece is
scattered into one output buffer. Columns of other types (decimals, nested types, views) are not handled:
``row_encoder`` returns None and the caller uses fastavro.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa

_VARINT_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


def _varint_matrix(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(bytes, lengths)``: the varints of the uint64 values ``z`` as an ``(n, 10)`` matrix (row r's first
    ``lengths[r]`` bytes are its varint)."""
    lengths = 1 + (z[:, None] >= _VARINT_LIMITS[None, :]).sum(axis=1)
    shifts = np.arange(0, 70, 7, dtype=np.uint64)
    groups = ((z[:, None] >> shifts[None, :]) & np.uint64(0x7F)).astype(np.uint8)
    more = np.arange(10)[None, :] < (lengths[:, None] - 1)
    groups |= np.where(more, 0x80, 0).astype(np.uint8)
    return groups, lengths


def _zigzag(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.int64, copy=False)
    return (v.view(np.uint64) << np.uint64(1)) ^ (v >> np.int64(63)).view(np.uint64)


def _valid(col: pa.Array) -> np.ndarray:
    if col.null_count == 0:
        return np.ones(len(col), dtype=bool)
    return col.is_valid().to_numpy(zero_copy_only=False)


class _Piece:
    """Bytes of one column in every row: a matrix whose row r's first ``lengths[r]`` bytes are the piece,
    then optionally ragged bytes (``data[src_start[r]:src_start[r] + ragged[r]]``) after them."""

    def __init__(self, matrix: np.ndarray, lengths: np.ndarray, data: "np.ndarray | None" = None,
                 src_start: "np.ndarray | None" = None, ragged: "np.ndarray | None" = None) -> None:
        self.matrix = matrix
        self.lengths = lengths
        self.data = data
        self.src_start = src_start
        self.ragged = ragged

    def total(self) -> np.ndarray:
        return self.lengths if self.ragged is None else self.lengths + self.ragged


def _tagged(valid: np.ndarray, values: np.ndarray, value_lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union branch byte before each value (null rows: the branch byte alone)."""
    n = len(valid)
    mat = np.empty((n, 1 + values.shape[1]), dtype=np.uint8)
    mat[:, 0] = np.where(valid, 2, 0)
    mat[:, 1:] = values
    return mat, np.where(valid, 1 + value_lengths, 1)


def _ints(col: pa.Array) -> _Piece:
    valid = _valid(col)
    v = col.fill_null(0).to_numpy(zero_copy_only=False) if col.null_count else col.to_numpy(zero_copy_only=False)
    groups, lengths = _varint_matrix(_zigzag(v))
    return _Piece(*_tagged(valid, groups, lengths))


def _fixed_width(col: pa.Array, dtype: str, width: int) -> _Piece:
    valid = _valid(col)
    filled = col.fill_null(0 if dtype != "u1" else False) if col.null_count else col
    v = np.ascontiguousarray(filled.to_numpy(zero_copy_only=False).astype(dtype))
    return _Piece(*_tagged(valid, v.view(np.uint8).reshape(len(col), width), np.full(len(col), width)))


def _binary(col: pa.Array) -> _Piece:
    valid = _valid(col)
    n = len(col)
    large = pa.types.is_large_string(col.type) or pa.types.is_large_binary(col.type)
    offsets_buf, data_buf = col.buffers()[1], col.buffers()[2]
    off = np.frombuffer(offsets_buf, dtype=np.int64 if large else np.int32, count=n + 1,
                        offset=col.offset * (8 if large else 4)).astype(np.int64)
    lengths = np.where(valid, off[1:] - off[:-1], 0)
    groups, vlen = _varint_matrix(_zigzag(lengths))
    mat, head = _tagged(valid, groups, vlen)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, dtype=np.uint8)
    return _Piece(mat, head, data, off[:-1], lengths)


def _fixed_binary(col: pa.Array) -> _Piece:
    valid = _valid(col)
    n, width = len(col), col.type.byte_width
    data = np.frombuffer(col.buffers()[1], dtype=np.uint8, count=(col.offset + n) * width)
    values = data[col.offset * width:].reshape(n, width)
    return _Piece(*_tagged(valid, values, np.full(n, width)))


def _column_encoder(t: pa.DataType) -> "Callable[[pa.Array], _Piece | None] | None":
    T = pa.types
    if T.is_null(t):
        return lambda col: None  # a "null" field (no union): no bytes
    if T.is_boolean(t):
        return lambda col: _fixed_width(col, "u1", 1)
    if T.is_integer(t) and not T.is_uint64(t):
        return _ints
    if T.is_float32(t):
        return lambda col: _fixed_width(col, "<f4", 4)
    if T.is_float64(t):
        return lambda col: _fixed_width(col, "<f8", 8)
    if T.is_string(t) or T.is_binary(t) or T.is_large_string(t) or T.is_large_binary(t):
        return _binary
    if T.is_fixed_size_binary(t) and not T.is_decimal(t):
        return _fixed_binary
    return None


def _scatter_ragged(out: np.ndarray, dest: np.ndarray, p: _Piece) -> None:
    """Copy row r's ``p.ragged[r]`` source bytes (from ``p.src_start[r]`` in ``p.data``) to ``out[dest[r]:]``."""
    assert p.data is not None and p.src_start is not None and p.ragged is not None
    lens = p.ragged
    total = int(lens.sum())
    if not total:
        return
    before = np.cumsum(lens) - lens  # where each row's bytes start among all the copied bytes
    first = int(p.src_start[0])
    if np.array_equal(p.src_start - first, before):  # the rows' bytes lie back to back in the source (usual)
        src = p.data[first:first + total]
        out[np.repeat(dest - before, lens) + np.arange(total)] = src
        return
    rows = np.repeat(np.arange(len(lens)), lens)
    within = np.arange(total) - before[rows]
    out[dest[rows] + within] = p.data[p.src_start[rows] + within]


def row_encoder(raw: pa.Schema) -> "Callable[[pa.RecordBatch, bytes], bytes] | None":
    """What encodes the rows of a batch of the raw (storage-typed) schema ``raw`` followed by a suffix in every
    row, or None when a column's type is not one this module encodes."""
    encoders = [_column_encoder(f.type) for f in raw]
    if any(e is None for e in encoders):
        return None

    def encode(batch: pa.RecordBatch, suffix: bytes) -> bytes:
        n = batch.num_rows
        pieces = [p for p in (e(batch.column(i)) for i, e in enumerate(encoders)) if p is not None]  # type: ignore[misc]
        sizes = [p.total() for p in pieces]
        row_len = np.full(n, len(suffix), dtype=np.int64)
        for s in sizes:
            row_len += s
        ends = np.cumsum(row_len)
        out = np.empty(int(ends[-1]) if n else 0, dtype=np.uint8)
        at = ends - row_len  # where each row's next piece goes
        for p, s in zip(pieces, sizes):
            w = p.matrix.shape[1]
            mask = np.arange(w)[None, :] < p.lengths[:, None]
            out[(at[:, None] + np.arange(w)[None, :])[mask]] = p.matrix[mask]
            if p.ragged is not None:
                _scatter_ragged(out, at + p.lengths, p)
            at = at + s
        if suffix:
            tail = np.frombuffer(suffix, dtype=np.uint8)
            out[(at[:, None] + np.arange(len(tail))[None, :]).ravel()] = np.tile(tail, n)
        return out.tobytes()

    return encode


__all__ = ["row_encoder"]
