"""Channel logs on Kafka: a topic per job generation, a partition per channel, one bundle per record.

The topic of generation ``g`` of job ``job`` under ``kafka://host:port/prefix`` is ``prefix.job.g<g>``
(``job.g<g>`` without a prefix); channel position ``i`` of the generation's channel list is partition
``i``. A task's writers share one idempotent producer, and it is *gap-less*: librdkafka's idempotence alone
prevents duplicates and reordering, but a bundle that fails for good (the broker refuses it, or — with a
finite ``message.timeout.ms`` — it timed out during a broker outage) is dropped while the bundles after it
are still stored, a hole in the channel. So the producer runs with ``enable.gapless.guarantee`` (a failed
bundle stops the producer before anything after it is sent) and ``message.timeout.ms=0`` (a bundle is
never given up; a broker outage stalls the channel instead), and the appender raises ``ChannelError`` at
the first failed bundle (checked on every append and while the writer is idle): the task fails and the
job restarts from its last checkpoint, with no hole for a reader to find. At most five bundles of a channel
are unacknowledged at a time (``MAX_IN_FLIGHT``; the appender waits for a delivery report before the sixth):
an idempotent librdkafka producer sends nothing more to a partition with five messages in flight, and
while records wait behind them its broker thread does not sleep but polls its socket with a zero timeout
until the broker answers — a core per producer for as long as the broker is slow, which on a small
machine starved the broker itself (the job took 150 s instead of 4). Readers ``assign()`` their
partitions at explicit offsets (no consumer group, as ``connectors.kafka`` does), with
``auto.offset.reset=error`` (a position whose records are gone is a ``ChannelError``, never a silent jump),
and pause the partitions whose reader queue is full. A completed checkpoint deletes the records up to its
barrier (``delete_records``, where the broker supports it); old generations' topics are deleted. Client
settings come from the URI's query and ``config=``, as for Kafka logs (``connectors.kafka.config``).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from typing import Any, Sequence

from eventlog._extras import require

require("confluent_kafka", "kafka", "kafka:// channels")

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from connectors.kafka.config import parse_kafka_uri
from eventlog import bundle

from ..errors import ChannelError
from .barrier import decode_barrier
from .base import ChannelAppender, ChannelStore, ChannelTail

_log = logging.getLogger("runtime.channels")
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


MAX_IN_FLIGHT = 5
"""The most bundles of one channel (partition) an idempotent producer holds unacknowledged: librdkafka's
per-partition limit of messages in flight with idempotence (``RD_KAFKA_IDEMP_MAX_INFLIGHT``, the broker's
de-duplication window). With more queued, its broker thread busy-polls while those five are in flight
(``rd_kafka_toppar_producer_serve`` asks for a wake-up now, then finds it may not send); with at most five,
a queued bundle always has room to be sent, and the thread sleeps until the broker answers."""


class _KafkaAppender(ChannelAppender):
    def __init__(self, store: "KafkaChannelStore", topic: str, partition: int, channel: str) -> None:
        self._store = store
        self._topic = topic
        self._partition = partition
        self._channel = channel
        self._key = (topic, partition)

    def append(self, data: Any, *, barrier: bool = False) -> None:
        store = self._store
        store._raise_errors(self._channel)      # nothing more after a bundle the cluster did not take
        producer = store.producer()
        store.wait_in_flight(self._key, self._channel)   # no busy broker thread behind five in flight
        value = bytes(data)
        full_since = None
        while True:
            try:
                producer.produce(self._topic, value=value, partition=self._partition, on_delivery=store._on_delivery)
                store._in_flight[self._key] = store._in_flight.get(self._key, 0) + 1
                break
            except BufferError:  # the producer's queue is full: let it deliver first (bundles never time out,
                now = time.monotonic()   # so a cluster that takes nothing fails the task, before this bundle)
                full_since = full_since if full_since is not None else now
                if now - full_since > store.timeout:
                    raise ChannelError(f"kafka took no bundle of channel {self._channel!r} for {store.timeout} s "
                                       f"(the producer's queue stayed full)") from None
                store.poll(self._channel, 0.01)
            except KafkaException as e:  # e.g. stopped by the gap-less guarantee: say which bundle failed
                store.failed(self._channel, e)
        store.poll(self._channel)

    def check(self) -> None:
        self._store.poll(self._channel)

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
            "auto.offset.reset": "error",   # a position whose records are gone: an error, not a silent jump
            "fetch.wait.max.ms": 100,       # a long poll: new data still returns at once (fetch.min.bytes 1)
            "fetch.error.backoff.ms": 5,
            "fetch.queue.backoff.ms": 5,    # not 1 s: a queue the reader just drained is refilled at once
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
                where = f"channel {self._names.get(m.partition())!r} ({self._topic}[{m.partition()}])"
                if err.code() == KafkaError._AUTO_OFFSET_RESET:
                    raise ChannelError(f"{where}: the records at the reader's position are gone (deleted or "
                                       f"truncated): {err.str()}")
                raise ChannelError(f"kafka read error on {where}: {err.str()}")
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

    min_idle_interval = 0.2
    """An idle channel's EMPTY bundle every 200 ms, not 20: each is a produce request and wakes the reader's
    fetch, and on a small machine that chatter (with 5 ms fetch polls) cost the broker ~40% of a core while
    the job was idle, starving it until the controller fenced it."""

    def __init__(self, uri: str, job: str, *, config: dict[str, Any] | None = None, timeout: float = 30.0) -> None:
        self.uri = uri
        self.job = job
        self.target = parse_kafka_uri(uri, config)
        self.timeout = timeout
        self._admin = AdminClient(self.target.admin())
        self._producer: Producer | None = None
        self._errors: list[str] = []       # bundles the cluster did not take (delivery reports), first first
        self._stopped: str | None = None   # why the producer stopped (it takes nothing more)
        self._gapless = True
        self._max_in_flight: int | None = MAX_IN_FLIGHT   # None: not idempotent, no limit of ours
        self._in_flight: dict[tuple[str, int], int] = {}  # bundles produced and not yet reported, per partition
        self.in_flight_waits = 0
        """Times an append waited for a delivery report because its channel had ``MAX_IN_FLIGHT`` bundles out."""
        self._channels: dict[tuple[str, int], str] = {}
        self._trim_supported = True
        self._trim_failures = 0          # trims failed in a row (transient errors)
        self._trim_retry_at = 0.0        # monotonic time before which trims are skipped
        limit = int(self.target.settings.get("message.max.bytes", 1_000_000))
        self.max_bundle_bytes = limit - 1024   # the record's own framing

    def topic(self, generation: int) -> str:
        """The topic of a generation's channels."""
        return self.target.topic(f"{_SAFE.sub('_', self.job)}.g{generation:06d}")

    def producer(self) -> Producer:
        """The producer of this store's channel bundles (made on first use): idempotent and gap-less (see the
        module doc)."""
        if self._producer is None:
            settings = self.target.producer(**{
                "enable.idempotence": True,
                "enable.gapless.guarantee": True,   # a failed bundle stops the producer: no hole in a channel
                "message.timeout.ms": 0,            # never give a bundle up (a timed-out bundle is a hole too)
                "message.max.bytes": self.max_bundle_bytes + 1024,
                "acks": "all",
                "linger.ms": 1,
                "batch.size": 1 << 20,
                "queue.buffering.max.kbytes": 256 << 10,
            })
            if not _flag(settings.get("enable.idempotence")):
                settings["enable.gapless.guarantee"] = False   # needs idempotence; readers still catch gaps
            self._gapless = _flag(settings.get("enable.gapless.guarantee"))
            self._max_in_flight = MAX_IN_FLIGHT if _flag(settings.get("enable.idempotence")) else None
            self._producer = Producer(settings)
        return self._producer

    def _on_delivery(self, err, msg) -> None:  # noqa: ANN001 - librdkafka's delivery report
        key = (msg.topic(), msg.partition())
        if self._in_flight.get(key):
            self._in_flight[key] -= 1
        if err is not None:
            channel = self._channels.get(key, f"{msg.topic()}[{msg.partition()}]")
            self._errors.append(f"{_describe(msg.value())} of channel {channel!r}: {err.str()}")

    def poll(self, channel: str, timeout: float = 0.0) -> None:
        """Serve the producer's delivery reports; raise ``ChannelError`` (writing ``channel``) if a bundle was
        not taken or the producer stopped."""
        if self._producer is not None:
            try:
                self._producer.poll(timeout)
            except KafkaException as e:   # a fatal error (the gap-less guarantee stopped the producer)
                self.failed(channel, e)
        self._raise_errors(channel)

    def wait_in_flight(self, key: tuple[str, int], channel: str) -> None:
        """Wait, serving delivery reports, until partition ``key`` has fewer than ``MAX_IN_FLIGHT`` bundles
        unacknowledged (see ``MAX_IN_FLIGHT``). A broker that acknowledges nothing stalls the channel, as an
        outage does (bundles never time out; logged after ``timeout`` seconds); a bundle the cluster did not
        take, or a store closed meanwhile, raises ``ChannelError``."""
        limit = self._max_in_flight
        if limit is None or self._in_flight.get(key, 0) < limit:
            return
        self.in_flight_waits += 1
        warn_at = time.monotonic() + self.timeout
        while self._in_flight.get(key, 0) >= limit:
            if self._producer is None:
                raise ChannelError(f"the kafka channel store of channel {channel!r} was closed")
            self.poll(channel, 0.05)      # returns at the first delivery report (or after 50 ms)
            if warn_at is not None and time.monotonic() > warn_at:
                warn_at = None
                _log.warning("kafka acknowledged none of the %d bundles of channel %r in flight for %s s; the "
                             "channel waits for the cluster", self._in_flight.get(key, 0), channel, self.timeout)

    def failed(self, channel: str, error: BaseException) -> None:
        """Raise the ``ChannelError`` for a producer that stopped with ``error``, naming the first bundle that
        was not taken when its delivery report says which."""
        self._stopped = self._stopped or str(error)
        if self._producer is not None:
            # the failed bundle's delivery report: a stopped producer reports every bundle in flight, but on a busy
            # machine after its fatal error, so wait for it (briefly) rather than poll once
            deadline = time.monotonic() + min(self.timeout, _REPORT_WAIT)
            while True:
                try:
                    self._producer.poll(0.05)
                except Exception:  # noqa: BLE001 - the producer is stopped; its error is raised below
                    pass
                if self._errors or not any(self._in_flight.values()) or time.monotonic() > deadline:
                    break
        self._raise_errors(channel)
        raise ChannelError(f"kafka producer of channel {channel!r} stopped: {error}") from None

    def _raise_errors(self, channel: str) -> None:
        if self._errors:
            self._stopped = self._stopped or self._errors[0]
            after = "; the producer is gap-less: nothing after it was stored" if self._gapless else ""
            raise ChannelError(f"kafka did not take {len(self._errors)} bundle(s) (writing channel {channel!r}); "
                               f"the first: {self._errors[0]}{after}")

    def flush(self, channel: str) -> None:
        """Wait until every produced bundle is acknowledged."""
        if self._stopped:               # a stopped producer delivers nothing more: do not wait for it
            self.poll(channel)
            raise ChannelError(f"kafka producer of channel {channel!r} stopped: {self._stopped}")
        if self._producer is not None:
            try:
                left = self._producer.flush(self.timeout)
            except Exception as e:  # noqa: BLE001 - a producer stopped by a fatal error fails its flush
                self.failed(channel, e)
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
        while True:  # wait until the metadata shows every partition (a broker failing over: ask again)
            try:
                md = self._admin.list_topics(topic, timeout=max(0.1, deadline - time.monotonic()))
            except KafkaException as e:
                md = None
                error = e
            t = md.topics.get(topic) if md is not None else None
            if t is not None and t.error is None and len(t.partitions) >= len(channels):
                return
            if md is None and time.monotonic() > deadline:
                raise ChannelError(f"channel topic {topic!r}: no metadata within {self.timeout} s: {error}") from None
            if time.monotonic() > deadline:
                raise ChannelError(f"channel topic {topic!r} did not appear within {self.timeout} s")
            time.sleep(0.05)

    def appender(self, generation: int, position: int, channel: str) -> ChannelAppender:
        self._channels[(self.topic(generation), position)] = channel
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
        """Clean-up only: a cluster that cannot answer now (a broker failing over) leaves the old topics to the
        next call (the next generation's, or the end of the run), logged; it never fails the run."""
        head = self.target.topic(f"{_SAFE.sub('_', self.job)}.g")
        try:
            md = self._admin.list_topics(timeout=self.timeout)
        except KafkaException as e:
            _log.info("could not list old channel topics (they stay until a later clean-up): %s", e)
            return
        old = [t for t in md.topics if t.startswith(head) and t[len(head):].isdigit() and int(t[len(head):]) < below]
        if old:
            for f in self._admin.delete_topics(old, operation_timeout=self.timeout).values():
                try:
                    f.result(self.timeout)
                except KafkaException as e:
                    _log.info("could not delete old channel topic: %s", e)

    def close(self) -> None:
        if self._producer is not None:
            if not self._stopped:           # a stopped producer's undelivered bundles are dropped
                try:
                    self._producer.flush(self.timeout)
                except Exception:  # noqa: BLE001 - a producer stopped by a fatal error: already reported
                    pass
            self._producer = None

    def __repr__(self) -> str:
        return f"KafkaChannelStore({self.uri!r}, job={self.job!r})"


_REPORT_WAIT = 10.0
"""Seconds a stopped producer's channel waits for the delivery report naming the bundle that was not taken."""


def _flag(value: Any) -> bool:
    return str(value).strip().lower() not in ("false", "0", "no", "off")


def _describe(value: bytes | None) -> str:
    """Which bundle a record holds (for error messages)."""
    try:
        b = bundle.decode(value)
    except Exception:  # noqa: BLE001 - only for a message
        return "a bundle"
    if b.type == bundle.BUNDLE:
        return f"the bundle of messages {b.last_id - b.count + 1}-{b.last_id}"
    return f"the {'barrier' if b.type == bundle.BARRIER else 'empty bundle'} after message {b.last_id}"


_TRIM_FORBIDDEN = {KafkaError.UNSUPPORTED_VERSION, KafkaError.POLICY_VIOLATION, KafkaError.TOPIC_AUTHORIZATION_FAILED,
                   KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.INVALID_REQUEST}


def _trim_forbidden(e: BaseException) -> bool:
    """True for a DeleteRecords failure that will never succeed on this cluster (no such API, a policy, ACLs)."""
    if isinstance(e, (AttributeError, NotImplementedError, TypeError)):  # a client without delete_records
        return True
    err = e.args[0] if isinstance(e, KafkaException) and e.args else None
    return getattr(err, "code", lambda: None)() in _TRIM_FORBIDDEN
