"""The JVM-side Spark tap (``connectors/spark/jvm``): what it writes is what the Python tap writes — logs that
``replay verify`` and ``check_part`` pass, the same records per part and time, sealed Arrow IPC files whose
footer lists exactly the events — with the same guarantees (retried tasks, second evaluations and partial
reads leave no duplicates), and it refuses, having written nothing, what it cannot do (``JvmTapUnavailable``),
so that the caller can fall back to the Python tap.

Skipped only where no JDK (``javac``) is installed: the JVM tap is built on first use and cannot run there."""

from __future__ import annotations

import json
import os
import zlib
from collections import Counter, defaultdict

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from click.testing import CliRunner

from capture import tap
from connectors.spark import StreamExistsError
from connectors.spark import jvm as jvm_mod
from connectors.spark.jvm import JvmTapUnavailable, jvm_tap
from eventlog import open_log
from eventlog.encoding.arrow_file import ArrowFileCodec
from eventlog.encoding.ipc_file import footer_blocks, trailer_length
from eventlog.events import Messages, Progress
from replay.cli import main as replay_main

from .conftest import by_time

pytestmark = pytest.mark.spark

COLS = ["id", "word", "t"]


def words(spark, n: int, partitions: int):
    return spark.range(0, n, 1, partitions).selectExpr(
        "id", "concat('w', cast(id % 7 as string)) as word", "id % 4 as t")


def _hashable(v):
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, float) and v != v:
        return "NaN"  # NaN != NaN: compare it by name
    return v


def captured(log_dir: str, stream: str) -> dict:
    """``{(part, time): Counter(records)}`` of a stream, after checking each part's files and that it is
    Messages events followed by the one Progress that finishes it."""
    log = open_log(log_dir)
    header = log.header(stream)
    out: dict = defaultdict(Counter)
    for p in range(header.peers):
        assert log.check_part(stream, p) == []
        with log.reader(stream, p) as reader:
            events = [e.event for e in reader]
        assert isinstance(events[-1], Progress)
        assert events[-1].updates == ((header.time_type.minimum, -1),)
        assert all(isinstance(e, Messages) for e in events[:-1])
        for e in events[:-1]:
            assert e.records.schema.equals(header.schema)
            for row in e.records.to_pylist():
                out[(p, e.time)][_hashable(row)] += 1
    return dict(out)


def verify(log_dir: str) -> None:
    result = CliRunner().invoke(replay_main, ["verify", log_dir])
    assert result.exit_code == 0, result.output


def no_staging(log_dir: str) -> None:
    assert not os.path.exists(os.path.join(log_dir, ".staging"))


# -- the same log as the Python tap ------------------------------------------------------------------


@pytest.mark.parametrize("time", [None, 5, "t"], ids=["default", "literal", "column"])
def test_jvm_tap_captures_what_the_python_tap_captures(spark, jvm, log_dir, time):
    df = words(spark, 900, 3)
    expected = sorted(df.collect())
    tapped = jvm_tap(df, log_dir, "jvm", time=time)
    assert tapped.schema == df.schema
    assert sorted(tapped.collect()) == expected
    tap(df, log_dir, "py", time=time, engine="python").count()
    verify(log_dir)
    got = captured(log_dir, "jvm")
    assert got == captured(log_dir, "py")
    assert sum(sum(c.values()) for c in got.values()) == 900
    log = open_log(log_dir)
    assert log.header("jvm").peers == 3 and log.header("jvm").schema.equals(log.header("py").schema)
    assert log.header("jvm").time_type == log.header("py").time_type
    replayed = spark.read.format("eventlog").load(f"{log_dir}/jvm")
    assert by_time(replayed.collect(), "_time", COLS) == by_time(
        spark.read.format("eventlog").load(f"{log_dir}/py").collect(), "_time", COLS)
    no_staging(log_dir)


@pytest.mark.parametrize("literal", [False, True], ids=["column", "literal"])
def test_product_times(spark, jvm, log_dir, literal):
    df = spark.range(0, 120, 1, 2).selectExpr("id", "array(id % 2, id % 3) as epoch",
                                             "array(cast(id % 2 as int), 1) as small")
    if literal:
        kw = {"time": (3, 4)}
    else:
        kw = {"time": "epoch", "time_type": "product:2"}
    jvm_tap(df, log_dir, "jvm", **kw).count()
    tap(df, log_dir, "py", engine="python", **kw).count()
    verify(log_dir)
    got = captured(log_dir, "jvm")
    assert got == captured(log_dir, "py")
    if not literal:
        assert {t for _, t in got} == {(a, b) for a in range(2) for b in range(3)}
        jvm_tap(df, log_dir, "small", time="small", time_type="product:2").count()  # an array<int> time column
        assert {t for _, t in captured(log_dir, "small")} == {(0, 1), (1, 1)}


def test_every_column_type(spark, jvm, log_dir):
    exprs = {
        "b": "cast(id % 100 as tinyint)", "s": "cast(id as smallint)", "i": "cast(id as int)", "l": "id",
        "f": "cast(id / 3 as float)", "d": "if(id = 3, double('NaN'), id / 7)", "dec": "cast(id / 3 as decimal(12, 4))",
        "dec38": "cast(id as decimal(38, 0)) * 1000000000000000000", "str": "if(id % 5 = 0, null, concat('é', id))",
        "bin": "cast(concat('x', id) as binary)", "bool": "if(id % 3 = 0, null, id % 2 = 0)",
        "date": "date_add(date'1960-01-01', cast(id * 100 as int))", "ts": "timestamp_seconds(id * 100000 - 5000)",
        "ntz": "cast(timestamp_seconds(id) as timestamp_ntz)", "arr": "array(id, null, id + 1)",
        "arrs": "if(id % 4 = 0, null, array(cast(id as string), 'a'))",
        "st": "named_struct('a', id, 'b', cast(id as string), 'c', array(1.5d))",
        "m": "map(cast(id as string), cast(id as int))", "nul": "null", "dti": "make_dt_interval(1, 2, 3, id)",
        "var": "parse_json(concat('{\"a\": ', id, '}'))", "arrst": "array(named_struct('x', id), null)",
        "mm": "map(1, map('a', array(id)))", "empty": "cast(array() as array<int>)",
        "big": "repeat('x', cast(id * 37 as int))",
    }
    df = spark.range(0, 200, 1, 2).selectExpr("id", *[f"{e} as {n}" for n, e in exprs.items()])
    jvm_tap(df, log_dir, "jvm").count()
    tap(df, log_dir, "py", engine="python").count()
    verify(log_dir)
    got = captured(log_dir, "jvm")
    assert got == captured(log_dir, "py")
    assert sum(sum(c.values()) for c in got.values()) == 200


FLAT = {  # every column type the tap's own row writer writes, each with nulls at its own rows
    "b": "if(id % 11 = 0, null, cast(id % 100 - 50 as tinyint))",
    "s": "if(id % 13 = 1, null, cast(id % 30000 - 15000 as smallint))",
    "i": "if(id % 17 = 2, null, cast(id * 7919 as int))", "l": "if(id % 19 = 3, null, id * -104729)",
    "f": "if(id % 23 = 4, null, if(id % 29 = 0, float('NaN'), cast(id / 3 as float)))",
    "d": "if(id % 31 = 5, null, if(id % 37 = 0, double('-Infinity'), id / 7))",
    "bool": "if(id % 41 = 6, null, id % 3 = 0)",
    "date": "if(id % 43 = 7, null, date_add(date'1960-01-01', cast(id as int)))",
    "ts": "if(id % 47 = 8, null, timestamp_micros(id * 1000003 - 50000000))",
    "ntz": "if(id % 53 = 9, null, cast(timestamp_seconds(id) as timestamp_ntz))",
    "str": "if(id % 59 = 10, null, if(id % 61 = 0, '', repeat(concat('é', cast(id as string)), cast(id % 9 as int))))",
    "long_str": "if(id % 67 = 11, null, repeat('z', cast(id % 5000 as int)))",
    "bin": "if(id % 71 = 12, null, cast(repeat(cast(id as string), cast(id % 4 as int)) as binary))",
}


def test_flat_columns_with_nulls_over_many_rows(spark, jvm, log_dir):
    """The tap writes flat columns itself (not through Spark's ArrowWriter): nulls in every type, values
    that outgrow each vector's first allocation (20,000 rows in one partition, strings of up to 5,000
    bytes) and buffers reused event after event give the Python tap's records."""
    df = spark.range(0, 20000, 1, 1).selectExpr("id", "id % 3 as t", *[f"{e} as {n}" for n, e in FLAT.items()])
    jvm_tap(df, log_dir, "jvm", time="t").count()
    tap(df, log_dir, "py", time="t", engine="python").count()
    verify(log_dir)
    got = captured(log_dir, "jvm")
    assert got == captured(log_dir, "py")
    assert sum(sum(c.values()) for c in got.values()) == 20000
    nulls = Counter(k for c in got.values() for row in c for k, v in dict(row).items() if v is None)
    assert set(nulls) == set(FLAT)  # every column has nulls
    assert open_log(log_dir).part_stats("jvm", 0).next_seq > 4  # several events a time: buffers reused


def test_bitmaps_end_in_zero_bits_when_buffers_are_reused(spark, jvm, log_dir, monkeypatch):
    """The tap reuses its vectors event after event without zeroing them: each row sets its own bits, and the
    bits after an event's last row are cleared. An event of 36 rows after one of 64 all-valid, all-true rows
    has the values written and zero bits after its last row in every validity and boolean bitmap, as a
    zeroed buffer has (the bytes do not depend on earlier events)."""
    monkeypatch.setattr(jvm_mod, "EVENT_ROWS", 64)
    df = spark.range(0, 100, 1, 1).selectExpr(
        "id", "if(id >= 64 and id % 5 = 0, null, id) as n", "if(id >= 64, id % 2 = 0, true) as b",
        "if(id >= 64 and id % 3 = 0, null, 'x') as s", "if(id >= 64 and id % 4 = 0, null, id % 2 = 1) as nb")
    jvm_tap(df, log_dir, "jvm").count()
    with open(os.path.join(log_dir, "jvm", "part=0", "00000000000000000001.arrow"), "rb") as f:
        reader = ipc.open_file(pa.py_buffer(f.read()))
    batches = [reader.get_batch(i) for i in range(reader.num_record_batches - 1)]
    assert [b.num_rows for b in batches] == [64, 36]
    rows = [r for b in batches for r in b.select(["id", "n", "b", "s", "nb"]).to_pylist()]
    assert rows == [{"id": i, "n": None if i >= 64 and i % 5 == 0 else i, "b": i % 2 == 0 if i >= 64 else True,
                     "s": None if i >= 64 and i % 3 == 0 else "x",
                     "nb": None if i >= 64 and i % 4 == 0 else i % 2 == 1} for i in range(100)]
    last = batches[1]
    bitmaps = []
    for name in ("n", "b", "s", "nb"):
        bufs = last.column(name).buffers()
        if bufs[0] is not None:
            bitmaps.append(bufs[0])
        if pa.types.is_boolean(last.column(name).type):
            bitmaps.append(bufs[1])
    assert len(bitmaps) == 5  # n, s, nb have nulls; b and nb their values
    for bits in bitmaps:
        assert len(bits) >= 5 and bits.to_pybytes()[4] >> 4 == 0  # rows 36..39 of the last byte


def test_rows_that_are_not_unsafe_rows(spark, jvm, log_dir):
    """Spark's plans hand the tap UnsafeRows, whose string and binary values the tap copies from where the
    row keeps them; any other InternalRow is read through its getters. The tap's task function run on the
    driver over GenericInternalRows (the plan's rows through a SafeProjection) captures what the Python tap
    captures."""
    df = spark.range(0, 1500, 1, 1).selectExpr("id", "id % 3 as t", *[f"{e} as {n}" for n, e in FLAT.items()])
    jtap, _, spec = jvm_mod._plan_tap(df, log_dir, "jvm", time="t", time_type=None, encoding="arrow",
                                      replace=False)
    j = spark.sparkContext._jvm
    qe = df._jdf.queryExecution()
    to_safe = j.org.apache.spark.sql.catalyst.expressions.SafeProjection.create(qe.analyzed().schema())
    rows = j.java.util.ArrayList()
    for row in qe.executedPlan().executeCollect():
        rows.add(to_safe.apply(row).copy())
    assert rows.get(0).getClass().getSimpleName() == "GenericInternalRow"
    scala_rows = j.scala.jdk.javaapi.CollectionConverters.asScala(rows.iterator())
    out = j.eventlog.spark.PartTap(spec, qe.analyzed().schema()).apply(0, scala_rows)
    assert out.next().getClass().getSimpleName() == "UnsafeRow"  # handed on as UnsafeRows (TapScanExec)
    assert out.size() == 1499
    tap(df, log_dir, "py", time="t", engine="python").count()
    verify(log_dir)
    assert captured(log_dir, "jvm") == captured(log_dir, "py")


def test_tapped_frame_is_scanned_without_a_copy_and_feeds_every_operator(spark, jvm, log_dir):
    """The tapped DataFrame's scan is the tap's own (``EventlogTapScan``: the rows handed on, not copied into
    new UnsafeRows as Spark's RDD scan does); operators that keep rows (sort, join, window, distinct, cache)
    get the rows the untapped DataFrame gives them, and a second action captures nothing more."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    df = words(spark, 3000, 3)
    tapped = jvm_tap(df, log_dir, "jvm", time="t")
    plan = tapped._jdf.queryExecution().executedPlan().toString()
    assert "EventlogTapScan" in plan and "ExistingRDD" not in plan

    def results(frame) -> list:
        w = Window.partitionBy("t").orderBy("id")
        return [
            [tuple(r) for r in frame.orderBy(F.desc("word"), "id").collect()],
            sorted(tuple(r) for r in frame.alias("a").join(frame.alias("b"), ["id"]).collect()),
            sorted(tuple(r) for r in frame.withColumn("n", F.row_number().over(w)).collect()),
            sorted(tuple(r) for r in frame.select("word", "t").distinct().collect()),
        ]

    assert results(tapped) == results(df)
    cached = tapped.cache()
    assert cached.count() == 3000 and sorted(cached.collect()) == sorted(df.collect())
    cached.unpersist()
    assert sum(sum(c.values()) for c in captured(log_dir, "jvm").values()) == 3000


def test_many_events_and_segments(spark, jvm, log_dir, monkeypatch):
    """Small events and segments: many Messages per time, rotation seals each segment with its footer."""
    monkeypatch.setattr(jvm_mod, "EVENT_ROWS", 7)
    monkeypatch.setattr(jvm_mod, "SEGMENT_BYTES", 4096)
    df = words(spark, 2000, 2)
    jvm_tap(df, log_dir, "jvm", time="t").count()
    tap(df, log_dir, "py", time="t", engine="python").count()
    verify(log_dir)
    assert captured(log_dir, "jvm") == captured(log_dir, "py")
    log = open_log(log_dir)
    for p in range(2):
        assert len(log.segments("jvm", p)) > 3
        assert log.part_stats("jvm", p).next_seq > 1000 // 7


def test_rows_over_one_events_limits_become_several_events(spark, jvm, log_dir):
    """9000 rows of 2000 booleans are 18M values, over one event's MAX_EVENT_VALUES (2^24) though far under
    its byte budget: the tap writes them as several events rather than fail."""
    df = spark.range(0, 9000, 1, 1).selectExpr("id", "array_repeat(id % 2 = 0, 2000) as flags")
    assert jvm_tap(df, log_dir, "jvm").count() == 9000
    verify(log_dir)
    got = captured(log_dir, "jvm")
    assert sum(sum(c.values()) for c in got.values()) == 9000
    assert open_log(log_dir).part_stats("jvm", 0).next_seq >= 4  # at least two Messages, then the Progress


def test_many_distinct_times(spark, jvm, log_dir):
    """More distinct times than the tap buffers at once: each is flushed, records stay with their time."""
    df = spark.range(0, 3000, 1, 2).selectExpr("id", "id % 500 as t", "cast(id as string) as s")
    jvm_tap(df, log_dir, "jvm", time="t").count()
    tap(df, log_dir, "py", time="t", engine="python").count()
    verify(log_dir)
    assert captured(log_dir, "jvm") == captured(log_dir, "py")


def test_many_small_partitions(spark, jvm, log_dir):
    """Attempts that finish remove the staging folders they leave empty, and sweep those of published
    partitions, while others create theirs below them: every part is still staged and published whole (the
    benchmark met the first race with 4 partitions; CI met a sweep that removed the whole job folder after
    listing it, with a new attempt's files in it, which published an index without its segment)."""
    for i in range(3):
        df = spark.range(0, 640, 1, 64)
        assert jvm_tap(df, log_dir, f"small{i}").count() == 640
        assert sum(sum(c.values()) for c in captured(log_dir, f"small{i}").values()) == 640
    verify(log_dir)
    no_staging(log_dir)


def test_empty_partitions_are_finished_parts(spark, jvm, log_dir):
    df = spark.range(0, 10, 1, 3).where("id < 3")  # partitions 1 and 2 hold nothing
    assert jvm_tap(df, log_dir, "jvm").count() == 3
    verify(log_dir)
    log = open_log(log_dir)
    assert [log.part_stats("jvm", p).next_seq for p in range(3)] == [3, 2, 2]


def test_tap_after_adaptive_shuffle(spark, jvm, log_dir):
    counts = words(spark, 2000, 3).groupBy("word").count()
    expected = sorted(counts.collect())
    tapped = jvm_tap(counts, log_dir, "counts")
    assert sorted(tapped.collect()) == expected
    assert open_log(log_dir).header("counts").peers == tapped.rdd.getNumPartitions()
    replayed = spark.read.format("eventlog").load(f"{log_dir}/counts").drop("_time", "_part", "_seq")
    assert sorted(replayed.collect()) == expected
    verify(log_dir)


# -- the golden check: a JVM segment is an Arrow IPC file as §3.4/§4.1 say ---------------------------------


def test_segment_is_the_arrow_ipc_file_of_the_format(spark, jvm, log_dir, monkeypatch):
    monkeypatch.setattr(jvm_mod, "EVENT_ROWS", 40)
    df = words(spark, 100, 1)
    jvm_tap(df, log_dir, "jvm", time="t").count()
    log = open_log(log_dir)
    header = log.header("jvm")
    codec = ArrowFileCodec(header)
    part = os.path.join(log_dir, "jvm", "part=0")
    assert sorted(os.listdir(part)) == [".lock", "00000000000000000001.arrow", "_00000000000000000001.index"]
    with open(os.path.join(part, "00000000000000000001.arrow"), "rb") as f:
        data = f.read()
    with open(os.path.join(part, "_00000000000000000001.index"), "rb") as f:
        index = f.read()
    # the index (§3.2): header, one checksummed entry per event, offsets chained from the prefix's end
    assert index[:16] == b"ELIX" + (1).to_bytes(2, "little") + (0).to_bytes(2, "little") + (1).to_bytes(8, "little")
    entries = [index[i:i + 32] for i in range(16, len(index), 32)]
    assert len(index) == 16 + 32 * len(entries)
    prefix_len = 8 + 8 + int.from_bytes(data[12:16], "little")
    assert data[:8] == b"ARROW1\0\0"
    offset = prefix_len
    for i, e in enumerate(entries):
        seq, off, length, crc, kind = (int.from_bytes(e[0:8], "little"), int.from_bytes(e[8:16], "little"),
                                       int.from_bytes(e[16:20], "little"), int.from_bytes(e[20:24], "little"), e[24])
        assert (seq, off) == (i + 1, offset)
        assert crc == zlib.crc32(data[off:off + length])
        assert e[25:28] == b"\0\0\0" and int.from_bytes(e[28:32], "little") == zlib.crc32(e[:28])
        assert kind == (2 if i == len(entries) - 1 else 1)
        offset += length
    # the suffix: end-of-stream marker, then a footer listing exactly the events
    assert data[offset:offset + 8] == b"\xff\xff\xff\xff\0\0\0\0"
    n = trailer_length(data[-10:], len(data))
    assert n is not None and offset + 8 + n == len(data)
    blocks = footer_blocks(data[offset + 8:len(data) - 10])
    assert [(b.offset, b.meta_length + b.body_length) for b in blocks] == [
        (int.from_bytes(e[8:16], "little"), int.from_bytes(e[16:20], "little")) for e in entries]
    # any Arrow reader opens it by its footer: the segment schema with the writer mark, the events in order
    reader = ipc.open_file(pa.py_buffer(data))
    assert reader.num_record_batches == len(entries)
    assert reader.schema.equals(codec.schema)
    meta = reader.schema.metadata
    assert meta[b"eventlog.epoch"] == b"1" and len(meta[b"eventlog.writer"]) == 16
    rows = 0
    for i in range(reader.num_record_batches):
        batch, custom = reader.get_batch_with_custom_metadata(i)
        assert custom[b"eventlog.seq"] == str(i + 1).encode()
        assert int(custom[b"eventlog.ts"]) > 1_600_000_000_000
        if i == reader.num_record_batches - 1:
            assert custom[b"eventlog.kind"] == b"progress" and batch.num_rows == 0
            assert json.loads(custom[b"eventlog.updates"]) == [[0, -1]]
        else:
            assert custom[b"eventlog.kind"] == b"messages" and 0 < batch.num_rows <= 40
            t = json.loads(custom[b"eventlog.time"])
            assert set(batch.column("_time").to_pylist()) == {t}
            assert set(batch.column("_seq").to_pylist()) == {i + 1}
            assert set(batch.column("t").to_pylist()) == {t}
            rows += batch.num_rows
    assert rows == 100
    # and the dataset view of §3.4 sees the records with their part
    import pyarrow.dataset as ds

    table = ds.dataset(os.path.join(log_dir, "jvm"), format="arrow", partitioning="hive").to_table()
    assert table.num_rows == 100 and set(table.column("part").to_pylist()) == {0}


# -- retries, second evaluations, partial reads --------------------------------------------------------


def _fail_first_attempt(x):
    from pyspark import TaskContext

    if TaskContext.get().attemptNumber() == 0 and x % 1000 == 700:
        raise RuntimeError("first attempt fails on purpose")
    return x


def test_retried_task_leaves_no_duplicates(spark, jvm, log_dir, monkeypatch):
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    monkeypatch.setattr(jvm_mod, "EVENT_ROWS", 50)  # the failing attempts have staged events already

    fail = F.udf(_fail_first_attempt, LongType())
    df = spark.range(0, 3000, 1, 3).select(fail("id").alias("id"), (F.col("id") % 4).alias("t"))
    tapped = jvm_tap(df, log_dir, "jvm", time="t")
    assert sorted(r.id for r in tapped.collect()) == list(range(3000))
    verify(log_dir)
    got = captured(log_dir, "jvm")
    assert sum(sum(c.values()) for c in got.values()) == 3000
    assert all(n == 1 for c in got.values() for n in c.values())
    no_staging(log_dir)


def test_an_attempt_that_finds_its_part_taken_at_publish_keeps_nothing(spark, jvm, log_dir):
    """The rename that publishes a part fails when the part's folder is there and not empty: the attempt lost
    the race to another one (a speculative task) and drops its staging, leaving the winner's files alone."""
    df = words(spark, 300, 3)
    tapped = jvm_tap(df, log_dir, "words")
    winner = os.path.join(log_dir, "words", "part=1")
    os.makedirs(winner)
    with open(os.path.join(winner, "other-attempt"), "w") as f:  # no segment: the task does not skip the part
        f.write("x")
    assert tapped.count() == 300
    assert os.listdir(winner) == ["other-attempt"]
    log = open_log(log_dir)
    assert [log.part_stats("words", p).next_seq > 1 for p in (0, 2)] == [True, True]
    no_staging(log_dir)


def _driver_tap(spark, df, log_dir, stream):
    """``(run, job_dir)``: ``run(part)`` starts the tap's task function on the driver over all of ``df``'s rows
    as partition ``part`` (an iterator to read at will, as a task attempt would); ``job_dir()`` is the job's
    staging folder."""
    _, _, spec = jvm_mod._plan_tap(df, log_dir, stream, time="t", time_type=None, encoding="arrow",
                                   replace=False)
    j = spark.sparkContext._jvm
    qe = df._jdf.queryExecution()
    rows = j.java.util.ArrayList()
    for row in qe.executedPlan().executeCollect():
        rows.add(row)
    task = j.eventlog.spark.PartTap(spec, qe.analyzed().schema())

    def run(part: int):
        return task.apply(part, j.scala.jdk.javaapi.CollectionConverters.asScala(rows.iterator()))

    def job_dir() -> str:
        top = os.path.join(log_dir, ".staging", stream)
        (job,) = os.listdir(top)
        return os.path.join(top, job)

    return run, job_dir


def _dead_attempt(job_dir: str, name: str) -> None:
    """What an attempt whose executor died mid-partition leaves: its staging folder, with a segment begun."""
    os.makedirs(os.path.join(job_dir, name, "s", "part=0"))
    with open(os.path.join(job_dir, name, "s", "part=0", "_00000000000000000001.arrow.open"), "wb") as f:
        f.write(b"ARROW1\0\0")


def test_the_sweep_removes_each_folder_of_a_published_partition_and_leaves_the_others(spark, jvm, log_dir,
                                                                                   monkeypatch):
    """An attempt that publishes removes the staging that attempts of published partitions left (a dead
    executor's), folder by folder; the folders of a partition not yet published stay, the dead one's and the
    running attempt's, which then publishes its whole partition."""
    monkeypatch.setattr(jvm_mod, "EVENT_ROWS", 100)  # the running attempt has written events when the sweep runs
    df = spark.range(0, 1000, 1, 2).selectExpr("id", "id % 3 as t")
    run, job_dir = _driver_tap(spark, df, log_dir, "s")
    live = run(1)
    for _ in range(500):
        live.next()
    job = job_dir()
    (live_name,) = os.listdir(job)
    for name in ("0-0-dead", "1-0-dead"):
        _dead_attempt(job, name)
    assert run(0).size() == 1000  # publishes partition 0, then sweeps
    assert sorted(os.listdir(job)) == sorted(["1-0-dead", live_name])
    assert live.size() == 500  # the rest: publishes partition 1, then sweeps the dead attempt's folder
    no_staging(log_dir)
    got = captured(log_dir, "s")
    assert [sum(sum(c.values()) for (p, _), c in got.items() if p == part) for part in (0, 1)] == [1000, 1000]
    verify(log_dir)


def test_an_attempt_whose_staging_is_swept_passes_its_rows_and_keeps_nothing(spark, jvm, log_dir, monkeypatch):
    """Attempt A stages part of its partition; attempt B (speculative, or a second action) publishes the whole
    partition and sweeps A's folder with the others of published partitions; A goes on: every row passes,
    no error, nothing of it in the log or the staging area."""
    monkeypatch.setattr(jvm_mod, "EVENT_ROWS", 100)
    df = spark.range(0, 1000, 1, 1).selectExpr("id", "id % 3 as t")
    run, _ = _driver_tap(spark, df, log_dir, "s")
    slow = run(0)
    for _ in range(450):
        slow.next()
    assert run(0).size() == 1000
    assert not os.path.exists(os.path.join(log_dir, ".staging"))  # A's folder went with the sweep
    assert slow.size() == 550
    no_staging(log_dir)
    got = captured(log_dir, "s")
    assert sum(sum(c.values()) for c in got.values()) == 1000
    assert all(n == 1 for c in got.values() for n in c.values())


def test_second_evaluation_and_partial_reads_publish_nothing_more(spark, jvm, log_dir):
    tapped = jvm_tap(words(spark, 300, 3), log_dir, "words", time="t")
    assert len(tapped.take(2)) == 2  # reads part of one partition: discarded, not published
    assert tapped.count() == 300
    assert tapped.count() == 300  # evaluated again: the parts exist, nothing is captured twice
    log = open_log(log_dir)
    assert [log.part_stats("words", p).next_seq > 1 for p in range(3)] == [True] * 3
    assert spark.read.format("eventlog").load(f"{log_dir}/words").count() == 300
    verify(log_dir)
    no_staging(log_dir)


def test_existing_stream_is_refused_unless_replaced(spark, jvm, log_dir):
    jvm_tap(words(spark, 10, 1), log_dir, "words").count()
    with pytest.raises(StreamExistsError):
        jvm_tap(words(spark, 10, 1), log_dir, "words")
    jvm_tap(words(spark, 20, 2), log_dir, "words", replace=True).count()
    assert spark.read.format("eventlog").load(f"{log_dir}/words").count() == 20


def test_bad_times_fail_the_job(spark, jvm, log_dir):
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    for i, expr in enumerate(["if(id = 5, -1, id)", "if(id = 5, null, id)"]):
        df = spark.range(0, 10, 1, 1).selectExpr("id", f"{expr} as t")
        with pytest.raises((Py4JJavaError, PySparkException)) as got:
            jvm_tap(df, log_dir, f"bad{i}", time="t").count()
        assert "time column 't'" in str(got.value)
        assert open_log(log_dir).part_stats(f"bad{i}", 0).next_seq == 1  # nothing published
    no_staging(log_dir)


# -- what it refuses, having written nothing -------------------------------------------------------------


def _nothing_written(log_dir: str) -> None:
    assert not os.path.exists(log_dir) or os.listdir(log_dir) == []


def test_unsupported_cases_raise_the_typed_error(spark, jvm, log_dir, monkeypatch):
    df = words(spark, 10, 1)
    with pytest.raises(JvmTapUnavailable, match="arrow encoding"):
        jvm_tap(df, log_dir, "s", encoding="avro")
    with pytest.raises(JvmTapUnavailable, match="local file logs and file logs on S3, not kafka://"):
        jvm_tap(df, "kafka://127.0.0.1:9/logs", "s")
    monkeypatch.setenv("EVENTLOG_FILE_FORMAT", "1.2")
    with pytest.raises(JvmTapUnavailable, match="format 2"):
        jvm_tap(df, log_dir, "s")
    monkeypatch.delenv("EVENTLOG_FILE_FORMAT")
    _nothing_written(log_dir)
    # a column whose stored Arrow type Spark does not write into (the check behind "column type")
    schema = pa.schema([pa.field("id", pa.uint64()), pa.field("word", pa.string()), pa.field("t", pa.int64()),
                        pa.field("_time", pa.int64(), nullable=False), pa.field("_seq", pa.int64(), nullable=False)])
    why = jvm.unsupported(bytearray(schema.serialize().to_pybytes()), df._jdf.schema())
    assert why is not None
    ok = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("word", pa.string()),
                    pa.field("t", pa.int64(), nullable=False), pa.field("_time", pa.int64(), nullable=False),
                    pa.field("_seq", pa.int64(), nullable=False)])
    assert jvm.unsupported(bytearray(ok.serialize().to_pybytes()), df._jdf.schema()) is None


def test_unknown_spark_version_falls_back_cleanly(spark, jvm, log_dir, monkeypatch):
    monkeypatch.setattr(jvm_mod, "SUPPORTED_SPARK", ("3.5",))
    df = words(spark, 100, 2)
    with pytest.raises(JvmTapUnavailable, match="not supported by the JVM tap"):
        jvm_tap(df, log_dir, "words", time="t")
    _nothing_written(log_dir)
    with pytest.raises(JvmTapUnavailable):
        jvm_mod.check_spark_version("5.0.0")
    assert jvm_mod.available(spark) is not None
    # what a caller does: fall back to the Python tap, which captures the stream
    try:
        tapped = jvm_tap(df, log_dir, "words", time="t")
    except JvmTapUnavailable:
        tapped = tap(df, log_dir, "words", time="t", engine="python")
    assert tapped.count() == 100
    verify(log_dir)


def test_missing_jdk_falls_back_cleanly(spark, jvm, log_dir, tmp_path, monkeypatch):
    missing = str(tmp_path / "no-jdk" / "javac")
    with pytest.raises(JvmTapUnavailable, match="not an executable Java compiler"):
        jvm_mod.jar_path(javac=missing, cache=str(tmp_path / "cache"))
    monkeypatch.setenv("EVENTLOG_JAVAC", missing)
    with pytest.raises(JvmTapUnavailable):
        jvm_mod.find_javac()
    monkeypatch.setenv("EVENTLOG_JVM_CACHE", str(tmp_path / "cache"))  # nothing built there: it must compile
    monkeypatch.setattr(jvm_mod, "LIB", str(tmp_path / "lib"))           # and no prebuilt jar to take instead
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(JvmTapUnavailable, match="Java compiler"):
        jvm_tap(words(spark, 10, 1), log_dir, "words")
    _nothing_written(log_dir)
    assert not any(n.endswith(".jar") for _, _, ns in os.walk(tmp_path / "cache") for n in ns)


def test_jar_is_built_outside_the_repository_and_reused(jvm):
    jar = jvm_mod.jar_path()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert not os.path.abspath(jar).startswith(root + os.sep)
    assert os.path.basename(os.path.dirname(jar)).endswith(jvm_mod.source_hash())
    assert jvm_mod.jar_path() == jar
    assert jvm.build() == jvm_mod.source_hash()


# -- tap(engine=...): how users reach the JVM tap --------------------------------------------------------


def _plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def test_tap_engine_jvm_runs_in_the_jvm_and_captures_what_the_python_engine_does(spark, jvm, log_dir, monkeypatch):
    src = words(spark, 3000, 3)
    py = tap(src, f"{log_dir}/py", "w", time="t", engine="python")
    assert "MapInArrow" in _plan(py) or "PythonMapInArrow" in _plan(py)
    py.count()
    jv = tap(src, f"{log_dir}/jvm", "w", time="t", engine="jvm")
    assert "MapInArrow" not in _plan(jv)  # no Python worker on the row path
    jv.count()
    assert captured(f"{log_dir}/jvm", "w") == captured(f"{log_dir}/py", "w")
    verify(f"{log_dir}/jvm")
    monkeypatch.setenv("EVENTLOG_TAP_ENGINE", "jvm")  # the environment chooses when the call does not
    env = tap(src, f"{log_dir}/env", "w", time="t")
    assert "MapInArrow" not in _plan(env)
    env.count()
    assert captured(f"{log_dir}/env", "w") == captured(f"{log_dir}/py", "w")


def test_tap_engine_auto_falls_back_saying_why_once_and_jvm_refuses(spark, jvm, log_dir, caplog):
    import importlib
    import logging

    importlib.import_module("capture.tap")._said.clear()
    src = words(spark, 200, 2)
    with caplog.at_level(logging.WARNING, logger="eventlog.tap"):
        for name in ("a", "b"):  # avro: the JVM tap does not write it
            out = tap(src, f"{log_dir}/auto", name, encoding="avro", engine="auto")
            assert "MapInArrow" in _plan(out)
            out.count()
    said = [r.getMessage() for r in caplog.records if r.name == "eventlog.tap"]
    assert len(said) == 1 and "JVM tap cannot run here" in said[0] and "avro" in said[0].lower(), said
    assert sum(len(v) for v in captured(f"{log_dir}/auto", "a").values()) == 200
    with pytest.raises(JvmTapUnavailable):
        tap(src, f"{log_dir}/refused", "c", encoding="avro", engine="jvm")
    with pytest.raises(ValueError, match="engine must be"):
        tap(src, f"{log_dir}/bad", "d", engine="scala")


@pytest.mark.parametrize("count", [1, 2, 3, 34, 35, 4096, 16383, 16384, 16385, 65536, 100_000, 1 << 20])
@pytest.mark.parametrize("value", [0, 7, -1, 2**63 - 1, 123456789012])
def test_constant_frames_are_the_python_writers(spark, jvm, count, value):
    """The tap writes ``_time`` and ``_seq`` as frames built directly: byte for byte the Python writer's
    (``zstd_frame.constant_int64_frame``), and zstd decodes them to ``count`` copies of the value (block
    boundaries at 16,384 values, a last block full or not)."""
    import zstandard

    from eventlog.encoding.zstd_frame import constant_int64_frame

    frame = bytes(spark.sparkContext._jvm.eventlog.spark.ConstantFrame.int64(value, count))
    assert frame == constant_int64_frame(value, count)
    assert zstandard.ZstdDecompressor().decompress(frame) == value.to_bytes(8, "little", signed=True) * count


# -- compression (FORMAT.md §13) -----------------------------------------------------------------------------


def _events(log_dir: str, stream: str) -> dict:
    """``{(part, kind, time): (codec or None, the buffers of _time and _seq)}`` of every event, read from the sealed
    segments by their footers (any Arrow reader's way)."""
    import struct

    from eventlog.encoding import ipc_build

    log = open_log(log_dir)
    out = {}
    for p in range(log.header(stream).peers):
        part = os.path.join(log_dir, stream, f"part={p}")
        for name in sorted(n for n in os.listdir(part) if n.endswith(".arrow")):
            with open(os.path.join(part, name), "rb") as f:
                data = f.read()
            n = trailer_length(data[-10:], len(data))
            schema_message = data[8:16 + int.from_bytes(data[12:16], "little")]
            for b in footer_blocks(data[len(data) - n:len(data) - 10]):
                message = data[b.offset:b.offset + b.meta_length + b.body_length]
                _, custom = ipc.open_stream(pa.py_buffer(schema_message + message)).read_next_batch_with_custom_metadata()
                parts = ipc_build.parse(message)
                buffers = [message[parts.body_start + o:parts.body_start + o + k]
                           for o, k in struct.iter_unpack("<qq", parts.buffers)]
                key = (p, custom[b"eventlog.kind"], custom.get(b"eventlog.time"))
                assert key not in out
                out[key] = (parts.codec if parts.compressed else None, buffers[-4:])
    return out


@pytest.mark.parametrize("compression", ["zstd", "none"])
def test_the_jvm_tap_writes_each_codec_it_offers_as_the_python_tap(spark, jvm, log_dir, compression):
    """The stream header records the choice; every Messages event is compressed with it (or not at all), and its
    ``_time`` and ``_seq`` buffers (zstd frames built directly, or the raw values) are the Python tap's byte for
    byte; the records are the same."""
    df = spark.range(0, 3000, 1, 2).selectExpr("id", "concat('w', cast(id % 7 as string)) as word", "id % 3 as t",
                                               "case when id % 5 = 0 then null else id * 0.5 end as half")
    jvm_tap(df, log_dir, "jvm", time="t", compression=compression).count()
    tap(df, log_dir, "py", time="t", compression=compression, engine="python").count()
    log = open_log(log_dir)
    assert log.header("jvm").compression == log.header("py").compression == compression
    assert captured(log_dir, "jvm") == captured(log_dir, "py")
    jvm_events, py_events = _events(log_dir, "jvm"), _events(log_dir, "py")
    assert jvm_events.keys() == py_events.keys() and len(jvm_events) == 2 * 4
    codec = {"zstd": 1, "none": None}[compression]
    for key, (got_codec, meta_buffers) in jvm_events.items():
        if key[1] == b"messages":
            assert got_codec == codec == py_events[key][0], key
            assert meta_buffers == py_events[key][1], key
    verify(log_dir)


def test_lz4_is_the_python_taps_and_the_jvm_tap_says_it_cannot(spark, jvm, log_dir, caplog):
    """pyarrow's LZ4 frames (linked 64 KiB blocks) are not what the LZ4 library Spark ships writes, so the JVM tap
    refuses lz4 before writing anything, and ``engine="auto"`` captures with the Python tap, saying why."""
    import importlib
    import logging

    df = words(spark, 500, 2)
    with pytest.raises(JvmTapUnavailable, match="lz4"):
        jvm_tap(df, log_dir, "jvm", time="t", compression="lz4")
    assert not os.path.exists(os.path.join(log_dir, "jvm"))
    importlib.import_module("capture.tap")._said.clear()
    with caplog.at_level(logging.WARNING, logger="eventlog.tap"):
        out = tap(df, log_dir, "auto", time="t", compression="lz4", engine="auto")
        assert "MapInArrow" in _plan(out)
        out.count()
    assert any("lz4" in r.getMessage() for r in caplog.records if r.name == "eventlog.tap")
    assert open_log(log_dir).header("auto").compression == "lz4"
    assert sum(sum(c.values()) for c in captured(log_dir, "auto").values()) == 500
    verify(log_dir)
