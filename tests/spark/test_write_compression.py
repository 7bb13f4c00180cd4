"""The Spark writers' compression choice (FORMAT.md §13): ``option("compression", …)`` of the data source (batch
writes, micro-batch appends) and ``tap(..., compression=)`` / ``tap_batches(..., compression=)`` record it in a new
stream's header and write every event with it; a bad value is refused before anything is written."""

from __future__ import annotations

import os

import pytest

from capture import tap, tap_batches
from connectors.spark.options import WriteOptions
from eventlog import open_log

pytestmark = pytest.mark.spark


def test_the_option_is_checked_against_the_encoding():
    opts = WriteOptions.parse({"path": "/tmp/x/s", "compression": "LZ4"})
    assert opts.compression == "lz4" and opts.encoding == "arrow"
    assert WriteOptions.parse({"path": "/tmp/x/s"}).compression is None
    assert WriteOptions.parse({"path": "/tmp/x/s", "encoding": "avro", "compression": "zstandard"}).compression == \
        "zstandard"
    with pytest.raises(ValueError, match="option 'compression' must be one of zstd, lz4, none"):
        WriteOptions.parse({"path": "/tmp/x/s", "compression": "snappy"})
    with pytest.raises(ValueError, match="deflate, zstandard, null for the avro encoding"):
        WriteOptions.parse({"path": "/tmp/x/s", "encoding": "avro", "compression": "lz4"})


def _rows(spark, n: int = 300):
    return spark.range(0, n, 1, 2).selectExpr("id", "concat('w', cast(id % 7 as string)) as word", "id % 3 as t")


@pytest.mark.parametrize("encoding,compression", [("arrow", "lz4"), ("arrow", "none"), ("avro", "zstandard")])
def test_batch_writes_and_taps_record_the_choice_and_read_back(spark, tmp_path, encoding, compression):
    log = str(tmp_path / "log")
    df = _rows(spark)
    want = sorted(tuple(r) for r in df.collect())
    df.write.format("eventlog").option("time", "t").option("encoding", encoding) \
        .option("compression", compression).mode("append").save(f"{log}/written")
    tap(df, log, "tapped", time="t", encoding=encoding, compression=compression, engine="python").count()
    for stream in ("written", "tapped"):
        assert open_log(log).header(stream).compression == compression
        back = spark.read.format("eventlog").load(f"{log}/{stream}").select("id", "word", "t")
        assert sorted(tuple(r) for r in back.collect()) == want
    assert not os.path.exists(os.path.join(log, "written-bad"))
    with pytest.raises(Exception, match="compression"):  # noqa: B017 - Spark wraps the ValueError
        df.write.format("eventlog").option("compression", "brotli").mode("append").save(f"{log}/written-bad")
    assert not os.path.exists(os.path.join(log, "written-bad"))


def test_micro_batches_keep_the_streams_compression(spark, tmp_path):
    log = str(tmp_path / "log")
    write = tap_batches(log, "batches", compression="lz4", engine="python")
    for batch_id in range(2):
        write(_rows(spark, 100 + batch_id), batch_id)
    assert open_log(log).header("batches").compression == "lz4"
    back = spark.read.format("eventlog").load(f"{log}/batches")
    assert back.count() == 201 and sorted({r["_time"] for r in back.collect()}) == [0, 1]
    later = tap_batches(log, "batches", engine="python")  # no choice: the stream's stays
    later(_rows(spark, 5), 2)
    assert open_log(log).header("batches").compression == "lz4"
    assert spark.read.format("eventlog").load(f"{log}/batches").count() == 206
