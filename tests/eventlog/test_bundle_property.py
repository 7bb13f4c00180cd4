"""Differential property tests: the native bundle codec against the pure-Python reference.

Encode must agree byte for byte; decode must agree on every field and array, and on damaged inputs both
must raise BundleError at the same byte offset with the same message (or both accept the bytes and agree
on the result).  The native extension must be built; a missing one fails these tests.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog import bundle as B

REF = B.reference
U64 = 2**64 - 1
U32 = 2**32 - 1

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def nat() -> Any:
    assert B.native is not None, "eventlog._bundle_native is not built: run `pip install -e .`"
    return B.native


# ---------------------------------------------------------------------------------------------- strategies

payload_lists = st.lists(st.binary(max_size=40), max_size=24)
SOURCES = ["list", "tuple", "bytearray", "memoryview", "binary", "large_binary", "binary_view", "view_sliced"]


def as_source(payloads: list[bytes], kind: str) -> Any:
    if kind == "list":
        return list(payloads)
    if kind == "tuple":
        return tuple(payloads)
    if kind == "bytearray":
        return [bytearray(p) for p in payloads]
    if kind == "memoryview":
        return [memoryview(p) for p in payloads]
    if kind == "view_sliced":
        return pa.array([b"a prefix payload of 24 b"] + payloads, pa.binary_view()).slice(1)
    return pa.array(payloads, getattr(pa, kind)())


@st.composite
def bundle_args(draw: Callable[..., Any]) -> dict[str, Any]:
    """Valid encode arguments of any bundle type."""
    btype = draw(st.sampled_from([B.EMPTY, B.BARRIER, B.BUNDLE, B.BUNDLE]))
    ts = draw(st.integers(0, U64))
    if btype == B.EMPTY:
        return dict(payloads=[], ids=None, types=None, bundle_ts=ts, bundle_type=btype, last_id=draw(st.integers(0, U64)))
    payloads = draw(payload_lists.filter(bool))
    n = len(payloads)
    if btype == B.BARRIER:
        last = draw(st.integers(0, U64))
        ids = draw(st.sampled_from([None, last, [last] * n]))
        return dict(payloads=payloads, ids=ids, types=None, bundle_ts=ts, bundle_type=btype,
                    last_id=None if ids is not None else last)
    first = draw(st.one_of(st.integers(1, 1000), st.integers(1, U64 - n + 1)))
    form = draw(st.sampled_from(["first", "list", "array", "last"]))
    ids: Any = {"first": first, "list": list(range(first, first + n)),
                "array": np.arange(n, dtype=np.uint64) + np.uint64(first), "last": None}[form]
    types = draw(st.one_of(st.none(), st.integers(2, U32), st.lists(st.integers(2, U32), min_size=n, max_size=n)))
    return dict(payloads=payloads, ids=ids, types=types, bundle_ts=ts, bundle_type=btype,
                last_id=first + n - 1 if form == "last" else None)


def encode_with(impl: Any, args: dict[str, Any], kind: str = "list") -> bytes:
    a = dict(args)
    payloads = as_source(a.pop("payloads"), kind)
    return impl.encode(payloads, a.pop("ids"), a.pop("types"), **a)


# ---------------------------------------------------------------------------------------------- comparison


def summary(b: B.Bundle) -> tuple[Any, ...]:
    return (
        b.magic, b.ts, b.last_id, b.count, int(b.type), b.raw_size, b.nbytes, b.offset, b.first_id,
        b.ids.tolist(), b.types.tolist(), b.offsets.tolist(), b.lengths.tolist(),
        [bytes(p) for p in b],
    )


def outcome(fn: Callable[[], Any]) -> tuple[Any, ...]:
    """("ok", result) or ("BundleError", offset, reason); any other exception propagates (a bug)."""
    try:
        return ("ok", fn())
    except B.BundleError as exc:
        return ("BundleError", exc.offset, exc.reason)


def decode_outcome(impl: Any, data: Any, **kw: Any) -> tuple[Any, ...]:
    return outcome(lambda: summary(impl.decode(data, **kw)))


def payloads_outcome(b: B.Bundle) -> tuple[Any, ...]:
    def run() -> Any:
        arr = b.payloads()
        arr.validate(full=True)
        return arr.to_pylist()

    return outcome(run)


def iter_results(impl: Any, data: bytes) -> list[tuple[Any, ...]]:
    """Every bundle iter_bundles yields, then the error it raises, if any."""
    out: list[tuple[Any, ...]] = []
    try:
        for b in impl.iter_bundles(data):
            out.append(("ok", summary(b)))
    except B.BundleError as exc:
        out.append(("BundleError", exc.offset, exc.reason))
    return out


# ---------------------------------------------------------------------------------------------- encode


@SETTINGS
@given(args=bundle_args(), kind=st.sampled_from(SOURCES))
def test_encode_is_byte_identical(nat: Any, args: dict[str, Any], kind: str) -> None:
    want = encode_with(REF, args)
    assert encode_with(nat, args, kind) == want
    assert encode_with(REF, args, kind) == want
    payloads = as_source(args["payloads"], kind)
    assert nat.encoded_size(payloads) == REF.encoded_size(payloads) == len(want)
    # encode_into: same bytes, nothing past the end.
    for impl in (REF, nat):
        out = bytearray(b"\xa5" * (len(want) + 8))
        a = dict(args)
        n = impl.encode_into(out, as_source(a.pop("payloads"), kind), a.pop("ids"), a.pop("types"), **a)
        assert n == len(want) and bytes(out[:n]) == want and out[n:] == b"\xa5" * 8


@SETTINGS
@given(args=bundle_args())
def test_decode_round_trip_agrees(nat: Any, args: dict[str, Any]) -> None:
    data = encode_with(REF, args)
    ref, got = decode_outcome(REF, data), decode_outcome(nat, data)
    assert ref == got and ref[0] == "ok"
    fields = ref[1]
    assert fields[13] == args["payloads"] and fields[4] == args["bundle_type"] and fields[1] == args["bundle_ts"]
    b_ref, b_nat = REF.decode(data), nat.decode(data)
    assert payloads_outcome(b_ref) == payloads_outcome(b_nat) == ("ok", args["payloads"])
    assert b_nat.payloads().buffers()[2].address == pa.py_buffer(data).address


# ---------------------------------------------------------------------------------------------- damaged inputs

HEADER_FIELDS = [(0, 4), (4, 8), (12, 8), (20, 4), (24, 4), (28, 4)]
INTERESTING_U32 = [0, 1, 2, 3, 4, 5, 15, 16, 17, 0x7FFFFFFF, 0x80000000, 0xFFFFFFF0, U32]


@st.composite
def damaged(draw: Callable[..., Any]) -> bytes:
    """A valid bundle (or several back to back), then one or more mutations."""
    parts = [encode_with(REF, draw(bundle_args())) for _ in range(draw(st.integers(1, 3)))]
    data = bytearray(b"".join(parts))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["truncate", "flip", "set_field", "set_u32", "insert", "delete", "append"]))
        if op == "truncate":
            del data[draw(st.integers(0, len(data))) :]
        elif op == "flip" and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= draw(st.integers(1, 255))
        elif op == "set_field":
            off, width = draw(st.sampled_from(HEADER_FIELDS))
            value = draw(st.sampled_from(INTERESTING_U32 + [U64, 2**63]))
            if off + width <= len(data):
                data[off : off + width] = (value & (2 ** (8 * width) - 1)).to_bytes(width, "little")
        elif op == "set_u32" and len(data) >= 4:
            i = draw(st.integers(0, len(data) - 4))
            data[i : i + 4] = struct.pack("<I", draw(st.sampled_from(INTERESTING_U32)))
        elif op == "insert":
            i = draw(st.integers(0, len(data)))
            data[i:i] = draw(st.binary(min_size=1, max_size=20))
        elif op == "delete" and data:
            i = draw(st.integers(0, len(data) - 1))
            del data[i : i + draw(st.integers(1, 20))]
        elif op == "append":
            data += draw(st.binary(max_size=40))
    return bytes(data)


@SETTINGS
@given(data=damaged(), max_messages=st.sampled_from([B.DEFAULT_MAX_MESSAGES, 0, 1, 3, 2**63 - 1]))
def test_damaged_inputs_fail_identically(nat: Any, data: bytes, max_messages: int) -> None:
    assert decode_outcome(REF, data, max_messages=max_messages) == decode_outcome(nat, data, max_messages=max_messages)
    assert iter_results(REF, data) == iter_results(nat, data)
    r = decode_outcome(nat, data)
    if r[0] == "ok":
        assert payloads_outcome(REF.decode(data)) == payloads_outcome(nat.decode(data))


@SETTINGS
@given(data=st.one_of(
    st.binary(max_size=200),
    st.binary(max_size=200).map(lambda b: struct.pack("<I", B.MAGIC) + b),
    st.tuples(st.integers(0, U64), st.integers(0, U64), st.integers(0, 40), st.integers(0, 5),
              st.integers(0, 400), st.binary(max_size=300)).map(
        lambda t: struct.pack("<IQQIII", B.MAGIC, t[0], t[1], t[2], t[3], t[4]) + t[5]),
))
def test_random_bytes_fail_identically(nat: Any, data: bytes) -> None:
    assert decode_outcome(REF, data) == decode_outcome(nat, data)
    assert iter_results(REF, data) == iter_results(nat, data)


@pytest.mark.parametrize("cut", range(0, 119))
def test_every_truncation_of_a_bundle(nat: Any, cut: int) -> None:
    data = REF.encode([b"alpha", b"", b"a payload longer than twelve bytes"], 40, [2, 3, 4], bundle_ts=5)
    assert len(data) == 119
    got = decode_outcome(nat, data[:cut])
    assert got == decode_outcome(REF, data[:cut])
    assert got[0] == "BundleError" and got[1] == (0 if cut < 32 else 28)


# ---------------------------------------------------------------------------------------------- edge cases


@pytest.mark.parametrize("n", [0, 1, 2, 1000])
def test_zero_messages_and_empty_payloads(nat: Any, n: int) -> None:
    if n == 0:
        args = dict(payloads=[], ids=None, types=None, bundle_ts=0, bundle_type=B.EMPTY, last_id=0)
    else:
        args = dict(payloads=[b""] * n, ids=1, types=None, bundle_ts=0, bundle_type=B.BUNDLE, last_id=None)
    data = encode_with(nat, args)
    assert data == encode_with(REF, args) and len(data) == 32 + 16 * n
    assert decode_outcome(REF, data) == decode_outcome(nat, data)
    b = nat.decode(data)
    assert b.count == n and b.lengths.tolist() == [0] * n and b.payloads().to_pylist() == [b""] * n


def test_maximum_count(nat: Any) -> None:
    n = 4096  # max_messages is the reader's limit: exactly n passes, n - 1 fails the same way
    data = REF.encode([b""] * n, 1, bundle_ts=0)
    assert nat.encode([b""] * n, 1, bundle_ts=0) == data
    assert decode_outcome(REF, data, max_messages=n) == decode_outcome(nat, data, max_messages=n)
    bad_ref = decode_outcome(REF, data, max_messages=n - 1)
    assert bad_ref == decode_outcome(nat, data, max_messages=n - 1)
    assert bad_ref[:2] == ("BundleError", 20)
    # The largest count a header can declare, with and without a limit that allows it.
    huge = struct.pack("<IQQIII", B.MAGIC, 0, U32, U32, B.BUNDLE, 64) + bytes(64)
    for limit in (B.DEFAULT_MAX_MESSAGES, 2**63 - 1):
        r = decode_outcome(nat, huge, max_messages=limit)
        assert r == decode_outcome(REF, huge, max_messages=limit) and r[0] == "BundleError"
        assert r[1] == 20


def test_huge_declared_sizes(nat: Any) -> None:
    base = REF.encode([b"x" * 20, b"y"], 1, bundle_ts=0)
    cases = []
    for field_off in (28, 32, 32 + 16 + 20):  # RawBundleSize, first PayloadSize, second PayloadSize
        for value in (0x7FFFFFFF, 0x80000000, U32):
            d = bytearray(base)
            d[field_off : field_off + 4] = struct.pack("<I", value)
            cases.append(bytes(d))
    for d in cases:
        r = decode_outcome(nat, d)
        assert r == decode_outcome(REF, d) and r[0] == "BundleError"


@pytest.mark.parametrize("kind", ["list", "binary", "large_binary", "binary_view"])
def test_every_payload_length_around_the_copy_paths(nat: Any, kind: str) -> None:
    """Lengths 0..80 and around 512 (the copy strategy changes with length), with distinct bytes."""
    lengths = list(range(81)) + [511, 512, 513, 4096]
    payloads = [bytes((7 * n + i) % 251 for i in range(n)) for n in lengths]
    want = REF.encode(payloads, 1, bundle_ts=9)
    assert nat.encode(as_source(payloads, kind), 1, bundle_ts=9) == want
    assert [bytes(p) for p in nat.decode(want)] == payloads
