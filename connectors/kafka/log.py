"""The Kafka log: a topic per stream, a partition per part, one bundle of events per record.

Where things are (FORMAT.md §8): the topic of stream ``s`` is ``prefix.s`` (or ``s`` without a prefix);
part ``i`` is partition ``i``; every partition opens with a header record, so a reader of any part meets
the header before any data, and ``header()`` reads it from partition 0, offset 0.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from eventlog.encoding import codec_for
from eventlog.errors import (
    CorruptLogError,
    DeliveryError,
    EventLogError,
    HeaderMismatchError,
    InvalidURIError,
    StreamNotFoundError,
)
from eventlog.header import StreamHeader, check_stream_name
from eventlog.log import Log, PartStats

from .config import KafkaTarget, parse_kafka_uri
from .reader import KafkaPartReader, new_consumer, scan_partition
from .records import header_of, header_record, is_header
from .writer import KafkaPartWriter


class KafkaLog(Log):
    """Streams on a Kafka cluster; see the module doc for the layout and ``connectors.kafka.config`` for
    settings. ``timeout`` bounds every wait on the cluster (seconds); ``bundle_bytes``/``bundle_events``
    cut records; ``replication_factor`` applies to topics this log creates (default: the broker's)."""

    def __init__(
        self,
        uri: str,
        *,
        config: dict[str, Any] | None = None,
        timeout: float = 30.0,
        bundle_bytes: int = 256 << 10,
        bundle_events: int = 4096,
        replication_factor: int | None = None,
        sync: str | None = None,
    ) -> None:
        self.uri = uri
        self.target: KafkaTarget = parse_kafka_uri(uri, config)
        self.timeout = timeout
        self.bundle_bytes = bundle_bytes
        self.bundle_events = bundle_events
        self.replication_factor = replication_factor
        try:
            self._admin = AdminClient(self.target.admin())
        except KafkaException as e:
            raise InvalidURIError(f"bad kafka settings for {uri!r}: {e.args[0].str()}") from None
        self._headers: dict[str, StreamHeader] = {}
        self._consumer = None  # for metadata and scans; made on first use
        self._shared_producer: Producer | None = None
        self._fatal: list[str] = []

    def producer(self) -> Producer:
        """The log's idempotent producer, shared by its part writers (made on first use)."""
        if self._shared_producer is None:
            self._shared_producer = Producer(self.target.producer(**{
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "error_cb": self._on_error,
            }))
        return self._shared_producer

    def _on_error(self, err) -> None:  # noqa: ANN001 - librdkafka's KafkaError
        if err.fatal():
            self._fatal.append(f"fatal producer error: {err.str()}")

    def fatal_errors(self) -> list[str]:
        """Fatal errors the shared producer reported (after one, nothing more is acknowledged)."""
        return list(self._fatal)

    def stream_of_topic(self, topic: str) -> str | None:
        """The stream a topic holds (None outside this log's prefix)."""
        return self.target.stream_of(topic)

    def _scanner(self):  # noqa: ANN202
        if self._consumer is None:
            self._consumer = new_consumer(self)
        return self._consumer

    def _metadata(self):  # noqa: ANN202
        try:
            return self._admin.list_topics(timeout=self.timeout)
        except KafkaException as e:
            raise EventLogError(f"kafka cluster {self.target.bootstrap} did not answer: {e.args[0].str()}") from None

    def _partitions(self, topic: str) -> int | None:
        """Partition count of ``topic``, None when it does not exist (never auto-creates it)."""
        md = self._metadata()
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            return None
        return len(t.partitions)

    # -- streams ---------------------------------------------------------------------------------------

    def streams(self) -> list[str]:
        md = self._metadata()
        out = []
        for topic in sorted(md.topics):
            stream = self.target.stream_of(topic)
            if stream is None or topic.startswith("__"):
                continue
            try:
                check_stream_name(stream)
                self.header(stream)
            except (ValueError, StreamNotFoundError, CorruptLogError):
                continue  # not an eventlog stream
            out.append(stream)
        return out

    def header(self, stream: str) -> StreamHeader:
        if stream in self._headers:
            return self._headers[stream]
        topic = self.target.topic(check_stream_name(stream))
        if self._partitions(topic) is None:
            raise StreamNotFoundError(f"no stream {stream!r} in log {self.uri} (no topic {topic!r})", stream=stream)
        for offset, b in scan_partition(self, self._scanner(), topic, 0, 0):
            if not is_header(b):
                raise CorruptLogError("the first record of partition 0 is not a stream header",
                                      stream=stream, part=0, offset=offset)
            header = header_of(b, path=f"{topic}[0]@{offset}")
            if header.stream != stream:
                raise CorruptLogError(f"header names stream {header.stream!r}", stream=stream, part=0, offset=offset)
            self._headers[stream] = header
            return header
        raise StreamNotFoundError(f"topic {topic!r} holds no stream header yet", stream=stream)

    def create_stream(self, header: StreamHeader) -> StreamHeader:
        topic = self.target.topic(header.stream)
        rf = self.replication_factor if self.replication_factor is not None else -1
        futures = self._admin.create_topics([NewTopic(topic, num_partitions=header.peers, replication_factor=rf)],
                                            operation_timeout=self.timeout, request_timeout=self.timeout)
        try:
            futures[topic].result()
            created = True
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise EventLogError(f"cannot create topic {topic!r}: {e.args[0].str()}", stream=header.stream) from None
            created = False
        if created:
            self._write_headers(topic, header, range(header.peers))
            self._headers[header.stream] = header
            return header
        n = self._partitions(topic) or 0
        if n < header.peers:
            raise HeaderMismatchError(f"topic {topic!r} has {n} partitions; the stream needs peers={header.peers}",
                                      stream=header.stream)
        stored = self._wait_for_header(header, topic)
        stored.check_same(header)
        return stored

    def _wait_for_header(self, header: StreamHeader, topic: str) -> StreamHeader:
        """The header of a topic another writer is creating; a topic made empty by an operator gets ours."""
        deadline = time.monotonic() + min(self.timeout, 10.0)
        while True:
            try:
                return self.header(header.stream)
            except StreamNotFoundError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        empty = [p for p in range(header.peers) if self.last_offset(topic, p) is None]
        if len(empty) < header.peers:
            raise CorruptLogError("topic has records but no stream header in partition 0", stream=header.stream)
        self._write_headers(topic, header, empty)
        self._headers[header.stream] = header
        return header

    def _write_headers(self, topic: str, header: StreamHeader, parts) -> None:  # noqa: ANN001
        errors: list[str] = []
        producer = self.producer()
        value = header_record(header)
        for p in parts:
            producer.produce(topic, value=value, partition=p,
                             on_delivery=lambda err, msg: errors.append(err.str()) if err else None)
        if producer.flush(self.timeout) or errors:
            raise DeliveryError(f"stream header not acknowledged: {errors[:1] or 'timeout'}", stream=header.stream)

    # -- parts -----------------------------------------------------------------------------------------

    def _check_part(self, header: StreamHeader, part: int) -> None:
        if isinstance(part, bool) or not isinstance(part, int) or not 0 <= part < header.peers:
            raise ValueError(f"part {part!r} out of range: stream {header.stream!r} has peers={header.peers}")

    def writer(self, stream: str, part: int, *, sync: str | None = None) -> KafkaPartWriter:
        header = self.header(stream)
        header.check_writable()
        self._check_part(header, part)
        return KafkaPartWriter(self, header, part, codec_for(header).standalone_encoder())

    def reader(self, stream: str, part: int, start: int = 1, *, progress_only: bool = False) -> KafkaPartReader:
        if start < 1:
            raise ValueError(f"sequence ids start at 1, got start={start}")
        header = self.header(stream)
        self._check_part(header, part)
        return KafkaPartReader(self, stream, part, start, progress_only, codec_for(header).standalone_decoder())

    def _watermarks(self, topic: str, part: int) -> tuple[int, int]:
        return self._scanner().get_watermark_offsets(TopicPartition(topic, part), timeout=self.timeout, cached=False)

    def _tail(self, topic: str, part: int) -> tuple[int | None, int]:
        """``(offset of the last record or None when empty, last sequence id or 0)`` of a partition, from
        one scan of its tail."""
        lo, hi = self._watermarks(topic, part)
        last_offset, last_seq = None, 0
        for offset, b in scan_partition(self, self._scanner(), topic, part, max(lo, hi - 1)):
            last_offset = offset
            if not is_header(b) and b.count:
                last_seq = max(last_seq, b.last_id)
        return last_offset, last_seq

    def last_offset(self, topic: str, part: int) -> int | None:
        """The offset of the last record of a partition, None when it is empty."""
        return self._tail(topic, part)[0]

    def last_seq(self, stream: str, part: int) -> int:
        """The last sequence id written to a part (0 when none), read from the partition's tail."""
        return self._tail(self.target.topic(stream), part)[1]

    def _probe(self, topic: str, part: int, offset: int) -> int | None:
        """The last sequence id of the record at ``offset`` (0 for the header), None past the end."""
        for _, b in scan_partition(self, self._scanner(), topic, part, offset):
            return 0 if is_header(b) or not b.count else b.last_id
        return None

    def offset_for_seq(self, stream: str, part: int, seq: int) -> int:
        """The Kafka offset of the first record that may hold ``seq`` (binary search on LastMessageId)."""
        topic = self.target.topic(stream)
        lo, hi = self._watermarks(topic, part)
        while lo < hi:
            mid = (lo + hi) // 2
            last = self._probe(topic, part, mid)
            if last is not None and last < seq:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _probe_ts(self, topic: str, part: int, offset: int) -> tuple[int, int] | None:
        """``(bundle timestamp ms, first seq)`` of the first data record at or after ``offset``."""
        for _, b in scan_partition(self, self._scanner(), topic, part, offset):
            if not is_header(b) and b.count:
                return b.ts, b.first_id
        return None

    def seq_for_timestamp(self, stream: str, part: int, when_ms: int) -> int:
        """The first sequence id appended at or after wall-clock time ``when_ms`` (ms since the epoch),
        found by a binary search over the bundles' own timestamps (BundleTs) — our own time index, since
        brokers differ in ``offsets_for_times``. Returns the part's next sequence id when nothing is that
        recent. Timestamps are the writer's clock at the time the record was cut."""
        header = self.header(stream)
        self._check_part(header, part)
        topic = self.target.topic(stream)
        lo, hi = self._watermarks(topic, part)
        while lo < hi:
            mid = (lo + hi) // 2
            probe = self._probe_ts(topic, part, mid)
            if probe is not None and probe[0] < when_ms:
                lo = mid + 1
            else:
                hi = mid
        probe = self._probe_ts(topic, part, lo)
        return probe[1] if probe is not None else self.last_seq(stream, part) + 1

    def part_stats(self, stream: str, part: int) -> PartStats:
        header = self.header(stream)
        self._check_part(header, part)
        topic = self.target.topic(stream)
        first = 1
        for _, b in scan_partition(self, self._scanner(), topic, part, self._watermarks(topic, part)[0]):
            if not is_header(b) and b.count:
                first = b.first_id
                break
        last_offset, last = self._tail(topic, part)
        records = (last_offset or 0) + 1
        return PartStats(first, max(last + 1, first), None, records)

    def close(self) -> None:
        if self._shared_producer is not None:
            self._shared_producer.flush(self.timeout)
            self._shared_producer = None
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


