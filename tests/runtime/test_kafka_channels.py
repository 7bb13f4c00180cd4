"""Kafka channel logs on a real Apache Kafka broker: what librdkafka's idempotent producer does not promise.

The benchmark on Apache Kafka found a reader gap (``gap in channel 'source.0-map.0': expected message 14,
got 65``): the channel's producer had dropped bundles that failed for good and kept storing the ones after
them. An idempotent producer only rules out duplicates and reordering; a bundle that fails (refused by the
broker, or timed out during a broker outage) leaves a hole unless the producer is gap-less. These tests make
a broker refuse one bundle in the middle of a channel, deterministically, and check that nothing after it is
ever stored, that the writer fails with a ``ChannelError`` naming the bundle, and that a reader never sees a
hole (runtime/channels/kafka.py).
"""

from __future__ import annotations

import time
import uuid

import numpy as np
import pyarrow as pa
import pytest

from eventlog import bundle
from runtime import ChannelError, WriterSettings
from runtime.channels.factory import open_channel_store
from runtime.channels.payload import FINISHED_TS, encode_batch
from runtime.channels.reader import DATA, ChannelReader
from runtime.channels.writer import ChannelWriter, Transfer

pytestmark = pytest.mark.kafka

CHANNEL = "a.0-b.0"


def _payload(t: int, rows: int):
    return encode_batch(t, pa.record_batch({"x": np.arange(rows, dtype=np.int64)}))


def _limit_record_size(store, limit: int) -> None:
    """Lower the channel topic's ``max.message.bytes`` (as a cluster with a smaller limit than the client
    assumes would have it) and wait until the broker applies it."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient(store.target.admin())
    entry = ConfigEntry("max.message.bytes", str(limit), incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, store.topic(1), incremental_configs=[entry])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)
    deadline = time.monotonic() + 30
    while True:
        described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, store.topic(1))])
        config = next(iter(described.values())).result(30)
        if config["max.message.bytes"].value == str(limit):
            return
        assert time.monotonic() < deadline, "the broker did not apply max.message.bytes"
        time.sleep(0.05)


def _stored_ids(store) -> list[tuple[int, int]]:
    """The (first, last) message ids of the data bundles in the channel's partition, read with a plain
    consumer up to the partition's high watermark (its content once the producer stopped)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(store.target.consumer(**{"group.id": f"t-{uuid.uuid4().hex}", "enable.auto.commit": False,
                                                 "auto.offset.reset": "earliest"}))
    tp = TopicPartition(store.topic(1), 0, 0)
    _low, high = consumer.get_watermark_offsets(tp, timeout=30)
    consumer.assign([tp])
    ids: list[tuple[int, int]] = []
    deadline, offset = time.monotonic() + 30, -1
    try:
        while offset < high - 1:
            assert time.monotonic() < deadline, f"could not read the channel's log up to offset {high}"
            for m in consumer.consume(100, timeout=0.2):
                if m.error() is None:
                    offset = m.offset()
                    b = bundle.decode(m.value())
                    if b.type == bundle.BUNDLE:
                        ids.append((b.last_id - b.count + 1, b.last_id))
    finally:
        consumer.close()
    return ids


def test_a_bundle_the_broker_refuses_leaves_no_hole_in_the_channel(kafka_uri):
    """Bundles 1-3 are stored, the broker refuses bundle 4 (larger than the topic's max.message.bytes), and
    bundles 5-8 are appended right behind it. Before the fix the channel's log held 1, 2, 3, 5, 6, 7, 8 — a
    hole — and its reader failed with "gap in channel ...: expected message 4, got 5". Now the producer is
    gap-less: the log holds exactly 1-3, the writer fails with a ChannelError that names the refused bundle
    and the broker's reason, and the reader reads 1-3 without ever seeing a gap."""
    # one bundle per produce request (no batching), so bundles 5-8 are separate requests behind bundle 4
    store = open_channel_store(f"{kafka_uri}?linger.ms=0&batch.size=1", "job")
    store.prepare(1, [CHANNEL])
    _limit_record_size(store, 20_000)
    transfer = Transfer(WriterSettings(bundle_messages=1))
    writer = ChannelWriter(CHANNEL, store.appender(1, 0, CHANNEL), transfer, max_bundle_bytes=store.max_bundle_bytes)
    for t in range(8):
        p = _payload(t, 8_000 if t == 3 else 10)           # message 4: ~64 KB, over the topic's limit
        writer.write(p, p.size)
    writer.advance(FINISHED_TS)
    transfer.start()                                       # sends bundles 1..8 (and the final empty one) in order

    deadline = time.monotonic() + 30
    while transfer.error() is None:                        # the writer notices even with nothing left to append
        assert time.monotonic() < deadline, "the writer did not notice the refused bundle"
        time.sleep(0.01)
    stored = _stored_ids(store)
    assert stored == [(1, 1), (2, 2), (3, 3)], f"the channel's log has a hole: {stored}"

    error = transfer.error()
    assert isinstance(error, ChannelError)
    assert "messages 4-4" in str(error) and CHANNEL in str(error) and "too large" in str(error).lower()

    reader = ChannelReader(store.tail(1, [(0, CHANNEL)]), [(0, CHANNEL, 0)])
    got: list[int] = []
    while reader.offsets() != {CHANNEL: 3}:                # a gap would raise ChannelError here
        assert time.monotonic() < deadline, f"the reader got only {got}"
        got += [e[2].num_rows for e in reader.poll() if e[0] == DATA]
        time.sleep(0.005)
    assert got == [10, 10, 10]
    reader.close()
    transfer.stop()
    store.close()


class _CountingProducer:
    """Wraps the store's real producer: the most records of a partition produced and not yet reported."""

    def __init__(self, producer) -> None:
        self._producer = producer
        self.held: dict[int, int] = {}
        self.most = 0

    def produce(self, topic, value, partition, on_delivery):
        def reported(err, msg):
            self.held[msg.partition()] -= 1
            on_delivery(err, msg)

        self._producer.produce(topic, value=value, partition=partition, on_delivery=reported)
        self.held[partition] = self.held.get(partition, 0) + 1
        self.most = max(self.most, self.held[partition])

    def __getattr__(self, name):
        return getattr(self._producer, name)


def test_the_producer_never_holds_more_than_max_in_flight_bundles_of_a_channel(kafka_uri):
    """librdkafka's idempotent producer has at most five messages of a partition in flight; records queued
    behind them made its broker thread busy-poll (poll() with a zero timeout, ~10,000 a second) until the
    broker answered, and a slow broker kept four producing tasks at a core each (the Kafka-channel benchmark
    took 150-250 s instead of 4). The appender keeps at most MAX_IN_FLIGHT bundles per channel
    unacknowledged, counted from the real delivery reports: of 100 bundles to each of two channels, appended
    back to back, librdkafka never held more than MAX_IN_FLIGHT of one channel, every one was reported, and
    the first channel's log holds all 100 in order."""
    from runtime.channels.kafka import MAX_IN_FLIGHT

    store = open_channel_store(kafka_uri, "job")
    store.prepare(1, [CHANNEL, "a.0-b.1"])
    counting = store._producer = _CountingProducer(store.producer())
    appenders = [store.appender(1, 0, CHANNEL), store.appender(1, 1, "a.0-b.1")]
    for i in range(1, 101):
        for a in appenders:
            p = _payload(i, 100)
            a.append(bundle.encode([p.to_pybytes()], last_id=i, bundle_ts=i))
    for a in appenders:
        a.close()
    assert counting.most <= MAX_IN_FLIGHT, f"librdkafka held {counting.most} bundles of a channel"
    assert counting.held == {0: 0, 1: 0}
    assert _stored_ids(store) == [(i, i) for i in range(1, 101)]
    store.close()
