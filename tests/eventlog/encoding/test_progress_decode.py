"""Events without rows (Progress) are decoded from their message's custom metadata, read in C
(``_ipc_native.empty``), without pyarrow: the same events as pyarrow's decoding gives, on 2.x file segments and
1.x stream segments; a message that is not shaped like the segment's empty batch, or repeats a key, goes to
pyarrow; and damage never turns into an event other than the one written."""

from __future__ import annotations

import glob
import os
import random

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capture import Capture
from connectors.files import index as ix
from connectors.files.codec import file_codec
from eventlog import CorruptLogError, Progress, open_log
from eventlog.encoding import arrow

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("l", pa.list_(pa.int32()))])


def _capture(root: str, time: str = "int64", version: str | None = None) -> None:
    log = open_log(root, **({"format": version} if version else {}))
    with Capture(log, "s", 0, 1, schema=SCHEMA, time=time) as cap:
        for t in range(6):
            tt = t if time == "int64" else (t, 2 * t)
            cap.send(tt, [{"id": t, "s": "x" * t, "l": [t]}])
            nxt = t + 1 if time == "int64" else (t + 1, 2 * t + 2)
            cap.advance_to(nxt)


def _segment(root: str):  # noqa: ANN202
    """(decoder, segment bytes, index entries) of part 0's first segment."""
    d = os.path.join(root, "s")
    paths = sorted(glob.glob(os.path.join(d, "part=0", "*.arrow"))) or sorted(glob.glob(os.path.join(d, "part-*",
                                                                                                      "*.arrows")))
    path = paths[0]
    stem, name = os.path.split(os.path.splitext(path)[0])
    raw = open(os.path.join(stem, ("_" if path.endswith(".arrow") else "") + name + ".index"), "rb").read()
    entries = [ix.unpack_entry(raw, ix.HEADER_SIZE + i * ix.ENTRY_SIZE)
               for i in range((len(raw) - ix.HEADER_SIZE) // ix.ENTRY_SIZE)]
    data = open(path, "rb").read()
    codec = file_codec(open_log(root).header("s"))
    return (lambda: codec.segment_decoder(data[:entries[0].offset])), data, entries


def _outcome(decoder, data: bytes, entry, native: bool, monkeypatch) -> tuple:  # noqa: ANN001
    with monkeypatch.context() as m:
        if not native:
            m.setattr(arrow, "_native_empty", None)
        try:
            return ("ok",) + tuple(decoder().decode_at(pa.py_buffer(data), entry.offset, entry.length))
        except CorruptLogError:
            return ("corrupt",)


@pytest.mark.parametrize("time,version", [("int64", None), ("product:2", None), ("int64", "1.2")])
def test_progress_events_decode_as_pyarrow_decodes_them(tmp_path, monkeypatch, time, version):
    _capture(str(tmp_path), time, version)
    decoder, data, entries = _segment(str(tmp_path))
    calls = []
    real = arrow._ArrowSegmentDecoder._without_rows
    monkeypatch.setattr(arrow._ArrowSegmentDecoder, "_without_rows",
                        lambda self, *a: calls.append(1) or real(self, *a))
    progress = [e for e in entries if e.kind == ix.KIND_PROGRESS]
    for e in entries:
        ours, theirs = _outcome(decoder, data, e, True, monkeypatch), _outcome(decoder, data, e, False, monkeypatch)
        assert ours == theirs and ours[0] == "ok"
    assert len(calls) == len(progress) >= 7  # every Progress event went the C way (Messages have rows)
    assert all(isinstance(_outcome(decoder, data, e, True, monkeypatch)[2], Progress) for e in progress)


def test_a_message_shaped_otherwise_or_repeating_a_key_goes_to_pyarrow(tmp_path, monkeypatch):
    _capture(str(tmp_path))
    decoder, data, entries = _segment(str(tmp_path))
    e = next(e for e in entries if e.kind == ix.KIND_PROGRESS)
    rows, nodes, buffers, pairs = arrow._native_empty(data, e.offset)
    assert decoder()._empty_shape() == (nodes, buffers)  # known (cached) before the C call is faked
    for fake in [(rows, nodes + 1, buffers, pairs), (rows, nodes, buffers - 1, pairs),
                 (rows, nodes, buffers, pairs + pairs[:1])]:
        monkeypatch.setattr(arrow, "_native_empty", lambda *a, f=fake: f)
        assert decoder()._without_rows(pa.py_buffer(data), e.offset) is None
    monkeypatch.setattr(arrow, "_native_empty", lambda *a: None)  # malformed: pyarrow says what is wrong
    assert decoder()._without_rows(pa.py_buffer(data), e.offset) is None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32))
def test_damage_to_a_progress_event_gives_the_event_written_or_an_error(tmp_path_factory, monkeypatch, seed):
    """A flipped bit in a Progress event's message: the C way gives what pyarrow's gives (the same event, a
    changed one where the bit is in the metadata — the reader's checksum and seq check catch those — or an
    error), or, where pyarrow refuses a field an empty batch never reads (a buffer's offset, a null count of no
    rows), the event as it was written. One bit at a time: with two, one in the metadata and one in such a
    field, pyarrow refuses what the C way reads as the changed event."""
    root = str(tmp_path_factory.mktemp("p"))
    _capture(root)
    decoder, data, entries = _segment(root)
    rnd = random.Random(seed)
    e = rnd.choice([e for e in entries if e.kind == ix.KIND_PROGRESS])
    intact = _outcome(decoder, data, e, True, monkeypatch)
    b = bytearray(data)
    b[rnd.randrange(e.offset, e.offset + e.length)] ^= 1 << rnd.randrange(8)
    ours, theirs = _outcome(decoder, bytes(b), e, True, monkeypatch), _outcome(decoder, bytes(b), e, False,
                                                                                monkeypatch)
    assert ours == theirs or (theirs[0] == "corrupt" and ours == intact)
