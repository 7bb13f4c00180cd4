"""The assembled messages of 2.x Arrow file segments (``eventlog.encoding.ipc_build``): the bytes a reader sees
must be those pyarrow's writer gives — the same events, the same record batches for pyarrow's own readers, the
same limits — for every schema, time, sequence id and Progress event; and the constant columns' zstd frames
(``zstd_frame.constant_int64_frame``) must decompress to exactly their values in every zstd decoder we use."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.ipc as ipc
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capture import Capture
from connectors.files import FileLog
from eventlog import LimitError, Messages, Progress, StreamHeader
from eventlog.encoding import arrow_file, ipc_build
from eventlog.encoding.arrow_file import ArrowFileCodec
from eventlog.encoding.ipc_message import check_record_batch_message
from eventlog.encoding.zstd_frame import constant_int64_frame, frame_bounds
from eventlog.time import TimeType
from tests.support.strategies import batches, schemas

INT64 = st.integers(-(2**63), 2**63 - 1)
TIMES = st.integers(0, 2**63 - 1)
SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- the constant frames ---------------------------------------------------------------------------------------


def _check_frame(value: int, count: int) -> None:
    frame = constant_int64_frame(value, count)
    want = np.full(count, value, dtype=np.int64).tobytes()
    assert zstandard.ZstdDecompressor().decompress(frame) == want  # one shot, sized by the declared size
    assert zstandard.ZstdDecompressor().decompressobj().decompress(frame) == want  # streaming, window-bound
    assert pa.decompress(frame, len(want), codec="zstd", asbytes=True) == want  # Arrow's libzstd (its IPC reader)
    length, bound = frame_bounds(frame)  # what eventlog's own bound walks: whole, within its expansion bound
    assert length == len(frame) and bound >= len(want)


@given(value=INT64, count=st.integers(1, 3000))
@settings(max_examples=300, deadline=None)
def test_constant_frames_decompress_to_their_values(value, count):
    _check_frame(value, count)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 16383, 16384, 16385, 32767, 32768, 32769, 49152, 100_000, 1 << 20])
@pytest.mark.parametrize("value", [0, 1, 7, 255, 256, -1, 2**63 - 1, -(2**63), 123456789])
def test_constant_frames_at_block_boundaries(value, count):
    """A block regenerates at most 128 KiB (16 384 values): one block, two, a full last block, many."""
    _check_frame(value, count)


def test_constant_frames_are_small_and_refuse_no_values():
    assert len(constant_int64_frame(7, 10_000)) < 40  # zstd's own: 2.5 KB (and ~180 µs)
    assert len(constant_int64_frame(7, 1 << 20)) < 1000
    with pytest.raises(ValueError):
        constant_int64_frame(7, 0)


# -- assembled messages ≡ pyarrow's ------------------------------------------------------------------------------


def _header(schema: pa.Schema, time: str = "int64") -> StreamHeader:
    return StreamHeader("s", 1, schema, TimeType.parse(time), "arrow", version=(2, 0))


def _encode_both(header: StreamHeader, seq: int, event) -> tuple[bytes, bytes, ArrowFileCodec]:
    """The message of ``event`` assembled and through pyarrow's writer (two fresh segments)."""
    codec = ArrowFileCodec(header)
    fast = codec.new_segment({"eventlog.epoch": b"3"})
    assert fast._assembled
    slow = codec.new_segment({"eventlog.epoch": b"3"})
    slow._assembled = False
    return fast.encode(seq, event), slow.encode(seq, event), codec


def _same_reading(codec: ArrowFileCodec, fast: bytes, slow: bytes, seq: int, event) -> None:
    prefix = codec.new_segment({"eventlog.epoch": b"3"}).prefix
    for body in (fast, slow):
        dec = codec.segment_decoder(prefix)
        got_seq, got = dec.decode(body)
        assert got_seq == seq and got == event
        # pyarrow alone (a third-party reader): the same batch with the _time and _seq columns, same metadata
        reader = ipc.open_stream(pa.py_buffer(prefix[8:] + body))
        batch, meta = reader.read_next_batch_with_custom_metadata()
        batch.validate(full=True)
        yield_ = (batch, dict(meta))
        if body is fast:
            fast_read = yield_
        else:
            slow_read = yield_
    assert fast_read[0].equals(slow_read[0])
    drop_ts = {k: v for k, v in fast_read[1].items() if k != b"eventlog.ts"}
    assert drop_ts == {k: v for k, v in slow_read[1].items() if k != b"eventlog.ts"}
    a, b = check_record_batch_message(memoryview(fast)), check_record_batch_message(memoryview(slow))
    assert (a.rows, a.values, a.end, b.end) == (b.rows, b.values, len(fast), len(slow))
    assert a.decoded_bytes == b.decoded_bytes


def _ok_schema(schema: pa.Schema) -> bool:
    return not {"_time", "_seq"} & set(schema.names)


@given(data=st.data(), schema=schemas().filter(_ok_schema), seq=st.integers(1, 2**63 - 1), time=TIMES)
@SLOW
def test_assembled_messages_read_as_pyarrows(data, schema, seq, time):
    batch = data.draw(batches(schema, max_rows=40))
    event = Messages(time, batch)
    fast, slow, codec = _encode_both(_header(schema), seq, event)
    _same_reading(codec, fast, slow, seq, event)


@given(schema=schemas().filter(_ok_schema), seq=st.integers(1, 2**63 - 1),
       updates=st.lists(st.tuples(TIMES, st.integers(-(2**63), 2**63 - 1).filter(bool)), max_size=20))
@SLOW
def test_assembled_progress_reads_as_pyarrows(schema, seq, updates):
    event = Progress(tuple(sorted(dict(updates).items())))
    fast, slow, codec = _encode_both(_header(schema), seq, event)
    _same_reading(codec, fast, slow, seq, event)


VIEW_SCHEMA = pa.schema([("v", pa.string_view()), ("b", pa.binary_view()), ("x", pa.int64())])


@pytest.mark.parametrize("rows", [1, 3, 20_000])
def test_assembled_messages_with_view_columns_and_many_rows(rows):
    """Variadic buffer counts (string and binary views) are carried over; a batch larger than a zstd block."""
    long = "x" * 20
    batch = pa.record_batch([pa.array([f"{long}{i}" for i in range(rows)], pa.string_view()),
                             pa.array([b"ab" * (i % 9) for i in range(rows)], pa.binary_view()),
                             pa.array(range(rows), pa.int64())], schema=VIEW_SCHEMA)
    for time, seq in ((5, 5), (0, 2**40), (2**63 - 1, 1)):
        event = Messages(time, batch)
        fast, slow, codec = _encode_both(_header(VIEW_SCHEMA), seq, event)
        _same_reading(codec, fast, slow, seq, event)
    fast, slow, codec = _encode_both(_header(VIEW_SCHEMA), 9, Progress(((1, -1), (4, 2))))
    _same_reading(codec, fast, slow, 9, Progress(((1, -1), (4, 2))))


def test_uncompressed_segments_assemble_raw_columns():
    schema = pa.schema([("x", pa.int64()), ("s", pa.string())])
    header = _header(schema)
    codec = ArrowFileCodec(header, compression="none")
    event = Messages(7, pa.record_batch([pa.array([1, 2, 3]), pa.array(["a", None, "c"])], schema=schema))
    fast_enc, slow_enc = codec.new_segment(), codec.new_segment()
    slow_enc._assembled = False
    fast, slow = fast_enc.encode(4, event), slow_enc.encode(4, event)
    _same_reading(codec, fast, slow, 4, event)
    a, b = ipc_build.parse(fast), ipc_build.parse(slow)
    assert not a.compressed and not b.compressed
    assert fast[a.body_start:] == slow[b.body_start:]  # the same body, byte for byte


def test_product_times_and_overridden_rows_take_pyarrows_path():
    schema = pa.schema([("x", pa.int64())])
    assert not ArrowFileCodec(_header(schema, "product:2")).new_segment()._assembled

    class Rows(arrow_file._FileSegmentEncoder):
        def _rows(self, event, seq):  # noqa: ANN001, ANN202
            return super()._rows(event, seq)

    assert not Rows(ArrowFileCodec(_header(schema)), None)._assembled


@pytest.mark.parametrize("limit,value", [("MAX_EVENT_VALUES", 10), ("MAX_EVENT_METADATA_BYTES", 200)])
def test_limits_are_the_readers_in_both_paths(monkeypatch, limit, value):
    """An event over a limit the readers hold events to raises the same LimitError assembled or not."""
    from eventlog.encoding import ipc_message

    monkeypatch.setattr(arrow_file, limit, value)
    monkeypatch.setattr(ipc_message, limit, value)
    schema = pa.schema([("x", pa.int64())])
    codec = ArrowFileCodec(_header(schema))
    big = Messages(1, pa.record_batch([pa.array(range(6))], schema=schema)) if limit == "MAX_EVENT_VALUES" else \
        Progress(tuple((t, 1) for t in range(40)))
    errors = []
    for assembled in (True, False):
        enc = codec.new_segment()
        enc._assembled = assembled
        with pytest.raises(LimitError) as e:
            enc.encode(3, big)
        errors.append((type(e.value), e.value.reason.split(" is ")[0], e.value.seq))
    assert errors[0] == errors[1]


# -- whole segments ------------------------------------------------------------------------------------------------


def test_assembled_segments_scan_as_datasets_and_files(tmp_path):
    """A part written assembled reads back through eventlog, pyarrow.ipc.open_file (the footer) and
    pyarrow.dataset exactly as one written through pyarrow's writer."""
    schema = pa.schema([("id", pa.int64()), ("s", pa.string())])
    rng = np.random.default_rng(1)
    sent = [pa.record_batch([pa.array(rng.integers(0, 1 << 40, 500)), pa.array([f"r{i}" for i in range(500)])],
                            schema=schema) for _ in range(12)]
    tables = {}
    for assembled in (True, False):
        root = str(tmp_path / str(assembled))
        try:
            ArrowFileCodec.assemble = assembled
            log = FileLog(root, sync="none", segment_bytes=20_000)
            with Capture(log, "s", 0, 1, schema=schema) as cap:
                for t, b in enumerate(sent):
                    cap.send(t * 3, b)
                    cap.advance_to(t * 3 + 1)
        finally:
            ArrowFileCodec.assemble = True
        events = [(e.seq, e.event) for e in FileLog(root).reader("s", 0)]
        segs = sorted(f for f in os.listdir(os.path.join(root, "s", "part=0")) if f.endswith(".arrow"))
        assert len(segs) > 2
        files = [ipc.open_file(pa.memory_map(os.path.join(root, "s", "part=0", f))).read_all() for f in segs]
        tables[assembled] = (events, pa.concat_tables(files),
                             ds.dataset(os.path.join(root, "s"), format="arrow", partitioning="hive").to_table())
    assert tables[True][0] == tables[False][0]
    assert tables[True][1].equals(tables[False][1])
    assert tables[True][2].sort_by("_seq").equals(tables[False][2].sort_by("_seq"))
    assert tables[True][1].num_rows == 12 * 500


def test_records_whose_schema_differs_only_in_nullability_or_metadata_encode_as_before():
    """The pyarrow path rebuilt every batch on the segment schema; the assembled one does too when the
    records' schema is not the stream's (a field marked nullable, other metadata)."""
    schema = pa.schema([pa.field("x", pa.int64(), nullable=False)], metadata={b"k": b"v"})
    loose = pa.record_batch([pa.array([1, 2])], schema=pa.schema([pa.field("x", pa.int64())]))
    event = Messages(3, loose)
    fast, slow, codec = _encode_both(_header(schema), 2, event)
    for body in (fast, slow):
        _, got = codec.segment_decoder(codec.new_segment({"eventlog.epoch": b"3"}).prefix).decode(body)
        assert got.records.schema.equals(schema, check_metadata=True)
        assert got.records.column(0).to_pylist() == [1, 2]
