"""Kafka channel appenders keep at most ``MAX_IN_FLIGHT`` bundles of a channel unacknowledged (no broker needed).

An idempotent librdkafka producer sends nothing more to a partition with five messages in flight, and while
more records wait behind them its broker thread polls its socket with a zero timeout until the broker
answers: with a slow broker (a busy machine, a GC pause) every producing task burnt a core, which starved
the broker further, and a 4 s benchmark job took 150-250 s. The appender now waits for a delivery report
(a blocking ``poll`` with a positive timeout) before a partition's sixth unacknowledged bundle, so librdkafka
never holds a record it may not send. These tests use a fake producer whose broker answers only when the
appender waits, so they count what the appender hands librdkafka, not how fast anything runs.
"""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("confluent_kafka")

from runtime import ChannelError
from runtime.channels.kafka import MAX_IN_FLIGHT, KafkaChannelStore

URI = "kafka://127.0.0.1:9/t"   # never connected: the fake producer stands in for the cluster


class _Record:
    def __init__(self, topic: str, partition: int, value: bytes) -> None:
        self._topic, self._partition, self._value = topic, partition, value

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def value(self) -> bytes:
        return self._value


class _SlowBroker:
    """A producer whose broker acknowledges the oldest record only when the caller waits for it (``poll`` with
    a positive timeout), or never (``answers=False``). It records the most records it held unacknowledged
    per partition and every poll's timeout."""

    def __init__(self, answers: bool = True) -> None:
        self.answers = answers
        self.pending: list[tuple[_Record, object]] = []
        self.most: dict[int, int] = {}
        self.polls: list[float] = []
        self.acked: list[tuple[int, bytes]] = []

    def produce(self, topic: str, value: bytes, partition: int, on_delivery) -> None:
        self.pending.append((_Record(topic, partition, value), on_delivery))
        held = sum(1 for r, _cb in self.pending if r.partition() == partition)
        self.most[partition] = max(self.most.get(partition, 0), held)

    def poll(self, timeout: float = 0.0) -> int:
        self.polls.append(timeout)
        if timeout > 0 and self.answers and self.pending:
            record, cb = self.pending.pop(0)
            self.acked.append((record.partition(), record.value()))
            cb(None, record)
            return 1
        time.sleep(timeout)           # nothing to report: a real poll blocks as long
        return 0

    def flush(self, timeout: float | None = None) -> int:
        while self.answers and self.pending:
            self.poll(1.0)
        return len(self.pending)


def _store(fake: _SlowBroker, uri: str = URI) -> KafkaChannelStore:
    store = KafkaChannelStore(uri, "job", timeout=0.5)
    store.producer()            # the real settings decide the limit (idempotent by default) ...
    store._producer = fake      # ... and the fake plays the cluster
    return store


def test_a_channel_never_has_more_than_max_in_flight_bundles_unacknowledged():
    """30 bundles to a partition whose broker is slow: librdkafka got at most MAX_IN_FLIGHT of them at a time
    (before the fix all 30: the 6th and later waited inside librdkafka, behind a busy-polling broker thread),
    the appender waited with positive timeouts (it blocks on the delivery report, it does not spin), and
    every bundle was acknowledged in order."""
    fake = _SlowBroker()
    store = _store(fake)
    appender = store.appender(1, 0, "a.0-b.0")
    for i in range(30):
        appender.append(b"bundle %d" % i)
    assert fake.most[0] == MAX_IN_FLIGHT
    assert store.in_flight_waits == 30 - MAX_IN_FLIGHT
    waits = [t for t in fake.polls if t > 0]
    assert len(waits) == 30 - MAX_IN_FLIGHT          # one blocking poll per report it waited for
    appender.close()
    assert fake.acked == [(0, b"bundle %d" % i) for i in range(30)]
    assert fake.most[0] == MAX_IN_FLIGHT


def test_channels_are_limited_each_on_their_own():
    """A partition with MAX_IN_FLIGHT bundles out does not hold back another channel's appends."""
    fake = _SlowBroker()
    store = _store(fake)
    a, b = store.appender(1, 0, "a.0-b.0"), store.appender(1, 1, "a.0-b.1")
    for i in range(MAX_IN_FLIGHT):
        a.append(b"a%d" % i)
    for i in range(MAX_IN_FLIGHT):
        b.append(b"b%d" % i)
    assert store.in_flight_waits == 0 and fake.most == {0: MAX_IN_FLIGHT, 1: MAX_IN_FLIGHT}
    a.append(b"a%d" % MAX_IN_FLIGHT)                 # waits for partition 0's first report only
    assert store.in_flight_waits == 1 and fake.acked == [(0, b"a0")]


def test_a_broker_that_acknowledges_nothing_stalls_the_channel_without_spinning(caplog):
    """Bundles never time out (``message.timeout.ms=0``): an append behind MAX_IN_FLIGHT unacknowledged
    bundles waits for the broker however long it takes — every poll of the wait blocks (a positive
    timeout), a warning says so after the store's ``timeout`` — and goes on once the broker answers; a
    store closed meanwhile ends the wait with a ChannelError."""
    fake = _SlowBroker(answers=False)
    store = _store(fake)
    store.timeout = 0.1
    appender = store.appender(1, 0, "a.0-b.0")
    for i in range(MAX_IN_FLIGHT):
        appender.append(b"x%d" % i)
    done: list[BaseException | None] = []

    def sixth() -> None:
        try:
            appender.append(b"x%d" % MAX_IN_FLIGHT)
            done.append(None)
        except BaseException as e:  # noqa: BLE001 - checked below
            done.append(e)

    waiting = threading.Thread(target=sixth)
    waiting.start()
    _until(lambda: sum(1 for t in fake.polls if t > 0) >= 5)   # >= 5 blocking polls of 50 ms: > timeout
    assert not done and fake.most[0] == MAX_IN_FLIGHT
    assert all(t > 0 for t in fake.polls[MAX_IN_FLIGHT:]), "the wait polled without blocking"
    fake.answers = True                                         # the broker is back
    waiting.join(10)
    assert done == [None] and fake.acked[0] == (0, b"x0") and fake.most[0] == MAX_IN_FLIGHT
    assert "acknowledged none of the 5 bundles of channel 'a.0-b.0'" in caplog.text

    fake.answers = False                                        # x1-x5 are out: the next append waits
    done.clear()
    waiting = threading.Thread(target=sixth)
    waiting.start()
    _until(lambda: store.in_flight_waits == 2)
    store._producer = None                                      # what KafkaChannelStore.close() leaves
    waiting.join(10)
    assert isinstance(done[0], ChannelError) and "closed" in str(done[0])


def _until(condition, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_a_producer_without_idempotence_is_not_limited():
    """The limit is librdkafka's idempotent one: a non-idempotent producer (the URI's choice) is left alone."""
    fake = _SlowBroker(answers=False)
    store = _store(fake, URI + "?enable.idempotence=false")
    appender = store.appender(1, 0, "a.0-b.0")
    for _ in range(3 * MAX_IN_FLIGHT):
        appender.append(b"x")
    assert fake.most[0] == 3 * MAX_IN_FLIGHT and store.in_flight_waits == 0
