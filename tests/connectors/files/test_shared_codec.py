"""One Arrow codec is shared by the readers and writers of equal stream headers (``connectors/files/codec.py``),
and each segment schema message is parsed and checked once per codec: sharing must never hand one stream's
schema metadata to another, nor let a segment whose schema differs from its header through."""

from __future__ import annotations

import glob
import os

import pyarrow as pa
import pytest

from capture import Capture
from connectors.files.codec import file_codec
from eventlog import CorruptLogError, Messages, open_log
from eventlog.header import StreamHeader
from replay import Replayer


def _schema(note: str) -> pa.Schema:
    return pa.schema([pa.field("x", pa.int64(), metadata={"note": note})], metadata={"stream": note})


def test_equal_headers_share_a_codec_and_metadata_tells_them_apart() -> None:
    a = StreamHeader("s", 1, _schema("a"), version=(2, 0))
    same = StreamHeader("s", 1, _schema("a"), created=a.created, version=(2, 0))
    other = StreamHeader("s", 1, _schema("b"), created=a.created, version=(2, 0))
    assert a == other  # headers compare schemas without metadata...
    assert file_codec(a) is file_codec(same)
    assert file_codec(a) is not file_codec(other)  # ...the codec, which writes and returns it, does not
    assert file_codec(other).header.schema.metadata == {b"stream": b"b"}


def test_a_header_asked_again_gives_its_codec_without_serializing_its_schema(monkeypatch) -> None:
    """The header object a log hands every reader finds its codec at once; another object equal to it (equal
    schemas, other metadata) still gets a codec of its own schema."""
    from connectors.files import codec as c

    a = StreamHeader("s", 1, _schema("a"), version=(2, 0))
    first = file_codec(a)
    calls: list[StreamHeader] = []
    real = c._arrow_codec

    def counting(header: StreamHeader, schema: bytes):  # noqa: ANN202
        calls.append(header)
        return real(header, schema)

    monkeypatch.setattr(c, "_arrow_codec", counting)
    assert file_codec(a) is first and calls == []
    other = StreamHeader("s", 1, _schema("b"), created=a.created, version=(2, 0))
    assert file_codec(other).header.schema.metadata == {b"stream": b"b"} and calls == [other]
    assert file_codec(a) is first


def test_streams_differing_only_in_metadata_each_read_back_their_own(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EVENTLOG_FILE_FORMAT", "2.0")
    log = open_log(str(tmp_path), sync="none")
    for name in ("a", "b"):
        with Capture(log, name, 0, 1, schema=_schema(name)) as cap:
            cap.send(0, pa.record_batch([pa.array([1, 2, 3])], schema=_schema(name)))
    for name in ("a", "b", "a"):
        with Replayer(open_log(str(tmp_path)), name, 0, 1) as r:
            got = [ev.records for ev in r if isinstance(ev, Messages)]
        assert got and all(b.schema.metadata == {b"stream": name.encode()} for b in got)
        assert all(b.schema.field("x").metadata == {b"note": name.encode()} for b in got)


def test_a_segment_whose_schema_differs_is_refused_after_good_ones_were_read(tmp_path, monkeypatch) -> None:
    """Two streams with equal headers share a codec; the one whose segment was written with another schema is
    refused even though the codec has checked (and remembered) the good segment's schema message."""
    monkeypatch.setenv("EVENTLOG_FILE_FORMAT", "2.0")
    schema = pa.schema([("x", pa.int64())])
    for name, rows in (("good", pa.array([1, 2])), ("bad", pa.array([1.5, 2.5]))):
        log = open_log(str(tmp_path / name), sync="none")
        with Capture(log, "s", 0, 1, schema=pa.schema([("x", rows.type)])) as cap:
            cap.send(0, pa.record_batch([rows], names=["x"]))
    # the bad log's header says int64 (as the good one's), its segment holds float64 rows
    header = glob.glob(str(tmp_path / "good" / "s" / "_header.json"))[0]
    with open(header, "rb") as f, open(os.path.join(tmp_path, "bad", "s", "_header.json"), "wb") as g:
        g.write(f.read())
    with Replayer(open_log(str(tmp_path / "good")), "s", 0, 1) as r:
        assert sum(ev.records.num_rows for ev in r if isinstance(ev, Messages)) == 2
    with pytest.raises(CorruptLogError, match="schema does not match"):
        with Replayer(open_log(str(tmp_path / "bad")), "s", 0, 1) as r:
            list(r)
    assert schema.equals(open_log(str(tmp_path / "bad")).stored_header("s").schema)
