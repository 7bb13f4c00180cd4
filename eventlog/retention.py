"""A stream's retention mark: which times were dropped, and where each part's retained events start.

A trim drops every time *not beyond* the mark's ``since`` frontier (differential dataflow's and Materialize
persist's "since": the times ``t`` with no element of ``since`` ``<= t``), and only times complete in every
part. Each part then starts at ``PartCut.start``, with the capability counts it held just before that event
(``PartCut.counts``), so a reader restores the part's frontier without the dropped events. Events of dropped
times that lie at or after ``start`` (a part may send at a later time before it finishes an earlier one) are
skipped by every reader, so a time is dropped whole or not at all. FORMAT.md §10 gives the stored form.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .antichain import Antichain
from .errors import LostDataError
from .header import StreamHeader
from .stream_doc import dump_doc, load_doc
from .time import Time

RETENTION_VERSION = (2, 1)
"""The format version that introduced retention marks (FORMAT.md §6)."""

MAX_RETENTION_BYTES = 64 << 20
"""The largest retention mark a reader accepts (a cut per part, each with its capability counts)."""


class TrimmedError(LostDataError):
    """A reader asked for a position a trim dropped (Kafka's offset-out-of-range): ``earliest`` is the first
    sequence id of the part still there. Start there, or from the beginning (sequence id 1 means "the earliest
    retained event")."""

    def __init__(self, message: str, *, earliest: int | None = None, **where: Any) -> None:
        self.earliest = earliest
        super().__init__(message, **where)

    def __reduce__(self):  # noqa: ANN204 - keep ``earliest`` when pickled (Spark ships errors between processes)
        return (_rebuild_trimmed, (self.reason, self.earliest, self.location()))


def _rebuild_trimmed(reason: str, earliest: int | None, location: dict[str, Any]) -> "TrimmedError":
    return TrimmedError(reason, earliest=earliest, **location)


@dataclass(frozen=True)
class PartCut:
    """Where one part's retained events start: ``start`` is the first sequence id readers read, ``counts`` the
    capability counts the part held before it (the part's frontier there)."""

    start: int
    counts: tuple[tuple[Time, int], ...]

    @property
    def frontier(self) -> Antichain:
        """The part's frontier at ``start``."""
        return Antichain(t for t, n in self.counts if n > 0)


@dataclass(frozen=True)
class Retention:
    """A stream's retention mark: the dropped times (those not beyond ``since``) and each part's cut."""

    stream: str
    since: Antichain
    parts: tuple[PartCut, ...]
    trimmed: str = ""
    """When the mark was recorded (ISO-8601 UTC)."""
    dropped: Mapping[str, int] = field(default_factory=dict)
    """Informational totals of what trims removed so far (``events``, ``bytes``)."""

    def __post_init__(self) -> None:
        if not self.trimmed:
            now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
            object.__setattr__(self, "trimmed", now.replace("+00:00", "Z"))

    def drops(self, t: Time) -> bool:
        """True when time ``t`` was dropped (it is not beyond ``since``)."""
        return not self.since.less_equal(t)

    def cut(self, part: int) -> PartCut:
        """The cut of ``part``."""
        return self.parts[part]

    def covers(self, other: "Retention | None") -> bool:
        """True when this mark drops at least what ``other`` dropped (a trim never moves a mark back)."""
        if other is None:
            return True
        return (all(other.since.less_equal(t) for t in self.since)
                and all(a.start >= b.start for a, b in zip(self.parts, other.parts)))

    # -- stored form ---------------------------------------------------------------------------------------

    def to_json(self, header: StreamHeader) -> bytes:
        """The mark as stored (FORMAT.md §10; ``stream_doc``)."""
        return dump_doc("eventlog-retention", header, {
            "since": [_time_json(t) for t in self.since],
            "parts": [{"start": c.start, "counts": [[_time_json(t), n] for t, n in c.counts]} for c in self.parts],
            "trimmed": self.trimmed,
            "dropped": dict(self.dropped),
        }, what="retention mark", limit=MAX_RETENTION_BYTES)

    @staticmethod
    def from_json(data: bytes, header: StreamHeader, *, path: str | None = None) -> "Retention":
        """Parse and check a stored mark against the stream's ``header``; ``CorruptLogError`` naming the stream
        and ``path`` when it is damaged, of another stream or header, or out of range."""
        doc, corrupt = load_doc(data, "eventlog-retention", header, what="retention mark",
                                limit=MAX_RETENTION_BYTES, path=path)
        check = header.time_type.check
        try:
            since = Antichain(check(_time_value(t)) for t in _list(doc.get("since")))
            parts = []
            for p in _list(doc.get("parts")):
                start = p["start"]
                if isinstance(start, bool) or not isinstance(start, int) or not 1 <= start < 2**63:
                    raise ValueError(f"start {start!r}")
                counts = tuple((check(_time_value(t)), _count(n)) for t, n in _list(p["counts"]))
                parts.append(PartCut(start, counts))
            trimmed, dropped = doc.get("trimmed", ""), doc.get("dropped", {})
            if not isinstance(trimmed, str) or len(trimmed) > 64 or not isinstance(dropped, dict):
                raise ValueError("trimmed/dropped")
        except (KeyError, TypeError, ValueError) as e:
            raise corrupt(f"a field is out of range ({str(e)[:200]})") from None
        if len(parts) != header.peers:
            raise corrupt(f"{len(parts)} part cuts for a stream of {header.peers} parts")
        return Retention(header.stream, since, tuple(parts), trimmed,
                         {str(k): int(v) for k, v in dropped.items() if isinstance(v, int)})


def _time_json(t: Time) -> Any:
    return list(t) if isinstance(t, tuple) else t


def _time_value(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def _list(v: Any) -> list:
    if not isinstance(v, list):
        raise TypeError(f"expected a list, got {type(v).__name__}")
    return v


def _count(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 0 < n < 2**63:
        raise ValueError(f"count {n!r}")
    return n


_AGE_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+")
_AGE_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_age(age: "str | float | int") -> float:
    """An age as seconds: a number of seconds, or text of numbers with units (``7d``, ``12h``, ``1h30m``,
    ``90s``, ``500ms``, ``2w``). Raises ValueError saying what is accepted."""
    if isinstance(age, (int, float)) and not isinstance(age, bool):
        if age < 0:
            raise ValueError(f"an age is not negative, got {age!r}")
        return float(age)
    text = str(age).strip().lower()
    if not _AGE.fullmatch(text):
        raise ValueError(f"{age!r} is not an age: a number and a unit, ms, s, m, h, d or w (7d, 12h, 1h30m)")
    return sum(float(n) * _AGE_UNITS[u] for n, u in _AGE_PART.findall(text))


def since_of(frontiers: Iterable[Antichain]) -> Antichain:
    """The completed frontier of parts with these frontiers: a time is complete once no part may still send
    at it, so the completed frontier is the set of minimal elements of all the parts' frontiers."""
    return Antichain(t for f in frontiers for t in f)


__all__ = ["MAX_RETENTION_BYTES", "RETENTION_VERSION", "PartCut", "Retention", "TrimmedError", "parse_age", "since_of"]
