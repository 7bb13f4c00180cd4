"""Batch reads: workers, assign/repartition modes, key, since/until, completed vs incomplete times, schema
of the log columns, and errors."""

from __future__ import annotations

import pyarrow as pa
import pytest

from capture import Capture
from eventlog import InvalidURIError, StreamNotFoundError, open_log
from replay import worker_of

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("n", pa.int64()), ("k", pa.string())])


def capture_rounds(log_dir: str, stream: str = "nums", peers: int = 3, times: int = 6, finish_last: bool = True):
    """Part ``w`` sends n = 100*w + t at each time t (two rows: keys a/b), advancing one time at a time;
    part ``peers-1`` stays at time 3 unless ``finish_last``."""
    log = open_log(log_dir)
    for w in range(peers):
        cap = Capture(log, stream, w, peers, schema=SCHEMA)
        for t in range(times):
            if w == peers - 1 and not finish_last and t == 3:
                cap.abort()
                break
            cap.send(t, [{"n": 100 * w + t, "k": "a"}, {"n": 100 * w + t, "k": f"b{t}"}])
            cap.advance_to(t + 1)
        else:
            cap.close()


def load(spark, path: str, **options):
    reader = spark.read.format("eventlog")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(path)


def test_schema_and_log_columns(spark, log_dir):
    capture_rounds(log_dir)
    df = load(spark, f"file://{log_dir}/nums")
    assert df.schema.simpleString() == "struct<n:bigint,k:string,_time:bigint,_part:int,_seq:bigint>"
    rows = df.collect()
    assert len(rows) == 3 * 6 * 2
    for r in rows:
        assert r["n"] == 100 * r["_part"] + r["_time"]
        assert r["_seq"] == 2 * r["_time"] + 1  # Messages then Progress per time, from seq 1


def test_seq_is_the_event_that_carried_the_rows_when_times_arrive_out_of_order(spark, log_dir):
    # seq 1: time 2, seq 2: time 0, seq 3: time 1, then Progress: time 0 completes first, while the events
    # of times 1 and 2 before it are held back (the replayer's position then points at a held event)
    log = open_log(log_dir)
    with Capture(log, "ooo", 0, 1, schema=SCHEMA) as cap:
        for t in (2, 0, 1):
            cap.send(t, [{"n": t, "k": "x"}])
        for t in (1, 2, 3):
            cap.advance_to(t)
    rows = load(spark, f"{log_dir}/ooo").collect()
    assert sorted((r["_time"], r["_seq"]) for r in rows) == [(0, 2), (1, 3), (2, 1)]
    with open_log(log_dir).reader("ooo", 0) as reader:  # the sequence ids the log itself gives those events
        stored = {e.event.time: e.seq for e in reader if hasattr(e.event, "records")}
    assert stored == {2: 1, 0: 2, 1: 3}


def test_seq_is_the_event_that_carried_the_rows_when_progress_is_released_ahead_of_them(spark, log_dir):
    # seq 1: Messages at time 1 (held until time 1 completes), seq 2: Progress to 1 (released ahead of it),
    # seq 3: Messages at time 1, seq 4: Progress to 2 (releases both Messages)
    log = open_log(log_dir)
    with Capture(log, "ahead", 0, 1, schema=SCHEMA) as cap:
        cap.send(1, [{"n": 1, "k": "first"}])
        cap.advance_to(1)
        cap.send(1, [{"n": 2, "k": "second"}])
        cap.advance_to(2)
    rows = load(spark, f"{log_dir}/ahead").collect()
    assert sorted((r["k"], r["_seq"]) for r in rows) == [("first", 1), ("second", 3)]


def test_workers_assign_parts_like_the_replayer(spark, log_dir):
    capture_rounds(log_dir, peers=5)
    df = load(spark, log_dir + "/nums", workers=3)
    assert df.rdd.getNumPartitions() == 3
    per_partition = df.rdd.mapPartitions(lambda rows: [sorted({r["_part"] for r in rows})]).collect()
    assert per_partition == [[0, 3], [1, 4], [2]]


def test_repartition_by_key_gives_each_worker_its_keys(spark, log_dir):
    capture_rounds(log_dir)
    df = load(spark, log_dir + "/nums", workers=2, mode="repartition", key="k")
    got = df.rdd.mapPartitionsWithIndex(lambda j, rows: [(j, r["k"]) for r in rows]).collect()
    assert len(got) == 36
    keys = pa.record_batch({"k": [k for _, k in got]})
    assert [j for j, _ in got] == worker_of(keys, "k", 2).tolist()
    with pytest.raises(Exception, match="needs option 'key'"):
        load(spark, log_dir + "/nums", mode="repartition").collect()


def test_since_until(spark, log_dir):
    capture_rounds(log_dir)
    times = sorted({r["_time"] for r in load(spark, log_dir + "/nums", since=2, until=5).collect()})
    assert times == [2, 3, 4]


def test_only_completed_times_unless_incomplete(spark, log_dir):
    capture_rounds(log_dir, finish_last=False)  # part 2 holds time 3: times 0..2 complete
    assert sorted({r["_time"] for r in load(spark, log_dir + "/nums", workers=2).collect()}) == [0, 1, 2]
    # in assign mode worker 0 reads parts 0 and 2 only; it must not decide alone that time 3 is complete
    assert sorted({r["_time"] for r in load(spark, log_dir + "/nums", workers=3).collect()}) == [0, 1, 2]
    everything = load(spark, log_dir + "/nums", incomplete=True).collect()
    assert len(everything) == (6 + 6 + 3) * 2


def test_stream_option_and_errors(spark, log_dir):
    capture_rounds(log_dir)
    assert load(spark, log_dir, stream="nums").count() == 36
    with pytest.raises(Exception, match="no stream 'other'"):
        load(spark, log_dir + "/other").count()
    with pytest.raises(Exception, match="memory:// logs live inside one process"):
        load(spark, "memory://x/nums").count()
    with pytest.raises(Exception, match="must be one of"):
        load(spark, log_dir + "/nums", mode="round-robin").count()


def test_errors_are_typed_outside_spark(log_dir):
    from connectors.spark.options import ReadOptions
    from connectors.spark.source import EventlogDataSource

    with pytest.raises(InvalidURIError):
        ReadOptions.parse({"path": "memory://x/nums"})
    with pytest.raises(StreamNotFoundError):
        EventlogDataSource({"path": log_dir + "/missing"}).schema()
