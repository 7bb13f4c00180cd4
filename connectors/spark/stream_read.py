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
from eventlog.events import Entry, Messages
from eventlog.log import Log, PartReader, open_log
from eventlog.time import Time, less_equal
from eventlog.parts.rules import PartProgress, frontier_text, time_text

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
    """What the planner knows at one offset: merged progress counts, each part's own frontier (checked
    against timely's rules, ``eventlog.parts.rules``), open readers at ``next`` and the Messages events not yet
    complete (``pending[p]``: ``(seq, time)``).

    Every event the planner reads is checked: a capability added behind its part's frontier, a negative
    count, a Messages event behind its part's frontier or anything after the part finished raises
    ``ProgressError`` (stream, part, seq). So a Messages event always lies at a time not complete at the
    merged frontier before it, and no record can fall between two micro-batches unseen."""

    def __init__(self, log: Log, stream: str, offset: dict[str, Any]) -> None:
        header = log.header(stream)
        self.log, self.stream, self.time_type, self.peers = log, stream, header.time_type, header.peers
        self.next: list[int] = list(offset["next"])
        self.counts = MutableAntichain([(header.time_type.minimum, header.peers)])
        self.rules = [PartProgress(header.time_type.minimum, stream=stream, part=p) for p in range(header.peers)]
        self.pending: list[list[tuple[int, Time]]] = [[] for _ in range(header.peers)]
        self.epochs: list[int | None] = [None] * header.peers  # the writer epoch of each part's last event
        self.void: list[set[int]] = [set() for _ in range(header.peers)]
        """Per part, the sequence ids of void Messages events found (FORMAT.md §1.1) from ``known_from``."""
        self.known_from: list[int] = []
        for p in range(header.peers):
            low = min(offset["low"][p], self.next[p])
            self.known_from.append(low)
            with log.reader(stream, p, progress_only=True) as r:  # before low: every Messages event is complete
                for entry in fr.entries(r, low, progress_only=True):
                    self._apply(p, entry, r.epoch)
            if low < self.next[p]:
                with log.reader(stream, p, start=low) as r:
                    for entry in fr.entries(r, self.next[p]):
                        self._apply(p, entry, r.epoch)
        frontier = self.counts.frontier
        for p in range(header.peers):
            self.pending[p] = [(s, t) for s, t in self.pending[p] if not fr.is_complete(t, frontier)]
        self.readers: list[PartReader] = [log.reader(stream, p, start=self.next[p]) for p in range(header.peers)]
        self._iters: list[Iterator | None] = [None] * header.peers  # kept between calls: resume, never re-read
        self.offset = self._offset()
        if self.offset["frontier"] != offset["frontier"]:
            raise EventLogError(f"offset {offset} does not match the log (frontier {self.offset['frontier']}): "
                                "was the stream rewritten under the query?", stream=stream)

    def _apply(self, part: int, entry: Entry, epoch: int) -> int:
        """Account for an event of ``part`` (in sequence order) written by writer ``epoch``: a higher epoch
        than the part's last makes its pending messages at times the part had not completed void; check it
        against the part's rules, note a Messages event as pending, apply Progress; returns the records it
        holds."""
        last = self.epochs[part]
        if last is not None and epoch > last:
            rules = self.rules[part]
            void = [s for s, t in self.pending[part] if rules.less_equal(t)]
            if void:
                self.void[part].update(void)
                self.pending[part] = [(s, t) for s, t in self.pending[part] if not rules.less_equal(t)]
        if last is None or epoch > last:
            self.epochs[part] = epoch
        ev = entry.event
        if isinstance(ev, Messages):
            self.rules[part].messages(entry.seq, ev.time)
            self.pending[part].append((entry.seq, ev.time))
            return ev.records.num_rows
        self.rules[part].progress(entry.seq, ev.updates)
        self.counts.update_iter(ev.updates)
        return 0

    def _offset(self) -> dict[str, Any]:
        low = [min([s for s, _ in self.pending[p]], default=self.next[p]) for p in range(self.peers)]
        return {"next": list(self.next), "low": low, "frontier": fr.to_json(self.counts.frontier)}

    def advance(self, max_records: int | None, until: list[int] | None) -> dict[str, Any]:
        """Read new events round-robin over the parts (up to ``until[p]``), stopping once ``max_records``
        records were read (after at least one event); returns the new offset."""
        read_rows = 0
        live = [p for p in range(self.peers) if until is None or self.next[p] < until[p]]
        while live:
            for p in list(live):
                if self._iters[p] is None:
                    self._iters[p] = fr.entries(self.readers[p], None if until is None else until[p])
                entry = next(self._iters[p], None)  # type: ignore[arg-type]
                if entry is None:
                    self._iters[p] = None  # at the end for now: poll again next time
                    live.remove(p)
                    continue
                read_rows += self._apply(p, entry, self.readers[p].epoch)
                self.next[p] = entry.seq + 1
                if until is not None and self.next[p] >= until[p]:
                    live.remove(p)
            if max_records is not None and read_rows >= max_records:
                break
        frontier = self.counts.frontier
        for p in range(self.peers):
            self.pending[p] = [(s, t) for s, t in self.pending[p] if not fr.is_complete(t, frontier)]
        self.offset = self._offset()
        return self.offset

    def close(self) -> None:
        for r in self.readers:
            r.close()


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
            with log.reader(header.stream, part, start=low) as reader:
                for entry in fr.entries(reader, end):
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
