"""Writing back a frame read through the data source: ``spark.read.format("eventlog").load(a)`` gives the
stream's columns plus ``_time, _part, _seq``; ``df.write.format("eventlog").save(b)`` of that frame writes
each record at its ``_time`` and stores none of the three (they come back on read). Any other use of those
columns is a clear error. Batch writes, micro-batch appends (``batchId``) and the streaming sink alike."""

from __future__ import annotations

import pyarrow as pa
import pytest

from eventlog import open_log
from eventlog.errors import SchemaMismatchError
from replay import Replayer

from .conftest import by_time

pytestmark = pytest.mark.spark


def _source(spark, log_dir: str, stream: str = "src", parts: int = 3) -> None:
    df = spark.range(0, 60, 1, parts).selectExpr("id", "id % 4 as epoch", "concat('w', id % 7) as word")
    df.write.format("eventlog").option("time", "epoch").mode("append").save(f"{log_dir}/{stream}")


def _contents(log_dir: str, stream: str) -> dict:
    """``{time: sorted rows}`` of a stream, read with ``Replayer`` (no Spark in between)."""
    out: dict = {}
    with Replayer(open_log(log_dir), stream) as r:
        for t, table in r.completed():
            out.setdefault(t, []).extend(sorted(map(tuple, (row.values() for row in table.to_pylist()))))
    return {t: sorted(rows) for t, rows in out.items()}


def test_replayed_frame_writes_back_at_its_times(spark, log_dir):
    _source(spark, log_dir)
    df = spark.read.format("eventlog").option("workers", 2).load(f"{log_dir}/src")
    assert df.columns == ["id", "epoch", "word", "_time", "_part", "_seq"]
    df.write.format("eventlog").mode("append").save(f"{log_dir}/copy")

    header = open_log(log_dir).header("copy")
    assert header.schema.names == ["id", "epoch", "word"]  # _time, _part and _seq are not data
    assert header.peers == 2 and header.time_type.name == "int64"
    assert _contents(log_dir, "copy") == _contents(log_dir, "src")
    back = spark.read.format("eventlog").load(f"{log_dir}/copy")
    assert by_time(back.collect(), "_time", ["id", "word"]) == by_time(df.collect(), "_time", ["id", "word"])


def test_only_time_kept_and_explicit_time_option(spark, log_dir):
    _source(spark, log_dir)
    df = spark.read.format("eventlog").load(f"{log_dir}/src")
    # _part/_seq dropped by the user: _time alone is still the time; time="_time" says the same thing
    df.drop("_part", "_seq").where("_time < 2").write.format("eventlog").mode("append").save(f"{log_dir}/a")
    df.write.format("eventlog").option("time", "_time").mode("append").save(f"{log_dir}/b")
    assert set(_contents(log_dir, "a")) == {0, 1}
    assert _contents(log_dir, "b") == _contents(log_dir, "src")
    # dropping all three and naming another column is the way to other times
    df.drop("_time", "_part", "_seq").write.format("eventlog").option("time", 9).mode("append").save(f"{log_dir}/c")
    assert set(_contents(log_dir, "c")) == {9}


def test_conflicts_are_clear_errors(spark, log_dir):
    _source(spark, log_dir)
    df = spark.read.format("eventlog").load(f"{log_dir}/src")
    with pytest.raises(Exception, match=r"has _time .* and also option time='epoch': leave out the time option"):
        df.write.format("eventlog").option("time", "epoch").mode("append").save(f"{log_dir}/x")
    with pytest.raises(Exception, match=r"columns \['_part', '_seq'\] are the data source's own and there is no "
                                        r"_time"):
        df.drop("_time").write.format("eventlog").mode("append").save(f"{log_dir}/y")
    assert open_log(log_dir).streams() == ["src"]  # nothing was written


def test_conflict_error_is_typed(log_dir):
    """The same checks, called as Spark calls them on the driver, raise SchemaMismatchError naming the stream."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    from connectors.spark import EventlogDataSource

    schema = StructType([StructField("word", StringType()), StructField("_time", LongType()),
                         StructField("_part", IntegerType())])
    source = EventlogDataSource({"path": f"{log_dir}/z", "time": "3"})
    with pytest.raises(SchemaMismatchError) as e:
        source.writer(schema, False)
    assert e.value.stream == "z"
    opts, stored, time = EventlogDataSource({"path": f"{log_dir}/z"})._write_setup(schema)
    assert stored == pa.schema([("word", pa.string())]) and time.column == "_time"
    assert time.strip == ("_time", "_part")


def test_micro_batch_append_and_streaming_copy(spark, log_dir, tmp_path):
    _source(spark, log_dir)
    df = spark.read.format("eventlog").load(f"{log_dir}/src")
    df.where("_time = 0").write.format("eventlog").option("batchId", 0).mode("append").save(f"{log_dir}/mb")
    assert _contents(log_dir, "mb") == {0: _contents(log_dir, "src")[0]}
    assert open_log(log_dir).header("mb").schema.names == ["id", "epoch", "word"]

    query = (spark.readStream.format("eventlog").load(f"{log_dir}/src")
             .writeStream.format("eventlog").option("checkpointLocation", str(tmp_path / "ck"))
             .start(f"{log_dir}/streamed"))
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert _contents(log_dir, "streamed") == _contents(log_dir, "src")  # at the source's times, not batch ids
