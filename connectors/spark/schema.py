"""Schemas between a stream header (Arrow) and Spark, and the record batches the data source hands Spark.

A DataFrame read from a stream has the stream's columns followed by three columns of the log:

* ``_time``: the records' time — ``bigint``, or ``array<bigint>`` for ``product:K`` streams;
* ``_part``: the part (capturing worker) that wrote them — ``int``;
* ``_seq``: the sequence id of the Messages event that carried them in that part — ``bigint``.

Records written to a stream are cast to the *canonical* Arrow schema of the Spark schema: Spark's own
mapping (``to_arrow_schema``) with timestamps in UTC, so every part of a stream has one schema whichever
session time zone wrote it.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import ArrayType, IntegerType, LongType, StructField, StructType

from eventlog.errors import SchemaMismatchError
from eventlog.header import StreamHeader
from eventlog.records import constant_column, time_column
from eventlog.time import Time, TimeType

META_COLUMNS = ("_time", "_part", "_seq")
"""The columns the data source adds beside the stream's own."""


def time_spark_type(time_type: TimeType) -> LongType | ArrayType:
    """Spark type of ``_time``: ``bigint`` for int64 times, ``array<bigint>`` for product times."""
    return LongType() if time_type.arity == 0 else ArrayType(LongType(), containsNull=False)


def read_schema(header: StreamHeader) -> StructType:
    """The Spark schema of a stream read through the data source: its columns, then ``_time, _part, _seq``."""
    clash = [n for n in header.schema.names if n in META_COLUMNS]
    if clash:
        raise SchemaMismatchError(
            f"the stream has columns named like the data source's own ({clash}); rename them before capture",
            stream=header.stream,
        )
    try:
        user = from_arrow_schema(header.schema, prefer_timestamp_ntz=True)
    except Exception as e:  # pyspark raises its own TypeError subclasses for unsupported types
        raise SchemaMismatchError(f"Spark cannot represent the stream's schema: {e}", stream=header.stream) from None
    return StructType(list(user.fields) + [
        StructField("_time", time_spark_type(header.time_type), nullable=False),
        StructField("_part", IntegerType(), nullable=False),
        StructField("_seq", LongType(), nullable=False),
    ])


def canonical_arrow_schema(schema: StructType, *, stream: str | None = None) -> pa.Schema:
    """The Arrow schema records of a Spark schema are captured with (timestamps in UTC)."""
    try:
        return to_arrow_schema(schema, timezone="UTC", error_on_duplicated_field_names_in_struct=True)
    except Exception as e:
        raise SchemaMismatchError(f"cannot capture Spark schema {schema.simpleString()}: {e}", stream=stream) from None


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``schema`` (same column names in order; types cast where they differ, e.g. a
    timestamp's time zone or ``large_string``). Free when the schema already matches."""
    if batch.schema.equals(schema):
        return batch
    if batch.schema.names != schema.names:
        raise SchemaMismatchError(f"columns {batch.schema.names} do not match {schema.names}")
    columns = [
        col if col.type.equals(field.type) else col.cast(field.type)
        for col, field in zip(batch.columns, schema)
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def with_log_columns(records: pa.RecordBatch, time: Time, part: int, seq: int, schema: pa.Schema) -> pa.RecordBatch:
    """``records`` of one Messages event with ``_time``, ``_part`` and ``_seq`` appended, as ``schema``
    (the Arrow form of the DataFrame's schema). Columns are picked by name, so ``schema`` may order them."""
    n = records.num_rows
    extra = {
        "_time": time_column(time, n),
        "_part": constant_column(part, n, pa.int32()),
        "_seq": constant_column(seq, n),
    }
    names = records.schema.names
    columns = []
    for field in schema:
        if field.name in extra:
            col = extra[field.name]
        else:
            i = records.schema.get_field_index(field.name)
            if i < 0:
                raise SchemaMismatchError(f"column {field.name!r} is not in the stream (columns {names})")
            col = records.column(i)
        columns.append(col if col.type.equals(field.type) else col.cast(field.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
