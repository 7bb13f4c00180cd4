"""Format 2.1 golden logs of compacted segments (FORMAT.md §11; ``tests/golden/make_golden_logs.py 2.1-compacted``):
each stream's part 0 holds one compacted segment (seq 1 … 11, five writer incarnations) and one plain segment (seq
12 … 13); every event, writer epoch and committed read is stated here literally and read with today's code."""

from __future__ import annotations

import os

import pyarrow.ipc as ipc
import pytest

from eventlog.events import Messages
from eventlog.log import open_log
from eventlog.parts import CheckedPart
from replay.verify import verify

GOLDEN = os.path.join(os.path.dirname(os.path.dirname(__file__)), "golden", "logs-2.1-compacted")

EVENTS = [  # (seq, writer epoch, event): Messages as ("M", time, ids), Progress as ("P", updates)
    (1, 1, ("M", 0, [1])), (2, 1, ("P", ((0, -1), (1, 1)))),
    (3, 2, ("M", 1, [2])), (4, 2, ("P", ((1, -1), (2, 1)))),
    (5, 3, ("M", 2, [3])), (6, 3, ("P", ((2, -1), (3, 1)))), (7, 3, ("M", 3, [9])),
    (8, 4, ("M", 3, [4])), (9, 4, ("P", ((3, -1), (4, 1)))),
    (10, 5, ("M", 4, [5])), (11, 5, ("P", ((4, -1), (5, 1)))),
    (12, 6, ("M", 5, [6])), (13, 6, ("P", ((5, -1),))),
]
"""Seq 7 (time 3, id 9) was sent by the third incarnation, which died before completing time 3: void."""


def _event(e) -> tuple:
    if isinstance(e.event, Messages):
        return ("M", e.event.time, e.event.records.column("id").to_pylist())
    return ("P", e.event.updates)


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_golden_compacted_streams_read_identically(encoding):
    log = open_log(GOLDEN)
    stream = f"golden-{encoding}-compacted"
    ext = "." + encoding
    names = sorted(n for n in os.listdir(log.part_path(stream, 0)) if n.endswith(ext))
    assert names == [f"{1:020d}-{11:020d}{ext}", f"{12:020d}{ext}"]
    assert log.segments(stream, 0) == [1, 12]
    r = log.reader(stream, 0)
    got = []
    for e in r:
        got.append((e.seq, r.epoch, _event(e)))
        assert e.ts is not None and e.ts > 0
    assert got == EVENTS
    with CheckedPart(log, log.header(stream), 0) as p:  # committed: seq 7 is void
        assert [(e.seq, _event(e)) for e in p.read()] == [(s, ev) for s, _, ev in EVENTS if s != 7]
        assert p.voided == 1 and p.frontier.is_empty()
    with CheckedPart(log, log.header(stream), 0, start=9) as p:  # resuming inside the compacted segment
        assert [e.seq for e in p.read()] == [9, 10, 11, 12, 13]
    assert log.check_part(stream, 0) == []
    assert verify(log, stream).problems == []


def test_golden_compacted_arrow_segment_is_an_ipc_file_recording_its_runs():
    path = os.path.join(GOLDEN, "golden-arrow-compacted", "part=0", f"{1:020d}-{11:020d}.arrow")
    with open(path, "rb") as f:
        reader = ipc.open_file(f)
        meta = reader.schema.metadata
        table = reader.read_all()
    assert table.column("_seq").to_pylist() == [1, 3, 5, 7, 8, 10]
    assert table.column("id").to_pylist() == [1, 2, 3, 9, 4, 5]
    runs = [r.split(",")[:2] for r in meta[b"eventlog.epochs"].decode()[2:-2].split("],[")]
    assert [(int(s), int(e)) for s, e in runs] == [(1, 1), (3, 2), (5, 3), (8, 4), (10, 5)]
    assert meta[b"eventlog.epoch"] == b"5"
