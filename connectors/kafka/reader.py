"""Reading one part from its Kafka partition: ``assign()`` at explicit offsets, no consumer group.

Sequence ids, not Kafka offsets, are the log's offsets: a start sequence id is mapped to a Kafka offset
by a binary search over the records' ``LastMessageId``; events whose sequence id was already read (a
retried or restarted producer) are dropped and counted; a gap raises SequenceError. The end of the
partition is recognised by librdkafka's partition-EOF event (not by ListOffsets, whose answers differ
between brokers).
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from eventlog import bundle
from eventlog.encoding import SegmentDecoder
from eventlog.errors import CorruptLogError, EventLogError, SequenceError
from eventlog.events import Entry
from eventlog.log import PartReader

from .records import decode_record, is_header

if TYPE_CHECKING:
    from .log import KafkaLog

_BATCH = 500


def new_consumer(log: "KafkaLog") -> Consumer:
    """A consumer for explicit assignment: never joins a group, never commits."""
    return Consumer(log.target.consumer(**{
        "group.id": f"eventlog-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 20,
        "fetch.error.backoff.ms": 10,
    }))


def scan_partition(log: "KafkaLog", consumer: Consumer, topic: str, part: int, offset: int
                   ) -> Iterator[tuple[int, bundle.Bundle]]:
    """``(kafka offset, bundle)`` of one partition from ``offset`` to its current end (partition EOF)."""
    consumer.assign([TopicPartition(topic, part, offset)])
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
                raise EventLogError(f"kafka read error: {err.str()}", stream=stream, part=part)
            yield m.offset(), decode_record(m.value(), stream=stream, part=part, offset=m.offset())


class KafkaPartReader(PartReader):
    """Reads one part of a stream from its partition; iterating again continues with new records.

    An iteration ends at the partition's end, or, once it yielded events, as soon as no more are queued
    (so a live part is never held back); an iteration that yields nothing has reached the end.
    """

    def __init__(self, log: "KafkaLog", stream: str, part: int, start: int, progress_only: bool,
                 decoder: SegmentDecoder) -> None:
        self._log = log
        self.stream = stream
        self.part = part
        self._topic = log.target.topic(stream)
        self._start = start
        self._next = start
        self._progress_only = progress_only
        self._decoder = decoder
        self._consumer: Consumer | None = None
        self._at_eof = False
        self.duplicates = 0
        """Events dropped because their sequence id had been read already."""

    @property
    def next_seq(self) -> int:
        return self._next

    def _open(self) -> Consumer:
        offset = self._log.offset_for_seq(self.stream, self.part, self._start) if self._start > 1 else 0
        consumer = new_consumer(self._log)
        consumer.assign([TopicPartition(self._topic, self.part, offset)])
        return consumer

    def __iter__(self) -> Iterator[Entry]:
        self.tail_problem = None
        if self._consumer is None:
            self._consumer = self._open()
        consumer = self._consumer
        deadline = time.monotonic() + self._log.timeout
        yielded = False
        while True:
            try:
                # drain what is queued without waiting; an iteration that yielded events returns then (so a
                # live part is not held back), one that yielded nothing waits for data or the partition EOF
                msgs = consumer.consume(_BATCH, timeout=0)
                if not msgs:
                    if self._at_eof or yielded:
                        return
                    msgs = consumer.consume(1, timeout=0.05)
            except KafkaException as e:
                raise EventLogError(f"kafka read error: {e}", stream=self.stream, part=self.part) from None
            if not msgs:
                if time.monotonic() > deadline:
                    raise EventLogError(f"no answer from kafka within {self._log.timeout} s",
                                        stream=self.stream, part=self.part)
                continue
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        self._at_eof = True
                        continue
                    raise EventLogError(f"kafka read error: {err.str()}", stream=self.stream, part=self.part)
                self._at_eof = False
                for entry in self._entries(m.offset(), m.value()):
                    yielded = True
                    yield entry
            if self._at_eof:
                return

    def _entries(self, offset: int, value: bytes) -> Iterator[Entry]:
        b = decode_record(value, stream=self.stream, part=self.part, offset=offset)
        if is_header(b) or b.count == 0:
            return
        ids, types = b.ids.tolist(), b.types.tolist()
        for i, (seq, kind) in enumerate(zip(ids, types)):
            if seq < self._next:
                if seq >= self._start:
                    self.duplicates += 1
                continue
            if seq > self._next:
                raise SequenceError(f"gap in sequence ids: expected {self._next}, got {seq} (kafka offset {offset})",
                                    stream=self.stream, part=self.part, seq=seq, offset=offset)
            self._next = seq + 1
            if kind == bundle.MSG_EVENT_MESSAGES and self._progress_only:
                continue
            if kind not in (bundle.MSG_EVENT_MESSAGES, bundle.MSG_EVENT_PROGRESS):
                raise CorruptLogError(f"unexpected message type {kind} in a data record",
                                      stream=self.stream, part=self.part, seq=seq, offset=offset)
            try:
                got, event = self._decoder.decode(b.payload(i))
            except CorruptLogError as e:
                raise CorruptLogError(e.reason, stream=self.stream, part=self.part, seq=seq, offset=offset) from None
            if got != seq:
                raise CorruptLogError(f"event carries seq {got}, its bundle says {seq}",
                                      stream=self.stream, part=self.part, seq=seq, offset=offset)
            yield Entry(seq, event)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
