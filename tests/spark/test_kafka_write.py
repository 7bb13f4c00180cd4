"""Spark writes onto a Kafka log (Apache Kafka, the broker of ``make test``): the tap and the batch writer stage
each task attempt in a staging log of its own — topics below the log's prefix (``prefix..staging.stream.job…``),
which the driver and every executor reach — publish each partition once by copying its events through the
part writer, and delete the staging topics afterwards, a failed attempt's included. Before, the job failed
once a part was published (the staging could not be removed) and left the staging topics behind."""

from __future__ import annotations

from collections import Counter, defaultdict

import pyarrow as pa
import pytest

from capture import tap
from connectors.kafka import KafkaLog
from connectors.spark.staging import remove_tree
from connectors.spark.uri import STAGING_DIR
from eventlog import Messages, Progress, StreamHeader, open_log

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def _fail_first_attempt(x):
    from pyspark import TaskContext

    if TaskContext.get().attemptNumber() == 0 and x == 150:
        raise RuntimeError("first attempt fails on purpose")
    return x


def _parts(log_uri: str, stream: str) -> dict:
    """``{(part, time): Counter(ids)}``, after checking each part ends with the Progress that finishes it."""
    log = open_log(log_uri)
    out: dict = defaultdict(Counter)
    for p in range(log.header(stream).peers):
        with log.reader(stream, p) as r:
            events = [e.event for e in r]
        assert isinstance(events[-1], Progress) and events[-1].updates == ((0, -1),)
        for e in events:
            if isinstance(e, Messages):
                out[(p, e.time)].update(e.records.column("id").to_pylist())
    return dict(out)


def _staging_topics(log_uri: str) -> list[str]:
    log = KafkaLog(log_uri)
    try:
        return [t for t in log.topics_below() if STAGING_DIR in t]
    finally:
        log.close()


def test_a_tap_onto_a_kafka_log_captures_each_partition_once_and_leaves_no_staging(spark, kafka_uri, log_dir):
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    fail = F.udf(_fail_first_attempt, LongType())
    df = spark.range(0, 400, 1, 4).select(fail("id").alias("id"), (F.col("id") % 3).alias("t"))
    tapped = tap(df, kafka_uri, "s", time="t", engine="python")
    assert sorted(r.id for r in tapped.collect()) == list(range(400))  # partition 1 ran twice
    got = _parts(kafka_uri, "s")
    assert sum(sum(c.values()) for c in got.values()) == 400
    assert all(n == 1 for c in got.values() for n in c.values())
    tap(df, log_dir, "s", time="t", engine="python").count()
    assert got == _parts(log_dir, "s")  # what the same tap captures into a file log
    assert _staging_topics(kafka_uri) == []


def test_a_batch_write_to_a_kafka_log_reads_back_and_leaves_no_staging(spark, kafka_uri):
    df = spark.range(0, 300, 1, 3).selectExpr("id", "id % 4 as t")
    df.write.format("eventlog").option("time", "t").mode("append").save(f"{kafka_uri}/nums")
    back = spark.read.format("eventlog").load(f"{kafka_uri}/nums")
    assert sorted((r.id, r._time) for r in back.collect()) == [(i, i % 4) for i in range(300)]
    assert _staging_topics(kafka_uri) == []


def test_removing_staging_on_kafka_refuses_anything_but_a_staging_folder(kafka_uri):
    log = open_log(kafka_uri)
    log.create_stream(StreamHeader("keep", 1, pa.schema([("id", pa.int64())]), "int64", "arrow"))
    with pytest.raises(ValueError, match="not a staging folder"):
        remove_tree(kafka_uri)
    assert open_log(kafka_uri).header("keep").peers == 1
