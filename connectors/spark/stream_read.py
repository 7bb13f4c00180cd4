"""``spark.readStream.format("eventlog")``: completed times of a live stream, each exactly once.

**Offsets.** An offset is JSON ``{"next": [n_0, …], "low": [l_0, …], "frontier": [t, …]}`` with one entry per
part: ``next[p]`` is the sequence id after the last event of part ``p`` the planner has read, ``frontier`` is
the merged frontier ``F(O)`` of all parts' Progress events before ``next`` (a pure function of ``next``,
stored so tasks and restarts need not recompute it), and ``low[p] <= next[p]`` is the first sequence id of
part ``p`` that may still hold a record at a time not complete at ``F(O)`` (also a function of ``next``:
every Messages event before ``low[p]`` is at a complete time).

**The rule.** The records delivered up to offset ``O`` are exactly the records at times complete at
``F(O)``. So micro-batch ``(S, E)`` delivers the records at times complete at ``F(E)`` but not at ``F(S)``,
which all lie in ``[S.low[p], E.next[p])`` of each part: before ``S.low`` every record is at a time complete
at ``F(S)`` (delivered earlier), and a part cannot send at a time complete at ``F(E)`` after ``E.next``
(its own frontier there has no element below it). Hence:

* a time is never split across micro-batches, and each completed time arrives exactly once;
* a micro-batch ends on a frontier whatever ``E.next`` is, so admission control may stop anywhere
  (``maxRecordsPerTrigger``: stop reading new events once that many records were read, at least one event);
* Spark checkpoints ``E`` before running a batch; after a restart it re-runs ``(S, E)`` from its offset
  log (the same records: the log below ``E.next`` never changes) and continues from ``E``.

The planner decodes each Messages event once to learn its time (the index carries only its kind), and
keeps what it learnt between micro-batches; a restarted planner re-reads Progress from the start and
Messages from ``low``. The initial offset is the start of every part (nothing complete); the stream must
exist when the query starts. ``Trigger.AvailableNow`` reads up to the parts' ends at the query's start.

**Writer restarts** (FORMAT.md §1.1). When a part's writer epoch rises, the planner marks the part's pending
messages at times the part had not completed as void; each micro-batch's slices carry the void sequence ids of
their ranges, which ``read`` skips. So a time re-sent by a restarted writer is delivered once, in the version
that completed it.
"""

from __future__ import annotations

from typing import Any, Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from eventlog.antichain import Antichain, MutableAntichain
from eventlog.errors import EventLogError, ProgressError
from eventlog.events import Messages
from eventlog.log import Log, open_log
from eventlog.parts import CheckedPart, frontier_text, time_text
from eventlog.retention import since_of
from eventlog.time import Time, less_equal

from . import frontier as fr
from .batch_read import keys_of_worker, slice_parts
from .options import ReadOptions
from .schema import with_log_columns


class RangeSlice(InputPartition):
    """One replay worker's share of a micro-batch: per read part, the sequence range ``[low, next)``, and
    the frontiers at the batch's start and end (JSON form); ``starts[p]`` is the batch's start offset
    ``S.next[p]``: an event from there on is new to this batch."""

    def __init__(self, worker: int, workers: int, ranges: dict[int, tuple[int, int]],
                 start_frontier: list[Any], end_frontier: list[Any], starts: dict[int, int] | None = None,
                 void: dict[int, list[int]] | None = None) -> None:
        super().__init__(worker)
        self.worker, self.workers, self.ranges = worker, workers, ranges
        self.start_frontier, self.end_frontier = start_frontier, end_frontier
        self.starts = starts or {}
        self.void = void or {}
        """Per part, the sequence ids in its range of void Messages events (FORMAT.md §1.1): skipped."""


class _Planner:
    """What the planner knows at one offset: merged progress counts, each part read by every rule through
    ``eventlog.parts.CheckedPart`` (sequence ids, timely's rules, committed reads: a Messages event a crashed
    writer left at a time its part had not completed is void once a newer incarnation writes), and the
    Messages events not yet complete (``pending[p]``: ``(seq, time)``).

    A broken rule raises ``ProgressError`` (stream, part, seq), so a Messages event always lies at a time not
    complete at the merged frontier before it, and no record can fall between two micro-batches unseen. The
    merged frontier follows the Progress events each part's committed view releases: a function of ``next``."""

    def __init__(self, log: Log, stream: str, offset: dict[str, Any]) -> None:
        header = log.header(stream)
        self.log, self.stream, self.time_type, self.peers = log, stream, header.time_type, header.peers
        minimum = header.time_type.minimum
        self.next: list[int] = list(offset["next"])
        self.counts = MutableAntichain([(minimum, header.peers)])
        self.pending: list[list[tuple[int, Time]]] = [[] for _ in range(header.peers)]
        self.known_from: list[int] = []
        self.parts: list[CheckedPart] = []
        for p in range(header.peers):
            low = min(offset["low"][p], self.next[p])  # before low: every Messages event is complete
            self.known_from.append(low)
            part = CheckedPart(log, header, p, start=low, end=self.next[p])
            self.counts.update_iter([(minimum, -1), *part.counts()])
            self.parts.append(part)
            self._read(p)
            part.end = None
        frontier = self.counts.frontier
        for p in range(header.peers):
            self.pending[p] = [(s, t) for s, t in self.pending[p] if not fr.is_complete(t, frontier)]
        self.offset = self._offset()
        if self.offset["frontier"] != offset["frontier"]:
            raise EventLogError(f"offset {offset} does not match the log (frontier {self.offset['frontier']}): "
                                "was the stream rewritten under the query?", stream=stream)

    @property
    def void(self) -> list[list[int]]:
        """Per part, the sequence ids of void Messages events found from ``known_from`` on."""
        return [p.committed.voided_seqs if p.committed is not None else [] for p in self.parts]

    def _read(self, part: int, limit: int | None = None) -> int:
        """Read the part's raw events there now (up to its ``end``; with ``limit``, until one is released);
        note the released Messages events as pending, apply the released Progress; returns the records released."""
        p = self.parts[part]
        p.fill(limit)
        rows = 0
        while p.queued:
            entry = p.take()
            ev = entry.event
            if isinstance(ev, Messages):
                self.pending[part].append((entry.seq, ev.time))
                rows += ev.records.num_rows
            else:
                self.counts.update_iter(ev.updates)
        self.next[part] = p.raw_last + 1
        return rows

    def _offset(self) -> dict[str, Any]:
        low = [min([s for s, _ in self.pending[p]] + [self.parts[p].position], default=self.next[p])
               for p in range(self.peers)]
        return {"next": list(self.next), "low": low, "frontier": fr.to_json(self.counts.frontier)}

    def advance(self, max_records: int | None, until: list[int] | None) -> dict[str, Any]:
        """Read new events round-robin over the parts (up to ``until[p]``), stopping once ``max_records``
        records were read (after at least one event); returns the new offset."""
        read_rows = 0
        live = [p for p in range(self.peers) if until is None or self.next[p] < until[p]]
        while live:
            for p in list(live):
                part = self.parts[p]
                part.end = None if until is None else until[p]
                before = part.raw_read
                read_rows += self._read(p, 1)
                if part.raw_read == before or part.at_end:
                    live.remove(p)  # at the end for now: poll again next time
            if max_records is not None and read_rows >= max_records:
                break
        for part in self.parts:
            part.end = None
        frontier = self.counts.frontier
        for p in range(self.peers):
            self.pending[p] = [(s, t) for s, t in self.pending[p] if not fr.is_complete(t, frontier)]
        self.offset = self._offset()
        return self.offset

    def close(self) -> None:
        for part in self.parts:
            part.close()


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of completed times (see the module doc for offsets and the delivery rule)."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        if opts.incomplete:
            raise ValueError("option 'incomplete' is for batch reads; a stream delivers completed times")
        self.opts, self.schema = opts, schema
        self._log = open_log(opts.target.log_uri)
        self._header = self._log.header(opts.target.stream)
        self._planner: _Planner | None = None
        self._until: list[int] | None = None

    def initialOffset(self) -> dict:  # noqa: N802
        n = self._header.peers
        mark = self._log.retention(self._header.stream)
        if mark is not None:  # a trimmed stream starts at its cuts, from the frontier there (FORMAT.md §10)
            starts = [c.start for c in mark.parts]
            return {"next": starts, "low": list(starts), "frontier": fr.to_json(since_of(c.frontier for c in mark.parts))}
        return {"next": [1] * n, "low": [1] * n, "frontier": fr.to_json(Antichain([self._header.time_type.minimum]))}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        return ReadMaxRows(self.opts.max_records) if self.opts.max_records else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._until = [self._log.part_stats(self._header.stream, p).next_seq for p in range(self._header.peers)]

    def _planner_at(self, offset: dict[str, Any]) -> _Planner:
        if self._planner is None or self._planner.offset != offset:
            if self._planner is not None:
                self._planner.close()
            self._planner = _Planner(self._log, self._header.stream, offset)
        return self._planner

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:  # noqa: N802
        start = start or self.initialOffset()
        max_records = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return self._planner_at(start).advance(max_records, self._until)

    def _void_seqs(self, start: dict, end: dict) -> dict[int, list[int]]:
        """Per part, the void Messages events in ``[start.low, end.next)``: from the planner when it read that
        whole range, else from a planner replayed from ``start`` to ``end`` (a restarted query)."""
        planner = self._planner
        n = self._header.peers
        if (planner is None or planner.offset != end
                or any(planner.known_from[p] > min(start["low"][p], start["next"][p]) for p in range(n))):
            planner = self._planner_at(start)
            if planner.advance(None, list(end["next"])) != end:
                raise EventLogError(f"offset {end} does not follow from {start} in the log: was the stream "
                                    "rewritten under the query?", stream=self._header.stream)
        return {p: sorted(s for s in planner.void[p] if start["low"][p] <= s < end["next"][p]) for p in range(n)}

    def partitions(self, start: dict, end: dict) -> list[RangeSlice]:
        if start["frontier"] == end["frontier"]:
            return []  # no time completed: nothing to deliver
        workers = self.opts.workers or self._header.peers
        void = self._void_seqs(start, end)
        out = []
        for j in range(workers):
            parts = slice_parts(self.opts.mode, self._header.peers, j, workers)
            ranges = {p: (start["low"][p], end["next"][p]) for p in parts if start["low"][p] < end["next"][p]}
            if ranges:
                starts = {p: start["next"][p] for p in ranges}
                out.append(RangeSlice(j, workers, ranges, start["frontier"], end["frontier"], starts,
                                      {p: void[p] for p in ranges if void[p]}))
        return out

    def read(self, partition: RangeSlice) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        log = open_log(self.opts.target.log_uri)
        header = log.header(self.opts.target.stream)
        opts = self.opts.checked_times(header.time_type)
        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        before = fr.from_json(partition.start_frontier, header.time_type)
        after = fr.from_json(partition.end_frontier, header.time_type)
        for part, (low, end) in sorted(partition.ranges.items()):
            void = set(partition.void.get(part, ()))
            # the planner checked the part's progress: a range read checks sequence ids
            with CheckedPart(log, header, part, start=low, end=end, isolation="uncommitted",
                             track_progress=False) as reader:
                for entry in reader.read():
                    ev = entry.event
                    if not isinstance(ev, Messages) or entry.seq in void:
                        continue
                    t = ev.time
                    if fr.is_complete(t, before):
                        new_from = partition.starts.get(part)
                        if new_from is not None and entry.seq >= new_from:  # new, yet complete before: it
                            raise ProgressError(  # would never be delivered (the planner checks this first)
                                f"messages at time {time_text(t)} arrived after the time was complete (stream "
                                f"frontier {frontier_text(before)} at the micro-batch's start)",
                                stream=header.stream, part=part, seq=entry.seq)
                        continue  # delivered by an earlier micro-batch
                    if not fr.is_complete(t, after) or not _in_bounds(t, opts):
                        continue  # a later micro-batch delivers it / outside since..until
                    records = keys_of_worker(ev.records, opts, partition.worker, partition.workers)
                    if records.num_rows:
                        yield with_log_columns(records, t, part, entry.seq, arrow_schema)

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None


def _in_bounds(t: Time, opts: ReadOptions) -> bool:
    if opts.since is not None and not less_equal(opts.since, t):
        return False
    return opts.until is None or not less_equal(opts.until, t)


__all__ = ["RangeSlice", "StreamReader"]
