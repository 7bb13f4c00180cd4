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

import re
import time
from dataclasses import dataclass
from typing import Sequence

from eventlog import bundle
from eventlog.errors import CorruptLogError
from eventlog.header import StreamHeader


EPOCH_HEADER = "eventlog.epoch"
"""Record header holding the writer epoch of a data record (decimal ASCII)."""
WRITER_HEADER = "eventlog.writer"
"""Record header holding the id of the writer instance that produced a data record (ASCII)."""
MAX_EPOCH = 2**63 - 1
_EPOCH = re.compile(rb"0|[1-9][0-9]{0,18}")
_WRITER = re.compile(rb"[!-~]{1,64}")  # printable ASCII without spaces, bounded


@dataclass(frozen=True)
class WriterMark:
    """Who wrote a data record: the writer epoch and the writer instance's id (None when not recorded)."""

    epoch: int
    writer: str | None


def writer_headers(mark: WriterMark) -> list[tuple[str, bytes]]:
    """The Kafka record headers of the data records a writer produces."""
    out = [(EPOCH_HEADER, str(mark.epoch).encode())]
    if mark.writer is not None:
        out.append((WRITER_HEADER, mark.writer.encode()))
    return out


def writer_mark(headers: "Sequence[tuple[str, bytes | None]] | None", *, stream: str, part: int,
                offset: int) -> WriterMark:
    """The writer of a data record from its Kafka headers (epoch 0 and no id when absent); a malformed
    value raises CorruptLogError naming the Kafka offset. When a header repeats, the last one counts."""
    epoch, writer = 0, None
    for key, value in headers or ():
        if key == EPOCH_HEADER:
            if value is None or not _EPOCH.fullmatch(value) or int(value) > MAX_EPOCH:
                raise CorruptLogError(f"record at kafka offset {offset} has a malformed {EPOCH_HEADER} header "
                                      f"{_show(value)}", stream=stream, part=part, offset=offset)
            epoch = int(value)
        elif key == WRITER_HEADER:
            if value is None or not _WRITER.fullmatch(value):
                raise CorruptLogError(f"record at kafka offset {offset} has a malformed {WRITER_HEADER} header "
                                      f"{_show(value)}", stream=stream, part=part, offset=offset)
            writer = value.decode("ascii")
    return WriterMark(epoch, writer)


def _show(value: bytes | None) -> str:
    return "(null)" if value is None else repr(bytes(value[:40])) + ("…" if len(value) > 40 else "")


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
