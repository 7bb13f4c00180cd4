"""File log format 2.0: every writer incarnation writes its epoch and id into the segments it creates
(FORMAT.md §3.1), and readers report each entry's epoch (``PartReader.epoch``)."""

from __future__ import annotations

import glob
import os
import shutil

import fastavro
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from capture import Capture
from connectors.files import FileLog
from eventlog import CorruptLogError, open_log
from eventlog.events import Messages
from tests.support.paths import GOLDEN_LOGS

SCHEMA = pa.schema([("x", pa.int64())], metadata={"owner": "team"})
EXT = {"arrow": ".arrows", "avro": ".avro"}
GOLDEN = str(GOLDEN_LOGS)


def run(log, encoding: str, times: range, *, finish: bool = False) -> None:
    cap = Capture(log, "s", 0, 1, schema=SCHEMA, encoding=encoding)
    for t in times:
        cap.send(t, [{"x": t}])
        cap.advance_to(t + 1)
    cap.close() if finish else cap.abort()


def epochs(log, stream: str = "s", part: int = 0) -> list[tuple[int, int]]:
    r = log.reader(stream, part)
    return [(e.seq, r.epoch) for e in r]


def segment_metadata(path: str, encoding: str) -> dict:
    with open(path, "rb") as f:
        if encoding == "arrow":
            return {k.decode(): v.decode() for k, v in (ipc.open_stream(f).schema.metadata or {}).items()}
        return dict(fastavro.reader(f).metadata)


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_each_reopening_writes_a_new_segment_with_a_higher_epoch(tmp_path, encoding):
    log = FileLog(str(tmp_path), segment_bytes=1 << 20)
    run(log, encoding, range(0, 3))  # seq 1..6 (3 messages, 3 progress)
    run(log, encoding, range(3, 5))
    Capture(log, "s", 0, 1).abort()  # an incarnation that appends nothing creates nothing
    run(log, encoding, range(5, 6), finish=True)
    segs = sorted(glob.glob(str(tmp_path / "s" / "part-00000" / f"*{EXT[encoding]}")))
    metas = [segment_metadata(p, encoding) for p in segs]
    assert [m["eventlog.epoch"] for m in metas] == ["1", "2", "3"]  # 1 + the newest segment's
    assert all(len(m["eventlog.writer"]) == 16 for m in metas) and len({m["eventlog.writer"] for m in metas}) == 3
    got = epochs(log)
    assert [e for _, e in got] == [1] * 6 + [2] * 4 + [3] * 3
    assert [s for s, _ in got] == list(range(1, 14))
    # the records carry none of the segment's metadata (arrow: the stream schema's own)
    first = next(iter(log.reader("s", 0)))
    assert isinstance(first.event, Messages)
    assert first.event.records.schema.metadata == ({b"owner": b"team"} if encoding == "arrow" else None)
    assert log.check_part("s", 0) == []


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_rotation_keeps_the_epoch_and_a_live_reader_sees_it_change(tmp_path, encoding):
    log = FileLog(str(tmp_path), segment_bytes=300)  # a segment per few events
    run(log, encoding, range(0, 6))
    reader = log.reader("s", 0)
    assert {reader.epoch for _ in reader} == {1}
    assert len(glob.glob(str(tmp_path / "s" / "part-00000" / f"*{EXT[encoding]}"))) > 2
    run(log, encoding, range(6, 8))
    later = [(e.seq, reader.epoch) for e in reader]  # the same reader, following the part
    assert later and {ep for _, ep in later} == {2} and later[0][0] == 13


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_a_torn_tail_is_cut_and_the_next_incarnation_starts_a_new_segment(tmp_path, encoding):
    log = FileLog(str(tmp_path), segment_bytes=1 << 20)
    run(log, encoding, range(0, 3))
    (seg,) = glob.glob(str(tmp_path / "s" / "part-00000" / f"*{EXT[encoding]}"))
    with open(seg, "r+b") as f:  # a crash in the middle of the next event (no end-of-stream marker)
        f.truncate(os.path.getsize(seg) - (8 if encoding == "arrow" else 0))
        f.seek(0, 2)
        f.write(b"\xff\xff\xff\xff\x40" if encoding == "arrow" else b"\x02\x80")
    run(log, encoding, range(3, 4))
    assert [e for _, e in epochs(log)] == [1] * 6 + [2] * 2
    assert len(glob.glob(str(tmp_path / "s" / "part-00000" / f"*{EXT[encoding]}"))) == 2


def _set_epoch(path: str, encoding: str, epoch: bytes) -> None:
    """Rewrite the one-digit epoch "2" of a segment's metadata in place (same length: framing intact)."""
    data = open(path, "rb").read()
    if encoding == "arrow":  # in the schema message: a flatbuffer string (u32 length, the bytes, a NUL)
        prefix = data[: 8 + int.from_bytes(data[4:8], "little")]
        pattern, skip = b"\x01\x00\x00\x002\x00", 4
    else:  # Avro metadata map: the key string, then the value bytes (zigzag length 1 = 0x02)
        prefix, pattern, skip = data, b"eventlog.epoch\x022", len(b"eventlog.epoch\x02")
    assert prefix.count(pattern) == 1
    at = prefix.index(pattern) + skip
    open(path, "wb").write(data[:at] + epoch + data[at + 1:])


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_epochs_going_backwards_or_malformed_are_corrupt(tmp_path, encoding):
    base = tmp_path / "base"
    log = FileLog(str(base), segment_bytes=1 << 20)
    run(log, encoding, range(0, 2))
    run(log, encoding, range(2, 4))
    for bad, match in ((b"0", "lower than epoch 1"), (b"x", "malformed eventlog.epoch")):
        root = tmp_path / f"bad{bad.decode()}"
        shutil.copytree(base, root)
        second = sorted(glob.glob(str(root / "s" / "part-00000" / f"*{EXT[encoding]}")))[1]
        _set_epoch(second, encoding, bad)
        with pytest.raises(CorruptLogError, match=match) as e:
            list(FileLog(str(root)).reader("s", 0))
        assert e.value.part == 0 and e.value.path == second
        problems = FileLog(str(root)).check_part("s", 0)
        assert problems and any(match.split()[0] in p.reason for p in problems), problems
        with pytest.raises(CorruptLogError):  # a writer does not continue a history it cannot read
            Capture(FileLog(str(root)), "s", 0, 1)


def test_golden_1_0_logs_read_with_epoch_0():
    for name in sorted(os.listdir(GOLDEN)):
        log = open_log(os.path.join(GOLDEN, name))
        for stream in log.streams():
            for part in range(log.header(stream).peers):
                r = log.reader(stream, part)
                seen = {r.epoch for _ in r}
                assert seen <= {0}


def test_memory_log_records_epochs():
    log = open_log("memory://epochs-test")
    try:
        run(log, "arrow", range(0, 2))
        run(log, "arrow", range(2, 3), finish=True)
        assert [e for _, e in epochs(log)] == [1] * 4 + [2] * 3
    finally:
        from connectors import memory

        memory.drop("epochs-test")


@pytest.mark.parametrize("continues", [False, True])
def test_a_reopened_writer_voids_the_incomplete_time_unless_it_continues(tmp_path, continues):
    from replay import Replayer

    log = FileLog(str(tmp_path))
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    cap.send(0, [{"x": 1}])
    cap.advance_to(0)  # durable, time 0 not complete
    cap.abort()        # the writer stops mid-time
    cap = Capture(log, "s", 0, 1, continues=continues)
    cap.send(0, [{"x": 2}])
    cap.close()
    assert [e for _, e in epochs(log)] == ([1, 1, 1] if continues else [1, 2, 2])
    with Replayer(log, "s") as r:
        got = {t: sorted(table.column("x").to_pylist()) for t, table in r.completed()}
        assert r.voided == (0 if continues else 1)
    assert got == {0: [1, 2] if continues else [2]}


# these tests poke at the files of the 1.x layout (format 2.0 files: test_file_format2.py)
pytestmark = pytest.mark.usefixtures("file_format_1")
