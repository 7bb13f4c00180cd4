"""Capture for Python operators: one worker's part of a stream, written as Progress/Messages events by the
rules of a part (the writing counterpart of ``reader.CheckedPart``; public as ``capture.Capture``).

Follows timely's ``capture_into``: the part starts holding a capability at the minimum time; ``send``
records at times the part still holds; ``advance_to`` moves the frontier forward and writes the
consolidated change as one Progress event; ``close`` empties the frontier (the part is finished).
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import warnings
from typing import Any, Iterable

import pyarrow as pa

from ..antichain import Antichain
from ..change_batch import ChangeBatch
from ..errors import (
    HeaderMismatchError,
    LostDataError,
    ProgressError,
    SchemaMismatchError,
    StreamNotFoundError,
)
from ..events import Messages, Progress
from ..header import StreamHeader
from ..log import Log, PartWriter, open_log
from ..records import Records, to_batch
from ..time import Time, TimeType
from .compaction_policy import CompactionPolicy
from .reader import CheckedPart
from .retention_policy import RetentionPolicy

_log = logging.getLogger("eventlog")


class Capture:
    """Writes one part (``worker`` of ``peers``) of ``stream`` into ``log``.

    ``schema`` is required to create a stream and optional when it exists (the header's is used);
    ``encoding`` (``"arrow"``/``"avro"``) and ``time`` (``"int64"``/``"product:K"``) default to the stored
    header's, or to ``"arrow"`` and ``"int64"`` for a new stream. ``advance_to`` and ``close`` return once
    the events so far are durable as the log's ``sync`` mode promises. Reopening a part continues after its
    last event, with the frontier it had. Leaving a ``with`` block by an exception does not finish the part.
    ``expect_next_seq`` (the ``next_seq`` the application saved in its own checkpoint) makes opening raise
    ``LostDataError`` when the part holds less, or the stream is gone, instead of starting a new history.
    ``retention`` (an age: ``"7d"``, ``"12h"``, seconds) drops the stream's times complete longer ago than that,
    now and then, in the background (``retention_policy.RetentionPolicy``; FORMAT.md §10); ``compact`` (a number
    of segments, file logs) merges the part's small sealed segments once it holds that many
    (``compaction_policy.CompactionPolicy``; FORMAT.md §11). ``compression`` (a new stream's, recorded in its header;
    FORMAT.md §13): ``"zstd"`` (Arrow's default), ``"lz4"`` or ``"none"`` for Arrow, ``"deflate"``, ``"zstandard"`` or
    ``"null"`` for Avro (file logs); None follows an existing stream's.

    Reopening a part starts a new writer incarnation: readers void the messages the previous one left at
    times the part had not completed, so the application re-sends every time from ``frontier`` on (FORMAT.md
    §1.1). ``continues=True`` is for an application that instead resumes exactly after ``next_seq`` and
    never re-sends (it knows what reached the log, as the runtime's log sink does): nothing is voided.

    A capture that is garbage-collected without ``close()`` or ``abort()`` emits a ``ResourceWarning`` naming
    its stream and part (like an unclosed file): its part stays open and replayers wait for it.
    """

    def __init__(
        self,
        log: "Log | str | os.PathLike[str]",
        stream: str,
        worker: int,
        peers: int,
        *,
        schema: pa.Schema | None = None,
        encoding: str | None = None,
        time: "str | TimeType | None" = None,
        sync: str | None = None,
        expect_next_seq: int | None = None,
        continues: bool = False,
        retention: "str | float | None" = None,
        compact: int | None = None,
        compression: str | None = None,
    ) -> None:
        self._retention: RetentionPolicy | None = None
        self._compaction: CompactionPolicy | None = None
        self.log = log if isinstance(log, Log) else open_log(log)
        if expect_next_seq is not None:
            self._check_stream_exists(stream, worker, expect_next_seq)
        self.header = self._open_header(stream, peers, schema, encoding, time, compression)
        self.stream = stream
        self.worker = worker
        self.peers = peers
        if retention is not None:
            uri = self.log.uri
            self._retention = RetentionPolicy(lambda: open_log(uri), stream, retention)
        if compact is not None:
            uri = self.log.uri
            self._compaction = CompactionPolicy(lambda: open_log(uri), stream, worker, compact)
        self._writer: PartWriter = self.log.writer(stream, worker, sync=sync, continues=continues)
        self._closed = False
        if expect_next_seq is not None and self._writer.next_seq < expect_next_seq:
            found = self._writer.next_seq
            self._writer.close()
            self._closed = True
            raise LostDataError(
                f"part continues at seq {found}, but the application expected {expect_next_seq}: acknowledged "
                "events are gone (a log deleted, recreated or restored from an older copy)",
                stream=stream, part=worker, seq=found,
            )
        try:
            self._frontier = self._recover_frontier()
        except BaseException:
            self._writer.close()
            self._closed = True
            raise
        if self._frontier.is_empty() and self._writer.next_seq > 1:
            self._writer.close()
            self._closed = True
            raise ProgressError(
                "part is already finished (its frontier is empty); capture into a new stream name",
                stream=stream, part=worker, seq=self._writer.next_seq - 1,
            )

    # -- opening ---------------------------------------------------------------------------------------

    def _check_stream_exists(self, stream: str, worker: int, expect_next_seq: int) -> None:
        """With ``expect_next_seq`` > 1 the stream must exist: creating it anew would start a second history."""
        if isinstance(expect_next_seq, bool) or not isinstance(expect_next_seq, int) or expect_next_seq < 1:
            raise ValueError(f"expect_next_seq must be a sequence id >= 1, got {expect_next_seq!r}")
        if expect_next_seq == 1:
            return
        try:
            self.log.header(stream)
        except StreamNotFoundError:
            raise LostDataError(
                f"stream is gone, but the application expected its part to continue at seq {expect_next_seq}",
                stream=stream, part=worker,
            ) from None

    def _open_header(
        self, stream: str, peers: int, schema: pa.Schema | None, encoding: str | None, time: "str | TimeType | None",
        compression: str | None = None,
    ) -> StreamHeader:
        if schema is not None:
            wanted = StreamHeader(stream, peers, schema, TimeType.parse(time or "int64"), encoding or "arrow",
                                  compression=compression)
            if time is None or encoding is None:  # unspecified settings follow an existing stream
                try:
                    stored = self.log.header(stream)
                    wanted = StreamHeader(
                        stream, peers, schema,
                        TimeType.parse(time) if time is not None else stored.time_type,
                        encoding or stored.encoding, compression=compression,
                    )
                except StreamNotFoundError:
                    pass
            return self.log.create_stream(wanted)
        try:
            stored = self.log.header(stream)
        except StreamNotFoundError:
            raise StreamNotFoundError(
                f"stream {stream!r} does not exist in {self.log.uri}; pass schema= to create it", stream=stream
            ) from None
        diffs = []
        if stored.peers != peers:
            diffs.append(f"peers {peers} != {stored.peers}")
        if encoding is not None and encoding != stored.encoding:
            diffs.append(f"encoding {encoding!r} != {stored.encoding!r}")
        if time is not None and TimeType.parse(time) != stored.time_type:
            diffs.append(f"time type {TimeType.parse(time)} != {stored.time_type}")
        if compression is not None:
            try:
                stored.check_same(dataclasses.replace(stored, compression=compression))
            except HeaderMismatchError as e:
                diffs.append(e.reason.split(": ", 1)[-1])
        if diffs:
            raise HeaderMismatchError("stream exists with another header: " + "; ".join(diffs), stream=stream)
        return stored

    def _recover_frontier(self) -> Antichain:
        """The part's frontier after its last event, rebuilt by the checked reader from its Progress events."""
        if self._writer.next_seq == 1:
            return Antichain([self.header.time_type.minimum])
        with CheckedPart(self.log, self.header, self.worker, start=self._writer.next_seq, progress_only=True) as part:
            return part.frontier

    # -- the capture API -------------------------------------------------------------------------------

    @property
    def frontier(self) -> Antichain:
        """The times this part may still send at (empty once closed)."""
        return self._frontier

    @property
    def next_seq(self) -> int:
        """The sequence id the next event gets."""
        return self._writer.next_seq

    def _check_open(self) -> None:
        if self._closed:
            raise ProgressError("capture is closed", stream=self.stream, part=self.worker)

    def send(self, time: Time, records: Records) -> None:
        """Append records at ``time``; ``time`` must be in advance of the frontier. Empty records write nothing.

        ``records`` is a ``pyarrow.RecordBatch`` or ``Table`` of the stream's schema, or a list of dicts with
        exactly the schema's columns as keys: a column missing from a dict (even a nullable one: pass
        ``None`` for a null) or a key that is not a column raises ``SchemaMismatchError`` naming them, and
        nothing of the call is written."""
        self._check_open()
        t = self.header.time_type.check(time)
        if not self._frontier.less_equal(t):
            raise ProgressError(
                f"cannot send at time {t!r}: not in advance of the frontier {list(self._frontier)}",
                stream=self.stream, part=self.worker, seq=self._writer.next_seq,
            )
        if isinstance(records, (list, tuple)):
            self._check_keys(records)
        batch = to_batch(records, self.header.schema, stream=self.stream, part=self.worker)
        if batch.num_rows:
            self._writer.append(Messages(t, batch))

    def _check_keys(self, rows: "list[Any] | tuple[Any, ...]") -> None:
        """Every dict in ``rows`` has exactly the schema's columns as keys; else a ``SchemaMismatchError`` that
        names the first such record, the columns it lacks and the keys that are not columns. (A missing
        column would otherwise become a silent null, a typo'd key a silent null plus an ignored value.)"""
        names = self.header.schema.names
        columns = set(names)
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                return  # to_batch names it
            if row.keys() == columns:
                continue
            missing = [n for n in names if n not in row]
            extra = [k for k in row if k not in columns]
            problems = []
            if missing:
                problems.append(f"has no {_columns_text(missing)} (pass None for a null)")
            if extra:
                hints = [f"{k!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(
                         str(k), missing, n=1)) else repr(k) for k in extra]
                problems.append(f"has {'a key' if len(extra) == 1 else 'keys'} not in the schema: {', '.join(hints)}")
            raise SchemaMismatchError(f"records[{i}] {' and '.join(problems)}; the stream's columns are "
                                      f"{_columns_text(names, label=False)}", stream=self.stream, part=self.worker)

    def advance_to(self, frontier: "Time | Antichain | Iterable[Time]") -> None:
        """Move the frontier to ``frontier`` (a time, an Antichain or times); it may not move backwards.
        Writes the consolidated capability change and returns once it is durable."""
        self._check_open()
        new = self._as_antichain(frontier)
        old = self._frontier
        if not old.dominates(new):
            raise ProgressError(
                f"frontier cannot move backwards from {list(old)} to {list(new)}",
                stream=self.stream, part=self.worker, seq=self._writer.next_seq,
            )
        if new != old:
            changes = ChangeBatch((t, -1) for t in old)
            changes.extend((t, 1) for t in new)
            self._writer.append(Progress(changes.consolidated()))
            self._frontier = new
        self._writer.sync()
        for policy in (self._retention, self._compaction):
            if policy is not None:
                policy.tick()

    def _as_antichain(self, frontier: "Time | Antichain | Iterable[Time]") -> Antichain:
        tt = self.header.time_type
        if isinstance(frontier, Antichain):
            return Antichain(tt.check(t) for t in frontier)
        single = isinstance(frontier, int) if tt.arity == 0 else (
            isinstance(frontier, tuple) and all(isinstance(c, int) for c in frontier)
        )
        if single or not isinstance(frontier, (list, tuple, set, frozenset)):
            return Antichain([tt.check(frontier)])
        return Antichain(tt.check(t) for t in frontier)

    def flush(self) -> None:
        """Make every event sent so far durable now, whatever the ``sync`` mode: a pipelining Kafka writer
        (``sync="none"``) commits its open transaction and waits for it. Logs whose writers have no ``flush``
        sync as ``advance_to`` does."""
        self._check_open()
        flush = getattr(self._writer, "flush", None)
        if flush is not None:
            flush()
        else:
            self._writer.sync()

    def close(self) -> None:
        """Finish the part: empty its frontier, make everything durable, release the writer."""
        if self._closed:
            return
        try:
            if not self._frontier.is_empty():
                self.advance_to(Antichain())
        finally:
            self._closed = True
            self._writer.close()
            self._close_policies()

    def abort(self) -> None:
        """Release the writer without finishing the part (what was appended is kept and synced)."""
        if not self._closed:
            self._closed = True
            self._writer.close()
            self._close_policies()

    def _close_policies(self) -> None:
        for policy in (self._retention, self._compaction):
            if policy is not None:
                policy.close()

    def __enter__(self) -> "Capture":
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            _log.info("capture of stream %r part %d left by %s: part not finished", self.stream, self.worker,
                      exc_type.__name__)
            self.abort()

    def __del__(self) -> None:
        """Like an unclosed file: a capture collected without ``close()`` or ``abort()`` (nor a ``with`` block)
        leaves its part open, so replayers wait for it forever; say so with a ``ResourceWarning``. Nothing is
        written or closed here (finishing the part would claim times complete that may not be)."""
        if getattr(self, "_closed", True):  # closed, aborted, or __init__ failed before the writer opened
            return
        try:
            warnings.warn(
                f"unclosed Capture of stream {self.stream!r} part {self.worker} (of {self.peers}, frontier "
                f"{list(self._frontier)}) in {self.log.uri}: replayers wait for the part forever; close() finishes "
                "it, abort() leaves it unfinished, a `with` block does either",
                ResourceWarning, stacklevel=2, source=self,
            )
        except Exception:  # noqa: BLE001 - at interpreter shutdown the machinery may be gone
            pass

    def __repr__(self) -> str:
        return f"Capture({self.stream!r}, worker={self.worker}, peers={self.peers}, frontier={list(self._frontier)})"


def _columns_text(names: "list[str]", *, label: bool = True, most: int = 20) -> str:
    """``column 'a'`` / ``columns 'a', 'b'`` (``label=False``: just the names), at most ``most`` names."""
    shown = ", ".join(repr(n) for n in names[:most]) + (f", … ({len(names)} in all)" if len(names) > most else "")
    return f"{'column' if len(names) == 1 else 'columns'} {shown}" if label else shown


__all__ = ["Capture"]
