"""Bounds before allocation: the format's limits (eventlog.limits, FORMAT.md "Limits") refused on write with
LimitError and on read with LogLimitError (a CorruptLogError) before anything is allocated for them."""

from __future__ import annotations

import base64
import json
import struct
import time
import tracemalloc

import numpy as np
import pyarrow as pa
import pytest
import zstandard

from eventlog import CorruptLogError, Messages, Progress, StreamHeader, open_log
from eventlog import limits as L
from eventlog.encoding import codec_for
from eventlog.encoding.zstd_frame import bounded_decompress, frame_bounds
from eventlog.errors import InvalidTimeError, LimitError, LogLimitError
from eventlog.header import header_checksum
from eventlog.time import TimeType
from tests.support.paths import SCHEMAS
from tests.support.strategies import avro_long as _zz


def _avro_body(codec, datum: bytes, *, content_size: bool = True) -> bytes:
    """A standalone Avro event block holding the raw event record ``datum``."""
    frame = zstandard.ZstdCompressor(write_content_size=content_size).compress(datum)
    return _zz(1) + _zz(len(frame)) + frame + codec._standalone_sync()


def _messages_datum(records: bytes, count_blocks: list[int], time_arity: int = 0) -> bytes:
    """seq 1, MESSAGES, time 0, no updates, then the records array: ``count_blocks`` block counts around
    ``records`` (the items, whatever they are)."""
    t = _zz(1) + _zz(0) if time_arity == 0 else _zz(1) + _zz(time_arity) + _zz(0) * time_arity + _zz(0)
    blocks = b"".join(_zz(c) for c in count_blocks[:-1])
    return _zz(1) + _zz(0) + t + _zz(0) + blocks + _zz(count_blocks[-1]) + records + _zz(0)


class _Peak:
    """Peak Python memory (tracemalloc) and pyarrow memory of a block of code."""

    def __enter__(self) -> "_Peak":
        tracemalloc.start()
        self._arrow = pa.total_allocated_bytes()
        self.t = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t
        self.python = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        self.arrow = pa.total_allocated_bytes() - self._arrow


# -- the limits themselves ------------------------------------------------------------------------------


def test_limits_are_documented_in_format_md():
    text = (SCHEMAS / "FORMAT.md").read_text()
    section = text[text.index(". Limits\n") :]
    for name, value in L.describe().items():
        assert f"`{name}`" in section, name
        assert f"{value:,}".replace(",", " ") in section or str(value) in section, (name, value)


def test_check_limit_and_decoded_bytes_bound():
    assert L.check_limit("x", 5, 5) == 5
    with pytest.raises(LimitError) as e:
        L.check_limit("x", 6, 5, stream="s", seq=3)
    assert not isinstance(e.value, CorruptLogError) and isinstance(e.value, ValueError)
    assert (e.value.stream, e.value.seq) == ("s", 3)
    with pytest.raises(LogLimitError) as e:
        L.check_limit("x", 6, 5, reading=True, path="f")
    assert isinstance(e.value, CorruptLogError) and isinstance(e.value, LimitError) and e.value.path == "f"
    assert L.decoded_bytes_bound(0) == L.MAX_EXPANSION_RATIO
    assert L.decoded_bytes_bound(39) == 39 * L.MAX_EXPANSION_RATIO
    assert L.decoded_bytes_bound(1 << 40) == L.MAX_EVENT_DECODED_BYTES


# -- headers: peers, time arity, schema size, header size -------------------------------------------------

SCHEMA = pa.schema([("a", pa.int64())])


def test_header_refuses_peers_over_the_limit_on_create():
    assert StreamHeader("s", L.MAX_PEERS, SCHEMA).peers == L.MAX_PEERS
    for peers in (L.MAX_PEERS + 1, 1 << 40):
        with pytest.raises(LimitError, match="peers"):
            StreamHeader("s", peers, SCHEMA)


def test_copy_with_2_40_workers_is_refused_before_writing(tmp_path):
    from replay.copy import copy

    src = open_log(tmp_path / "src")
    src.create_stream(StreamHeader("s", 1, SCHEMA))
    dst = open_log(tmp_path / "dst")
    t = time.perf_counter()
    with pytest.raises(LimitError, match="peers"):
        copy(src, dst, "s", peers=1099511627776)
    assert time.perf_counter() - t < 5 and dst.streams() == []


def _stored(doc: dict) -> bytes:
    doc["checksum"] = header_checksum(doc)
    return json.dumps(doc).encode()


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_header_with_2_40_peers_is_refused_on_read(tmp_path, version):
    doc = json.loads(StreamHeader("s", 2, SCHEMA).to_json())
    doc["peers"] = 1 << 40
    doc["version"] = version
    data = _stored(doc)
    if version == "1.0":
        data = json.dumps({k: v for k, v in json.loads(data).items() if k != "checksum"}).encode()
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "header.json").write_bytes(data)
    t = time.perf_counter()
    with pytest.raises(LogLimitError, match="peers") as e:
        open_log(tmp_path).header("s")
    assert time.perf_counter() - t < 1
    assert e.value.stream == "s" and e.value.path.endswith("header.json")


def test_product_time_arity_is_bounded():
    assert TimeType.parse(f"product:{L.MAX_TIME_ARITY}").arity == L.MAX_TIME_ARITY
    for spec in (f"product:{L.MAX_TIME_ARITY + 1}", "product:1000000000", "product:" + "9" * 100_000):
        t = time.perf_counter()
        with pytest.raises(LimitError, match="arity"):
            TimeType.parse(spec)
        assert time.perf_counter() - t < 0.5
    for arity in (L.MAX_TIME_ARITY + 1, 10**9):
        with pytest.raises(LimitError):
            TimeType(arity)
    for bad in (-1, True, "3", 1.0):
        with pytest.raises(InvalidTimeError):
            TimeType(bad)  # type: ignore[arg-type]


def test_header_with_product_1000000000_is_refused_on_read():
    doc = json.loads(StreamHeader("s", 2, SCHEMA).to_json())
    doc["time"] = "product:1000000000"
    with _Peak() as p, pytest.raises(LogLimitError, match="arity"):
        StreamHeader.from_json(_stored(doc), path="h")
    assert p.python < 1 << 20


def _deep(depth: int) -> pa.DataType:
    t: pa.DataType = pa.int64()
    for i in range(depth - 1):
        t = pa.struct([("x", t)]) if i % 2 else pa.list_(t)
    return t


def test_schema_depth_and_width_are_bounded_on_create_and_read():
    ok_deep = pa.schema([("d", _deep(L.MAX_SCHEMA_DEPTH))])
    StreamHeader("s", 1, ok_deep)
    too_deep = pa.schema([("d", _deep(L.MAX_SCHEMA_DEPTH + 1))])
    too_wide = pa.schema([(f"f{i}", pa.int8()) for i in range(L.MAX_SCHEMA_FIELDS + 1)])
    nested_wide = pa.schema([("s", pa.struct([(f"f{i}", pa.int8()) for i in range(L.MAX_SCHEMA_FIELDS)]))])
    for schema in (too_deep, too_wide, nested_wide):
        with pytest.raises(LimitError):
            StreamHeader("s", 1, schema)
        doc = json.loads(StreamHeader("s", 1, ok_deep).to_json())
        doc["schema"] = base64.b64encode(schema.serialize().to_pybytes()).decode()
        with pytest.raises(LogLimitError):
            StreamHeader.from_json(_stored(doc))


def test_header_size_is_bounded():
    with pytest.raises(LogLimitError, match="header size"):
        StreamHeader.from_json(b" " * (L.MAX_HEADER_BYTES + 1) + StreamHeader("s", 1, SCHEMA).to_json())
    long_names = pa.schema([("n" * 300_000 + str(i), pa.int8()) for i in range(8)])
    with pytest.raises(LimitError, match="header size"):
        StreamHeader("s", 1, long_names).to_json()


# -- avro events ------------------------------------------------------------------------------------------


def _avro(schema: pa.Schema, time: str = "int64"):  # noqa: ANN202
    return codec_for(StreamHeader("s", 1, schema, time, "avro"))


def test_avro_39_bytes_declaring_2_40_null_records():
    codec = _avro(pa.schema([("a", pa.null())]))
    body = _avro_body(codec, _messages_datum(b"", [1 << 40]))
    assert len(body) <= 40
    with _Peak() as p, pytest.raises(LogLimitError, match="records"):
        codec.standalone_decoder().decode(body)
    assert p.seconds < 1 and p.python < 1 << 20


def test_avro_boolean_records_over_the_limit_are_counted_before_decoding():
    codec = _avro(pa.schema([pa.field("b", pa.bool_(), nullable=False)]))
    n = L.MAX_EVENT_RECORDS + 1
    body = _avro_body(codec, _messages_datum(b"\x01" * n, [n]))  # every record present: 1 MiB of trues
    assert len(body) < 1000
    with _Peak() as p, pytest.raises(LogLimitError, match="records"):
        codec.standalone_decoder().decode(body)
    assert p.python < 8 * n  # the decompressed bytes, not ~200 bytes a record
    body = _avro_body(codec, _messages_datum(b"\x01" * 100, [1 << 40]))  # a count the bytes do not hold
    with pytest.raises(CorruptLogError):
        codec.standalone_decoder().decode(body)


def test_avro_a_later_array_block_is_counted_before_its_items():
    codec = _avro(pa.schema([("a", pa.null())]))
    body = _avro_body(codec, _messages_datum(b"", [1, 1 << 40]))
    with pytest.raises(LogLimitError, match="records"):
        codec.standalone_decoder().decode(body)


def test_avro_nested_lists_of_nulls_are_counted():
    codec = _avro(pa.schema([pa.field("xs", pa.list_(pa.null()), nullable=False)]))
    record = _zz(1 << 40) + _zz(0)  # one record: a list of 2^40 nulls (0 bytes each)
    with _Peak() as p, pytest.raises(LogLimitError, match="values"):
        codec.standalone_decoder().decode(_avro_body(codec, _messages_datum(record, [1])))
    assert p.seconds < 1 and p.python < 1 << 20
    ok = _zz(3) + _zz(0)
    seq, ev = codec.standalone_decoder().decode(_avro_body(codec, _messages_datum(ok, [1])))
    assert ev.records.to_pylist() == [{"xs": [None, None, None]}]


def test_avro_progress_updates_are_bounded():
    codec = _avro(pa.schema([("a", pa.int64())]))
    n = L.MAX_EVENT_UPDATES + 1
    datum = _zz(1) + _zz(1) + _zz(0) + _zz(n) + (_zz(0) + _zz(1)) * n + _zz(0) + _zz(0)
    with _Peak() as p, pytest.raises(LogLimitError, match="updates"):
        codec.standalone_decoder().decode(_avro_body(codec, datum))
    assert p.python < 16 * n


def test_avro_decompressed_size_is_bounded_without_trusting_the_frame(monkeypatch):
    codec = _avro(pa.schema([("a", pa.int64())]))
    zeros = b"\x00" * (4 << 20)
    frame = bytearray(zstandard.ZstdCompressor().compress(zeros))
    assert frame[4] >> 6 == 2  # a 4-byte content size: make it declare 4 GiB - 1
    frame[6:10] = b"\xff\xff\xff\xff"
    body = _zz(1) + _zz(len(frame)) + bytes(frame) + codec._standalone_sync()
    with _Peak() as p, pytest.raises(LogLimitError, match="declares 4294967295"):
        codec.standalone_decoder().decode(body)
    assert p.python < 1 << 20
    # zstd cannot expand more than ~32768 times, so honest frames pass the ratio; a lower ratio shows that
    # frames with and without a content size are held to it before they are decompressed
    monkeypatch.setattr(L, "MAX_EXPANSION_RATIO", 16)
    for kw in ({}, {"write_content_size": False}):
        frame = zstandard.ZstdCompressor(**kw).compress(zeros)
        body = _zz(1) + _zz(len(frame)) + frame + codec._standalone_sync()
        with _Peak() as p, pytest.raises(LogLimitError, match="over the format's limit of"):
            codec.standalone_decoder().decode(body)
        assert p.python < 1 << 20


def test_zstd_frame_bounds_do_not_trust_the_declared_size():
    dctx = zstandard.ZstdDecompressor()
    for data in (b"", b"abc" * 1000, bytes(range(256)) * 2000, b"\x00" * 1_000_000):
        for kw in ({}, {"write_content_size": False}, {"write_checksum": True}):
            frame = zstandard.ZstdCompressor(**kw).compress(data)
            length, bound = frame_bounds(frame)
            assert length == len(frame) and bound >= len(data)
            assert bounded_decompress(dctx, frame, 1 << 30) == data
            with pytest.raises(ValueError):
                frame_bounds(frame + b"x")
            with pytest.raises(ValueError):
                frame_bounds(frame[:-1])
    rle = b"\x28\xb5\x2f\xfd" + b"\x00\x00" + (((1 << 20) << 3) | (1 << 1) | 1).to_bytes(3, "little") + b"a"
    with pytest.raises(ValueError, match="maximum block size"):  # an RLE block stating 1 MiB
        frame_bounds(rle)
    frame = bytearray(zstandard.ZstdCompressor().compress(b"abc"))
    assert frame[4] >> 6 == 0 and frame[4] & 0x20  # single segment, a 1-byte content size
    frame[5] = 200  # declares 200 bytes; its one raw block holds 3
    with pytest.raises(ValueError, match="declares 200"):
        bounded_decompress(dctx, bytes(frame), 1 << 30)
    with pytest.raises(LogLimitError):
        bounded_decompress(dctx, bytes(frame), 100)


def test_avro_encoder_refuses_events_over_the_limits():
    codec = _avro(pa.schema([pa.field("xs", pa.list_(pa.int8()))]))
    enc = codec.standalone_encoder()
    n = L.MAX_AVRO_EVENT_VALUES
    many = pa.RecordBatch.from_arrays([pa.ListArray.from_arrays([0, n], pa.array(np.zeros(n, np.int8)))], ["xs"])
    with pytest.raises(LimitError, match="values") as e:
        enc.encode(7, Messages(0, many))  # 1 row + n items
    assert not isinstance(e.value, CorruptLogError) and e.value.seq == 7
    rows = pa.RecordBatch.from_arrays([pa.array([[]] * (L.MAX_EVENT_RECORDS + 1), pa.list_(pa.int8()))], ["xs"])
    with pytest.raises(LimitError, match="records"):
        enc.encode(1, Messages(0, rows))


@pytest.mark.parametrize("scanned", [False, True])
def test_avro_values_limit_is_the_same_for_writer_and_reader(monkeypatch, scanned):
    """An event of exactly the limit is written and read back; one more value is refused by both (the
    limit lowered to 1000 so that the scan path runs in a test's time)."""
    import eventlog.encoding.avro as avro_mod
    import eventlog.encoding.avro_scan as scan_mod

    for mod in (avro_mod, scan_mod):
        monkeypatch.setattr(mod, "MAX_AVRO_EVENT_VALUES", 1000)
    codec = _avro(pa.schema([pa.field("xs", pa.list_(pa.int8())), pa.field("s", pa.string())]))
    if scanned:
        codec.scanner.bounded_by_size = lambda size: False
    at_limit = pa.RecordBatch.from_pylist([{"xs": [1] * 98, "s": "x"}] * 10, schema=codec.header.schema)
    assert avro_mod.count_values(at_limit) == 1000
    body = codec.standalone_encoder().encode(1, Messages(0, at_limit))
    assert codec.standalone_decoder().decode(body)[1].records.equals(at_limit)
    over = pa.RecordBatch.from_pylist([{"xs": [1] * 99, "s": "x"}] + [{"xs": [1] * 98, "s": "x"}] * 9,
                                      schema=codec.header.schema)
    with pytest.raises(LimitError, match="values"):
        codec.standalone_encoder().encode(1, Messages(0, over))
    monkeypatch.setattr(avro_mod, "MAX_AVRO_EVENT_VALUES", 2000)  # a writer with a higher limit
    body = codec.standalone_encoder().encode(1, Messages(0, over))
    with pytest.raises(LogLimitError, match="values"):  # (unscanned: too large for its size to bound it)
        codec.standalone_decoder().decode(body)


# -- arrow events -----------------------------------------------------------------------------------------


def _arrow_body(batch: pa.RecordBatch) -> tuple[object, bytes]:
    codec = codec_for(StreamHeader("s", 1, batch.schema))
    return codec, codec.standalone_encoder().encode(1, Messages(0, batch))


def test_arrow_row_count_over_the_limit_is_refused_before_pyarrow():
    n = 12345
    batch = pa.RecordBatch.from_pylist([{"s": "abcde", "l": [1, 2]}] * n)
    codec, body = _arrow_body(batch)
    bad = body.replace(struct.pack("<q", n), struct.pack("<q", n * 100))
    with pytest.raises(LogLimitError, match="records"):
        codec.standalone_decoder().decode(bad)


def test_arrow_arrays_without_buffers_are_counted():
    nulls = pa.ListArray.from_arrays(pa.array([0, 3], pa.int32()), pa.nulls(3))
    codec, body = _arrow_body(pa.RecordBatch.from_arrays([nulls], ["xs"]))
    assert body.count(struct.pack("<qq", 3, 3)) == 1  # the child's FieldNode: length 3, 3 nulls
    bad = body.replace(struct.pack("<qq", 3, 3), struct.pack("<qq", 1 << 40, 1 << 40))
    with _Peak() as p, pytest.raises(LogLimitError, match="values"):
        codec.standalone_decoder().decode(bad)
    assert p.seconds < 1


def test_arrow_declared_decompressed_size_is_bounded():
    batch = pa.RecordBatch.from_arrays([pa.array(np.arange(1000, dtype=np.int64))], ["a"])
    codec, body = _arrow_body(batch)
    assert body.count(struct.pack("<q", 8000)) == 1  # the data buffer's uncompressed-length prefix
    bad = body.replace(struct.pack("<q", 8000), struct.pack("<q", 1 << 40))
    with _Peak() as p, pytest.raises(LogLimitError, match="decompressed"):
        codec.standalone_decoder().decode(bad)
    assert p.arrow < 1 << 20


def test_arrow_metadata_and_body_sizes_are_bounded(monkeypatch):
    codec, body = _arrow_body(pa.RecordBatch.from_arrays([pa.array([1])], ["a"]))
    huge_meta = b"\xff\xff\xff\xff" + struct.pack("<i", 1 << 30) + body[8:]
    with pytest.raises(LogLimitError, match="metadata"):
        codec.standalone_decoder().decode(huge_meta)
    import eventlog.encoding.arrow as arrow_mod

    monkeypatch.setattr(arrow_mod, "MAX_EVENT_BYTES", len(body) - 1)
    with pytest.raises(LogLimitError, match="stored size"):
        codec.standalone_decoder().decode(body)


def test_arrow_encoder_refuses_events_over_the_limits():
    n = L.MAX_EVENT_RECORDS + 1
    batch = pa.RecordBatch.from_arrays([pa.array(np.zeros(n, np.int8))], ["a"])
    codec = codec_for(StreamHeader("s", 1, batch.schema))
    with pytest.raises(LimitError, match="records"):
        codec.standalone_encoder().encode(1, Messages(0, batch))
    v = L.MAX_EVENT_VALUES
    wide = pa.RecordBatch.from_arrays([pa.ListArray.from_arrays([0, v], pa.array(np.zeros(v, np.int8)))], ["xs"])
    codec = codec_for(StreamHeader("s", 1, wide.schema))
    with pytest.raises(LimitError, match="values") as e:
        codec.standalone_encoder().encode(1, Messages(0, wide))
    assert not isinstance(e.value, CorruptLogError)
    with pytest.raises(LimitError, match="updates"):
        codec.standalone_encoder().encode(1, Progress(tuple((i, 1) for i in range(L.MAX_EVENT_UPDATES + 1))))


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_capture_refuses_an_event_over_the_limits_and_stays_usable(tmp_path, encoding):
    from capture import Capture

    schema = pa.schema([pa.field("a", pa.int8(), nullable=False)])
    big = pa.RecordBatch.from_arrays([pa.array(np.zeros(L.MAX_EVENT_RECORDS + 1, np.int8))], schema=schema)
    log = open_log(tmp_path)
    with Capture(log, "s", worker=0, peers=1, schema=schema, encoding=encoding) as cap:
        cap.send(0, [{"a": 1}])
        with pytest.raises(LimitError, match="records"):
            cap.send(0, big)
        cap.send(0, big.slice(0, 3))
        cap.advance_to(1)
    events = [e.event for e in open_log(tmp_path).reader("s", 0)]
    assert [ev.records.num_rows for ev in events if isinstance(ev, Messages)] == [1, 3]


# these tests poke at the files of the 1.x layout (format 2.0 files: test_file_format2.py)
pytestmark = pytest.mark.usefixtures("file_format_1")
