"""``eventlog.encoding.validate.validate_full`` accepts exactly what ``RecordBatch.validate(full=True)`` accepts:
for well-formed batches of every kind of column, for string and binary columns whose buffers were tampered
with (offsets out of order or out of bounds, bytes that are not UTF-8, a null count the bitmap disagrees with,
sliced arrays), and for integer and floating-point columns with tampered null counts, bitmaps and buffer sizes,
property-tested — the string pass both in the C extension and in numpy."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventlog.encoding import validate
from eventlog.encoding.validate import validate_full

TYPES = [pa.string(), pa.binary(), pa.large_string(), pa.large_binary()]


def arrow_says(batch: pa.RecordBatch) -> bool:
    try:
        batch.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def ours_says(batch: pa.RecordBatch) -> bool:
    try:
        validate_full(batch)
    except pa.ArrowInvalid:
        return False
    return True


def tampered(typ: pa.DataType, values: list[bytes], offsets_edit: list[tuple[int, int]],
             data_edit: list[tuple[int, int]], null_count: int, offset: int) -> pa.Array:
    """An array of ``typ`` built from raw buffers: ``values`` laid out, then offsets and data bytes overwritten."""
    width = np.int64 if typ in (pa.large_string(), pa.large_binary()) else np.int32
    offs = np.zeros(len(values) + 1, width)
    offs[1:] = np.cumsum([len(v) for v in values]) if values else []
    data = bytearray(b"".join(values))
    for i, v in offsets_edit:
        if offs.size:
            offs[i % offs.size] = v
    for i, v in data_edit:
        if data:
            data[i % len(data)] = v
    n = len(values) - offset
    return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(offs.tobytes()), pa.py_buffer(bytes(data))],
                                 null_count=null_count, offset=offset)


TAMPERED_STRINGS = dict(
    typ=st.sampled_from(TYPES),
    values=st.lists(st.one_of(st.binary(max_size=12), st.text(max_size=6).map(str.encode)), min_size=1, max_size=20),
    offsets_edit=st.lists(st.tuples(st.integers(0, 40), st.integers(-5, 300)), max_size=2),
    data_edit=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=3),
    null_count=st.sampled_from([0, 0, 0, 1]), offset=st.integers(0, 1))
"""A string or binary column's values, offsets and bytes overwritten, null count, slice (``tampered``)."""


@settings(max_examples=400, deadline=None)
@given(**TAMPERED_STRINGS)
def test_same_verdict_as_arrow_on_tampered_string_and_binary_columns(typ, values, offsets_edit, data_edit,
                                                                      null_count, offset):
    assert validate._native_plain_ok is not None  # the extension is built: the C pass is the one under test
    check_string_verdict(typ, values, offsets_edit, data_edit, null_count, offset)


@settings(max_examples=200, deadline=None)
@given(**TAMPERED_STRINGS)
def test_the_numpy_pass_gives_the_same_verdicts_without_the_extension(typ, values, offsets_edit, data_edit,
                                                                        null_count, offset):
    real = validate._native_plain_ok
    validate._native_plain_ok = None
    try:
        check_string_verdict(typ, values, offsets_edit, data_edit, null_count, offset)
    finally:
        validate._native_plain_ok = real


NUMBERS = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint64(), pa.float16(), pa.float32(),
           pa.float64()]


@settings(max_examples=400, deadline=None)
@given(typ=st.sampled_from(NUMBERS), n=st.integers(0, 40), offset=st.integers(0, 3),
       data_short=st.integers(0, 9), bitmap=st.sampled_from([None, "true", "wrong"]),
       null_count=st.sampled_from([0, 0, 1, 3, -1]))
def test_same_verdict_as_arrow_on_tampered_number_columns(typ, n, offset, data_short, bitmap, null_count):
    """Short value buffers, declared null counts without a bitmap or disagreeing with it, unknown null counts
    (-1), slices: whatever Arrow's full validation says of the column, ours says too."""
    width = typ.bit_width // 8
    data = bytes(range(256)) * (((n + offset) * width) // 256 + 1)
    data = data[: max(0, (n + offset) * width - data_short)]
    validity = None
    if bitmap is not None:
        bits = np.ones(n + offset, bool)
        bits[::3] = False
        packed = np.packbits(bits, bitorder="little").tobytes()
        validity = pa.py_buffer(packed)
        if bitmap == "wrong" and null_count == 0:
            null_count = 2
    try:
        column = pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(data)], null_count=null_count, offset=offset)
    except (pa.ArrowInvalid, ValueError):
        return  # pyarrow refuses to build it at all
    batch = pa.RecordBatch.from_arrays([column], names=["v"])
    assert ours_says(batch) == arrow_says(batch)


def check_string_verdict(typ, values, offsets_edit, data_edit, null_count, offset) -> None:  # noqa: ANN001
    if offset >= len(values):
        offset = 0
    try:
        column = tampered(typ, values, offsets_edit, data_edit, null_count, offset)
    except pa.ArrowInvalid:
        return  # pyarrow refuses to build it at all
    batch = pa.RecordBatch.from_arrays([column, pa.array(np.arange(len(column)))], names=["v", "n"])
    assert ours_says(batch) == arrow_says(batch)


@pytest.mark.parametrize("column", [
    pa.array(["a", None, "ü", ""]), pa.array([b"x", None]), pa.array(["abc"] * 3).slice(1),
    pa.array([1, None, 3]), pa.array([1.5, float("nan")]), pa.array([True, None]),
    pa.array([[1, 2], None, []]), pa.array([{"a": 1, "b": "x"}]), pa.array(["a", "b", "a"]).dictionary_encode(),
    pa.array([1, 2], pa.decimal128(5, 2)), pa.array(["é" * 1000] * 10), pa.array([], pa.string()),
    pa.array(["", "", ""]), pa.array([b"\xff\xfe"], pa.binary()),
], ids=lambda c: str(c.type))
def test_well_formed_columns_pass(column):
    batch = pa.RecordBatch.from_arrays([column], names=["c"])
    assert arrow_says(batch) and ours_says(batch)


def test_invalid_utf8_names_the_problem():
    column = tampered(pa.string(), [b"abc", b"def"], [], [(1, 0xC3)], 0, 0)
    with pytest.raises(pa.ArrowInvalid, match="UTF8|UTF-8|utf8"):
        validate_full(pa.RecordBatch.from_arrays([column], names=["s"]))


def test_descending_offsets_are_refused():
    column = tampered(pa.binary(), [b"abc", b"def", b"g"], [(2, 1)], [], 0, 0)
    batch = pa.RecordBatch.from_arrays([column], names=["b"])
    assert not arrow_says(batch)
    with pytest.raises(pa.ArrowInvalid):
        validate_full(batch)
