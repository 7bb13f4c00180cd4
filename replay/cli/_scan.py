"""Reading parts for the CLI: a cursor per part that knows the part's frontier, and a merge of cursors in
the order a replayer delivers events (lowest pending time first).

Unlike ``Replayer``, cursors keep each event's part and sequence id, which ``cat``, ``stats``,
``frontier`` and ``export`` show.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from eventlog.antichain import Antichain
from eventlog.events import Entry, Messages
from eventlog.header import StreamHeader
from eventlog.log import Log, PartReader, PartStats
from eventlog.time import Time
from replay.committed import CommittedPart, check_isolation
from replay.replayer import order_key
from replay.rules import PartProgress

from ._wallclock import written_within


class PartCursor:
    """Reads one part from ``start`` (default: its first event) up to ``end`` (exclusive, default: no end),
    tracking the part's frontier; with ``start`` past the first event, the frontier is first restored from
    the Progress events before it. ``progress_only`` skips Messages events without decoding them.

    Every event applied is checked against timely's progress rules (``replay.rules``): a broken rule raises
    ``ProgressError`` naming the stream, part and sequence id (``replay verify`` reports them all).

    ``isolation="committed"`` (the default) yields the part's committed view (``replay.committed``,
    FORMAT.md §1.1): messages wait until a later Progress event passes their time, and those a crashed writer
    left at times it had not completed are dropped once a newer incarnation writes. ``progress_only`` cursors
    and ``isolation="uncommitted"`` yield every event as read.

    Wall-clock bounds (``Entry.ts``, ms since the epoch; a part's events are taken to be written in order):
    ``until_ts`` ends the part before its first event written after it (the part as it was then: reading
    committed, messages whose commit came later stay held). ``since_ts`` starts reading near the first event
    written at or after it — Kafka logs find it by record timestamp (``seq_for_timestamp``), other logs while
    restoring the frontier from the Progress events before it — and ``in_window`` tells the consumer which
    events to show: events before ``since_ts`` still count for the frontier."""

    def __init__(
        self,
        log: Log,
        header: StreamHeader,
        part: int,
        *,
        start: int | None = None,
        end: int | None = None,
        progress_only: bool = False,
        isolation: str = "committed",
        since_ts: int | None = None,
        until_ts: int | None = None,
    ) -> None:
        self.header = header
        self.part = part
        self.end = end
        self.since_ts, self.until_ts = since_ts, until_ts
        stats = log.part_stats(header.stream, part)
        self.first_seq = stats.first_seq
        self.start = stats.first_seq if start is None else max(start, stats.first_seq)
        self._rules = PartProgress(header.time_type.minimum, stream=header.stream, part=part)
        self.committed = (CommittedPart(header.time_type.minimum, stream=header.stream, part=part)
                          if check_isolation(isolation) == "committed" and not progress_only else None)
        """The committed-read filter (None when reading uncommitted or progress only)."""
        scan_ts = since_ts  # without an index by time: start after the Progress events written before it
        seek = getattr(log, "seq_for_timestamp", None)
        if since_ts is not None and callable(seek):
            self.start = max(self.start, seek(header.stream, part, since_ts))
            scan_ts = None
        if self.start > stats.first_seq or scan_ts is not None:
            last = stats.first_seq - 1
            with log.reader(header.stream, part, start=stats.first_seq, progress_only=True) as r:
                for entry in r:
                    if entry.seq >= self.start and (scan_ts is None or entry.ts is None or entry.ts >= scan_ts):
                        break
                    self._update_frontier(entry)
                    if self.committed is not None:
                        self.committed.restore(entry.event.updates, entry.seq)  # type: ignore[union-attr]
                    last = entry.seq
            if scan_ts is not None:
                self.start = max(self.start, last + 1)
        self.reader: PartReader = log.reader(header.stream, part, start=self.start, progress_only=progress_only)
        self.last_seq = self.start - 1
        """The sequence id of the last event read (``start - 1`` before the first)."""

    def _update_frontier(self, entry: Entry) -> None:
        self._rules.progress(entry.seq, entry.event.updates)  # type: ignore[union-attr]

    @property
    def frontier(self) -> Antichain:
        """The part's frontier after the events read so far."""
        return self._rules.frontier

    @property
    def finished(self) -> bool:
        """True once the part's frontier is empty (it writes nothing more)."""
        return self._rules.finished

    @property
    def next_seq(self) -> int:
        """The sequence id after the last event read, counting Messages events a ``progress_only`` cursor
        skipped (``last_seq`` counts only events yielded)."""
        n = self.reader.next_seq
        return min(n, self.end) if self.end is not None else n

    @property
    def at_end(self) -> bool:
        """True when ``end`` is set and reached."""
        return self.end is not None and self.next_seq >= self.end

    @property
    def tail_problem(self) -> str | None:
        """The reader's torn-tail report of its last pass (None: it stopped at the clean end). Call
        ``check_tail`` first when the last pass read events."""
        return self.reader.tail_problem

    def check_tail(self) -> str | None:
        """Poll the reader once more and return its torn-tail report: a pass that read whole events does
        not report a partial index entry after them, a pass that starts there does (file logs). Call it
        when done reading; an event that arrived meanwhile is not shown."""
        for _ in self.reader:
            break
        return self.reader.tail_problem

    def pull(self) -> Iterator[Entry]:
        """The events available now without applying them — with ``end`` set, every event up to it: a
        reader's pass may stop at what has arrived so far (a Kafka consumer returns once its queue is empty),
        so passes follow each other until ``end`` or one that finds nothing. Call ``apply`` on each before
        using the frontier (``merged`` reads ahead, so it applies an event only when it is its turn)."""
        while not self.at_end:
            found = False
            for entry in self.reader:
                found = True
                if self.end is not None and entry.seq >= self.end:
                    return
                if self.until_ts is not None and entry.ts is not None and entry.ts > self.until_ts:
                    self.end = entry.seq  # written after --until-ts: the part ends here
                    return
                if self.committed is None:
                    yield entry
                else:
                    yield from self.committed.push(entry, self.reader.epoch)
            if self.end is None or not found:
                return

    def in_window(self, entry: Entry) -> bool:
        """True when ``entry`` was written within ``since_ts``/``until_ts`` (always, without them): the events to
        show; the others only move the frontier."""
        return written_within(entry.ts, self.since_ts, self.until_ts)

    def held_note(self) -> str | None:
        """Reading committed: one line on the events held back at the end (None when nothing is held)."""
        if self.committed is None or not self.committed.held:
            return None
        return f"part {self.part}: {self.committed.describe_held()}; --uncommitted shows them"

    def apply(self, entry: Entry) -> None:
        """Account for ``entry`` having been taken: its Progress updates change the part's frontier; a
        Messages event must be in advance of it. Raises ``ProgressError`` when the entry breaks a rule."""
        if isinstance(entry.event, Messages):
            self._rules.messages(entry.seq, entry.event.time)
        else:
            self._update_frontier(entry)
        self.last_seq = entry.seq

    def read(self) -> Iterator[Entry]:
        """The events available now (up to ``end``), each applied before it is yielded; calling it again
        continues with events appended since."""
        for entry in self.pull():
            self.apply(entry)
            yield entry

    def close(self) -> None:
        """Release the part's reader."""
        self.reader.close()


def part_ends(log: Log, header: StreamHeader, parts: Iterable[int]) -> dict[int, int]:
    """Where each part ends now (its ``next_seq``): cursors ending there see one consistent view of a log
    that is still being written."""
    return {p: log.part_stats(header.stream, p).next_seq for p in parts}


def open_cursors(
    log: Log,
    header: StreamHeader,
    parts: Iterable[int],
    *,
    starts: dict[int, int] | None = None,
    ends: dict[int, int] | None = None,
    progress_only: bool = False,
    isolation: str = "committed",
    since_ts: int | None = None,
    until_ts: int | None = None,
) -> list[PartCursor]:
    """A cursor per part, from ``starts[p]`` (default: the first event) to ``ends[p]`` (default: no end), within
    the wall-clock bounds ``since_ts``/``until_ts`` (``PartCursor``)."""
    return [
        PartCursor(log, header, p, start=(starts or {}).get(p), end=(ends or {}).get(p), progress_only=progress_only,
                   isolation=isolation, since_ts=since_ts, until_ts=until_ts)
        for p in parts
    ]


def held_notes(cursors: Iterable[PartCursor]) -> list[str]:
    """What each cursor read committed holds back at the end (one line per such part)."""
    return [n for c in cursors if (n := c.held_note()) is not None]


def merged(cursors: list[PartCursor]) -> Iterator[tuple[PartCursor, Entry]]:
    """One pass over the events available now in every cursor, lowest pending time first (ties: lower part
    first); each part's own order is kept, and a cursor's frontier includes exactly the events yielded."""
    minimum = cursors[0].header.time_type.minimum if cursors else 0
    its = [c.pull() for c in cursors]
    heap: list[tuple[Time, int, int, Entry]] = []

    def push(i: int) -> None:
        entry = next(its[i], None)
        if entry is not None:
            heapq.heappush(heap, (order_key(entry.event, minimum), cursors[i].part, i, entry))

    for i in range(len(cursors)):
        push(i)
    while heap:
        _, _, i, entry = heapq.heappop(heap)
        cursors[i].apply(entry)
        yield cursors[i], entry
        push(i)


def total_events(log: Log, header: StreamHeader, parts: Iterable[int]) -> int:
    """How many events the parts hold now (for progress bars)."""
    return sum(log.part_stats(header.stream, p).events for p in parts)


@dataclass
class PartSummary:
    """What one pass over a part found (``summarise_part``)."""

    part: int
    stats: PartStats
    """Sequence range and size as the log reports them."""
    frontier: Antichain
    """The part's frontier after its last event."""
    events: int = 0
    """Events read (with ``progress_only``, Messages events skipped count too)."""
    last_seq: int = 0
    """The last sequence id read (``first_seq - 1`` when none)."""
    messages: int = 0
    """Messages events read (0 with ``progress_only``)."""
    records: int = 0
    """Records in them."""
    times: set = field(default_factory=set)
    """The distinct times of the Messages events."""
    tail_problem: str | None = None
    """A torn tail the reader stopped at, if any."""


def summarise_part(
    log: Log,
    header: StreamHeader,
    part: int,
    *,
    progress_only: bool = False,
    advance: Callable[[int], None] | None = None,
) -> PartSummary:
    """Read one part to its current end (Messages too, unless ``progress_only``) and summarise it;
    ``advance(n)`` is told how many events were passed (a progress bar)."""
    stats = log.part_stats(header.stream, part)
    cursor = PartCursor(log, header, part, end=stats.next_seq, progress_only=progress_only)
    summary = PartSummary(part, stats, cursor.frontier, last_seq=cursor.start - 1)
    passed = cursor.next_seq
    try:
        for entry in cursor.read():
            ev = entry.event
            if isinstance(ev, Messages):
                summary.messages += 1
                summary.records += ev.records.num_rows
                summary.times.add(ev.time)
            if advance is not None:
                advance(cursor.next_seq - passed)
                passed = cursor.next_seq
        if advance is not None:
            advance(cursor.next_seq - passed)
        summary.last_seq = cursor.next_seq - 1
        summary.events = cursor.next_seq - cursor.start
        summary.frontier = cursor.frontier
        summary.tail_problem = cursor.check_tail()
    finally:
        cursor.close()
    return summary


def merged_frontier(frontiers: Iterable[Antichain]) -> Antichain:
    """The frontier of a set of parts: the minimal elements of their frontiers together."""
    return Antichain(t for f in frontiers for t in f)
