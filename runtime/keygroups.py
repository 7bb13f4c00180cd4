"""Key groups: the unit in which keyed state moves when an operator is rescaled.

A key belongs to key group ``keyhash(key) % key_groups`` (``replay.keyhash``, stable across processes and
runs). An operator with parallelism ``P`` gives instance ``j`` the contiguous range of key groups ``g`` with
``g * P // key_groups == j``, as Flink does, so a rescale moves whole groups and every group's state is
restored into exactly one instance. Source parts and sink parts (not keyed) go to instance ``part % P``,
as ``replay.Replayer`` assigns captured parts to replay workers.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from replay.keyhash import Key, hash_array, key_hashes

DEFAULT_KEY_GROUPS = 128
"""The default number of key groups of a job (fixed for the life of its checkpoints)."""


def key_groups_of(batch: pa.RecordBatch, key: Key, key_groups: int) -> np.ndarray:
    """The key group (int64) of each row of ``batch``."""
    return (key_hashes(batch, key) % np.uint64(key_groups)).astype(np.int64)


def key_groups_of_values(columns: "list[pa.Array]", key_groups: int) -> np.ndarray:
    """The key group of each key given as key columns (one array per key column, same lengths)."""
    if len(columns) == 1:
        h = hash_array(columns[0])
    else:
        batch = pa.RecordBatch.from_arrays(columns, names=[f"k{i}" for i in range(len(columns))])
        h = key_hashes(batch, batch.schema.names)
    return (h % np.uint64(key_groups)).astype(np.int64)


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
