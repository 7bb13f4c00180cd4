"""One writer at a time: the check readers apply to each data record of a part (FORMAT.md "Kafka log").

Every data record carries its writer's epoch and id. Read in partition order, the epochs of a part never
decrease; within an epoch all records come from one writer; a writer with a new epoch continues after the
highest sequence id already in the part. A record of the same writer that repeats sequence ids already
read is a producer retry: the reader drops those events as duplicates. Anything else means two histories
were interleaved (two writers on one part without fencing, a zombie writer, a topic recreated under a
following reader): the reader raises ``InterleavedWritersError`` rather than dropping either history.
"""

from __future__ import annotations

from .errors import InterleavedWritersError
from .records import WriterMark


class WriterHistory:
    """Tracks the current writer of one part while its records are read in order."""

    def __init__(self, stream: str, part: int) -> None:
        self.stream = stream
        self.part = part
        self.mark: WriterMark | None = None
        """The writer of the records read so far (None before the first data record)."""
        self.last_seq = 0
        """The highest sequence id in the records read so far."""
        self._since_offset: int | None = None

    def check(self, mark: WriterMark, first_seq: int, last_seq: int, offset: int) -> None:
        """Check the record at Kafka ``offset`` (events ``first_seq … last_seq``, written by ``mark``)
        against the records before it; raises InterleavedWritersError."""
        current = self.mark
        if current is not None and mark != current:
            if mark.epoch < current.epoch:
                self._fail(f"record of writer epoch {mark.epoch} after records of epoch {current.epoch}",
                           mark, first_seq, offset)
            if mark.epoch == current.epoch:
                self._fail(f"two writers with epoch {mark.epoch} ({_name(current)} and {_name(mark)})",
                           mark, first_seq, offset)
            if first_seq <= self.last_seq:
                self._fail(f"writer epoch {mark.epoch} starts at seq {first_seq}, but epoch {current.epoch} "
                           f"already wrote up to seq {self.last_seq}", mark, first_seq, offset)
        if current is None or mark != current:
            self.mark = mark
            self._since_offset = offset
        self.last_seq = max(self.last_seq, last_seq)

    def _fail(self, what: str, mark: WriterMark, seq: int, offset: int) -> None:
        since = f"; the current writer's records begin at kafka offset {self._since_offset}" \
            if self._since_offset is not None else ""
        raise InterleavedWritersError(
            f"two writers interleaved in one part: {what} at kafka offset {offset}{since}. The part holds two "
            f"histories; neither is dropped as duplicates", stream=self.stream, part=self.part, seq=seq,
            offset=offset)


def _name(mark: WriterMark) -> str:
    return f"writer {mark.writer}" if mark.writer is not None else "a writer without id"
