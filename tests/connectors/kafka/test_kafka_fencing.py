"""Kafka writers are fenced and lost data is never silent (issue 12 item 9, FORMAT.md §8.2).

Against the real local broker: a second writer of a part fences the first (typed error, nothing
acknowledged lost, one history for readers); records of interleaved writers written by hand make readers
raise instead of dropping one history as duplicates, while true duplicates (producer retries) are still
dropped; a partition or topic that lost its records makes writers and readers raise.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from capture import Capture
from connectors.kafka import parse_kafka_uri
from connectors.kafka.errors import InterleavedWritersError, LostDataError, WriterFencedError
from connectors.kafka.history import WriterHistory
from connectors.kafka.records import (
    EPOCH_HEADER,
    KIND_HEADER,
    WRITER_HEADER,
    WriterMark,
    event_headers,
    header_record_v2,
    part_key,
    writer_headers,
    writer_mark,
)
from eventlog import (
    CorruptLogError,
    InvalidURIError,
    Messages,
    PartLockedError,
    Progress,
    StreamHeader,
    open_log,
)
from eventlog.encoding import codec_for
from replay import Replayer
from tests.support.kafka import raw_records
from tests.support.paths import ROOT

pytestmark = pytest.mark.kafka
SCHEMA = pa.schema([("n", pa.int64()), ("s", pa.string())])
HYPOTHESIS = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                           HealthCheck.too_slow])


# -- helpers -----------------------------------------------------------------------------------------------

def messages(seq: int, tag: str) -> Messages:
    """The event a test writes at ``seq``: its content names the writer that wrote it."""
    return Messages(seq, pa.record_batch([pa.array([seq]), pa.array([tag])], schema=SCHEMA))


def seqs_and_tags(reader) -> list[tuple[int, str]]:  # noqa: ANN001
    out = []
    for e in reader:
        assert isinstance(e.event, Messages)
        out.append((e.seq, e.event.records.column(1)[0].as_py()))
    return out


def new_stream(log, peers: int = 1) -> str:  # noqa: ANN001
    name = f"s{uuid.uuid4().hex[:8]}"
    log.create_stream(StreamHeader(name, peers, SCHEMA))
    return name


def wait_for(what, timeout: float = 30.0):  # noqa: ANN001, ANN201
    """Call ``what`` until it returns without a Kafka/eventual-consistency error (topic deletion and
    creation are asynchronous in Kafka)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return what()
        except (KafkaException, AssertionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class RawWriter:
    """Writes data records by hand, as a writer without fencing (or a hostile one) would."""

    def __init__(self, bootstrap: str, log, stream: str) -> None:  # noqa: ANN001
        self.topic = log.target.topic(stream)
        self.encoder = codec_for(log.header(stream)).record_encoder()
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
        self.offsets: list[int] = []

    def record(self, mark: WriterMark | None, first: int, count: int, part: int = 0) -> None:
        """Produce the records of events ``first … first+count-1`` (one per event), content tagged with the
        writer id, and keep the Kafka offset of the first. ``mark`` None writes no writer headers (a writer
        from before epochs)."""
        tag = mark.writer if mark is not None and mark.writer is not None else "legacy"
        writer = writer_headers(mark) if mark is not None else []
        offsets: list[int] = []

        def delivered(err, msg) -> None:  # noqa: ANN001
            assert err is None, err
            offsets.append(msg.offset())

        for s in range(first, first + count):
            event = messages(s, tag)
            self.producer.produce(self.topic, value=self.encoder.encode(s, event), key=part_key(part), partition=part,
                                  headers=event_headers(s, event, writer), on_delivery=delivered)
        assert self.producer.flush(30) == 0
        self.offsets.append(min(offsets))


def replay_verify(uri: str) -> subprocess.CompletedProcess:
    """``replay verify URI`` in a subprocess, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "replay.cli", "verify", uri], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


# -- settings ----------------------------------------------------------------------------------------------

def test_transaction_settings_are_eventlogs_own():
    t = parse_kafka_uri("kafka://h:1/p?eventlog.transactional.id.prefix=team-a&linger.ms=3")
    assert t.transactions and t.transactional_id("p.s", 2) == "team-a.p.s.2"
    assert "eventlog.transactional.id.prefix" not in t.producer() and t.producer()["linger.ms"] == "3"
    assert not parse_kafka_uri("kafka://h:1/p", {"eventlog.transactions": "false"}).transactions
    assert not parse_kafka_uri("kafka://h:1/p", {"eventlog.transactions": False}).transactions
    assert parse_kafka_uri("kafka://h:1/p").transactional_id("p.s", 0) == "eventlog.p.s.0"
    with pytest.raises(InvalidURIError, match="derived per part"):
        parse_kafka_uri("kafka://h:1/p?transactional.id=x")
    with pytest.raises(InvalidURIError, match="true or false"):
        parse_kafka_uri("kafka://h:1/p?eventlog.transactions=maybe")


@given(epoch=st.integers(0, 2**63 - 1), writer=st.from_regex(r"[!-~]{1,64}", fullmatch=True))
def test_writer_headers_round_trip(epoch, writer):
    mark = WriterMark(epoch, writer)
    assert writer_mark(writer_headers(mark), stream="s", part=0, offset=5) == mark


@given(value=st.one_of(st.none(), st.binary(max_size=30)))
def test_malformed_epoch_headers_are_corrupt(value):
    try:
        ok = value is not None and str(int(value.decode("ascii"))).encode() == value and int(value) < 2**63
    except (UnicodeDecodeError, ValueError):
        ok = False
    if ok:
        assert writer_mark([(EPOCH_HEADER, value)], stream="s", part=1, offset=9).epoch == int(value)
        return
    with pytest.raises(CorruptLogError) as ei:
        writer_mark([(EPOCH_HEADER, value)], stream="s", part=1, offset=9)
    assert (ei.value.stream, ei.value.part, ei.value.offset) == ("s", 1, 9)


def test_malformed_writer_header_is_corrupt():
    for value in (b"", b"has space", b"x" * 65, None, "é".encode()):
        with pytest.raises(CorruptLogError, match=WRITER_HEADER):
            writer_mark([(WRITER_HEADER, value)], stream="s", part=0, offset=1)


# -- the rule, on every history ----------------------------------------------------------------------------

@st.composite
def valid_histories(draw) -> list[tuple[WriterMark | None, int, int]]:  # noqa: ANN001
    """Records ``(writer, first seq, count)`` of a part written by one writer at a time: sessions with
    growing epochs, each continuing after the last sequence id, with producer retries (a session's record
    sent again, after later ones of the same session); optionally a first session from before epochs."""
    records: list[tuple[WriterMark | None, int, int]] = []
    next_seq, epoch = 1, 0
    sessions = draw(st.integers(1, 4))
    for s in range(sessions):
        legacy = s == 0 and draw(st.booleans())
        if not legacy:
            epoch += draw(st.integers(1, 3))
        mark = None if legacy else WriterMark(epoch, f"w{s}")
        mine: list[tuple[WriterMark | None, int, int]] = []
        for _ in range(draw(st.integers(0 if s < sessions - 1 else 1, 3))):
            rec = (mark, next_seq, draw(st.integers(1, 3)))
            next_seq += rec[2]
            mine.append(rec)
            records.append(rec)
            if draw(st.integers(0, 3)) == 0:
                records.append(draw(st.sampled_from(mine)))  # a retry, possibly after later records
    return records


def _expected(records) -> tuple[list[tuple[int, str]], int]:  # noqa: ANN001
    seen: dict[int, str] = {}
    duplicates = 0
    for mark, first, count in records:
        for s in range(first, first + count):
            if s in seen:
                duplicates += 1
            else:
                seen[s] = mark.writer if mark is not None else "legacy"
    return sorted(seen.items()), duplicates


def _corrupt(draw, records):  # noqa: ANN001, ANN202
    """One record that makes the history two interleaved ones."""
    marks = [m for m, _, _ in records]
    last = marks[-1]
    last_seq = max(f + c - 1 for _, f, c in records)
    kinds = ["same-epoch"] + (["older"] if any(m != last for m in marks) else []) + ["overlap"]
    kind = draw(st.sampled_from(kinds))
    if kind == "older":  # a zombie of an older session continues the sequence ids
        older = draw(st.sampled_from([m for m in marks if m != last]))
        return (older if older is not None else None), last_seq + 1, draw(st.integers(1, 3))
    if kind == "same-epoch":  # another writer that got the same epoch
        epoch = last.epoch if last is not None else 0
        return WriterMark(epoch, "intruder") if last is not None else WriterMark(0, "intruder"), \
            draw(st.integers(1, last_seq + 1)), draw(st.integers(1, 3))
    epoch = (last.epoch if last is not None else 0) + 1  # a new writer that did not see the whole part
    return WriterMark(epoch, "late"), draw(st.integers(1, last_seq)), draw(st.integers(1, 3))


def test_writer_history_accepts_every_valid_history_and_rejects_every_interleaving():
    @HYPOTHESIS
    @given(data=st.data())
    def run(data):
        records = data.draw(valid_histories())
        history = WriterHistory("s", 0)
        for offset, (mark, first, count) in enumerate(records):
            history.check(mark or WriterMark(0, None), first, first + count - 1, offset)
        bad = _corrupt(data.draw, records)
        with pytest.raises(InterleavedWritersError) as ei:
            history.check(bad[0] or WriterMark(0, None), bad[1], bad[1] + bad[2] - 1, len(records))
        assert (ei.value.stream, ei.value.part, ei.value.seq, ei.value.offset) == ("s", 0, bad[1], len(records))

    run()


def test_readers_see_one_history_or_raise(kafka_uri, kafka_bootstrap):
    """Records written by hand: every valid history reads back in full with retries dropped; the same
    history with one interleaved record raises at that record, after yielding what came before it."""
    log = open_log(kafka_uri)

    @settings(HYPOTHESIS, max_examples=20)
    @given(data=st.data())
    def run(data):
        records = data.draw(valid_histories())
        bad = _corrupt(data.draw, records) if data.draw(st.booleans()) else None
        stream = new_stream(log)
        raw = RawWriter(kafka_bootstrap, log, stream)
        for rec in records:
            raw.record(*rec)
        expected, duplicates = _expected(records)
        reader = open_log(kafka_uri).reader(stream, 0)
        if bad is None:
            assert seqs_and_tags(reader) == expected
            assert reader.duplicates == duplicates
            return
        raw.record(*bad)
        got: list[tuple[int, str]] = []
        with pytest.raises(InterleavedWritersError) as ei:
            for e in reader:
                got.append((e.seq, e.event.records.column(1)[0].as_py()))
        assert got == expected
        assert (ei.value.stream, ei.value.part, ei.value.seq, ei.value.offset) == (stream, 0, bad[1], raw.offsets[-1])

    run()


# -- fencing with real writers -----------------------------------------------------------------------------

def test_second_writer_fences_the_first(kafka_uri):
    log = open_log(kafka_uri)
    stream = new_stream(log)
    first = log.writer(stream, 0)
    assert first.transactional and first.epoch == 1
    for s in (1, 2, 3):
        first.append(messages(s, "first"))
    first.sync()                                  # 1..3 acknowledged
    first.append(messages(4, "first"))            # not synced: aborted by the next writer
    second = open_log(kafka_uri).writer(stream, 0)
    assert (second.next_seq, second.epoch) == (4, 2)
    second.append(messages(4, "second"))
    second.sync()
    with pytest.raises(WriterFencedError) as ei:
        first.append(messages(5, "first"))
        first.sync()
    assert isinstance(ei.value, PartLockedError)
    assert (ei.value.stream, ei.value.part, ei.value.seq) == (stream, 0, 4)
    with pytest.raises(WriterFencedError):        # and it stays fenced
        first.sync()
    first.close()                                 # releases without raising again
    second.append(messages(5, "second"))
    second.close()
    assert seqs_and_tags(open_log(kafka_uri).reader(stream, 0)) == [
        (1, "first"), (2, "first"), (3, "first"), (4, "second"), (5, "second")]


class _FencedDuringProduce:
    """A writer's producer that librdkafka fenced between the writer's last poll and its ``produce``: the produce
    is refused with "Local: Fatal error" (``_FATAL``), and the fencing itself reaches the error callback only
    at the next poll (the order the property test below met once in CI)."""

    def __init__(self, producer: Producer, writer) -> None:  # noqa: ANN001
        self._producer, self._writer, self._refused = producer, writer, False

    def produce(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        self._refused = True
        raise KafkaException(KafkaError(KafkaError._FATAL, "Local: Fatal error"))

    def poll(self, timeout: float = 0) -> int:
        if self._refused:
            self._writer._on_error(KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True))
        return self._producer.poll(timeout)

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._producer, name)


def test_a_produce_refused_as_fatal_reports_the_fencing_behind_it(kafka_uri):
    log = open_log(kafka_uri)
    stream = new_stream(log)
    first = log.writer(stream, 0)
    first.append(messages(1, "first"))
    first.sync()
    first._producer = _FencedDuringProduce(first._producer, first)
    with pytest.raises(WriterFencedError) as ei:
        first.append(messages(2, "first"))
    assert "fenced by a newer instance" in ei.value.reason and (ei.value.stream, ei.value.seq) == (stream, 2)
    with pytest.raises(WriterFencedError):  # and it stays fenced
        first.sync()
    first._producer = first._producer._producer
    first.close()
    assert seqs_and_tags(open_log(kafka_uri).reader(stream, 0)) == [(1, "first")]


def test_fenced_capture_raises_and_the_new_one_continues(kafka_uri):
    old = Capture(open_log(kafka_uri), "c", 0, 1, schema=SCHEMA)
    old.send(0, [{"n": 0, "s": "old"}])
    old.advance_to(1)                            # acknowledged: stays
    old.send(1, [{"n": 1, "s": "old"}])          # not acknowledged: aborted
    new = Capture(open_log(kafka_uri), "c", 0, 1)
    assert list(new.frontier) == [1] and new.next_seq == 3
    with pytest.raises(WriterFencedError, match="fenced"):
        old.advance_to(2)
    new.send(1, [{"n": 1, "s": "new"}])
    new.close()
    got = [(t, tb.column("s").to_pylist()) for t, tb in Replayer(open_log(kafka_uri), "c", 0, 1).completed()]
    assert got == [(0, ["old"]), (1, ["new"])]


@st.composite
def writer_schedules(draw) -> list[tuple[str, int]]:  # noqa: ANN001
    """Operations of up to three writers of one part: ``open`` a new writer, ``append``/``sync`` by
    writer i (0 = the first opened)."""
    ops: list[tuple[str, int]] = [("open", 0)]
    opened = 1
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["append", "append", "sync"] + (["open"] if opened < 3 else [])))
        if kind == "open":
            ops.append(("open", opened))
            opened += 1
        else:
            ops.append((kind, draw(st.integers(0, opened - 1))))
    return ops


def test_any_schedule_of_writers_keeps_every_acknowledged_event(kafka_uri):
    """Whatever writers of one part do in whatever order, readers see one history: every event a
    successful sync acknowledged, in order, from consecutive writers; every write of a fenced writer
    raises WriterFencedError by its next sync."""
    log = open_log(kafka_uri)

    @settings(HYPOTHESIS, max_examples=12)
    @given(ops=writer_schedules())
    # writer 0, fenced by 1's open, learns it at its second append: the producer's poll raised the fencing
    # itself (not through the error callback) and it became a DeliveryError, not WriterFencedError
    @example(ops=[("open", 0), ("open", 1), ("append", 1), ("open", 2), ("sync", 0), ("append", 0), ("append", 1),
                  ("sync", 1), ("sync", 2), ("append", 0), ("append", 0), ("sync", 1)])
    def run(ops):
        stream = new_stream(log)
        writers: dict[int, object] = {}
        pending: dict[int, list[int]] = {}       # writer -> appended events a sync could still acknowledge
        dirty: dict[int, bool] = {}              # writer -> appended since its last sync (or failure)
        acked: list[tuple[int, int]] = []        # (writer, event number) acknowledged by a sync
        latest = -1
        counter = 0
        for op, w in ops:
            if op == "open":
                writers[w] = open_log(kafka_uri).writer(stream, 0)
                pending[w], dirty[w] = [], False
                latest = w
                for v in writers:                 # opening aborted everything the others had not synced
                    if v != w:
                        pending[v] = []
                continue
            writer = writers[w]
            counter += 1
            try:
                if op == "append":
                    writer.append(messages(writer.next_seq, f"{w}:{counter}"))
                    pending[w].append(counter)
                    dirty[w] = True
                else:
                    writer.sync()
                    acked.extend((w, c) for c in pending[w])
                    pending[w], dirty[w] = [], False
            except WriterFencedError as e:
                assert w != latest and (e.stream, e.part) == (stream, 0)
                pending[w], dirty[w] = [], False
        writers[latest].close()
        acked.extend((latest, c) for c in pending[latest])
        got = [tag for _, tag in seqs_and_tags(open_log(kafka_uri).reader(stream, 0))]
        assert got == [f"{w}:{c}" for w, c in acked]
        for w, writer in writers.items():
            if w != latest:
                if dirty[w]:                      # closing syncs: a fenced writer with events raises
                    with pytest.raises(WriterFencedError):
                        writer.close()
                writer.close()                    # and is released, silently

    run()


def test_a_refusal_whose_fencing_the_poll_raises_is_writer_fenced(kafka_uri):
    """librdkafka refuses a fenced producer's produce with ``_FATAL``; the reason comes from the next poll, which
    either hands it to the error callback or raises it itself. Either way the writer raises WriterFencedError
    (the raised one used to be dropped, and the refusal became a DeliveryError)."""
    log = open_log(kafka_uri)
    writer = log.writer(new_stream(log), 0)
    real = writer._producer

    class Raising:  # a producer whose poll raises the fatal fencing error, as a fenced transactional one may
        def poll(self, timeout):  # noqa: ANN001, ANN202
            raise KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True))

    writer._producer = Raising()
    try:
        with pytest.raises(WriterFencedError):
            writer._raise_kafka(KafkaError(KafkaError._FATAL), "produce")
    finally:
        writer._producer = real
    writer.close()


def test_unfenced_writers_are_caught_by_readers_and_verify(kafka_uri):
    """The issue's case: two writers on one part without transactions. Readers and ``replay verify``
    raise instead of dropping the later writer's acknowledged events as duplicates."""
    uri = kafka_uri + "?eventlog.transactions=false"
    log = open_log(uri)
    stream = new_stream(log)
    a = open_log(uri).writer(stream, 0)
    b = open_log(uri).writer(stream, 0)           # both start at seq 1: nothing fences either
    assert not a.transactional and (a.next_seq, b.next_seq) == (1, 1) and a.epoch == b.epoch == 1
    for s in range(1, 4):
        a.append(messages(s, "a"))
    a.sync()
    for s in range(1, 4):
        b.append(messages(s, "b"))
    b.sync()
    with pytest.raises(InterleavedWritersError, match="two writers with epoch 1") as ei:
        list(open_log(uri).reader(stream, 0))
    assert (ei.value.stream, ei.value.part, ei.value.seq) == (stream, 0, 1) and ei.value.offset is not None
    with pytest.raises(CorruptLogError, match="two writers") as ei:  # a later writer does not append behind them:
        open_log(uri).writer(stream, 0)           # its readers would refuse everything it acknowledged
    assert ei.value.offset is not None
    a.close(), b.close()
    result = replay_verify(kafka_uri)
    assert result.returncode != 0, result.stdout + result.stderr
    assert "two writers" in result.stdout + result.stderr


def test_producer_retries_are_still_dropped(kafka_uri, kafka_bootstrap):
    """A record sent twice by its writer (same epoch, same writer id) is one record's events."""
    log = open_log(kafka_uri)
    with Capture(log, "r", 0, 1, schema=SCHEMA) as cap:
        for t in range(3):
            cap.send(t, [{"n": t, "s": "x"}])
            cap.advance_to(t + 1)
    topic = log.target.topic("r")
    data = [m for m in raw_records(kafka_bootstrap, topic) if dict(m.headers())[KIND_HEADER] != b"header"]
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    for m in data[1:3]:                             # resend two records as they were
        p.produce(topic, value=m.value(), key=m.key(), headers=m.headers(), partition=0)
    assert p.flush(10) == 0

    def read() -> None:  # the resent records become readable once the last stable offset passes them
        reader = open_log(kafka_uri).reader("r", 0)
        assert [e.seq for e in reader] == list(range(1, 8))
        assert reader.duplicates == 2

    wait_for(read)


# -- lost data ---------------------------------------------------------------------------------------------

def _delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], operation_timeout=30, request_timeout=30)[topic].result(timeout=60)
    wait_for(lambda: _assert_gone(admin, topic))


def _assert_gone(admin: AdminClient, topic: str) -> None:
    assert topic not in admin.list_topics(timeout=10).topics


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wait_for(lambda: admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=30)[topic]
             .result(timeout=60))


def _delete_records(bootstrap: str, topic: str, part: int, before: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_records([TopicPartition(topic, part, before)], request_timeout=30).values():
        fut.result(timeout=60)


def _fill(uri: str, stream: str, times: int) -> int:
    with Capture(open_log(uri), stream, 0, 1, schema=SCHEMA) as cap:
        for t in range(times):
            cap.send(t, [{"n": t, "s": "x"}])
            cap.advance_to(t + 1)
    return cap.next_seq


def test_recreated_topic_refuses_a_writer_that_expects_to_continue(kafka_uri, kafka_bootstrap):
    cap = Capture(open_log(kafka_uri), "d", 0, 1, schema=SCHEMA)
    cap.send(0, [{"n": 0, "s": "x"}])
    cap.advance_to(1)
    saved = cap.next_seq                            # the application's checkpoint
    cap.abort()
    _delete_topic(kafka_bootstrap, open_log(kafka_uri).target.topic("d"))
    log = open_log(kafka_uri)                       # a restarted application: the stream is created anew
    log.create_stream(StreamHeader("d", 1, SCHEMA))
    with pytest.raises(LostDataError) as ei:
        log.writer("d", 0, expect_next_seq=saved)
    assert (ei.value.stream, ei.value.part, ei.value.seq) == ("d", 0, 1)
    assert f"from seq {saved}" in ei.value.reason
    with pytest.raises(LostDataError):              # and a reader resuming where it had stopped
        list(log.reader("d", 0, start=saved))
    w = log.writer("d", 0, expect_next_seq=1)        # the application says: a new stream
    assert w.next_seq == 1
    w.close()
    with pytest.raises(ValueError):
        log.writer("d", 0, expect_next_seq=0)


def test_reader_resuming_past_the_end_raises(kafka_uri):
    end = _fill(kafka_uri, "e", 3)
    log = open_log(kafka_uri)
    assert list(log.reader("e", 0, start=end)) == []     # at the end: nothing yet, no error
    for start in (end + 1, end + 100):
        with pytest.raises(LostDataError) as ei:
            list(log.reader("e", 0, start=start))
        assert (ei.value.stream, ei.value.part, ei.value.seq) == ("e", 0, start) and ei.value.offset is not None


def test_following_reader_raises_when_the_topic_is_recreated_shorter(kafka_uri, kafka_bootstrap):
    _fill(kafka_uri, "f", 6)
    reader = open_log(kafka_uri).reader("f", 0)
    assert len(list(reader)) == 13
    _delete_topic(kafka_bootstrap, open_log(kafka_uri).target.topic("f"))
    _fill(kafka_uri, "f", 1)                        # a new history, shorter than what the reader read
    with pytest.raises((LostDataError, InterleavedWritersError)):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:          # librdkafka notices the new partition on its next fetch
            list(reader)
            time.sleep(0.2)


def test_end_moving_back_between_reads_raises(kafka_uri, kafka_bootstrap):
    """A log that saw a part's end notices when a later answer is shorter (a topic recreated, a broker
    that lost records), e.g. a streaming source asking for the latest offsets."""
    end = _fill(kafka_uri, "m", 5)
    log = open_log(kafka_uri)
    assert log.part_stats("m", 0).next_seq == end
    _delete_topic(kafka_bootstrap, log.target.topic("m"))
    _fill(kafka_uri, "m", 1)
    with pytest.raises(LostDataError, match="moved back") as ei:
        log.part_stats("m", 0)
    assert (ei.value.stream, ei.value.part) == ("m", 0) and ei.value.offset is not None


def test_truncated_partition_start(kafka_uri, kafka_bootstrap):
    """Retention or delete_records removed the start of a partition: the writer continues after the
    tail, readers from seq 1 and the stream header of partition 0 raise, part_stats shows the gap."""
    end = _fill(kafka_uri, "g", 4)
    header = open_log(kafka_uri).header("g")
    topic = open_log(kafka_uri).target.topic("g")
    _delete_records(kafka_bootstrap, topic, 0, 3)
    log = open_log(kafka_uri)
    with pytest.raises(LostDataError, match="stream header") as ei:
        log.header("g")
    assert (ei.value.stream, ei.value.part, ei.value.offset) == ("g", 0, 3)
    log._headers["g"] = header  # a log that had read the header before
    with pytest.raises(LostDataError) as ei:
        list(log.reader("g", 0))
    assert (ei.value.seq, ei.value.offset) == (1, 3)
    stats = log.part_stats("g", 0)
    assert 1 < stats.first_seq and stats.next_seq == end
    w = log.writer("g", 0)
    assert w.next_seq == end
    w.close()


def test_emptied_partition_refuses_writers(kafka_uri, kafka_bootstrap):
    _fill(kafka_uri, "h", 2)
    topic = open_log(kafka_uri).target.topic("h")
    log = open_log(kafka_uri)
    log.header("h")                                  # read before the records were deleted
    hi = log.watermarks(topic, 0)[1]
    _delete_records(kafka_bootstrap, topic, 0, hi)
    with pytest.raises(LostDataError, match="emptied") as ei:
        log.writer("h", 0)
    assert (ei.value.stream, ei.value.part, ei.value.offset) == ("h", 0, hi)
    with pytest.raises(LostDataError):               # a restarted capture neither starts a new history
        Capture(open_log(kafka_uri), "h", 0, 1, schema=SCHEMA)


def test_topic_with_fewer_partitions_than_peers(kafka_uri, kafka_bootstrap):
    log = open_log(kafka_uri)
    topic = log.target.topic("p")
    _create_topic(kafka_bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    value, headers = header_record_v2(StreamHeader("p", 3, SCHEMA, version=(2, 0)), None)
    p.produce(topic, value=value, key=part_key(0), headers=headers, partition=0)
    assert p.flush(10) == 0
    with pytest.raises(LostDataError, match="1 partitions.*peers=3") as ei:
        log.header("p")
    assert (ei.value.stream, ei.value.part) == ("p", 1)
    assert "p" in log.streams()                      # listed, so that verify reports it


def test_header_record_missing_in_a_written_topic(kafka_uri, kafka_bootstrap):
    """A topic whose partitions were written but hold no stream header is not taken over by a new one."""
    log = open_log(kafka_uri, timeout=3)
    topic = log.target.topic("q")
    _create_topic(kafka_bootstrap, topic, 2)
    raw = Producer({"bootstrap.servers": kafka_bootstrap})
    raw.produce(topic, value=b"not a header", partition=1)
    assert raw.flush(10) == 0
    with pytest.raises(LostDataError, match="partition 1 was written"):
        Capture(log, "q", 0, 2, schema=SCHEMA)


def test_progress_events_survive_fencing(kafka_uri):
    """A writer opened while another holds an open transaction sees only what was committed, and
    Progress events of the aborted transaction are not part of the frontier it recovers."""
    log = open_log(kafka_uri)
    stream = new_stream(log)
    w = log.writer(stream, 0)
    w.append(Progress(((0, -1), (5, 1))))
    w.sync()
    w.append(Progress(((5, -1), (9, 1))))           # aborted when the next writer opens
    cap = Capture(open_log(kafka_uri), stream, 0, 1)
    assert list(cap.frontier) == [5] and cap.next_seq == 2
    cap.abort()
    with pytest.raises(WriterFencedError):
        w.sync()


def test_a_refused_create_leaves_no_topic(kafka_uri, kafka_bootstrap):
    """A schema the Avro encoding cannot store (uint64) is refused before the topic is created."""
    from eventlog import SchemaMismatchError

    log = open_log(kafka_uri)
    with pytest.raises(SchemaMismatchError):
        Capture(log, "refused", 0, 1, schema=pa.schema([("u", pa.uint64())]), encoding="avro")
    topic = log.target.topic("refused")
    assert topic not in AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
