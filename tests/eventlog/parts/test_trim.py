"""Retention: ``eventlog.parts.trim`` drops whole, complete times; every reader then starts at the retained frontier,
a held position inside the dropped range is a typed error, and a trim stopped at any step leaves a readable log
(FORMAT.md §10)."""

from __future__ import annotations

import itertools
import json
import os

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog import CorruptLogError, UnsupportedVersionError, open_log
from eventlog.antichain import Antichain
from eventlog.parts import CheckedPart
from eventlog.parts.capture import Capture
from eventlog.parts.trim import completed_frontier, trim
from eventlog.retention import Retention, TrimmedError
from replay.replayer import Replayer
from replay.verify import verify

SCHEMA = pa.schema([("x", pa.int64())])
_names = itertools.count()


def _replay(log, stream: str = "s") -> dict[int, list[int]]:
    with Replayer(log, stream) as r:
        return {t: sorted(table.column("x").to_pylist()) for t, table in r.completed()}


def _plans(peers: int):
    step = st.tuples(st.integers(0, 3), st.integers(0, 2))  # advance the time by 0..3; send 0..2 ahead
    return st.lists(st.lists(step, max_size=40), min_size=peers, max_size=peers)


def _write_raw(log, steps_per_part, peers: int) -> dict[int, list[int]]:
    """Write the parts; every part sends at ``t + ahead`` while its frontier is at ``t`` (records at times ahead of
    the frontier, as a worker that finishes an earlier time later does), then finishes. Returns time -> values."""
    expected: dict[int, list[int]] = {}
    value = itertools.count()
    for part, steps in enumerate(steps_per_part):
        cap = Capture(log, "s", part, peers, schema=SCHEMA)
        t = 0
        for advance, ahead in steps:
            t += advance
            cap.advance_to(t)
            v = next(value)
            cap.send(t + ahead, pa.table({"x": [v]}))
            expected.setdefault(t + ahead, []).append(v)
        cap.close()
    return {t: sorted(v) for t, v in expected.items()}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(peers=st.integers(1, 3), data=st.data())
def test_a_trim_drops_exactly_the_times_before_its_frontier_whole(peers, data):
    """Whatever the parts sent (records ahead of their frontier included) and wherever segments end, a replay after
    trims to increasing frontiers gives exactly the times beyond the last one, each with all its records."""
    log = open_log(f"memory://trim-{next(_names)}", segment_bytes=700)
    steps = data.draw(_plans(peers))
    expected = _write_raw(log, steps, peers)
    assert _replay(log) == expected
    last = max(expected, default=0) + 2
    for since in sorted(data.draw(st.lists(st.integers(0, last), min_size=1, max_size=3))):
        result = trim(log, "s", since=Antichain([since]))
        assert result.since == Antichain([since])
        assert _replay(log) == {t: v for t, v in expected.items() if t >= since}
        report = verify(log)
        assert report.ok, [str(p) for p in report.problems]
    assert all(log.part_stats("s", p).first_seq == log.retention("s").cut(p).start for p in range(peers))


def _live(name: str, segment_bytes: int = 400):
    """A stream of 2 parts: part 0 wrote times 0..29 and is at 30; part 1 wrote 0..19 and is at 20 (open)."""
    log = open_log(name, segment_bytes=segment_bytes)
    caps = [Capture(log, "s", p, 2, schema=SCHEMA) for p in range(2)]
    for p, upto in ((0, 30), (1, 20)):
        for t in range(upto):
            caps[p].send(t, pa.table({"x": [t * 10 + p]}))
            caps[p].advance_to(t + 1)
    return log, caps


def test_only_complete_times_are_dropped_and_the_writers_go_on(tmp_path):
    log, caps = _live(str(tmp_path / "log"))
    assert completed_frontier(log, log.header("s")) == Antichain([20])
    result = trim(log, "s", since=Antichain([25]))
    assert result.clamped and result.since == Antichain([20]) and result.completed == Antichain([20])
    assert result.bytes_removed > 0 and result.events_removed > 0
    for p in range(2):  # the writers go on after the trim, and so do readers
        for t in range(30 if p == 0 else 20, 40):
            caps[p].send(t, pa.table({"x": [t * 10 + p]}))
            caps[p].advance_to(t + 1)
    caps[1].close()
    caps[0].flush()
    caps[0].abort()  # the job stops; its part is not finished
    trim(log, "s", since=Antichain([30]))
    # a writer reopened after the trim continues after its last event, with its frontier
    with Capture(log, "s", 0, 2) as again:
        assert again.frontier == Antichain([40])
        again.send(40, pa.table({"x": [400]}))
    assert _replay(log) == {**{t: [t * 10, t * 10 + 1] for t in range(30, 40)}, 40: [400]}


def test_a_held_position_in_the_dropped_range_is_a_typed_error_naming_the_earliest(tmp_path):
    log, caps = _live(str(tmp_path / "log"))
    trim(log, "s", since=Antichain([15]))
    header = log.header("s")
    cut = log.retention("s").cut(0)
    assert cut.start > 2
    with pytest.raises(TrimmedError, match=f"the earliest event still there is {cut.start}") as e:
        CheckedPart(log, header, 0, start=2)
    assert e.value.earliest == cut.start and e.value.part == 0 and e.value.seq == 2
    with CheckedPart(log, header, 0) as p:  # from the beginning: the earliest retained event
        assert p.start == cut.start
        first = next(iter(p.read()))
        assert first.seq == cut.start
    with CheckedPart(log, header, 0, start=cut.start + 3) as p:  # a position after the cut restores the frontier
        list(p.read())
        assert p.frontier == Antichain([30])
    for c in caps:
        c.close()


def test_a_trim_stopped_after_its_mark_or_midway_leaves_a_readable_log_and_a_rerun_finishes(tmp_path, monkeypatch):
    log, caps = _live(str(tmp_path / "log"), segment_bytes=200)
    for c in caps:
        c.close()
    before = _replay(log)
    removed: list[tuple] = []
    real = type(log).drop_before

    def crash_after_one(self, stream, part, seq):
        if removed:
            raise KeyboardInterrupt("killed")  # the process dies between two parts' removals
        removed.append((part, seq))
        return real(self, stream, part, seq)

    monkeypatch.setattr(type(log), "drop_before", crash_after_one)
    with pytest.raises(KeyboardInterrupt):
        trim(log, "s", since=Antichain([12]))
    monkeypatch.undo()
    assert log.retention("s").since == Antichain([12])  # the mark came first: readers already start at it
    assert _replay(log) == {t: v for t, v in before.items() if t >= 12}
    assert verify(log).ok
    part1 = os.path.join(log.part_path("s", 1))
    segments_before = len([n for n in os.listdir(part1) if n.endswith(".arrow")])
    result = trim(log, "s", since=Antichain([12]))  # run again: finishes the removal, drops nothing more
    assert not result.changed and result.parts[1].events_removed > 0
    assert len([n for n in os.listdir(part1) if n.endswith(".arrow")]) < segments_before
    assert _replay(log) == {t: v for t, v in before.items() if t >= 12}


def test_a_mark_never_moves_back(tmp_path):
    log, caps = _live(str(tmp_path / "log"))
    trim(log, "s", since=Antichain([15]))
    result = trim(log, "s", since=Antichain([5]))
    assert result.since == Antichain([15]) and not result.changed
    newer = log.retention("s")
    older = Retention("s", Antichain([3]), tuple(type(c)(1, c.counts) for c in newer.parts))
    assert log.record_retention("s", older) == newer  # the stored mark covers it: kept
    for c in caps:
        c.close()


def test_a_damaged_or_foreign_mark_is_a_corrupt_log_error_naming_the_file(tmp_path):
    log, caps = _live(str(tmp_path / "log"))
    for c in caps:
        c.close()
    trim(log, "s", since=Antichain([10]))
    path = os.path.join(str(tmp_path / "log"), "s", "_retention.json")
    good = open(path, "rb").read()
    doc = json.loads(good)
    for damage, match in ((b"{", "not a JSON document"), (good.replace(b'"since":[10]', b'"since":[11]'), "checksum"),
                          (json.dumps({**doc, "stream": "t"}).encode(), "checksum")):
        with open(path, "wb") as f:
            f.write(damage)
        with pytest.raises(CorruptLogError, match=match) as e:
            _replay(open_log(str(tmp_path / "log")))
        assert "_retention.json" in str(e.value) and e.value.stream == "s"
        report = verify(open_log(str(tmp_path / "log")))
        assert not report.ok


def test_older_than_and_before_ts_drop_the_times_complete_by_then(tmp_path):
    log = open_log(str(tmp_path / "log"), segment_bytes=300)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    for t in range(10):
        cap.send(t, pa.table({"x": [t]}))
        cap.advance_to(t + 1)
    cap.flush()
    from eventlog.parts.reader import CheckedPart as _CP

    with _CP(log, log.header("s"), 0) as p:
        mid = [e.ts for e in p.read() if e.seq == 10][0]  # written after time 4 completed (seq 10: advance to 5)
    assert trim(log, "s", older_than=3600).since == Antichain([0])  # nothing is an hour old: nothing dropped
    assert trim(log, "s", before_ts=mid).since == Antichain([5])
    assert sorted(_replay(log)) == list(range(5, 10))
    cap.close()


def test_a_1x_stream_cannot_be_trimmed_and_says_how_to_upgrade(tmp_path):
    log = open_log(str(tmp_path / "log"), format="1.2")
    with Capture(log, "s", 0, 1, schema=SCHEMA) as cap:
        cap.send(0, pa.table({"x": [1]}))
    with pytest.raises(UnsupportedVersionError, match="replay copy"):
        trim(log, "s", since=Antichain([1]))
    assert log.retention("s") is None


def test_a_writer_with_a_retention_policy_drops_old_times_as_it_goes(tmp_path):
    """``Capture(…, retention=AGE)``: the times complete longer ago than AGE are dropped in the background, off
    the writer's thread; a second writer of the stream finds a fresh mark and leaves the work to the first."""
    import time

    from eventlog.parts.retention_policy import RetentionPolicy

    uri = str(tmp_path / "log")
    log = open_log(uri, segment_bytes=300)
    first = Capture(log, "s", 0, 2, schema=SCHEMA, retention=0.5)
    other = Capture(log, "s", 1, 2, schema=SCHEMA)
    for t in range(10):
        for cap in (first, other):
            cap.send(t, pa.table({"x": [t]}))
            cap.advance_to(t + 1)
    first._retention.interval = 0.2  # trim as soon as the ages allow, for the test
    time.sleep(0.7)  # times 0..9 are now complete for longer than 0.5 s
    for t in range(10, 12):
        for cap in (first, other):
            cap.send(t, pa.table({"x": [t]}))
            cap.advance_to(t + 1)
    first._retention.close()
    assert first._retention.runs >= 1 and first._retention.last_error is None
    mark = log.retention("s")
    assert mark is not None and mark.since.elements[0] >= 10  # at least what was complete 0.5 s before the trim
    since = mark.since.elements[0]
    assert _replay(log) == {t: [t, t] for t in range(since, 12)}
    policy = RetentionPolicy(lambda: open_log(uri), "s", "1h")
    assert policy.interval == 360 and policy.tick()  # a fresh mark: this writer leaves the trim to the other
    policy.close()
    assert policy.runs == 0 and policy.last_error is None
    first.close()
    other.close()
    with pytest.raises(ValueError, match="not an age"):
        Capture(log, "s2", 0, 1, schema=SCHEMA, retention="a week")


def test_max_bytes_drops_the_oldest_complete_times_until_the_stream_is_about_that_size(tmp_path):
    log, caps = _live(str(tmp_path / "log"), segment_bytes=400)  # part 0 at 30, part 1 at 20: [0, 20) complete
    total = sum(log.part_stats("s", p).bytes for p in range(2))
    assert trim(log, "s", max_bytes=total * 10).since == Antichain([0])  # already small enough: nothing dropped
    result = trim(log, "s", max_bytes=total // 2)
    since = result.since.elements[0]
    assert 0 < since <= 20  # only complete times
    after = sum(log.part_stats("s", p).bytes for p in range(2))
    segment = max(log.part_stats("s", p).bytes / max(log.part_stats("s", p).segments, 1) for p in range(2))
    assert after <= total // 2 + 2 * segment + 400  # whole segments: up to about one more a part
    assert _replay(log) == {t: [t * 10, t * 10 + 1] for t in range(since, 20)}
    assert trim(log, "s", max_bytes=0).since == Antichain([20])  # as much as is complete, not more
    for c in caps:
        c.close()


def test_live_readers_during_a_trim_lose_nothing_and_a_lagging_one_is_told(tmp_path):
    """A follower ahead of the cut reads on through a trim and a writer that goes on; one that lags behind the cut
    (its next segment removed under it) gets ``TrimmedError`` naming the earliest event left, not a file error
    or a silent skip."""
    uri = str(tmp_path / "log")
    log = open_log(uri, segment_bytes=300)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    for t in range(30):
        cap.send(t, pa.table({"x": [t]}))
        cap.advance_to(t + 1)
    lagging = Replayer(uri, "s", follow=True, timeout=30)
    behind = lagging.completed()
    assert [next(behind)[0] for _ in range(2)] == [0, 1]
    ahead = Replayer(uri, "s", follow=True, timeout=30)
    front = ahead.completed()
    assert [next(front)[0] for _ in range(25)] == list(range(25))
    trim(log, "s", since=Antichain([20]))
    for t in range(30, 33):
        cap.send(t, pa.table({"x": [t]}))
        cap.advance_to(t + 1)
    cap.close()
    assert [t for t, _ in front] == list(range(25, 33))  # nothing lost, nothing twice
    with pytest.raises(TrimmedError, match="dropped by a trim of the stream while this reader read it") as e:
        for _ in behind:
            pass
    assert e.value.earliest == log.retention("s").cut(0).start
    lagging.close()
    ahead.close()
