"""``dataset(uri, stream)``: a stream's records as a ``pyarrow.dataset.Dataset`` that any Arrow tool scans
(DuckDB, polars, pandas, Acero), and that ``replay sql`` queries.

Each row is a record of the stream with three columns appended — those of the Spark data source
(connectors/spark/schema.py) and of ``replay export``:

* ``_time``: the record's time, ``int64``, or ``list<int64>`` for ``product:K`` streams;
* ``_part``: the part that wrote it, ``int32``;
* ``_seq``: the sequence id of the Messages event that holds it in that part, ``int64``.

By default the rows are the committed records (FORMAT.md §1.1), the view a ``Replayer`` and ``replay cat``
give: messages a crashed writer left at times its part had not completed are void, and messages wait until
their part's progress passes their time. Every event read is checked against timely's progress rules, so a
broken part raises ``ProgressError`` naming the stream, part and sequence id.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from eventlog.antichain import Antichain
from eventlog.errors import SchemaMismatchError
from eventlog.events import Messages
from eventlog.header import StreamHeader
from eventlog.log import Log, open_log
from eventlog.parts import CheckedPart, check_isolation, part_frontier
from eventlog.time import Time, less_equal

LOG_COLUMNS = ("_time", "_part", "_seq")
"""The columns ``dataset`` appends to the stream's own."""

_BATCH_ROWS = 64 * 1024
"""Consecutive small events of a part are joined into batches of about this many rows (fewer, larger
batches scan faster)."""
_OWN_BATCH_ROWS = 4096
"""An event of at least this many rows stays a batch of its own (joining would copy it for little gain)."""


@dataclass(frozen=True)
class StreamRead:
    """What ``read_dataset`` read: the dataset, the stream's frontier then, and what it left out."""

    dataset: ds.Dataset
    frontier: Antichain
    """The stream's merged frontier (every part's) when its parts were read: a time is complete when it is not
    in advance of any element."""
    left_out_rows: int = 0
    """Records at times not complete yet, left out (without ``incomplete``)."""
    left_out_times: tuple[Time, ...] = ()
    """Those times, sorted."""


def dataset(
    uri: "str | os.PathLike[str] | Log",
    stream: str,
    *,
    since: Time | None = None,
    until: Time | None = None,
    isolation: str = "committed",
    parts: Iterable[int] | None = None,
    incomplete: bool = True,
) -> ds.Dataset:
    """The records of ``stream`` in the log at ``uri`` (a URI, a path or an open ``Log``) as a
    ``pyarrow.dataset.Dataset`` with ``_time``, ``_part`` and ``_seq`` appended (module doc).

    ``since``/``until`` keep the times ``t`` with ``since <= t`` and not ``until <= t`` (component-wise for
    product times); ``isolation="uncommitted"`` gives every record as read; ``parts`` reads only those parts;
    ``incomplete=False`` keeps only the times complete in every part of the stream (what ``replay export``, the
    replayers' ``completed()`` and the Spark sources give; ``read_dataset`` says what was left out).
    The log is read when this is called (it ends where each part ends then), and the dataset can be scanned
    any number of times. Raises ``StreamNotFoundError``, ``SchemaMismatchError`` when a record field is
    named like an appended column, ``ValueError`` for a part the stream does not have."""
    return read_dataset(uri, stream, since=since, until=until, isolation=isolation, parts=parts,
                        incomplete=incomplete).dataset


def read_dataset(
    uri: "str | os.PathLike[str] | Log",
    stream: str,
    *,
    since: Time | None = None,
    until: Time | None = None,
    isolation: str = "committed",
    parts: Iterable[int] | None = None,
    incomplete: bool = False,
) -> StreamRead:
    """``dataset``'s records with the stream's frontier and what was left out as not complete yet (by default
    only complete times are kept here)."""
    check_isolation(isolation)
    log = uri if isinstance(uri, Log) else open_log(uri)
    try:
        header = log.header(stream)
        tt = header.time_type
        since_t = tt.check(since) if since is not None else None
        until_t = tt.check(until) if until is not None else None
        wanted = _check_parts(header, parts)

        def keep(t: Time) -> bool:
            return (since_t is None or less_equal(since_t, t)) and (until_t is None or not less_equal(until_t, t))

        return _read_dataset(log, header, wanted, keep, isolation, incomplete)
    finally:
        if log is not uri:
            log.close()


def dataset_schema(header: StreamHeader) -> pa.Schema:
    """The schema of ``dataset``'s rows for a stream: its record fields, then ``_time``, ``_part``, ``_seq``
    (the record schema's metadata kept). ``SchemaMismatchError`` when a record field has one of those names."""
    clash = [n for n in header.schema.names if n in LOG_COLUMNS]
    if clash:
        raise SchemaMismatchError(f"record field(s) {clash} are named like the columns a dataset appends "
                                  f"{list(LOG_COLUMNS)}", stream=header.stream)
    time_type = pa.int64() if header.time_type.arity == 0 else pa.list_(pa.int64())
    return pa.schema(list(header.schema) + [pa.field("_time", time_type, False), pa.field("_part", pa.int32(), False),
                                            pa.field("_seq", pa.int64(), False)], metadata=header.schema.metadata)


def _check_parts(header: StreamHeader, parts: Iterable[int] | None) -> list[int]:
    if parts is None:
        return list(range(header.peers))
    wanted = sorted(set(parts))
    bad = [p for p in wanted if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < header.peers]
    if bad:
        raise ValueError(f"stream {header.stream!r} has parts 0..{header.peers - 1}, not {bad[0]!r}")
    return wanted


def _read_dataset(log: Log, header: StreamHeader, parts: list[int], keep: Callable[[Time], bool],
                  isolation: str, incomplete: bool) -> StreamRead:
    """The generic path, for every kind of log: each part read through ``CheckedPart`` into memory; without
    ``incomplete`` the records at times the stream's frontier has not passed are left out."""
    schema = dataset_schema(header)
    events: dict[int, list[tuple[pa.RecordBatch, Time, int]]] = {}
    frontiers: list[Antichain] = []
    for part in range(header.peers):
        if part not in parts:
            frontiers.append(part_frontier(log, header, part))
            continue
        with CheckedPart(log, header, part, isolation=isolation) as reader:
            events[part] = [(e.event.records, e.event.time, e.seq) for e in reader.read()
                            if isinstance(e.event, Messages) and e.event.records.num_rows and keep(e.event.time)]
            frontiers.append(reader.frontier)
    frontier = Antichain(t for f in frontiers for t in f)
    batches: list[pa.RecordBatch] = []
    left_rows, left_times = 0, set()
    for part in parts:
        builder = _PartBatches(header, part, schema)
        for records, time, seq in events[part]:
            if incomplete or not frontier.less_equal(time):
                batches.extend(builder.add(records, time, seq))
            else:
                left_rows += records.num_rows
                left_times.add(time)
        batches.extend(builder.flush())
    return StreamRead(ds.InMemoryDataset(batches, schema=schema), frontier, left_rows, tuple(sorted(left_times)))


class _PartBatches:
    """Joins one part's Messages events into record batches of about ``_BATCH_ROWS`` rows with the log
    columns appended (built with numpy, not per event)."""

    def __init__(self, header: StreamHeader, part: int, schema: pa.Schema) -> None:
        self._arity = header.time_type.arity
        self._part = part
        self._schema = schema
        self._records: list[pa.RecordBatch] = []
        self._times: list[Time] = []
        self._seqs: list[int] = []
        self._rows = 0

    def add(self, records: pa.RecordBatch, time: Time, seq: int) -> list[pa.RecordBatch]:
        """Take one event's records; return the batches completed by it."""
        alone = records.num_rows >= _OWN_BATCH_ROWS
        done = self.flush() if alone else []
        self._records.append(records)
        self._times.append(time)
        self._seqs.append(seq)
        self._rows += records.num_rows
        if alone or self._rows >= _BATCH_ROWS:
            done += self.flush()
        return done

    def flush(self) -> list[pa.RecordBatch]:
        """The batch of the events taken since the last one (none when there are none)."""
        if not self._records:
            return []
        lengths = np.fromiter((r.num_rows for r in self._records), np.int64, len(self._records))
        records = self._records[0] if len(self._records) == 1 else pa.concat_batches(self._records)
        n = records.num_rows
        if self._arity == 0:
            time = pa.array(np.repeat(np.asarray(self._times, np.int64), lengths))
        else:
            values = np.repeat(np.asarray(self._times, np.int64).reshape(-1, self._arity), lengths, axis=0)
            offsets = np.arange(0, (n + 1) * self._arity, self._arity, dtype=np.int32)
            time = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values.ravel()))
        part = pa.array(np.full(n, self._part, np.int32))
        seq = pa.array(np.repeat(np.asarray(self._seqs, np.int64), lengths))
        self._records, self._times, self._seqs, self._rows = [], [], [], 0
        return [pa.RecordBatch.from_arrays(list(records.columns) + [time, part, seq], schema=self._schema)]


__all__ = ["LOG_COLUMNS", "StreamRead", "dataset", "dataset_schema", "read_dataset"]
