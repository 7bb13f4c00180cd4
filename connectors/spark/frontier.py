"""The merged frontier of a whole stream, as the Spark readers plan with it.

A time is **complete** when no part's frontier has an element ``<=`` it (FORMAT.md, rule 5). The planner
computes the merged frontier of *all* parts from their Progress events (read without decoding Messages),
and every Spark task filters with that one frontier: in assign mode a task's own parts may have passed a
time that other parts have not, so a task never decides completeness alone.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from eventlog.antichain import Antichain, MutableAntichain
from eventlog.errors import SequenceError
from eventlog.events import Entry
from eventlog.log import Log, PartReader
from eventlog.time import Time, TimeType
from eventlog.parts.rules import PartProgress


def entries(reader: PartReader, end: int | None = None, *, progress_only: bool = False) -> Iterator[Entry]:
    """The reader's entries up to ``end`` (exclusive), dropping duplicated sequence ids and raising
    SequenceError on a gap (``progress_only``: the reader skips Messages, so ids have gaps)."""
    expected = reader.next_seq
    for entry in reader:
        if end is not None and entry.seq >= end:
            return
        if entry.seq < expected:
            continue
        if entry.seq > expected and not progress_only:
            raise SequenceError(f"gap in sequence ids: expected {expected}, got {entry.seq}",
                                stream=reader.stream, part=reader.part, seq=entry.seq)
        expected = entry.seq + 1
        yield entry


def merged_frontier(log: Log, stream: str, ends: Mapping[int, int] | None = None) -> Antichain:
    """The merged frontier of every part of ``stream`` after its events before ``ends[part]`` (default:
    every event there now). Each part's Progress events are checked against timely's rules
    (``eventlog.parts.rules``): a broken rule raises ``ProgressError`` naming the stream, part and sequence id."""
    header = log.header(stream)
    counts = MutableAntichain([(header.time_type.minimum, header.peers)])
    for part in range(header.peers):
        end = None if ends is None else ends[part]
        rules = PartProgress(header.time_type.minimum, stream=stream, part=part)
        with log.reader(stream, part, progress_only=True) as reader:
            for entry in entries(reader, end, progress_only=True):
                rules.progress(entry.seq, entry.event.updates)  # type: ignore[union-attr]
                counts.update_iter(entry.event.updates)  # type: ignore[union-attr]
    return counts.frontier


def is_complete(t: Time, frontier: Antichain) -> bool:
    """True when ``t`` is complete at ``frontier`` (no element ``<= t``)."""
    return not frontier.less_equal(t)


def to_json(frontier: Antichain) -> list[Any]:
    """A frontier as a JSON-able list (product times as lists)."""
    return [t if isinstance(t, int) else list(t) for t in frontier]


def from_json(items: list[Any], time_type: TimeType) -> Antichain:
    """The frontier ``to_json`` wrote."""
    return Antichain(time_type.check(t) for t in items)
