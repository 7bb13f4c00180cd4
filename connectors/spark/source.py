"""The ``eventlog`` Spark data source: batch and streaming reads and writes of streams.

Spark creates it in its own Python worker processes (planning on the driver's machine, reading and
writing in executors), so everything it holds is plain data: options, URIs and schemas.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, DataSourceWriter
from pyspark.sql.types import StructType

from eventlog.errors import SchemaMismatchError
from eventlog.log import open_log

from .batch_read import BatchReader
from .options import ReadOptions, WriteOptions
from .schema import META_COLUMNS, canonical_arrow_schema, read_schema
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
        return read_schema(open_log(opts.target.log_uri).header(opts.target.stream))

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(ReadOptions.parse(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        return StreamReader(ReadOptions.parse(self.options), schema)

    def _write_setup(self, schema: StructType) -> tuple[WriteOptions, pa.Schema, TimeSpec]:
        opts = WriteOptions.parse(self.options)
        clash = [n for n in schema.fieldNames() if n in META_COLUMNS]
        if clash:
            raise SchemaMismatchError(
                f"columns {clash} are the data source's own; drop them before writing (e.g. df.drop(*{clash}))",
                stream=opts.target.stream)
        arrow = canonical_arrow_schema(schema, stream=opts.target.stream)
        return opts, arrow, TimeSpec.parse(opts.time, arrow, opts.time_type)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        opts, arrow, time = self._write_setup(schema)
        if opts.batch_id is not None:
            return MicroBatchWriter(opts.target, arrow, time, opts.encoding, opts.peers, opts.batch_id)
        return BatchWriter(opts.target, arrow, time, opts.encoding, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> MicroBatchWriter:  # noqa: N802
        opts, arrow, time = self._write_setup(schema)
        return MicroBatchWriter(opts.target, arrow, time, opts.encoding, opts.peers)
