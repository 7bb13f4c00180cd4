"""Writes: batch write then read back, retried write tasks, overwrite, micro-batch appends that are
re-executed (whole, or after a commit that stopped half-way) without duplicates."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from capture import Capture
from connectors.spark import StreamExistsError, parse_stream_uri
from connectors.spark.staging import PartStager
from connectors.spark.times import TimeSpec
from connectors.spark.write import append_micro_batch
from eventlog import Messages, open_log
from replay import Replayer

from .conftest import by_time

pytestmark = pytest.mark.spark


def numbers(spark, n=400, partitions=3):
    return spark.range(0, n, 1, partitions).selectExpr("id", "id % 5 as epoch", "cast(id * 2 as int) as twice")


def test_batch_write_then_read_back(spark, log_dir):
    df = numbers(spark)
    df.write.format("eventlog").option("time", "epoch").mode("append").save(f"{log_dir}/nums")
    log = open_log(log_dir)
    header = log.header("nums")
    assert header.peers == 3 and header.schema.field("twice").type == pa.int32()
    back = spark.read.format("eventlog").option("workers", 2).load(f"{log_dir}/nums")
    assert by_time(back.collect(), "_time", ["id", "twice"]) == by_time(df.collect(), "epoch", ["id", "twice"])
    assert sorted({r["_part"] for r in back.collect()}) == [0, 1, 2]
    assert not os.path.exists(os.path.join(log_dir, ".staging"))


def test_write_refuses_existing_stream_and_overwrites(spark, log_dir):
    numbers(spark, 10, 1).write.format("eventlog").mode("append").save(f"{log_dir}/nums")
    with pytest.raises(Exception, match="stream exists"):
        numbers(spark, 10, 1).write.format("eventlog").mode("append").save(f"{log_dir}/nums")
    numbers(spark, 30, 2).write.format("eventlog").option("time", 7).mode("overwrite").save(f"{log_dir}/nums")
    back = spark.read.format("eventlog").load(f"{log_dir}/nums")
    assert back.count() == 30 and {r["_time"] for r in back.collect()} == {7}


def test_retried_write_tasks_publish_once(spark, log_dir):
    def fail_first_attempt(batches):
        from pyspark import TaskContext

        for i, b in enumerate(batches):
            if TaskContext.get().attemptNumber() == 0 and i == 1:
                raise RuntimeError("injected failure")
            yield b

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        df = numbers(spark, 1000, 2)
        df.mapInArrow(fail_first_attempt, df.schema).write.format("eventlog").option("time", "epoch") \
            .mode("append").save(f"{log_dir}/nums")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    back = spark.read.format("eventlog").load(f"{log_dir}/nums")
    assert back.count() == 1000 and back.select("id").distinct().count() == 1000
    assert not os.path.exists(os.path.join(log_dir, ".staging"))


def _recorded(log_dir: str, stream: str) -> list[tuple[int, int, int]]:
    log = open_log(log_dir)
    out = []
    for p in range(log.header(stream).peers):
        for e in log.reader(stream, p):
            if isinstance(e.event, Messages):
                out.extend((p, e.event.time, n) for n in e.event.records.column("id").to_pylist())
    return sorted(out)


def test_streaming_write_batch_ids_are_times_and_reexecuted_batches_do_not_duplicate(spark, log_dir, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    schema = "id BIGINT, word STRING"
    checkpoint = str(tmp_path / "ck")

    def run():
        q = (spark.readStream.schema(schema).json(str(src)).writeStream.format("eventlog")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start(f"{log_dir}/sink"))
        q.awaitTermination()
        return q.recentProgress

    for batch in range(2):
        (src / f"{batch}.json").write_text("".join(f'{{"id": {batch * 10 + i}, "word": "w{i}"}}\n' for i in range(5)))
        run()
    before = _recorded(log_dir, "sink")
    assert sorted({t for _, t, _ in before}) == [0, 1]
    # forget that batch 1 was committed: Spark re-executes it on restart and the sink sees batch 1 again
    for name in ("1", ".1.crc"):
        os.remove(os.path.join(checkpoint, "commits", name))
    run()
    assert _recorded(log_dir, "sink") == before
    back = spark.read.format("eventlog").load(f"{log_dir}/sink")
    assert sorted(r["id"] for r in back.collect()) == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]
    assert not os.path.exists(os.path.join(log_dir, ".staging"))


def test_micro_batch_commit_that_stopped_half_way_is_completed_not_repeated(log_dir):
    """Unit level: part 0 already has batch 3's Messages event (the commit stopped before its Progress)."""
    target = parse_stream_uri(log_dir, "sink")
    schema = pa.schema([("id", pa.int64())])
    spec = TimeSpec.parse(None, schema)
    log = open_log(log_dir)
    # two open parts at frontier 3; part 0 holds the Messages event of an interrupted commit of batch 3
    for p in range(2):
        cap = Capture(log, "sink", p, 2, schema=schema)
        cap.advance_to(3)
        if p == 0:
            cap.send(3, [{"id": 30}, {"id": 31}])
        cap.abort()

    def staged(rows_by_partition):
        out = []
        for q, ids in enumerate(rows_by_partition):
            st = PartStager(target, "job", q, 0, schema, spec, "arrow")
            st.add(pa.record_batch({"id": ids}, schema=schema))
            out.append(st.finish())
        return out

    written = append_micro_batch(target, staged([[30, 31], [32]]), 3, schema, spec, "arrow", None)
    assert written == 1  # only part 1's record; part 0's time 3 was already there
    assert _recorded(log_dir, "sink") == [(0, 3, 30), (0, 3, 31), (1, 3, 32)]
    r = Replayer(log, "sink", 0, 1)
    list(r)
    assert {p: list(f) for p, f in r.part_frontiers().items()} == {0: [4], 1: [4]}
    again = append_micro_batch(target, staged([[30, 31], [32]]), 3, schema, spec, "arrow", None)
    assert again == 0 and _recorded(log_dir, "sink") == [(0, 3, 30), (0, 3, 31), (1, 3, 32)]


def test_existing_stream_error_type(spark, log_dir):
    from connectors.spark.source import EventlogDataSource

    numbers(spark, 5, 1).write.format("eventlog").mode("append").save(f"{log_dir}/nums")
    source = EventlogDataSource({"path": f"{log_dir}/nums"})
    with pytest.raises(StreamExistsError):
        source.writer(numbers(spark, 5, 1).schema, overwrite=False)


def test_micro_batches_with_a_time_column_advance_past_their_times_and_drop_late_rows(log_dir):
    target = parse_stream_uri(log_dir, "sink")
    schema = pa.schema([("id", pa.int64()), ("t", pa.int64())])
    spec = TimeSpec.parse("t", schema)

    def staged(*partitions):
        out = []
        for q, rows in enumerate(partitions):
            st = PartStager(target, "job", q, 0, schema, spec, "arrow")
            st.add(pa.record_batch({"id": [i for i, _ in rows], "t": [t for _, t in rows]}, schema=schema))
            out.append(st.finish())
        return out

    assert append_micro_batch(target, staged([(1, 5), (2, 6)], [(3, 6)]), 0, schema, spec, "arrow", None) == 3
    assert append_micro_batch(target, staged([(4, 7)], [(5, 5)]), 1, schema, spec, "arrow", None) == 1  # 5 is late
    r = Replayer(open_log(log_dir), "sink", 0, 1)
    assert [(t, sorted(tb.column("id").to_pylist())) for t, tb in r.completed()] == [(5, [1]), (6, [2, 3]), (7, [4])]
    assert list(r.frontier) == [8]


def test_tap_batches_captures_each_micro_batch_and_calls_the_sink(spark, log_dir, tmp_path):
    check_tap_batches(spark, log_dir, tmp_path)


def check_tap_batches(spark, log_uri: str, tmp_path) -> None:
    """``foreachBatch(tap_batches(log_uri, "ids", then=...))`` over two micro-batches captures each (time = batch
    id) and calls the user's sink with each."""
    from capture import tap_batches

    src = tmp_path / "src"
    src.mkdir()
    seen: list[tuple[int, int]] = []
    for batch in range(2):
        (src / f"{batch}.json").write_text("".join(f'{{"id": {batch * 10 + i}}}\n' for i in range(3)))
        q = (spark.readStream.schema("id BIGINT").json(str(src)).writeStream
             .foreachBatch(tap_batches(log_uri, "ids", then=lambda df, b: seen.append((b, df.count()))))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        q.awaitTermination()
    assert seen == [(0, 3), (1, 3)]
    back = spark.read.format("eventlog").load(f"{log_uri}/ids").collect()
    assert sorted((r["_time"], r["id"]) for r in back) == [(0, 0), (0, 1), (0, 2), (1, 10), (1, 11), (1, 12)]


def test_micro_batch_parts_are_read_and_appended_side_by_side(log_dir, monkeypatch):
    """The commit reads and appends the parts on threads of its own (one per part, at most one per core), and
    what it writes is what appending them one after another writes: each part its records at the batch's time,
    then the Progress past it; a part that fails is reported, the others are appended (a re-run completes it)."""
    import threading

    from connectors.spark import write as write_mod

    target = parse_stream_uri(log_dir, "sink")
    schema = pa.schema([("id", pa.int64())])
    spec = TimeSpec.parse(None, schema)

    def staged(n_parts: int, per: int, job: str):
        out = []
        for q in range(n_parts):
            st = PartStager(target, job, q, 0, schema, spec, "arrow")
            st.add(pa.record_batch({"id": [q * 1000 + i for i in range(per)]}, schema=schema))
            out.append(st.finish())
        return out

    threads: set[str] = set()
    real = write_mod._append_part

    def spy(*args):
        threads.add(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(write_mod, "_append_part", spy)
    monkeypatch.setattr(write_mod.os, "cpu_count", lambda: 4)
    assert append_micro_batch(target, staged(6, 50, "a"), 0, schema, spec, "arrow", None) == 300
    assert len(threads) > 1 and all(t.startswith("eventlog-append") for t in threads)
    assert _recorded(log_dir, "sink") == sorted((q, 0, q * 1000 + i) for q in range(6) for i in range(50))
    r = Replayer(open_log(log_dir), "sink", 0, 1)
    list(r)
    assert {p: list(f) for p, f in r.part_frontiers().items()} == {q: [1] for q in range(6)}

    def fail_on_part_2(log, stream, header, part, records, frontier):  # noqa: ANN001
        if part == 2:
            raise OSError("disk full (part 2)")
        return real(log, stream, header, part, records, frontier)

    monkeypatch.setattr(write_mod, "_append_part", fail_on_part_2)
    with pytest.raises(OSError, match="part 2"):
        append_micro_batch(target, staged(6, 5, "b"), 1, schema, spec, "arrow", None)
    monkeypatch.setattr(write_mod, "_append_part", real)
    assert append_micro_batch(target, staged(6, 5, "c"), 1, schema, spec, "arrow", None) == 5  # part 2 completed
    r = Replayer(open_log(log_dir), "sink", 0, 1)
    list(r)
    assert {p: list(f) for p, f in r.part_frontiers().items()} == {q: [2] for q in range(6)}
