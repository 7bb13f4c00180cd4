"""Format 2.0 Avro file segments (FORMAT.md §5.1): container files of flat rows that fastavro, polars and the
Avro C tools read, deflate by default; one block per event, checked and bounded when read back; the file
log's trust rules (damage, torn tails, verify) hold for them as for every other segment."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import os
import random
import shutil
import subprocess
import time as clock
import zlib
from typing import Any
from unittest import mock

import fastavro
import polars as pl
import pyarrow as pa
import pytest
import zstandard
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from capture import Capture
from connectors.files import FileLog
from connectors.files import index as ix
from connectors.files.framing import AvroFraming, Malformed, framing_for
from eventlog import (
    CorruptLogError,
    EventLogError,
    LimitError,
    LogLimitError,
    Messages,
    Progress,
    SchemaMismatchError,
    StreamHeader,
    open_log,
)
from eventlog.encoding import avro_rows
from eventlog.encoding.avro import count_values
from eventlog.encoding.avro_rows import AvroRowsCodec
from eventlog.limits import MAX_EVENT_RECORDS
from tests.support.damage import (
    check_valid,
    damaged_copy,
    deadline,
    mutate,
    read_outcome,
    same,
    sample_offsets,
    storable,
)
from tests.support.strategies import avro_long as _zz
from tests.support.strategies import batches, schemas

D = decimal.Decimal
SCHEMA = pa.schema([("x", pa.int64()), ("s", pa.string())])


def _header(schema: pa.Schema, time: str = "int64") -> StreamHeader:
    return StreamHeader("s", 1, schema, time, "avro", version=(2, 0))


def _codec(schema: pa.Schema, time: str = "int64", block_codec: str | None = None) -> AvroRowsCodec:
    return AvroRowsCodec(_header(schema, time), block_codec=block_codec)


def _roundtrip(codec: AvroRowsCodec, events: list) -> list:
    """Encode ``events`` into one segment and decode them from it; returns what came back."""
    enc = codec.new_segment({"eventlog.epoch": b"1", "eventlog.writer": b"w1"})
    bodies = [enc.encode(i + 1, ev) for i, ev in enumerate(events)]
    segment = pa.py_buffer(enc.prefix + b"".join(bodies))
    dec = codec.segment_decoder(enc.prefix)
    out, offset = [], len(enc.prefix)
    for i, body in enumerate(bodies):
        seq, ev = dec.decode_at(segment, offset, len(body))
        assert seq == i + 1
        out.append(ev)
        offset += len(body)
    return out


# -- every type the 1.x Avro encoding stores ------------------------------------------------------------------

TS = 1_700_000_000_123
TYPES: dict[str, tuple[pa.DataType, Any]] = {
    "nul": (pa.null(), None),
    "b": (pa.bool_(), True),
    "i8": (pa.int8(), -128),
    "i16": (pa.int16(), 32767),
    "i32": (pa.int32(), -(2**31)),
    "u8": (pa.uint8(), 255),
    "u16": (pa.uint16(), 65535),
    "i64": (pa.int64(), -(2**63)),
    "u32": (pa.uint32(), 2**32 - 1),
    "f32": (pa.float32(), 1.5),
    "f64": (pa.float64(), -2.25e300),
    "s": (pa.string(), "héllo"),
    "ls": (pa.large_string(), "large"),
    "sv": (pa.string_view(), "view"),
    "bin": (pa.binary(), b"\x00\xff"),
    "lbin": (pa.large_binary(), b"lb"),
    "bv": (pa.binary_view(), b"bv"),
    "fsb": (pa.binary(3), b"abc"),
    "d32": (pa.date32(), 19000),
    "d64": (pa.date64(), 1_641_600_000_000),
    "t32ms": (pa.time32("ms"), 3_600_000),
    "t32s": (pa.time32("s"), 3600),
    "t64us": (pa.time64("us"), 3_600_000_001),
    "t64ns": (pa.time64("ns"), 3_600_000_000_001),
    "ts_s": (pa.timestamp("s"), 1_700_000_000),
    "ts_ms": (pa.timestamp("ms"), TS),
    "ts_us": (pa.timestamp("us", tz="UTC"), TS * 1000 + 7),
    "ts_ns": (pa.timestamp("ns"), TS * 1_000_000 + 9),
    "ts_nsz": (pa.timestamp("ns", tz="Europe/Paris"), TS * 1_000_000 + 9),
    "dur": (pa.duration("us"), -5),
    "st": (pa.struct([("a", pa.int8()), pa.field("b", pa.string(), nullable=False)]), {"a": None, "b": "x"}),
    "l": (pa.list_(pa.int32()), [1, None, 3]),
    "ll": (pa.large_list(pa.string()), ["a", None]),
    "fl": (pa.list_(pa.int16(), 2), [4, 5]),
    "nested": (pa.list_(pa.struct([("xs", pa.list_(pa.float64()))])), [{"xs": [0.5]}, {"xs": None}]),
    "dec32": (pa.decimal32(5, 2), D("-123.45")),
    "dec64": (pa.decimal64(12, 3), D("123456789.012")),
    "dec128": (pa.decimal128(38, 9), D("12345678901234567890123456789.123456789")),
    "dec256": (pa.decimal256(60, 0), D(-(10**59) + 7)),
}
POLARS_CANNOT = {"nul", "dec256"}
"""What polars' read_avro refuses: the Avro ``null`` type ("not yet implemented") and decimals of more than
38 digits (it panics)."""


def _all_types(names, nullable: bool = True) -> pa.RecordBatch:  # noqa: ANN001
    """Two rows of the types ``names``: their value, then null (nullable) or the value again."""
    fields = [pa.field(n, TYPES[n][0], nullable=nullable or n == "nul") for n in names]
    cols = [pa.array([TYPES[n][1], None if nullable else TYPES[n][1]], TYPES[n][0]) for n in names]
    return pa.RecordBatch.from_arrays(cols, schema=pa.schema(fields))


@pytest.mark.parametrize("nullable", [True, False], ids=["nullable", "required"])
@pytest.mark.parametrize("time", ["int64", "product:3"])
@pytest.mark.parametrize("block_codec", avro_rows.AVRO_CODECS)
def test_every_type_round_trips(nullable, time, block_codec):
    batch = _all_types(TYPES, nullable)
    codec = _codec(batch.schema, time, block_codec)
    k = codec.header.time_type.arity
    t = 7 if k == 0 else (7, 0, 2**62)
    minimum = codec.header.time_type.minimum
    events = [Messages(t, batch), Progress(((minimum, -1), (t, 1))), Progress(()),
              Messages(t, batch.slice(1, 1)), Progress(((t, -1),))]
    back = _roundtrip(codec, events)
    assert back == events
    assert back[0].records.schema.equals(batch.schema, check_metadata=True)
    assert back[0].records.to_pylist() == batch.to_pylist()


def test_empty_ish_events_round_trip():
    """A schema of one null column, a record whose every field is null, zero-delta-free empty progress."""
    only_null = pa.schema([("n", pa.null())])
    nulls = pa.RecordBatch.from_arrays([pa.nulls(3)], schema=only_null)
    assert _roundtrip(_codec(only_null), [Messages(0, nulls), Progress(())]) == [Messages(0, nulls), Progress(())]
    one = pa.RecordBatch.from_pylist([{"x": None, "s": None}], schema=SCHEMA)
    assert _roundtrip(_codec(SCHEMA, "product:1"), [Messages((0,), one)]) == [Messages((0,), one)]
    with pytest.raises(ValueError, match="at least one record"):
        _codec(SCHEMA).new_segment().encode(1, Messages(0, one.slice(0, 0)))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(schema=schemas(), time=st.sampled_from(["int64", "product:2"]), data=st.data())
def test_random_schemas_round_trip_and_the_scan_counts_what_the_writer_counts(schema, time, data):
    """Random schemas and batches come back exactly; the reader's scan of the rows counts the values the
    writer counted for the limit (so both refuse the same events), and walks exactly the rows' bytes."""
    assume(storable(schema, "avro"))
    codec = _codec(schema, time)
    batch = data.draw(batches(schema, max_rows=12))
    k = codec.header.time_type.arity
    t = 5 if k == 0 else (5,) * k
    event = Messages(t, batch)
    assert _roundtrip(codec, [event]) == [event]
    raw = codec.message_rows(1, event, TS)
    codec.scanner.scan(raw, batch.num_rows)
    assert codec.scanner._counter.values == count_values(batch) + batch.num_rows * codec.meta_values
    with pytest.raises((ValueError, IndexError)):
        codec.scanner.scan(raw + b"\x00", batch.num_rows)


def test_the_write_time_is_recorded_and_read_back():
    codec = _codec(SCHEMA)
    enc = codec.new_segment()
    before = clock.time_ns() // 1_000_000
    body = enc.encode(1, Messages(3, pa.RecordBatch.from_pylist([{"x": 1, "s": "a"}], schema=SCHEMA)))
    after = clock.time_ns() // 1_000_000
    dec = codec.segment_decoder(enc.prefix)
    assert dec.last_ts is None
    dec.decode(body)
    assert before <= dec.last_ts <= after
    (row,) = fastavro.reader(io.BytesIO(enc.prefix + body))
    assert row["_ts"] == dt.datetime.fromtimestamp(dec.last_ts / 1000, dt.timezone.utc)  # timestamp-millis


def test_a_schema_with_the_row_columns_is_refused_and_creates_nothing(tmp_path):
    for name in ("_ts", "_updates", "_time", "_seq"):
        schema = pa.schema([("x", pa.int64()), (name, pa.int64())])
        with pytest.raises(SchemaMismatchError, match=name):
            Capture(open_log(tmp_path), "s", 0, 1, schema=schema, encoding="avro")
        assert not os.path.exists(tmp_path / "s")


# -- third-party readers ------------------------------------------------------------------------------------


def _capture(root: str, schema: pa.Schema, batches_at: dict, *, time: str = "int64", segment_bytes: int = 64 << 20,
             **options: Any) -> FileLog:
    log = FileLog(root, segment_bytes=segment_bytes, **options)
    with Capture(log, "s", 0, 1, schema=schema, encoding="avro", time=time) as cap:
        for t, batch in batches_at.items():
            cap.send(t, batch)
            cap.advance_to(t + 1 if isinstance(t, int) else tuple(x + 1 for x in t))
    return FileLog(root)


def _expected_rows(log: FileLog) -> list[tuple]:
    """``(_seq, _time, records…, _updates)`` of every row a segment reader should see, from eventlog's reader."""
    out = []
    for e in log.reader("s", 0):
        if isinstance(e.event, Messages):
            t = list(e.event.time) if isinstance(e.event.time, tuple) else e.event.time
            out += [(e.seq, t, r, None) for r in e.event.records.to_pylist()]
        else:
            ups = [{"time": list(u) if isinstance(u, tuple) else u, "delta": d} for u, d in e.event.updates]
            out.append((e.seq, None, None, ups))
    return out


def _segment(root: str) -> str:
    (seg,) = [os.path.join(root, "s", "part=0", f) for f in os.listdir(os.path.join(root, "s", "part=0"))
              if f.endswith(".avro")]
    return seg


@pytest.mark.parametrize("time", ["int64", "product:2"])
def test_fastavro_polars_and_avrocat_read_a_sealed_segment_as_rows(tmp_path, avrocat, time):
    names = [n for n in TYPES if n not in POLARS_CANNOT]
    batch = _all_types(names)
    t0, t1 = (0, 4) if time == "int64" else ((0, 1), (4, 2))
    root = str(tmp_path)
    log = _capture(root, batch.schema, {t0: batch, t1: batch.slice(0, 1)}, time=time)
    expected = _expected_rows(log)
    assert [r[0] for r in expected] == [1, 1, 2, 3, 4, 5]
    seg = _segment(root)
    with open(seg, "rb") as f:
        reader = fastavro.reader(f)
        assert reader.codec == "deflate"
        assert reader.metadata["eventlog.stream"] == "s" and reader.metadata["eventlog.epoch"] == "1"
        rows = list(reader)
    assert len(rows) == len(expected)
    for row, (seq, t, record, updates) in zip(rows, expected):
        assert (row["_seq"], row["_time"], row["_updates"]) == (seq, t, updates)
        if record is not None:  # fastavro applies the logical types (dates, timestamps, decimals)
            assert {k: row[k] for k in ("i64", "s", "bin", "l", "st", "dec128", "nested")} == {
                k: record[k] for k in ("i64", "s", "bin", "l", "st", "dec128", "nested")}
    # polars: a row per record plus one per progress event; the records are the rows with a _time
    df = pl.read_avro(seg)
    assert df.columns == [*names, "_time", "_seq", "_ts", "_updates"]
    assert df["_seq"].to_list() == [r[0] for r in expected]
    records = df.filter(pl.col("_time").is_not_null())
    assert records.height == 3
    assert records.select(["i64", "s", "f64", "u32", "l", "st"]).to_dicts() == [
        {k: r[2][k] for k in ("i64", "s", "f64", "u32", "l", "st")} for r in expected if r[2] is not None]
    assert records["dec128"].to_list() == [TYPES["dec128"][1], None, TYPES["dec128"][1]]
    assert records["ts_ms"].to_list()[0] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000)
    assert df["_ts"].dtype == pl.Datetime("ms", "UTC")
    assert df.filter(pl.col("_updates").is_not_null())["_updates"].to_list() == [r[3] for r in expected if r[3]]
    # the Avro C tools (Debian's avro-bin): one JSON object per row, unions written as {"type": value}
    out = subprocess.run([avrocat, seg], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(lines) == len(expected)
    for line, (seq, t, record, updates) in zip(lines, expected):
        assert line["_seq"] == seq
        assert line["_time"] == (None if t is None else {"long" if time == "int64" else "array": t})
        assert line["_updates"] == (None if updates is None else {"array": updates})
        if record is not None:
            def union(v: Any, branch: str) -> Any:
                return None if v is None else {branch: v}

            assert (line["i64"], line["s"], line["f64"]) == (
                union(record["i64"], "long"), union(record["s"], "string"), union(record["f64"], "double"))
            assert line["l"] == union(None if record["l"] is None else [union(v, "int") for v in record["l"]], "array")


def test_a_zstandard_segment_on_request(tmp_path):
    """``avro_codec="zstandard"`` (open_log and FileLog): smaller and faster, read back by eventlog and by
    fastavro (Java Avro reads it too; polars and the Avro C tools do not)."""
    batch = pa.RecordBatch.from_pylist([{"x": i, "s": "v" * (i % 7)} for i in range(50)], schema=SCHEMA)
    log = open_log(str(tmp_path), avro_codec="zstandard")
    with Capture(log, "s", 0, 1, schema=SCHEMA, encoding="avro") as cap:
        cap.send(0, batch)
    with open(_segment(str(tmp_path)), "rb") as f:
        reader = fastavro.reader(f)
        assert reader.codec == "zstandard"
        assert [r["x"] for r in reader if r["_time"] is not None] == list(range(50))
    (e, _) = list(FileLog(str(tmp_path)).reader("s", 0))
    assert e.event.records.equals(batch)
    with pytest.raises(ValueError, match="avro_codec"):
        FileLog(str(tmp_path), avro_codec="snappy")


# -- decoding checks and bounds ---------------------------------------------------------------------------


def _block(codec: AvroRowsCodec, raw: bytes, rows: int, block_codec: str = "deflate") -> bytes:
    if block_codec == "deflate":
        c = zlib.compressobj(6, zlib.DEFLATED, -15)
        data = c.compress(raw) + c.flush()
    else:
        data = zstandard.ZstdCompressor().compress(raw)
    return _zz(rows) + _zz(len(data)) + data + codec._standalone_sync()


def _rows(codec: AvroRowsCodec, *rows: dict) -> bytes:
    out = io.BytesIO()
    for r in rows:
        fastavro.schemaless_writer(out, codec._row, r)
    return out.getvalue()


def _decode(codec: AvroRowsCodec, body: bytes):  # noqa: ANN201
    return codec.standalone_decoder().decode(body)


REQUIRED = pa.schema([pa.field("x", pa.int64(), nullable=False), ("s", pa.string())])


def _row(seq: int = 1, time: Any = 5, ts: int = TS, updates: Any = None, **data: Any) -> dict:
    return {"x": 1, "s": "a", **data, "_time": time, "_seq": seq, "_ts": ts, "_updates": updates}


def test_rows_of_a_block_must_be_one_event():
    codec = _codec(REQUIRED)
    good = _block(codec, _rows(codec, _row(), _row(x=2)), 2)
    assert _decode(codec, good)[1].records.to_pylist() == [{"x": 1, "s": "a"}, {"x": 2, "s": "a"}]
    progress = _row(time=None, updates=[{"time": 0, "delta": -1}], x=None, s=None)
    assert _decode(codec, _block(codec, _rows(codec, progress), 1)) == (1, Progress(((0, -1),)))
    bad = {
        "rows disagree on _seq": (_rows(codec, _row(), _row(seq=2)), 2),
        "rows disagree on _time": (_rows(codec, _row(), _row(time=6)), 2),
        "rows disagree on _ts": (_rows(codec, _row(), _row(ts=TS + 1)), 2),
        "a messages row with _updates": (_rows(codec, _row(), _row(updates=[])), 2),
        "a progress row among records": (_rows(codec, _row(), progress), 2),
        "a progress block of two rows": (_rows(codec, progress, progress), 2),
        "a progress row with data": (_rows(codec, dict(progress, s="a")), 1),
        "a progress row with a time": (_rows(codec, dict(progress, _time=5)), 1),
        "a row with neither time nor updates": (_rows(codec, _row(time=None)), 1),
        "a null where the schema says non-nullable": (_rows(codec, _row(), _row(x=None)), 2),
        "fewer rows than the block declares": (_rows(codec, _row()), 2),
        "more rows than the block declares": (_rows(codec, _row(), _row()), 1),
        "bytes after the rows": (_rows(codec, _row()) + b"\x00", 1),
        "sequence id 0": (_rows(codec, _row(seq=0)), 1),
        "a negative write time": (_rows(codec, _row(ts=-1)), 1),
        "a negative time": (_rows(codec, _row(time=-1)), 1),
    }
    for what, (raw, n) in bad.items():
        with pytest.raises(CorruptLogError):
            _decode(codec, _block(codec, raw, n))
            pytest.fail(what)
    product = _codec(SCHEMA, "product:2")
    with pytest.raises(CorruptLogError, match="2"):  # a time of the wrong arity
        _decode(product, _block(product, _rows(product, _row(time=[1, 2, 3])), 1))


def test_damaged_blocks_are_corrupt_log_errors():
    codec = _codec(SCHEMA)
    raw = _rows(codec, _row())
    good = _block(codec, raw, 1)
    assert _decode(codec, good)[0] == 1
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    deflated = c.compress(raw) + c.flush()
    sync = codec._standalone_sync()
    cases = [
        _zz(1) + _zz(len(deflated) + 3) + deflated + b"abc" + sync,  # bytes after the deflate stream
        _zz(1) + _zz(len(deflated) - 2) + deflated[:-2] + sync,  # the deflate stream cut short
        _zz(0) + _zz(len(deflated)) + deflated + sync,  # a block of no rows
        _zz(-1) + _zz(len(deflated)) + deflated + sync,
        good[:-1] + bytes([good[-1] ^ 1]),  # another sync marker
        good + b"\x00",
        _zz(1) + _zz(3) + b"\xff\xff\xff" + sync,  # no deflate data at all
    ]
    for body in cases:
        with pytest.raises(CorruptLogError):
            _decode(codec, body)
    zstd = _codec(SCHEMA, block_codec="zstandard")
    assert _decode(zstd, _block(zstd, raw, 1, "zstandard"))[0] == 1
    with pytest.raises(CorruptLogError):  # a deflate block where the segment says zstandard
        _decode(zstd, good)


def test_sizes_and_counts_are_bounded_before_allocating(monkeypatch):
    codec = _codec(SCHEMA)
    sync = codec._standalone_sync()
    # a block declaring more rows than the limit: refused before its data is looked at
    with pytest.raises(LogLimitError, match="records"):
        _decode(codec, _zz(MAX_EVENT_RECORDS + 1) + _zz(4) + b"abcd" + sync)
    # inflated output is bounded while inflating (the bound lowered: deflate cannot reach 65536:1 itself), and
    # a zstandard frame declaring more than the bound is refused before it is decompressed
    monkeypatch.setattr(avro_rows, "decoded_bytes_bound", lambda stored: 1000)
    raw = _rows(codec, *[_row(s="v" * 50)] * 40)
    assert len(raw) > 1000
    with pytest.raises(LogLimitError, match="inflates"):
        _decode(codec, _block(codec, raw, 40))
    zstd = _codec(SCHEMA, block_codec="zstandard")
    with pytest.raises(LogLimitError, match="declares"):
        _decode(zstd, _block(zstd, raw, 40, "zstandard"))
    monkeypatch.undo()
    assert _decode(codec, _block(codec, raw, 40))[1].records.num_rows == 40
    # list items of the null type take no bytes: a few bytes may declare 2**40 of them; the scan refuses
    nulls = _codec(pa.schema([("xs", pa.list_(pa.null()))]))
    hostile = b"\x02" + _zz(1 << 40) + b"\x00" + b"\x02\x0a\x02\x00\x00"
    with deadline(10), pytest.raises(LogLimitError, match="values"):
        _decode(nulls, _block(nulls, hostile, 1))
    # an updates array declaring more items than there are bytes ends in a typed error, not a long loop
    progress = b"\x00\x00" + b"\x00" + _zz(1) + _zz(TS) + b"\x02" + _zz(1 << 21) + b"\x00\x02" * 4
    with deadline(10), pytest.raises(CorruptLogError):
        _decode(codec, _block(codec, progress, 1))


@pytest.mark.parametrize("scanned", [False, True])
def test_the_values_limit_is_the_same_for_writer_and_reader(monkeypatch, scanned):
    """An event of exactly the limit is written and read back; one more value is refused by both (the
    limit lowered to 1000; the row columns count: 4 values a row here)."""
    import eventlog.encoding.avro_scan as scan_mod

    for mod in (avro_rows, scan_mod):
        monkeypatch.setattr(mod, "MAX_AVRO_EVENT_VALUES", 1000)
    schema = pa.schema([pa.field("xs", pa.list_(pa.int8())), pa.field("s", pa.string())])
    codec = _codec(schema)
    if scanned:
        codec.scanner.bounded_by_size = lambda size: False  # type: ignore[method-assign]
    at_limit = pa.RecordBatch.from_pylist([{"xs": [1] * 94, "s": "x"}] * 10, schema=schema)
    assert count_values(at_limit) + 10 * codec.meta_values == 1000
    body = codec.standalone_encoder().encode(1, Messages(0, at_limit))
    assert _decode(codec, body)[1].records.equals(at_limit)
    over = pa.RecordBatch.from_pylist([{"xs": [1] * 95, "s": "x"}] + [{"xs": [1] * 94, "s": "x"}] * 9, schema=schema)
    with pytest.raises(LimitError, match="values"):
        codec.standalone_encoder().encode(1, Messages(0, over))
    monkeypatch.setattr(avro_rows, "MAX_AVRO_EVENT_VALUES", 2000)  # a writer with a higher limit
    body = codec.standalone_encoder().encode(1, Messages(0, over))
    with pytest.raises(LogLimitError, match="values"):  # (unscanned: too large for its size to bound it)
        _decode(codec, body)


@pytest.mark.parametrize("scanned", [False, True], ids=["by-size", "scanned"])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(schema=schemas(), time=st.sampled_from(["int64", "product:2"]), data=st.data())
def test_damaged_blocks_decode_to_a_valid_event_or_a_typed_error(scanned, schema, time, data):
    assume(storable(schema, "avro"))
    codec = _codec(schema, time, data.draw(st.sampled_from(avro_rows.AVRO_CODECS)))
    if scanned:
        codec.scanner.bounded_by_size = lambda size: False  # type: ignore[method-assign]
    enc = codec.standalone_encoder()
    k = codec.header.time_type.arity
    t = 3 if k == 0 else (3,) * k
    events = [Messages(t, data.draw(batches(schema))), Progress(((codec.header.time_type.minimum, -1), (t, 1)))]
    with mock.patch.object(avro_rows, "now_ms", lambda: TS):  # the same bytes each time hypothesis replays
        bodies = [enc.encode(i + 1, ev) for i, ev in enumerate(events)]
    which = data.draw(st.integers(0, 1))
    assert _decode(codec, bodies[which]) == (which + 1, events[which])
    bad = mutate(data, bodies[which], bodies)
    try:
        with deadline(20):
            _, got = _decode(codec, bad)
    except EventLogError:
        return
    check_valid(codec.header, got)


def test_a_damaged_or_foreign_container_header_is_corrupt():
    codec = _codec(SCHEMA)
    prefix = codec.new_segment().prefix
    assert codec.segment_decoder(prefix) is not None
    for bad in (prefix[:10], prefix.replace(b"deflate", b"deflbte"), prefix.replace(b'"x"', b'"y"'),
                b"Obj\x00" + prefix[4:]):
        with pytest.raises(CorruptLogError):
            codec.segment_decoder(bad)
    other = _codec(pa.schema([("x", pa.int32()), ("s", pa.string())]))
    with pytest.raises(CorruptLogError, match="does not match"):
        codec.segment_decoder(other.new_segment().prefix)
    snappy = prefix.replace(b"\x0edeflate", b"\x0csnappy")  # a codec every reader may not have
    with pytest.raises(CorruptLogError):
        codec.segment_decoder(snappy)


# -- framing: 1.x blocks hold one record, 2.x blocks one event's rows ----------------------------------------


def test_framing_bounds_the_rows_of_a_block():
    sync = b"S" * 16
    header = b"Obj\x01" + _zz(0) + sync

    def frame(f: AvroFraming, count: int) -> int | None:
        data = header + _zz(count) + _zz(3) + b"abc" + sync
        f.prefix_length(lambda o, n: data[o : o + n], len(data))
        return f.body_length(lambda o, n: data[o : o + n], len(data), len(header))

    assert framing_for("avro", 1).max_records == 1 and framing_for("avro", 2).max_records == MAX_EVENT_RECORDS
    assert frame(framing_for("avro", 1), 1) == frame(framing_for("avro", 2), 1) == 2 + 3 + 16
    assert frame(framing_for("avro", 2), MAX_EVENT_RECORDS) == len(_zz(MAX_EVENT_RECORDS)) + 1 + 3 + 16
    with pytest.raises(Malformed, match="holds 1$"):  # 1.x: exactly as before
        frame(framing_for("avro", 1), 2)
    for count in (0, -1, MAX_EVENT_RECORDS + 1):
        with pytest.raises(Malformed, match="1 to"):
            frame(framing_for("avro", 2), count)


# -- the file log: damage, torn tails, verify ------------------------------------------------------------------


def _rows_at(t: int) -> list[dict]:
    return [{"x": t * 100 + i, "s": "r" * (t % 5)} for i in range(t % 3 + 1)]


def _make(root: str, times: int, segment_bytes: int, close: bool = True) -> list:
    log = FileLog(root, segment_bytes=segment_bytes)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA, encoding="avro")
    for t in range(times):
        cap.send(t, _rows_at(t))
        cap.advance_to(t + 1)
    cap.close() if close else cap.abort()
    return list(FileLog(root).reader("s", 0))


def _files(root: str) -> list[str]:
    d = os.path.join(root, "s", "part=0")
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f != ".lock")


def test_every_flip_and_truncation_gives_the_events_or_a_typed_error(tmp_path):
    """Single-byte changes and truncations of each file of a two-segment 2.0 Avro part (the container header,
    every block's count, size and sync marker, index entries): readers return the events as written (fewer
    when the newest segment was cut) or raise an EventLogError naming the file; a writer reopening the part
    raises (changing nothing) or repairs it without losing an event a reader returned."""
    probe = str(tmp_path / "probe")
    _make(probe, 4, 1 << 20)
    (seg,) = [p for p in _files(probe) if p.endswith(".avro")]
    prefix = ix.unpack_entry(open(seg.replace("00001.avro", "00001.index").replace("/0000", "/_0000"), "rb").read(),
                             ix.HEADER_SIZE).offset
    base = str(tmp_path / "base")
    original = _make(base, 4, (os.path.getsize(seg) + prefix) // 2)
    paths = _files(base)
    segs = [p for p in paths if p.endswith(".avro")]
    assert len(segs) == 2 and len(original) == 9
    rng = random.Random("flips-avro-2.0")
    root = str(tmp_path / "case")
    cases = 0
    for path in paths:
        data = open(path, "rb").read()
        name = os.path.relpath(path, base)
        if path.endswith(".index"):
            must = [*range(ix.HEADER_SIZE), *(ix.HEADER_SIZE + i * ix.ENTRY_SIZE + k for i in range(12) for k in (0, 28))]
        else:
            index = open(os.path.join(os.path.dirname(path), "_" + os.path.basename(path)[:-5] + ".index"), "rb").read()
            starts = [ix.unpack_entry(index, ix.HEADER_SIZE + i * ix.ENTRY_SIZE)
                      for i in range((len(index) - ix.HEADER_SIZE) // ix.ENTRY_SIZE)]
            must = [*range(0, 24), *(e.offset + k for e in starts for k in (0, 1, 2, 5)),
                    *(e.offset + e.length - k for e in starts for k in (1, 16)), starts[0].offset - 1]
        for mode in ("flip", "truncate"):
            for off in sample_offsets(len(data), rng, must if mode == "flip" else must[::3], 45):
                damaged_copy(base, root, name, data, mode, off, rng)
                short = mode == "truncate" and path == segs[-1]
                before = read_outcome(root, original, may_be_short=short)
                snapshot = {p: open(p, "rb").read() for p in _files(root)}
                try:
                    with deadline(20):
                        FileLog(root).writer("s", 0).close()
                except EventLogError:
                    assert {p: open(p, "rb").read() for p in _files(root)} == snapshot, "a refusing writer changed files"
                else:
                    after = read_outcome(root, original, may_be_short=short)
                    if before is not None and after is not None:
                        assert after >= before, f"readers saw {before} events before the writer reopened, {after} after"
                cases += 1
    assert cases > 200


def test_a_crash_mid_write_leaves_a_torn_tail_the_next_writer_cuts(tmp_path):
    """A writer killed while writing a block (a copy of its files taken then: the open segment, the block
    cut short, its index entry missing): readers stop cleanly before the torn block; the next writer cuts
    it, seals the segment (its sealed name), and appends after the last whole event."""
    live, root = str(tmp_path / "live"), str(tmp_path / "log")
    log = FileLog(live)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA, encoding="avro")
    for t in range(3):
        cap.send(t, _rows_at(t))
        cap.advance_to(t + 1)
    shutil.copytree(live, root, ignore=shutil.ignore_patterns(".lock"))
    whole = list(FileLog(root).reader("s", 0))
    assert len(whole) == 6
    (opened,) = [p for p in _files(root) if p.endswith(".avro.open")]
    index = opened.replace(".avro.open", ".index")
    size = os.path.getsize(opened)
    cap.send(3, _rows_at(3))  # the block the crash cuts
    cap.close()
    live_index = open(os.path.join(live, "s", "part=0", os.path.basename(index)), "rb").read()
    entry = ix.unpack_entry(live_index, ix.HEADER_SIZE + 6 * ix.ENTRY_SIZE)
    assert (entry.seq, entry.offset) == (7, size)
    block = open(_segment(live), "rb").read()[size : size + entry.length]
    assert len(block) > 20
    for cut in (1, 2, len(block) // 2, len(block) - 16, len(block) - 1):
        case = str(tmp_path / f"cut{cut}")
        shutil.copytree(root, case)
        with open(os.path.join(case, os.path.relpath(opened, root)), "ab") as f:
            f.write(block[:cut])
        reader = FileLog(case).reader("s", 0)
        assert [e.seq for e in reader] == [1, 2, 3, 4, 5, 6]
        assert reader.tail_problem is not None
        assert any("torn" in p.reason for p in FileLog(case).check_part("s", 0))
        log = FileLog(case)
        cap = Capture(log, "s", 0, 1)
        (rec,) = log.recoveries
        assert rec.bytes_cut == cut and rec.next_seq == 7 and cap.next_seq == 7
        cap.send(3, _rows_at(3))
        cap.close()
        got = list(FileLog(case).reader("s", 0))
        assert all(same(a, b) for a, b in zip(got, whole)) and [e.seq for e in got] == list(range(1, 9))
        assert not [p for p in _files(case) if p.endswith(".open")]
        assert FileLog(case).check_part("s", 0) == []
        assert os.path.exists(index.replace(root, case))


def test_verify_passes_on_a_good_2_0_avro_log_and_reports_damage(tmp_path):
    from click.testing import CliRunner

    from replay.cli import main

    root = str(tmp_path)
    _make(root, 6, 1500)
    r = CliRunner().invoke(main, ["verify", root, "--json"])
    assert r.exit_code == 0, r.output
    seg = sorted(p for p in _files(root) if p.endswith(".avro"))[0]
    index = open(os.path.join(os.path.dirname(seg), "_" + os.path.basename(seg)[:-5] + ".index"), "rb").read()
    entry = ix.unpack_entry(index, ix.HEADER_SIZE)
    data = bytearray(open(seg, "rb").read())
    data[entry.offset + entry.length // 2] ^= 0x01
    open(seg, "wb").write(bytes(data))
    r = CliRunner().invoke(main, ["verify", root, "--json"])
    assert r.exit_code == 1 and "checksum" in r.output
