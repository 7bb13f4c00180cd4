"""The pipelined Kafka writer (``sync="none"``) keeps the promise ``connectors/kafka/writer.py`` states under
"Pipelining", against the real broker: what ``acknowledged_seq`` names, and everything once ``flush`` or
``close`` returned, survives a SIGKILL of the writer process; readers never see the uncommitted window; the
default mode still commits at every ``advance_to``; misuse and fencing raise typed errors."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pytest

from capture import Capture
from connectors.kafka import WriterFencedError
from eventlog import open_log
from eventlog.errors import InvalidURIError, ProgressError
from replay import Replayer
from tests.support.paths import ROOT

pytestmark = pytest.mark.kafka

SCHEMA = pa.schema([("t", pa.int64()), ("i", pa.int64())])


def rows(t: int) -> list[dict]:
    return [{"t": t, "i": i} for i in range(3)]


def seqs(uri: str) -> list[int]:
    """The sequence ids a committed reader sees in part 0 of stream ``s``."""
    return [e.seq for e in open_log(uri).reader("s", 0)]


# -- the promise, in process ---------------------------------------------------------------------------


def test_flush_commits_the_open_transaction_of_a_pipelined_writer(kafka_uri):
    cap = Capture(open_log(kafka_uri + "?eventlog.commit.interval.ms=60000", sync="none"), "s", 0, 1, schema=SCHEMA)
    w = cap._writer
    for t in range(3):
        cap.send(t, rows(t))
        cap.advance_to(t + 1)
    assert (w.acknowledged_seq, cap.next_seq) == (1, 7)  # six events appended, none committed
    assert seqs(kafka_uri) == []  # read_committed: nothing of the open transaction
    cap.flush()
    assert w.acknowledged_seq == cap.next_seq == 7
    assert seqs(kafka_uri) == list(range(1, 7))
    cap.send(3, rows(3))
    cap.advance_to(4)
    assert w.acknowledged_seq == 7 and seqs(kafka_uri) == list(range(1, 7))
    cap.close()
    assert seqs(kafka_uri) == list(range(1, 10))  # 3 more: messages, progress, and the closing progress
    with pytest.raises(ProgressError, match="closed"):
        cap.flush()


def test_advance_to_commits_what_was_appended_an_interval_before_it_was_called(kafka_uri):
    cap = Capture(open_log(kafka_uri + "?eventlog.commit.interval.ms=400", sync="none"), "s", 0, 1, schema=SCHEMA)
    w = cap._writer
    cap.send(0, rows(0))
    cap.advance_to(1)  # within the interval: not committed
    assert w.acknowledged_seq == 1 and seqs(kafka_uri) == []
    time.sleep(0.45)
    cap.send(1, rows(1))
    cap.advance_to(2)  # the first pending event is older than the interval: everything appended commits
    assert w.acknowledged_seq == cap.next_seq == 5
    assert seqs(kafka_uri) == [1, 2, 3, 4]
    cap.close()


def test_the_default_mode_still_commits_at_every_advance_to(kafka_uri):
    cap = Capture(open_log(kafka_uri), "s", 0, 1, schema=SCHEMA)
    for t in range(3):
        cap.send(t, rows(t))
        cap.advance_to(t + 1)
        assert cap._writer.acknowledged_seq == cap.next_seq
        assert seqs(kafka_uri) == list(range(1, cap.next_seq))
    cap.flush()  # nothing left to commit: returns at once
    cap.close()
    assert seqs(kafka_uri) == list(range(1, 8))


def test_pipelined_without_transactions_waits_for_acknowledgements_at_flush(kafka_uri):
    uri = kafka_uri + "?eventlog.transactions=false&eventlog.commit.interval.ms=60000"
    cap = Capture(open_log(uri, sync="none"), "s", 0, 1, schema=SCHEMA)
    cap.send(0, rows(0))
    cap.advance_to(1)
    assert cap._writer.acknowledged_seq == 1
    cap.flush()
    assert cap._writer.acknowledged_seq == cap.next_seq == 3
    assert seqs(kafka_uri) == [1, 2]
    cap.close()


# -- errors ------------------------------------------------------------------------------------------


def test_an_interval_the_broker_would_abort_is_refused_when_the_log_opens(kafka_uri):
    with pytest.raises(InvalidURIError, match="transaction.timeout.ms"):
        open_log(kafka_uri + "?eventlog.commit.interval.ms=90000")  # librdkafka's default timeout: 60000
    with pytest.raises(InvalidURIError, match="transaction.timeout.ms=5000"):
        open_log(kafka_uri + "?eventlog.commit.interval.ms=6000&transaction.timeout.ms=5000")
    open_log(kafka_uri + "?eventlog.commit.interval.ms=90000&transaction.timeout.ms=120000").close()
    open_log(kafka_uri + "?eventlog.commit.interval.ms=90000&eventlog.transactions=false").close()  # no transaction


def test_a_fenced_pipelined_writer_raises_at_flush_and_its_window_is_aborted_whole(kafka_uri):
    uri = kafka_uri + "?eventlog.commit.interval.ms=60000"
    first = Capture(open_log(uri, sync="none"), "s", 0, 1, schema=SCHEMA)
    first.send(0, rows(0))
    first.advance_to(1)
    first.flush()  # seqs 1-2 committed
    first.send(1, rows(1))
    first.advance_to(2)  # seqs 3-4 in the open transaction
    second = Capture(open_log(uri), "s", 0, 1)  # fences the first: its open transaction is aborted
    assert list(second.frontier) == [1] and second.next_seq == 3
    with pytest.raises(WriterFencedError, match="from seq 3 on were not committed"):
        first.flush()
    with pytest.raises(WriterFencedError):  # and again: the writer is unusable
        first.advance_to(3)
    first.abort()
    second.send(1, rows(1))
    second.close()
    done = {t: sorted((r["t"], r["i"]) for r in tb.to_pylist())
            for t, tb in Replayer(open_log(kafka_uri), "s", 0, 1).completed()}
    assert done == {t: [(t, i) for i in range(3)] for t in (0, 1)}


# -- SIGKILL of the writer process ---------------------------------------------------------------------

CHILD = """
import sys, time
sys.path.insert(0, {root!r})
import pyarrow as pa
from capture import Capture
from eventlog import open_log

SCHEMA = pa.schema([("t", pa.int64()), ("i", pa.int64())])
cap = Capture(open_log(sys.argv[1], sync=sys.argv[2]), "s", 0, 1, schema=SCHEMA)
(t,) = cap.frontier
print("start", cap.next_seq, t, flush=True)
while True:
    cap.send(t, [{{"t": t, "i": i}} for i in range(3)])
    cap.advance_to(t + 1)
    t += 1
    if t % 10 == 0:
        cap.flush()
    print("ack", cap._writer.acknowledged_seq, cap.next_seq, flush=True)
    time.sleep(0.002)
"""


@pytest.mark.parametrize("sync", ["none", "fsync"])
def test_a_sigkilled_writer_loses_nothing_it_acknowledged(kafka_uri, tmp_path, sync):
    """Each writer process prints ``acknowledged_seq`` after every ``advance_to`` (and ``flush`` every 10
    times); the test SIGKILLs it after a random number of lines. The next writer must continue at or after
    the last acknowledged point (nothing acknowledged lost); the application re-sends from the recovered
    frontier, and a replay sees every time exactly once with its records."""
    uri = kafka_uri + "?eventlog.commit.interval.ms=30"
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(root=str(ROOT)))
    rng = random.Random(17 if sync == "none" else 18)
    lagged = 0
    for _ in range(3):
        child = subprocess.Popen([sys.executable, str(script), uri, sync], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        acked, lines = 1, rng.randint(5, 45)
        try:
            start = child.stdout.readline().split()
            assert start and start[0] == "start", child.stderr.read()
            for _ in range(lines):
                line = child.stdout.readline().split()
                assert line and line[0] == "ack", child.stderr.read()
                acked, appended = int(line[1]), int(line[2])
                lagged += acked < appended
                if sync == "fsync":
                    assert acked == appended  # the default mode acknowledges at every advance_to
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(30)
            child.stdout.close()
            child.stderr.close()
        w = open_log(kafka_uri).writer("s", 0)  # fences the dead writer: its open transaction is aborted
        next_seq = w.next_seq
        w.close()
        assert next_seq >= acked, f"acknowledged up to seq {acked - 1}, but the part ends at {next_seq - 1}"
        assert seqs(kafka_uri) == list(range(1, next_seq))
    if sync == "none":
        assert lagged > 0  # the pipelined writer did acknowledge later than it appended
    with Capture(open_log(uri), "s", 0, 1) as cap:
        (start,) = cap.frontier
        for t in range(start, start + 3):
            cap.send(t, rows(t))
            cap.advance_to(t + 1)
        last = t
    done = {}
    for t, tb in Replayer(open_log(kafka_uri), "s", 0, 1).completed():
        assert t not in done
        done[t] = sorted((r["t"], r["i"]) for r in tb.to_pylist())
    assert done == {t: [(t, i) for i in range(3)] for t in range(last + 1)}


# -- header records written twice ----------------------------------------------------------------------


def test_a_header_record_written_again_after_data_is_skipped_by_readers_and_seeks(kafka_uri, kafka_bootstrap):
    """Header records go through a producer without idempotence (an idempotent one waited 0.5 s for its
    producer id at every stream creation), so a retry may store one twice, even after a racing writer's first
    events. Readers pass over it, and the binary search for a sequence id stays right."""
    from confluent_kafka import Producer

    from connectors.kafka.records import header_record_v2

    log = open_log(kafka_uri)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    for t in range(2):
        cap.send(t, rows(t))
        cap.advance_to(t + 1)
    value, headers = header_record_v2(log.header("s"), None)
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    p.produce(log.target.topic("s"), value=value, key=b"0", partition=0, headers=headers)
    assert p.flush(10) == 0
    for t in range(2, 5):
        cap.send(t, rows(t))
        cap.advance_to(t + 1)
    cap.close()
    fresh = open_log(kafka_uri)
    assert seqs(kafka_uri) == list(range(1, 12))
    for seq in range(1, 12):
        assert [e.seq for e in fresh.reader("s", 0, seq)][:1] == [seq]
        offset = fresh.offset_for_seq("s", 0, seq)
        assert fresh._probe(fresh.target.topic("s"), 0, offset) >= seq
    assert fresh.tail("s", 0).last_seq == 11
    done = {t: len(tb) for t, tb in Replayer(fresh, "s", 0, 1).completed()}
    assert done == {t: 3 for t in range(5)}
