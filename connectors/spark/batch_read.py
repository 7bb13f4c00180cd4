"""``spark.read.format("eventlog")``: a stream as a DataFrame, one Spark partition per replay worker.

The planner (``partitions``) reads every part's Progress events once and fixes the merged frontier; each
Spark task ``j`` of ``workers`` replays its share — in ``assign`` mode the parts ``i`` with
``i % workers == j``, in ``repartition`` mode every part, keeping the records whose ``key`` hashes to ``j``
(``replay.keyhash``, the same hash as ``replay.Replayer``) — and keeps the records at times complete at
the planned frontier (all records with ``incomplete``). Records leave the task as Arrow record batches, one
per Messages event, with ``_time``, ``_part`` and ``_seq`` added; no Python code runs per row.

Each source part is replayed by its own ``Replayer`` (worker ``i`` of ``peers`` parts), which checks
sequence ids, drops duplicates and applies ``since``/``until``; its ``last_seq`` gives each event's ``_seq``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from eventlog.events import Messages
from eventlog.log import open_log
from eventlog.time import Time
from replay import Replayer, worker_of

from . import frontier as fr
from .options import ReadOptions
from .schema import with_log_columns


class WorkerSlice(InputPartition):
    """One replay worker's task: worker ``worker`` of ``workers``, the parts it reads and the frontier
    (JSON form; None when incomplete times are wanted too)."""

    def __init__(self, worker: int, workers: int, parts: list[int], frontier: list[Any] | None) -> None:
        super().__init__(worker)
        self.worker, self.workers, self.parts, self.frontier = worker, workers, parts, frontier


def slice_parts(mode: str, peers: int, worker: int, workers: int) -> list[int]:
    """The source parts replay worker ``worker`` reads (assign: ``i % workers == worker``; repartition: all)."""
    return [i for i in range(peers) if mode == "repartition" or i % workers == worker]


def replay_part(opts: ReadOptions, part: int, worker: int, workers: int, keep: Callable[[Time], bool],
                arrow_schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Batches of one source part for replay worker ``worker``: records at the times ``keep(t)`` accepts,
    of this worker's keys in repartition mode, with ``_time``, ``_part`` and ``_seq``."""
    log = open_log(opts.target.log_uri)
    peers = log.header(opts.target.stream).peers
    with Replayer(log, opts.target.stream, worker=part, peers=peers, since=opts.since, until=opts.until) as r:
        for ev in r:
            if not isinstance(ev, Messages):
                continue
            seq = r.last_seq  # the event just yielded (not position - 1: an earlier event may be held)
            if not keep(ev.time):
                continue
            records = keys_of_worker(ev.records, opts, worker, workers)
            if records.num_rows:
                yield with_log_columns(records, ev.time, part, seq, arrow_schema)


def keys_of_worker(records: pa.RecordBatch, opts: ReadOptions, worker: int, workers: int) -> pa.RecordBatch:
    """In repartition mode, the records whose key hashes to ``worker``; else all of them."""
    if opts.mode != "repartition":
        return records
    mask = worker_of(records, opts.key, workers) == worker  # type: ignore[arg-type]
    return records if mask.all() else records.filter(pa.array(mask))


class BatchReader(DataSourceReader):
    """Plans one partition per replay worker and replays them (see the module doc)."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> list[WorkerSlice]:
        log = open_log(self.opts.target.log_uri)
        header = log.header(self.opts.target.stream)
        workers = self.opts.workers or header.peers
        frontier = None if self.opts.incomplete else fr.to_json(fr.merged_frontier(log, header.stream))
        return [WorkerSlice(j, workers, slice_parts(self.opts.mode, header.peers, j, workers), frontier)
                for j in range(workers)]

    def read(self, partition: WorkerSlice) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        log = open_log(self.opts.target.log_uri)
        header = log.header(self.opts.target.stream)
        opts = self.opts.checked_times(header.time_type)
        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        if partition.frontier is None:
            keep = _all
        else:
            f = fr.from_json(partition.frontier, header.time_type)
            keep = lambda t: fr.is_complete(t, f)  # noqa: E731
        for part in partition.parts:
            yield from replay_part(opts, part, partition.worker, partition.workers, keep, arrow_schema)


def _all(t: Any) -> bool:
    return True


__all__ = ["BatchReader", "WorkerSlice"]
