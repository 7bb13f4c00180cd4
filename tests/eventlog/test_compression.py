"""A compression per stream (FORMAT.md §13): the writer's choice is recorded in the stream header, every event is
compressed with it, every reader reads it, and a header naming a codec this eventlog does not know is refused
clearly. The LZ4 frames of the constant ``_time``/``_seq`` columns are built directly, as the zstd ones are."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capture import Capture
from eventlog import CorruptLogError, Messages, open_log
from eventlog.encoding import arrow_file, ipc_build, lz4_frame
from eventlog.errors import HeaderMismatchError, UnsupportedVersionError
from eventlog.header import COMPRESSIONS, StreamHeader, header_checksum
from replay import Replayer

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("f", pa.float64())])
ALL = [(enc, c) for enc, cs in COMPRESSIONS.items() for c in cs]


def _batch(start: int, n: int) -> pa.RecordBatch:
    ids = np.arange(start, start + n)
    return pa.record_batch([pa.array(ids), pa.array([f"v{i % 13}" for i in ids]),
                            pa.array([None if i % 5 == 0 else i / 3 for i in ids])], schema=SCHEMA)


def _write(root: str, encoding: str, compression: "str | None", sizes=(1, 2, 3, 10_000)) -> list:  # noqa: ANN001
    sent = []
    with Capture(open_log(root), "s", 0, 1, schema=SCHEMA, encoding=encoding, compression=compression) as cap:
        start = 0
        for t, n in enumerate(sizes):
            b = _batch(start, n)
            cap.send(t, b)
            sent.append((t, b))
            start += n
            cap.advance_to(t + 1)
    return sent


def _codecs_of_messages(root: str) -> set:
    """The IPC body compression (None, 0 LZ4_FRAME, 1 ZSTD) of every Messages event, found through the index."""
    import glob
    import os

    from connectors.files import index as ix

    out = set()
    for seg in glob.glob(f"{root}/s/part=0/*.arrow"):
        first = int(os.path.basename(seg).split(".")[0])
        with open(seg, "rb") as f:
            data = f.read()
        with open(f"{root}/s/part=0/_{first:020d}.index", "rb") as f:
            index = f.read()
        for pos in range(16, len(index), 32):
            e = ix.unpack_entry(index, pos)
            if e is not None and e.kind == ix.KIND_MESSAGES:
                parts = ipc_build.parse(data[e.offset:e.offset + e.length])
                out.add(parts.codec if parts.compressed else None)
    return out


@pytest.mark.parametrize("encoding,compression", ALL)
def test_the_choice_is_recorded_and_every_reader_reads_it(tmp_path, encoding, compression):
    root = str(tmp_path)
    sent = _write(root, encoding, compression)
    header = open_log(root).header("s")
    assert header.compression == compression
    with open(tmp_path / "s" / "_header.json") as f:
        assert json.load(f)["compression"] == compression
    got = [(t, table) for t, table in Replayer(open_log(root), "s").completed()]
    assert [t for t, _ in got] == [t for t, _ in sent]
    for (_, table), (_, batch) in zip(got, sent):
        assert table.equals(pa.Table.from_batches([batch]))
    if encoding == "arrow":
        assert _codecs_of_messages(root) == {{"zstd": 1, "lz4": 0, "none": None}[compression]}


@pytest.mark.parametrize("compression", ["zstd", "lz4", "none"])
def test_arrow_segments_read_their_meta_columns_from_their_bytes_for_each_codec(tmp_path, compression, monkeypatch):
    """The decoder reads ``_time`` and ``_seq`` from the frames' (or raw values') bytes, never decodes them."""
    calls = []
    real = arrow_file._FileSegmentDecoder._meta_batch
    monkeypatch.setattr(arrow_file._FileSegmentDecoder, "_meta_batch", lambda dec: calls.append(1) or real(dec))
    root = str(tmp_path)
    _write(root, "arrow", compression)
    with open_log(root).reader("s", 0) as r:
        events = [e.event for e in r]
    assert sum(isinstance(e, Messages) for e in events) == 4 and calls == []


def test_no_compression_given_means_zstd_for_arrow_and_the_logs_codec_for_avro(tmp_path):
    _write(str(tmp_path / "a"), "arrow", None)
    assert open_log(str(tmp_path / "a")).header("s").compression is None
    assert _codecs_of_messages(str(tmp_path / "a")) == {1}
    with open(tmp_path / "a" / "s" / "_header.json") as f:
        assert "compression" not in json.load(f)  # as a 2.0/2.1 writer wrote it
    log = open_log(str(tmp_path / "b"), avro_codec="zstandard")
    with Capture(log, "s", 0, 1, schema=SCHEMA, encoding="avro") as cap:
        cap.send(0, _batch(0, 3))
    import glob

    import fastavro

    with open(glob.glob(str(tmp_path / "b" / "s" / "part=0" / "*.avro"))[0], "rb") as f:
        assert fastavro.reader(f).codec == "zstandard"


def test_a_reopened_stream_keeps_its_compression_and_refuses_another(tmp_path):
    root = str(tmp_path)
    with Capture(open_log(root), "s", 0, 2, schema=SCHEMA, compression="lz4") as cap:
        cap.send(0, _batch(0, 5))
    with Capture(open_log(root), "s", 1, 2, schema=SCHEMA) as cap:  # unspecified: follows the stream
        assert cap.header.compression == "lz4"
        cap.send(0, _batch(5, 5))
    with pytest.raises(HeaderMismatchError, match="compression"):
        Capture(open_log(root), "s", 1, 2, schema=SCHEMA, compression="zstd")
    with pytest.raises(HeaderMismatchError, match="compression"):
        Capture(open_log(root), "s", 1, 2, compression="none")
    zstd = str(tmp_path / "z")
    _write(zstd, "arrow", None)
    stored = open_log(zstd).create_stream(StreamHeader("s", 1, SCHEMA, compression="zstd"))  # the default, said
    assert stored.compression is None  # explicitly, is the same stream


def test_a_compression_of_another_encoding_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="compression 'lz4' is not one of the avro"):
        StreamHeader("s", 1, SCHEMA, encoding="avro", compression="lz4")
    with pytest.raises(ValueError, match="compression 'deflate' is not one of the arrow"):
        Capture(open_log(str(tmp_path)), "s", 0, 1, schema=SCHEMA, compression="deflate")
    assert not (tmp_path / "s").exists()


def _stored(doc: dict) -> bytes:
    doc = dict(doc)
    doc["checksum"] = header_checksum(doc)
    return json.dumps(doc).encode()


def test_a_header_naming_an_unknown_codec_is_refused_clearly():
    doc = json.loads(StreamHeader("s", 1, SCHEMA, compression="lz4").to_json())
    assert StreamHeader.from_json(_stored(doc)).compression == "lz4"
    with pytest.raises(UnsupportedVersionError, match="compressed with 'brotli'.*zstd, lz4, none"):
        StreamHeader.from_json(_stored({**doc, "compression": "brotli"}))
    with pytest.raises(UnsupportedVersionError, match="compressed with 'lz4'.*deflate"):
        StreamHeader.from_json(_stored({**doc, "encoding": "avro"}))
    with pytest.raises(CorruptLogError, match="'compression' is a int"):
        StreamHeader.from_json(_stored({**doc, "compression": 4}))
    damaged = json.loads(StreamHeader("s", 1, SCHEMA, compression="lz4").to_json())
    damaged["compression"] = "none"  # edited without its checksum
    with pytest.raises(CorruptLogError, match="checksum"):
        StreamHeader.from_json(json.dumps(damaged).encode())


@pytest.mark.parametrize("compression", ["zstandard", "deflate", "lz4", "zstd"])
def test_kafka_records_of_avro_are_uncompressed_so_an_avro_codec_is_refused_there(compression):
    from eventlog.encoding import codec_for

    if compression in COMPRESSIONS["avro"]:
        with pytest.raises(ValueError, match="Kafka records hold Avro events uncompressed"):
            codec_for(StreamHeader("s", 1, SCHEMA, encoding="avro", compression=compression))
    codec_for(StreamHeader("s", 1, SCHEMA, encoding="avro", compression="null"))
    codec_for(StreamHeader("s", 1, SCHEMA, encoding="avro"))


@pytest.mark.parametrize("compression", ["lz4", "none"])
def test_kafka_arrow_records_carry_the_compression(compression):
    """The Arrow record of a Kafka log (an IPC stream of one batch) is compressed with the header's codec, and
    decodes back to the event."""
    from eventlog.encoding import codec_for

    header = StreamHeader("s", 1, SCHEMA, compression=compression)
    codec = codec_for(header)
    value = codec.record_encoder().encode(7, Messages(3, _batch(0, 100)))
    reader = pa.ipc.open_stream(value)
    assert reader.read_all().equals(pa.Table.from_batches([_batch(0, 100)]))
    seq, event = codec.record_decoder().decode(value)
    assert seq == 7 and event.records.equals(_batch(0, 100))
    message = value[len(codec.prefix):]
    parts = ipc_build.parse(message)
    assert (parts.codec if parts.compressed else None) == {"lz4": 0, "none": None}[compression]


# -- the constant LZ4 frames ------------------------------------------------------------------------------------


@given(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(1, 1_200_000))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_constant_lz4_frame_decodes_to_its_values_and_gives_back_its_value(value, count):
    frame = lz4_frame.constant_int64_frame(value, count)
    out = pa.decompress(frame, decompressed_size=8 * count, codec="lz4", asbytes=True)
    values = np.frombuffer(out, np.int64)
    assert values.size == count and bool((values == value).all())
    assert lz4_frame.constant_int64_value(frame, count) == value
    assert lz4_frame.constant_int64_value(frame, count + 1) is None
    assert len(frame) <= 32 + (8 * count) // 255 + 32 * (count // 524288 + 1)  # a byte per 255 of the matches


@given(st.integers(1, 70_000), st.integers(-(1 << 63), (1 << 63) - 1), st.data())
@settings(max_examples=150, deadline=None)
def test_a_changed_constant_lz4_frame_is_not_taken_for_one(count, value, data):
    """Any byte flipped makes the frame another one: it is read by decoding it (pyarrow says what is wrong), never
    taken for a constant of another value."""
    frame = bytearray(lz4_frame.constant_int64_frame(value, count))
    at = data.draw(st.integers(0, len(frame) - 1))
    frame[at] ^= 1 << data.draw(st.integers(0, 7))
    got = lz4_frame.constant_int64_value(bytes(frame), count)
    if got is not None:  # only a flip inside the value's own bytes gives a frame of another value, consistently
        assert bytes(frame) == lz4_frame.constant_int64_frame(got, count) and got != value


def test_pyarrows_lz4_frames_of_a_constant_column_are_decoded_not_recognised():
    values = np.full(10_000, 42, np.int64).tobytes()
    frame = pa.compress(values, codec="lz4", asbytes=True)
    assert lz4_frame.constant_int64_value(frame, 10_000) is None


def test_segments_of_another_writers_lz4_frames_are_read_and_checked(tmp_path):
    """A segment whose ``_time``/``_seq`` buffers are pyarrow's LZ4 frames (another writer) reads the same; a
    ``_seq`` column that disagrees with the event is a CorruptLogError."""
    from connectors.files.codec import file_codec

    root = str(tmp_path)
    _write(root, "arrow", "lz4", sizes=(10, 20))
    header = open_log(root).header("s")
    codec = file_codec(header)
    enc = codec.new_segment()
    enc._assembled = False  # pyarrow's writer for every column
    body = enc.encode(1, Messages(0, _batch(0, 50)))
    parts = ipc_build.parse(body)
    assert parts.compressed and parts.codec == 0
    dec = codec.segment_decoder(enc.prefix)
    seg = pa.py_buffer(enc.prefix + body)
    seq, event = dec.decode_at(seg, len(enc.prefix), len(body))
    assert seq == 1 and event.records.equals(_batch(0, 50))
    bad = codec.new_segment()
    bad._assembled = False
    def rows_with_another_seq(event, seq):  # noqa: ANN001, ANN202, ARG001 - a _seq column of another value
        n = event.records.num_rows
        return pa.RecordBatch.from_arrays(list(event.records.columns) + [
            pa.array([event.time] * n, pa.int64()), pa.array([99] * n, pa.int64())], schema=bad._schema)

    bad._rows = rows_with_another_seq
    body = bad.encode(1, Messages(0, _batch(0, 50)))
    with pytest.raises(CorruptLogError, match="_seq"):
        codec.segment_decoder(bad.prefix).decode_at(pa.py_buffer(bad.prefix + body), len(bad.prefix), len(body))


@pytest.mark.parametrize("delta", [8, -8, 1 << 40])
@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_a_frame_that_holds_another_size_than_declared_is_corrupt(tmp_path, compression, delta):
    """The int64 before each frame is the size decompressed into (bounded first, §8): a frame holding more or fewer
    bytes, or a declared size over the limits, is a CorruptLogError and nothing is allocated for it."""
    import struct

    from connectors.files.codec import file_codec

    root = str(tmp_path)
    _write(root, "arrow", compression, sizes=(3,))
    codec = file_codec(open_log(root).header("s"))
    enc = codec.new_segment()
    body = bytearray(enc.encode(1, Messages(0, _batch(0, 5000))))
    parts = ipc_build.parse(bytes(body))
    offset, length = next((o, k) for o, k in struct.iter_unpack("<qq", parts.buffers) if k > 8)  # the id column
    at = parts.body_start + offset
    declared = int.from_bytes(body[at:at + 8], "little", signed=True)
    body[at:at + 8] = (declared + delta).to_bytes(8, "little", signed=True)
    with pytest.raises(CorruptLogError):
        codec.segment_decoder(enc.prefix).decode_at(pa.py_buffer(enc.prefix + bytes(body)), len(enc.prefix), len(body))


@pytest.mark.parametrize("encoding,compression", [("arrow", "zstd"), ("arrow", "lz4"), ("arrow", "none"),
                                                  ("avro", "null")])
def test_every_log_kind_records_and_reads_the_choice(log_uri, encoding, compression):
    """File, memory and Kafka logs: the header read back has the choice, and a replay gives what was sent."""
    sent = _write(log_uri, encoding, compression, sizes=(1, 500))
    assert open_log(log_uri).header("s").compression == compression
    got = list(Replayer(open_log(log_uri), "s").completed())
    assert [(t, table.to_pylist()) for t, table in got] == [(t, b.to_pylist()) for t, b in sent]
