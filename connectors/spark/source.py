"""The ``eventlog`` Spark data source: batch and streaming reads and writes of streams.

Spark creates it in its own Python worker processes (planning on the driver's machine, reading and
writing in executors), so everything it holds is plain data: options, URIs and schemas.
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, DataSourceWriter
from pyspark.sql.types import StructType

from eventlog.errors import SchemaMismatchError

from .batch_read import BatchReader
from .options import ReadOptions, WriteOptions
from .schema import META_COLUMNS, canonical_arrow_schema, read_schema
from .staging import read_header
from .stream_read import StreamReader
from .times import TimeSpec
from .write import BatchWriter, MicroBatchWriter

NAME = "eventlog"
"""The format name: ``spark.read.format("eventlog")``."""


class EventlogDataSource(DataSource):
    """Reads a stream as a DataFrame (batch: completed times; streaming: each completed time once, in
    micro-batches) and writes DataFrames as streams. Options: ``connectors.spark.options``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        opts = ReadOptions.parse(self.options)
        return read_schema(read_header(opts.target))

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(ReadOptions.parse(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        return StreamReader(ReadOptions.parse(self.options), schema)

    def _write_setup(self, schema: StructType) -> tuple[WriteOptions, pa.Schema, TimeSpec]:
        """The write options, the Arrow schema of the stored records and where their time comes from. A frame
        read through this data source (it has ``_time``; ``_part``/``_seq`` too unless dropped) is written at
        its ``_time``, and none of the three columns is stored: they come back on read."""
        opts = WriteOptions.parse(self.options)
        meta = tuple(n for n in schema.fieldNames() if n in META_COLUMNS)
        full = canonical_arrow_schema(schema, stream=opts.target.stream)
        if not meta:
            return opts, full, TimeSpec.parse(opts.time, full, opts.time_type)
        if "_time" not in meta:
            raise SchemaMismatchError(
                f"columns {list(meta)} are the data source's own and there is no _time to write the records at; "
                f"drop them before writing (df.drop(*{list(meta)}))", stream=opts.target.stream)
        if opts.time is not None and opts.time.strip() != "_time":
            raise SchemaMismatchError(
                f"the DataFrame has _time (it was read through the eventlog data source), which is the time its "
                f"records are written at, and also option time={opts.time!r}: leave out the time option, or drop "
                f"{list(meta)} (df.drop(*{list(meta)})) to use {opts.time!r}", stream=opts.target.stream)
        time = TimeSpec.parse("_time", full, opts.time_type)
        stored = pa.schema([f for f in full if f.name not in meta], metadata=full.metadata)
        return opts, stored, replace(time, strip=meta)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        opts, arrow, time = self._write_setup(schema)
        if opts.batch_id is not None:
            return MicroBatchWriter(opts.target, arrow, time, opts.encoding, opts.peers, opts.batch_id,
                                    compression=opts.compression)
        return BatchWriter(opts.target, arrow, time, opts.encoding, overwrite, compression=opts.compression)

    def streamWriter(self, schema: StructType, overwrite: bool) -> MicroBatchWriter:  # noqa: N802
        opts, arrow, time = self._write_setup(schema)
        return MicroBatchWriter(opts.target, arrow, time, opts.encoding, opts.peers, compression=opts.compression)
