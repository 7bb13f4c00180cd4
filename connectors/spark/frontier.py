"""The merged frontier of a whole stream, as the Spark readers plan with it.

A time is **complete** when no part's frontier has an element ``<=`` it (FORMAT.md, rule 5). The planner
computes the merged frontier of *all* parts from their Progress events (read without decoding Messages),
and every Spark task filters with that one frontier: in assign mode a task's own parts may have passed a
time that other parts have not, so a task never decides completeness alone.
"""

from __future__ import annotations

from typing import Any, Mapping

from eventlog.antichain import Antichain, MutableAntichain
from eventlog.log import Log
from eventlog.parts import CheckedPart
from eventlog.time import Time, TimeType


def merged_frontier(log: Log, stream: str, ends: Mapping[int, int] | None = None) -> Antichain:
    """The merged frontier of every part of ``stream`` after its events before ``ends[part]`` (default:
    every event there now), from each part's Progress events read by every rule (``eventlog.parts``): a broken
    rule raises ``ProgressError`` naming the stream, part and sequence id."""
    header = log.header(stream)
    counts = MutableAntichain([(header.time_type.minimum, header.peers)])
    for part in range(header.peers):
        end = None if ends is None else ends[part]
        with CheckedPart(log, header, part, end=end, progress_only=True) as reader:
            for _ in reader.read():
                pass
            counts.update_iter([(header.time_type.minimum, -1), *reader.counts()])
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
