"""The two events of a captured stream, after timely's ``Event::{Progress, Messages}``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Union

import pyarrow as pa

from .time import Time


@dataclass(frozen=True)
class Progress:
    """Consolidated changes to the capabilities the capturing part holds: sorted ``(time, delta)``, no zeros."""

    updates: tuple[tuple[Time, int], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "updates", tuple((t, int(d)) for t, d in self.updates))


@dataclass(frozen=True, eq=False)
class Messages:
    """Records at one time, as an Arrow record batch with the stream's schema."""

    time: Time
    records: pa.RecordBatch

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Messages):
            return NotImplemented
        return self.time == other.time and self.records.equals(other.records)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Messages(time={self.time!r}, rows={self.records.num_rows})"

    _SHOWN = 5
    """How many records ``str`` shows."""

    def __str__(self) -> str:
        """The time and the records as a reader expects to see them (the first few, as dicts)."""
        n = self.records.num_rows
        rows = self.records.slice(0, self._SHOWN).to_pylist()
        more = f", … {n - self._SHOWN} more" if n > self._SHOWN else ""
        return f"Messages(time={self.time!r}, {n} record{'' if n == 1 else 's'}: " \
               f"{', '.join(repr(r) for r in rows)}{more})"


Event = Union[Progress, Messages]
"""Either event."""


class Entry(NamedTuple):
    """An event read from a part, with its sequence id (the part's offset, starting at 1)."""

    seq: int
    event: Event
    ts: int | None = None
    """When it was written, in milliseconds since the Unix epoch (the writer's clock), where the log records
    it: Kafka (the record timestamp) and format 2.x file and memory logs; None for 1.x file segments."""
