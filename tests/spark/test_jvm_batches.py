"""Micro-batches appended by the JVM tap (``connectors.spark.jvm.append_batch``, ``tap_batches(engine="jvm")``):
each task stages its partition inside the JVM and the driver appends what Spark kept, so the stream holds what
the Python writer (``write.format("eventlog").option("batchId", …)``) would have written — the same events per
part, the same frontiers — exactly once per batch id, with retried tasks leaving no duplicates and no staging
left behind. Skipped only where no JDK is installed (the ``jvm`` fixture, ``conftest.py``)."""

from __future__ import annotations

import logging
import os

import pytest

from capture import tap_batches
from connectors.spark.jvm import JvmTapUnavailable, append_batch
from eventlog import open_log
from eventlog.events import Messages, Progress

from .test_jvm_tap import _fail_first_attempt, verify

pytestmark = pytest.mark.spark


def events(log_dir: str, stream: str) -> list[list[tuple]]:
    """Per part: its events as ``("m", time, sorted records)`` / ``("p", updates)``."""
    log = open_log(log_dir)
    out = []
    for p in range(log.header(stream).peers):
        assert log.check_part(stream, p) == []
        part = []
        with log.reader(stream, p) as reader:
            for entry in reader:
                e = entry.event
                if isinstance(e, Messages):
                    part.append(("m", e.time, sorted(map(repr, e.records.to_pylist()))))
                else:
                    assert isinstance(e, Progress)
                    part.append(("p", e.updates))
        out.append(part)
    return out


def batch(spark, ids: list[int], partitions: int = 2):
    rows = ", ".join(f"({i}, {i % 7}, 'w{i % 5}')" for i in ids)
    return spark.sql(f"select * from values {rows} as t(id, t, word)").repartition(partitions)


def test_micro_batches_of_a_streaming_query_equal_the_python_writers(spark, jvm, log_dir, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    seen: dict[str, list] = {"jvm": [], "python": []}
    for b in range(3):
        (src / f"{b}.json").write_text("".join(f'{{"id": {b * 100 + i}, "w": "x{i % 3}"}}\n' for i in range(40)))
        for engine in ("jvm", "python"):
            q = (spark.readStream.schema("id BIGINT, w STRING").json(str(src)).writeStream
                 .foreachBatch(tap_batches(log_dir, engine, then=lambda df, i, e=engine: seen[e].append(i),
                                           peers=2, engine=engine))
                 .option("checkpointLocation", str(tmp_path / f"ck-{engine}")).trigger(availableNow=True).start())
            q.awaitTermination()
    assert seen["jvm"] == seen["python"] == [0, 1, 2]
    verify(log_dir)
    got = events(log_dir, "jvm")
    assert got == events(log_dir, "python")
    assert sum(len(e[2]) for part in got for e in part if e[0] == "m") == 120
    assert [part[-1] for part in got] == [("p", ((2, -1), (3, 1)))] * 2  # open at frontier {3}
    assert not os.path.exists(os.path.join(log_dir, ".staging"))


def test_a_re_executed_batch_is_written_once(spark, jvm, log_dir):
    df = batch(spark, list(range(50)), 3)
    assert append_batch(df, log_dir, "s", 0) == 50
    before = events(log_dir, "s")
    assert append_batch(df, log_dir, "s", 0) == 0  # Spark re-ran batch 0: nothing written twice
    assert events(log_dir, "s") == before
    assert append_batch(batch(spark, [7, 8]), log_dir, "s", 1) == 2
    after = events(log_dir, "s")
    assert all(part[:len(b)] == b for part, b in zip(after, before))
    assert open_log(log_dir).header("s").peers == 3


def test_time_column_and_late_rows(spark, jvm, log_dir, caplog):
    """Times from an int64 column: rows behind the frontier (late) are dropped and logged, as the Python
    writer does; the frontier moves past the batch's largest time."""
    for engine in ("jvm", "python"):
        run = tap_batches(log_dir, engine, time="t", peers=2, engine=engine)
        run(batch(spark, [1, 2, 3, 4]), 0)  # times 1..4: frontier 5
        with caplog.at_level(logging.WARNING, logger="eventlog"):
            run(batch(spark, [3, 5, 6, 13]), 1)  # time 3 is late; 5, 6 and 13 % 7 = 6 are not
    # the JVM engine's append runs in this process (the Python writer's commit in a Python worker of its own)
    assert any("stream 'jvm' batch 1: 1 record(s) at times behind the frontier" in r.getMessage()
               for r in caplog.records)
    assert events(log_dir, "jvm") == events(log_dir, "python")
    times = sorted({e[1] for part in events(log_dir, "jvm") for e in part if e[0] == "m"})
    assert times == [1, 2, 3, 4, 5, 6]


def test_retried_tasks_leave_no_duplicates_or_staging(spark, jvm, log_dir, monkeypatch):
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    from connectors.spark import jvm as jvm_mod

    monkeypatch.setattr(jvm_mod, "EVENT_ROWS", 50)  # the failing attempts have staged events already
    fail = F.udf(_fail_first_attempt, LongType())
    df = spark.range(0, 3000, 1, 3).select(fail("id").alias("id"))
    assert append_batch(df, log_dir, "s", 4) == 3000
    ids = [r for part in events(log_dir, "s") for e in part if e[0] == "m" for r in e[2]]
    assert sorted(ids) == sorted(repr({"id": i}) for i in range(3000))
    assert not os.path.exists(os.path.join(log_dir, ".staging"))


def test_engines_refuse_or_fall_back_as_tap_does(spark, jvm, log_dir, caplog, monkeypatch):
    import importlib

    tap_mod = importlib.import_module("capture.tap")  # the module (capture.tap is also the function)

    monkeypatch.setattr(tap_mod, "_said", set())  # said once per process: other tests may have said it
    df = batch(spark, [1, 2])
    with pytest.raises(JvmTapUnavailable, match="arrow encoding"):
        tap_batches(log_dir, "a", encoding="avro", engine="jvm")(df, 0)
    assert not os.path.exists(os.path.join(log_dir, "a"))
    with caplog.at_level(logging.WARNING, logger="eventlog.tap"):
        tap_batches(log_dir, "a", encoding="avro", engine="auto")(df, 0)
    assert any("capturing in Python workers" in r.getMessage() for r in caplog.records)
    assert open_log(log_dir).header("a").encoding == "avro"
    with pytest.raises(ValueError, match="engine must be"):
        tap_batches(log_dir, "a", engine="gpu")
    with pytest.raises(TypeError, match="foreachBatch"):
        append_batch(spark.readStream.format("rate").load(), log_dir, "b", 0)


def test_empty_batches_and_a_changed_schema_as_the_python_writer(spark, jvm, log_dir):
    """A micro-batch with no rows (or no partition) moves the frontier, as the Python writer's does; one whose
    schema differs from the stream's is left to the Python writer (which records the change, FORMAT.md §12), and
    nothing of it is written by the JVM tap."""

    empty = spark.createDataFrame(spark.sparkContext.emptyRDD(), batch(spark, [1]).schema)
    assert empty.rdd.getNumPartitions() == 0
    for engine in ("jvm", "python"):
        run = tap_batches(log_dir, engine, peers=2, engine=engine)
        run(batch(spark, [1, 2, 3]), 0)
        run(empty, 1)
        run(batch(spark, [4]).where("id < 0"), 2)  # partitions, no rows
    assert events(log_dir, "jvm") == events(log_dir, "python")
    assert [part[-1][0] for part in events(log_dir, "jvm")] == ["p", "p"]
    before = events(log_dir, "jvm")
    from pyspark.sql import functions as F

    wider = batch(spark, [5, 6]).withColumn("extra", F.lit(1))
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(None)
    with pytest.raises(JvmTapUnavailable, match="schema is not the stream's"):
        append_batch(wider, log_dir, "jvm", 3)
    assert spark.sparkContext.statusTracker().getJobIdsForGroup(None) == jobs  # refused before staging
    assert events(log_dir, "jvm") == before
    assert not os.path.exists(os.path.join(log_dir, ".staging"))
