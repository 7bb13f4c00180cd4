"""The ``_time`` and ``_seq`` columns of 2.x Arrow file segments, checked from their bytes: with int64 times a
segment decoder decodes only the stream's own columns when the two buffers are the constant frames this
package's writers build (their one value read from the frame), and decodes the two columns on their own when
they are anything else (pyarrow's compressor, raw values). Either way a column that disagrees with its event is
a CorruptLogError, and any damage gives the verdict the decoding of every column gives."""

from __future__ import annotations

import glob
import os
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capture import Capture
from connectors.files import index as ix
from connectors.files.codec import file_codec
from eventlog import CorruptLogError, Messages, open_log
from eventlog.encoding import arrow_file
from eventlog.encoding.zstd_frame import constant_int64_frame, constant_int64_value
from replay import Replayer

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string())])


def _batch(start: int, n: int) -> pa.RecordBatch:
    ids = np.arange(start, start + n)
    return pa.record_batch([pa.array(ids), pa.array([f"v{i}" for i in ids])], schema=SCHEMA)


def _capture(root: str, sizes=(1, 7, 3000), times=(0, 5, 1 << 40), peers: int = 1) -> None:  # noqa: ANN001
    log = open_log(root)
    for p in range(peers):
        with Capture(log, "s", p, peers, schema=SCHEMA) as cap:
            start = 0
            for t in times:
                for n in sizes:
                    cap.send(t, _batch(start, n))
                    start += n
                cap.advance_to(t + 1)


def _events(root: str) -> list:
    log = open_log(root)
    return [(e.seq, e.event) for p in range(log.header("s").peers) for e in log.reader("s", p)]


class _Spy:
    """Counts how the decoders of the process checked meta columns."""

    def __init__(self, monkeypatch) -> None:  # noqa: ANN001
        self.by_bytes = self.decoded = 0
        by_bytes, decoded = arrow_file._FileSegmentDecoder._meta_by_bytes, arrow_file._FileSegmentDecoder._meta_batch

        def spy_bytes(dec, *a):  # noqa: ANN001, ANN002, ANN202
            ok = by_bytes(dec, *a)
            self.by_bytes += ok
            return ok

        def spy_decoded(dec):  # noqa: ANN001, ANN202
            self.decoded += 1
            return decoded(dec)

        monkeypatch.setattr(arrow_file._FileSegmentDecoder, "_meta_by_bytes", spy_bytes)
        monkeypatch.setattr(arrow_file._FileSegmentDecoder, "_meta_batch", spy_decoded)


def test_events_of_this_writer_are_read_without_decoding_their_meta_columns(tmp_path, monkeypatch):
    _capture(str(tmp_path), peers=2)
    spy = _Spy(monkeypatch)
    events = _events(str(tmp_path))
    messages = [e for _, e in events if isinstance(e, Messages)]
    assert len(messages) == 2 * 9 and spy.by_bytes == len(messages) and spy.decoded == 0
    assert [m.time for m in messages[:9]] == [t for t in (0, 5, 1 << 40) for _ in range(3)]
    assert all(m.records.schema.equals(SCHEMA, check_metadata=True) for m in messages)
    with Replayer(open_log(str(tmp_path)), "s", 0, 1) as r:  # decoded ahead on the pool, then merged
        assert sum(e.records.num_rows for e in r if isinstance(e, Messages)) == 2 * 3 * 3008


def test_events_of_pyarrows_writer_have_their_meta_columns_decoded_and_read_the_same(tmp_path, monkeypatch):
    """Segments whose ``_time``/``_seq`` pyarrow compressed (``assemble = False``, as 2.0 writers before ``ipc_build``
    did): a segment decoder decodes them for the first event whose frames are pyarrow's, then reads the rest of
    the segment whole."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    times = tuple(range(8))
    _capture(ours, times=times)
    monkeypatch.setattr(arrow_file.ArrowFileCodec, "assemble", False)
    _capture(theirs, times=times)
    monkeypatch.undo()
    want = _events(ours)
    assert _events(theirs) == want  # decoded ahead on the pool too
    monkeypatch.setenv("EVENTLOG_READ_AHEAD", "0")  # one decoder for the segment
    spy = _Spy(monkeypatch)
    assert _events(theirs) == want
    # the first event's buffers are pyarrow's frames: decoded on their own; the rest of the segment read whole
    assert spy.by_bytes == 0 and spy.decoded == 1


def _segment(root: str):  # noqa: ANN202
    """(decoder factory, mapped segment bytes, Messages index entries) of part 0's first segment."""
    path = sorted(glob.glob(os.path.join(root, "s", "part=0", "*.arrow")))[0]
    raw = open(os.path.join(os.path.dirname(path), "_" + os.path.basename(path)[:-6] + ".index"), "rb").read()
    entries = [ix.unpack_entry(raw, ix.HEADER_SIZE + i * ix.ENTRY_SIZE)
               for i in range((len(raw) - ix.HEADER_SIZE) // ix.ENTRY_SIZE)]
    data = open(path, "rb").read()
    codec = file_codec(open_log(root).header("s"))
    first = entries[0].offset

    def decoder(own_only: bool):  # noqa: ANN202
        dec = codec.segment_decoder(data[:first])
        dec._own_only = own_only
        return dec

    return decoder, data, [e for e in entries if e.kind == ix.KIND_MESSAGES]


def _outcome(decoder, data: bytes, entry) -> tuple:  # noqa: ANN001
    try:
        seq, event = decoder.decode_at(pa.py_buffer(data), entry.offset, entry.length)
    except CorruptLogError:
        return ("corrupt",)
    return ("ok", seq, event)


@pytest.mark.parametrize("column", ["_time", "_seq"])
def test_a_constant_frame_of_another_value_is_a_corrupt_log_error(tmp_path, column):
    _capture(str(tmp_path))
    decoder, data, messages = _segment(str(tmp_path))
    entry = messages[4]  # time 5, seq 6: its frames hold 5 and 6
    seq, event = decoder(True).decode_at(pa.py_buffer(data), entry.offset, entry.length)
    value = event.time if column == "_time" else seq
    n = event.records.num_rows
    frame = constant_int64_frame(value, n)
    body = data[entry.offset : entry.offset + entry.length]
    assert body.count(frame) == 1 + (event.time == seq)  # _time's buffer comes before _seq's
    at = entry.offset + body.rindex(frame) if column == "_seq" else entry.offset + body.index(frame)
    lying = data[:at] + constant_int64_frame(value + 1, n) + data[at + len(frame):]
    with pytest.raises(CorruptLogError, match=f"the {column} column disagrees"):
        decoder(True).decode_at(pa.py_buffer(lying), entry.offset, entry.length)
    with pytest.raises(CorruptLogError, match=f"the {column} column disagrees"):
        decoder(False).decode_at(pa.py_buffer(lying), entry.offset, entry.length)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32))
def test_any_damage_to_an_event_gets_the_verdict_of_decoding_every_column(tmp_path_factory, seed):
    """A bit flipped in a Messages event — its metadata, the two meta buffers, anywhere — gives the same result
    read by bytes as decoded whole: the same event, a changed one (a seq digit: the reader's checksum and seq
    check catch those), or a CorruptLogError. One bit at a time (every single flip of two events checked
    exhaustively agreed): with two, one may change the metadata while another hits a field only the whole
    decoding reads."""
    root = str(tmp_path_factory.mktemp("meta"))
    _capture(root, sizes=(1, 40), times=(3, 1 << 33))
    decoder, data, messages = _segment(root)
    rnd = random.Random(seed)
    entry = rnd.choice(messages)
    intact = _outcome(decoder(True), data, entry)
    assert intact[0] == "ok" and intact == _outcome(decoder(False), data, entry)
    b = bytearray(data)
    meta_len = int.from_bytes(data[entry.offset + 4 : entry.offset + 8], "little")
    tail_start = entry.offset + entry.length - 2 * len(constant_int64_frame(0, intact[2].records.num_rows)) - 32
    where = rnd.choice([(entry.offset, entry.offset + 8 + meta_len),  # the message's metadata
                        (max(entry.offset, tail_start), entry.offset + entry.length),  # the meta buffers
                        (entry.offset, entry.offset + entry.length)])
    b[rnd.randrange(*where)] ^= 1 << rnd.randrange(8)
    fast, whole = _outcome(decoder(True), bytes(b), entry), _outcome(decoder(False), bytes(b), entry)
    assert fast == whole


@pytest.mark.parametrize("codec", [1, 0, None], ids=["zstd", "lz4", "none"])
def test_a_buffer_tells_its_one_value_only_when_its_bytes_say_so(codec):
    from eventlog.encoding import lz4_frame
    from eventlog.encoding.arrow_file import _buffer_constant

    n = 1000
    raw = np.full(n, -42, np.int64).tobytes()
    frame = lz4_frame.constant_int64_frame if codec == 0 else constant_int64_frame
    other = constant_int64_frame if codec == 0 else lz4_frame.constant_int64_frame
    cases = {
        "frame": ((8 * n).to_bytes(8, "little") + frame(-42, n), -42),
        "frame of another count": ((8 * n).to_bytes(8, "little") + frame(-42, n - 1), None),
        "the other codec's frame": ((8 * n).to_bytes(8, "little") + other(-42, n), None),
        "stored raw": ((-1).to_bytes(8, "little", signed=True) + raw, -42),
        "raw, one value differs": ((-1).to_bytes(8, "little", signed=True) + raw[:-8] + (7).to_bytes(8, "little"),
                                   None),
        "short": (b"\x01" * 5, None),
    }
    if codec is None:
        cases = {"raw": (raw, -42), "raw, one value differs": (raw[:-8] + (7).to_bytes(8, "little"), None),
                 "raw, short": (raw[:-8], None)}
    for name, (body, want) in cases.items():
        seg = pa.py_buffer(b"\0" * 16 + body)
        assert _buffer_constant(seg, 16, len(body), n, codec) == want, name


@given(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(1, 300_000))
@settings(max_examples=200, deadline=None)
def test_a_constant_frame_gives_back_its_value(value, count):
    frame = constant_int64_frame(value, count)
    assert constant_int64_value(frame, count) == value
    assert constant_int64_value(memoryview(pa.py_buffer(frame)), count) == value
    assert constant_int64_value(frame, count + 1) is None
    assert constant_int64_value(frame[:-1], count) is None
