"""Turning what a user sends (record batch, table, list of dicts) into a batch of the stream's schema."""

from __future__ import annotations

from typing import Any, Sequence, Union

import numpy as np
import pyarrow as pa

from .errors import SchemaMismatchError

Records = Union[pa.RecordBatch, pa.Table, Sequence[dict[str, Any]]]
"""What ``Capture.send`` accepts."""


def to_batch(records: Records, schema: pa.Schema, *, stream: str | None = None, part: int | None = None) -> pa.RecordBatch:
    """Return ``records`` as one RecordBatch with exactly ``schema``, or raise SchemaMismatchError."""
    where: dict[str, Any] = {"stream": stream, "part": part}
    if isinstance(records, pa.Table):
        _check_fields(records.schema, schema, where)
        table = records.combine_chunks()
        batches = table.to_batches()
        batch = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=records.schema)
    elif isinstance(records, pa.RecordBatch):
        _check_fields(records.schema, schema, where)
        batch = records
    elif isinstance(records, (list, tuple)):
        names = set(schema.names)
        for i, row in enumerate(records):
            if not isinstance(row, dict):
                raise SchemaMismatchError(f"record {i} is a {type(row).__name__}, not a dict", **where)
            extra = row.keys() - names
            if extra:
                raise SchemaMismatchError(f"record {i} has fields not in the schema: {sorted(extra)}", **where)
        try:
            return pa.RecordBatch.from_pylist(list(records), schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
            raise SchemaMismatchError(f"records do not convert to the stream schema: {e}", **where) from None
    else:
        raise SchemaMismatchError(
            f"cannot send {type(records).__name__}: expected a pyarrow RecordBatch, Table or a list of dicts", **where
        )
    for i, f in enumerate(schema):
        if not f.nullable and batch.column(i).null_count:
            raise SchemaMismatchError(f"field {f.name!r} is not nullable but has nulls", **where)
    if batch.schema.equals(schema, check_metadata=True):
        return batch
    return pa.RecordBatch.from_arrays(batch.columns, schema=schema)


def _check_fields(got: pa.Schema, want: pa.Schema, where: dict) -> None:
    if got.names != want.names or any(not a.type.equals(b.type) for a, b in zip(got, want)):
        raise SchemaMismatchError(
            "records do not match the stream schema:\n"
            f"  sent:   {', '.join(f'{f.name}: {f.type}' for f in got)}\n"
            f"  stream: {', '.join(f'{f.name}: {f.type}' for f in want)}",
            **where,
        )


def time_column(time: "int | tuple[int, ...]", n: int) -> pa.Array:
    """``n`` copies of a time: ``int64``, or ``list<int64>`` for a product time (the ``_time`` column of the
    file format, the Spark source and ``replay.dataset``). Built through numpy: ``pa.repeat`` costs ~30x more."""
    if isinstance(time, tuple):
        k = len(time)
        values = pa.array(np.tile(np.asarray(time, dtype=np.int64), n), pa.int64())
        return pa.ListArray.from_arrays(pa.array(np.arange(0, (n + 1) * k, k, dtype=np.int32)), values)
    return pa.array(np.full(n, time, dtype=np.int64))


def constant_column(value: int, n: int, type: pa.DataType = pa.int64()) -> pa.Array:  # noqa: A002, B008 - immutable
    """``n`` copies of an integer as an array of the integer ``type`` (a part number, a sequence id)."""
    return pa.array(np.full(n, value, dtype=type.to_pandas_dtype()))
