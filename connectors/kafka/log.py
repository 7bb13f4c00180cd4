"""The Kafka log: a topic per stream, a partition per part, one record per event (format 2.0).

Where things are (FORMAT.md "Kafka log"): the topic of stream ``s`` is ``prefix.s`` (or ``s`` without a prefix);
part ``i`` is partition ``i``; every partition opens with a header record, so a reader of any part meets
the header before any data, and ``header()`` reads it from partition 0, offset 0.

Writers are fenced and lost data is never silent (FORMAT.md "Kafka log"): each part writer is a transactional
producer (``KafkaPartWriter``), readers read committed records only, and every data record names its
writer's epoch, which readers check (``WriterHistory``). A partition that lost its start, its header or
its records, a topic with fewer partitions than the stream's peers, and a position past a part's end all
raise ``LostDataError``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from eventlog.encoding import codec_for
from eventlog.errors import (
    ClusterUnavailableError,
    CorruptLogError,
    DeliveryError,
    EventLogError,
    HeaderMismatchError,
    InvalidURIError,
    StreamNotFoundError,
)
from eventlog.header import StreamHeader, check_stream_name
from eventlog.log import Log, PartStats, StoredEvent, check_sync_mode
from eventlog.retention import MAX_RETENTION_BYTES, Retention
from eventlog.schema_history import SchemaHistory, evolution_of
from eventlog.schema_history import merge_histories as _merge

from .check import check_part, record_name
from .config import KafkaTarget, last_complaint, parse_kafka_uri
from .errors import LostDataError
from .reader import KafkaPartReader, new_consumer, scan_partition
from .records import Frame, WriterMark, header_record_v2, part_key
from .writer import KafkaPartWriter

KAFKA_FORMAT_VERSION: tuple[int, int] = (2, 0)
"""The format version Kafka logs write: one record per event (FORMAT.md §9). Streams of 1.x stay readable."""

_SETTLING = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART,
             KafkaError._UNKNOWN_PARTITION, KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
             # a call in flight to a broker that was killed: its connection is torn down
             KafkaError._DESTROY_BROKER,
             # a leader that just took over after a broker or cluster restart, before it caught up
             KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH}
_CHANNEL_TOPIC = re.compile(r"\.g\d{6}$")
_META = "__meta"
"""A stream's meta topic is ``<prefix>.__meta.<stream>`` (``__meta.<stream>`` without a prefix): no stream name
starts with ``_``, so it never holds a stream. One partition; records keyed ``header`` (a copy of the stream
header, for when partition 0 lost its start to a trim) and ``retention`` (a mark; the one that covers the others
is in force). FORMAT.md §10."""  # the runtime's channel topics: prefix.job.g000001
_log = logging.getLogger("eventlog.kafka")
_HISTORY_TTL_S = 1.0
"""How long a log object trusts the schema history it read (readers meeting a newer schema read it again)."""
_HEADER_WAIT = 10.0  # seconds to wait for the header records of a stream another writer is creating
_MARKER_WAIT = 0.25  # seconds a tail read waits for the markers of a transaction committed a moment ago
_CALL_SLICE = 3.0  # seconds one cluster call may wait before it is asked again (within the log's timeout)


def _slice(deadline: float) -> float:
    """How long the next call of a wait until ``deadline`` (``time.monotonic()``) may take: at most
    ``_CALL_SLICE``, so a call that waits for a killed partition leader is asked again once a new one leads."""
    return max(0.05, min(_CALL_SLICE, deadline - time.monotonic()))


@dataclass(frozen=True)
class PartTail:
    """The end of one part as its partition holds it: what a writer continues after."""

    last_seq: int
    """The last sequence id in the part (0 when it holds no events)."""
    writer: WriterMark | None
    """The writer of the last data record (None when there is none)."""
    low: int
    """The partition's low watermark: records before it were deleted."""
    high: int
    """The partition's end offset (committed records)."""


class KafkaLog(Log):
    """Streams on a Kafka cluster; see the module doc for the layout and ``connectors.kafka.config`` for
    settings. ``timeout`` bounds every wait on the cluster (seconds); ``replication_factor`` applies to topics
    this log creates (default: the broker's). ``bundle_bytes``/``bundle_events`` are accepted for older callers
    and have no effect: format 2.0 writes one record per event (the producer batches records on the wire)."""

    format_version = KAFKA_FORMAT_VERSION

    def __init__(
        self,
        uri: str,
        *,
        config: dict[str, Any] | None = None,
        timeout: float | None = None,
        bundle_bytes: int | None = None,
        bundle_events: int | None = None,
        replication_factor: int | None = None,
        sync: str | None = None,
    ) -> None:
        if bundle_bytes is not None or bundle_events is not None:
            warnings.warn("bundle_bytes/bundle_events have no effect: Kafka logs of format 2.0 write one record per "
                          "event", DeprecationWarning, stacklevel=2)
        self.uri = uri
        self.target: KafkaTarget = parse_kafka_uri(uri, config)
        self.timeout: float = timeout if timeout is not None else (self.target.timeout or 30.0)
        """Seconds every wait on the cluster may take before ClusterUnavailableError (or a delivery error)."""
        self.replication_factor = replication_factor if replication_factor is not None else self.target.replication_factor
        self.sync_mode = check_sync_mode(sync or self.target.sync or "fsync")
        """What ``advance_to`` promises by default (``eventlog.sync``): fsync/flush commit and wait, none pipelines."""
        try:
            # a metadata request naming a topic must never create it (a broker's auto.create.topics.enable)
            self._admin = AdminClient({**self.target.admin(), "allow.auto.create.topics": False})
        except KafkaException as e:
            raise InvalidURIError(f"bad kafka settings for {uri!r}: {e.args[0].str()}") from None
        self._headers: dict[str, StreamHeader] = {}
        self._histories: dict[str, tuple[float, SchemaHistory | None]] = {}  # (when read, history) per stream
        self._consumer = None  # for metadata and scans; made on first use
        self._shared_producer: Producer | None = None
        self._plain_producer: Producer | None = None  # header records only (_header_producer)
        self._fatal: list[str] = []
        self._ends: dict[tuple[str, int], int] = {}  # the highest end offset seen per partition

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

    def _header_producer(self) -> Producer:
        """The producer of header records (made on first use): ``acks=all`` but not idempotent. An idempotent
        producer waits ~0.5 s for its producer id when it is new (librdkafka asks before a broker connection is
        up, then retries after 500 ms), which was half the cost of creating a stream. Without idempotence a
        retry may store a header record twice; readers skip header records wherever they are (§9), and the
        order within a partition holds (one request in flight)."""
        if self._plain_producer is None:
            self._plain_producer = Producer(self.target.producer(**{
                "enable.idempotence": False,
                "acks": "all",
                "linger.ms": 0,
                "max.in.flight.requests.per.connection": 1,
                "message.timeout.ms": int(min(self.timeout, 300.0) * 1000),
            }))
        return self._plain_producer

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
            # scans end at the partition's end, which the broker reports after holding an empty fetch for
            # fetch.wait.max.ms: 1 ms, not a follower's 20, took a writer's tail read from ~44 ms to ~5 ms. The
            # scanner fetches only while a scan runs (scan_partition unassigns it), so it costs nothing idle.
            self._consumer = new_consumer(self, fetch_wait_ms=1)
        return self._consumer

    def _metadata(self, timeout: float | None = None, topic: str | None = None):  # noqa: ANN202
        """The cluster's metadata of ``topic`` (None: of every topic), waiting at most ``timeout`` s (the log's
        timeout by default). One topic's answer does not grow with the cluster: every topic's took 2.4 ms with 250
        topics on a local broker, 0.3 ms for one, and a writer's opening asked four times."""
        try:
            return self._admin.list_topics(topic=topic, timeout=self.timeout if timeout is None else timeout)
        except KafkaException as e:
            raise self.unavailable(e.args[0].str()) from None

    def unavailable(self, what: str) -> ClusterUnavailableError:
        """The error for a cluster that did not answer: servers, timeout, ``what`` failed and librdkafka's
        last complaint about the servers."""
        last = last_complaint(self.target.bootstrap)
        return ClusterUnavailableError(
            f"kafka cluster {self.target.bootstrap} did not answer within {self.timeout:g} s ({what})"
            + (f"; last: {last}" if last else "") + " — check the address, or give it longer (add "
            f"?eventlog.timeout={max(60, int(self.timeout * 2))} to the log URI)")

    def topic_listed(self, topic: str, timeout: float | None = None) -> bool:
        """Whether the cluster's metadata lists ``topic`` (with or without an error of its own): False only for a
        topic that does not exist, or was deleted. Waits at most ``timeout`` s (the log's timeout by default)."""
        meta = self._metadata(timeout, topic).topics.get(topic)
        return meta is not None and (meta.error is None or meta.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART)

    def partitions(self, topic: str) -> int | None:
        """Partition count of ``topic``, None when it does not exist (never auto-creates it)."""
        md = self._metadata(topic=topic)
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
            except LostDataError:
                if not self.target.prefix:
                    continue  # without a prefix, any topic of the cluster could be meant: not surely ours
            except (ValueError, StreamNotFoundError, CorruptLogError):
                continue  # not an eventlog stream
            out.append(stream)
        return out

    def prefixes(self) -> dict[str, list[str]]:
        """The topic prefixes of the cluster that hold eventlog streams, each with its streams, sorted; the
        streams without a prefix are under ``""``. Cluster-wide, whatever this log's own prefix.

        A topic ``p.s`` (or ``s``) holds stream ``s`` when the first record of its partition 0 is a stream
        header naming ``s`` (format 2.0: an ``eventlog.kind: header`` record; 1.x: a STREAM_HEADER bundle).
        A trimmed topic, whose partition 0 lost its header record, holds the stream its meta topic's header copy
        names (FORMAT.md §10). Cheap: one record per candidate topic. Internal topics (``__…``), meta topics and
        the runtime's channel topics (``….g000001``) are skipped, and so are topics whose partition 0 is empty
        or lost its start otherwise."""
        out: dict[str, list[str]] = {}
        topics = self._metadata().topics
        for topic, meta in sorted(topics.items()):
            if topic.startswith("__") or f".{_META}." in topic or _CHANNEL_TOPIC.search(topic) \
                    or meta.error is not None or 0 not in meta.partitions:
                continue
            stream = self._stream_in(topic) or self._trimmed_stream_in(topic, set(topics))
            if stream is None:
                continue
            if topic == stream:
                out.setdefault("", []).append(stream)
            elif topic.endswith("." + stream):
                out.setdefault(topic[: -len(stream) - 1], []).append(stream)
        return {p: sorted(s) for p, s in sorted(out.items())}

    def _trimmed_stream_in(self, topic: str, topics: set[str]) -> str | None:
        """The stream ``topic`` holds when a trim deleted its partition 0's header record: the one whose meta
        topic (``_META``) is beside it and holds a header copy naming it."""
        candidates = [(topic[:i], topic[i + 1:]) for i, c in enumerate(topic) if c == "."] + [("", topic)]
        for prefix, stream in candidates:
            meta = f"{prefix}.{_META}.{stream}" if prefix else f"{_META}.{stream}"
            if meta not in topics:
                continue
            try:
                check_stream_name(stream)
                header = self._trimmed_header(stream, topic)
            except (EventLogError, ValueError):
                continue
            if header is not None:
                return stream
        return None

    def _stream_in(self, topic: str) -> str | None:
        """The stream the header record opening partition 0 of ``topic`` names, None when it opens with
        anything else (or nothing)."""
        try:
            lo, hi = self.watermarks(topic, 0)
            if lo > 0 or hi == 0:
                return None
            for rec in scan_partition(self, self._scanner(), topic, 0, 0):
                if not rec.is_header:
                    return None
                return check_stream_name(rec.header(path=f"{topic}[0]@{rec.offset}").stream)
        except (EventLogError, ValueError):
            return None  # not a record eventlog wrote
        return None

    def last_write(self, stream: str, part: int) -> float | None:
        """When the part's last event was written (seconds since the epoch): the timestamp of its last data
        record (the writer's clock, FORMAT.md §9), or of its header record when it holds no events; None
        when the partition is empty. Reads the few records at the partition's end, as ``tail`` does."""
        header = self.header(stream)
        self._check_part(header, part)
        topic = self.target.topic(stream)
        lo, hi = self.watermarks(topic, part)
        if hi <= lo:
            return None
        last = self._last_data(topic, part, lo, hi)
        if last is None:
            for rec in scan_partition(self, self._scanner(), topic, part, lo):
                last = rec
        return last.ts / 1000 if last is not None else None

    def header(self, stream: str) -> StreamHeader:
        """The stream's header with its current schema (the last of its schema history, FORMAT.md §12)."""
        stored = self.stored_header(stream)
        history = self.schema_history(stream)
        return history.header_of(stored, len(history.versions) - 1) if history is not None else stored

    def stored_header(self, stream: str) -> StreamHeader:
        """The stream's header as created (its first schema)."""
        if stream in self._headers:
            return self._headers[stream]
        topic = self.target.topic(check_stream_name(stream))
        partitions = self.partitions(topic)
        if partitions is None:
            raise StreamNotFoundError(f"no stream {stream!r} in log {self.uri} (no topic {topic!r})", stream=stream)
        lo, hi = self.watermarks(topic, 0)
        if lo > 0:
            header = self._trimmed_header(stream, topic)
            if header is not None:
                self._check_partition_count(header, topic, partitions)
                self._headers[stream] = header
                return header
            raise LostDataError(f"partition 0 of topic {topic!r} starts at kafka offset {lo}: the stream header "
                                f"(offset 0) was deleted (retention, delete_records, a broker that lost data)",
                                stream=stream, part=0, offset=lo)
        for rec in scan_partition(self, self._scanner(), topic, 0, lo):
            if not rec.is_header:
                raise CorruptLogError("the first record of partition 0 is not a stream header",
                                      stream=stream, part=0, offset=rec.offset)
            header = self._header_record(rec, topic, 0, stream)
            self._check_partition_count(header, topic, partitions)
            self._headers[stream] = header
            return header
        raise StreamNotFoundError(f"topic {topic!r} holds no stream header yet", stream=stream)

    @staticmethod
    def _header_record(rec: Frame, topic: str, part: int, stream: str) -> StreamHeader:
        """The stream header a header record of ``topic[part]`` holds; CorruptLogError unless it names ``stream``
        in the framing of its format version."""
        header = rec.header(path=f"{topic}[{part}]@{rec.offset}")
        if header.stream != stream:
            raise CorruptLogError(f"header names stream {header.stream!r}", stream=stream, part=part,
                                  offset=rec.offset)
        if (header.version[0] >= 2) != (rec.version == 2):
            raise CorruptLogError(f"a format {header.version[0]}.{header.version[1]} stream header in a record "
                                  f"framed as format {rec.version}.x", stream=stream, part=part, offset=rec.offset)
        return header

    # -- retention (FORMAT.md §10) -------------------------------------------------------------------------

    def meta_topic(self, stream: str) -> str:
        """The topic holding a stream's header copy and retention marks (``_META``)."""
        name = f"{_META}.{check_stream_name(stream)}"
        return f"{self.target.prefix}.{name}" if self.target.prefix else name

    def _meta_records(self, stream: str) -> list[tuple[bytes, bytes]]:
        """``(key, value)`` of every record of the stream's meta topic, in order ([] when it does not exist)."""
        topic = self.meta_topic(stream)
        if self.partitions(topic) is None:
            return []
        lo, hi = self.watermarks(topic, 0)
        if hi <= lo:
            return []
        consumer = self._scanner()
        consumer.assign([TopicPartition(topic, 0, lo)])
        out: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + self.timeout
        try:
            while len(out) < hi - lo:
                for m in consumer.consume(64, timeout=0.1) or ():
                    if m.error() is not None:
                        if m.error().code() == KafkaError._PARTITION_EOF:
                            return out
                        if not m.error().retriable():
                            raise EventLogError(f"kafka read error: {m.error().str()}", stream=stream)
                        continue
                    value = m.value() or b""
                    if len(value) > MAX_RETENTION_BYTES:
                        raise CorruptLogError(f"a record of {topic} is larger than a retention mark may be",
                                              stream=stream, offset=m.offset())
                    out.append((m.key() or b"", value))
                if time.monotonic() > deadline:
                    raise self.unavailable(f"reading {topic}")
        finally:
            consumer.unassign()
        return out

    def _trimmed_header(self, stream: str, topic: str) -> StreamHeader | None:
        """The stream header a trim copied to the meta topic, for a partition 0 whose start it deleted."""
        for key, value in self._meta_records(stream):
            if key == b"header":
                header = StreamHeader.from_json(value, path=f"{self.meta_topic(stream)}[0]")
                if header.stream != stream:
                    raise CorruptLogError(f"the header copy names stream {header.stream!r}", stream=stream,
                                          path=self.meta_topic(stream))
                return header
        return None

    def schema_history(self, stream: str, *, fresh: bool = False) -> SchemaHistory | None:
        stored = self.stored_header(stream)
        cached = self._histories.get(stream)
        now = time.monotonic()
        if cached is not None and not fresh and now - cached[0] < _HISTORY_TTL_S:
            return cached[1]
        merged: SchemaHistory | None = None
        for key, value in self._meta_records(stream):  # every snapshot, merged: writers never lose each other's
            if key == b"schemas":
                merged = _merge(merged, SchemaHistory.from_json(value, stored, path=f"{self.meta_topic(stream)}[0]"))
        self._histories[stream] = (now, merged)
        return merged

    def _update_history(self, stream: str, change: Callable[[SchemaHistory], SchemaHistory]) -> SchemaHistory:
        """Apply ``change`` to the stream's schema history and append the result to the meta topic (readers
        merge every snapshot, so two writers changing it at once both count)."""
        stored = self.stored_header(stream)
        before = self.schema_history(stream, fresh=True) or SchemaHistory(stream, (stored.schema,))
        after = change(before)
        if after == before and self._histories.get(stream, (0, None))[1] is not None:
            return after
        self._write_meta(stream, [(b"schemas", after.to_json(stored))], "schema history")
        return self.schema_history(stream, fresh=True) or after

    def _write_meta(self, stream: str, records: "list[tuple[bytes, bytes]]", what: str) -> None:
        """Append ``records`` (key, value) to the stream's meta topic, creating it first (``_META``)."""
        header = self.stored_header(stream)
        topic = self.meta_topic(stream)
        if self.partitions(topic) is None:
            rf = self.replication_factor if self.replication_factor is not None else -1
            futures = self._admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=rf,
                                                          config={"cleanup.policy": "delete", "retention.ms": "-1",
                                                                  "retention.bytes": "-1"})],
                                                operation_timeout=self.timeout, request_timeout=self.timeout)
            try:
                futures[topic].result()
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise EventLogError(f"cannot create topic {topic!r}: {e.args[0].str()}", stream=stream) from None
        if not any(k == b"header" for k, _ in self._meta_records(stream)):
            records = [(b"header", header.to_json()), *records]  # the header copy first (a trim needs it)
        errors: list[str] = []
        producer = self._header_producer()
        for key, value in records:
            producer.produce(topic, value=value, key=key, partition=0,
                             on_delivery=lambda err, msg: errors.append(err.str()) if err else None)
            if producer.flush(self.timeout) or errors:
                raise DeliveryError(f"{what} not acknowledged: {errors[:1] or 'timeout'}", stream=stream)

    def retention(self, stream: str) -> Retention | None:
        header = self.header(stream)
        marks = [Retention.from_json(v, header, path=f"{self.meta_topic(stream)}[0]")
                 for k, v in self._meta_records(stream) if k == b"retention"]
        in_force: Retention | None = None
        for mark in marks:  # two trims may race: the mark in force is the one that covers the others
            if mark.covers(in_force):
                in_force = mark
        return in_force

    def record_retention(self, stream: str, mark: Retention) -> Retention:
        header = self.header(stream)
        topic = self.meta_topic(stream)
        current = self.retention(stream)
        if current is not None and current.covers(mark):
            return current
        if not mark.covers(current):
            raise EventLogError("a concurrent trim recorded a retention mark that neither drops more nor less than "
                                "this one; run the trim again", stream=stream, path=topic)
        self._write_meta(stream, [(b"retention", mark.to_json(header))], "retention mark")
        in_force = self.retention(stream)
        return in_force if in_force is not None else mark

    def drop_before(self, stream: str, part: int, seq: int) -> tuple[int, int | None]:
        header = self.header(stream)
        self._check_part(header, part)
        topic = self.target.topic(stream)
        tail = self.tail(stream, part)
        last = self._last_data(topic, part, tail.low, tail.high)
        if last is None or seq <= 1:
            return 0, None
        offset = min(self.offset_for_seq(stream, part, seq), last.offset)  # never the part's last record
        if offset <= tail.low:
            return 0, None
        before = self._first_seq_at(topic, part, tail.low)
        futures = self._admin.delete_records([TopicPartition(topic, part, offset)], request_timeout=self.timeout,
                                             operation_timeout=self.timeout)
        try:
            next(iter(futures.values())).result()
        except KafkaException as e:
            raise EventLogError(f"cannot delete the records of {topic}[{part}] before kafka offset {offset}: "
                                f"{e.args[0].str()}", stream=stream, part=part, offset=offset) from None
        after = self._first_seq_at(topic, part, offset)
        return max(0, after - before) if before and after else 0, None

    def _first_seq_at(self, topic: str, part: int, offset: int) -> int:
        """The first sequence id of the first data record at or after ``offset`` (0 when there is none)."""
        probe = self._probe_ts(topic, part, offset)
        return probe[1] if probe is not None else 0

    def _check_partition_count(self, header: StreamHeader, topic: str, partitions: int | None) -> None:
        if partitions is None:
            raise LostDataError(f"topic {topic!r} of stream {header.stream!r} is gone (deleted)", stream=header.stream)
        if partitions < header.peers:
            raise LostDataError(f"topic {topic!r} has {partitions} partitions, but the stream has peers="
                                f"{header.peers}: parts {partitions}..{header.peers - 1} are missing",
                                stream=header.stream, part=partitions)

    def check_partitions(self, stream: str) -> None:
        """Raise LostDataError unless the stream's topic still has a partition for each of its parts (asks
        the cluster; the stream header may be cached)."""
        header = self.header(stream)
        topic = self.target.topic(stream)
        self._check_partition_count(header, topic, self.partitions(topic))

    def create_stream(self, header: StreamHeader) -> StreamHeader:
        codec_for(header)  # a schema the encoding cannot store is refused before a topic exists
        header = dataclasses.replace(header, version=self.format_version)
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
        n = self.partitions(topic) or 0
        deadline = time.monotonic() + min(self.timeout, _HEADER_WAIT)
        while n == 0 and time.monotonic() < deadline:  # created by another writer: metadata propagates to each
            time.sleep(0.1)                             # broker a moment after the creation returned
            n = self.partitions(topic) or 0
        if n < header.peers:
            raise HeaderMismatchError(f"topic {topic!r} has {n} partitions; the stream needs peers={header.peers}",
                                      stream=header.stream)
        self._wait_for_header(header, topic)
        self.schema_history(header.stream, fresh=True)  # a writer compares with what is current now
        current = self.header(header.stream)
        changes = evolution_of(current, header)
        if not changes:
            return current
        stored = self.stored_header(header.stream)
        history = self._update_history(header.stream, lambda h: h.with_version(header.schema)[0])
        _log.info("stream %r: schema changed (%s)", header.stream, "; ".join(changes))
        return history.header_of(stored, len(history.versions) - 1)

    def _wait_for_header(self, header: StreamHeader, topic: str) -> StreamHeader:
        """The header of a topic another writer is creating. A topic created empty by an operator gets ours, and
        so does one whose creation stopped part-way (its writer died or lost a broker between writing the header
        records of some partitions and of partition 0): the partitions that hold nothing but this stream's header
        are completed. A topic with records other than headers but no header in partition 0 had its records
        deleted: it raises LostDataError."""
        deadline = time.monotonic() + min(self.timeout, _HEADER_WAIT)
        while True:
            try:
                return self.header(header.stream)
            except StreamNotFoundError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        ends = {p: self.watermarks(topic, p) for p in range(header.peers)}
        for p, (lo, hi) in sorted(ends.items()):
            if hi > 0:
                self._check_headers_only(header, topic, p, lo)
        self._write_headers(topic, header, [p for p, (_, hi) in ends.items() if hi == 0])
        return self.header(header.stream)  # partition 0's first record: another writer's, had one raced us

    def _check_headers_only(self, header: StreamHeader, topic: str, part: int, lo: int) -> None:
        """Raise unless partition ``part`` holds only header records of ``header``'s stream (what an interrupted
        creation leaves): LostDataError when it holds events or starts past offset 0, HeaderMismatchError when
        its header differs."""
        if lo > 0:
            raise LostDataError(f"topic {topic!r} has no stream header in partition 0, and partition {part} starts at "
                                f"kafka offset {lo}: its records were deleted; a new history is not started over it",
                                stream=header.stream, part=part, offset=lo)
        records = scan_partition(self, self._scanner(), topic, part, lo)
        while True:
            try:
                rec = next(records, None)
            except CorruptLogError as e:  # a record no eventlog writer wrote: still written, never ours
                raise LostDataError(f"topic {topic!r} has no stream header in partition 0, but partition {part} was "
                                    f"written (a record that is not a stream header: {e.args[0]}); a new history "
                                    f"is not started over it", stream=header.stream, part=part,
                                    offset=getattr(e, "offset", None)) from None
            if rec is None:
                return
            if not rec.is_header:
                raise LostDataError(f"topic {topic!r} has no stream header in partition 0, but partition {part} was "
                                    f"written (an event at kafka offset {rec.offset}): its records were deleted or "
                                    f"never had a header; a new history is not started over it",
                                    stream=header.stream, part=part, offset=rec.offset)
            self._header_record(rec, topic, part, header.stream).check_same(header)

    def _write_headers(self, topic: str, header: StreamHeader, parts) -> None:  # noqa: ANN001
        errors: list[str] = []
        producer = self._header_producer()
        codec = codec_for(header)
        value, headers = header_record_v2(header, json.dumps(codec.schema_json) if header.encoding == "avro" else None)
        for p in parts:
            producer.produce(topic, value=value, key=part_key(p), headers=headers, partition=p,
                             on_delivery=lambda err, msg: errors.append(err.str()) if err else None)
        if producer.flush(self.timeout) or errors:
            raise DeliveryError(f"stream header not acknowledged: {errors[:1] or 'timeout'}", stream=header.stream)

    # -- parts -----------------------------------------------------------------------------------------

    def _check_part(self, header: StreamHeader, part: int) -> None:
        if isinstance(part, bool) or not isinstance(part, int) or not 0 <= part < header.peers:
            raise ValueError(f"part {part!r} out of range: stream {header.stream!r} has peers={header.peers}")

    def writer(self, stream: str, part: int, *, sync: str | None = None, continues: bool = False,
               expect_next_seq: int | None = None) -> KafkaPartWriter:
        """The writer of one part; it fences every earlier writer of the part (FORMAT.md "Kafka log").
        ``expect_next_seq``: the part's ``next_seq`` as the application last saw it acknowledged (from its
        own checkpoint); opening raises LostDataError when the part holds less, as after a topic was deleted
        and recreated (which the log alone cannot tell from a new stream)."""
        header = self.header(stream)
        header.check_writable(self.format_version)
        self._check_part(header, part)
        if expect_next_seq is not None and (isinstance(expect_next_seq, bool) or not isinstance(expect_next_seq, int)
                                            or expect_next_seq < 1):
            raise ValueError(f"expect_next_seq must be a sequence id >= 1, got {expect_next_seq!r}")
        mode = check_sync_mode(sync or self.sync_mode)
        w = KafkaPartWriter(self, header, part, codec_for(header).record_encoder(),
                            expect_next_seq=expect_next_seq, continues=continues, lazy=mode == "none")
        try:
            history = self.schema_history(stream, fresh=True)
            if history is not None and history.switch_for(part, w.next_seq, header.schema) is not None:
                seq = w.next_seq
                self._update_history(stream, lambda h: h.with_switch(part, seq, h.version_of(header.schema) or 0))
        except BaseException:
            w.close()
            raise
        return w

    def reader(self, stream: str, part: int, start: int = 1, *, progress_only: bool = False) -> KafkaPartReader:
        if start < 1:
            raise ValueError(f"sequence ids start at 1, got start={start}")
        header = self.stored_header(stream)
        self._check_part(header, part)
        return KafkaPartReader(self, header, part, start, progress_only, codec_for(header),
                               history=self.schema_history(stream),
                               reload=lambda: self.schema_history(stream, fresh=True))

    def watermarks(self, topic: str, part: int) -> tuple[int, int]:
        """``(low, high)`` offsets of a partition, asked of the cluster (read_committed: ``high`` is the
        last stable offset). Raises LostDataError when ``high`` is below an end this log saw before (the
        topic was recreated, or a broker lost acknowledged records)."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:  # a slice at a time: a call that waits out a killed leader learns of the new one only when retried
                lo, hi = self._scanner().get_watermark_offsets(TopicPartition(topic, part), timeout=_slice(deadline),
                                                               cached=False)
                before = self._ends.get((topic, part), 0)
                if hi < before:
                    raise LostDataError(f"the end of {topic}[{part}] moved back from kafka offset {before} to {hi}: "
                                        f"records were lost or the topic was recreated", part=part, offset=hi,
                                        stream=self.target.stream_of(topic))
                self._ends[(topic, part)] = hi
                return lo, hi
            except KafkaException as e:
                err: KafkaError = e.args[0]
                # a new topic's partitions need a moment to get a leader; leaders move
                if (err.retriable() or err.code() in _SETTLING) and time.monotonic() < deadline:
                    time.sleep(0.05)
                    self._refresh(topic, deadline)
                    continue
                raise EventLogError(f"cannot read the offsets of {topic}[{part}] within {self.timeout:g} s: {err.str()}",
                                    stream=self.target.stream_of(topic), part=part) from None

    def _refresh(self, topic: str, deadline: float) -> None:
        """Ask the cluster who leads ``topic``'s partitions now: the scanner keeps asking a killed leader (its
        calls time out) until a metadata request tells it of the new one. Failures are left to the caller's
        retry."""
        try:
            self._scanner().list_topics(topic, timeout=_slice(deadline))
        except KafkaException:
            pass

    def _last_data(self, topic: str, part: int, lo: int, hi: int) -> Frame | None:
        """The last committed data record of a partition, None when it has none. Scans back from the end
        in growing windows: transaction markers and aborted records take offsets but are never read.

        A transaction's commit returns before the broker has written its markers, and until it has, its
        records lie past the last stable offset (``hi``), where read_committed reads do not reach. While the
        high watermark is beyond ``hi`` the read is repeated, for up to ``_MARKER_WAIT``: a committed
        transaction's markers land within milliseconds; the records of one still open stay out, as they must."""
        deadline = None
        while True:
            end, window = hi, 4
            found = None
            while end > lo and found is None:
                start = max(lo, end - window)
                for rec in scan_partition(self, self._scanner(), topic, part, start):
                    if rec.seqs:
                        found = rec
                end, window = start, window * 4
            if self._high_watermark(topic, part) <= hi:
                return found
            if deadline is None:
                deadline = time.monotonic() + _MARKER_WAIT
            elif time.monotonic() >= deadline:
                return found  # a transaction still open: its records are not the part's yet
            time.sleep(0.005)
            lo, hi = self.watermarks(topic, part)

    def _high_watermark(self, topic: str, part: int) -> int:
        """The partition's high watermark, uncommitted records included (-1 when the cluster does not say)."""
        try:
            futures = self._admin.list_offsets({TopicPartition(topic, part): OffsetSpec.latest()},
                                               isolation_level=IsolationLevel.READ_UNCOMMITTED,
                                               request_timeout=self.timeout)
            return next(iter(futures.values())).result().offset
        except (KafkaException, StopIteration):
            return -1

    def tail(self, stream: str, part: int, *, complete: bool = False) -> PartTail:
        """The end of one part: its last sequence id and the writer of its last record. Raises
        LostDataError when the partition was emptied (low watermark > 0 and no records left).

        A partition that never held a record, not even its header, belongs to a stream whose creator died
        between creating the topic and writing every partition's header record (partition 0 has it, or the
        stream would not be found): readers see a part without events; with ``complete`` (the part's writer,
        already fenced) it waits a moment for a live creator, then writes the missing header record itself."""
        topic = self.target.topic(stream)
        self.check_partitions(stream)
        lo, hi = self.watermarks(topic, part)
        if hi == 0 and complete:
            deadline = time.monotonic() + min(self.timeout, _HEADER_WAIT)
            while hi == 0 and time.monotonic() < deadline:  # another process may be writing the headers now
                time.sleep(0.1)
                lo, hi = self.watermarks(topic, part)
            if hi == 0:
                self._write_headers(topic, self.header(stream), [part])
                lo, hi = self.watermarks(topic, part)
        if hi == 0:
            return PartTail(0, None, lo, hi)
        last = self._last_data(topic, part, lo, hi)
        if last is None:
            if lo > 0:
                raise LostDataError(f"partition {part} of topic {topic!r} was emptied: its records up to kafka offset "
                                    f"{lo} were deleted (retention, delete_records), the part's last sequence id is "
                                    f"unknown", stream=stream, part=part, offset=lo)
            return PartTail(0, None, lo, hi)
        return PartTail(last.last_seq, last.mark(stream, part), lo, hi)

    def last_seq(self, stream: str, part: int) -> int:
        """The last sequence id written to a part (0 when none), read from the partition's tail."""
        return self.tail(stream, part).last_seq

    def _probe(self, topic: str, part: int, offset: int) -> int | None:
        """The last sequence id of the first record at or after ``offset`` (0 for the header that opens the
        partition), None past the end. A header record further on (written twice: a retry, two creators racing)
        is passed over, so the search stays monotonic."""
        for rec in scan_partition(self, self._scanner(), topic, part, offset):
            if rec.is_header and rec.offset > 0:
                continue
            return rec.last_seq if rec.seqs else 0
        return None

    def offset_for_seq(self, stream: str, part: int, seq: int) -> int:
        """The Kafka offset of the first record that may hold ``seq`` (binary search on the records' last seq)."""
        topic = self.target.topic(stream)
        lo, hi = self.watermarks(topic, part)
        while lo < hi:
            mid = (lo + hi) // 2
            last = self._probe(topic, part, mid)
            if last is not None and last < seq:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def stored(self, stream: str, part: int, seq: int) -> StoredEvent | None:
        """The value of the record holding ``seq`` (format 1.x: the event's payload in the record's bundle), its
        headers and where it is (``topic[partition]@offset``)."""
        self._check_part(self.header(stream), part)
        topic = self.target.topic(stream)
        offset = self.offset_for_seq(stream, part, seq)
        for rec in scan_partition(self, self._scanner(), topic, part, offset):
            if rec.is_header or not rec.seqs:
                continue
            if not rec.seqs[0] <= seq <= rec.seqs[-1]:
                return None
            body = rec.bodies[seq - rec.seqs[0]]
            headers = tuple((k, bytes(v) if v is not None else None) for k, v in (rec.headers or ()))
            return StoredEvent(bytes(body), {"record": record_name(topic, part, rec.offset), "offset": rec.offset},
                               headers)
        return None

    def _probe_ts(self, topic: str, part: int, offset: int) -> tuple[int, int] | None:
        """``(record timestamp ms, first seq)`` of the first data record at or after ``offset``."""
        for rec in scan_partition(self, self._scanner(), topic, part, offset):
            if rec.seqs:
                return rec.ts, rec.first_seq
        return None

    def seq_for_timestamp(self, stream: str, part: int, when_ms: int) -> int:
        """The first sequence id appended at or after wall-clock time ``when_ms`` (ms since the epoch),
        found by a binary search over the records' timestamps (format 1.x: the bundles' own BundleTs) — the
        same answer on every broker, also where ``offsets_for_times`` differs. Returns the part's next sequence
        id when nothing is that recent. Timestamps are the writer's clock when it produced the record."""
        header = self.header(stream)
        self._check_part(header, part)
        topic = self.target.topic(stream)
        lo, hi = self.watermarks(topic, part)
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
        tail = self.tail(stream, part)
        first = 1
        for rec in scan_partition(self, self._scanner(), topic, part, tail.low):
            if rec.seqs:
                first = rec.first_seq
                break
        mark = self.retention(stream) if tail.low > 0 or first > 1 or self._has_meta(stream) else None
        if mark is not None:
            first = max(first, mark.cut(part).start)
        return PartStats(first, max(tail.last_seq + 1, first), None, tail.high - tail.low)

    def _has_meta(self, stream: str) -> bool:
        return self.partitions(self.meta_topic(stream)) is not None

    # -- checks (replay.verify) -------------------------------------------------------------------------

    def check_part(self, stream: str, part: int) -> list[EventLogError]:
        """Every problem of the part's records, found without raising (``connectors.kafka.check``): records
        that do not decode or whose headers lie, header records, writers, gaps, and records repeating sequence
        ids with other content; each names stream, part, Kafka offset and seq where known."""
        header = self.header(stream)
        self._check_part(header, part)
        return check_part(self, header, part)

    def locate(self, stream: str, part: int | None = None, seq: int | None = None,
               offset: int | None = None) -> dict[str, Any]:
        """The Kafka record (``topic[partition]@offset``): at ``offset`` when given, else the one holding ``seq``
        (found by the search ``offset_for_seq`` does), else (``part`` None) the header record opening partition 0."""
        try:
            topic = self.target.topic(stream)
            if offset is None and part is not None and seq is not None:
                offset = self.offset_for_seq(stream, part, seq)
            elif part is None and offset is None:
                offset = 0
            if offset is None:
                return {}
            return {"record": record_name(topic, part or 0, offset), "offset": offset}
        except (EventLogError, ValueError):
            return {}

    # -- topics below the prefix (Spark's staging logs) --------------------------------------------------

    def topics_below(self) -> list[str]:
        """Every topic whose name starts with this log's prefix and a dot (its streams' topics, and those of logs
        whose prefix extends it: ``prefix.job.attempt.stream``), sorted; [] for a log without a prefix."""
        if not self.target.prefix:
            return []
        head = self.target.prefix + "."
        return sorted(t for t in self._metadata().topics if t.startswith(head))

    def delete_topics_below(self) -> list[str]:
        """Delete the topics ``topics_below`` lists, all of them, waiting for the cluster to accept each
        deletion; returns them. For logs nobody reads any more (the staging logs of a Spark write to a Kafka
        log); a log without a prefix deletes nothing."""
        topics = self.topics_below()
        if not topics:
            return []
        futures = self._admin.delete_topics(topics, operation_timeout=self.timeout, request_timeout=self.timeout)
        for topic, fut in futures.items():
            try:
                fut.result(timeout=self.timeout)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:  # deleted meanwhile: gone either way
                    raise self.unavailable(f"deleting topic {topic}: {e.args[0].str()}") from None
            except TimeoutError:
                raise self.unavailable(f"deleting topic {topic}") from None
        for stream in [s for s in self._headers if self.target.topic(s) in futures]:
            del self._headers[stream]
        return topics

    def close(self) -> None:
        if self._shared_producer is not None:
            self._shared_producer.flush(self.timeout)
            self._shared_producer = None
        if self._plain_producer is not None:
            self._plain_producer.flush(self.timeout)
            self._plain_producer = None
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


