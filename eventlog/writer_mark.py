"""Who wrote an event: the writer epoch and the writer instance's id (FORMAT.md §1.1).

Each incarnation of a part's writer (each open) has an epoch higher than every earlier incarnation's and a
random id. Logs record both beside the events (file segments: the segment's metadata; Kafka: record
headers) under the keys ``eventlog.epoch`` (decimal ASCII, no leading zeros, ``0 … 2^63-1``) and
``eventlog.writer`` (1–64 printable ASCII characters without spaces). Events without them are epoch 0.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any

from .errors import CorruptLogError

EPOCH_KEY = "eventlog.epoch"
"""Metadata key / record header of the writer epoch."""
WRITER_KEY = "eventlog.writer"
"""Metadata key / record header of the writer instance's id."""
MAX_EPOCH = 2**63 - 1
_EPOCH = re.compile(rb"0|[1-9][0-9]{0,18}")
_WRITER = re.compile(rb"[!-~]{1,64}")  # printable ASCII without spaces, bounded


@dataclass(frozen=True)
class WriterMark:
    """The writer epoch and the writer instance's id (None when not recorded)."""

    epoch: int
    writer: str | None

    @staticmethod
    def new(epoch: int) -> "WriterMark":
        """A mark for a new writer incarnation: ``epoch`` and a random 16-hex-digit id."""
        if not 0 < epoch <= MAX_EPOCH:
            raise ValueError(f"writer epoch {epoch} out of range 1 … 2^63-1")
        return WriterMark(epoch, secrets.token_hex(8))

    def items(self) -> list[tuple[str, bytes]]:
        """The ``(key, value)`` pairs that record this mark."""
        out = [(EPOCH_KEY, str(self.epoch).encode())]
        if self.writer is not None:
            out.append((WRITER_KEY, self.writer.encode()))
        return out


def _show(value: "bytes | None") -> str:
    return "(null)" if value is None else repr(bytes(value[:40])) + ("…" if len(value) > 40 else "")


def parse_mark(epoch: "bytes | None", writer: "bytes | None", *, what: str, present: tuple[bool, bool] = (True, True),
               **where: Any) -> WriterMark:
    """The mark recorded as ``epoch``/``writer`` bytes (``present`` says which keys were there at all: an
    absent epoch is 0, an absent writer None); a malformed value raises CorruptLogError naming ``what``
    (e.g. "segment metadata", "record at kafka offset 7") and ``where`` (stream, part, offset, path)."""
    e, w = 0, None
    if present[0]:
        if epoch is None or not _EPOCH.fullmatch(epoch) or int(epoch) > MAX_EPOCH:
            raise CorruptLogError(f"{what} has a malformed {EPOCH_KEY} {_show(epoch)}", **where)
        e = int(epoch)
    if present[1]:
        if writer is None or not _WRITER.fullmatch(writer):
            raise CorruptLogError(f"{what} has a malformed {WRITER_KEY} {_show(writer)}", **where)
        w = writer.decode("ascii")
    return WriterMark(e, w)


def mark_of(metadata: "dict[bytes, bytes] | None", *, what: str, **where: Any) -> WriterMark:
    """The mark stored in a key/value metadata map (Arrow schema metadata, Avro file metadata)."""
    metadata = metadata or {}
    ek, wk = EPOCH_KEY.encode(), WRITER_KEY.encode()
    return parse_mark(metadata.get(ek), metadata.get(wk), what=what, present=(ek in metadata, wk in metadata),
                      **where)


__all__ = ["EPOCH_KEY", "MAX_EPOCH", "WRITER_KEY", "WriterMark", "mark_of", "parse_mark"]
