"""The Kafka log against a real local broker: layout, restarts, duplicates, seeks, errors, round trips."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from capture import Capture
from connectors.kafka import parse_kafka_uri
from connectors.kafka.records import event_headers, part_key
from eventlog import (
    ClusterUnavailableError,
    CorruptLogError,
    DeliveryError,
    EventLogError,
    HeaderMismatchError,
    InvalidURIError,
    LostDataError,
    Messages,
    StreamHeader,
    open_log,
)
from eventlog.encoding import codec_for
from replay import Replayer, copy
from tests.support import kafka as support_kafka

pytestmark = pytest.mark.kafka
SCHEMA = pa.schema([("n", pa.int64()), ("s", pa.string())])


def fill(log, stream="s", peers=1, n=10, part=0):
    with Capture(log, stream, part, peers, schema=SCHEMA) as cap:
        for t in range(n):
            cap.send(t, [{"n": t, "s": "x" * t}])
            cap.advance_to(t + 1)


def raw_records(bootstrap, topic, part):
    """The committed records of a partition as a plain Kafka client sees them: (key, value, headers dict)."""
    return [(m.key(), m.value(), dict(m.headers() or []))
            for m in support_kafka.raw_records(bootstrap, topic, part, timeout=5)]


def produce_raw(log, bootstrap, part, value, headers, key=b"0"):
    """Produce one record as a plain client would; returns its Kafka offset once read_committed readers see it
    (a transaction's commit markers are written after commit returns, so the last stable offset may lag)."""
    offsets = []
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(log.target.topic("s"), value=value, partition=part, key=key, headers=list(headers),
              on_delivery=lambda err, msg: offsets.append(msg.offset()) if err is None else None)
    assert p.flush(10) == 0 and len(offsets) == 1
    deadline = time.monotonic() + 30
    while log.watermarks(log.target.topic("s"), part)[1] <= offsets[0]:
        assert time.monotonic() < deadline, "the record never became readable"
        time.sleep(0.05)
    return offsets[0]


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


def test_clients_reconnect_after_10_ms_unless_the_user_says_otherwise():
    """A new librdkafka client drops its bootstrap connection and connects again to the broker by id after
    reconnect.backoff.ms: eventlog's 10 ms (librdkafka's 100) keeps a part writer's opening short."""
    t = parse_kafka_uri("kafka://h:1/p")
    for settings in (t.producer(), t.consumer(), t.admin()):
        assert settings["reconnect.backoff.ms"] == 10
    assert parse_kafka_uri("kafka://h:1/p?reconnect.backoff.ms=250").producer()["reconnect.backoff.ms"] == "250"
    assert parse_kafka_uri("kafka://h:1/p", {"reconnect.backoff.ms": 50}).consumer()["reconnect.backoff.ms"] == 50
    Producer(t.producer())  # librdkafka takes the setting


def test_a_scan_dropped_late_does_not_stop_the_scan_that_followed_it(kafka_uri):
    """A scan still referenced (an exception's traceback holds it) is closed after the next scan began on the same
    consumer: closing it must leave the new scan's partition assigned, and the new scan reads to its end."""
    from connectors.kafka.reader import scan_partition

    log = open_log(kafka_uri)
    fill(log, peers=2, n=4, part=0)
    fill(log, "s", peers=2, n=4, part=1)
    topic, consumer = log.target.topic("s"), log._scanner()
    first = scan_partition(log, consumer, topic, 0, 0)
    assert next(first).is_header
    second = scan_partition(log, consumer, topic, 1, 0)
    assert next(second).is_header
    first.close()  # the late finalisation
    assert [tp.partition for tp in consumer.assignment()] == [1]
    rest = list(second)
    assert rest and rest[-1].last_seq == log.last_seq("s", 1)
    assert consumer.assignment() == []
    log.close()


def test_scans_ask_the_broker_to_hold_empty_fetches_1_ms_and_followers_20(kafka_uri, monkeypatch):
    """A scan (a writer's tail, ``last_seq``, seeks) ends at the partition's end, which the broker reports after
    holding an empty fetch for ``fetch.wait.max.ms``: the log's scanner asks for 1 ms (a writer's opening read its
    tail in ~44 ms with 20); a reader following a part keeps 20 ms. A user's setting wins for both."""
    import connectors.kafka.reader as reader_mod

    made: list[dict] = []

    class Recording(reader_mod.Consumer):
        def __init__(self, settings: dict) -> None:
            made.append(settings)
            super().__init__(settings)

    monkeypatch.setattr(reader_mod, "Consumer", Recording)
    log = open_log(kafka_uri)
    fill(log, peers=1, n=2)
    assert log.last_seq("s", 0) > 0
    [scanner] = made
    assert scanner["fetch.wait.max.ms"] == 1
    assert [e.seq for e in log.reader("s", 0)]
    assert made[-1]["fetch.wait.max.ms"] == 20 and len(made) == 2
    log.close()
    made.clear()
    tuned = open_log(kafka_uri + "?fetch.wait.max.ms=7")
    assert tuned.last_seq("s", 0) > 0 and [e.seq for e in tuned.reader("s", 0)]
    assert [m["fetch.wait.max.ms"] for m in made] == ["7", "7"]
    tuned.close()


def test_every_partition_opens_with_the_header(kafka_uri, kafka_bootstrap):
    log = open_log(kafka_uri)
    fill(log, peers=3, n=3, part=1)
    topic = log.target.topic("s")
    for p in range(3):
        key, value, headers = raw_records(kafka_bootstrap, topic, p)[0]
        assert key == str(p).encode() and headers == {"eventlog.kind": b"header"}
        header = StreamHeader.from_json(value)  # the value is the header JSON itself
        assert header.peers == 3 and header.version == (2, 0)
    data = raw_records(kafka_bootstrap, topic, 1)[1:]
    assert [int(h["eventlog.seq"]) for _, _, h in data] == list(range(1, 8))  # one record per event
    assert {k for k, _, _ in data} == {b"1"}
    assert [h["eventlog.kind"] for _, _, h in data] == [b"messages", b"progress"] * 3 + [b"progress"]
    assert [h.get("eventlog.time") for _, _, h in data[:6:2]] == [b"0", b"1", b"2"]
    assert {h["eventlog.epoch"] for _, _, h in data} == {b"1"} and len({h["eventlog.writer"] for _, _, h in data}) == 1
    # the value of a Messages record is an Arrow IPC stream any pyarrow opens alone
    table = pa.ipc.open_stream(data[2][1]).read_all()
    assert table.schema.equals(SCHEMA) and table.to_pylist() == [{"n": 1, "s": "x"}]
    assert open_log(kafka_uri).streams() == ["s"]


def test_topic_with_too_few_partitions_is_refused(kafka_uri, kafka_bootstrap):
    log = open_log(kafka_uri)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(log.target.topic("s"), num_partitions=2, replication_factor=1)])[
        log.target.topic("s")].result()
    with pytest.raises(HeaderMismatchError, match="2 partitions"):
        Capture(log, "s", 0, 4, schema=SCHEMA)


def test_precreated_empty_topic_gets_the_header(kafka_uri, kafka_bootstrap):
    # the writer waits min(timeout, 10 s) for another writer's header before it writes its own: none comes here
    log = open_log(kafka_uri, timeout=2)
    topic = log.target.topic("s")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result()
    fill(log, peers=2, n=2)
    assert open_log(kafka_uri).header("s").peers == 2


def _interrupted_creation(kafka_uri, kafka_bootstrap, headers_in, schema=SCHEMA, peers=3):
    """A topic whose creator wrote the header records of ``headers_in`` only, then died (or lost the leader of
    the other partitions, as when a broker is killed while job A starts)."""
    log = open_log(kafka_uri, timeout=2)
    topic = log.target.topic("s")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=peers, replication_factor=1)])[topic].result()
    log._write_headers(topic, StreamHeader("s", peers, schema, version=log.format_version),
                       headers_in)
    return topic


@pytest.mark.parametrize("headers_in", [[1], [1, 2]])
def test_a_creation_interrupted_before_partition_0_is_completed_by_the_next_writer(kafka_uri, kafka_bootstrap,
                                                                                  headers_in):
    topic = _interrupted_creation(kafka_uri, kafka_bootstrap, headers_in)
    for part in range(3):
        fill(open_log(kafka_uri, timeout=2), peers=3, n=3, part=part)
    assert open_log(kafka_uri).header("s").peers == 3
    for part in range(3):
        with Replayer(kafka_uri, "s", part, 3) as r:
            assert [t for t, _ in r.completed()] == [0, 1, 2]
        assert [key for key, _, _ in raw_records(kafka_bootstrap, topic, part)].count(part_key(part)) >= 1


def test_an_interrupted_creation_with_another_schema_is_refused(kafka_uri, kafka_bootstrap):
    _interrupted_creation(kafka_uri, kafka_bootstrap, [2], schema=pa.schema([("other", pa.string())]))
    with pytest.raises(HeaderMismatchError, match="schema"):
        Capture(open_log(kafka_uri, timeout=2), "s", 0, 3, schema=SCHEMA)


def test_events_in_a_topic_without_header_in_partition_0_are_never_written_over(kafka_uri, kafka_bootstrap):
    topic = _interrupted_creation(kafka_uri, kafka_bootstrap, [1])
    log = open_log(kafka_uri, timeout=2)
    header = StreamHeader("s", 3, SCHEMA, version=log.format_version)
    enc = codec_for(header).record_encoder()
    event = Messages(0, pa.record_batch({"n": [1], "s": ["x"]}, schema=SCHEMA))
    produce_raw(log, kafka_bootstrap, 1, enc.encode(1, event), event_headers(1, event, []), key=part_key(1))
    with pytest.raises(LostDataError, match=r"partition 1 was written") as e:
        Capture(open_log(kafka_uri, timeout=2), "s", 0, 3, schema=SCHEMA)
    assert e.value.part == 1
    assert len(raw_records(kafka_bootstrap, topic, 0)) == 0  # nothing written over the lost history


def test_restarted_writer_continues_after_the_last_sequence_id(kafka_uri):
    log = open_log(kafka_uri)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    cap.send(0, [{"n": 1, "s": None}])
    cap.advance_to(3)
    cap.abort()
    cap = Capture(open_log(kafka_uri), "s", 0, 1)  # another process would see the same
    assert cap.next_seq == 3 and list(cap.frontier) == [3]
    cap.send(4, [{"n": 2, "s": None}])
    cap.close()
    assert [e.seq for e in open_log(kafka_uri).reader("s", 0)] == [1, 2, 3, 4]


def test_last_seq_counts_what_was_committed_a_moment_ago_and_leaves_an_open_transaction_out(kafka_uri):
    """A commit returns before the broker has written its transaction markers, and read_committed scans stop
    short of a transaction whose markers are missing: the part's tail, read right after a sync ``advance_to``,
    still holds every event it committed (every round, not most); the events of a transaction still open
    (a pipelining writer between commits) are not counted, and the read waits no longer than the markers'
    grace period for them."""
    from connectors.kafka import log as kafka_log

    log = open_log(kafka_uri)
    cap = Capture(log, "s", 0, 2, schema=SCHEMA)
    for t in range(25):
        cap.send(t, [{"n": t, "s": "x"}])
        cap.advance_to(t + 1)
        assert log.last_seq("s", 0) == cap.next_seq - 1, t
    cap.close()
    pipelined = Capture(open_log(kafka_uri + "?eventlog.commit.interval.ms=60000", sync="none"), "s", 1, 2)
    committed = log.last_seq("s", 1)
    pipelined.send(100, [{"n": 100, "s": "open"}])
    pipelined.advance_to(101)  # within the commit interval: the transaction stays open
    start = time.monotonic()
    assert log.last_seq("s", 1) == committed
    assert time.monotonic() - start < kafka_log._MARKER_WAIT + 1.0
    pipelined.flush()
    assert log.last_seq("s", 1) == pipelined.next_seq - 1 > committed
    pipelined.close()
    log.close()


def test_the_logs_own_scans_leave_no_partition_being_fetched(kafka_uri):
    """Opening a writer reads the part's tail (and a restarted one, the last record; ``last_seq`` and ``seek``
    scan too). A scan's consumer left assigned would go on fetching the partition, the writer's own records
    included, into its queue for as long as the log is open: every scan, finished or dropped, unassigns it."""
    log = open_log(kafka_uri)
    cap = Capture(log, "s", 0, 2, schema=SCHEMA)
    assert log._consumer is not None and log._consumer.assignment() == []
    for t in range(3):
        cap.send(t, [{"n": t, "s": "x"}])
        cap.advance_to(t + 1)
    assert log.last_seq("s", 0) == cap.next_seq - 1
    assert log._consumer.assignment() == []
    cap.abort()  # a crash: the part goes on in the next writer
    again = open_log(kafka_uri)
    cap = Capture(again, "s", 0, 2)  # the tail holds events now
    assert cap.next_seq > 1 and again._consumer.assignment() == []
    cap.close()
    again.close()
    log.close()


def test_resent_records_of_another_writer_raise(kafka_uri, kafka_bootstrap):
    """Seqs 3..5 sent again by a producer that is not the part's writer (no writer epoch, as a restarted
    application that bypassed the fenced writer would) are a second history: readers raise instead of dropping
    them as duplicates (a true producer retry, same writer and epoch, is dropped: test_kafka_fencing.py)."""
    from connectors.kafka.errors import InterleavedWritersError

    log = open_log(kafka_uri)
    fill(log, n=4)
    header = log.header("s")
    enc = codec_for(header).record_encoder()
    events = [e.event for e in log.reader("s", 0)]
    for seq in (3, 4, 5):
        produce_raw(log, kafka_bootstrap, 0, enc.encode(seq, events[seq - 1]), event_headers(seq, events[seq - 1], []),
                    key=part_key(0))
    with pytest.raises(InterleavedWritersError) as e:
        list(open_log(kafka_uri).reader("s", 0))
    assert (e.value.stream, e.value.part) == ("s", 0) and e.value.offset is not None
    with pytest.raises(InterleavedWritersError):
        list(Replayer(open_log(kafka_uri), "s", 0, 1).completed())


def test_start_sequence_id_maps_to_kafka_offsets(kafka_uri):
    log = open_log(kafka_uri)  # one record per event: many offsets to search
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
        cap.send(t, [{"n": t, "s": None}])
        cap.advance_to(t + 1)
        seen += [e.seq for e in reader]
    cap.close()
    deadline = time.monotonic() + 10  # a record committed just now reaches the consumer a fetch later
    while len(seen) < 11 and time.monotonic() < deadline:
        seen += [e.seq for e in reader]
    assert seen == list(range(1, 12))


def test_one_pass_reads_everything_the_partition_held_even_when_fetches_trickle(kafka_uri):
    """A reader's pass ends at the partition's end as it was, not when its consumer's queue runs dry: with the
    consumer fetching one record batch at a time and queueing one record ahead, one pass still yields every
    event (it used to return after the first few, and ``replay export`` and other single-pass callers missed
    the rest under load)."""
    log = open_log(kafka_uri)
    fill(log, n=150)
    trickle = open_log(f"{kafka_uri}?queued.min.messages=1&max.partition.fetch.bytes=1&fetch.queue.backoff.ms=1")
    with trickle.reader("s", 0) as reader:
        first = [e.seq for e in reader]
        assert first == list(range(1, 302)) and reader.next_seq == log.part_stats("s", 0).next_seq
        assert [e.seq for e in reader] == []  # at the end: the next pass finds nothing new


def test_delivery_errors_raise(kafka_uri):
    log = open_log(kafka_uri, config={"message.max.bytes": 2000})
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    with pytest.raises(DeliveryError, match="Message size too large") as ei:  # one event far over the limit
        cap.send(0, [{"n": i, "s": os.urandom(50).hex()} for i in range(200)])
        cap.advance_to(1)
    assert (ei.value.stream, ei.value.part, ei.value.seq) == ("s", 0, 1)
    assert open_log(kafka_uri).part_stats("s", 0).next_seq == 1  # nothing of it was written


@pytest.mark.parametrize("transactions", [True, False], ids=["transactional", "idempotent"])
def test_a_writer_whose_topic_was_deleted_raises_lost_data_at_its_next_sync(kafka_uri, kafka_bootstrap,
                                                                            transactions):
    """Records for a deleted topic are held by librdkafka until topic.metadata.propagation.max.ms (30 s) has
    passed since the topic's first use, then fail as a delivery error. The writer waits for a sync a slice at a
    time and asks between slices whether the topic still exists: a deleted topic is a LostDataError naming it
    and the first event not synced, and the writer stays unusable."""
    uri = kafka_uri if transactions else kafka_uri + "?eventlog.transactions=false"
    log = open_log(uri)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    cap.send(0, [{"n": 1, "s": "a"}])
    cap.advance_to(1)
    topic = log.target.topic("s")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.delete_topics([topic])[topic].result()
    cap.send(1, [{"n": 2, "s": "b"}])
    with pytest.raises(LostDataError, match=f"topic '{topic}' was deleted while this writer wrote to it") as ei:
        cap.advance_to(2)
    assert (ei.value.stream, ei.value.part, ei.value.seq) == ("s", 0, 3)  # 1, 2: the first send and advance
    with pytest.raises(LostDataError, match="was deleted"):
        cap.send(2, [{"n": 3, "s": "c"}])
    cap.abort()


def test_a_topic_missing_from_one_metadata_answer_is_not_taken_for_deleted(kafka_uri, monkeypatch):
    """A broker that restarted may answer metadata before it caught up: the writer takes its topic for deleted
    only when two answers in a row lack it (a call the cluster did not answer is no answer)."""
    log = open_log(kafka_uri)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    cap.send(0, [{"n": 1, "s": "a"}])
    cap.advance_to(1)
    writer = cap._writer
    answers = iter([False, True, False, ClusterUnavailableError("no answer"), True, False, True, False, False])

    def listed(topic, timeout=None):  # noqa: ANN001, ANN202
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    monkeypatch.setattr(log, "topic_listed", listed)
    for _ in range(7):
        writer._check_topic(time.monotonic() + 5)
    writer._check_topic(time.monotonic() + 5)  # the first of two
    with pytest.raises(LostDataError, match="was deleted"):
        writer._check_topic(time.monotonic() + 5)
    cap.abort()


def test_unreachable_cluster_is_a_clear_error():
    log = open_log("kafka://127.0.0.1:9/x", timeout=1.5)
    with pytest.raises(EventLogError, match="did not answer"):
        log.header("s")


DAMAGED = {
    "value": ({"eventlog.kind": b"messages", "eventlog.seq": b"6", "eventlog.time": b"2"}, b"\xff\xff\xff\xff" + b"\x00" * 40,
              "arrow event"),
    "1.x bundle": ({}, b"\xba\xba\xfe\xca" + b"\x00" * 40, "bundle"),
    "kind": ({"eventlog.kind": b"message", "eventlog.seq": b"5"}, b"x", "eventlog.kind"),
    "no seq": ({"eventlog.kind": b"progress"}, b"x", "eventlog.seq"),
    "no time": ({"eventlog.kind": b"messages", "eventlog.seq": b"5"}, b"x", "eventlog.time"),
}


@pytest.mark.parametrize("damage", list(DAMAGED))
def test_damaged_record_names_its_offset(kafka_uri, kafka_bootstrap, damage):
    log = open_log(kafka_uri)
    fill(log, n=2)
    headers, value, match = DAMAGED[damage]
    if damage == "value":  # the part's own writer wrote it: only the value is wrong
        last = raw_records(kafka_bootstrap, log.target.topic("s"), 0)[-1][2]
        headers = {**headers, "eventlog.epoch": last["eventlog.epoch"], "eventlog.writer": last["eventlog.writer"]}
    at = produce_raw(log, kafka_bootstrap, 0, value, headers.items())
    with pytest.raises(CorruptLogError, match=match) as ei:
        list(open_log(kafka_uri).reader("s", 0))
    assert (ei.value.stream, ei.value.part, ei.value.offset) == ("s", 0, at) and f"offset {at}" in str(ei.value)


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
@pytest.mark.parametrize("lie", ["seq", "time", "kind"])
def test_headers_that_disagree_with_the_value_are_corruption(kafka_uri, kafka_bootstrap, encoding, lie):
    """A record whose headers say another seq, time or kind than its value holds is refused, not believed."""
    log = open_log(kafka_uri)
    with Capture(log, "s", 0, 1, schema=SCHEMA, encoding=encoding) as cap:
        cap.send(0, [{"n": 0, "s": "a"}])
        cap.advance_to(1)
        cap.abort()
    enc = codec_for(log.header("s")).record_encoder()
    event = Messages(1, pa.record_batch({"n": [1], "s": ["b"]}, schema=SCHEMA))
    headers = dict(event_headers(3, event, []))
    headers.update({"seq": {"eventlog.seq": b"4"}, "time": {"eventlog.time": b"7"},
                    "kind": {"eventlog.kind": b"progress"}}[lie])
    value = enc.encode(3, event) if lie != "seq" else enc.encode(4, event)
    if lie == "seq":
        headers["eventlog.seq"] = b"3"
    at = produce_raw(log, kafka_bootstrap, 0, value, headers.items())
    with pytest.raises(CorruptLogError) as ei:
        list(open_log(kafka_uri).reader("s", 0))
    assert (ei.value.stream, ei.value.part, ei.value.seq, ei.value.offset) == ("s", 0, 3, at)


def test_avro_values_decode_alone_with_the_schema_of_the_header_record(kafka_uri, kafka_bootstrap):
    """Avro single-object encoding: marker C3 01, the CRC-64-AVRO fingerprint of the schema the header record
    carries, then the datum — fastavro decodes it with nothing but that schema."""
    import io
    import json

    import fastavro

    log = open_log(kafka_uri)
    with Capture(log, "s", 0, 1, schema=SCHEMA, encoding="avro") as cap:
        cap.send(5, [{"n": 1, "s": "a"}, {"n": 2, "s": None}])
        cap.advance_to(6)
    records = raw_records(kafka_bootstrap, log.target.topic("s"), 0)
    schema = json.loads(records[0][2]["eventlog.avro.schema"])
    fingerprint = fastavro.schema.fingerprint(fastavro.schema.to_parsing_canonical_form(schema), "CRC-64-AVRO")
    _, value, headers = records[1]
    assert headers["eventlog.kind"] == b"messages" and value[:2] == b"\xc3\x01" and value[2:10].hex() == fingerprint
    datum = fastavro.schemaless_reader(io.BytesIO(value[10:]), fastavro.parse_schema(schema), None)
    assert (datum["seq"], datum["kind"], datum["time"]) == (1, "MESSAGES", 5)
    assert datum["records"] == [{"n": 1, "s": "a"}, {"n": 2, "s": None}]


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


def test_seek_by_wall_clock_time_uses_record_timestamps(kafka_uri):
    import time

    log = open_log(kafka_uri)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    marks = {}
    for t in range(6):
        if t == 3:
            time.sleep(0.05)
            marks["before3"] = int(time.time() * 1000)
            time.sleep(0.05)
        cap.send(t, [{"n": t, "s": None}])
        cap.advance_to(t + 1)
    cap.close()
    seq = open_log(kafka_uri).seq_for_timestamp("s", 0, marks["before3"])
    first = next(iter(open_log(kafka_uri).reader("s", 0, start=seq))).event
    assert isinstance(first, Messages) and first.time == 3  # the first event written after the mark
    assert open_log(kafka_uri).seq_for_timestamp("s", 0, 0) == 1
    assert open_log(kafka_uri).seq_for_timestamp("s", 0, int(time.time() * 1000) + 60_000) == 14


def test_a_topic_another_writer_just_created_is_waited_for(kafka_uri, kafka_bootstrap, monkeypatch):
    """Workers create a stream concurrently: the losers see TOPIC_ALREADY_EXISTS, and the broker they ask next
    may not list the new topic's partitions yet (seen on three brokers). They wait instead of refusing.
    The topic here never gets the other writer's header records: timeout=3 bounds that wait (else 10 s)."""
    log = open_log(kafka_uri, timeout=3)
    topic = log.target.topic("s")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)])[topic].result()
    real, stale = log.partitions, iter(range(3))
    monkeypatch.setattr(log, "partitions", lambda t: 0 if t == topic and next(stale, None) is not None else real(t))
    with Capture(log, "s", 3, 4, schema=SCHEMA) as cap:
        cap.send(0, [{"n": 1, "s": "a"}])
    assert open_log(kafka_uri).header("s").peers == 4
    assert next(stale, None) is None  # the stale answers were met


def test_sync_none_pipelines_commits_until_the_interval_and_close(kafka_uri):
    """sync="none": advance_to commits only once eventlog.commit.interval.ms has passed; close always commits."""
    log = open_log(kafka_uri + "?eventlog.commit.interval.ms=60000", sync="none")
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    for t in range(5):
        cap.send(t, [{"n": t, "s": "a"}])
        cap.advance_to(t + 1)
    assert list(open_log(kafka_uri).reader("s", 0)) == []  # nothing committed yet: invisible to readers
    cap.close()
    assert [e.seq for e in open_log(kafka_uri).reader("s", 0)] == list(range(1, 12))
    eager = open_log(kafka_uri + "?eventlog.commit.interval.ms=0&eventlog.sync=none")  # interval 0: every advance_to
    with Capture(eager, "e", 0, 1, schema=SCHEMA) as cap:
        cap.send(0, [{"n": 0, "s": "a"}])
        cap.advance_to(1)
        assert [e.seq for e in open_log(kafka_uri).reader("e", 0)] == [1, 2]
    with pytest.raises(InvalidURIError, match="eventlog.sync"):
        open_log(kafka_uri + "?eventlog.sync=sometimes")
    with pytest.raises(InvalidURIError, match="commit.interval"):
        open_log(kafka_uri + "?eventlog.commit.interval.ms=-5")


def test_sync_none_crash_loses_only_the_uncommitted_and_a_restart_resends_them_once(kafka_uri):
    from connectors.kafka import WriterFencedError

    uri = kafka_uri + "?eventlog.commit.interval.ms=60000"
    first = Capture(open_log(uri, sync="none"), "s", 0, 1, schema=SCHEMA)
    first.send(0, [{"n": 0, "s": "first"}])
    first.advance_to(1)
    first._writer.sync(force=True)  # times < 1 committed
    first.send(1, [{"n": 1, "s": "first"}])
    first.advance_to(2)  # not committed: the writer "crashes" here
    again = Capture(open_log(uri), "s", 0, 1)  # fences the first writer, whose open transaction is aborted
    assert list(again.frontier) == [1]  # resume after what was committed
    again.send(1, [{"n": 1, "s": "again"}])
    again.close()
    with pytest.raises(WriterFencedError):
        first.close()
    done = {t: tb.to_pylist() for t, tb in Replayer(open_log(kafka_uri), "s", 0, 1).completed()}
    assert done == {0: [{"n": 0, "s": "first"}], 1: [{"n": 1, "s": "again"}]}


def test_a_creation_interrupted_before_every_header_record_is_completed_by_the_part_writer(kafka_uri, kafka_bootstrap):
    """The creating process died between creating the topic and writing the header records of every partition
    (seen: job A SIGKILLed during start-up). Readers see those parts as empty; their writers complete them."""
    from connectors.kafka.records import header_record_v2

    log = open_log(kafka_uri, timeout=2)
    topic = log.target.topic("s")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result()
    value, headers = header_record_v2(StreamHeader("s", 3, SCHEMA, version=(2, 0)), None)
    produce_raw(log, kafka_bootstrap, 0, value, headers)  # only partition 0 got its header
    assert open_log(kafka_uri).part_stats("s", 2).events == 0  # a reader: no events, and nothing written
    assert open_log(kafka_uri).watermarks(topic, 2) == (0, 0)
    with Capture(log, "s", 2, 3, schema=SCHEMA) as cap:
        cap.send(0, [{"n": 7, "s": "x"}])
    assert [type(e.event).__name__ for e in open_log(kafka_uri).reader("s", 2)] == ["Messages", "Progress"]
    first = raw_records(kafka_bootstrap, topic, 2)[0]
    assert first[0] == b"2" and first[2] == {"eventlog.kind": b"header"}


def test_producer_and_consumer_only_settings_reach_only_their_clients():
    """A setting of one kind of client given in the URI reaches that kind only (librdkafka warns about the others),
    the runtime's channel settings included."""
    t = parse_kafka_uri("kafka://h:1/p?enable.gapless.guarantee=true&message.timeout.ms=0&fetch.queue.backoff.ms=5"
                        "&max.poll.interval.ms=600000&client.id=x")
    assert t.producer()["enable.gapless.guarantee"] == "true" and t.producer()["message.timeout.ms"] == "0"
    assert "fetch.queue.backoff.ms" not in t.producer() and "max.poll.interval.ms" not in t.producer()
    assert t.consumer()["fetch.queue.backoff.ms"] == "5" and t.consumer()["max.poll.interval.ms"] == "600000"
    assert "enable.gapless.guarantee" not in t.consumer() and "message.timeout.ms" not in t.consumer()
    assert "enable.gapless.guarantee" not in t.admin() and "fetch.queue.backoff.ms" not in t.admin()
    assert t.producer()["client.id"] == t.consumer()["client.id"] == t.admin()["client.id"] == "x"


def test_a_topic_is_asked_about_alone_and_an_absent_one_is_not_listed(kafka_uri, kafka_bootstrap, monkeypatch):
    log = open_log(kafka_uri)
    Capture(log, "s", 0, 2, schema=SCHEMA).close()
    topic = log.target.topic("s")
    asked: list[str | None] = []
    list_topics = log._admin.list_topics

    def recording(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        asked.append(kwargs.get("topic"))
        return list_topics(*args, **kwargs)

    monkeypatch.setattr(log._admin, "list_topics", recording)
    assert log.partitions(topic) == 2 and log.topic_listed(topic)
    absent = f"{topic}-absent"
    assert log.partitions(absent) is None and not log.topic_listed(absent)
    assert asked == [topic, topic, absent, absent]  # never the whole cluster's metadata for one topic
    assert absent not in AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
