"""Channel writers and readers over file and Kafka channel logs: bundles, ids, duplicates, gaps, barrier
alignment, empty bundles, the ring's bound, the file layout."""

from __future__ import annotations

import os
import threading
import time

import pyarrow as pa
import pytest

from eventlog import bundle
from runtime import ChannelError, JobAbortedError, WriterSettings
from runtime.channels.factory import open_channel_store
from runtime.channels.payload import FINISHED_TS, decode_batch, encode_batch
from runtime.channels.reader import BARRIER, DATA, FRONTIER, ChannelReader
from runtime.channels.writer import ChannelWriter, Transfer
from tests.support.channels import channel_pair


def _batch(i: int) -> pa.RecordBatch:
    return pa.record_batch({"x": [i, i + 1]})


def _drain(reader: ChannelReader, until, timeout: float = 5.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out += reader.poll()
        if until(out):
            return out
        time.sleep(0.002)
    raise AssertionError(f"reader did not get there in {timeout} s; got {out[-5:]}")


@pytest.fixture(params=["file", pytest.param("kafka", marks=pytest.mark.kafka)])
def store(request, tmp_path):
    uri = str(tmp_path / "ch") if request.param == "file" else request.getfixturevalue("kafka_uri")
    s = open_channel_store(uri, "job")
    yield s
    s.close()


def test_messages_frontiers_and_barriers_flow_in_order(store):
    transfer, (w,), reader = channel_pair(store, ["a.0-b.0"])
    for t in range(10):
        assert w.write(encode_batch(t, _batch(t))) == t + 1          # ids are 1, 2, 3, …
        w.advance(t + 1)
        if t == 4:
            w.barrier(7)
    w.advance(FINISHED_TS)
    events = _drain(reader, lambda ev: reader.frontier.is_empty())
    data = [(e[1], e[2].column(0).to_pylist()) for e in events if e[0] == DATA]
    assert data == [(t, [t, t + 1]) for t in range(10)]
    kinds = [e[0] if e[0] != BARRIER else (BARRIER, e[1]) for e in events if e[0] != FRONTIER]
    assert kinds.index((BARRIER, 7)) == 5                               # after the 5 messages before it
    fronts = [list(e[1]) for e in events if e[0] == FRONTIER]
    assert fronts == sorted(fronts, key=lambda f: f[0] if f else 1 << 64) and fronts[-1] == []
    assert reader.offsets() == {"a.0-b.0": 10} and w.last_id == 10
    transfer.drain(5)


def test_file_layout_segments_end_at_barriers(tmp_path):
    store = open_channel_store(f"file://{tmp_path}/ch", "job")
    transfer, (w,), reader = channel_pair(store, ["a.0-b.0"])
    for t in range(4):
        w.write(encode_batch(t, _batch(t)))
        if t == 1:
            w.barrier(1)
    transfer.drain(5)
    d = tmp_path / "ch" / "job" / "g000001" / "a.0-b.0"
    assert sorted(os.listdir(d)) == ["00000000.bundles", "00000001.bundles"]
    first = list(bundle.iter_bundles((d / "00000000.bundles").read_bytes()))
    assert [b.type for b in first][-1] == bundle.BARRIER                  # a segment ends with its barrier
    ids = [int(i) for b in first if b.type == bundle.BUNDLE for i in b.ids]
    assert ids == [1, 2]
    second = list(bundle.iter_bundles((d / "00000001.bundles").read_bytes()))
    assert [decode_batch(b.payload(i))[0] for b in second if b.type == bundle.BUNDLE for i in range(b.count)] == [2, 3]
    _drain(reader, lambda ev: sum(e[0] == DATA for e in ev) == 4)
    reader._tail.trim(0, 1)                                               # checkpoint 1 complete
    assert sorted(os.listdir(d)) == ["00000001.bundles"]


def test_duplicates_are_dropped_and_gaps_raise(tmp_path):
    store = open_channel_store(str(tmp_path / "ch"), "job")
    store.prepare(1, ["a.0-b.0"])
    app = store.appender(1, 0, "a.0-b.0")
    one = bundle.encode([encode_batch(0, _batch(0)), encode_batch(0, _batch(1))], 1, bundle_ts=0)
    two = bundle.encode([encode_batch(1, _batch(2))], 3, bundle_ts=1)
    overlap = bundle.encode([encode_batch(1, _batch(2)), encode_batch(1, _batch(3))], 3, bundle_ts=1)
    for b in (one, one, two, overlap):       # a re-sent bundle, then one that overlaps by one message
        app.append(b)
    reader = ChannelReader(store.tail(1, [(0, "a.0-b.0")]), [(0, "a.0-b.0", 0)])
    events = _drain(reader, lambda ev: sum(e[0] == DATA for e in ev) >= 4)
    assert [e[2].column(0).to_pylist()[0] for e in events if e[0] == DATA] == [0, 1, 2, 3]
    assert reader.duplicates == 3
    app.append(bundle.encode([encode_batch(2, _batch(9))], 9, bundle_ts=2))   # ids 5…8 missing
    with pytest.raises(ChannelError, match="gap in channel 'a.0-b.0': expected message 5, got 9"):
        _drain(reader, lambda ev: False, timeout=1)


def test_barriers_are_aligned_across_channels(tmp_path):
    store = open_channel_store(str(tmp_path / "ch"), "job")
    transfer, (a, b), reader = channel_pair(store, ["a.0-c.0", "b.0-c.0"])
    a.write(encode_batch(0, _batch(0)))
    a.barrier(1)
    a.write(encode_batch(1, _batch(100)))     # after a's barrier: held back until b's barrier arrives
    time.sleep(0.1)
    early = _drain(reader, lambda ev: any(e[0] == DATA for e in ev))
    time.sleep(0.1)
    early += reader.poll()
    assert [e[2].column(0)[0].as_py() for e in early if e[0] == DATA] == [0]
    assert not any(e[0] == BARRIER for e in early)
    b.write(encode_batch(0, _batch(50)))
    b.barrier(1)
    rest = _drain(reader, lambda ev: any(e[0] == DATA and e[2].column(0)[0].as_py() == 100 for e in ev))
    order = [e[2].column(0)[0].as_py() if e[0] == DATA else e[0] for e in rest if e[0] != FRONTIER]
    assert order == [50, BARRIER, 100]
    transfer.drain(5)


def test_empty_bundles_carry_an_idle_channels_frontier(tmp_path):
    store = open_channel_store(str(tmp_path / "ch"), "job")
    transfer, (w,), reader = channel_pair(store, ["a.0-b.0"], WriterSettings(idle_interval=0.02))
    w.advance(42)                              # time moves, no data
    events = _drain(reader, lambda ev: any(e[0] == FRONTIER and list(e[1]) == [42] for e in ev))
    assert not any(e[0] == DATA for e in events)
    time.sleep(0.2)
    reader.poll()
    assert w.bundles >= 5 and w.messages == 0          # EMPTY bundles every 20 ms while idle
    segment = tmp_path / "ch" / "job" / "g000001" / "a.0-b.0" / "00000000.bundles"
    types = {b.type for b in bundle.iter_bundles(segment.read_bytes())}
    assert types == {bundle.EMPTY}
    transfer.drain(5)


def test_full_ring_blocks_the_writer_until_drained(tmp_path):
    store = open_channel_store(str(tmp_path / "ch"), "job")
    store.prepare(1, ["a.0-b.0"])
    aborted = threading.Event()

    def check():
        if aborted.is_set():
            raise JobAbortedError("aborted")

    transfer = Transfer(WriterSettings(capacity=1000), check)
    w = ChannelWriter("a.0-b.0", store.appender(1, 0, "a.0-b.0"), transfer)
    payload = b"x" * 400
    w.write(payload)
    w.write(payload)
    done = threading.Event()
    threading.Thread(target=lambda: (w.write(payload), done.set()), daemon=True).start()
    assert not done.wait(0.3)                  # 1200 bytes would exceed the 1000-byte ring: blocked
    assert w.peak_bytes == 800
    transfer.start()                           # the transfer thread drains the ring
    assert done.wait(5)
    assert w.peak_bytes <= 1000 and w.blocked_seconds > 0.2
    # a blocked writer gives up when its task is aborted
    stuck = Transfer(WriterSettings(capacity=10), check)
    w2 = ChannelWriter("a.0-b.0", store.appender(1, 0, "a.0-b.0"), stuck)
    w2.write(b"y" * 10)
    aborted.set()
    with pytest.raises(JobAbortedError):
        w2.write(b"y" * 10)
    transfer.drain(5)


def test_restored_ids_continue_and_old_ids_are_duplicates(tmp_path):
    store = open_channel_store(str(tmp_path / "ch"), "job")
    transfer, (w,), reader = channel_pair(store, ["a.0-b.0"], start_ids={"a.0-b.0": 41})
    assert w.write(encode_batch(0, _batch(0))) == 42
    events = _drain(reader, lambda ev: any(e[0] == DATA for e in ev))
    assert len([e for e in events if e[0] == DATA]) == 1 and reader.offsets() == {"a.0-b.0": 42}
    transfer.drain(5)


@pytest.mark.kafka
def test_kafka_channel_topics_per_generation(kafka_uri):
    store = open_channel_store(kafka_uri, "job")
    store.prepare(1, ["a.0-b.0", "a.0-b.1"])
    store.prepare(2, ["a.0-b.0"])
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(store.target.admin())
    topics = set(admin.list_topics(timeout=10).topics)
    assert {store.topic(1), store.topic(2)} <= topics
    assert len(admin.list_topics(store.topic(1), timeout=10).topics[store.topic(1)].partitions) == 2
    store.drop_generations(2)
    deadline = time.monotonic() + 10
    while store.topic(1) in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert store.topic(1) not in admin.list_topics(timeout=10).topics
    store.close()


def test_kafka_trim_survives_a_leader_change_and_stops_only_when_forbidden(monkeypatch):
    """delete_records failing with a transient error (a leader change) backs off and trims again later; a
    broker or policy that forbids it switches trimming off (runtime/channels/kafka.py)."""
    from confluent_kafka import KafkaError, KafkaException

    from runtime.channels.kafka import KafkaChannelStore

    class FakeAdmin:
        def __init__(self, outcomes):
            self.outcomes, self.calls = list(outcomes), []

        def delete_records(self, parts, request_timeout=None):
            self.calls.append(parts[0].offset)
            outcome = self.outcomes.pop(0)
            if outcome is not None:
                raise KafkaException(KafkaError(outcome))

            class Done:
                def result(self, timeout=None):
                    return None
            return {parts[0]: Done()}

    store = KafkaChannelStore("kafka://127.0.0.1:9/x", "job")
    store._admin = FakeAdmin([KafkaError.NOT_LEADER_FOR_PARTITION, None, KafkaError.POLICY_VIOLATION])
    store.delete_before("t", 0, 10)           # a leader change: skipped, not switched off
    assert store._trim_supported and store._admin.calls == [10]
    store.delete_before("t", 0, 20)           # within the backoff: not even tried
    assert store._admin.calls == [10]
    store._trim_retry_at = 0.0                # the backoff passed
    store.delete_before("t", 0, 30)           # succeeds (deletes everything before 30)
    store.delete_before("t", 0, 40)           # a policy forbids it: off for good
    store.delete_before("t", 0, 50)
    assert store._admin.calls == [10, 30, 40] and not store._trim_supported
