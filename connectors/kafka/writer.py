"""Appending one part to its Kafka partition: events framed as bundles, acknowledged on sync.

The producer is idempotent (``enable.idempotence``, ``acks=all``) unless the user's settings say otherwise.
``append`` buffers event bodies and hands a record to the producer once ``bundle_bytes`` or
``bundle_events`` is reached; ``sync`` (``Capture.advance_to``/``close``) sends the rest and returns only
when the broker acknowledged everything, raising DeliveryError on any failure — nothing is dropped quietly.
A writer that (re)starts continues after the last sequence id found in its partition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from confluent_kafka import KafkaException, Producer

from eventlog import bundle
from eventlog.encoding import SegmentEncoder
from eventlog.errors import DeliveryError, EventLogError
from eventlog.events import Event, Messages
from eventlog.header import StreamHeader
from eventlog.log import PartWriter

from .records import events_record

if TYPE_CHECKING:
    from .log import KafkaLog


class KafkaPartWriter(PartWriter):
    """The writer of one part; one per part at a time is the caller's duty (Kafka has no lock for it)."""

    def __init__(self, log: "KafkaLog", header: StreamHeader, part: int, encoder: SegmentEncoder) -> None:
        self._log = log
        self.header = header
        self.stream = header.stream
        self.part = part
        self._topic = log.target.topic(header.stream)
        self._encoder = encoder
        self._errors: list[str] = []
        self._producer: Producer | None = log.producer()
        self._next = log.last_seq(header.stream, part) + 1
        self._bodies: list[bytes] = []
        self._kinds: list[int] = []
        self._pending_bytes = 0
        self._first = self._next
        self.records_sent = 0
        """Kafka records produced by this writer."""

    @property
    def next_seq(self) -> int:
        return self._next

    def _on_delivery(self, err, msg) -> None:  # noqa: ANN001
        if err is not None:
            self._errors.append(f"{err.str()} ({msg.topic()}[{msg.partition()}])")

    def _raise_errors(self) -> None:
        self._errors.extend(e for e in self._log.fatal_errors() if e not in self._errors)
        if self._errors:
            first, n = self._errors[0], len(self._errors)
            raise DeliveryError(f"kafka did not acknowledge {n} record(s): {first}", stream=self.stream,
                                part=self.part)

    def append(self, event: Event) -> int:
        if self._producer is None:
            raise EventLogError("writer is closed", stream=self.stream, part=self.part)
        self._raise_errors()
        seq = self._next
        body = self._encoder.encode(seq, event)
        if not self._bodies:
            self._first = seq
        self._bodies.append(body)
        self._kinds.append(bundle.MSG_EVENT_MESSAGES if isinstance(event, Messages) else bundle.MSG_EVENT_PROGRESS)
        self._pending_bytes += len(body)
        self._next = seq + 1
        if self._pending_bytes >= self._log.bundle_bytes or len(self._bodies) >= self._log.bundle_events:
            self._send()
        return seq

    def _send(self) -> None:
        if not self._bodies:
            return
        assert self._producer is not None
        value = events_record(self._first, self._kinds, self._bodies)
        while True:
            try:
                self._producer.produce(self._topic, value=value, partition=self.part, on_delivery=self._on_delivery)
                break
            except BufferError:  # the producer's queue is full: let it deliver, then retry
                self._producer.poll(0.05)
            except KafkaException as e:
                raise DeliveryError(f"kafka refused a record: {e}", stream=self.stream, part=self.part,
                                    seq=self._first) from None
        self._producer.poll(0)
        self.records_sent += 1
        self._bodies, self._kinds, self._pending_bytes = [], [], 0

    def sync(self) -> None:
        if self._producer is None:
            return
        self._send()
        remaining = self._producer.flush(self._log.timeout)
        self._raise_errors()
        if remaining:
            raise DeliveryError(f"{remaining} record(s) not acknowledged within {self._log.timeout} s",
                                stream=self.stream, part=self.part)

    def close(self) -> None:
        if self._producer is None:
            return
        try:
            self.sync()
        finally:
            self._producer = None
