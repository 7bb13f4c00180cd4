"""The Spark tap: rows pass through unchanged and replay from the log, whatever the partitioning; retried
tasks, second evaluations and partial reads leave no duplicates or partial parts."""

from __future__ import annotations

import os

import pytest

from capture import tap
from connectors.spark import StreamExistsError
from eventlog import open_log

from .conftest import by_time

pytestmark = pytest.mark.spark


@pytest.fixture(autouse=True)
def _python_engine(monkeypatch):
    """These are the Python tap's tests (``mapInArrow``; the JVM tap's are ``test_jvm_*.py``): pin the engine,
    which is ``auto`` (the JVM tap where it can run) by default."""
    monkeypatch.setenv("EVENTLOG_TAP_ENGINE", "python")


COLS = ["id", "word", "t"]


def words(spark, n: int, partitions: int):
    return spark.range(0, n, 1, partitions).selectExpr(
        "id", "concat('w', cast(id % 7 as string)) as word", "id % 4 as t")


@pytest.mark.parametrize("partitions", [1, 3, 7])
def test_tap_round_trip_per_time_with_2_and_5_workers(spark, log_dir, partitions):
    tapped = tap(words(spark, 700, partitions), log_dir, "words", time="t")
    assert tapped.schema == words(spark, 1, 1).schema
    collected = by_time(tapped.collect(), "t", COLS)
    assert open_log(log_dir).header("words").peers == partitions
    for workers in (2, 5):
        replayed = spark.read.format("eventlog").option("workers", workers).load(f"{log_dir}/words")
        assert replayed.rdd.getNumPartitions() == workers
        assert by_time(replayed.collect(), "_time", COLS) == collected
    assert sum(sum(c.values()) for c in collected.values()) == 700


def test_tap_after_adaptive_shuffle_captures_the_partitions_that_ran(spark, log_dir):
    counts = words(spark, 2000, 3).groupBy("word").count()
    expected = sorted(counts.collect())
    tapped = tap(counts, log_dir, "counts")
    assert sorted(tapped.collect()) == expected
    peers = open_log(log_dir).header("counts").peers
    assert peers == tapped.rdd.getNumPartitions()
    replayed = spark.read.format("eventlog").load(f"{log_dir}/counts").drop("_time", "_part", "_seq")
    assert sorted(replayed.collect()) == expected


def test_second_evaluation_and_partial_reads_publish_nothing_more(spark, log_dir):
    tapped = tap(words(spark, 300, 3), log_dir, "words", time="t")
    assert len(tapped.take(2)) == 2  # reads part of one partition: discarded, not published
    assert tapped.count() == 300
    assert tapped.count() == 300  # evaluated again: parts exist, nothing is captured twice
    log = open_log(log_dir)
    assert [log.part_stats("words", p).next_seq > 1 for p in range(3)] == [True] * 3
    assert spark.read.format("eventlog").load(f"{log_dir}/words").count() == 300
    assert not os.path.exists(os.path.join(log_dir, ".staging"))


def test_tap_refuses_an_existing_stream_unless_replaced(spark, log_dir):
    tap(words(spark, 10, 1), log_dir, "words").count()
    with pytest.raises(StreamExistsError):
        tap(words(spark, 10, 1), log_dir, "words")
    tap(words(spark, 20, 2), log_dir, "words", replace=True).count()
    assert spark.read.format("eventlog").load(f"{log_dir}/words").count() == 20


def test_product_time_column(spark, log_dir):
    df = spark.range(0, 60, 1, 2).selectExpr("id", "array(id % 2, id % 3) as epoch")
    tap(df, log_dir, "prod", time="epoch", time_type="product:2").count()
    back = spark.read.format("eventlog").load(f"{log_dir}/prod")
    counts = sorted((tuple(r["_time"]), r["count"]) for r in back.groupBy("_time").count().collect())
    assert counts == [((a, b), 10) for a in range(2) for b in range(3)]
    assert all(list(r["epoch"]) == r["_time"] for r in back.collect())


def _fail_first_attempt(batches):
    from pyspark import TaskContext

    ctx = TaskContext.get()
    for i, b in enumerate(batches):
        if ctx.attemptNumber() == 0 and i == 2:
            raise RuntimeError("injected failure of the first attempt")
        yield b


@pytest.mark.parametrize("where", ["after", "before"])
def test_task_retries_leave_no_duplicates(spark, log_dir, where):
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    try:
        df = words(spark, 6000, 2)
        if where == "before":
            df = df.mapInArrow(_fail_first_attempt, df.schema)
        out = tap(df, log_dir, "words", time="t")
        if where == "after":
            out = out.mapInArrow(_fail_first_attempt, out.schema)
        collected = by_time(out.collect(), "t", COLS)  # each task failed once, then succeeded (local[2,3])
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    replayed = spark.read.format("eventlog").option("workers", 3).load(f"{log_dir}/words")
    assert replayed.count() == 6000
    assert by_time(replayed.collect(), "_time", COLS) == collected
    assert replayed.select("id").distinct().count() == 6000
