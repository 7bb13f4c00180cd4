"""Writing DataFrames into streams: ``df.write.format("eventlog")`` and ``df.writeStream.format("eventlog")``.

**Batch write** (``save(stream_uri)``): creates the stream with one part per Spark partition (peers = the
partition count, known to the driver only when every task has reported), each part holding Messages per
time and a final Progress that finishes it. Task attempts stage their parts and the driver's ``commit()``
publishes exactly the attempts Spark committed (``connectors.spark.staging``): a retried or speculative
task never leaves duplicates. The stream must not exist; ``mode("overwrite")`` replaces it.

**A frame read through this data source** (``spark.read.format("eventlog").load(…)``, batch or streaming)
carries ``_time``, ``_part`` and ``_seq``. Written back without a ``time`` option, its records go at their
``_time`` and none of the three columns is stored (a read adds them again), so a replayed stream — filtered,
repartitioned, joined — is written with the same times. ``_part``/``_seq`` without ``_time``, or ``_time``
together with another ``time`` option, is a ``SchemaMismatchError`` that says which columns to drop.

**Micro-batch append** (the streaming sink, and batch writes with ``.option("batchId", n)``, which
``capture.tap_batches`` uses inside ``foreachBatch``): the stream stays open (its parts are never finished)
and has ``peers`` parts (option ``peers``; default: the first micro-batch's partition count); Spark
partition ``q`` goes to part ``q % peers``. Each micro-batch is a time, its batch id, unless ``time`` names
an integer column. Tasks stage their records; the driver's ``commit`` appends, per part, **one Messages
event per time** (all the batch's records of that part and time) and then one Progress event that moves
every part's frontier past the batch (to ``batchId + 1``, or past the largest time in the batch). A
re-executed micro-batch is recognised per part and time, so nothing is written twice:

* a time behind the part's frontier was written by an earlier commit of this batch (Spark re-runs a
  batch after a failure between the sink's commit and its own commit log) — or it is late data — and is
  dropped (logged);
* a time whose Messages event already follows the part's last Progress event was written by a commit that
  stopped half-way, and is not written again.

Everything lives on the log's storage — staging and commit alike — so the sink works on ``s3://`` logs with
executors that share no disk. There each part's share of a commit (its Messages and the Progress after them)
is one segment object, put at once: a commit that stops half-way leaves some parts with the batch, whole, and
the others without it, which the re-executed batch completes as above.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator, Optional

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from eventlog.errors import EventLogError, InvalidTimeError
from eventlog.events import Messages
from eventlog.header import StreamHeader
from eventlog.log import Log, open_log
from eventlog.parts import Capture, CheckedPart
from eventlog.time import Time

from .staging import (
    PartStager,
    StagedPart,
    StreamExistsError,
    publish_job,
    remove_stream,
    remove_tree,
    stage_all,
    stream_exists,
)
from .times import TimeSpec
from .uri import StreamURI, staging_uri

_log = logging.getLogger("eventlog")


def _task() -> tuple[int, int]:
    ctx = TaskContext.get()
    if ctx is None:
        raise EventLogError("eventlog's Spark writer runs inside Spark tasks only")
    return ctx.partitionId(), ctx.attemptNumber()


def committed_parts(messages: "list[Optional[WriterCommitMessage]] | list[StagedPart]",
                    target: StreamURI) -> list[StagedPart]:
    """The staged parts of the task attempts Spark committed, by partition: EventLogError unless each partition
    0..n-1 is there exactly once."""
    staged = sorted((m for m in messages if m is not None), key=lambda m: m.partition)  # type: ignore[attr-defined]
    got = [s.partition for s in staged]
    if got != list(range(len(staged))):
        raise EventLogError(f"Spark committed partitions {got}; expected 0..{len(staged) - 1} once each",
                            stream=target.stream)
    return staged  # type: ignore[return-value]


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("eventlog")``: one part per Spark partition, published at job commit."""

    def __init__(self, target: StreamURI, schema: pa.Schema, time: TimeSpec, encoding: str, overwrite: bool, *,
                 compression: str | None = None) -> None:
        self.target, self.schema, self.time, self.encoding, self.overwrite = target, schema, time, encoding, overwrite
        self.compression = compression
        self.job = uuid.uuid4().hex
        if not overwrite and stream_exists(open_log(target.log_uri), target.stream):
            raise StreamExistsError(
                f"stream exists in {target.log_uri}; write to a new stream, use mode('overwrite') to replace it, "
                "or .option('batchId', n) to append a micro-batch", stream=target.stream)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedPart:
        partition, attempt = _task()
        stager = PartStager(self.target, self.job, partition, attempt, self.schema, self.time, self.encoding,
                            self.compression)
        return stage_all(stager, iterator)

    def commit(self, messages: list[Optional[WriterCommitMessage]]) -> None:
        staged = committed_parts(messages, self.target)
        if self.overwrite:
            remove_stream(self.target)
        elif stream_exists(open_log(self.target.log_uri), self.target.stream):
            remove_tree(staging_uri(self.target, self.job))
            raise StreamExistsError("stream was created by someone else during the write", stream=self.target.stream)
        header = StreamHeader(self.target.stream, max(1, len(staged)), self.schema, self.time.time_type, self.encoding,
                              compression=self.compression)
        if not staged:  # no partition at all: an empty, finished stream
            open_log(self.target.log_uri).create_stream(header)
            Capture(open_log(self.target.log_uri), self.target.stream, 0, 1).close()
            return
        publish_job(self.target, header, staged, self.job)

    def abort(self, messages: list[Optional[WriterCommitMessage]]) -> None:
        remove_tree(staging_uri(self.target, self.job))


def check_micro_batch_time(time: TimeSpec) -> None:
    """InvalidTimeError unless ``time`` is one a micro-batch append takes: the batch id or an int64 column."""
    if time.column is not None and time.time_type.arity:
        raise InvalidTimeError("streaming writes take int64 time columns only (product times: capture per batch)")


class MicroBatchWriter(DataSourceArrowWriter, DataSourceStreamArrowWriter):
    """Appends micro-batches to an open stream (the streaming sink; batch writes with ``batchId``)."""

    def __init__(self, target: StreamURI, schema: pa.Schema, time: TimeSpec, encoding: str,
                 peers: int | None, batch_id: int | None = None, *, compression: str | None = None) -> None:
        check_micro_batch_time(time)
        self.target, self.schema, self.time, self.encoding, self.peers = target, schema, time, encoding, peers
        self.compression = compression
        self.batch_id = batch_id
        self.job = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedPart:
        partition, attempt = _task()
        stager = PartStager(self.target, self.job, partition, attempt, self.schema, self.time, self.encoding,
                            self.compression)
        return stage_all(stager, iterator)

    def commit(self, messages: list[Optional[WriterCommitMessage]], batchId: int | None = None) -> None:  # noqa: N803
        batch = batchId if batchId is not None else self.batch_id
        if batch is None:
            raise EventLogError("a micro-batch append needs a batch id", stream=self.target.stream)
        try:
            append_micro_batch(self.target, committed_parts(messages, self.target), int(batch), self.schema, self.time,
                               self.encoding, self.peers, compression=self.compression)
        finally:
            self._clean(messages)

    def abort(self, messages: list[Optional[WriterCommitMessage]], batchId: int | None = None) -> None:  # noqa: N803
        self._clean(messages)

    def _clean(self, messages: list[Optional[WriterCommitMessage]]) -> None:
        # Spark makes a new stream writer for the commit, so the tasks' job folder is the messages' one
        jobs = {m.job_uri for m in messages if isinstance(m, StagedPart)} | {staging_uri(self.target, self.job)}
        for job_uri in jobs:
            remove_tree(job_uri)


def _read_staged(staged: list[StagedPart], stream: str) -> dict[Time, list[pa.RecordBatch]]:
    out: dict[Time, list[pa.RecordBatch]] = defaultdict(list)
    for s in staged:
        log = open_log(s.uri)
        with CheckedPart(log, log.header(stream), 0, isolation="uncommitted") as reader:
            for entry in reader.read():
                if isinstance(entry.event, Messages):
                    out[entry.event.time].append(entry.event.records)
    return out


def _tail_times(log: Log, stream: str, part: int) -> set[Time]:
    """Times of the Messages events after the part's last Progress event (a commit that stopped half-way)."""
    header = log.header(stream)
    last_progress = 0
    with CheckedPart(log, header, part, progress_only=True) as r:
        for entry in r.read():
            last_progress = entry.seq
    times: set[Time] = set()
    with CheckedPart(log, header, part, start=last_progress + 1, isolation="uncommitted") as r:
        for entry in r.read():
            if isinstance(entry.event, Messages):
                times.add(entry.event.time)
    return times


def append_micro_batch(target: StreamURI, staged: list[StagedPart], batch_id: int, schema: pa.Schema,
                       time: TimeSpec, encoding: str, peers: int | None, *, compression: str | None = None) -> int:
    """Append one micro-batch (the staged parts of its tasks) to ``target`` as described in the module doc;
    returns the number of records written (0 for a batch that was already written). The parts are read and
    appended side by side (each part has a writer of its own; pyarrow decodes and compresses without the GIL)."""
    log = open_log(target.log_uri)
    if stream_exists(log, target.stream):
        stored = log.header(target.stream)
        peers = stored.peers
    else:
        peers = peers or max(1, len(staged))
    header = log.create_stream(StreamHeader(target.stream, peers, schema, time.time_type, encoding,
                                            compression=compression))
    by_part: list[list[StagedPart]] = [[] for _ in range(header.peers)]
    for s in staged:
        by_part[s.partition % header.peers].append(s)
    with _part_pool(header.peers) as pool:
        per_part = list(pool.map(lambda group: _read_staged(group, target.stream), by_part))
        if time.column is None:  # the batch id is the time; tasks staged at the literal placeholder
            per_part = [{batch_id: [b for bs in d.values() for b in bs]} if d else {} for d in per_part]
            new_frontier: Time | None = batch_id + 1
        else:
            times = [t for d in per_part for t in d]
            new_frontier = max(times) + 1 if times else None  # type: ignore[operator]
        counts = list(pool.map(lambda part: _append_part(log, target.stream, header, part, per_part[part],
                                                         new_frontier), range(header.peers)))
    written = sum(w for w, _ in counts)
    dropped = sum(d for _, d in counts)
    if dropped:
        _log.warning("stream %r batch %d: %d record(s) at times behind the frontier were not written "
                     "(a re-executed micro-batch, or late data)", target.stream, batch_id, dropped)
    return written


def _part_pool(parts: int) -> ThreadPoolExecutor:
    """Threads to read and append ``parts`` parts with: one per part, at most one per core (at least 1)."""
    return ThreadPoolExecutor(max_workers=max(1, min(parts, os.cpu_count() or 1)),
                              thread_name_prefix="eventlog-append")


def _append_part(log: Log, stream: str, header: StreamHeader, part: int, records: dict[Time, list[pa.RecordBatch]],
                 new_frontier: Time | None) -> tuple[int, int]:
    """Append one part's share of a micro-batch (module doc); returns ``(records written, records dropped)``."""
    written = dropped = 0
    pending = _tail_times(log, stream, part)
    cap = Capture(log, stream, part, header.peers)
    try:
        for t in sorted(records):
            rows = sum(b.num_rows for b in records[t])
            if not cap.frontier.less_equal(t):
                dropped += rows
                continue
            if t in pending:
                continue
            table = pa.Table.from_batches(records[t], schema=header.schema).combine_chunks()
            cap.send(t, table)
            written += rows
        if new_frontier is not None:
            f = list(cap.frontier)
            if f and f[0] < new_frontier:  # type: ignore[operator]
                cap.advance_to(new_frontier)
    finally:
        cap.abort()  # release the part without finishing it: the stream stays open
    return written, dropped
