"""Both Spark sources plan a trimmed stream from its retained frontier (issue 32 §1): the batch source (the JVM
reader declines a trimmed stream, the Python one reads it) and the streaming source from its first offset; a
streaming query whose checkpoint holds a position a later trim dropped fails with the typed error."""

from __future__ import annotations

import pyarrow as pa
import pytest

from eventlog import open_log
from eventlog.antichain import Antichain
from eventlog.parts.capture import Capture
from eventlog.parts.trim import trim

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("n", pa.int64())])


def _write(log_dir: str, times: range) -> None:
    log = open_log(log_dir, segment_bytes=600)
    for p in range(2):
        cap = Capture(log, "s", p, 2, schema=SCHEMA)
        (start,) = cap.frontier
        for t in range(start, times.stop):
            cap.send(t, [{"n": 100 * t + p}])
            cap.advance_to(t + 1)
        cap.abort()  # the stream goes on


def _stream(spark, log_dir: str, checkpoint: str) -> list[tuple[int, int]]:
    got: list = []
    q = (spark.readStream.format("eventlog").load(f"{log_dir}/s").writeStream
         .foreachBatch(lambda df, _: got.extend((r["_time"], r["n"]) for r in df.select("_time", "n").collect()))
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination()
    return sorted(got)


def test_spark_reads_a_trimmed_stream_from_its_retained_frontier(spark, log_dir, tmp_path):
    _write(log_dir, range(0, 20))
    trim(open_log(log_dir), "s", since=Antichain([8]))
    rows = spark.read.format("eventlog").load(f"{log_dir}/s").select("_time", "n").collect()
    assert sorted((r["_time"], r["n"]) for r in rows) == [(t, 100 * t + p) for t in range(8, 20) for p in range(2)]
    assert _stream(spark, log_dir, str(tmp_path / "fresh")) == [(t, 100 * t + p) for t in range(8, 20) for p in (0, 1)]


def test_a_streaming_checkpoint_inside_the_dropped_range_fails_with_the_earliest_position(spark, log_dir, tmp_path):
    checkpoint = str(tmp_path / "ck")
    _write(log_dir, range(0, 5))
    assert _stream(spark, log_dir, checkpoint) == [(t, 100 * t + p) for t in range(5) for p in (0, 1)]
    _write(log_dir, range(5, 30))
    trim(open_log(log_dir), "s", since=Antichain([20]))  # drops times the query has not read yet
    with pytest.raises(Exception, match="dropped by a trim") as e:
        _stream(spark, log_dir, checkpoint)
    assert "the earliest event still there is" in str(e.value)


def test_tap_batches_with_a_retention_drops_old_micro_batches_as_it_goes(spark, log_dir):
    """A long-running Structured Streaming tap (``foreachBatch(tap_batches(…, retention=AGE))``): the driver drops
    the micro-batches complete longer ago than AGE, in the background, as batches keep coming."""
    import time

    from capture import tap_batches

    append = tap_batches(log_dir, "s", retention=0.5)
    policy = next(c.cell_contents for c in append.__closure__  # the policy the function holds
                  if type(c.cell_contents).__name__ == "RetentionPolicy")
    policy.interval = 0.2  # trim as soon as the age allows, for the test
    for batch_id in range(6):
        append(spark.range(batch_id * 10, batch_id * 10 + 10).toDF("n"), batch_id)
        time.sleep(0.25)
    policy.close()
    assert policy.runs >= 1 and policy.last_error is None
    mark = open_log(log_dir).retention("s")
    assert mark is not None and mark.since.elements[0] >= 2  # batches older than 0.5 s when a trim ran
    rows = spark.read.format("eventlog").load(f"{log_dir}/s").select("_time", "n").collect()
    since = mark.since.elements[0]
    assert sorted(r["n"] for r in rows) == list(range(since * 10, 60))


def test_spark_reads_a_stream_whose_schema_changed_as_its_current_schema(spark, log_dir):
    """Issue 32 §3: the batch source (the JVM reader declines such a stream; engine=auto falls back) and the
    streaming source hand out the current schema: a column added later is null in earlier records, a widened one
    converted."""
    log = open_log(log_dir)
    old = pa.schema([("n", pa.int32())])
    with Capture(log, "e", 0, 1, schema=old) as cap:
        cap.send(0, [{"n": 1}])
        cap.advance_to(1)
        cap.abort()
    new = pa.schema([("n", pa.int64()), ("tag", pa.string())])
    with Capture(log, "e", 0, 1, schema=new) as cap:
        cap.send(1, [{"n": 2**40, "tag": "x"}])
    df = spark.read.format("eventlog").load(f"{log_dir}/e")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields][:2] == [("n", "bigint"), ("tag", "string")]
    assert sorted((r["_time"], r["n"], r["tag"]) for r in df.collect()) == [(0, 1, None), (1, 2**40, "x")]
    got: list = []
    q = (spark.readStream.format("eventlog").load(f"{log_dir}/e").writeStream
         .foreachBatch(lambda b, _: got.extend((r["_time"], r["n"], r["tag"]) for r in b.collect()))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    assert sorted(got) == [(0, 1, None), (1, 2**40, "x")]


def test_a_streaming_tap_whose_output_gains_a_column_goes_on(spark, log_dir):
    """Issue 32 §3: the day the job's output gains a column, ``tap_batches`` (the streaming sink) records the new
    schema and goes on instead of refusing it; readers read the earlier batches with the column null."""
    from capture import tap_batches

    append = tap_batches(log_dir, "grows")
    append(spark.range(0, 3).toDF("n"), 0)
    append(spark.createDataFrame([(3, "new")], "n BIGINT, note STRING"), 1)
    rows = spark.read.format("eventlog").load(f"{log_dir}/grows").select("_time", "n", "note").collect()
    assert sorted((r["_time"], r["n"], r["note"]) for r in rows) == [(0, 0, None), (0, 1, None), (0, 2, None),
                                                                     (1, 3, "new")]
    with pytest.raises(Exception, match="changes type"):
        append(spark.createDataFrame([("x",)], "n STRING"), 2)
