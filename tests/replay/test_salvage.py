"""Salvage (issue 35 §6, avro-tools' ``repair``): read a part past its damage, every whole event handed out and
each run that could not be read named — part, sequence ids, file and byte offset, reason — instead of stopping
at the first damaged event. Damage in the middle of a segment, a segment cut short, a whole segment unreadable."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from capture import Capture
from eventlog import CorruptLogError, open_log
from eventlog.events import Messages
from replay.salvage import Skipped, salvage_part

SCHEMA = pa.schema([("n", pa.int64())])


def _write(root, times: int = 6, segment_bytes: int | None = None, encoding: str = "arrow") -> None:
    log = open_log(root, **({"segment_bytes": segment_bytes} if segment_bytes else {}))
    with Capture(log, "s", 0, 1, schema=SCHEMA, encoding=encoding) as cap:
        for t in range(times):
            cap.send(t, [{"n": 10 * t + i} for i in range(3)])
            cap.advance_to(t + 1)


def _values(items) -> list[int]:
    return [n for e in items if not isinstance(e, Skipped) and isinstance(e.event, Messages)
            for n in e.event.records.column("n").to_pylist()]


def _flip_inside_event(root, seq: int) -> None:
    log = open_log(root)
    where = log.stored("s", 0, seq)
    data = bytearray(open(where.where["path"], "rb").read())
    data[where.where["offset"] + len(where.data) // 2] ^= 0xFF
    open(where.where["path"], "wb").write(bytes(data))


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_one_damaged_event_is_skipped_and_named_and_the_rest_is_read(tmp_path, encoding):
    _write(tmp_path, encoding=encoding)
    log = open_log(tmp_path)
    header = log.header("s")
    damaged = 5  # a Messages event in the middle of the part (events alternate Messages, Progress)
    _flip_inside_event(tmp_path, damaged)
    with pytest.raises(CorruptLogError):
        list(log.reader("s", 0))
    items = list(salvage_part(log, header, 0))
    skipped = [e for e in items if isinstance(e, Skipped)]
    assert len(skipped) == 1
    [s] = skipped
    assert s.part == 0 and s.first_seq == damaged and s.path and s.path.endswith((".arrow", ".avro"))
    assert s.describe().startswith(f"part 0: skipped seq {damaged} (") and s.next_seq == damaged + 1
    got = _values(items)
    lost = set(range(20, 23))  # time 2's records were in the damaged event
    assert got == [n for t in range(6) for n in range(10 * t, 10 * t + 3) if n not in lost]
    read_after = [e.seq for e in items if not isinstance(e, Skipped) and e.seq > damaged]
    assert read_after and read_after[-1] == log.part_stats("s", 0).next_seq - 1


def test_an_unreadable_segment_is_skipped_to_the_next_one(tmp_path):
    _write(tmp_path, times=12, segment_bytes=1500)
    log = open_log(tmp_path)
    segs = sorted((tmp_path / "s" / "part=0").glob("*.arrow"))
    assert len(segs) >= 3
    segs[1].write_bytes(b"\x00" * 64)  # the whole second segment replaced by garbage
    items = list(salvage_part(log, log.header("s"), 0))
    skipped = [e for e in items if isinstance(e, Skipped)]
    assert skipped and all(s.next_seq is not None for s in skipped[:-1])
    after = [e.seq for e in items if not isinstance(e, Skipped) and e.seq >= skipped[-1].first_seq]
    assert after and after[-1] == log.part_stats("s", 0).next_seq - 1  # the third segment on was read
    json.dumps([s.describe() for s in skipped])


def test_an_undamaged_part_reads_as_the_reader_does(tmp_path):
    _write(tmp_path)
    log = open_log(tmp_path)
    items = list(salvage_part(log, log.header("s"), 0))
    assert [e.seq for e in items] == [e.seq for e in log.reader("s", 0)]
