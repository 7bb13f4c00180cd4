"""Messages rows of 2.x Avro segments encoded column by column (``eventlog.encoding.avro_flat``): for every
flat schema, value (extremes, nulls, empty and multi-byte strings, NaN and signed zeros) and slice, the bytes
are exactly fastavro's; schemas with other types keep the fastavro path; a log written either way reads back
the same."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capture import Capture
from eventlog import Messages, StreamHeader, open_log
from eventlog.encoding.avro_flat import row_encoder
from eventlog.encoding.avro_rows import AvroRowsCodec
from eventlog.time import TimeType
from tests.support.strategies import _value, batches

FLAT = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.float32(),
        pa.float64(), pa.bool_(), pa.string(), pa.large_string(), pa.binary(), pa.large_binary(), pa.binary(3),
        pa.timestamp("ms"), pa.timestamp("ns", tz="UTC"), pa.date32(), pa.time64("us"), pa.null()]


def _flat_value(t: pa.DataType, nullable: bool) -> st.SearchStrategy:
    if pa.types.is_fixed_size_binary(t):
        s = st.binary(min_size=t.byte_width, max_size=t.byte_width)
        return st.one_of(st.none(), s) if nullable else s
    if pa.types.is_floating(t):
        s = st.floats(width=t.bit_width, allow_nan=True)  # NaN (quiet) and signed zeros
        return st.one_of(st.none(), s) if nullable else s
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        s = st.text(max_size=40)  # multi-byte UTF-8, lengths over 63 bytes (two-byte varints)
        return st.one_of(st.none(), s) if nullable else s
    return _value(t, nullable)


@st.composite
def flat_batches(draw: st.DrawFn) -> pa.RecordBatch:
    names = draw(st.lists(st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True), min_size=1, max_size=6,
                          unique=True))
    fields = []
    for n in names:
        t = draw(st.sampled_from(FLAT))
        fields.append(pa.field(n, t, nullable=pa.types.is_null(t) or draw(st.booleans())))
    schema = pa.schema(fields)
    rows = draw(st.integers(1, 30))
    cols = [pa.array(draw(st.lists(_flat_value(f.type, f.nullable), min_size=rows, max_size=rows)), type=f.type)
            for f in schema]
    batch = pa.RecordBatch.from_arrays(cols, schema=schema)
    start = draw(st.integers(0, rows - 1))  # a slice: offsets into the buffers
    return batch.slice(start, draw(st.integers(1, rows - start)))


def _codec(schema: pa.Schema, time: str = "int64") -> AvroRowsCodec:
    return AvroRowsCodec(StreamHeader("s", 1, schema, TimeType.parse(time), "avro", version=(2, 0)))


def _both(codec: AvroRowsCodec, event: Messages, seq: int, ts: int) -> tuple[bytes, bytes]:
    fast = codec.message_rows(seq, event, ts)
    flat, codec._flat = codec._flat, None
    try:
        slow = codec.message_rows(seq, event, ts)
    finally:
        codec._flat = flat
    return fast, slow


@given(batch=flat_batches(), seq=st.integers(1, 2**63 - 1), time=st.integers(0, 2**63 - 1),
       ts=st.integers(0, 2**45))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_flat_rows_are_fastavros_bytes(batch, seq, time, ts):
    codec = _codec(batch.schema)
    assert codec._flat is not None
    fast, slow = _both(codec, Messages(time, batch), seq, ts)
    assert fast == slow


@given(batch=flat_batches(), time=st.lists(st.integers(0, 2**40), min_size=2, max_size=3))
@settings(max_examples=50, deadline=None)
def test_flat_rows_with_product_times(batch, time):
    codec = _codec(batch.schema, f"product:{len(time)}")
    fast, slow = _both(codec, Messages(tuple(time), batch), 5, 1_700_000_000_000)
    assert fast == slow


def test_extremes_of_every_integer_width_and_large_batches():
    ints = {t: [lo, hi, 0, -1 if lo < 0 else 1, *(min(v, hi) for v in (63, 64, 8191, 8192)), None]
            for t, lo, hi in [(pa.int8(), -128, 127), (pa.int16(), -(2**15), 2**15 - 1),
                              (pa.int32(), -(2**31), 2**31 - 1), (pa.int64(), -(2**63), 2**63 - 1),
                              (pa.uint8(), 0, 255), (pa.uint16(), 0, 2**16 - 1), (pa.uint32(), 0, 2**32 - 1)]}
    schema = pa.schema([pa.field(f"c{i}", t) for i, t in enumerate(ints)] +
                       [pa.field("f", pa.float64()), pa.field("s", pa.string())])
    cols = [pa.array(v, type=t) for t, v in ints.items()]
    cols += [pa.array([math.inf, -math.inf, -0.0, math.nan, 1e308, 5e-324, None, 0.0, 1.5]),
             pa.array(["", "é" * 100, "x" * 20_000, None, "a", "ü", "\U0001F600", "", "z"])]
    codec = _codec(schema)
    small = pa.RecordBatch.from_arrays(cols, schema=schema)
    fast, slow = _both(codec, Messages(3, small), 7, 123)
    assert fast == slow
    rng = np.random.default_rng(4)
    n = 50_000
    big = pa.record_batch([pa.array(rng.integers(-(2**62), 2**62, n)), pa.array(rng.random(n)),
                           pa.array([f"{i:x}" * (i % 7) for i in range(n)])], names=["a", "b", "c"])
    codec = _codec(big.schema)
    fast, slow = _both(codec, Messages(1, big), 2, 3)
    assert fast == slow


@pytest.mark.parametrize("t", [pa.decimal128(10, 2), pa.list_(pa.int64()), pa.struct([("a", pa.int64())]),
                               pa.string_view()])
def test_other_types_keep_fastavro(t):
    assert row_encoder(pa.schema([pa.field("x", pa.int64()), pa.field("y", t)])) is None
    assert _codec(pa.schema([pa.field("x", pa.int64()), pa.field("y", t)]))._flat is None


LOGGED = pa.schema([pa.field("a", pa.int64()), pa.field("s", pa.string()), pa.field("t", pa.timestamp("us")),
                    pa.field("b", pa.bool_(), nullable=False)])


@given(batch=batches(LOGGED, max_rows=20))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_log_written_either_way_reads_back_the_same(tmp_path_factory, batch):
    got = []
    for flat in (True, False):
        AvroRowsCodec.flat_rows = flat
        try:
            root = str(tmp_path_factory.mktemp("flat"))
            with Capture(open_log(root), "s", 0, 1, schema=batch.schema, encoding="avro") as cap:
                cap.send(4, batch)
        finally:
            AvroRowsCodec.flat_rows = True
        got.append([e.event for e in open_log(root).reader("s", 0)])
    assert got[0] == got[1]
    assert [e.records for e in got[0] if isinstance(e, Messages)] == [batch]
