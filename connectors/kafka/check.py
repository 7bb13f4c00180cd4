"""``KafkaLog.check_part``: every problem of a part's Kafka records, found without raising.

A reader stops at the first record it cannot believe; this goes through every record of the partition and
reports each problem as an error naming stream, part, Kafka offset (and seq when known), then goes on with the
next record: a record that does not decode (no eventlog framing, a value that is not the stream's encoding), a
record whose headers say another thing than its value (sequence id, kind, time), a record framed for another
format version, a partition that does not open with the stream header or a header record of another stream
header, malformed writer headers and interleaved writers (FORMAT.md §9.1), gaps in the sequence ids, and
records that repeat sequence ids already read **with other content** (a true producer retry repeats a record
byte for byte: readers drop it, and so does this check; one that differs is reported, as readers silently keep
the first). The records are the committed ones (``read_committed``), as readers see them.
"""

from __future__ import annotations

import collections
import zlib
from typing import Any

from eventlog.errors import CorruptLogError, EventLogError, HeaderMismatchError, SequenceError
from eventlog.header import StreamHeader
from eventlog.log import with_kind

from .history import WriterHistory
from .reader import scan_partition
from .records import Frame, RecordDecoders, check_event

MAX_PROBLEMS = 50
"""Problems reported per part before the check stops reading it."""

_REMEMBERED = 1 << 16
"""Sequence ids whose record content is remembered, to compare a later record repeating them (producer retries
repeat records a few batches apart)."""


def record_name(topic: str, part: int, offset: int) -> str:
    """How reports name a Kafka record: ``topic[partition]@offset``."""
    return f"{topic}[{part}]@{offset}"


def check_part(log: Any, header: StreamHeader, part: int) -> list[EventLogError]:
    """The problems of one part's records (see the module doc); an empty list when they are whole. ``log``: the
    ``KafkaLog`` of the stream (not named here: the log module imports this one)."""
    return _PartCheck(log, header, part).run()


class _PartCheck:
    def __init__(self, log: Any, header: StreamHeader, part: int) -> None:
        self.log, self.header, self.part = log, header, part
        self.stream = header.stream
        self.topic = log.target.topic(self.stream)
        self.version = 2 if header.version[0] >= 2 else 1
        self.decoders = RecordDecoders(log.stored_header(self.stream), part, log.schema_history(self.stream))
        self.history = WriterHistory(self.stream, part)
        self.next_seq: int | None = None  # the sequence id the next event must carry (None before the first)
        self.seen: collections.OrderedDict[int, tuple[int, int]] = collections.OrderedDict()  # seq -> (offset, crc)
        self.problems: list[EventLogError] = []

    def where(self, offset: int, seq: int | None = None) -> dict:
        return {"stream": self.stream, "part": self.part, "seq": seq, "offset": offset}

    def run(self) -> list[EventLogError]:
        try:
            lo, hi = self.log.watermarks(self.topic, self.part)
        except EventLogError as e:
            return [e]
        offset = lo
        self.next_seq = 1 if lo == 0 else None  # a partition whose start was deleted starts anywhere
        while offset < hi and len(self.problems) < MAX_PROBLEMS:
            try:
                for rec in scan_partition(self.log, self.log._scanner(), self.topic, self.part, offset):
                    offset = rec.offset + 1
                    self.record(rec, opening=rec.offset == 0)
                    if len(self.problems) >= MAX_PROBLEMS:
                        break
                break
            except CorruptLogError as e:  # a record that is not an eventlog record: report it, go on after it
                self.problems.append(e)
                if e.offset is None or e.offset < offset:
                    break
                offset = e.offset + 1
            except EventLogError as e:  # the cluster, not a record: nothing more can be read
                self.problems.append(e)
                break
        return self.problems

    def record(self, rec: Frame, *, opening: bool) -> None:
        where = self.where(rec.offset)
        if rec.version != self.version:
            self.problems.append(CorruptLogError(
                f"a record framed as format {rec.version}.x in a stream of format {self.version}.x (kafka offset "
                f"{rec.offset})", **where))
            return
        if rec.is_header:
            self.header_record(rec)
            return
        if opening:
            self.problems.append(CorruptLogError(
                f"the partition does not open with the stream header (kafka offset {rec.offset})", **where))
        if not rec.seqs:
            return
        try:
            mark = rec.mark(self.stream, self.part)
        except CorruptLogError as e:
            self.problems.append(e)
        else:
            try:
                self.history.check(mark, rec.first_seq, rec.last_seq, rec.offset)
            except CorruptLogError as e:  # two histories: reported once, then followed from this record on
                self.problems.append(e)
                self.history = WriterHistory(self.stream, self.part)
                self.history.check(mark, rec.first_seq, rec.last_seq, rec.offset)
        for i, seq in enumerate(rec.seqs):
            self.event(rec, i, seq)

    def header_record(self, rec: Frame) -> None:
        try:
            self.log._header_record(rec, self.topic, self.part, self.stream).check_same(self.log.stored_header(self.stream))
        except HeaderMismatchError as e:
            self.problems.append(with_kind(HeaderMismatchError(
                f"header record of partition {self.part} disagrees with the stream header: {e.reason}",
                **self.where(rec.offset)), "header"))
        except (CorruptLogError, ValueError) as e:
            reason = e.reason if isinstance(e, EventLogError) else str(e)
            self.problems.append(with_kind(CorruptLogError(f"damaged header record: {reason}",
                                                           **self.where(rec.offset)), "header"))

    def event(self, rec: Frame, i: int, seq: int) -> None:
        body = rec.bodies[i]
        crc = zlib.crc32(bytes(body), zlib.crc32(repr(sorted(rec.headers or ())).encode()))
        if self.next_seq is not None and seq < self.next_seq:
            first = self.seen.get(seq)
            if first is not None and first[1] != crc:
                self.problems.append(with_kind(CorruptLogError(
                    f"record repeats seq {seq} (first at kafka offset {first[0]}) with other content: readers keep "
                    f"the first and drop this one", **self.where(rec.offset, seq)), "duplicate"))
            return
        if self.next_seq is not None and seq > self.next_seq:
            self.problems.append(SequenceError(f"gap in sequence ids: expected {self.next_seq}, got {seq} (kafka "
                                               f"offset {rec.offset})", **self.where(rec.offset, seq)))
        self.next_seq = seq + 1
        self.seen[seq] = (rec.offset, crc)
        if len(self.seen) > _REMEMBERED:
            self.seen.popitem(last=False)
        try:
            got, event = self.decoders.decode(seq, body)
            check_event(rec, i, got, event, stream=self.stream, part=self.part)
        except CorruptLogError as e:
            self.problems.append(CorruptLogError(e.reason, **self.where(rec.offset, seq)))


__all__ = ["MAX_PROBLEMS", "check_part", "record_name"]
