"""The file log: layout, rotation, following a live part, torn tails, corruption, versions, filesystems."""

from __future__ import annotations

import json
import logging
import os

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from capture import Capture
from connectors.files import FileLog
from connectors.files import index as ix
from eventlog import (
    CorruptLogError,
    InvalidURIError,
    Messages,
    Progress,
    StreamHeader,
    StreamNotFoundError,
    UnsupportedVersionError,
    open_log,
)
from eventlog.header import header_checksum


def fill(log, stream="s", n=20, part=0, peers=1, encoding="arrow", rows=3):
    schema = pa.schema([("x", pa.int64()), ("s", pa.string())])
    with Capture(log, stream, part, peers, schema=schema, encoding=encoding) as cap:
        for t in range(n):
            cap.send(t, [{"x": t * 100 + i, "s": f"r{i}"} for i in range(rows)])
            cap.advance_to(t + 1)
    return 2 * n + 1  # events written: n messages, n progress, and the closing progress


def part_dir(root, stream="s", part=0):
    return os.path.join(root, stream, f"part-{part:05d}")


def seg_files(root, ext, stream="s", part=0):
    d = part_dir(root, stream, part)
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(ext))


def test_layout_and_uris(tmp_path):
    n = fill(open_log(f"file://{tmp_path}"))
    assert sorted(os.listdir(tmp_path / "s")) == ["header.json", "part-00000"]
    assert seg_files(tmp_path, ".arrows") == [os.path.join(part_dir(tmp_path), "0" * 19 + "1.arrows")]
    header = json.loads((tmp_path / "s" / "header.json").read_text())
    assert header["format"] == "eventlog" and header["version"] == "1.2" and header["peers"] == 1
    for uri in (str(tmp_path), f"file://{tmp_path}", tmp_path):
        assert len(list(open_log(uri).reader("s", 0))) == n
    assert open_log(tmp_path).streams() == ["s"]
    with pytest.raises(StreamNotFoundError):
        open_log(tmp_path).header("nope")
    for bad in ("memory://", "file://otherhost/x", "kafka:///no-host", "kafka://h:1/bad prefix", "nosuchscheme://x/y", ""):
        with pytest.raises(InvalidURIError):
            open_log(bad)
    with pytest.raises(ValueError):
        open_log(tmp_path).reader("s", 1)  # part out of range


def test_segments_rotate_by_size_and_reads_span_them(tmp_path, encoding):
    log = open_log(tmp_path, segment_bytes=4096 if encoding == "arrow" else 512)
    n = fill(log, n=60, encoding=encoding)
    segs = log.segments("s", 0)
    assert len(segs) > 3 and segs[0] == 1
    entries = list(open_log(tmp_path).reader("s", 0))
    assert [e.seq for e in entries] == list(range(1, n + 1))
    for start in (1, segs[1], segs[1] + 1, segs[-1], n, n + 1):
        assert [e.seq for e in open_log(tmp_path).reader("s", 0, start=start)] == list(range(start, n + 1))
    ext = ".arrows" if encoding == "arrow" else ".avro"
    for path in seg_files(tmp_path, ext):
        assert os.path.getsize(path) < 4096 + 2048  # rotated once past the limit


def test_progress_only_reader_skips_messages(tmp_path):
    fill(open_log(tmp_path), n=5)
    evs = [e.event for e in open_log(tmp_path).reader("s", 0, progress_only=True)]
    assert len(evs) == 6 and all(isinstance(e, Progress) for e in evs)


def test_reader_follows_a_live_part(tmp_path, schema):
    log = open_log(tmp_path, segment_bytes=2000)
    cap = Capture(log, "s", 0, 1, schema=schema)
    reader = open_log(tmp_path).reader("s", 0)
    assert list(reader) == []
    seen = []
    for t in range(30):
        cap.send(t, [{"x": t, "s": "y" * 50}])
        cap.advance_to(t + 1)
        seen += [e.seq for e in reader]  # iterating again picks up what was appended since
    cap.close()
    seen += [e.seq for e in reader]
    assert seen == list(range(1, 62))


def crash(cap):
    """Leave a capture as a killed process would: synced files, no end-of-stream marker, lock released."""
    w = cap._writer
    w.sync()
    w._seg.data.close()
    w._seg.index.close()
    w._st.unlock(w._lock)
    w._closed = cap._closed = True


def test_torn_tail_is_cut_on_reopen_and_readers_stop_before_it(tmp_path, schema, caplog):
    log = open_log(tmp_path)
    cap = Capture(log, "s", 0, 1, schema=schema)
    for t in range(5):
        cap.send(t, [{"x": t, "s": "a"}])
        cap.advance_to(t + 1)
    crash(cap)
    seg, idx = seg_files(tmp_path, ".arrows")[0], seg_files(tmp_path, ".index")[0]
    good_data, good_index = os.path.getsize(seg), os.path.getsize(idx)
    # a crash mid-append: half an event body, and an index entry pointing at bytes never written
    with open(seg, "ab") as f:
        f.write(b"\xff\xff\xff\xff" + b"\x01" * 40)
    with open(idx, "ab") as f:
        f.write(ix.pack_entry(ix.IndexEntry(11, good_data, 500, 0, ix.KIND_MESSAGES)))
        f.write(b"\x07" * 10)  # and a partial entry
    assert [e.seq for e in open_log(tmp_path).reader("s", 0)] == list(range(1, 11))  # stops cleanly
    caplog.set_level(logging.WARNING, logger="eventlog")
    log2 = open_log(tmp_path)
    cap = Capture(log2, "s", 0, 1)  # reopening cuts the torn tail
    assert cap.next_seq == 11 and list(cap.frontier) == [5]
    assert os.path.getsize(seg) == good_data and os.path.getsize(idx) == good_index
    (rec,) = log2.recoveries
    assert rec.events_cut == 1 and rec.bytes_cut == 44 and rec.next_seq == 11
    assert "torn tail" in caplog.text
    cap.send(5, [{"x": 5, "s": None}])
    cap.close()
    assert [e.seq for e in open_log(tmp_path).reader("s", 0)] == list(range(1, 13))
    assert len(seg_files(tmp_path, ".arrows")) == 2  # appending continued in a new segment


def test_empty_segment_left_by_a_crash_is_dropped(tmp_path, schema):
    fill(open_log(tmp_path), n=2)
    d = part_dir(tmp_path)
    # a crash right after a new segment was created, before its first event
    with open(os.path.join(d, f"{6:020d}.arrows"), "wb") as f:
        f.write(schema.serialize().to_pybytes()[:30])
    w = open_log(tmp_path).writer("s", 0)
    assert w.next_seq == 6 and w.recovery is not None
    w.close()
    assert not os.path.exists(os.path.join(d, f"{6:020d}.arrows"))


@pytest.mark.parametrize("where", ["middle", "last"])
def test_flipped_bytes_are_detected(tmp_path, encoding, where):
    n = fill(open_log(tmp_path), n=6, encoding=encoding)
    ext = ".arrows" if encoding == "arrow" else ".avro"
    seg, idx = seg_files(tmp_path, ext)[0], seg_files(tmp_path, ".index")[0]
    raw = open(idx, "rb").read()
    entries = [ix.unpack_entry(raw, ix.HEADER_SIZE + i * ix.ENTRY_SIZE) for i in range(n)]
    victim = entries[3] if where == "middle" else entries[-1]
    with open(seg, "r+b") as f:
        f.seek(victim.offset + victim.length // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x40]))
    reader = open_log(tmp_path).reader("s", 0)
    with pytest.raises(CorruptLogError) as ei:
        list(reader)
    e = ei.value
    assert (e.stream, e.part, e.seq, e.offset, e.path) == ("s", 0, victim.seq, victim.offset, seg)
    assert "checksum" in str(e) and seg in str(e)
    if where == "middle":  # acknowledged events after the damage: never cut silently
        with pytest.raises(CorruptLogError, match="middle"):
            open_log(tmp_path).writer("s", 0)


def test_damaged_segment_prefix_and_index(tmp_path):
    fill(open_log(tmp_path), n=3)
    idx = seg_files(tmp_path, ".index")[0]
    raw = bytearray(open(idx, "rb").read())
    raw[ix.HEADER_SIZE + 5] ^= 1  # first entry's seq field
    open(idx, "wb").write(bytes(raw))
    with pytest.raises(CorruptLogError, match="index entry"):
        list(open_log(tmp_path).reader("s", 0))
    raw[ix.HEADER_SIZE + 5] ^= 1
    raw[0] = ord("X")  # index magic
    open(idx, "wb").write(bytes(raw))
    with pytest.raises(CorruptLogError, match="magic"):
        list(open_log(tmp_path).reader("s", 0))
    raw[0:6] = b"ELIX\x02\x00"  # an index of a newer major version
    open(idx, "wb").write(bytes(raw))
    with pytest.raises(UnsupportedVersionError):
        list(open_log(tmp_path).reader("s", 0))


def test_header_version_rules(tmp_path, schema):
    fill(open_log(tmp_path), n=1)
    path = tmp_path / "s" / "header.json"
    doc = json.loads(path.read_text())
    doc["version"] = "1.7"
    doc["a_field_from_the_future"] = True
    doc["checksum"] = header_checksum(doc)
    path.write_text(json.dumps(doc))
    assert len(list(open_log(tmp_path).reader("s", 0))) == 3  # newer minor: readable
    with pytest.raises(UnsupportedVersionError, match="may read it but not append"):
        open_log(tmp_path).writer("s", 0)
    doc["version"] = "1.1"  # an older minor: read and appended to
    doc["checksum"] = header_checksum(doc)
    path.write_text(json.dumps(doc))
    assert open_log(tmp_path).header("s").version == (1, 1)
    open_log(tmp_path).writer("s", 0).close()
    doc["version"] = "3.0"
    doc["checksum"] = header_checksum(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(UnsupportedVersionError, match="3.0"):
        open_log(tmp_path).header("s")
    path.write_text("{not json")
    with pytest.raises(CorruptLogError, match="header"):
        open_log(tmp_path).header("s")


def test_header_roundtrip():
    schema = pa.schema([("a", pa.list_(pa.timestamp("ns", tz="UTC")))], metadata={"k": "v"})
    h = StreamHeader("x", 4, schema, "product:3", "avro")
    h2 = StreamHeader.from_json(h.to_json())
    assert h2 == h and h2.schema.metadata == {b"k": b"v"}
    with pytest.raises(ValueError):
        StreamHeader("bad name!", 1, schema)
    with pytest.raises(ValueError):
        StreamHeader("x", 0, schema)


@pytest.mark.parametrize("sync", ["fsync", "flush", "none"])
def test_sync_modes_all_persist_on_close(tmp_path, sync):
    n = fill(open_log(tmp_path, sync=sync), n=4)
    assert len(list(open_log(tmp_path).reader("s", 0))) == n


def test_flush_mode_makes_appends_visible_at_advance(tmp_path, schema):
    cap = Capture(open_log(tmp_path, sync="flush"), "s", 0, 1, schema=schema)
    cap.send(0, [{"x": 1, "s": None}])
    cap.advance_to(1)
    assert len(list(open_log(tmp_path).reader("s", 0))) == 2
    cap.close()


def test_any_pyarrow_filesystem(tmp_path, schema):
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    log = FileLog("logs", filesystem=fs, segment_bytes=3000)
    n = fill(log, n=30)
    assert len(log.segments("s", 0)) > 1
    assert [e.seq for e in FileLog("logs", filesystem=fs).reader("s", 0)] == list(range(1, n + 1))
    assert [e.seq for e in open_log(tmp_path / "logs").reader("s", 0)] == list(range(1, n + 1))
    assert FileLog("logs", filesystem=fs).streams() == ["s"]


def test_memory_logs_share_by_name(schema):
    fill(open_log("memory://shared-a"), n=2)
    assert len(list(open_log("memory://shared-a").reader("s", 0))) == 5
    assert open_log("memory://shared-b").streams() == []


def test_messages_keep_schema_metadata_free_records(tmp_path):
    schema = pa.schema([("x", pa.int64())], metadata={"owner": "team"})
    with Capture(open_log(tmp_path), "m", 0, 1, schema=schema) as cap:
        cap.send(0, [{"x": 1}])
    ev = next(iter(open_log(tmp_path).reader("m", 0))).event
    assert isinstance(ev, Messages) and ev.records.schema.metadata == {b"owner": b"team"}


def test_part_stats_and_tail_problems(tmp_path, schema):
    log = open_log(tmp_path, segment_bytes=3000)
    n = fill(log, n=20)
    st = log.part_stats("s", 0)
    assert (st.first_seq, st.next_seq, st.events) == (1, n + 1, n)
    assert st.segments == len(log.segments("s", 0)) > 1
    assert st.bytes == sum(os.path.getsize(p) for p in seg_files(tmp_path, "") if not p.endswith(".lock"))
    r = log.reader("s", 0)
    list(r)
    assert r.tail_problem is None
    with open(seg_files(tmp_path, ".index")[-1], "ab") as f:
        f.write(b"\x00" * 7)
    list(r)
    assert "partial index entry" in r.tail_problem
    fresh = open_log(tmp_path).reader("s", 0)
    assert len(list(fresh)) == n and "partial index entry" in fresh.tail_problem  # reported on the same read
    d = part_dir(tmp_path)
    open(os.path.join(d, f"{n + 1:020d}.arrows"), "wb").close()  # a crash before the new segment's index
    assert open_log(tmp_path).part_stats("s", 0).next_seq == n + 1
    assert open_log(tmp_path).part_stats("s", 0).next_seq == n + 1
    empty = Capture(log, "e", 0, 2, schema=schema)
    empty.abort()
    assert log.part_stats("e", 1).events == 0


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_standalone_bodies_decode_from_the_header_alone(encoding):
    from eventlog.encoding import codec_for

    schema = pa.schema([("x", pa.int64())])
    header = StreamHeader("st", 1, schema, "int64", encoding)
    enc = codec_for(header).standalone_encoder()
    events = [Messages(3, pa.record_batch({"x": [1, 2]}, schema=schema)), Progress(((0, -1), (4, 1)))]
    bodies = [enc.encode(i + 1, e) for i, e in enumerate(events)]
    dec = codec_for(StreamHeader.from_json(header.to_json())).standalone_decoder()  # another process
    assert [dec.decode(b) for b in bodies] == [(1, events[0]), (2, events[1])]


def test_last_write_is_the_newest_file_time_on_every_storage(tmp_path, schema):
    """Log.last_write: local disk and any pyarrow.fs filesystem give the newest segment/index time; the
    in-process memory log keeps no file times (None); a part without segments has none either."""
    import time

    import pyarrow.fs as pafs

    from connectors.files import FileLog

    before = time.time() - 2
    for log in (open_log(tmp_path / "local"), open_log(str(tmp_path / "fs"), filesystem=pafs.LocalFileSystem())):
        with Capture(log, "s", 0, 2, schema=schema) as cap:
            cap.send(0, [{"x": 1, "s": None}])
        assert before <= log.last_write("s", 0) <= time.time() + 2
        assert log.last_write("s", 1) is None
    mem = open_log(f"memory://lastwrite-{os.getpid()}")
    with Capture(mem, "s", 0, 1, schema=schema) as cap:
        cap.send(0, [{"x": 1, "s": None}])
    assert isinstance(mem, FileLog) and mem.last_write("s", 0) is None


# these tests poke at the files of the 1.x layout (format 2.0 files: test_file_format2.py)
pytestmark = pytest.mark.usefixtures("file_format_1")
