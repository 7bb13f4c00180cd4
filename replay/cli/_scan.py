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
from eventlog.log import Log, PartStats
from eventlog.parts import CheckedPart
from eventlog.time import Time
from replay.replayer import order_key

from ._wallclock import written_within


class PartCursor(CheckedPart):
    """Reads one part for the CLI from ``start`` (default: its first event still in the log) up to ``end``
    (exclusive, default: no end), by every rule of ``CheckedPart`` (sequence ids, timely's progress rules,
    committed reads by default, the frontier restored when starting past the first event).

    Wall-clock bounds (``Entry.ts``, ms since the epoch; a part's events are taken to be written in order):
    ``until_ts`` ends the part before its first event written after it (the part as it was then: reading
    committed, messages whose commit came later stay held). ``since_ts`` starts reading near the first event
    written at or after it, and ``in_window`` tells the consumer which events to show: events before
    ``since_ts`` still count for the frontier."""

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
        stats = log.part_stats(header.stream, part)
        self.first_seq = stats.first_seq
        """The first sequence id still in the log."""
        super().__init__(log, header, part, start=stats.first_seq if start is None else max(start, stats.first_seq),
                         end=end, isolation=isolation, progress_only=progress_only, since_ts=since_ts,
                         until_ts=until_ts)
        self.since_ts = since_ts
        self.last_seq = self.start - 1

    def in_window(self, entry: Entry) -> bool:
        """True when ``entry`` was written within ``since_ts``/``until_ts`` (always, without them): the events to
        show; the others only move the frontier."""
        return written_within(entry.ts, self.since_ts, self.until_ts)

    def held_note(self) -> str | None:
        """Reading committed: one line on the events held back at the end (None when nothing is held)."""
        held = self.describe_held()
        return None if held is None else f"part {self.part}: {held}; --uncommitted shows them"


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
