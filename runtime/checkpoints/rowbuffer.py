"""Buffered input rows as keyed state tables: what joins and connected streams keep between checkpoints.

Operators with several inputs (``runtime.joins``, ``runtime.connect``) buffer whole input rows (the sides of a
join, the versions of a table, records waiting for their time to complete). A checkpoint stores such a
buffer as a keyed state table of the form ``runtime.checkpoints.keyedstate`` describes, every column typed
Arrow (``encoding = arrow``), so a rescale moves its rows by key group like any keyed state:

    group  int32     the row's key group
    slot   int64     the row's time
    k0 …   any       the row's key columns (the key function's result for a function key)
    value  struct    the row itself: one field per column of the input (plus the operator's own markers)

Nothing in it runs code when read: the table is validated column by column (``decode_rows``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import CheckpointCorruptError
from .keygroups import key_groups_of_values

_ARROW = {b"encoding": b"arrow"}


def encode_rows(rows: pa.Table, times: "np.ndarray | pa.Array", keys: list[pa.Array], key_groups: int) -> pa.Table:
    """The state table of buffered ``rows`` (one time and one key per row: ``times``, ``keys`` as key columns)."""
    n = rows.num_rows
    groups = key_groups_of_values(keys, key_groups) if n else np.zeros(0, np.int64)
    rows = rows.combine_chunks()
    value = pa.StructArray.from_arrays([c.combine_chunks() for c in rows.columns], fields=list(rows.schema))
    fields = [pa.field("group", pa.int32(), nullable=False), pa.field("slot", pa.int64(), nullable=False)]
    arrays: list[Any] = [pa.array(groups, pa.int32()), pa.array(times, pa.int64())]
    for i, k in enumerate(keys):
        k = k.combine_chunks() if isinstance(k, pa.ChunkedArray) else k
        fields.append(pa.field(f"k{i}", k.type, metadata=_ARROW))
        arrays.append(k)
    fields.append(pa.field("value", value.type, metadata=_ARROW))
    arrays.append(value)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def decode_rows(table: pa.Table, *, n_keys: int, operator: str,
                path: str | None) -> tuple[np.ndarray, list[pa.Array], pa.Table]:
    """``(times, key columns, rows)`` of a state table ``encode_rows`` wrote; raises ``CheckpointCorruptError``
    naming ``path`` when it is not one (wrong columns or types, null groups or times)."""
    names = ["group", "slot", *(f"k{i}" for i in range(n_keys)), "value"]
    if table.column_names != names:
        raise CheckpointCorruptError(f"buffered rows of operator {operator!r} have columns {table.column_names}, "
                                     f"expected {names}", path=path)
    schema = table.schema
    for name, type_ in (("group", pa.int32()), ("slot", pa.int64())):
        if schema.field(name).type != type_ or table.column(name).null_count:
            raise CheckpointCorruptError(f"buffered rows of operator {operator!r}: column {name!r} is not a "
                                         f"non-null {type_} column", path=path)
    for name in names[2:]:
        if (schema.field(name).metadata or {}).get(b"encoding") != b"arrow":
            raise CheckpointCorruptError(f"buffered rows of operator {operator!r}: column {name!r} is not an "
                                         f"Arrow-encoded column", path=path)
    value = schema.field("value").type
    if not pa.types.is_struct(value):
        raise CheckpointCorruptError(f"buffered rows of operator {operator!r}: column 'value' is not a struct "
                                     f"column", path=path)
    times = table.column("slot").to_numpy()
    col = table.column("value").combine_chunks()
    if col.null_count:
        raise CheckpointCorruptError(f"buffered rows of operator {operator!r}: a row is null", path=path)
    fields = [value.field(i) for i in range(value.num_fields)]
    if not fields:
        raise CheckpointCorruptError(f"buffered rows of operator {operator!r}: column 'value' has no fields",
                                     path=path)
    rows = pa.Table.from_arrays([col.field(i) for i in range(len(fields))], schema=pa.schema(fields))
    keys = [table.column(f"k{i}").combine_chunks() for i in range(n_keys)]
    return times, keys, rows
