"""The JVM batch reader (``connectors/spark/jvm/read.py``): for logs written by the Python writer and by the
JVM tap it gives exactly the Python reader's DataFrame (schema, rows, ``_time/_part/_seq``) — many column
types, product times, several parts and worker counts, incomplete times excluded (or included), void messages
of a crashed incarnation dropped — it fails on damaged segments with an error naming the file, never with
wrong rows, and it refuses what it does not read (``JvmReadUnavailable``) so ``engine="auto"`` falls back to
the Python reader, saying why once.

Skipped only where no JDK (``javac``) is installed."""

from __future__ import annotations

import datetime
import decimal
import logging
import os
import re
from collections import Counter

import pyarrow as pa
import pytest

from capture import Capture
from connectors.spark.jvm import jvm_tap
from connectors.spark.jvm import read as read_mod
from connectors.spark.jvm.read import JvmReadUnavailable, read_log
from eventlog import open_log
from eventlog.errors import EventLogError

pytestmark = pytest.mark.spark


def _hashable(v):
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    if hasattr(v, "asDict"):
        return _hashable(v.asDict())
    if isinstance(v, float) and v != v:
        return "NaN"
    return v


def rows_of(df) -> Counter:
    return Counter(tuple(_hashable(v) for v in r) for r in df.collect())


def assert_same(spark, uri: str, **options) -> Counter:
    """The JVM reader's DataFrame equals the Python reader's: schema, partitions, rows; returns the rows."""
    py = read_log(spark, uri, engine="python", **options)
    jv = read_log(spark, uri, engine="jvm", **options)
    assert jv.schema == py.schema
    assert jv.rdd.getNumPartitions() == py.rdd.getNumPartitions()
    want = rows_of(py)
    assert rows_of(jv) == want
    # each Spark partition holds the same parts (assign mode)
    parts = lambda df: df.rdd.mapPartitions(lambda rs: [sorted({r["_part"] for r in rs})]).collect()  # noqa: E731
    assert parts(jv) == parts(py)
    return want


TYPES = pa.schema([
    ("i8", pa.int8()), ("i16", pa.int16()), ("i32", pa.int32()), ("i64", pa.int64()),
    ("f32", pa.float32()), ("f64", pa.float64()), ("ok", pa.bool_()), ("s", pa.string()), ("b", pa.binary()),
    ("d", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")), ("ntz", pa.timestamp("us")),
    ("dec", pa.decimal128(12, 3)), ("l", pa.list_(pa.int64())),
    ("st", pa.struct([("a", pa.int32()), ("z", pa.string())])), ("m", pa.map_(pa.string(), pa.int64())),
])


def typed_rows(w: int, t: int, n: int) -> list[dict]:
    out = []
    for i in range(n):
        k = 1000 * w + 10 * t + i
        null = i % 5 == 4
        out.append({
            "i8": None if null else k % 100, "i16": k % 30000, "i32": -k, "i64": k * 10**9, "f32": k / 4,
            "f64": float("nan") if i == 3 else k / 3, "ok": k % 2 == 0, "s": None if null else f"é{k}",
            "b": bytes([k % 256, 0]), "d": datetime.date(2024, 1, 1) + datetime.timedelta(days=k % 400),
            "ts": datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(microseconds=k),
            "ntz": datetime.datetime(2023, 5, 1) + datetime.timedelta(seconds=k),
            "dec": decimal.Decimal(k) / 1000, "l": None if null else list(range(i)),
            "st": None if null else {"a": k, "z": str(k)}, "m": [("x", k), ("y", -k)],
        })
    return out


def capture_typed(log_dir: str, stream: str = "typed", peers: int = 3, times: int = 4, compression: str | None = None,
                  **kw) -> None:
    log = open_log(log_dir, **kw)
    for w in range(peers):
        cap = Capture(log, stream, w, peers, schema=TYPES, compression=compression)
        for t in range(times):
            cap.send(t, typed_rows(w, t, 6))
            cap.send(t, typed_rows(w, t + 50, 2))  # a second event at the same time
            cap.advance_to(t + 1)
        cap.close()


def test_many_column_types_python_writer(spark, jvm, log_dir):
    capture_typed(log_dir)
    rows = assert_same(spark, f"file://{log_dir}/typed")
    assert sum(rows.values()) == 3 * 4 * 8


@pytest.mark.parametrize("compression", ["lz4", "none"])
def test_each_compression_reads_as_the_python_reader_reads_it(spark, jvm, log_dir, compression):
    """LZ4 frames (linked blocks over 64 KiB included: pyarrow's) and uncompressed streams (FORMAT.md §13)."""
    capture_typed(log_dir, compression=compression)
    assert sum(assert_same(spark, f"{log_dir}/typed").values()) == 3 * 4 * 8
    log = open_log(log_dir)
    with Capture(log, "big", 0, 1, schema=pa.schema([("n", pa.int64()), ("s", pa.string())]),
                 compression=compression) as cap:
        for t in range(3):  # buffers of 160-400 KB: several LZ4 blocks each
            cap.send(t, pa.record_batch([pa.array(range(20_000)), pa.array([f"w{i % 97}" for i in range(20_000)])],
                                        names=["n", "s"]))
            cap.advance_to(t + 1)
    assert sum(assert_same(spark, f"{log_dir}/big").values()) == 60_000


@pytest.mark.parametrize("delta", [8, -8])
def test_an_lz4_frame_of_another_size_than_declared_fails_naming_the_file(spark, jvm, log_dir, delta):
    import struct
    import zlib

    from connectors.files import index as ix
    from eventlog.encoding import ipc_build

    with Capture(open_log(log_dir), "z", 0, 1, schema=pa.schema([("n", pa.int64())]), compression="lz4") as cap:
        cap.send(0, pa.record_batch([pa.array(range(5000))], names=["n"]))
    seg = _segments(log_dir, "z", 0)[0]
    index_path = os.path.join(os.path.dirname(seg), "_" + os.path.basename(seg).replace(".arrow", ".index"))
    with open(seg, "rb") as f:
        data = bytearray(f.read())
    with open(index_path, "rb") as f:
        index = bytearray(f.read())
    entry = ix.unpack_entry(index, 16)
    message = bytes(data[entry.offset:entry.offset + entry.length])
    parts = ipc_build.parse(message)
    offset, _ = struct.unpack_from("<qq", parts.buffers, 16)  # the data buffer of column n
    at = entry.offset + parts.body_start + offset
    declared = int.from_bytes(data[at:at + 8], "little", signed=True)
    data[at:at + 8] = (declared + delta).to_bytes(8, "little", signed=True)
    fixed = ix.IndexEntry(entry.seq, entry.offset, entry.length,
                          zlib.crc32(data[entry.offset:entry.offset + entry.length]), entry.kind)
    index[16:48] = ix.pack_entry(fixed)  # the damage is in the values, not a checksum failure
    with open(seg, "wb") as f:
        f.write(data)
    with open(index_path, "wb") as f:
        f.write(index)
    with pytest.raises(Exception):  # noqa: B017 - the Python reader refuses it too
        read_log(spark, f"{log_dir}/z", engine="python").collect()
    msg = _jvm_error(spark, f"{log_dir}/z")
    assert "CorruptLogError" in msg and "LZ4" in msg and seg in msg, msg[-2000:]


def test_segment_rotation_and_worker_counts(spark, jvm, log_dir):
    capture_typed(log_dir, peers=5, times=6, segment_bytes=4096)  # many sealed segments per part
    assert len([n for n in os.listdir(f"{log_dir}/typed/part=0") if n.endswith(".arrow")]) > 2
    for workers in (None, 1, 2, 3, 7):
        opts = {} if workers is None else {"workers": workers}
        assert sum(assert_same(spark, f"{log_dir}/typed", **opts).values()) == 5 * 6 * 8


def test_product_times(spark, jvm, log_dir):
    schema = pa.schema([("n", pa.int64())])
    log = open_log(log_dir)
    for w in range(2):
        cap = Capture(log, "prod", w, 2, schema=schema, time="product:2")
        for a in range(2):
            for b in range(3):
                cap.send((a, b), [{"n": 100 * w + 10 * a + b}])
            cap.advance_to((a + 1, 0))
        if w == 0:
            cap.close()
        else:
            cap.abort()  # part 1 holds (2, 0): times (2, *) and beyond are not complete
    rows = assert_same(spark, f"{log_dir}/prod")
    assert sum(rows.values()) == 2 * 2 * 3
    assert all(isinstance(r[1], tuple) and len(r[1]) == 2 for r in rows)
    assert_same(spark, f"{log_dir}/prod", incomplete=True)


def capture_rounds(log_dir: str, peers: int = 3, times: int = 6) -> None:
    """As tests/spark/test_read.py: part ``peers-1`` stops (aborts) at time 3, others finish."""
    log = open_log(log_dir)
    schema = pa.schema([("n", pa.int64()), ("k", pa.string())])
    for w in range(peers):
        cap = Capture(log, "nums", w, peers, schema=schema)
        for t in range(times):
            if w == peers - 1 and t == 3:
                cap.send(t, [{"n": -1, "k": "held"}])  # sent, never committed: held back by every reader
                cap.abort()
                break
            cap.send(t, [{"n": 100 * w + t, "k": "a"}, {"n": 100 * w + t, "k": f"b{t}"}])
            cap.advance_to(t + 1)
        else:
            cap.close()


def test_incomplete_times_excluded_unless_asked(spark, jvm, log_dir):
    capture_rounds(log_dir)
    complete = assert_same(spark, f"{log_dir}/nums")
    assert {r[2] for r in complete} == {0, 1, 2}  # _time: only times every part passed
    everything = assert_same(spark, f"{log_dir}/nums", incomplete=True)
    assert {r[2] for r in everything} == set(range(6))
    assert not any(r[1] == "held" for r in everything)  # uncommitted: not delivered


def test_void_messages_of_a_crashed_incarnation_are_dropped(spark, jvm, log_dir):
    schema = pa.schema([("n", pa.int64())])
    log = open_log(log_dir)
    cap = Capture(log, "re", 0, 1, schema=schema)
    cap.send(0, [{"n": 1}])
    cap.advance_to(1)
    cap.send(1, [{"n": 99}])  # the incarnation ends before completing time 1: void
    cap.abort()
    cap = Capture(log, "re", 0, 1, schema=schema)  # epoch 2: re-sends time 1
    cap.send(1, [{"n": 2}])
    cap.close()
    rows = assert_same(spark, f"{log_dir}/re")
    assert sorted(r[0] for r in rows) == [1, 2]


def test_logs_of_the_jvm_tap(spark, jvm, tmp_path):
    log = str(tmp_path / "tapped")
    df = spark.range(0, 5000, 1, 3).selectExpr(
        "id", "concat('w', cast(id % 7 as string)) as word", "id % 4 as t", "array(id, id + 1) as a",
        "named_struct('x', id, 'y', cast(id as double)) as st")
    jvm_tap(df, log, "tapped", time="t").count()
    rows = assert_same(spark, f"{log}/tapped")
    assert sum(rows.values()) == 5000
    assert sum(assert_same(spark, f"{log}/tapped", workers=2).values()) == 5000


@pytest.mark.parametrize("rows, partitions", [(3000, 6), (40, 4), (12, 1)])
def test_small_events_with_buffers_stored_uncompressed(spark, jvm, tmp_path, rows, partitions):
    """Arrow Java stores a buffer that zstd cannot shrink uncompressed (a -1 length prefix): the validity
    buffers of small events. Vectors then keep slices of the event's body; reading event after event must give
    back exactly the references it took (the reader used to release one too many: "RefCnt has gone negative"
    on the second event)."""
    import struct

    from connectors.files import index as ix
    from eventlog.encoding import ipc_build

    log = str(tmp_path / "small")
    df = spark.range(0, rows, 1, partitions).selectExpr(
        "id", "concat('w', cast(id % 7 as string)) as word", "id % 4 as t", "if(id % 5 = 0, null, id) as maybe")
    jvm_tap(df, log, "small", time="t").count()
    seg = _segments(log, "small", 0)[0]
    d, name = os.path.split(seg)
    index = open(os.path.join(d, "_" + name.split(".")[0] + ".index"), "rb").read()
    data = open(seg, "rb").read()
    raw = 0
    for i in range((len(index) - ix.HEADER_SIZE) // ix.ENTRY_SIZE):
        e = ix.unpack_entry(index, ix.HEADER_SIZE + i * ix.ENTRY_SIZE)
        if e.kind != ix.KIND_MESSAGES:
            continue
        body = data[e.offset:e.offset + e.length]
        parts = ipc_build.parse(body)
        for off, n in (struct.unpack_from("<qq", parts.buffers, k) for k in range(0, len(parts.buffers), 16)):
            raw += n >= 8 and body[parts.body_start + off:parts.body_start + off + 8] == b"\xff" * 8
    assert raw, "no buffer stored uncompressed: the case under test did not arise"
    for workers in (1, 2):
        assert sum(assert_same(spark, f"{log}/small", workers=workers).values()) == rows


def _segments(log_dir: str, stream: str, part: int = 0) -> list[str]:
    d = f"{log_dir}/{stream}/part={part}"
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".arrow"))


def _error_text(e: BaseException) -> str:
    """An error of a JVM read as text: the planner's (which reads the Progress events on the driver) are
    eventlog's own, named here; the tasks' CorruptLogException/LogLimitError messages start with the Python
    error's name (``CorruptLogError:``)."""
    return (type(e).__name__ + ": " if isinstance(e, EventLogError) else "") + str(e)


def _jvm_error(spark, uri: str) -> str:
    """The error of a JVM read, as ``_error_text``."""
    with pytest.raises(Exception) as e:
        read_log(spark, uri, engine="jvm").collect()
    return _error_text(e.value)


def test_damaged_body_fails_naming_the_file(spark, jvm, log_dir):
    capture_typed(log_dir, peers=2)
    seg = _segments(log_dir, "typed", 1)[0]
    with open(seg, "r+b") as f:
        f.seek(os.path.getsize(seg) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(Exception):  # noqa: B017 - the Python reader refuses it too (whichever error Spark wraps it in)
        read_log(spark, f"{log_dir}/typed", engine="python").collect()
    msg = _jvm_error(spark, f"{log_dir}/typed")
    assert "CorruptLogException: CorruptLogError: event fails its checksum" in msg  # found by the task
    assert seg in msg and "part 1" in msg and "typed" in msg


def test_truncated_segment_fails_naming_the_file(spark, jvm, log_dir):
    capture_typed(log_dir, peers=2)
    seg = _segments(log_dir, "typed", 0)[0]
    os.truncate(seg, os.path.getsize(seg) - 100)  # a sealed segment without its whole footer
    msg = _jvm_error(spark, f"{log_dir}/typed")
    assert "CorruptLogError" in msg and seg in msg


def test_damaged_index_entry_fails(spark, jvm, log_dir):
    capture_typed(log_dir, peers=1)
    idx = f"{log_dir}/typed/part=0/_{1:020d}.index"
    with open(idx, "r+b") as f:
        f.seek(16 + 8)  # the first entry's offset (not its last): damage, not a short index
        f.write(b"\x01")
    msg = _jvm_error(spark, f"{log_dir}/typed")
    assert "CorruptLogError" in msg and "index entry fails its checksum" in msg and idx in msg


def test_an_index_over_the_limit_is_refused_before_it_is_read(spark, jvm, log_dir):
    """The JVM reader bounds an index's size before it allocates for it (a local file as an object's): a
    300 MiB index (sparse: no disk used) fails the task with a LogLimitError naming the file, and nothing is
    read into memory for it. It is made large after the driver planned the read, so the tasks meet it."""
    capture_typed(log_dir, peers=1)
    idx = f"{log_dir}/typed/part=0/_{1:020d}.index"
    df = read_log(spark, f"{log_dir}/typed", engine="jvm")
    os.truncate(idx, 300 << 20)
    with pytest.raises(Exception) as e:
        df.collect()
    msg = str(e.value)
    assert "LogLimitError: index of 314572800 bytes is over the reader's limit" in msg and idx in msg


@pytest.mark.parametrize("when", ["before planning", "after planning"])
def test_any_single_damage_gives_the_same_rows_or_an_error_naming_the_file(spark, jvm, tmp_path, when):
    """Damage anywhere in a part's segment or index, one bit flipped or the file cut short: the JVM reader gives
    exactly the undamaged rows (damage it never reads: footer padding, a short index it reads around) or fails
    with CorruptLogError/LogLimitError (UnsupportedVersionError for an index whose version field was hit) naming
    the damaged file; never other rows, never another error. Damage made before the read is planned is mostly
    found by the planner on the driver; made after, by the tasks' own checks. A sample of positions over both
    files (a sweep of 560 bit flips, cuts and overwrites found no other outcome)."""
    import random
    import shutil

    base = str(tmp_path / "base")
    capture_typed(base, peers=1, times=3)
    want = rows_of(read_log(spark, f"{base}/typed", engine="python"))
    part = os.path.join("typed", "part=0")
    files = [os.path.join(part, n) for n in sorted(os.listdir(os.path.join(base, part))) if n != ".lock"]
    assert [os.path.basename(f)[-6:] for f in files] == [".arrow", ".index"]
    rng = random.Random(16)
    cases = [(f, "flip", rng.randrange(os.path.getsize(os.path.join(base, f)))) for f in files for _ in range(9)]
    cases += [(f, "cut", rng.randrange(os.path.getsize(os.path.join(base, f)))) for f in files for _ in range(3)]
    outcomes: Counter = Counter()
    for i, (rel, how, pos) in enumerate(cases):
        work = str(tmp_path / f"w{i}")
        shutil.copytree(base, work)
        damaged = os.path.join(work, rel)
        try:
            df = read_log(spark, f"{work}/typed", engine="jvm") if when == "after planning" else None
            if how == "cut":
                os.truncate(damaged, pos)
            else:
                with open(damaged, "r+b") as f:
                    f.seek(pos)
                    b = f.read(1)
                    f.seek(pos)
                    f.write(bytes([b[0] ^ (1 << (i % 8))]))
            got = rows_of(df if df is not None else read_log(spark, f"{work}/typed", engine="jvm"))
        except Exception as e:  # noqa: BLE001 - which error it is, is what is checked
            msg = _error_text(e)
            assert re.search(r"(CorruptLogError|LogLimitError|UnsupportedVersionError): ", msg) and damaged in msg, (
                rel, how, pos, msg[:2000])
            outcomes["driver" if isinstance(e, EventLogError) else "tasks"] += 1
        else:
            assert got == want, (rel, how, pos)
            outcomes["same rows"] += 1
        shutil.rmtree(work)
    assert outcomes["same rows"] <= len(cases) // 2, outcomes  # most damage is found (checksums), not read around
    if when == "after planning":
        assert outcomes["tasks"] > len(cases) // 3 and outcomes["driver"] == 0, outcomes


def test_missing_index_reads_by_framing(spark, jvm, log_dir):
    capture_typed(log_dir, peers=2)
    os.remove(f"{log_dir}/typed/part=1/_{1:020d}.index")
    assert sum(assert_same(spark, f"{log_dir}/typed").values()) == 2 * 4 * 8


def test_unsupported_streams_fall_back_saying_why_once(spark, jvm, log_dir, caplog):
    log = open_log(log_dir)
    cap = Capture(log, "av", 0, 1, schema=pa.schema([("n", pa.int64())]), encoding="avro")
    cap.send(0, [{"n": 1}])
    cap.close()
    with pytest.raises(JvmReadUnavailable, match="avro"):
        read_log(spark, f"{log_dir}/av", engine="jvm")
    read_mod._said.clear()
    with caplog.at_level(logging.WARNING, logger="eventlog.read"):
        for _ in range(2):
            assert [r["n"] for r in read_log(spark, f"{log_dir}/av", engine="auto").collect()] == [1]
    said = [r for r in caplog.records if "JVM reader cannot read" in r.getMessage()]
    assert len(said) == 1 and "avro" in said[0].getMessage()


def test_other_refusals(spark, jvm, log_dir):
    capture_rounds(log_dir)
    with pytest.raises(JvmReadUnavailable, match="repartition"):
        read_log(spark, f"{log_dir}/nums", engine="jvm", mode="repartition", key="k")
    with pytest.raises(JvmReadUnavailable, match="since"):
        read_log(spark, f"{log_dir}/nums", engine="jvm", since=2)
    with pytest.raises(JvmReadUnavailable, match="local file logs and file logs on S3, not kafka://"):
        read_log(spark, "kafka://127.0.0.1:9/p/nums", engine="jvm")
    # a timestamp stored in nanoseconds: Spark's Arrow reader does not read it as the Python reader does
    log = open_log(log_dir)
    cap = Capture(log, "ns", 0, 1, schema=pa.schema([("ts", pa.timestamp("ns"))]))
    cap.send(0, [{"ts": datetime.datetime(2024, 1, 1)}])
    cap.close()
    with pytest.raises(JvmReadUnavailable, match="ts"):
        read_log(spark, f"{log_dir}/ns", engine="jvm")
    # an open segment (a live writer): the Python reader's
    live = Capture(log, "live", 0, 1, schema=pa.schema([("n", pa.int64())]))
    live.send(0, [{"n": 1}])
    live.advance_to(1)
    try:
        with pytest.raises(JvmReadUnavailable, match="not sealed"):
            read_log(spark, f"{log_dir}/live", engine="jvm")
    finally:
        live.close()
    with pytest.raises(ValueError):
        read_log(spark, f"{log_dir}/nums", engine="fast")
