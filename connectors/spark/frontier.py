"""The merged frontier of a whole stream, as the Spark readers plan with it.

A time is **complete** when no part's frontier has an element ``<=`` it (FORMAT.md, rule 5). The planner
computes the merged frontier of *all* parts from their Progress events (read without decoding Messages),
and every Spark task filters with that one frontier: in assign mode a task's own parts may have passed a
time that other parts have not, so a task never decides completeness alone.
"""

from __future__ import annotations

from typing import Any, Mapping

from eventlog.antichain import Antichain
from eventlog.log import Log
from eventlog.parts import part_frontier
from eventlog.time import Time, TimeType


def merged_frontier(log: Log, stream: str, ends: Mapping[int, int] | None = None) -> Antichain:
    """The merged frontier of every part of ``stream`` after its events before ``ends[part]`` (default:
    every event there now): the least elements of the parts' frontiers, each read from the part's Progress
    events by every rule (``eventlog.parts.part_frontier``): a broken rule raises ``ProgressError`` naming the
    stream, part and sequence id."""
    header = log.header(stream)
    return Antichain(t for part in range(header.peers)
                     for t in part_frontier(log, header, part, None if ends is None else ends[part]))


def is_complete(t: Time, frontier: Antichain) -> bool:
    """True when ``t`` is complete at ``frontier`` (no element ``<= t``)."""
    return not frontier.less_equal(t)


def to_json(frontier: Antichain) -> list[Any]:
    """A frontier as a JSON-able list (product times as lists)."""
    return [t if isinstance(t, int) else list(t) for t in frontier]


def from_json(items: list[Any], time_type: TimeType) -> Antichain:
    """The frontier ``to_json`` wrote."""
    return Antichain(time_type.check(t) for t in items)
