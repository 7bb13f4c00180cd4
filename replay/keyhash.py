"""The stable key hash of repartition mode: the same worker for the same key in every process and run.

``eventlog key hash v1`` (vectorised with numpy; Python's ``hash()`` is salted per process, so it is not used):

* integers, booleans, dates, times, timestamps, durations: the value as int64 → ``splitmix64`` (uint64: its
  64 bits as int64, so values past ``2**63 - 1`` wrap);
* floats: the IEEE-754 bits of the float64 value (``-0.0`` as ``0.0``, every NaN as one NaN) → ``splitmix64``;
* strings and binaries: 64-bit FNV-1a over the bytes → ``splitmix64``;
* null: 0;
* one key column: its hash; several key columns: ``h = splitmix64(h * 31 + h_column)`` from left to right, starting at 0.

A record goes to replay worker ``h % peers``.
"""

from __future__ import annotations

from typing import Callable, Sequence, Union

import numpy as np
import pyarrow as pa

Key = Union[str, Sequence[str], Callable[[pa.RecordBatch], "pa.Array | np.ndarray"]]
"""A key: a column name, several column names, or a function from a batch to one value per row."""

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser over uint64 values (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _fnv1a(arr: pa.Array) -> np.ndarray:
    arr = arr.cast(pa.large_binary()) if not pa.types.is_large_binary(arr.type) else arr
    n = len(arr)
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64, count=n + 1, offset=arr.offset * 8)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    h = np.full(n, _FNV_OFFSET, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for pos in range(int(lengths.max()) if n else 0):
            m = lengths > pos
            h[m] = (h[m] ^ data[starts[m] + pos].astype(np.uint64)) * _FNV_PRIME
    return h


def hash_array(arr: "pa.Array | pa.ChunkedArray | np.ndarray") -> np.ndarray:
    """``eventlog key hash v1`` of each value, as uint64."""
    import pyarrow.compute as pc  # here, not at import: replaying in assign mode (and the CLI) needs none

    if isinstance(arr, np.ndarray):
        arr = pa.array(arr)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    T = pa.types
    if T.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if T.is_string(t) or T.is_large_string(t) or T.is_binary(t) or T.is_large_binary(t) or T.is_string_view(t) or T.is_binary_view(t):
        h = _fnv1a(arr)
    elif T.is_floating(t):
        f = pc.fill_null(arr.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False).copy()
        f[f == 0.0] = 0.0
        f[np.isnan(f)] = np.nan
        h = f.view(np.uint64)
    elif T.is_integer(t) or T.is_boolean(t) or T.is_temporal(t):
        if T.is_uint64(t):  # its bits as int64: values past 2**63 - 1 wrap (a checked cast raised for them)
            storage = arr.view(pa.int64())
        else:
            storage = arr.cast(pa.int64()) if not T.is_temporal(t) else arr.view(_int_of(t)).cast(pa.int64())
        h = pc.fill_null(storage, 0).to_numpy(zero_copy_only=False).view(np.uint64)
    else:
        raise TypeError(f"cannot hash key values of type {t} (use a function key returning ints or strings)")
    out = splitmix64(h.astype(np.uint64, copy=False))
    if arr.null_count:
        out[np.asarray(arr.is_null())] = 0
    return out


def _int_of(t: pa.DataType) -> pa.DataType:
    return pa.int32() if t.bit_width == 32 else pa.int64()


def key_hashes(batch: pa.RecordBatch, key: Key) -> np.ndarray:
    """The hash of each row's key."""
    if callable(key):
        return hash_array(key(batch))
    names = [key] if isinstance(key, str) else list(key)
    if not names:
        raise ValueError("a key needs at least one column")
    cols = []
    for name in names:
        idx = batch.schema.get_field_index(name)
        if idx < 0:
            raise KeyError(f"key column {name!r} is not in the schema ({batch.schema.names})")
        cols.append(hash_array(batch.column(idx)))
    if len(cols) == 1:
        return cols[0]
    h = np.zeros(batch.num_rows, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for c in cols:
            h = splitmix64(h * np.uint64(31) + c)
    return h


def worker_of(batch: pa.RecordBatch, key: Key, peers: int) -> np.ndarray:
    """The replay worker (``0 … peers-1``) of each row."""
    return (key_hashes(batch, key) % np.uint64(peers)).astype(np.int64)
