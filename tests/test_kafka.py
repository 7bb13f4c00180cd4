"""The Kafka log against a real local broker: layout, restarts, duplicates, seeks, errors, round trips."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from capture import Capture
from connectors.kafka import parse_kafka_uri
from connectors.kafka.records import events_record
from eventlog import (
    CorruptLogError,
    DeliveryError,
    EventLogError,
    HeaderMismatchError,
    InvalidURIError,
    Messages,
    StreamHeader,
    open_log,
)
from eventlog import bundle
from eventlog.encoding import codec_for
from replay import Replayer, copy

pytestmark = pytest.mark.kafka
SCHEMA = pa.schema([("n", pa.int64()), ("s", pa.string())])


def fill(log, stream="s", peers=1, n=10, part=0):
    with Capture(log, stream, part, peers, schema=SCHEMA) as cap:
        for t in range(n):
            cap.send(t, [{"n": t, "s": "x" * t}])
            cap.advance_to(t + 1)


def raw_records(bootstrap, topic, part):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "raw", "enable.partition.eof": True})
    c.assign([TopicPartition(topic, part, 0)])
    out = []
    while True:
        m = c.poll(5)
        assert m is not None, "no partition EOF within 5 s"
        if m.error():
            break
        out.append(bundle.decode(m.value()))
    c.close()
    return out


def test_uri_settings_reach_the_clients():
    t = parse_kafka_uri("kafka://h1:9092,h2:9093/team.jobA?security.protocol=SSL&linger.ms=20",
                        {"enable.idempotence": False})
    assert t.bootstrap == "h1:9092,h2:9093" and t.topic("clicks") == "team.jobA.clicks"
    assert t.producer()["security.protocol"] == "SSL" and t.producer()["linger.ms"] == "20"
    assert t.producer(**{"enable.idempotence": True})["enable.idempotence"] is False
    assert "linger.ms" not in t.consumer() and t.consumer()["security.protocol"] == "SSL"
    assert t.stream_of("team.jobA.clicks") == "clicks" and t.stream_of("other.clicks") is None
    with pytest.raises(InvalidURIError, match="settings"):
        open_log("kafka://127.0.0.1:1/x?no.such.setting=1")


def test_every_partition_opens_with_the_header(kafka_uri, kafka_bootstrap):
    log = open_log(kafka_uri)
    fill(log, peers=3, n=3, part=1)
    topic = log.target.topic("s")
    for p in range(3):
        recs = raw_records(kafka_bootstrap, topic, p)
        assert recs[0].count == 1 and int(recs[0].types[0]) == bundle.MSG_STREAM_HEADER
        assert StreamHeader.from_json(bytes(recs[0].payload(0))).peers == 3
    data = raw_records(kafka_bootstrap, topic, 1)[1:]
    ids = [i for b in data for i in b.ids.tolist()]
    assert ids == list(range(1, 8))  # sequence ids are the message ids of the bundles
    assert {int(t) for b in data for t in b.types} == {bundle.MSG_EVENT_MESSAGES, bundle.MSG_EVENT_PROGRESS}
    assert open_log(kafka_uri).streams() == ["s"]


def test_topic_with_too_few_partitions_is_refused(kafka_uri, kafka_bootstrap):
    log = open_log(kafka_uri)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(log.target.topic("s"), num_partitions=2, replication_factor=1)])[
        log.target.topic("s")].result()
    with pytest.raises(HeaderMismatchError, match="2 partitions"):
        Capture(log, "s", 0, 4, schema=SCHEMA)


def test_precreated_empty_topic_gets_the_header(kafka_uri, kafka_bootstrap):
    log = open_log(kafka_uri, timeout=5)
    topic = log.target.topic("s")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result()
    fill(log, peers=2, n=2)
    assert open_log(kafka_uri).header("s").peers == 2


def test_restarted_writer_continues_after_the_last_sequence_id(kafka_uri):
    log = open_log(kafka_uri)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    cap.send(0, [{"n": 1}])
    cap.advance_to(3)
    cap.abort()
    cap = Capture(open_log(kafka_uri), "s", 0, 1)  # another process would see the same
    assert cap.next_seq == 3 and list(cap.frontier) == [3]
    cap.send(4, [{"n": 2}])
    cap.close()
    assert [e.seq for e in open_log(kafka_uri).reader("s", 0)] == [1, 2, 3, 4]


def test_resent_records_of_another_writer_raise(kafka_uri, kafka_bootstrap):
    """Seqs 3..5 sent again by a producer that is not the part's writer (no writer epoch, as a restarted
    application that bypassed the fenced writer would) are a second history: readers raise instead of dropping
    them as duplicates (a true producer retry, same writer and epoch, is dropped: test_kafka_fencing.py)."""
    from connectors.kafka.errors import InterleavedWritersError

    log = open_log(kafka_uri)
    fill(log, n=4)
    header = log.header("s")
    enc = codec_for(header).standalone_encoder()
    events = [e.event for e in log.reader("s", 0)]
    value = events_record(3, [bundle.MSG_EVENT_MESSAGES, bundle.MSG_EVENT_PROGRESS, bundle.MSG_EVENT_MESSAGES],
                          [enc.encode(s, events[s - 1]) for s in (3, 4, 5)])
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    p.produce(log.target.topic("s"), value=value, partition=0)
    assert p.flush(10) == 0
    with pytest.raises(InterleavedWritersError) as e:
        list(open_log(kafka_uri).reader("s", 0))
    assert (e.value.stream, e.value.part) == ("s", 0) and e.value.offset is not None
    with pytest.raises(InterleavedWritersError):
        list(Replayer(open_log(kafka_uri), "s", 0, 1).completed())


def test_start_sequence_id_maps_to_kafka_offsets(kafka_uri):
    log = open_log(kafka_uri, bundle_events=3)  # small records: many offsets to search
    fill(log, n=40)
    for start in (1, 2, 17, 40, 81):
        assert [e.seq for e in open_log(kafka_uri).reader("s", 0, start=start)] == list(range(start, 82))
    stats = open_log(kafka_uri).part_stats("s", 0)
    assert (stats.first_seq, stats.next_seq, stats.bytes) == (1, 82, None) and stats.segments > 20


def test_reader_follows_new_records(kafka_uri):
    log = open_log(kafka_uri)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    reader = open_log(kafka_uri).reader("s", 0)
    seen = []
    for t in range(5):
        cap.send(t, [{"n": t}])
        cap.advance_to(t + 1)
        seen += [e.seq for e in reader]
    cap.close()
    deadline = time.monotonic() + 10  # a record committed just now reaches the consumer a fetch later
    while len(seen) < 11 and time.monotonic() < deadline:
        seen += [e.seq for e in reader]
    assert seen == list(range(1, 12))


def test_delivery_errors_raise(kafka_uri):
    log = open_log(kafka_uri, config={"message.max.bytes": 2000})
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    cap.send(0, [{"n": i, "s": os.urandom(50).hex()} for i in range(200)])  # one event far over the limit
    with pytest.raises(DeliveryError, match="s.*part 0|kafka"):
        cap.advance_to(1)


def test_unreachable_cluster_is_a_clear_error():
    log = open_log("kafka://127.0.0.1:9/x", timeout=1.5)
    with pytest.raises(EventLogError, match="did not answer"):
        log.header("s")


def test_damaged_record_names_its_offset(kafka_uri, kafka_bootstrap):
    log = open_log(kafka_uri)
    fill(log, n=2)
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    p.produce(log.target.topic("s"), value=b"\xba\xba\xfe\xca" + b"\x00" * 40, partition=0)
    p.flush(10)
    with pytest.raises(CorruptLogError, match="kafka offset") as ei:
        list(open_log(kafka_uri).reader("s", 0))
    assert ei.value.part == 0 and ei.value.offset is not None


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_files_to_kafka_to_files_round_trip(tmp_path, kafka_uri, encoding):
    src = open_log(tmp_path / "a")
    for w in range(3):
        with Capture(src, "s", w, 3, schema=SCHEMA, encoding=encoding) as cap:
            for t in range(6):
                cap.send(t, [{"n": 10 * t + w, "s": str(w)}])
                cap.advance_to(t + 1)
    copy(src, kafka_uri, "s", peers=2, key="n")
    copy(kafka_uri, open_log(tmp_path / "b"), "s", peers=4)

    def rows(log):
        out = []
        for j in range(log.header("s").peers):
            for t, tb in Replayer(log, "s", j, log.header("s").peers).completed():
                out += [(t, r["n"], r["s"]) for r in tb.to_pylist()]
        return sorted(out)

    assert rows(open_log(tmp_path / "b")) == rows(src) == rows(open_log(kafka_uri))
    assert open_log(tmp_path / "b").header("s").encoding == encoding
    assert all(isinstance(e.event, Messages) or e.event.updates for e in open_log(kafka_uri).reader("s", 1))


def test_seek_by_wall_clock_time_uses_bundle_timestamps(kafka_uri):
    import time

    log = open_log(kafka_uri, bundle_events=2)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    marks = {}
    for t in range(6):
        if t == 3:
            time.sleep(0.05)
            marks["before3"] = int(time.time() * 1000)
            time.sleep(0.05)
        cap.send(t, [{"n": t}])
        cap.advance_to(t + 1)
    cap.close()
    seq = open_log(kafka_uri).seq_for_timestamp("s", 0, marks["before3"])
    first = next(iter(open_log(kafka_uri).reader("s", 0, start=seq))).event
    assert isinstance(first, Messages) and first.time == 3  # the first event written after the mark
    assert open_log(kafka_uri).seq_for_timestamp("s", 0, 0) == 1
    assert open_log(kafka_uri).seq_for_timestamp("s", 0, int(time.time() * 1000) + 60_000) == 14
