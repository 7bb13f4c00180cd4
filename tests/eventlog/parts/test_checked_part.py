"""``eventlog.parts.CheckedPart``, the one checked reader of a part: what it hands out before an error, an ``end``
that moves (a planner's next bound), reporting instead of raising (``replay verify``), duplicates and gaps."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

from eventlog import CorruptLogError, Messages, Progress, ProgressError, SequenceError, StreamHeader, open_log
from eventlog.events import Entry
from eventlog.parts import CheckedPart

SCHEMA = pa.schema([("n", pa.int64())])
_names = itertools.count()


def _log(events: list) -> tuple:
    log = open_log(f"memory://checked-part-{next(_names)}")
    header = log.create_stream(StreamHeader("s", 1, SCHEMA))
    with log.writer("s", 0) as w:
        for ev in events:
            w.append(Messages(ev.time, pa.RecordBatch.from_pylist([{"n": w.next_seq}], schema=SCHEMA))
                     if isinstance(ev, Messages) else ev)
    return log, header


def _rewrite(log, change) -> None:
    """Make the log's reader yield ``change(entries)`` instead of the stored entries (a damaged or lying log)."""
    real = log.reader

    def reader(stream, part, start=1, *, progress_only=False):
        inner = real(stream, part, start, progress_only=progress_only)

        class Rewritten:
            epoch, tail_problem = 0, None
            next_seq = inner.next_seq

            def __iter__(self):
                yield from change(inner)

            def close(self):
                inner.close()

            def prefetch(self):
                pass

        return Rewritten()

    log.reader = reader


FIVE = [Messages(0, None)] * 5 + [Progress(((0, -1),))]


def test_the_events_before_a_damaged_one_are_handed_out_then_the_error_is_raised():
    log, header = _log(FIVE)

    def damaged(entries):
        for e in entries:
            if e.seq == 4:
                raise CorruptLogError("event fails its checksum", stream="s", part=0, seq=4)
            yield e

    _rewrite(log, damaged)
    got = []
    with pytest.raises(CorruptLogError):
        for entry in CheckedPart(log, header, 0, isolation="uncommitted").read():
            got.append(entry.seq)
    assert got == [1, 2, 3]


def test_an_end_that_moves_on_loses_no_event():
    log, header = _log(FIVE)
    part = CheckedPart(log, header, 0, isolation="uncommitted", end=3)
    assert [e.seq for e in part.read()] == [1, 2]
    assert part.at_end and part.next_seq == 3
    part.end = 5
    assert [e.seq for e in part.read()] == [3, 4]
    part.end = None
    assert [e.seq for e in part.read()] == [5, 6]
    assert part.finished


def test_duplicates_are_dropped_and_a_gap_raises_naming_the_part_and_seq():
    log, header = _log(FIVE)
    _rewrite(log, lambda entries: (e for x in entries for e in ([x, x] if x.seq == 2 else [x])))
    part = CheckedPart(log, header, 0)
    assert [e.seq for e in part.read()] == [1, 2, 3, 4, 5, 6]
    assert part.duplicates == 1
    _rewrite(log, lambda entries: (e for e in entries if e.seq != 3))
    with pytest.raises(SequenceError) as ei:
        list(CheckedPart(log, header, 0).read())
    assert (ei.value.stream, ei.value.part, ei.value.seq) == ("s", 0, 4)


def test_reporting_lists_every_broken_rule_and_reads_on():
    log, header = _log([Progress(((0, -1), (5, 1))), Messages(3, None), Messages(7, None), Progress(((5, -2),)),
                        Messages(9, None)])
    with pytest.raises(ProgressError):
        list(CheckedPart(log, header, 0).read())
    found = []
    part = CheckedPart(log, header, 0, report=found.append)
    assert [e.seq for e in part.read()] == [1, 2, 3, 4, 5]
    assert [(type(e).__name__, e.seq) for e in found] == [("ProgressError", 2), ("ProgressError", 4)]


def test_reporting_a_gap_stops_checking_progress_past_it():
    log, header = _log([Progress(((0, -1), (5, 1))), Messages(5, None), Messages(2, None)])
    _rewrite(log, lambda entries: (Entry(e.seq + (e.seq == 3), e.event, e.ts) for e in entries))
    found = []
    part = CheckedPart(log, header, 0, report=found.append)
    assert [e.seq for e in part.read()] == [1, 2, 4]
    assert [(type(e).__name__, e.seq) for e in found] == [("SequenceError", 4)]  # the message at 2 is past the gap
    assert not part.tracks_progress


def test_a_resumed_read_rebuilds_the_frontier_and_a_restoring_writer_opens_no_reader():
    log, header = _log([Progress(((0, -1), (5, 1))), Messages(5, None), Progress(((5, -1), (8, 1))), Messages(8, None)])
    opened = []
    real = log.reader
    log.reader = lambda *a, **k: opened.append(k.get("progress_only", False)) or real(*a, **k)
    part = CheckedPart(log, header, 0, start=4, progress_only=True)
    assert list(part.frontier) == [8] and opened == [True]  # the restore's own reader only
    resumed = CheckedPart(log, header, 0, start=4, isolation="uncommitted")  # committed: seq 4 waits for progress
    assert [e.seq for e in resumed.read()] == [4] and list(resumed.frontier) == [8]
