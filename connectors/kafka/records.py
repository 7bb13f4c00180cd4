"""Kafka records of an eventlog stream, in both framings (FORMAT.md §9).

**Format 2.0: one record per event.** Any Kafka tool reads it:

* key: the part number, decimal ASCII (``b"3"``);
* value: the event in a form a standard library decodes alone — for arrow streams an Arrow IPC stream of
  one batch (``pyarrow.ipc.open_stream``), for avro streams Avro's single-object encoding of the stream's
  ``eventlog.Event`` schema (``EventCodec.record_encoder``);
* headers: ``eventlog.kind`` (``messages`` / ``progress``), ``eventlog.seq`` (decimal), ``eventlog.time``
  (JSON time, Messages only), ``eventlog.epoch`` and ``eventlog.writer`` (the writer, FORMAT.md §9.1);
* timestamp: the time the writer produced it (CreateTime, ms).

Every partition opens with a **header record**: value the stream header JSON (FORMAT.md §2), headers
``eventlog.kind: header`` and, for avro streams, ``eventlog.avro.schema`` (the event schema the values'
fingerprint names).

**Formats 1.x: bundles.** Each record value is a bundle (``schemas/BUNDLE.md``): the header record holds one
STREAM_HEADER message; data records hold consecutive events as EVENT_MESSAGES / EVENT_PROGRESS messages whose
MessageId is the sequence id and whose payload is an event body of the stream's encoding (the standalone form).
Readers still read them; writers no longer write them.

``decode_record`` turns a record of either framing into a ``Frame``: the events it holds with their sequence ids
and kinds, still encoded, so a reader that wants only progress decodes nothing else.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from eventlog import bundle
from eventlog.encoding import codec_for
from eventlog.errors import CorruptLogError
from eventlog.events import Event, Messages
from eventlog.header import StreamHeader
from eventlog.limits import MAX_SEQ
from eventlog.schema_history import SchemaHistory
from eventlog.writer_mark import EPOCH_KEY, MAX_EPOCH, WRITER_KEY, WriterMark, parse_mark

__all__ = ["AVRO_SCHEMA_HEADER", "RecordDecoders", "EPOCH_HEADER", "Frame", "KIND_HEADER", "MAX_EPOCH", "MESSAGES", "PROGRESS", "check_event",
           "SEQ_HEADER", "TIME_HEADER", "WRITER_HEADER", "WriterMark", "decode_record", "event_headers", "events_record",
           "header_record", "header_record_v2", "part_key", "writer_headers", "writer_mark"]

EPOCH_HEADER = EPOCH_KEY
"""Record header holding the writer epoch of a data record (decimal ASCII)."""
WRITER_HEADER = WRITER_KEY
"""Record header holding the id of the writer instance that produced a data record (ASCII)."""
KIND_HEADER = "eventlog.kind"
"""Record header of format 2.0 naming what a record holds: ``header``, ``messages`` or ``progress``."""
SEQ_HEADER = "eventlog.seq"
"""Record header of format 2.0 holding the event's sequence id (decimal ASCII)."""
TIME_HEADER = "eventlog.time"
"""Record header of format 2.0 holding a Messages event's time as JSON (``7``, ``[1,2]``)."""
AVRO_SCHEMA_HEADER = "eventlog.avro.schema"
"""Record header of an avro stream's header record (format 2.0): the Avro event schema of its values."""

MESSAGES = bundle.MSG_EVENT_MESSAGES
"""Kind of a Messages event in a ``Frame``."""
PROGRESS = bundle.MSG_EVENT_PROGRESS
"""Kind of a Progress event in a ``Frame``."""
_KINDS = {b"messages": MESSAGES, b"progress": PROGRESS}
_KIND_NAMES = {MESSAGES: b"messages", PROGRESS: b"progress"}
_MAX_HEADER_VALUE = 4096  # bytes of a seq, kind or time header value a reader accepts (times: up to 64 int64s)


@dataclass
class Frame:
    """What one Kafka record holds, whatever its framing."""

    offset: int
    """The record's Kafka offset."""
    ts: int
    """The record's timestamp (ms since the epoch; 1.x: the bundle's own timestamp)."""
    version: int
    """The framing: 2 (one event per record) or 1 (a bundle)."""
    headers: list | None = None
    """The record's Kafka headers."""
    stream_header: bytes | None = None
    """The stream header JSON, for the record that opens a partition; None for data records."""
    seqs: list[int] = field(default_factory=list)
    """Sequence ids of the events, consecutive."""
    kinds: list[int] = field(default_factory=list)
    """``MESSAGES`` or ``PROGRESS`` per event."""
    bodies: list = field(default_factory=list)
    """The encoded events: record values (2.0) or bundle payloads (1.x) — see ``decoder``."""
    time: bytes | None = None
    """The value of the record's ``eventlog.time`` header (2.0; the last one when it repeats), None without one."""

    @property
    def is_header(self) -> bool:
        """True for the record that opens a partition."""
        return self.stream_header is not None

    @property
    def first_seq(self) -> int:
        return self.seqs[0]

    @property
    def last_seq(self) -> int:
        return self.seqs[-1]

    def mark(self, stream: str, part: int) -> WriterMark:
        """The writer of the record (epoch 0, no id, for records without writer headers)."""
        return writer_mark(self.headers, stream=stream, part=part, offset=self.offset)

    def header(self, *, path: str) -> StreamHeader:
        """The stream header held by a header record."""
        assert self.stream_header is not None
        return StreamHeader.from_json(self.stream_header, path=path)


def part_key(part: int) -> bytes:
    """The key of every record of ``part`` (format 2.0)."""
    return str(part).encode()


def writer_headers(mark: WriterMark) -> list[tuple[str, bytes]]:
    """The Kafka record headers naming the writer of a data record."""
    return mark.items()


def event_headers(seq: int, event: Event, writer: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """The Kafka record headers of one event's record (format 2.0)."""
    if isinstance(event, Messages):
        return [(KIND_HEADER, b"messages"), (SEQ_HEADER, str(seq).encode()),
                (TIME_HEADER, json.dumps(event.time, separators=(",", ":")).encode()), *writer]
    return [(KIND_HEADER, b"progress"), (SEQ_HEADER, str(seq).encode()), *writer]


def writer_mark(headers: "Sequence[tuple[str, bytes | None]] | None", *, stream: str, part: int,
                offset: int) -> WriterMark:
    """The writer of a data record from its Kafka headers (epoch 0 and no id when absent); a malformed
    value raises CorruptLogError naming the Kafka offset. When a header repeats, the last one counts."""
    values: dict[str, bytes | None] = {}
    for key, value in headers or ():
        if key in (EPOCH_HEADER, WRITER_HEADER):
            values[key] = value
    found = (values.get(EPOCH_HEADER), values.get(WRITER_HEADER), EPOCH_HEADER in values, WRITER_HEADER in values)
    mark = _MARKS.get(found)
    if mark is None:  # every record of a writer carries the same two values: each pair is parsed once
        mark = parse_mark(found[0], found[1], what=f"record at kafka offset {offset}", present=found[2:],
                          stream=stream, part=part, offset=offset)
        if len(_MARKS) >= 256:
            _MARKS.clear()
        _MARKS[found] = mark
    return mark


_MARKS: dict[tuple, WriterMark] = {}
"""``writer_mark``'s answers by header values (valid ones only: a malformed value raises every time)."""


def header_record_v2(header: StreamHeader, avro_schema: str | None) -> tuple[bytes, list[tuple[str, bytes]]]:
    """Value and headers of the record that opens each partition (format 2.0)."""
    headers = [(KIND_HEADER, b"header")]
    if avro_schema is not None:
        headers.append((AVRO_SCHEMA_HEADER, avro_schema.encode()))
    return header.to_json(), headers


def header_record(header: StreamHeader) -> bytes:
    """The value of the record that opens each partition (formats 1.x: a bundle)."""
    return bundle.encode([header.to_json()], 1, bundle.MSG_STREAM_HEADER, bundle_ts=_now_ms())


def events_record(first_seq: int, kinds: Sequence[int], bodies: Sequence[bytes]) -> bytes:
    """One record value holding consecutive events ``first_seq …`` (formats 1.x: a bundle)."""
    return bundle.encode(list(bodies), first_seq, list(kinds), bundle_ts=_now_ms())


def decode_record(value: bytes | None, headers: list | None, ts: int, *, stream: str, part: int,
                  offset: int) -> Frame:
    """The frame of a record of either framing: one with an ``eventlog.kind`` header is format 2.0, any other a
    1.x bundle. Damage raises CorruptLogError naming the Kafka offset."""
    kind = None
    seq = time_ = None
    for key, v in headers or ():
        if key == KIND_HEADER:
            kind = v
        elif key == SEQ_HEADER:
            seq = v
        elif key == TIME_HEADER:
            time_ = v
    where = {"stream": stream, "part": part, "offset": offset}
    if value is None:
        raise CorruptLogError(f"record at kafka offset {offset} has no value", **where)
    if kind is None:
        return _bundle_frame(value, headers, offset, where)
    if kind == b"header":
        return Frame(offset, ts, 2, headers, stream_header=value)
    code = _KINDS.get(kind)
    if code is None:
        raise CorruptLogError(f"record at kafka offset {offset} has {KIND_HEADER} {bytes(kind or b'')[:30]!r}, not "
                              f"header, messages or progress", **where)
    if seq is None or len(seq) > 20 or not seq.isdigit() or not 1 <= int(seq) <= MAX_SEQ:
        raise CorruptLogError(f"record at kafka offset {offset} has no valid {SEQ_HEADER} header "
                              f"({bytes(seq or b'')[:30]!r})", **where)
    if code == MESSAGES and (time_ is None or len(time_) > _MAX_HEADER_VALUE):
        raise CorruptLogError(f"messages record at kafka offset {offset} has no valid {TIME_HEADER} header", **where)
    return Frame(offset, ts, 2, headers, seqs=[int(seq)], kinds=[code], bodies=[value], time=time_)


def check_event(frame: Frame, i: int, seq: int, event: Event, *, stream: str, part: int) -> None:
    """A decoded event must be what its record's headers say (format 2.0): the sequence id, the kind and, for
    Messages, the time. Raises CorruptLogError naming the Kafka offset."""
    where = {"stream": stream, "part": part, "seq": frame.seqs[i], "offset": frame.offset}
    if seq != frame.seqs[i]:
        raise CorruptLogError(f"event carries seq {seq}, its record says {frame.seqs[i]}", **where)
    if isinstance(event, Messages) != (frame.kinds[i] == MESSAGES):
        raise CorruptLogError(f"the record says {_KIND_NAMES[frame.kinds[i]].decode()}, its value holds another kind",
                              **where)
    if frame.version == 2 and isinstance(event, Messages):
        stated = frame.time
        if stated != json.dumps(event.time, separators=(",", ":")).encode():
            raise CorruptLogError(f"the record's {TIME_HEADER} header {bytes(stated or b'')[:60]!r} is not its event's "
                                  f"time {event.time}", **where)


def _bundle_frame(value: bytes, headers: list | None, offset: int, where: dict) -> Frame:
    try:
        b = bundle.decode(value)
    except bundle.BundleError as e:
        raise CorruptLogError(f"record at kafka offset {offset} is not a valid bundle: {e.reason}", **where) from None
    if b.count == 1 and int(b.types[0]) == bundle.MSG_STREAM_HEADER:
        return Frame(offset, b.ts, 1, headers, stream_header=bytes(b.payload(0)))
    frame = Frame(offset, b.ts, 1, headers, seqs=b.ids.tolist(), kinds=b.types.tolist())
    for i, kind in enumerate(frame.kinds):
        if kind not in (MESSAGES, PROGRESS):
            raise CorruptLogError(f"unexpected message type {kind} in a data record", **where, seq=frame.seqs[i])
    frame.bodies = [b.payload(i) for i in range(b.count)]
    return frame


def _now_ms() -> int:
    return int(time.time() * 1000)


class RecordDecoders:
    """The decoders of a part's record values, one per schema version of the stream (FORMAT.md §12): event
    ``seq`` is decoded with the schema its part wrote it with; a version recorded after these were made is
    found by reading the history again (``reload``)."""

    def __init__(self, header: StreamHeader, part: int, history: "SchemaHistory | None",
                 reload: "Callable[[], SchemaHistory | None] | None" = None) -> None:
        self.header, self.part, self.history, self._reload = header, part, history, reload
        self._framing = 2 if header.version[0] >= 2 else 1
        self._by_version: dict[int, Any] = {}

    def _decoder(self, version: int) -> Any:
        decoder = self._by_version.get(version)
        if decoder is None:
            header = self.history.header_of(self.header, version) if self.history is not None else self.header
            codec = codec_for(header)
            decoder = self._by_version[version] = (codec.record_decoder() if self._framing == 2
                                                   else codec.standalone_decoder())
        return decoder

    def decode(self, seq: int, body: Any) -> Any:
        """``(decoded seq, event)`` of the value of event ``seq`` (CorruptLogError as the decoders raise it)."""
        version = self.history.version_at(self.part, seq) if self.history is not None else 0
        try:
            return self._decoder(version).decode(body)
        except CorruptLogError:
            if self._reload is None or self.history == (fresh := self._reload()):
                raise
            self.history = fresh
            return self._decoder(fresh.version_at(self.part, seq) if fresh is not None else 0).decode(body)

