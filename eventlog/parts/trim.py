"""Dropping a stream's old times: plan a retention mark, record it, then remove what it no longer needs.

A trim drops every time *not beyond* a frontier ``since`` that is complete in every part — so a time is dropped
whole, and no reader can be promised a time and then miss part of it. For each part it finds the cut: the
first event that is either of a time beyond ``since`` or after which the part can send nothing not beyond it;
the cut keeps the capability counts the part held there, so readers restore the part's frontier without the
events before it. The mark is recorded first (readers then start at the cuts), then the log removes the storage
that holds only events before them (whole segments, Kafka record prefixes; never a part's last event). A trim
killed between the two leaves a readable log; the next trim removes what is left.
"""

from __future__ import annotations

import time as _time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..antichain import Antichain
from ..errors import EventLogError
from ..events import Messages
from ..header import StreamHeader
from ..retention import PartCut, Retention, since_of
from .reader import CheckedPart

if TYPE_CHECKING:
    from ..log import Log


@dataclass
class PartTrim:
    """What a trim did to one part: its first retained sequence id before and after, and what was removed."""

    part: int
    start_before: int
    start: int
    events_removed: int = 0
    bytes_removed: int | None = 0


@dataclass
class TrimResult:
    """What ``trim`` did: the retained frontier in force (``since``), the one before (None: the stream was never
    trimmed), whether the frontier asked for was beyond the completed one (``clamped``: only complete times are
    dropped), and each part's cut."""

    stream: str
    since: Antichain
    previous: Antichain | None
    completed: Antichain
    parts: list[PartTrim] = field(default_factory=list)
    clamped: bool = False
    dry_run: bool = False

    @property
    def events_removed(self) -> int:
        """Events whose storage was removed, over every part."""
        return sum(p.events_removed for p in self.parts)

    @property
    def bytes_removed(self) -> int | None:
        """Bytes removed over every part (None where the log cannot tell)."""
        sizes = [p.bytes_removed for p in self.parts]
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)

    @property
    def changed(self) -> bool:
        """True when some part now starts later than before the trim."""
        return any(p.start > p.start_before for p in self.parts)


def completed_frontier(log: "Log", header: StreamHeader, *, until_ts: int | None = None) -> Antichain:
    """The stream's completed frontier: the minimal elements of every part's frontier (a time is complete once
    no part may still send at it); with ``until_ts`` (ms), as it was at that wall-clock instant."""
    frontiers = []
    for part in range(header.peers):
        with CheckedPart(log, header, part, progress_only=True, until_ts=until_ts) as p:
            for _ in p.read():
                pass
            if until_ts is not None and p.retention is not None and p.last_seq < p.start:
                # nothing retained was written by then: the part's frontier then is unknown, but what a trim
                # dropped was complete, and no more is known to have been
                frontiers.append(p.retention.since)
            else:
                frontiers.append(p.frontier)
    return since_of(frontiers)


def _beyond(frontier: Antichain, since: Antichain) -> bool:
    """True when every time of ``frontier`` is beyond ``since`` (nothing the part may still send is dropped)."""
    return all(since.less_equal(t) for t in frontier)


def bytes_before(log: "Log", header: StreamHeader, max_bytes: int) -> int:
    """The earliest wall-clock instant (ms) such that dropping the times complete before it leaves the stream
    holding at most ``max_bytes``, as far as the log can tell without rewriting anything: each part's stored bytes
    shared evenly among its events (whole segments are removed, so a part may keep up to a segment more). Needs a
    log that knows its size (file logs); ``ValueError`` otherwise."""
    stats = [log.part_stats(header.stream, p) for p in range(header.peers)]
    if any(st.bytes is None for st in stats):
        raise ValueError(f"{type(log).__name__} cannot tell the bytes a part holds: trim it by time or age instead")
    instants: set[int] = set()
    for part in range(header.peers):  # the write times of Progress events: where the completed frontier moves
        with CheckedPart(log, header, part, progress_only=True) as p:
            instants.update(e.ts for e in p.read() if e.ts is not None)

    def kept(when: int) -> float:
        since = completed_frontier(log, header, until_ts=when)
        total = 0.0
        for part, st in enumerate(stats):
            cut = plan_cut(log, header, part, since)
            events = max(st.next_seq - st.first_seq, 1)
            total += (st.bytes or 0) * max(st.next_seq - cut.start, 0) / events
        return total

    candidates = sorted(instants)
    if not candidates or kept(candidates[0] - 1) <= max_bytes:
        return (candidates[0] - 1) if candidates else 0
    lo, hi = 0, len(candidates) - 1  # kept() only falls as the instant moves on: the first instant small enough
    if kept(candidates[hi]) > max_bytes:
        return candidates[hi]  # even every complete time dropped leaves more: drop them all
    while lo < hi:
        mid = (lo + hi) // 2
        if kept(candidates[mid]) <= max_bytes:
            hi = mid
        else:
            lo = mid + 1
    return candidates[lo]


def _drops_more(target: Antichain, since: Antichain) -> bool:
    """True when dropping the times not beyond ``target`` drops more than ``since`` did (and all it did)."""
    return target != since and all(since.less_equal(t) for t in target)


def plan_cut(log: "Log", header: StreamHeader, part: int, since: Antichain) -> PartCut:
    """Where ``part`` starts once the times not beyond ``since`` are dropped (``since`` must be complete in the
    part): its first event of a time beyond ``since``, or the first after which it can send nothing not beyond
    it, whichever comes first — with the capability counts it held there."""
    with CheckedPart(log, header, part, isolation="uncommitted") as p:
        start = p.start
        while True:
            if _beyond(p.frontier, since):
                return PartCut(start, p.counts())
            entry = p.peek()
            if entry is None:
                break
            ev = entry.event
            if isinstance(ev, Messages) and since.less_equal(ev.time):
                return PartCut(entry.seq, p.counts())
            p.take()
            start = entry.seq + 1
    raise EventLogError(f"part {part} can still send at times not beyond the frontier to drop "
                        f"({list(p.frontier)}): only complete times are dropped", stream=header.stream, part=part)


def trim(
    log: "Log",
    stream: str,
    *,
    since: Antichain | None = None,
    before_ts: int | None = None,
    older_than: float | None = None,
    max_bytes: int | None = None,
    dry_run: bool = False,
) -> TrimResult:
    """Drop the times of ``stream`` not beyond ``since`` (a frontier), or complete before the wall-clock instant
    ``before_ts`` (ms since the epoch), or complete longer than ``older_than`` seconds ago, or the oldest complete
    times until the stream holds about ``max_bytes`` (``bytes_before``) — only ever times complete in every part (a
    frontier beyond the completed one is clamped to it). Records the retention mark, then removes the storage it no
    longer needs (``dry_run``: only plans). A mark never moves back: asking for less than the stream already
    dropped changes nothing."""
    if sum(x is not None for x in (since, before_ts, older_than, max_bytes)) != 1:
        raise ValueError("give exactly one of since, before_ts, older_than and max_bytes")
    header = log.header(stream)
    previous = log.retention(stream)
    completed = completed_frontier(log, header)
    if max_bytes is not None:
        before_ts = bytes_before(log, header, max_bytes)
    if older_than is not None:
        before_ts = int((_time.time() - older_than) * 1000)
    if before_ts is not None:
        target = completed_frontier(log, header, until_ts=before_ts)
        clamped = False
    else:
        assert since is not None
        target = since_of([since, completed])
        clamped = target != since
    result = TrimResult(stream, target, previous.since if previous is not None else None, completed,
                        clamped=clamped, dry_run=dry_run)
    if previous is not None and not _drops_more(target, previous.since):
        result.since = previous.since  # already dropped at least as much: only finish what it left to remove
        result.parts = [PartTrim(p, c.start, c.start) for p, c in enumerate(previous.parts)]
        if not dry_run:
            _remove(log, stream, previous, result)
        return result
    cuts = tuple(plan_cut(log, header, part, target) for part in range(header.peers))
    before = [c.start for c in previous.parts] if previous is not None else [1] * header.peers
    dropped = dict(previous.dropped) if previous is not None else {}
    mark = Retention(stream, target, cuts, dropped=dropped)
    result.parts = [PartTrim(p, before[p], c.start) for p, c in enumerate(cuts)]
    if dry_run:
        return result
    in_force = log.record_retention(stream, mark)
    result.since = in_force.since
    result.parts = [PartTrim(p, before[p], c.start) for p, c in enumerate(in_force.parts)]
    _remove(log, stream, in_force, result)
    return result


def _remove(log: "Log", stream: str, mark: Retention, result: TrimResult) -> None:
    for pt in result.parts:
        events, size = log.drop_before(stream, pt.part, mark.cut(pt.part).start)
        pt.events_removed, pt.bytes_removed = events, size


__all__ = ["PartTrim", "TrimResult", "bytes_before", "completed_frontier", "plan_cut", "trim"]
