"""The C walk of a record-batch message (``eventlog/encoding/_ipc_native.c``) accepts exactly the messages the
Python specification (``ipc_message.check_in_python``) accepts, with the same figures, and refuses (None)
every one it refuses: on real messages of random schemas, compressed or not, damaged in every way the fuzzers
know, and under small limits. It never reads outside the bytes given (run under AddressSanitizer per the
README) and never crashes."""

from __future__ import annotations

import random
import struct

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog import limits
from eventlog.encoding import ipc_build, ipc_message
from eventlog.encoding.ipc_message import BatchMessage, check_in_python, check_record_batch_message
from eventlog.errors import LogLimitError
from tests.support.strategies import batches, schemas

native = ipc_message._native
LIMITS = (limits.MAX_EVENT_METADATA_BYTES, limits.MAX_EVENT_RECORDS, limits.MAX_EVENT_VALUES,
          limits.MAX_EVENT_DECODED_BYTES, limits.MAX_EXPANSION_RATIO)


def test_the_extension_is_built() -> None:
    assert native is not None, "eventlog.encoding._ipc_native is not built: run `pip install -e .`"


def message(batch: pa.RecordBatch, compression: "str | None", meta: "dict | None" = None) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, batch.schema, options=ipc.IpcWriteOptions(compression=compression)) as w:
        w.write_batch(batch, custom_metadata=meta)
    raw = sink.getvalue().to_pybytes()
    schema_len = len(batch.schema.serialize().to_pybytes())
    return raw[schema_len:-8]  # the record-batch message alone (no schema message, no end-of-stream marker)


def python_says(data: bytes, start: int = 0) -> "BatchMessage | type":
    try:
        return check_in_python(memoryview(data), start)
    except (ValueError, LogLimitError) as e:
        return type(e)


def agree(data: bytes, start: int = 0, lim: tuple = LIMITS) -> None:
    got = native.check(data, start, *lim)
    want = python_says(data, start)
    if got is None:
        assert want in (ValueError, LogLimitError), (want, data[:64].hex())
    else:
        assert isinstance(want, BatchMessage) and BatchMessage(*got) == want, (got, want, data[:64].hex())
        assert check_record_batch_message(memoryview(data), start) == want


def damaged(rnd: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    meta_end = min(len(b), 8 + int.from_bytes(b[4:8], "little"))
    how = rnd.randrange(7)
    if how == 0 and b:  # flip bits, mostly in the metadata
        for _ in range(rnd.randint(1, 4)):
            b[rnd.randrange(meta_end if rnd.random() < 0.8 else len(b))] ^= 1 << rnd.randrange(8)
    elif how == 1:  # truncate
        del b[rnd.randrange(len(b) + 1):]
    elif how == 2 and meta_end > 12:  # a 4- or 8-byte field of the metadata set to an extreme
        at, n = rnd.randrange(8, meta_end - 4), rnd.choice([4, 8])
        v = rnd.choice([0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**63 - 1, 2**63, 2**64 - 1, rnd.randrange(2**64)])
        b[at:at + n] = (v % 2 ** (8 * n)).to_bytes(n, "little")
    elif how == 3:  # the metadata length
        b[4:8] = rnd.choice([0, 7, 8, len(b), len(b) - 7, 2**31, 2**32 - 1, rnd.randrange(2**32)]).to_bytes(4, "little")
    elif how == 4:  # random bytes overwrite a stretch
        at = rnd.randrange(len(b) + 1)
        b[at:at + rnd.randint(1, 16)] = rnd.randbytes(rnd.randint(1, 16))
    elif how == 5:  # no continuation marker (the old framing) or a doubled one
        b = b[4:] if rnd.random() < 0.5 else b"\xff\xff\xff\xff" + b
    else:  # a compressed buffer's declared length
        at = rnd.randrange(meta_end, max(meta_end + 1, len(b) - 8))
        b[at:at + 8] = rnd.choice([-2, -1, 0, 2**40, 2**62, rnd.randrange(-(2**63), 2**63)]).to_bytes(
            8, "little", signed=True)
    return bytes(b)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), compression=st.sampled_from([None, "zstd", "lz4"]), seed=st.integers(0, 2**32))
def test_agrees_with_the_python_walk_on_real_and_damaged_messages(data, compression, seed) -> None:
    schema = data.draw(schemas())
    batch = data.draw(batches(schema, min_rows=0, max_rows=20))
    raw = message(batch, compression, {"eventlog.seq": "7"})
    agree(raw)
    assert isinstance(python_says(raw), BatchMessage)  # the intact message is accepted
    rnd = random.Random(seed)
    for _ in range(40):
        agree(damaged(rnd, raw))
    for start in (1, 3, len(raw) // 2):  # the message placed after other bytes
        agree(rnd.randbytes(start) + raw, start)


@pytest.mark.parametrize("seed", range(4))
def test_agrees_under_small_limits(seed, monkeypatch) -> None:
    rnd = random.Random(seed)
    batch = pa.record_batch([pa.array(range(300)), pa.array([f"v{i}" * 3 for i in range(300)])], names=["a", "s"])
    raws = [message(batch, "zstd"), message(batch, None), message(batch.slice(0, 0), None)]
    for _ in range(200):
        lim = (rnd.choice([8, 200, 10**6]), rnd.choice([0, 299, 300, 10**6]), rnd.choice([0, 600, 900, 10**8]),
               rnd.choice([0, 1000, 10**5, 10**9]), rnd.choice([1, 2, 4, 2**16]))
        monkeypatch.setattr(ipc_message, "MAX_EVENT_METADATA_BYTES", lim[0])
        monkeypatch.setattr(ipc_message, "MAX_EVENT_RECORDS", lim[1])
        monkeypatch.setattr(ipc_message, "MAX_EVENT_VALUES", lim[2])
        monkeypatch.setattr(limits, "MAX_EVENT_DECODED_BYTES", lim[3])
        monkeypatch.setattr(limits, "MAX_EXPANSION_RATIO", lim[4])
        raw = rnd.choice(raws)
        got, want = native.check(raw, 0, *lim), python_says(raw)
        if got is None:
            assert want in (ValueError, LogLimitError), (lim, want)
        else:
            assert BatchMessage(*got) == want, (lim, got, want)


def test_random_bytes_are_refused_without_a_crash() -> None:
    rnd = random.Random(5)
    for n in [0, 1, 7, 8, 9, 16, 64, 4096] * 50:
        agree(rnd.randbytes(n))
    for start in (-1, 1, 10, 2**40):  # before or past the bytes: nothing is read there
        assert native.check(b"\xff" * 16, start, *LIMITS) is None
    with pytest.raises(OverflowError):
        native.check(b"\xff" * 16, 2**70, *LIMITS)


def tail_agrees(data: bytes, start: int, nodes: int, bufs: int) -> None:
    """``native.tail`` never reads or points outside ``data``; on a message the Python walk accepts it gives the
    nodes and buffers that ``ipc_build.parse`` reads (buffers placed in ``data``)."""

    got = native.tail(data, start, nodes, bufs)
    if got is not None:
        compressed, ns, bs = got
        assert len(ns) == nodes and len(bs) == bufs
        assert all(0 <= at and at + n <= len(data) and n >= 0 for at, n in bs), (bs, len(data))
    if not isinstance(python_says(data, start), BatchMessage) or data[start:start + 4] != b"\xff" * 4:
        return  # refused, or the old framing without a continuation marker (which parse does not read)
    parts = ipc_build.parse(memoryview(data)[start:])
    all_nodes = list(struct.iter_unpack("<qq", parts.nodes))
    all_bufs = [(start + parts.body_start + o, n) for o, n in struct.iter_unpack("<qq", parts.buffers)]
    if len(all_nodes) < nodes or len(all_bufs) < bufs:
        assert got is None
        return
    assert got == (parts.codec if parts.compressed else None, tuple(all_nodes[len(all_nodes) - nodes:]),
                   tuple(all_bufs[len(all_bufs) - bufs:])), (got, data[:64].hex())


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), compression=st.sampled_from([None, "zstd", "lz4"]), seed=st.integers(0, 2**32))
def test_the_tail_of_a_message_agrees_with_the_python_parse_and_stays_inside(data, compression, seed) -> None:
    """``tail`` (the last nodes and buffers of a message: a 2.x segment's ``_time`` and ``_seq``) on real messages
    of random schemas, damaged as the fuzzers know, and placed after other bytes."""
    schema = data.draw(schemas())
    batch = data.draw(batches(schema, min_rows=0, max_rows=20))
    raw = message(batch, compression, {"eventlog.seq": "7"})
    want = data.draw(st.sampled_from([(0, 0), (1, 2), (2, 4), (3, 1), (64, 64)]))
    tail_agrees(raw, 0, *want)
    rnd = random.Random(seed)
    for _ in range(40):
        tail_agrees(damaged(rnd, raw), 0, *want)
    for start in (1, 3, len(raw) // 2):
        tail_agrees(rnd.randbytes(start) + raw, start, *want)


def test_the_tail_of_random_bytes_is_none_without_a_crash() -> None:
    rnd = random.Random(6)
    for n in [0, 1, 7, 8, 9, 16, 64, 4096] * 50:
        data = rnd.randbytes(n)
        got = native.tail(data, 0, 2, 4)
        assert got is None or all(0 <= at and at + k <= n for at, k in got[2])
    for start in (-1, 1, 10, 2**40):
        assert native.tail(b"\xff" * 16, start, 2, 4) is None
    for counts in ((-1, 0), (0, -1), (65, 0), (0, 65)):  # never more than a segment's last few
        assert native.tail(message(pa.record_batch([pa.array([1])], names=["a"]), None), 0, *counts) is None


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), compression=st.sampled_from([None, "zstd", "lz4"]), seed=st.integers(0, 2**32),
       meta=st.dictionaries(st.text(max_size=12), st.text(max_size=30), max_size=5))
def test_empty_reads_the_counts_and_metadata_pyarrow_reads_and_survives_damage(data, compression, seed, meta) -> None:
    """``empty`` (the row count, node and buffer counts and custom metadata of a message: how a Progress event
    is decoded without pyarrow) agrees with pyarrow on real messages and never crashes on damaged ones."""
    schema = data.draw(schemas())
    batch = data.draw(batches(schema, min_rows=0, max_rows=20))
    raw = message(batch, compression, meta or None)
    rows, nodes, buffers, pairs = native.empty(raw, 0)
    reader = ipc.open_stream(pa.py_buffer(batch.schema.serialize().to_pybytes() + raw))
    got, got_meta = reader.read_next_batch_with_custom_metadata()
    assert rows == got.num_rows and dict(pairs) == dict(got_meta or {})
    parts = ipc_build.parse(raw)
    assert (nodes, buffers) == (len(parts.nodes) // 16, len(parts.buffers) // 16)
    rnd = random.Random(seed)
    for _ in range(40):
        bad = damaged(rnd, raw)
        found = native.empty(bad, 0)
        assert found is None or (len(found) == 4 and all(isinstance(k, bytes) and isinstance(v, bytes)
                                                         for k, v in found[3]))
    for n in [0, 1, 8, 16, 64]:
        assert native.empty(rnd.randbytes(n), 0) is None or n >= 8


def _plain_ok_in_python(offsets: bytes, data: "bytes | None", offset: int, n: int, width: int, text: bool) -> bool:
    """What ``plain_ok`` must answer, spelled out: offsets ascending from >= 0 to inside data, ASCII bytes."""
    if width not in (4, 8) or offset < 0 or n < 0 or (offset + n + 1) * width > len(offsets):
        return False
    fmt = "<i" if width == 4 else "<q"
    o = [struct.unpack_from(fmt, offsets, (offset + i) * width)[0] for i in range(n + 1)]
    size = len(data) if data is not None else 0
    if o[0] < 0 or o[-1] > size or any(b < a for a, b in zip(o, o[1:])):
        return False
    return not text or o[-1] == o[0] or max(data[o[0]:o[-1]]) < 0x80  # type: ignore[index]


@settings(max_examples=600, deadline=None)
@given(offsets=st.binary(max_size=80), data=st.one_of(st.none(), st.binary(max_size=60)),
       offset=st.integers(-3, 30), n=st.integers(-3, 30), width=st.sampled_from([4, 8, 0, 3, 16]),
       text=st.booleans())
def test_plain_ok_answers_as_its_specification_on_any_bytes(offsets, data, offset, n, width, text) -> None:
    """``plain_ok`` (the string column pass of ``validate_full``) on arbitrary buffers, positions, counts and
    widths — out of range ones included — answers what the Python statement of its rule answers, never
    reading outside the buffers (AddressSanitizer, per the README) and never crashing."""
    assert native.plain_ok(offsets, data, offset, n, width, text) == _plain_ok_in_python(offsets, data, offset, n,
                                                                                        width, text)


def test_plain_ok_on_huge_positions_is_false() -> None:
    for offset, n in ((2**62, 1), (1, 2**62), (2**62, 2**62), (0, 2**61)):
        assert native.plain_ok(b"\0" * 16, b"", offset, n, 8, True) is False
