"""Salvage: read a part past its damage, as avro-tools' ``repair`` and a careful engineer would, saying what was
skipped.

A damaged event (a checksum that fails, bytes that do not decode, a torn event) stops every reader: the
format's promise is that nothing wrong is handed out. When the damage cannot be repaired and the rest of the part
is wanted anyway, :func:`salvage_part` hands out every event it can read whole and checked, and for each run of
events it cannot, a :class:`Skipped` naming the part, the sequence ids, the file or record and the byte offset,
and the reason. Reading goes on after the damaged event, after a gap, or where the log says its next storage
unit begins (``Log.resume_after``: a file log's next segment) — the places ``replay verify`` resumes at.

What is read is the part's *uncommitted* view (FORMAT.md §1.1): once events are skipped, what a lost Progress
event said is unknown, so committed reads and timely's progress rules no longer apply beyond the first damage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Union

from eventlog.errors import EventLogError
from eventlog.events import Entry
from eventlog.header import StreamHeader
from eventlog.log import Log
from eventlog.parts import CheckedPart

from .verify import resume_at


@dataclass(frozen=True)
class Skipped:
    """Events of ``part`` from ``first_seq`` up to ``next_seq`` (exclusive; None: to the part's end) that could
    not be read, why (``reason``), and where the damage lies (``path`` or Kafka ``record``, ``offset``)."""

    part: int
    first_seq: int
    next_seq: int | None
    reason: str
    path: str | None = None
    record: str | None = None
    offset: int | None = None

    def describe(self) -> str:
        """One line for people."""
        seqs = (f"seq {self.first_seq}" if self.next_seq == self.first_seq + 1 else
                f"seqs {self.first_seq}..{self.next_seq - 1}" if self.next_seq is not None else
                f"seq {self.first_seq} to the part's end")
        where = self.path or self.record
        at = f" ({where}" + (f" byte {self.offset}" if self.offset is not None and self.path else "") + ")" \
            if where else ""
        return f"part {self.part}: skipped {seqs}{at}: {self.reason}"


def salvage_part(log: Log, header: StreamHeader, part: int, start: int = 1) -> Iterator[Union[Entry, Skipped]]:
    """The events of one part from ``start``, read past damage: each whole, checked event, and a ``Skipped`` for
    each run of events that could not be read (module doc). Never raises for damage in the part's events; a log
    that cannot be reached at all still raises."""
    expected = start
    tried: set[int] = set()
    while True:
        reader = CheckedPart(log, header, part, start=expected, isolation="uncommitted", track_progress=False)
        try:
            for entry in reader.read():
                expected = entry.seq + 1
                yield entry
            return
        except EventLogError as e:
            resume = resume_at(log, header.stream, part, e, expected, tried)
            place = log.locate(header.stream, part, e.seq if e.seq is not None else expected)
            yield Skipped(part, expected, resume, e.reason, path=e.path or place.get("path"),
                          record=place.get("record"), offset=e.offset if e.offset is not None else place.get("offset"))
            if resume is None:
                return
            expected = resume
        finally:
            reader.close()
