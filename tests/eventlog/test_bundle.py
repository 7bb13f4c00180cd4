"""Unit tests of the bundle codec (eventlog.bundle): golden vectors, round trips, zero copy, errors.

Every test runs against both implementations; the native one must be built (``pip install -e .``
builds it), so a missing extension fails these tests instead of skipping them.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from eventlog import bundle as B
from eventlog.errors import CorruptLogError
from tests.support.golden import bundle_vector, make_vectors
from tests.support.paths import GOLDEN_BUNDLES, ROOT

VECTOR_NAMES = sorted(p.stem for p in GOLDEN_BUNDLES.glob("*.hex"))


@pytest.fixture(params=["reference", "native"])
def impl(request: pytest.FixtureRequest) -> Any:
    if request.param == "native":
        assert B.native is not None, "eventlog._bundle_native is not built: run `pip install -e .`"
        return B.native
    return B.reference


def enc(impl: Any, payloads: Any, first_id: int = 1, **kw: Any) -> bytes:
    kw.setdefault("bundle_ts", 123)
    return impl.encode(payloads, first_id, **kw)


# ---------------------------------------------------------------------------------------------- golden


def test_golden_files_match_generator() -> None:
    expected = make_vectors.files()
    on_disk = {p.name: p.read_text() for p in GOLDEN_BUNDLES.iterdir() if p.suffix in (".hex", ".json")}
    assert on_disk == expected
    assert {"empty", "barrier", "three_messages", "concatenated", "bad_magic"} <= set(VECTOR_NAMES)


def test_golden_vectors_have_the_spec_layout() -> None:
    """Independent of the codecs: read the fields at their spec offsets with struct."""
    data, exp = bundle_vector("three_messages")
    magic, ts, last, count, btype, raw = struct.unpack_from("<IQQIII", data, 0)
    assert (magic, ts, last, count, btype, raw) == (0xCAFEBABA, 1_700_000_000_123, 42, 3, 3, len(data) - 32)
    assert struct.unpack_from("<IQI", data, 32) == (5, 40, 2) and data[48:53] == b"alpha"
    assert struct.unpack_from("<IQI", data, 53) == (0, 41, 3)
    assert struct.unpack_from("<IQI", data, 69) == (34, 42, 4)
    assert exp["bundles"][0]["messages"][2]["payload"] == data[85:].hex()
    empty, _ = bundle_vector("empty")
    assert empty.hex() == "babafeca" "7b68e5cf8b010000" "2900000000000000" "00000000" "01000000" "00000000"
    barrier, _ = bundle_vector("barrier")
    assert struct.unpack_from("<IQQIII", barrier, 0)[2:5] == (42, 1, 2)
    assert struct.unpack_from("<IQIQ", barrier, 32) == (8, 42, 1, 7)


def _check_bundle(b: B.Bundle, exp: dict[str, Any]) -> None:
    assert (b.magic, b.ts, b.last_id, b.count, int(b.type), b.raw_size, b.nbytes) == (
        exp["magic"],
        exp["ts"],
        exp["last_id"],
        exp["count"],
        exp["type"],
        exp["raw_size"],
        exp["nbytes"],
    )
    msgs = exp["messages"]
    assert b.ids.tolist() == [m["id"] for m in msgs]
    assert b.types.tolist() == [m["type"] for m in msgs]
    assert [bytes(b.payload(i)).hex() for i in range(b.count)] == [m["payload"] for m in msgs]
    assert [bytes(x).hex() for x in b.payloads().to_pylist()] == [m["payload"] for m in msgs]


@pytest.mark.parametrize("name", VECTOR_NAMES)
def test_golden_decode(impl: Any, name: str) -> None:
    data, exp = bundle_vector(name)
    if exp["valid"]:
        bundles = list(impl.iter_bundles(data))
        assert len(bundles) == len(exp["bundles"])
        for b, e in zip(bundles, exp["bundles"]):
            _check_bundle(b, e)
        if len(bundles) == 1:
            _check_bundle(impl.decode(data), exp["bundles"][0])
        else:
            with pytest.raises(B.BundleError) as ei:
                impl.decode(data)
            assert ei.value.offset == bundles[0].nbytes
    else:
        with pytest.raises(B.BundleError) as ei:
            impl.decode(data)
        assert ei.value.offset == exp["error"]["offset"]
        assert exp["error"]["contains"] in ei.value.reason
        assert isinstance(ei.value, CorruptLogError)
        with pytest.raises(B.BundleError) as ei2:
            list(impl.iter_bundles(data))
        assert ei2.value.offset == exp["error"]["offset"]


@pytest.mark.parametrize("name", [n for n in VECTOR_NAMES if bundle_vector(n)[1]["valid"]])
def test_golden_encode(impl: Any, name: str) -> None:
    data, exp = bundle_vector(name)
    out = b""
    for e in exp["bundles"]:
        payloads = [bytes.fromhex(m["payload"]) for m in e["messages"]]
        ids = [m["id"] for m in e["messages"]]
        types = [m["type"] for m in e["messages"]]
        kw = dict(bundle_ts=e["ts"], bundle_type=e["type"], last_id=e["last_id"])
        out += impl.encode(payloads, ids or None, types or None, **kw)
    assert out == data


# ---------------------------------------------------------------------------------------------- round trips

PAYLOADS = [b"", b"a", b"twelve bytes", b"thirteen byte", bytes(range(256)) * 3, b"\x00" * 17]


def _sources() -> list[Any]:
    return [
        list(PAYLOADS),
        tuple(PAYLOADS),
        [bytearray(p) for p in PAYLOADS],
        [memoryview(p) for p in PAYLOADS],
        [np.frombuffer(p, dtype=np.uint8) for p in PAYLOADS],
        iter(list(PAYLOADS)),
        pa.array(PAYLOADS, pa.binary()),
        pa.array(PAYLOADS, pa.large_binary()),
        pa.array(PAYLOADS, pa.binary_view()),
        pa.array([b"skip"] + PAYLOADS + [b"skip too"], pa.binary()).slice(1, len(PAYLOADS)),
        pa.array([b"skip"] + PAYLOADS + [b"skip too"], pa.large_binary()).slice(1, len(PAYLOADS)),
        pa.array([b"skip, and long enough"] + PAYLOADS, pa.binary_view()).slice(1),
    ]


@pytest.mark.parametrize("k", range(len(_sources())))
def test_round_trip_every_payload_source(impl: Any, k: int) -> None:
    src = _sources()[k]
    data = impl.encode(src, 100, [2, 3, 4, 5, 2, 9], bundle_ts=2**64 - 1)
    assert data == B.reference.encode(PAYLOADS, 100, [2, 3, 4, 5, 2, 9], bundle_ts=2**64 - 1)
    if not isinstance(src, type(iter([]))):
        assert impl.encoded_size(src) == len(data)
    b = impl.decode(data)
    assert b.type == B.BUNDLE and b.count == len(PAYLOADS) and b.ts == 2**64 - 1
    assert b.first_id == 100 and b.last_id == 105 and b.ids.tolist() == list(range(100, 106))
    assert b.ids.dtype == np.uint64 and b.types.dtype == np.uint32
    assert b.offsets.dtype == np.int64 and b.lengths.dtype == np.uint32
    assert b.types.tolist() == [2, 3, 4, 5, 2, 9]
    assert [bytes(p) for p in b] == PAYLOADS
    arr = b.payloads()
    arr.validate(full=True)
    assert arr.type == pa.binary_view() and arr.to_pylist() == PAYLOADS
    assert len(b) == b.count and bytes(b.payload(-1)) == PAYLOADS[-1]


def test_multi_byte_numpy_payload_is_its_raw_bytes(impl: Any) -> None:
    a = np.arange(5, dtype="<u4")
    b = impl.decode(enc(impl, [a]))
    assert bytes(b.payload(0)) == a.tobytes()


def test_id_forms_are_equivalent(impl: Any) -> None:
    p = [b"x", b"y", b"z"]
    by_first = impl.encode(p, 7, bundle_ts=1)
    assert impl.encode(p, [7, 8, 9], bundle_ts=1) == by_first
    assert impl.encode(p, np.array([7, 8, 9], dtype=np.uint64), bundle_ts=1) == by_first
    assert impl.encode(p, last_id=9, bundle_ts=1) == by_first
    assert impl.encode(p, 7, last_id=9, bundle_ts=1) == by_first
    assert impl.encode(p, 7, B.MSG_DATA, bundle_ts=1) == by_first
    top = impl.decode(impl.encode(p, last_id=2**64 - 1, bundle_ts=1))
    assert top.ids.tolist() == [2**64 - 3, 2**64 - 2, 2**64 - 1]


def test_empty_and_barrier_bundles(impl: Any) -> None:
    e = impl.decode(impl.encode([], bundle_type=B.EMPTY, last_id=9, bundle_ts=5))
    assert (e.type, e.count, e.last_id, e.raw_size, e.nbytes, e.first_id) == (B.EMPTY, 0, 9, 0, 32, None)
    assert e.ids.tolist() == [] and e.payloads().to_pylist() == [] and list(e) == []
    bar = impl.decode(impl.encode([b"ckpt-1", b"ckpt-2"], bundle_type=B.BARRIER, last_id=9, bundle_ts=5))
    assert bar.type == B.BARRIER and bar.first_id is None and bar.last_id == 9
    assert bar.ids.tolist() == [9, 9] and bar.types.tolist() == [B.MSG_BARRIER] * 2
    assert [bytes(x) for x in bar] == [b"ckpt-1", b"ckpt-2"]
    # Barrier before any data: id 0.
    assert impl.decode(impl.encode([b""], bundle_type=B.BARRIER, last_id=0, bundle_ts=0)).ids.tolist() == [0]
    assert impl.encode([b"x"], 9, bundle_type=B.BARRIER, bundle_ts=5) == impl.encode(
        [b"x"], bundle_type=B.BARRIER, last_id=9, bundle_ts=5
    )


def test_iter_bundles_offsets(impl: Any) -> None:
    parts = [
        enc(impl, [b"a" * 20], 1),
        impl.encode([], bundle_type=B.EMPTY, last_id=1, bundle_ts=2),
        enc(impl, [b"bb", b"c" * 30], 2),
    ]
    data = b"".join(parts)
    bundles = list(impl.iter_bundles(data))
    assert [b.offset for b in bundles] == [0, len(parts[0]), len(parts[0]) + len(parts[1])]
    assert [b.nbytes for b in bundles] == [len(p) for p in parts]
    assert [bytes(p) for p in bundles[2]] == [b"bb", b"c" * 30]
    assert bundles[2].offsets.tolist()[0] == bundles[2].offset + 48
    assert list(impl.iter_bundles(b"")) == []
    gen = impl.iter_bundles(data + parts[0][:40])
    assert len([next(gen) for _ in range(3)]) == 3
    with pytest.raises(B.BundleError) as ei:
        next(gen)
    assert ei.value.offset == len(data) + 28  # RawBundleSize of the torn tail


# ---------------------------------------------------------------------------------------------- zero copy


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "numpy", "pa.Buffer", "memoryview"])
def test_payloads_data_buffer_is_the_input(impl: Any, kind: str) -> None:
    raw = enc(impl, [b"short", b"a payload of more than twelve bytes", b"x" * 1000])
    inp: Any = {
        "bytes": raw,
        "bytearray": bytearray(raw),
        "numpy": np.frombuffer(raw, dtype=np.uint8).copy(),
        "pa.Buffer": pa.py_buffer(raw),
        "memoryview": memoryview(raw),
    }[kind]
    b = impl.decode(inp)
    arr = b.payloads()
    assert arr.buffers()[2].address == pa.py_buffer(inp).address
    assert arr.buffers()[2].size == len(raw)
    assert arr.to_pylist()[1:] == [b"a payload of more than twelve bytes", b"x" * 1000]


def test_payload_memoryview_shares_memory(impl: Any) -> None:
    buf = bytearray(enc(impl, [b"hello", b"world, longer than twelve"]))
    b = impl.decode(buf)
    mv = b.payload(1)
    assert np.shares_memory(np.frombuffer(mv, dtype=np.uint8), np.frombuffer(buf, dtype=np.uint8))
    off = int(b.offsets[1])
    buf[off] = ord("W")  # a write to the input shows through the views
    assert bytes(mv) == b"World, longer than twelve"
    assert b.payloads()[1].as_py() == b"World, longer than twelve"


def test_iter_bundles_payloads_slice_the_input(impl: Any) -> None:
    first = enc(impl, [b"0123456789abcdef"])
    second = enc(impl, [b"fedcba9876543210"], 2)
    data = np.frombuffer(first + second, dtype=np.uint8).copy()
    b = list(impl.iter_bundles(data))[1]
    assert b.payloads().buffers()[2].address == data.ctypes.data + len(first)
    assert b.payloads().to_pylist() == [b"fedcba9876543210"]


def test_decode_results_are_read_only(impl: Any) -> None:
    b = impl.decode(enc(impl, [b"a", b"b"]))
    for arr in (b.ids, b.types, b.offsets, b.lengths):
        with pytest.raises(ValueError):
            arr[0] = 1


def test_non_contiguous_or_non_buffer_input(impl: Any) -> None:
    strided = np.zeros((64, 2), np.uint8)[:, 0]
    with pytest.raises(TypeError, match="C-contiguous"):
        impl.decode(strided)
    with pytest.raises(TypeError, match="C-contiguous"):
        impl.iter_bundles(strided)
    with pytest.raises(TypeError):
        impl.decode("not bytes")


def test_payload_index_errors(impl: Any) -> None:
    b = impl.decode(enc(impl, [b"a", b"b"]))
    assert bytes(b.payload(-2)) == b"a"
    for i in (2, -3):
        with pytest.raises(IndexError):
            b.payload(i)


# ---------------------------------------------------------------------------------------------- errors


def _hdr(ts: int = 0, last: int = 1, count: int = 1, btype: int = 3, raw: int = 17, magic: int = 0xCAFEBABA) -> bytes:
    return struct.pack("<IQQIII", magic, ts, last, count, btype, raw)


def _msg(size: int = 1, mid: int = 1, mtype: int = 2, payload: bytes | None = None) -> bytes:
    return struct.pack("<IQI", size, mid, mtype) + (b"x" * size if payload is None else payload)


ERROR_CASES = {
    "empty input": (b"", 0, "0 of the 32 header bytes"),
    "huge RawBundleSize": (_hdr(raw=0xFFFFFFFF) + _msg(), 28, "RawBundleSize 4294967295 exceeds the 17 bytes"),
    "huge MessageListSize": (_hdr(count=0xFFFFFFFF) + _msg(), 20, "MessageListSize 4294967295 exceeds max_messages"),
    "count over raw": (_hdr(count=2) + _msg(), 20, "needs 32 bytes of message headers"),
    "EMPTY with raw": (_hdr(count=0, btype=1, raw=17) + _msg(), 28, "EMPTY bundle with RawBundleSize 17"),
    "BUNDLE without messages": (_hdr(count=0, raw=0), 20, "BUNDLE bundle with no messages"),
    "BARRIER without messages": (_hdr(count=0, btype=2, raw=0), 20, "BARRIER bundle with no messages"),
    "BUNDLE type 0 message": (_hdr() + _msg(mtype=0), 44, "MessageType 0 is not allowed in a BUNDLE"),
    "BARRIER with data message": (_hdr(btype=2) + _msg(mtype=2), 44, "MessageType 2 is not allowed in a BARRIER"),
    "BARRIER id not last": (_hdr(btype=2, last=5) + _msg(mid=4, mtype=1), 36, "MessageId 4, expected 5"),
    "wrong last id": (_hdr(last=2) + _msg(mid=1), 36, "MessageId 1, expected 2"),
    "second header overruns": (
        _hdr(last=2, count=2, raw=33) + _msg(size=2, mid=1) + b"\0" * 15,
        50,
        "message 1: header overruns the bundle (15 bytes left)",
    ),
    "bad bundle type 0": (_hdr(btype=0) + _msg(), 24, "unknown BundleType 0"),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_decode_errors(impl: Any, case: str) -> None:
    data, offset, fragment = ERROR_CASES[case]
    with pytest.raises(B.BundleError) as ei:
        impl.decode(data)
    assert ei.value.offset == offset, ei.value
    assert fragment in ei.value.reason
    assert f"offset {offset}" in str(ei.value)


def test_max_messages(impl: Any) -> None:
    data = enc(impl, [b"a"] * 5)
    assert impl.decode(data, max_messages=5).count == 5
    with pytest.raises(B.BundleError) as ei:
        impl.decode(data, max_messages=4)
    assert ei.value.offset == 20 and "exceeds max_messages 4" in ei.value.reason
    with pytest.raises(B.BundleError):
        list(impl.iter_bundles(data, max_messages=4))
    assert impl.decode(impl.encode([], bundle_type=B.EMPTY, last_id=0, bundle_ts=0), max_messages=0).count == 0
    for bad in (-1, 1.5, True):
        with pytest.raises((ValueError, TypeError)):
            impl.decode(data, max_messages=bad)


def test_binary_view_int32_limit(impl: Any) -> None:
    """payloads() refuses payloads an Arrow binary_view cannot address; payload(i) still works.

    The 2 GiB buffer is calloc'ed zero pages: only the headers' pages are ever touched.
    """
    big = 2**31  # > INT32_MAX bytes of payload
    buf = np.zeros(32 + 16 + big, dtype=np.uint8)
    buf[:48] = np.frombuffer(_hdr(raw=16 + big) + struct.pack("<IQI", big, 1, 2), dtype=np.uint8)
    b = impl.decode(buf)
    assert b.lengths.tolist() == [big] and b.payload(0).nbytes == big
    with pytest.raises(B.BundleError) as ei:
        b.payloads()
    assert ei.value.offset == 32 and "does not fit the int32 offsets" in ei.value.reason
    del b, buf

    # Second case: a 13-byte payload that starts beyond INT32_MAX inside the bundle.
    first = 2**31 - 16
    raw = 16 + first + 16 + 13
    buf2 = np.zeros(32 + raw, dtype=np.uint8)
    buf2[:48] = np.frombuffer(_hdr(last=2, count=2, raw=raw) + struct.pack("<IQI", first, 1, 2), dtype=np.uint8)
    p = 48 + first
    buf2[p : p + 16] = np.frombuffer(struct.pack("<IQI", 13, 2, 2), dtype=np.uint8)
    b2 = impl.decode(buf2)
    with pytest.raises(B.BundleError) as ei:
        b2.payloads()
    assert ei.value.offset == p and ei.value.reason.startswith("message 1:")


# ---------------------------------------------------------------------------------------------- encode_into


def test_encode_into_bytearray_and_numpy(impl: Any) -> None:
    payloads = [b"abc", b"defghijklmnopqrstu"]
    want = enc(impl, payloads, 3)
    ba = bytearray(b"\xee" * (len(want) + 10))
    assert impl.encode_into(ba, payloads, 3, bundle_ts=123) == len(want)
    assert bytes(ba[: len(want)]) == want and ba[len(want) :] == b"\xee" * 10
    arr = np.full(len(want), 0xEE, dtype=np.uint8)
    assert impl.encode_into(arr, payloads, 3, bundle_ts=123) == len(want) and arr.tobytes() == want
    words = np.zeros((len(want) + 7) // 8, dtype=np.uint64)  # any dtype: its bytes are written
    assert impl.encode_into(words, payloads, 3, bundle_ts=123) == len(want)
    assert words.tobytes()[: len(want)] == want
    # At a position inside a larger buffer, through a memoryview slice.
    big = bytearray(200)
    n = impl.encode_into(memoryview(big)[50:], payloads, 3, bundle_ts=123)
    assert bytes(big[50 : 50 + n]) == want and big[:50] == bytes(50)
    assert impl.decode(memoryview(big)[50 : 50 + n]).payloads().to_pylist() == payloads


def test_encode_into_too_small_writes_nothing(impl: Any) -> None:
    payloads = [b"abc", b"def"]
    size = impl.encoded_size(payloads)
    buf = bytearray(b"\xee" * (size - 1))
    with pytest.raises(ValueError, match="too small"):
        impl.encode_into(buf, payloads, 1, bundle_ts=0)
    assert buf == b"\xee" * (size - 1)
    with pytest.raises(TypeError):
        impl.encode_into(b"\0" * 100, payloads, 1, bundle_ts=0)
    with pytest.raises(TypeError):
        impl.encode_into(np.zeros((10, 10), dtype=np.uint8)[:, ::2], payloads, 1, bundle_ts=0)


# ---------------------------------------------------------------------------------------------- encode arguments

BAD_ENCODE = {
    "non-contiguous ids": (([b"a", b"b"], [1, 3]), {}, ValueError),
    "first id 0": (([b"a"], 0), {}, ValueError),
    "last_id too small": (([b"a", b"b"],), {"last_id": 1}, ValueError),
    "ids and last_id disagree": (([b"a", b"b"], 1), {"last_id": 5}, ValueError),
    "no ids at all": (([b"a"],), {}, ValueError),
    "ids overflow u64": (([b"a", b"b"], 2**64 - 1), {}, ValueError),
    "barrier type in BUNDLE": (([b"a"], 1, 1), {}, ValueError),
    "types wrong length": (([b"a", b"b"], 1, [2]), {}, ValueError),
    "types over u32": (([b"a"], 1, 2**32), {}, ValueError),
    "BUNDLE with no payloads": (([], 1), {}, ValueError),
    "EMPTY with payloads": (([b"a"],), {"bundle_type": 1, "last_id": 0}, ValueError),
    "EMPTY without last_id": (([],), {"bundle_type": 1}, ValueError),
    "BARRIER without last_id": (([b"a"],), {"bundle_type": 2}, ValueError),
    "BARRIER data type": (([b"a"], None, 2), {"bundle_type": 2, "last_id": 1}, ValueError),
    "BARRIER ids differ": (([b"a", b"b"], [1, 2]), {"bundle_type": 2}, ValueError),
    "bundle type 4": (([b"a"], 1), {"bundle_type": 4}, ValueError),
    "negative ts": (([b"a"], 1), {"bundle_ts": -1}, ValueError),
    "ts over u64": (([b"a"], 1), {"bundle_ts": 2**64}, ValueError),
    "str payload": ((["text"], 1), {}, TypeError),
    "None payload": (([None], 1), {}, TypeError),
    "single bytes object": ((b"abc", 1), {}, TypeError),
    "arrow nulls": ((pa.array([b"a", None]), 1), {}, ValueError),
    "arrow string": ((pa.array(["a"]), 1), {}, TypeError),
    "chunked array": ((pa.chunked_array([[b"a"]]), 1), {}, TypeError),
    "float ids": (([b"a"], 1.0), {}, TypeError),
}


@pytest.mark.parametrize("case", sorted(BAD_ENCODE))
def test_encode_rejects(impl: Any, case: str) -> None:
    args, kw, exc = BAD_ENCODE[case]
    kw = {"bundle_ts": 0, **kw}
    with pytest.raises(exc):
        impl.encode(*args, **kw)


def test_encode_size_limit_is_checked_before_allocating(impl: Any) -> None:
    # 4097 references to one 1 MiB buffer: over 4 GiB of payload, more than RawBundleSize (u32) can
    # describe.  Neither implementation may try to allocate it.
    chunk = bytes(2**20)
    payloads = [chunk] * 4097
    assert impl.encoded_size(payloads) == 32 + 16 * 4097 + 4097 * 2**20
    with pytest.raises(ValueError, match="too large"):
        impl.encode(payloads, 1, bundle_ts=0)


def test_native_rejects_corrupt_arrow_arrays() -> None:
    assert B.native is not None, "eventlog._bundle_native is not built: run `pip install -e .`"
    data = pa.py_buffer(b"abcdef")
    bad_offsets = pa.py_buffer(np.array([0, 4, 2], dtype=np.int32).tobytes())
    arr = pa.Array.from_buffers(pa.binary(), 2, [None, bad_offsets, data])
    with pytest.raises(ValueError, match="invalid offsets"):
        B.native.encode(arr, 1, bundle_ts=0)
    # pyarrow refuses to build arrays whose last offset is past the data: call the extension directly.
    ext = B._ext
    past_end = np.array([0, 4, 99], dtype=np.int32).tobytes()
    common = (None, 1, 1, 0, 2, 3, 2)  # out, first id, id step, ts, last id, bundle type, types
    with pytest.raises(ValueError, match="invalid offsets"):
        ext.encode_offsets(2, 0, past_end, 4, b"abcdef", *common)
    with pytest.raises(ValueError, match="offsets buffer is too short"):
        ext.encode_offsets(3, 0, past_end, 4, b"abcdef", *common)
    with pytest.raises(ValueError, match="offsets buffer is too short"):
        ext.encode_offsets(1, 2**62, past_end, 4, b"abcdef", *common)
    with pytest.raises(ValueError, match="views buffer is too short"):
        ext.encode_views(2, 0, bytes(16), (), *common)
    with pytest.raises(ValueError, match="outside the buffer"):
        ext.build_views(b"x" * 40, 0, 1, np.array([30], dtype=np.int64), np.array([20], dtype=np.uint32))
    view = struct.pack("<i4sii", 50, b"abcd", 0, 0)  # 50 bytes at offset 0 of a 6-byte buffer
    bad_view = pa.Array.from_buffers(pa.binary_view(), 1, [None, pa.py_buffer(view), data])
    with pytest.raises(ValueError, match="outside its data buffer"):
        B.native.encode(bad_view, 1, bundle_ts=0)
    view = struct.pack("<i4sii", 50, b"abcd", 3, 0)  # buffer index 3 of 1
    with pytest.raises(ValueError, match="outside its data buffer"):
        B.native.encode(pa.Array.from_buffers(pa.binary_view(), 1, [None, pa.py_buffer(view), data]), 1, bundle_ts=0)


# ---------------------------------------------------------------------------------------------- threads


def test_concurrent_encode_decode_release_the_gil_safely(impl: Any) -> None:
    payloads = [bytes([i % 256]) * (i % 300) for i in range(5000)]  # above the GIL-release thresholds
    want = impl.encode(payloads, 1, bundle_ts=0)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(3):
                data = impl.encode(payloads, 1, bundle_ts=0)
                assert data == want
                b = impl.decode(data)
                assert b.payloads().to_pylist()[-1] == payloads[-1]
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(2 if impl is B.reference else 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# ---------------------------------------------------------------------------------------------- selection


def _run(code: str, env_value: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("EVENTLOG_BUNDLE_IMPL", None)
    if env_value is not None:
        env["EVENTLOG_BUNDLE_IMPL"] = env_value
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_env_var_selects_the_implementation() -> None:
    code = "from eventlog import bundle as b; print(b.IMPLEMENTATION, b._impl is b.reference, b.native is None)"
    assert _run(code, "reference").stdout.split() == ["reference", "True", "False"]
    assert _run(code, "native").stdout.split() == ["native", "False", "False"]
    assert _run(code, None).stdout.split() == ["native", "False", "False"]
    bogus = _run(code, "fast")
    assert bogus.returncode != 0 and "must be 'reference' or 'native'" in bogus.stderr


def test_forced_native_without_extension_is_a_clear_import_error() -> None:
    hide = "import sys; sys.modules['eventlog._bundle_native'] = None\n"
    code = hide + "from eventlog import bundle as b; print(b.IMPLEMENTATION, b.native)"
    missing = _run(code, "native")
    assert missing.returncode != 0
    assert "ImportError: EVENTLOG_BUNDLE_IMPL=native but the C extension" in missing.stderr
    assert _run(code, None).stdout.split() == ["reference", "None"]
