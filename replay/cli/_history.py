"""A stream's frontier history: every Progress event of every part in merged order, with the part's and the
stream's frontier after it (``replay frontier`` prints it, ``--plot`` draws it)."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from eventlog.antichain import Antichain, MutableAntichain
from eventlog.events import Messages, Progress
from eventlog.header import StreamHeader
from eventlog.log import Log
from eventlog.time import Time

from ._common import progress
from ._scan import merged, open_cursors, part_ends, total_events


@dataclass(frozen=True)
class FrontierStep:
    """One Progress event in merged order, and the frontiers right after it."""

    step: int
    """1, 2, 3, … in the order a replayer merges the parts (lowest time first)."""
    part: int
    seq: int
    updates: tuple
    part_frontier: Antichain
    """The frontier of the event's part after the event."""
    stream_frontier: Antichain
    """The stream's merged frontier after the event."""
    moved: bool
    """True when this event moved the stream's frontier."""
    ts: int | None = None
    """When the event was written (ms since the epoch, the writer's clock); None where the log does not record it."""


@dataclass
class FrontierHistory:
    """Every Progress event of a stream with the frontiers it produced."""

    header: StreamHeader
    uri: str
    steps: list[FrontierStep]
    """Every Progress event up to ``until_ts`` (also those before ``since_ts``: they make the frontiers)."""
    tail_problems: dict[int, str]
    first_writes: dict[Time, int] = field(default_factory=dict)
    """Per time, when its first record was written (ms): filled by ``frontier_history(first_writes=True)`` on logs
    that record write times."""
    message_writes: "array[int]" = field(default_factory=lambda: array("q"))
    """When each Messages event was written (ms, in merged order): filled with ``first_writes``."""
    since_ts: int | None = None
    """``--since-ts``: the steps written before it are not shown (``shown``)."""
    until_ts: int | None = None
    """``--until-ts``: every part was read up to its last event written at or before it."""

    @property
    def wallclock(self) -> bool:
        """True when every Progress event has a write time (the plot's x-axis is then the wall clock)."""
        return bool(self.steps) and all(s.ts is not None for s in self.steps)

    def shown(self) -> list[FrontierStep]:
        """The steps written at or after ``since_ts`` (every step without it)."""
        if self.since_ts is None:
            return self.steps
        return [s for s in self.steps if s.ts is None or s.ts >= self.since_ts]

    def final(self) -> dict[int, Antichain]:
        """Each part's frontier after its last event."""
        initial = Antichain([self.header.time_type.minimum])
        last = {p: initial for p in range(self.header.peers)}
        for s in self.steps:
            last[s.part] = s.part_frontier
        return last


def frontier_history(log: Log, header: StreamHeader, *, since_ts: int | None = None, until_ts: int | None = None,
                     first_writes: bool = False) -> FrontierHistory:
    """Read the Progress events of every part, merged lowest time first, each part up to its last event written
    at or before ``until_ts``. Messages are skipped undecoded, unless ``first_writes``: then they are read (every
    one written, committed or not) for the time each time's first record was written (the plot's lag)."""
    parts = range(header.peers)
    cursors = open_cursors(log, header, parts, ends=part_ends(log, header, parts), progress_only=not first_writes,
                           isolation="uncommitted", until_ts=until_ts)
    stream = MutableAntichain([(header.time_type.minimum, header.peers)])
    steps: list[FrontierStep] = []
    firsts: dict[Time, int] = {}
    writes = array("q")
    try:
        with progress("reading progress" if not first_writes else "reading events",
                      total_events(log, header, parts)) as advance:
            for cursor, entry in merged(cursors):
                advance(1)
                ev = entry.event
                if isinstance(ev, Messages):
                    if entry.ts is not None:
                        writes.append(entry.ts)
                        if ev.time not in firsts or entry.ts < firsts[ev.time]:
                            firsts[ev.time] = entry.ts
                    continue
                assert isinstance(ev, Progress)
                moved = bool(stream.update_iter(ev.updates))
                steps.append(FrontierStep(len(steps) + 1, cursor.part, entry.seq, ev.updates, cursor.frontier,
                                          stream.frontier, moved, entry.ts))
        problems = {c.part: problem for c in cursors if (problem := c.check_tail())}
    finally:
        for c in cursors:
            c.close()
    return FrontierHistory(header, log.uri, steps, problems, firsts, writes, since_ts, until_ts)
