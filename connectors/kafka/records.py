"""Kafka record values of an eventlog stream: one bundle (``schemas/BUNDLE.md``) per record.

* The **header record** opens every partition of a stream's topic (offset 0, written when the topic is
  created): a BUNDLE with one STREAM_HEADER message (id 0 is not allowed, so it carries id 1 and is told
  apart by its type) whose payload is the header JSON (FORMAT.md §2).
* **Data records** hold one or more consecutive events of the partition's part: EVENT_MESSAGES /
  EVENT_PROGRESS messages whose MessageId is the event's sequence id and whose payload is the event body
  of the stream's encoding (the standalone form: FORMAT.md "Kafka log").
* **Record headers** of data records name their writer (FORMAT.md "Kafka log"): ``eventlog.epoch`` (decimal; one
  more than the last epoch in the partition when the writer opened) and ``eventlog.writer`` (a random id of
  the writer instance). Records without them (written before writers had epochs) are epoch 0.
"""

from __future__ import annotations

import time
from typing import Sequence

from eventlog import bundle
from eventlog.errors import CorruptLogError
from eventlog.header import StreamHeader
from eventlog.writer_mark import EPOCH_KEY, MAX_EPOCH, WRITER_KEY, WriterMark, parse_mark

__all__ = ["EPOCH_HEADER", "MAX_EPOCH", "WRITER_HEADER", "WriterMark", "decode_record", "events_record", "header_of",
           "header_record", "is_header", "writer_headers", "writer_mark"]


EPOCH_HEADER = EPOCH_KEY
"""Record header holding the writer epoch of a data record (decimal ASCII)."""
WRITER_HEADER = WRITER_KEY
"""Record header holding the id of the writer instance that produced a data record (ASCII)."""


def writer_headers(mark: WriterMark) -> list[tuple[str, bytes]]:
    """The Kafka record headers of the data records a writer produces."""
    return mark.items()


def writer_mark(headers: "Sequence[tuple[str, bytes | None]] | None", *, stream: str, part: int,
                offset: int) -> WriterMark:
    """The writer of a data record from its Kafka headers (epoch 0 and no id when absent); a malformed
    value raises CorruptLogError naming the Kafka offset. When a header repeats, the last one counts."""
    values: dict[str, bytes | None] = {}
    for key, value in headers or ():
        if key in (EPOCH_HEADER, WRITER_HEADER):
            values[key] = value
    return parse_mark(values.get(EPOCH_HEADER), values.get(WRITER_HEADER),
                      what=f"record at kafka offset {offset}",
                      present=(EPOCH_HEADER in values, WRITER_HEADER in values),
                      stream=stream, part=part, offset=offset)


def header_record(header: StreamHeader) -> bytes:
    """The record value that opens each partition."""
    return bundle.encode([header.to_json()], 1, bundle.MSG_STREAM_HEADER, bundle_ts=_now_ms())


def events_record(first_seq: int, kinds: Sequence[int], bodies: Sequence[bytes]) -> bytes:
    """One record value holding consecutive events ``first_seq …``."""
    return bundle.encode(list(bodies), first_seq, list(kinds), bundle_ts=_now_ms())


def decode_record(value: bytes, *, stream: str, part: int, offset: int) -> bundle.Bundle:
    """The bundle of a record value; damage raises CorruptLogError naming the Kafka offset."""
    try:
        return bundle.decode(value)
    except bundle.BundleError as e:
        raise CorruptLogError(f"record at kafka offset {offset} is not a valid bundle: {e.reason}",
                              stream=stream, part=part, offset=offset) from None


def is_header(b: bundle.Bundle) -> bool:
    """True for the record that opens a partition."""
    return b.count == 1 and int(b.types[0]) == bundle.MSG_STREAM_HEADER


def header_of(b: bundle.Bundle, *, path: str) -> StreamHeader:
    """The stream header held by a header record."""
    return StreamHeader.from_json(bytes(b.payload(0)), path=path)


def _now_ms() -> int:
    return int(time.time() * 1000)
