"""Nothing unsafe is returned: every batch a decoder hands out is validated, damaged bodies give
CorruptLogError (the file log adds stream, part, seq, offset and file), an Avro block holds exactly the
record it declares typed to the schema, decimals round-trip exactly through Avro, and a schema an encoding
cannot store is refused by ``codec_for`` before anything is written."""

from __future__ import annotations

import decimal
import io
import json
import struct

import fastavro
import pyarrow as pa
import pytest
import zstandard
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from eventlog import CorruptLogError, EventLogError, Messages, Progress, SchemaMismatchError, StreamHeader, open_log
from eventlog.encoding import codec_for
from tests.support.damage import check_valid, mutate, storable
from tests.support.strategies import avro_long as _zz
from tests.support.strategies import batches, schemas

D = decimal.Decimal


def _header(schema: pa.Schema, encoding: str = "arrow", time: str = "int64") -> StreamHeader:
    return StreamHeader("s", 1, schema, time, encoding)


# -- item 2: a row count beyond the buffers ---------------------------------------------------------------

N = 12345
STRINGS = pa.schema([("s", pa.string()), ("l", pa.list_(pa.int64()))])


def _inflated(body: bytes, factor: int) -> bytes:
    """``body`` with its row count (and every array length equal to it) multiplied by ``factor``."""
    assert body.count(struct.pack("<q", N)) >= 2
    return body.replace(struct.pack("<q", N), struct.pack("<q", N * factor))


@pytest.mark.parametrize("factor", [2, 50])
def test_arrow_row_count_beyond_the_buffers_is_corrupt(factor):
    codec = codec_for(_header(STRINGS))
    batch = pa.RecordBatch.from_pylist([{"s": "abcde", "l": [1, 2]}] * N, schema=STRINGS)
    enc = codec.new_segment()
    body = enc.encode(1, Messages(0, batch))
    bad = _inflated(body, factor)
    with pytest.raises(CorruptLogError, match="too small|length"):
        codec.standalone_decoder().decode(bad)
    segment = pa.py_buffer(enc.prefix + bad)
    with pytest.raises(CorruptLogError, match="too small|length"):
        codec.segment_decoder(enc.prefix).decode_at(segment, len(enc.prefix), len(bad))


def test_file_log_reports_an_unsafe_batch_with_checksums_that_match(tmp_path):
    from connectors.files import index as ix

    log = open_log(tmp_path)
    log.create_stream(_header(STRINGS))
    w = log.writer("s", 0)
    w.append(Messages(0, pa.RecordBatch.from_pylist([{"s": "x", "l": [1]}], schema=STRINGS)))
    w.append(Messages(0, pa.RecordBatch.from_pylist([{"s": "abcde", "l": [1, 2]}] * N, schema=STRINGS)))
    w.close()
    part = tmp_path / "s" / "part-00000"
    seg = next(p for p in part.iterdir() if p.suffix == ".arrows")
    idx = seg.with_suffix(".index")
    raw, index = bytearray(seg.read_bytes()), bytearray(idx.read_bytes())
    pos = ix.entry_position(1, 2)
    e = ix.unpack_entry(index, pos)
    body = _inflated(bytes(raw[e.offset : e.offset + e.length]), 2)
    raw[e.offset : e.offset + e.length] = body  # same length: the row count is a fixed-width field
    index[pos : pos + ix.ENTRY_SIZE] = ix.pack_entry(e._replace(crc=ix.checksum(body)))  # checksums match
    seg.write_bytes(bytes(raw))
    idx.write_bytes(bytes(index))
    r = open_log(tmp_path).reader("s", 0)
    assert next(iter(r)).seq == 1
    with pytest.raises(CorruptLogError) as err:
        list(open_log(tmp_path).reader("s", 0))
    assert (err.value.stream, err.value.part, err.value.seq, err.value.offset, err.value.path) == (
        "s", 0, 2, e.offset, str(seg))


# -- property: any damage to a body gives a valid event or a typed error ----------------------------------


@pytest.mark.parametrize("encoding", ["arrow", "avro", "avro-scanned"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(schema=schemas(), time=st.sampled_from(["int64", "product:2"]), data=st.data())
def test_damaged_bodies_decode_to_a_valid_event_or_a_typed_error(encoding, schema, time, data):
    """``avro-scanned``: the Avro decoder scans every body before decoding it, as it does for bodies too
    large for their size alone to bound their counts."""
    scanned = encoding == "avro-scanned"
    encoding = encoding.split("-")[0]
    assume(storable(schema, encoding))
    header = _header(schema, encoding, time)
    codec = codec_for(header)
    if scanned:
        codec.scanner.bounded_by_size = lambda size: False  # type: ignore[method-assign]
    enc = codec.standalone_encoder()
    k = header.time_type.arity
    tm = 3 if k == 0 else (3,) * k
    events = [Messages(tm, data.draw(batches(schema))), Progress(((header.time_type.minimum, -1), (tm, 1)))]
    bodies = [enc.encode(i + 1, ev) for i, ev in enumerate(events)]
    which = data.draw(st.integers(0, 1))
    dec = codec.standalone_decoder()
    seq, back = dec.decode(bodies[which])
    assert seq == which + 1 and back == events[which]  # undamaged: the exact original
    bad = mutate(data, bodies[which], bodies)
    try:
        seq, got = codec.standalone_decoder().decode(bad)
    except EventLogError:
        return
    if bad == bodies[which]:
        assert got == events[which]
    check_valid(header, got)


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_damaged_segment_prefix_is_corrupt(encoding, data):
    """The first bytes of a segment (the Arrow schema message, the Avro container header) damaged: the
    decoder is refused with CorruptLogError (never a raw OSError or SchemaParseException), or the damage
    left a prefix that still matches the stream."""
    codec = codec_for(_header(STRINGS, encoding))
    enc = codec.new_segment()
    body = enc.encode(1, Messages(0, pa.RecordBatch.from_pylist([{"s": "x", "l": [1]}], schema=STRINGS)))
    prefix = mutate(data, enc.prefix, [])
    try:
        dec = codec.segment_decoder(prefix)
    except CorruptLogError:
        return
    try:
        seq, ev = dec.decode_at(pa.py_buffer(prefix + body), len(prefix), len(body))
    except CorruptLogError:
        return
    assert seq == 1 and ev.records.to_pylist() == [{"s": "x", "l": [1]}]


# -- Avro: exactly the record the block declares, typed to the schema --------------------------------------


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(schema=schemas(), time=st.sampled_from(["int64", "product:3"]), data=st.data())
def test_avro_scan_counts_what_the_encoder_counts(schema, time, data):
    """The reader's scan of an event's bytes and the writer's count of its Arrow batch agree (the limit is
    the same on both sides), and the scan walks exactly the bytes fastavro decodes."""
    from eventlog.encoding.avro import count_values

    assume(storable(schema, "avro"))
    codec = codec_for(_header(schema, "avro", time))
    batch = data.draw(batches(schema, max_rows=20))
    k = codec.header.time_type.arity
    tm = 3 if k == 0 else (3,) * k
    for event in (Messages(tm, batch), Progress(((codec.header.time_type.minimum, -1), (tm, 1)))):
        body = codec.standalone_encoder().encode(1, event)
        size_end = body.index(b"\x28\xb5\x2f\xfd")  # the zstd frame follows the block's two varints
        raw = zstandard.ZstdDecompressor().decompress(body[size_end : len(body) - 16])
        shape = codec.scanner.scan(raw)
        if isinstance(event, Messages):
            assert (shape.kind, shape.records, shape.updates) == (0, batch.num_rows, 0)
            assert shape.values == count_values(batch)
        else:
            assert (shape.kind, shape.records, shape.updates) == (1, 0, 2)
        assert codec.scanner.bounded_by_size(len(raw)) or len(raw) * codec.scanner.values_per_byte > 0





def _avro_block(codec, datum: bytes) -> bytes:  # noqa: ANN001
    frame = zstandard.ZstdCompressor().compress(datum)
    return _zz(1) + _zz(len(frame)) + frame + codec._standalone_sync()


def _datum(codec, rec: dict) -> bytes:  # noqa: ANN001
    out = io.BytesIO()
    fastavro.schemaless_writer(out, codec.raw_parsed, rec)
    return out.getvalue()


def test_avro_block_holds_exactly_one_record_of_the_schema():
    schema = pa.schema([pa.field("a", pa.int8(), nullable=False)])
    codec = codec_for(_header(schema, "avro"))
    good = {"seq": 1, "kind": "MESSAGES", "time": 5, "updates": [], "records": [{"a": 1}, {"a": -2}]}
    seq, ev = codec.standalone_decoder().decode(_avro_block(codec, _datum(codec, good)))
    assert ev.records.to_pylist() == [{"a": 1}, {"a": -2}] and ev.time == 5
    bad_records = [
        _datum(codec, good) + b"\x00",  # bytes after the record (fastavro alone ignores them)
        _datum(codec, dict(good, records=[{"a": 300}])),  # an Avro int that is no int8
        _datum(codec, dict(good, updates=[{"time": 1, "delta": 1}])),  # messages with updates
        _datum(codec, dict(good, kind="PROGRESS", time=None)),  # progress with records
        _datum(codec, dict(good, records=[])),  # messages without records
        _datum(codec, dict(good, seq=0)),
        _datum(codec, good)[:-3],
    ]
    for datum in bad_records:
        with pytest.raises(CorruptLogError):
            codec.standalone_decoder().decode(_avro_block(codec, datum))
    frame = zstandard.ZstdCompressor().compress(_datum(codec, good)) + b"junk"  # bytes after the frame
    with pytest.raises(CorruptLogError):
        codec.standalone_decoder().decode(_zz(1) + _zz(len(frame)) + frame + codec._standalone_sync())


def test_arrow_progress_deltas_are_integers():
    codec = codec_for(_header(STRINGS))
    body = codec.standalone_encoder().encode(1, Progress(((0, -1), (1, 10))))
    assert body.count(b"[1, 10]]") == 1
    with pytest.raises(CorruptLogError, match="not an integer"):
        codec.standalone_decoder().decode(body.replace(b"[1, 10]]", b"[1, 1e1]"))
    with pytest.raises(CorruptLogError, match="not an int64"):
        codec.standalone_decoder().decode(body.replace(b"[1, 10]]", b'[1,"1"]]'))


# -- item 10: decimals through Avro ---------------------------------------------------------------------


@st.composite
def _decimal_columns(draw: st.DrawFn) -> tuple[pa.DataType, list]:
    make, max_p = draw(st.sampled_from([(pa.decimal32, 9), (pa.decimal64, 18), (pa.decimal128, 38),
                                        (pa.decimal256, 76)]))
    p = draw(st.integers(1, max_p))
    s = draw(st.integers(0, p))
    t = make(p, s)
    unscaled = st.integers(-(10**p) + 1, 10**p - 1)
    exact = decimal.Context(prec=100)
    values = draw(st.lists(st.none() | unscaled.map(lambda u: D(u).scaleb(-s, exact)), min_size=1, max_size=5))
    return t, values


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_decimal_columns(), st.sampled_from(["plain", "struct", "list"]))
def test_avro_stores_decimals_exactly(column, nesting):
    t, values = column
    arr = pa.array(values, type=t)
    if nesting == "struct":
        arr = pa.StructArray.from_arrays([arr], names=["d"])
    elif nesting == "list":
        arr = pa.ListArray.from_arrays(pa.array([0, len(values) // 2, len(values)], pa.int32()), arr)
    batch = pa.RecordBatch.from_arrays([arr], ["c"])
    codec = codec_for(_header(batch.schema, "avro"))
    seq, back = codec.standalone_decoder().decode(codec.standalone_encoder().encode(1, Messages(0, batch)))
    assert back.records.equals(batch) and back.records.to_pylist() == batch.to_pylist()


def test_avro_decimal_segment_reads_in_a_third_party_reader(tmp_path):
    schema = pa.schema([("price", pa.decimal128(38, 9)), ("big", pa.decimal256(60, 0))])
    rows = [{"price": D("12345678901234567890123456789.123456789"), "big": D(-(10**59) + 7)},
            {"price": None, "big": D(0)}]
    log = open_log(tmp_path)
    log.create_stream(StreamHeader("s", 1, schema, "int64", "avro"))
    w = log.writer("s", 0)
    w.append(Messages(0, pa.RecordBatch.from_pylist(rows, schema=schema)))
    w.close()
    assert next(iter(open_log(tmp_path).reader("s", 0))).event.records.to_pylist() == rows
    seg = next(p for p in (tmp_path / "s" / "part-00000").iterdir() if p.suffix == ".avro")
    with open(seg, "rb") as f:
        stored = json.loads(fastavro.reader(f).metadata["avro.schema"])
        f.seek(0)
        (event,) = list(fastavro.reader(f))
    assert event["records"] == rows  # fastavro applies the decimal logical type
    record = next(fl for fl in stored["fields"] if fl["name"] == "records")["type"]["items"]
    price = record["fields"][0]["type"][1]
    assert (price["type"], price["logicalType"], price["precision"], price["scale"], price["size"]) == (
        "fixed", "decimal", 38, 9, 16)


@pytest.mark.parametrize(
    "t",
    [pa.uint64(), pa.float16(), pa.map_(pa.string(), pa.int64()), pa.decimal128(10, -2),
     pa.dense_union([pa.field("a", pa.int8())]), pa.struct([("a", pa.int8()), ("a", pa.int16())])],
    ids=str,
)
def test_codec_for_refuses_what_an_encoding_cannot_store(t):
    schema = pa.schema([("c", t)])
    with pytest.raises(SchemaMismatchError) as e:
        codec_for(_header(schema, "avro"))
    assert e.value.stream == "s"
    codec_for(_header(schema, "arrow"))  # the arrow encoding stores any Arrow type


# these tests poke at the files of the 1.x layout (format 2.0 files: test_file_format2.py)
pytestmark = pytest.mark.usefixtures("file_format_1")
