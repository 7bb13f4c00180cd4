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


def _ids_by_part_and_time(log_uri: str, stream: str) -> list[tuple[int, int, int]]:
    log = open_log(log_uri)
    out = []
    for p in range(log.header(stream).peers):
        with log.reader(stream, p) as r:
            out.extend((p, e.event.time, n) for e in r if isinstance(e.event, Messages)
                       for n in e.event.records.column("id").to_pylist())
    return sorted(out)


def test_a_streaming_write_onto_kafka_appends_each_micro_batch_once_and_leaves_no_staging(spark, kafka_uri,
                                                                                           tmp_path):
    """``writeStream.format("eventlog")`` onto a Kafka log: batch ids are times, a micro-batch that Spark runs
    again after a restart (its commit forgotten) is not appended twice, and no staging topic is left."""
    import os

    src = tmp_path / "src"
    src.mkdir()
    checkpoint = str(tmp_path / "ck")
    sink = f"{kafka_uri}/sink"

    def run():
        q = (spark.readStream.schema("id BIGINT").json(str(src)).writeStream.format("eventlog")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start(sink))
        q.awaitTermination()

    for batch in range(2):
        (src / f"{batch}.json").write_text("".join(f'{{"id": {batch * 10 + i}}}\n' for i in range(5)))
        run()
    before = _ids_by_part_and_time(kafka_uri, "sink")
    assert sorted((t, n) for _, t, n in before) == [(t, t * 10 + i) for t in range(2) for i in range(5)]
    for name in ("1", ".1.crc"):  # Spark runs batch 1 again on restart
        os.remove(os.path.join(checkpoint, "commits", name))
    run()
    assert _ids_by_part_and_time(kafka_uri, "sink") == before
    back = spark.read.format("eventlog").load(sink)
    assert sorted((r["_time"], r["id"]) for r in back.collect()) == [(t, t * 10 + i) for t in range(2)
                                                                      for i in range(5)]
    assert _staging_topics(kafka_uri) == []


def test_tap_batches_onto_kafka_captures_each_micro_batch_and_calls_the_sink(spark, kafka_uri, tmp_path):
    from .test_write import check_tap_batches

    check_tap_batches(spark, kafka_uri, tmp_path)
    assert _staging_topics(kafka_uri) == []
