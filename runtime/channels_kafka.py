"""Channel logs on Kafka: a topic per job generation, a partition per channel, one bundle per record.

The topic of generation ``g`` of job ``job`` under ``kafka://host:port/prefix`` is ``prefix.job.g<g>``
(``job.g<g>`` without a prefix); channel position ``i`` of the generation's channel list is partition
``i``. Writers share one idempotent producer per process (no duplicates or reordering on retries; the
reader drops duplicated message ids anyway); readers ``assign()`` their partitions at explicit offsets
(no consumer group, as ``connectors.kafka`` does) and pause the partitions whose reader queue is full. A
completed checkpoint deletes the records up to its barrier (``delete_records``, where the broker supports
it); old generations' topics are deleted. Client settings come from the URI's query and ``config=``, as
for Kafka logs (``connectors.kafka.config``).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from typing import Any, Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from connectors.kafka.config import parse_kafka_uri
from eventlog import bundle

from .barrier import decode_barrier
from .channels import ChannelAppender, ChannelStore, ChannelTail
from .errors import ChannelError

_log = logging.getLogger("runtime.channels")
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


class _KafkaAppender(ChannelAppender):
    def __init__(self, store: "KafkaChannelStore", topic: str, partition: int, channel: str) -> None:
        self._store = store
        self._topic = topic
        self._partition = partition
        self._channel = channel

    def append(self, data: Any, *, barrier: bool = False) -> None:
        producer = self._store.producer()
        value = bytes(data)
        while True:
            try:
                producer.produce(self._topic, value=value, partition=self._partition,
                                 on_delivery=self._store._on_delivery)
                break
            except BufferError:  # the producer's queue is full: let it deliver first
                producer.poll(0.01)
            except KafkaException as e:
                raise ChannelError(f"kafka refused a bundle of channel {self._channel!r}: {e}") from None
        producer.poll(0)
        self._store._raise_errors(self._channel)

    def close(self) -> None:
        self._store.flush(self._channel)


class _KafkaTail(ChannelTail):
    def __init__(self, store: "KafkaChannelStore", topic: str, channels: Sequence[tuple[int, str]]) -> None:
        self._store = store
        self._topic = topic
        self._names = dict(channels)
        self._consumer = Consumer(store.target.consumer(**{
            "group.id": f"eventlog-runtime-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 5,
            "fetch.error.backoff.ms": 5,
            "max.partition.fetch.bytes": 16 << 20,
            "queued.max.messages.kbytes": 32 << 10,
            "topic.metadata.refresh.interval.ms": 1000,
        }))
        self._consumer.assign([TopicPartition(topic, p, 0) for p in self._names])
        self._paused: set[int] = set()
        self._unwanted = {p: 0 for p in self._names}
        self._barrier_offsets: dict[int, list[tuple[int, int]]] = {p: [] for p in self._names}

    def poll(self, wanted: Sequence[int]) -> list[tuple[int, bundle.Bundle]]:
        # pausing a partition drops what librdkafka prefetched for it: pause only channels the reader does
        # not want for a while (wanted by none of the last polls), resume at once when wanted again
        want = set(wanted)
        for p in self._names:
            self._unwanted[p] = 0 if p in want else self._unwanted[p] + 1
        pause = [p for p in self._names if self._unwanted[p] >= 20 and p not in self._paused]
        resume = [p for p in self._paused if p in want]
        if pause:
            self._consumer.pause([TopicPartition(self._topic, p) for p in pause])
            self._paused.update(pause)
        if resume:
            self._consumer.resume([TopicPartition(self._topic, p) for p in resume])
            self._paused.difference_update(resume)
        if not want:
            return []
        try:
            msgs = self._consumer.consume(64, timeout=0)
        except KafkaException as e:
            raise ChannelError(f"kafka read error on {self._topic}: {e}") from None
        out = []
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() in (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART):
                    continue
                raise ChannelError(f"kafka read error on {self._topic}: {err.str()}")
            p = m.partition()
            try:
                b = bundle.decode(m.value())
            except bundle.BundleError as e:
                raise ChannelError(f"bad bundle in channel {self._names.get(p)!r}: {e}",
                                   offset=m.offset()) from None
            if b.type == bundle.BARRIER:
                ckpt = decode_barrier(b.payload(0))
                self._barrier_offsets[p].append((ckpt, m.offset()))
            out.append((p, b))
        return out

    def trim(self, position: int, checkpoint: int) -> None:
        marks = self._barrier_offsets.get(position, [])
        upto = [off for ckpt, off in marks if ckpt <= checkpoint]
        if not upto:
            return
        self._barrier_offsets[position] = [(c, o) for c, o in marks if c > checkpoint]
        self._store.delete_before(self._topic, position, max(upto) + 1)

    def close(self) -> None:
        self._consumer.close()


class KafkaChannelStore(ChannelStore):
    """Channel logs on a Kafka cluster (see the module doc). ``timeout`` bounds waits on the cluster.

    A bundle is one record, so writers cut bundles below ``message.max.bytes`` (1 MB unless the URI or
    ``config`` says otherwise; the broker's limit must be at least as large); a single message (one record
    batch) larger than that is refused with a ``ChannelError``: use smaller batches."""

    def __init__(self, uri: str, job: str, *, config: dict[str, Any] | None = None, timeout: float = 30.0) -> None:
        self.uri = uri
        self.job = job
        self.target = parse_kafka_uri(uri, config)
        self.timeout = timeout
        self._admin = AdminClient(self.target.admin())
        self._producer: Producer | None = None
        self._errors: list[str] = []
        self._trim_supported = True
        self._trim_failures = 0          # trims failed in a row (transient errors)
        self._trim_retry_at = 0.0        # monotonic time before which trims are skipped
        limit = int(self.target.settings.get("message.max.bytes", 1_000_000))
        self.max_bundle_bytes = limit - 1024   # the record's own framing

    def topic(self, generation: int) -> str:
        """The topic of a generation's channels."""
        return self.target.topic(f"{_SAFE.sub('_', self.job)}.g{generation:06d}")

    def producer(self) -> Producer:
        """The process's producer for channel bundles (made on first use)."""
        if self._producer is None:
            self._producer = Producer(self.target.producer(**{
                "enable.idempotence": True,
                "message.max.bytes": self.max_bundle_bytes + 1024,
                "acks": "all",
                "linger.ms": 1,
                "batch.size": 1 << 20,
                "queue.buffering.max.kbytes": 256 << 10,
            }))
        return self._producer

    def _on_delivery(self, err, msg) -> None:  # noqa: ANN001
        if err is not None:
            self._errors.append(f"{err.str()} ({msg.topic()}[{msg.partition()}])")

    def _raise_errors(self, channel: str) -> None:
        if self._errors:
            raise ChannelError(f"kafka did not take {len(self._errors)} bundle(s) of channel {channel!r}: "
                               f"{self._errors[0]}")

    def flush(self, channel: str) -> None:
        """Wait until every produced bundle is acknowledged."""
        if self._producer is not None:
            left = self._producer.flush(self.timeout)
            self._raise_errors(channel)
            if left:
                raise ChannelError(f"{left} bundle(s) of channel {channel!r} not acknowledged in {self.timeout} s")

    def prepare(self, generation: int, channels: Sequence[str]) -> None:
        topic = self.topic(generation)
        rf = self.target.replication_factor if self.target.replication_factor is not None else -1
        futures = self._admin.create_topics([NewTopic(topic, num_partitions=max(1, len(channels)), replication_factor=rf)])
        try:
            futures[topic].result(self.timeout)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise ChannelError(f"cannot create channel topic {topic!r}: {e.args[0].str()}") from None
        deadline = time.monotonic() + self.timeout
        while True:  # wait until the metadata shows every partition
            md = self._admin.list_topics(topic, timeout=self.timeout)
            t = md.topics.get(topic)
            if t is not None and t.error is None and len(t.partitions) >= len(channels):
                return
            if time.monotonic() > deadline:
                raise ChannelError(f"channel topic {topic!r} did not appear within {self.timeout} s")
            time.sleep(0.05)

    def appender(self, generation: int, position: int, channel: str) -> ChannelAppender:
        return _KafkaAppender(self, self.topic(generation), position, channel)

    def tail(self, generation: int, channels: Sequence[tuple[int, str]]) -> ChannelTail:
        return _KafkaTail(self, self.topic(generation), channels)

    def delete_before(self, topic: str, partition: int, offset: int) -> None:
        """Delete a partition's records before ``offset``. Trimming is an optimisation: a failure that may pass
        (a leader change, a timeout) skips it for a while (backoff 1 s … 60 s; a later trim deletes everything
        before its own, later offset), one that cannot (a broker without DeleteRecords, a policy or ACL that
        forbids it) switches it off, logged once."""
        if not self._trim_supported or time.monotonic() < self._trim_retry_at:
            return
        try:
            futures = self._admin.delete_records([TopicPartition(topic, partition, offset)],
                                                 request_timeout=self.timeout)
            for f in futures.values():
                f.result(self.timeout)
        except Exception as e:  # noqa: BLE001 - classified below; never fails the checkpoint
            if _trim_forbidden(e):
                _log.warning("kafka channel trim switched off (%s); old records stay until retention", e)
                self._trim_supported = False
            else:
                self._trim_failures += 1
                delay = min(60.0, 2.0 ** (self._trim_failures - 1))
                self._trim_retry_at = time.monotonic() + delay
                _log.info("kafka channel trim failed (%s); retrying in %.0f s", e, delay)
            return
        self._trim_failures = 0

    def drop_generations(self, below: int) -> None:
        head = self.target.topic(f"{_SAFE.sub('_', self.job)}.g")
        md = self._admin.list_topics(timeout=self.timeout)
        old = [t for t in md.topics if t.startswith(head) and t[len(head):].isdigit() and int(t[len(head):]) < below]
        if old:
            for f in self._admin.delete_topics(old, operation_timeout=self.timeout).values():
                try:
                    f.result(self.timeout)
                except KafkaException as e:
                    _log.info("could not delete old channel topic: %s", e)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self.timeout)
            self._producer = None

    def __repr__(self) -> str:
        return f"KafkaChannelStore({self.uri!r}, job={self.job!r})"


_TRIM_FORBIDDEN = {KafkaError.UNSUPPORTED_VERSION, KafkaError.POLICY_VIOLATION, KafkaError.TOPIC_AUTHORIZATION_FAILED,
                   KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.INVALID_REQUEST}


def _trim_forbidden(e: BaseException) -> bool:
    """True for a DeleteRecords failure that will never succeed on this cluster (no such API, a policy, ACLs)."""
    if isinstance(e, (AttributeError, NotImplementedError, TypeError)):  # a client without delete_records
        return True
    err = e.args[0] if isinstance(e, KafkaException) and e.args else None
    return getattr(err, "code", lambda: None)() in _TRIM_FORBIDDEN
