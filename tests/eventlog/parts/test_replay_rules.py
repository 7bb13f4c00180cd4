"""Timely's progress rules hold in every reader: the Replayer (events and ``completed()``), the CLI's part
cursors (``replay cat``) and ``replay verify``. Logs are written directly through ``log.writer(...).append``
(bypassing Capture's checks), in the memory log and the file log.

The rules are checked against a reference written here from FORMAT.md §1, independently of
``eventlog.parts.rules``: a positive delta needs a held capability at or below its time, a Messages event needs one
at or below its time, counts never go negative, updates are sorted, unique and non-zero, and nothing
follows the event that left the part holding nothing.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import tempfile

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors import memory
from eventlog import Messages, Progress, ProgressError, StreamHeader, open_log
from eventlog.time import TimeType, less_equal
from replay import Replayer
from tests.support.cli import replay_cli

SCHEMA = pa.schema([("n", pa.int64())])
_names = itertools.count()


def batch(*values: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"n": v} for v in values], schema=SCHEMA)


def write_parts(log, stream: str, parts: list[list], time: str = "int64") -> None:
    """Create ``stream`` with one part per list and append each list's events as they are."""
    log.create_stream(StreamHeader(stream, len(parts), SCHEMA, TimeType.parse(time)))
    for p, events in enumerate(parts):
        with log.writer(stream, p) as w:
            for ev in events:
                w.append(ev)


@pytest.fixture(params=["memory", "file"])
def raw_log(request, tmp_path):
    """A fresh log of each kind that the tests write events into directly."""
    if request.param == "memory":
        name = f"rules-{os.getpid()}-{next(_names)}"
        yield open_log(f"memory://{name}")
        memory.drop(name)
    else:
        yield open_log(str(tmp_path / "log"))


# -- the reference ------------------------------------------------------------------------------------------


def _held(counts: collections.Counter) -> list:
    return [t for t, c in counts.items() if c > 0]


def violations(events: list, minimum, *, first_only: bool) -> list[int]:
    """Sequence ids of the events that break a rule. With ``first_only`` the first one (where a strict
    reader stops); else all of them, applying a broken event's updates unless a count would go negative
    (what verify does to go on)."""
    counts = collections.Counter({minimum: 1})
    out = []
    for seq, ev in enumerate(events, 1):
        held = _held(counts)
        bad = not held  # anything after the part finished
        if isinstance(ev, Messages):
            bad = bad or not any(less_equal(h, ev.time) for h in held)
        else:
            times = [t for t, _ in ev.updates]
            bad = bad or times != sorted(set(times)) or any(d == 0 for _, d in ev.updates)
            bad = bad or any(d > 0 and not any(less_equal(h, t) for h in held) for t, d in ev.updates)
            new = collections.Counter(counts)
            for t, d in ev.updates:
                new[t] += d
            if any(c < 0 for c in new.values()):
                bad = True
            else:
                counts = collections.Counter({t: c for t, c in new.items() if c})
        if bad:
            out.append(seq)
            if first_only:
                break
    return out


# -- random parts: mostly what a capture writes, sometimes not -----------------------------------------------


def _later(draw, t):
    if isinstance(t, tuple):
        return tuple(c + draw(st.integers(0, 2)) for c in t)
    return t + draw(st.integers(0, 2))


@st.composite
def part_events(draw, product: bool = False) -> list:
    any_time = (st.tuples(st.integers(0, 3), st.integers(0, 3)) if product else st.integers(0, 6))
    minimum = (0, 0) if product else 0
    counts = collections.Counter({minimum: 1})  # what a verify-like reader believes the part holds
    events: list = []
    for _ in range(draw(st.integers(0, 9))):
        held = sorted(_held(counts))
        action = draw(st.sampled_from(["send", "send", "send_any", "advance", "advance", "progress_any", "finish"]))
        if action == "send" and held:
            events.append(Messages(_later(draw, draw(st.sampled_from(held))), batch(len(events))))
            continue
        if action == "send_any" or (action == "send" and not held):
            events.append(Messages(draw(any_time), batch(len(events))))
            continue
        if action == "advance" and held:
            new = {_later(draw, draw(st.sampled_from(held))) for _ in range(draw(st.integers(1, 2)))}
            change = collections.Counter({t: -c for t, c in counts.items() if c > 0})
            for t in new:
                change[t] += 1
        elif action == "finish" and held:
            change = collections.Counter({t: -c for t, c in counts.items() if c > 0})
        else:
            raw = draw(st.lists(st.tuples(any_time, st.integers(-2, 2)), min_size=0, max_size=3))
            if draw(st.booleans()):
                events.append(Progress(tuple(raw)))  # as drawn: perhaps unsorted, repeated or zero
                updates = raw
            else:
                change = collections.Counter()
                for t, d in raw:
                    change[t] += d
                updates = None
            if updates is not None:
                new_counts = collections.Counter(counts)
                for t, d in updates:
                    new_counts[t] += d
                if all(c >= 0 for c in new_counts.values()):
                    counts = collections.Counter({t: c for t, c in new_counts.items() if c})
                continue
        updates = tuple(sorted((t, d) for t, d in change.items() if d))
        events.append(Progress(updates))
        new_counts = collections.Counter(counts)
        for t, d in updates:
            new_counts[t] += d
        if all(c >= 0 for c in new_counts.values()):
            counts = collections.Counter({t: c for t, c in new_counts.items() if c})
    return events


def _fresh_log(kind: str, tmp: str):
    if kind == "memory":
        return open_log(f"memory://rules-{os.getpid()}-{next(_names)}")
    return open_log(os.path.join(tmp, f"log{next(_names)}"))


def _check_strict(run, events: list, minimum, stream: str) -> None:
    """``run()`` consumes a reader; it must raise ProgressError at the first broken rule, else succeed."""
    expected = violations(events, minimum, first_only=True)
    if expected:
        with pytest.raises(ProgressError) as ei:
            run()
        assert (ei.value.stream, ei.value.part, ei.value.seq) == (stream, 0, expected[0]), str(ei.value)
    else:
        run()


_SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("kind", ["memory", "file"])
@pytest.mark.parametrize("product", [False, True], ids=["int64", "product2"])
@_SETTINGS
@given(data=st.data())
def test_every_reader_enforces_the_rules_on_any_part(kind, product, data):
    events = data.draw(part_events(product))
    minimum = (0, 0) if product else 0
    with tempfile.TemporaryDirectory() as tmp:
        log = _fresh_log(kind, tmp)
        write_parts(log, "s", [events], time="product:2" if product else "int64")

        def replay_events():
            with Replayer(log, "s", 0, 1) as r:
                return list(r)

        _check_strict(replay_events, events, minimum, "s")

        delivered = {}

        def replay_completed():
            with Replayer(log, "s", 0, 1) as r:
                for t, table in r.completed():
                    assert t not in delivered  # each time once
                    delivered[t] = sorted(table.column("n").to_pylist())
                return r.frontier

        final = []
        _check_strict(lambda: final.append(replay_completed()), events, minimum, "s")
        if not violations(events, minimum, first_only=True):
            held = collections.Counter({minimum: 1})
            sent = collections.defaultdict(list)
            for ev in events:
                if isinstance(ev, Messages):
                    sent[ev.time] += ev.records.column("n").to_pylist()
                else:
                    held.update(dict(ev.updates))
            frontier = _held(held)
            # a committed reader (FORMAT.md §1.1) delivers a part's messages in order while each is passed by
            # a later Progress event; when every message is, it delivers every record at a complete time (no
            # capability held at or below it) and none at another
            if all(not any(less_equal(h, ev.time) for h in frontier) for ev in events if isinstance(ev, Messages)):
                assert delivered == {t: sorted(v) for t, v in sent.items()
                                     if not any(less_equal(h, t) for h in frontier)}
            else:  # a message is uncommitted: what is delivered is complete and whole, and the frontier lags
                (reader_frontier,) = final
                assert all(any(less_equal(a, b) for a in reader_frontier) for b in frontier)
                assert delivered == {t: sorted(v) for t, v in sent.items()
                                     if not any(less_equal(h, t) for h in reader_frontier)}

        if kind == "memory":  # the CLI reads memory logs in-process
            first = violations(events, minimum, first_only=True)
            result = replay_cli("cat", log.uri, "s", "--format", "jsonl", expect=3 if first else 0)
            if first:
                assert f"seq {first[0]}" in result.stderr and "part 0" in result.stderr
            doc = json.loads(replay_cli("verify", log.uri, "--json", expect=None).stdout)
            reported = sorted({p["seq"] for p in doc["problems"] if p["kind"] == "progress"})
            assert reported == violations(events, minimum, first_only=False)
            assert all(p["kind"] == "progress" for p in doc["problems"])
            memory.drop(log.uri[len("memory://"):])


# -- the cases of the issue, by hand -------------------------------------------------------------------------


def test_a_capability_added_behind_the_frontier_raises_instead_of_completing_twice(raw_log):
    """Issue 12 item 6: time 2 was reported complete, then a record at 2 arrived."""
    write_parts(raw_log, "s", [[
        Progress(((0, -1), (5, 1))),     # seq 1: frontier [5]: times 0..4 complete
        Messages(5, batch(50)),          # seq 2
        Progress(((2, 1),)),             # seq 3: a capability at 2 < 5, minted from nothing
        Messages(2, batch(20)),          # seq 4: a record at a time already complete
        Progress(((2, -1), (5, -1))),    # seq 5
    ]])
    for consume in (lambda r: list(r), lambda r: list(r.completed())):
        with Replayer(raw_log, "s", 0, 1) as r, pytest.raises(ProgressError, match="behind the part's frontier") as ei:
            consume(r)
        assert (ei.value.stream, ei.value.part, ei.value.seq) == ("s", 0, 3)
        assert "stream 's'" in str(ei.value) and "seq 3" in str(ei.value)


def test_every_worker_of_both_modes_raises_for_a_broken_part(raw_log):
    good = [Progress(((0, -1), (3, 1))), Messages(3, batch(1, 2)), Progress(((3, -1),))]
    bad = [Progress(((0, -1), (4, 1))), Progress(((1, 1), (4, -1))), Messages(1, batch(3))]
    write_parts(raw_log, "s", [good, bad])
    for mode, workers in (("assign", [1]), ("repartition", [0, 1])):
        for j in workers:
            with Replayer(raw_log, "s", j, 2, mode=mode, key="n") as r, pytest.raises(ProgressError) as ei:
                list(r.completed())
            assert (ei.value.part, ei.value.seq) == (1, 2), (mode, j)
    with Replayer(raw_log, "s", 0, 2) as r:  # assign mode: worker 0 reads only the good part
        assert [(t, tb.num_rows) for t, tb in r.completed()] == [(3, 2)]


@pytest.mark.parametrize("events, seq, match", [
    ([Progress(((0, -1), (5, 1))), Messages(3, batch(1))], 2, "messages at time 3 behind the part's frontier \\[5\\]"),
    ([Progress(((0, -2),))], 1, "negative capability count"),
    ([Progress(((0, -1),)), Messages(9, batch(1))], 2, "after the part finished"),
    ([Progress(((0, -1),)), Progress(())], 2, "progress after the part finished"),
    ([Progress(((0, -1),)), Progress(((4, 1),))], 2, "progress after the part finished"),
    ([Progress(((2, 1), (0, -1)))], 1, "not sorted"),
    ([Progress(((0, -1), (1, 0), (2, 1)))], 1, "non-zero"),
])
def test_each_rule_raises_with_stream_part_and_seq(raw_log, events, seq, match):
    write_parts(raw_log, "s", [events])
    with Replayer(raw_log, "s", 0, 1) as r, pytest.raises(ProgressError, match=match) as ei:
        list(r)
    assert (ei.value.stream, ei.value.part, ei.value.seq) == ("s", 0, seq)


def test_product_times_a_capability_incomparable_to_the_frontier_is_behind(raw_log):
    write_parts(raw_log, "g", [[
        Progress((((0, 0), -1), ((0, 2), 1))),  # frontier [(0,2)]
        Progress((((1, 0), 1),)),               # (1,0) is not >= (0,2): minted from nothing
    ]], time="product:2")
    with Replayer(raw_log, "g", 0, 1) as r, pytest.raises(ProgressError, match=r"time \[1,0\] behind") as ei:
        list(r)
    assert ei.value.seq == 2


def test_a_resumed_replayer_checks_the_progress_it_restores(raw_log):
    write_parts(raw_log, "s", [[
        Progress(((0, -1), (5, 1))), Progress(((1, 1),)), Messages(5, batch(1)), Progress(((1, -1), (5, -1))),
    ]])
    with pytest.raises(ProgressError) as ei:
        Replayer(raw_log, "s", 0, 1, start={0: 3})
    assert (ei.value.part, ei.value.seq) == (0, 2)


def test_a_following_replayer_raises_when_a_finished_part_writes_again(raw_log):
    write_parts(raw_log, "s", [[Progress(((0, -1), (1, 1))), Messages(1, batch(1)), Progress(((1, -1),))], []])
    with raw_log.writer("s", 0) as w:
        w.append(Progress(((2, 1),)))  # part 0 takes a capability after it finished; part 1 still runs
    with Replayer(raw_log, "s", 0, 1, mode="assign", follow=True, timeout=5) as r, pytest.raises(ProgressError) as ei:
        list(r)
    assert (ei.value.part, ei.value.seq) == (0, 4)


def test_valid_captures_are_untouched_by_the_checks(raw_log):
    from capture import Capture

    for w in range(3):
        with Capture(raw_log, "ok", w, 3, schema=SCHEMA) as cap:
            for t in range(5):
                cap.send(t, [{"n": 10 * t + w}])
                cap.advance_to(t + 1)
    got = {}
    for j in range(2):
        with Replayer(raw_log, "ok", j, 2) as r:
            for t, table in r.completed():
                got.setdefault(t, []).extend(table.column("n").to_pylist())
    assert {t: sorted(v) for t, v in got.items()} == {t: [10 * t + w for w in range(3)] for t in range(5)}
