"""Reading one part from its Kafka partition: ``assign()`` at explicit offsets, no consumer group.

Sequence ids, not Kafka offsets, are the log's offsets: a start sequence id is mapped to a Kafka offset
by a binary search over the records' sequence ids (the ``eventlog.seq`` header; 1.x: ``LastMessageId``); events whose sequence id was already read (a
retried producer) are dropped and counted; a gap raises SequenceError. The end of the partition is
recognised by librdkafka's partition-EOF event (not by ListOffsets, whose answers differ between brokers).

Consumers read committed records only (``isolation.level=read_committed``: a fenced or crashed writer's
unsynced events are never seen) and never jump to another offset by themselves
(``auto.offset.reset=error``): a partition that lost records under a reader raises LostDataError. Each
record's writer is checked (``WriterHistory``), so two interleaved histories raise instead of being
dropped as duplicates; a reader that starts past the part's end, or at seq 1 of a partition whose start
was deleted, raises LostDataError.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Callable, Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from eventlog.encoding import EventCodec, SegmentDecoder
from eventlog.errors import CorruptLogError, EventLogError, SequenceError
from eventlog.events import Entry
from eventlog.header import StreamHeader
from eventlog.log import PartReader
from eventlog.schema_history import SchemaHistory

from .errors import LostDataError
from .history import WriterHistory
from .records import MESSAGES, Frame, RecordDecoders, check_event, decode_record

if TYPE_CHECKING:
    from .log import KafkaLog

_BATCH = 500
_NAMED_DUPLICATES = 100
"""Dropped duplicates a reader remembers the place of (``duplicate_records``); it counts them all."""


def new_consumer(log: "KafkaLog", error_cb=None, *, fetch_wait_ms: int = 20) -> Consumer:  # noqa: ANN001
    """A consumer for explicit assignment: never joins a group, never commits. ``fetch_wait_ms``: how long the
    broker may hold a fetch that finds nothing new (``fetch.wait.max.ms``, unless the user set it): a reader
    following a live part waits up to that for new records; a scan (``scan_partition``) waits about that once
    for its end of partition."""
    extra = {"error_cb": error_cb} if error_cb is not None else {}
    return Consumer(log.target.consumer(**extra, **READ_SETTINGS, **{
        "group.id": f"eventlog-{uuid.uuid4().hex}",
        "fetch.wait.max.ms": fetch_wait_ms,
    }))


READ_SETTINGS: dict[str, object] = {
    "enable.auto.commit": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "error",
    "isolation.level": "read_committed",
    "fetch.error.backoff.ms": 10,
    # librdkafka stops fetching for fetch.queue.backoff.ms (1 s) once its queue holds queued.max.messages.kbytes
    # (64 MiB): a reader that decodes slower than the broker sends (large events) found the queue dry and waited
    # out most of that second; with 5 ms the fetcher refills it as soon as the reader has taken some
    "fetch.queue.backoff.ms": 5,
}
"""The settings of every part reader's consumer (``new_consumer``; the user's settings override them)."""


def lost_position(err: KafkaError, stream: str, part: int, topic: str, position: int | None) -> LostDataError:
    """The error for a consumer whose fetch position left the partition's range (records deleted under it,
    a topic recreated shorter)."""
    at = f"kafka offset {position}" if position is not None else "its position"
    return LostDataError(f"{topic}[{part}] no longer holds {at}: records were deleted or the topic was "
                         f"recreated ({err.str()})", stream=stream, part=part, offset=position)


def _out_of_range(err: KafkaError) -> bool:
    return err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)


_UNKNOWN = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}


def _check_gone(log: "KafkaLog", err: KafkaError, stream: str, part: int, topic: str) -> None:
    """After an unknown-topic/partition error: raise LostDataError when the cluster confirms that the
    partition is gone; return when it exists (a transient error while metadata propagates)."""
    partitions = log.partitions(topic)
    if partitions is None or partitions <= part:
        raise LostDataError(f"{topic}[{part}] is gone: the topic was deleted or has fewer partitions "
                            f"({err.str()})", stream=stream, part=part)


def frame_of(m, stream: str, part: int) -> Frame:  # noqa: ANN001 - a confluent_kafka Message
    """The frame of a consumed record."""
    return decode_record(m.value(), m.headers(), m.timestamp()[1], stream=stream, part=part, offset=m.offset())


def scan_partition(log: "KafkaLog", consumer: Consumer, topic: str, part: int, offset: int) -> Iterator[Frame]:
    """The records of one partition from ``offset`` to its current end (partition EOF); committed records
    only. ``offset`` must lie between the partition's watermarks (else LostDataError). The consumer is unassigned
    when the scan ends or is dropped: left assigned, it would go on fetching the partition (a writer's own records,
    into its queue) every ``fetch.wait.max.ms`` for as long as the log is open."""
    consumer.assign([TopicPartition(topic, part, offset)])
    token = _SCANS[id(consumer)] = object()
    try:
        yield from _scan(log, consumer, topic, part, offset)
    finally:
        # a scan dropped late (held by an exception's traceback) must not unassign the scan that followed it
        if _SCANS.get(id(consumer)) is token:
            del _SCANS[id(consumer)]
            try:
                consumer.unassign()
            except (KafkaException, RuntimeError):  # closed with the log meanwhile: nothing is fetched any more
                pass


_SCANS: dict[int, object] = {}
"""The scan each consumer runs now (by ``id``): only that scan unassigns it."""


def _scan(log: "KafkaLog", consumer: Consumer, topic: str, part: int, offset: int) -> Iterator[Frame]:
    deadline = time.monotonic() + log.timeout
    stream = log.target.stream_of(topic) or topic
    while True:
        msgs = consumer.consume(_BATCH, timeout=0) or consumer.consume(1, timeout=0.05)
        if not msgs:
            if time.monotonic() > deadline:
                raise EventLogError(f"no answer from kafka for {topic}[{part}] within {log.timeout} s",
                                    stream=stream, part=part)
            continue
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return
                if _out_of_range(err):
                    raise lost_position(err, stream, part, topic, offset)
                if err.code() in _UNKNOWN and time.monotonic() < deadline:
                    _check_gone(log, err, stream, part, topic)
                    continue
                if err.retriable() and time.monotonic() < deadline:  # a leader settling after a restart
                    continue
                raise EventLogError(f"kafka read error: {err.str()}", stream=stream, part=part)
            offset = m.offset()
            yield frame_of(m, stream, part)


class KafkaPartReader(PartReader):
    """Reads one part of a stream from its partition; iterating again continues with new records.

    An iteration ends at the partition's end, or, once it yielded events, as soon as no more are queued
    (so a live part is never held back); an iteration that yields nothing has reached the end.
    """

    def __init__(self, log: "KafkaLog", header: StreamHeader, part: int, start: int, progress_only: bool,
                 codec: EventCodec, *, history: "SchemaHistory | None" = None,
                 reload: "Callable[[], SchemaHistory | None] | None" = None) -> None:
        self._log = log
        self.stream = stream = header.stream
        self._version = 2 if header.version[0] >= 2 else 1  # the framing the stream's records must have
        self.part = part
        self._topic = log.target.topic(stream)
        self._start = start
        self._next = start
        self._progress_only = progress_only
        self._decoder: SegmentDecoder = codec.record_decoder() if self._version == 2 else codec.standalone_decoder()
        self._decoders = RecordDecoders(header, part, history, reload)  # each record with its schema (FORMAT.md §12)
        self._consumer: Consumer | None = None
        self._at_eof = False
        self._position: int | None = None  # Kafka offset of the next record to read
        self._end = -1  # the highest partition end (EOF offset) seen so far
        self._opening = False  # the first record of a read from the partition's start must be the header
        self._history = WriterHistory(stream, part)
        self._down_since: float | None = None  # when the consumer last lost every broker (None: it has one)
        self._down_why = ""
        self.duplicates = 0
        """Events dropped because their sequence id had been read already (producer retries)."""
        self.duplicate_records: list[tuple[int, int]] = []
        """``(seq, kafka offset)`` of the first dropped duplicates (at most ``_NAMED_DUPLICATES``)."""

    @property
    def next_seq(self) -> int:
        return self._next

    def _open(self) -> Consumer:
        log, part = self._log, self.part
        log.check_partitions(self.stream)
        lo, hi = log.watermarks(self._topic, part)
        if self._start == 1:
            if lo > 0:
                raise LostDataError(f"the partition starts at kafka offset {lo}: its stream header and the events "
                                    f"before it were deleted (retention, delete_records), so reading from seq 1 is "
                                    f"impossible; start at the part's first_seq (part_stats)",
                                    stream=self.stream, part=part, seq=1, offset=lo)
            offset = lo
            self._opening = True
        else:
            last = log.last_seq(self.stream, part)
            if self._start > last + 1:
                raise LostDataError(f"cannot resume at seq {self._start}: the part ends at seq {last} (kafka "
                                    f"offsets {lo}..{hi}); events this position was saved after are gone (topic "
                                    f"recreated or truncated)", stream=self.stream, part=part, seq=self._start,
                                    offset=hi)
            offset = log.offset_for_seq(self.stream, part, self._start)
        consumer = new_consumer(log, self._on_error)
        consumer.assign([TopicPartition(self._topic, part, offset)])
        self._position = offset
        return consumer

    def _on_error(self, err) -> None:  # noqa: ANN001 - librdkafka's KafkaError
        if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            if self._down_since is None:
                self._down_since = time.monotonic()
            self._down_why = err.str()

    def _check_cluster(self) -> None:
        """A following reader whose cluster has been gone for the log's timeout fails instead of waiting."""
        if self._down_since is not None and time.monotonic() - self._down_since > self._log.timeout:
            e = self._log.unavailable(f"reading stream {self.stream!r} part {self.part}: {self._down_why}")
            raise type(e)(e.reason, stream=self.stream, part=self.part, offset=self._position)

    def __iter__(self) -> Iterator[Entry]:
        self.tail_problem = None
        if self._consumer is None:
            self._consumer = self._open()
        consumer = self._consumer
        deadline = time.monotonic() + self._log.timeout
        while True:
            try:
                # drain what is queued without waiting; when the queue is empty, wait for more or for the
                # partition's EOF: an iteration reads everything the partition held when it started, as a file
                # reader's does (it used to return as soon as the queue ran dry, which under load was long before
                # the end, and a caller taking one pass for the whole part missed the rest), and yields each
                # event as it comes, so a live part is not held back
                msgs = consumer.consume(_BATCH, timeout=0)
                if msgs:
                    self._down_since = None  # it reached a broker
                else:
                    self._check_cluster()
                    if self._at_eof:
                        return
                    msgs = consumer.consume(1, timeout=0.05)
            except KafkaException as e:
                raise EventLogError(f"kafka read error: {e}", stream=self.stream, part=self.part) from None
            if not msgs:
                if time.monotonic() > deadline:
                    raise EventLogError(f"no answer from kafka within {self._log.timeout} s",
                                        stream=self.stream, part=self.part)
                continue
            deadline = time.monotonic() + self._log.timeout  # records keep coming: the wait starts again
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        self._eof(m.offset())
                        continue
                    if _out_of_range(err):
                        raise lost_position(err, self.stream, self.part, self._topic, self._position)
                    if err.code() in _UNKNOWN and time.monotonic() < deadline:
                        _check_gone(self._log, err, self.stream, self.part, self._topic)
                        continue
                    if err.retriable() and time.monotonic() < deadline:  # a leader settling after a restart
                        continue
                    raise EventLogError(f"kafka read error: {err.str()}", stream=self.stream, part=self.part)
                self._at_eof = False
                self._position = m.offset() + 1
                yield from self._entries(frame_of(m, self.stream, self.part))
            if self._at_eof:
                return

    def _eof(self, end: int) -> None:
        if end < self._end:
            raise LostDataError(f"the partition's end moved back from kafka offset {self._end} to {end}: records "
                                f"were deleted or the topic was recreated", stream=self.stream, part=self.part,
                                offset=end)
        self._end = end
        self._at_eof = True

    def _entries(self, frame: Frame) -> Iterator[Entry]:
        offset = frame.offset
        opening, self._opening = self._opening, False
        if frame.version != self._version:
            raise CorruptLogError(f"a record framed as format {frame.version}.x in a stream of format {self._version}.x "
                                  f"(kafka offset {offset})", stream=self.stream, part=self.part, offset=offset)
        if frame.is_header:
            return
        if opening:
            raise CorruptLogError(f"the partition does not open with the stream header (kafka offset {offset})",
                                  stream=self.stream, part=self.part, offset=offset)
        if not frame.seqs:
            return
        mark = frame.mark(self.stream, self.part)
        self._history.check(mark, frame.first_seq, frame.last_seq, offset)
        for i, (seq, kind) in enumerate(zip(frame.seqs, frame.kinds)):
            if seq < self._next:
                if seq >= self._start:
                    self.duplicates += 1
                    if len(self.duplicate_records) < _NAMED_DUPLICATES:
                        self.duplicate_records.append((seq, offset))
                continue
            if seq > self._next:
                raise SequenceError(f"gap in sequence ids: expected {self._next}, got {seq} (kafka offset {offset})",
                                    stream=self.stream, part=self.part, seq=seq, offset=offset)
            self._next = seq + 1
            if kind == MESSAGES and self._progress_only:
                continue
            try:
                got, event = self._decoders.decode(seq, frame.bodies[i])
            except CorruptLogError as e:
                raise CorruptLogError(e.reason, stream=self.stream, part=self.part, seq=seq, offset=offset) from None
            check_event(frame, i, got, event, stream=self.stream, part=self.part)
            self.epoch = mark.epoch
            yield Entry(seq, event, frame.ts)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
