"""Key groups: the unit in which keyed state moves when an operator is rescaled.

A key belongs to key group ``keyhash(key) % key_groups`` (``replay.keyhash``, stable across processes and
runs). An operator with parallelism ``P`` gives instance ``j`` the contiguous range of key groups ``g`` with
``g * P // key_groups == j``, as Flink does, so a rescale moves whole groups and every group's state is
restored into exactly one instance. Source parts and sink parts (not keyed) go to instance ``part % P``,
as ``replay.Replayer`` assigns captured parts to replay workers.

Routing (``destinations``, ``split_by_destination``) is on the hot path of every keyed exchange, so the
common key columns — integers without nulls — are hashed here with in-place numpy arithmetic (the same
``eventlog key hash v1`` as ``replay.keyhash``, bit for bit; every other type goes through
``replay.keyhash``), a power-of-two number of key groups takes a mask instead of a 64-bit modulo, and a
batch is split by destination once (a pass per destination for a few destinations, one stable sort for
more).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from replay.keyhash import Key, hash_array, key_hashes

DEFAULT_KEY_GROUPS = 128
"""The default number of key groups of a job (fixed for the life of its checkpoints)."""

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_FAST_TYPE_IDS = frozenset(t.id for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(),
                                           pa.uint32()))
"""Integer types whose int64 value is exact (``uint64`` may not fit: ``replay.keyhash`` refuses those)."""


_CHUNK = 8192
"""Rows hashed per numpy pass: a chunk's temporaries stay in the CPU cache (3-4x faster than whole batches)."""


def _splitmix64_owned(z: np.ndarray) -> np.ndarray:
    """``replay.keyhash.splitmix64`` computed in place in ``z`` (a uint64 array this call may overwrite)."""
    with np.errstate(over="ignore"):
        t = np.empty(min(len(z), _CHUNK), np.uint64)
        for i in range(0, len(z), _CHUNK):
            c = z[i:i + _CHUNK]
            s = t[:len(c)]
            np.add(c, _GOLDEN, out=c)
            np.right_shift(c, _S30, out=s)
            np.bitwise_xor(c, s, out=c)
            np.multiply(c, _MIX1, out=c)
            np.right_shift(c, _S27, out=s)
            np.bitwise_xor(c, s, out=c)
            np.multiply(c, _MIX2, out=c)
            np.right_shift(c, _S31, out=s)
            np.bitwise_xor(c, s, out=c)
    return z


def _int_values(arr: Any) -> np.ndarray | None:
    """The values of an integer key column without nulls whose hash is ``splitmix64`` of the value as an int64
    (``replay.keyhash``), as a numpy array of their own type; None for any other column."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if isinstance(arr, pa.Array):
        if arr.type.id in _FAST_TYPE_IDS and arr.null_count == 0:
            return arr.to_numpy(zero_copy_only=False)
        return None
    if isinstance(arr, np.ndarray) and arr.dtype.kind == "i":
        return arr
    return None


def hash_values(arr: "pa.Array | pa.ChunkedArray | np.ndarray") -> np.ndarray:
    """``eventlog key hash v1`` of each value (uint64), equal to ``replay.keyhash.hash_array``: integer arrays
    without nulls are hashed here, in place and by cache-sized chunks; everything else by ``hash_array``."""
    values = _int_values(arr)
    if values is not None:
        return _splitmix64_owned(values.astype(np.int64).view(np.uint64))   # astype copies: ours to overwrite
    return hash_array(arr)


def _key_column(batch: pa.RecordBatch, key: Key) -> Any:
    """The one key column (or key function's result) of ``batch``; None for a key of several columns."""
    if callable(key):
        return key(batch)
    names = [key] if isinstance(key, str) else list(key)
    if len(names) != 1:
        return None
    idx = batch.schema.get_field_index(names[0])
    if idx < 0:
        raise KeyError(f"key column {names[0]!r} is not in the schema ({batch.schema.names})")
    return batch.column(idx)


def fast_key_hashes(batch: pa.RecordBatch, key: Key) -> np.ndarray:
    """The hash of each row's key, equal to ``replay.keyhash.key_hashes`` (see ``hash_values``)."""
    col = _key_column(batch, key)
    return key_hashes(batch, key) if col is None else hash_values(col)


def _groups_of_hashes(h: np.ndarray, key_groups: int) -> np.ndarray:
    """``h % key_groups`` in place, as uint64 (a mask when ``key_groups`` is a power of two)."""
    if key_groups & (key_groups - 1) == 0:
        return np.bitwise_and(h, np.uint64(key_groups - 1), out=h)
    return np.remainder(h, np.uint64(key_groups), out=h)


def _instances_of_hashes(h: np.ndarray, key_groups: int, parallelism: int) -> np.ndarray:
    """``instance_of_group`` of each hash's key group, in place, as uint64."""
    g = _groups_of_hashes(h, key_groups)
    np.multiply(g, np.uint64(parallelism), out=g)      # g < key_groups: no overflow
    if key_groups & (key_groups - 1) == 0:
        return np.right_shift(g, np.uint64(key_groups.bit_length() - 1), out=g)
    return np.floor_divide(g, np.uint64(key_groups), out=g)


def key_groups_of(batch: pa.RecordBatch, key: Key, key_groups: int) -> np.ndarray:
    """The key group (int64) of each row of ``batch``."""
    return _groups_of_hashes(fast_key_hashes(batch, key), key_groups).astype(np.int64)


def key_groups_of_values(columns: "list[pa.Array]", key_groups: int) -> np.ndarray:
    """The key group of each key given as key columns (one array per key column, same lengths)."""
    if len(columns) == 1:
        h = hash_values(columns[0])
    else:
        batch = pa.RecordBatch.from_arrays(columns, names=[f"k{i}" for i in range(len(columns))])
        h = key_hashes(batch, batch.schema.names)
    return _groups_of_hashes(h, key_groups).astype(np.int64)


def destinations(batch: pa.RecordBatch, key: Key, key_groups: int, parallelism: int) -> np.ndarray:
    """The instance (0..parallelism-1, int16) owning each row's key group: ``instance_of_group`` of
    ``key_groups_of``. An integer key column whose values span no more than the batch has rows (ids,
    buckets, small keys) is routed through a table of its span's destinations: each distinct value is
    hashed once, and each row costs a lookup."""
    col = _key_column(batch, key)
    values = None if col is None else _int_values(col)
    if parallelism > 32767:
        raise ValueError(f"parallelism {parallelism} is over 32767")
    if values is not None and len(values) >= 64:
        lo, hi = int(values.min()), int(values.max())
        if hi - lo < len(values) and hi < (1 << 63) - 1:
            span = _splitmix64_owned(np.arange(lo, hi + 1, dtype=np.int64).view(np.uint64))
            table = _instances_of_hashes(span, key_groups, parallelism).astype(np.int16)
            return table[np.subtract(values, lo, dtype=np.int64)]
    if values is None:
        h = fast_key_hashes(batch, key)
    else:
        h = _splitmix64_owned(values.astype(np.int64).view(np.uint64))
    return _instances_of_hashes(h, key_groups, parallelism).astype(np.int16)


def split_by_destination(dest: np.ndarray, parallelism: int) -> list[np.ndarray | None]:
    """Per destination ``j`` (``dest``: each row's destination), the indices (ascending) of the rows going to
    ``j``, None when it gets no row, or ``Ellipsis`` when every row goes to ``j`` (the whole batch: nothing
    to take)."""
    n = len(dest)
    out: list = [None] * parallelism
    if n == 0:
        return out
    if parallelism <= 4:
        for j in range(parallelism):
            idx = np.flatnonzero(dest == j)
            if len(idx) == n:
                out[j] = Ellipsis
                return out
            if len(idx):
                out[j] = idx
        return out
    order = np.argsort(dest, kind="stable")      # a radix sort on int16: linear
    bounds = np.searchsorted(dest[order], np.arange(parallelism + 1))
    for j in range(parallelism):
        lo, hi = int(bounds[j]), int(bounds[j + 1])
        if hi - lo == n:
            out[j] = Ellipsis
            return out
        if hi > lo:
            out[j] = order[lo:hi]
    return out


def instance_of_group(group: "int | np.ndarray", key_groups: int, parallelism: int) -> "int | np.ndarray":
    """The instance (0..parallelism-1) that owns key group ``group`` (an int or an array)."""
    return group * parallelism // key_groups


def groups_of_instance(instance: int, key_groups: int, parallelism: int) -> range:
    """The key groups instance ``instance`` of ``parallelism`` owns (a contiguous range)."""
    lo = -(-instance * key_groups // parallelism)
    hi = -(-(instance + 1) * key_groups // parallelism)
    return range(lo, hi)


def parts_of_instance(instance: int, parts: int, parallelism: int) -> list[int]:
    """The source or sink parts instance ``instance`` of ``parallelism`` owns: ``part % parallelism == instance``."""
    return [p for p in range(parts) if p % parallelism == instance]
