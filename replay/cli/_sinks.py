"""Plain files that ``replay export`` writes for other tools: Parquet, Arrow IPC files, Avro container files,
JSON lines and CSV. Each row is a record plus ``_time`` (int64, or list<int64> for product times), ``_part``
(int32) and ``_seq`` (int64, the event's sequence id in its part).

A sink writes to a temporary file beside ``path`` and renames it into place on ``close``, so a failed or
interrupted export leaves no partial file; it never replaces anything but a regular file (a symbolic link
to one is replaced by the new file, its target is left alone).
"""

from __future__ import annotations

import errno
import io
import json
import os
from typing import Any, Protocol

import pyarrow as pa

from connectors.files.storage import temp_beside
from eventlog.errors import SchemaMismatchError
from eventlog.header import StreamHeader
from eventlog.time import Time

from ._output import csv_cell
from ._values import RecordConverter

EXPORT_FORMATS = ("parquet", "arrow", "avro", "jsonl", "csv")
"""What ``export --to`` writes; ``arrow`` is the Arrow IPC file format (Feather v2)."""

SUFFIX_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow", ".feather": "arrow",
                  ".ipc": "arrow", ".avro": "avro", ".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}
"""The format a file suffix implies when ``--to`` is not given."""

AVRO_CODECS = ("deflate", "zstandard", "null")
"""The block codecs of exported Avro files (avro-tools' ``-codec``): deflate is the default every Avro reader
has; zstandard is smaller and faster where the reader has it."""

META = ("_time", "_part", "_seq")
"""The columns export adds to every record."""

_BUFFER_ROWS = 64 * 1024


def _time_type(header: StreamHeader) -> pa.DataType:
    return pa.int64() if header.time_type.arity == 0 else pa.list_(pa.int64())


def export_schema(header: StreamHeader) -> pa.Schema:
    """The schema of exported rows: ``_time``, ``_part``, ``_seq``, then the stream's record fields."""
    clash = [n for n in header.schema.names if n in META]
    if clash:
        raise SchemaMismatchError(f"records have field(s) {clash}, which export adds itself", stream=header.stream)
    meta = [pa.field("_time", _time_type(header), False), pa.field("_part", pa.int32(), False),
            pa.field("_seq", pa.int64(), False)]
    return pa.schema(meta + list(header.schema), metadata=header.schema.metadata)


class Sink(Protocol):
    """Where exported rows go."""

    rows: int

    def write(self, records: pa.RecordBatch, time: Time, part: int, seq: int) -> None: ...
    def close(self) -> None: ...
    def abort(self) -> None: ...


class _FileSink:
    """Temporary file, renamed into place on close."""

    def __init__(self, path: str) -> None:
        self.path = path
        fd, self.tmp = temp_beside(path)  # exclusive, unpredictable: a link planted beside the output is not followed
        self.file = open(fd, "wb")  # noqa: SIM115 - closed in _finish/_discard
        self.rows = 0

    def _finish(self) -> None:
        """Write what is buffered and close the temporary file."""
        raise NotImplementedError

    def _discard(self) -> None:
        """Close the temporary file without finishing it."""
        raise NotImplementedError

    def close(self) -> None:
        self._finish()
        if os.path.lexists(self.path) and not os.path.isfile(self.path):  # it changed since export checked it
            os.unlink(self.tmp)
            raise FileExistsError(errno.EEXIST, "exists and is not a regular file; the export was not written",
                                  self.path)
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        try:
            self._discard()
        finally:
            if os.path.exists(self.tmp):
                os.unlink(self.tmp)


class _ArrowSink(_FileSink):
    """Parquet or Arrow IPC file, written in row groups / batches of up to 64 Ki rows."""

    def __init__(self, path: str, header: StreamHeader, fmt: str) -> None:
        super().__init__(path)
        self.schema = export_schema(header)
        self._time_type = _time_type(header)
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        if fmt == "parquet":
            import pyarrow.parquet as pq

            self._writer: Any = pq.ParquetWriter(self.file, self.schema)
        else:
            self._writer = pa.ipc.new_file(self.file, self.schema)

    def write(self, records: pa.RecordBatch, time: Time, part: int, seq: int) -> None:
        n = records.num_rows
        value = list(time) if isinstance(time, tuple) else time
        meta = [pa.array([value] * n, self._time_type), pa.array([part] * n, pa.int32()),
                pa.array([seq] * n, pa.int64())]
        self._pending.append(pa.RecordBatch.from_arrays(meta + list(records.columns), schema=self.schema))
        self._pending_rows += n
        self.rows += n
        if self._pending_rows >= _BUFFER_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._writer.write_table(pa.Table.from_batches(self._pending, schema=self.schema))
            self._pending.clear()
            self._pending_rows = 0

    def _finish(self) -> None:
        self._flush()
        self._writer.close()
        self.file.close()

    def _discard(self) -> None:
        self._writer.close()
        self.file.close()


class _AvroSink(_FileSink):
    """An Avro object container file (``codec``: one of ``AVRO_CODECS``): the record schema the avro encoding derives from the
    Arrow schema (temporal types as logical types), with ``_time``, ``_part`` and ``_seq`` first."""

    def __init__(self, path: str, header: StreamHeader, codec: str = "deflate") -> None:
        import fastavro

        from eventlog.encoding.avro_types import avro_record_schema

        super().__init__(path)
        export_schema(header)  # refuses clashing field names
        record, self._raw = avro_record_schema(header.schema, header.stream)
        time = "long" if header.time_type.arity == 0 else {"type": "array", "items": "long"}
        record["fields"] = [{"name": "_time", "type": time}, {"name": "_part", "type": "int"},
                            {"name": "_seq", "type": "long"}] + record["fields"]
        self._cast = not self._raw.equals(header.schema)
        self._file = self.file
        self._writer = fastavro.write.Writer(self._file, fastavro.parse_schema(record), codec=codec)

    def write(self, records: pa.RecordBatch, time: Time, part: int, seq: int) -> None:
        batch = records.cast(self._raw) if self._cast else records
        value = list(time) if isinstance(time, tuple) else time
        for row in batch.to_pylist():
            self._writer.write({"_time": value, "_part": part, "_seq": seq, **row})
        self.rows += records.num_rows

    def _finish(self) -> None:
        self._writer.flush()
        self._file.close()

    def _discard(self) -> None:
        self._file.close()


class _JsonLinesSink(_FileSink):
    """One JSON object per record, values written as ``replay cat`` writes them."""

    def __init__(self, path: str, header: StreamHeader, binary: str) -> None:
        super().__init__(path)
        export_schema(header)
        self._converter = RecordConverter(header.schema, binary)
        self._file = io.TextIOWrapper(self.file, encoding="utf-8")

    def write(self, records: pa.RecordBatch, time: Time, part: int, seq: int) -> None:
        meta = {"_time": list(time) if isinstance(time, tuple) else time, "_part": part, "_seq": seq}
        for row in self._converter.rows(records):
            self._file.write(json.dumps({**meta, **row}, ensure_ascii=False, separators=(",", ":")) + "\n")
        self.rows += records.num_rows

    def _finish(self) -> None:
        self._file.close()

    def _discard(self) -> None:
        self._file.close()


class _CsvSink(_FileSink):
    """CSV with a header row: ``_time`` (a product time as ``1;2``), ``_part``, ``_seq``, then the record fields;
    values as ``replay cat --format csv`` writes them (nested values as JSON, binary as ``binary`` says, null
    as an empty cell)."""

    def __init__(self, path: str, header: StreamHeader, binary: str) -> None:
        import csv

        super().__init__(path)
        export_schema(header)
        self._converter = RecordConverter(header.schema, binary)
        self._names = header.schema.names
        self._file = io.TextIOWrapper(self.file, encoding="utf-8", newline="")
        self._csv = csv.writer(self._file)
        self._csv.writerow([*META, *self._names])

    def write(self, records: pa.RecordBatch, time: Time, part: int, seq: int) -> None:
        t = ";".join(str(x) for x in time) if isinstance(time, tuple) else str(time)
        for row in self._converter.rows(records):
            self._csv.writerow([t, part, seq, *(csv_cell(row.get(n)) for n in self._names)])
        self.rows += records.num_rows

    def _finish(self) -> None:
        self._file.close()

    def _discard(self) -> None:
        self._file.close()


def open_sink(fmt: str, path: str, header: StreamHeader, binary: str = "base64", codec: str | None = None) -> Sink:
    """A sink writing ``fmt`` (one of ``EXPORT_FORMATS``) to ``path``; ``binary`` applies to jsonl and csv,
    ``codec`` (one of ``AVRO_CODECS``, default deflate) to avro."""
    if fmt in ("parquet", "arrow"):
        return _ArrowSink(path, header, fmt)
    if fmt == "avro":
        return _AvroSink(path, header, codec or "deflate")
    if fmt == "jsonl":
        return _JsonLinesSink(path, header, binary)
    if fmt == "csv":
        return _CsvSink(path, header, binary)
    raise ValueError(f"unknown export format {fmt!r}: expected one of {EXPORT_FORMATS}")
