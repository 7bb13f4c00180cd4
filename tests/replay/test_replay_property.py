"""Property tests of replay: random captures with N parts replayed by M workers, both modes."""

from __future__ import annotations

import collections
import itertools

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors import memory
from eventlog import Messages, open_log
from eventlog.parts.rules import PartProgress
from eventlog.time import TimeType, less_equal, less_than
from replay import Replayer, copy
from tests.support.strategies import run_capture, schedules

SCHEMA = pa.schema([("k", pa.int64()), ("tag", pa.string())])
_names = itertools.count()


@st.composite
def captured(draw):
    time_type = TimeType.parse(draw(st.sampled_from(["int64", "product:2"])))
    n = draw(st.integers(1, 8))
    plans = [draw(schedules(SCHEMA, time_type, max_steps=8)) for _ in range(n)]
    return time_type, plans


def rows_by_time(pairs):
    out = collections.Counter()
    for t, batch in pairs:
        for r in batch.to_pylist():
            out[(t, r["k"], r["tag"])] += 1
    return out


def captured_rows(plans):
    return rows_by_time((s.time, s.batch) for steps in plans for s in steps if s.op == "send")


def committed_rows(log, stream):
    """What a committed reader delivers of a capture whose parts may not all be finished (FORMAT.md §1.1):
    per part, its Messages events in sequence order up to the first one that no later Progress event of the
    part passed."""
    out = collections.Counter()
    header = log.header(stream)
    for i in range(header.peers):
        rules = PartProgress(header.time_type.minimum)
        sent = []
        for e in log.reader(stream, i):
            if isinstance(e.event, Messages):
                sent.append(e.event)
            else:
                rules.progress(e.seq, e.event.updates)
        out.update(rows_by_time((m.time, m.records) for m in itertools.takewhile(
            lambda m: not rules.less_equal(m.time), sent)))
    return out


def replay_all(log, stream, m, mode, isolation="committed"):
    """Iterate each worker's events; check the frontier rule on the way; return rows and final frontiers."""
    got = collections.Counter()
    frontiers = []
    for j in range(m):
        r = Replayer(log, stream, j, m, mode=mode, key="k" if mode == "repartition" else None, isolation=isolation)
        for ev in r:
            if isinstance(ev, Messages):
                assert r.frontier.less_equal(ev.time), "a worker's frontier passed a time its parts still send"
                got.update(rows_by_time([(ev.time, ev.records)]))
        frontiers.append(r.frontier)
    return got, frontiers


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(captured(), st.integers(1, 8), st.sampled_from(["assign", "repartition"]))
def test_replay_with_any_worker_count(cap, m, mode):
    time_type, plans = cap
    name = f"rp-{next(_names)}"
    log = open_log(f"memory://{name}")
    try:
        run_capture(log, SCHEMA, time_type, plans, "arrow")
        want = committed_rows(log, "s")
        got, frontiers = replay_all(log, "s", m, mode)
        assert got == want
        got_all, frontiers_all = replay_all(log, "s", m, mode, "uncommitted")  # every event as read
        assert got_all == captured_rows(plans)
        # a committed reader's frontier may lag (a Progress event waits behind a message it passes), never lead
        assert all(any(less_equal(a, b) for a in f) for f, f_all in zip(frontiers, frontiers_all) for b in f_all)

        for j in range(m):
            r = Replayer(log, "s", j, m, mode=mode, key="k" if mode == "repartition" else None)
            yielded = []
            for t, table in r.completed():
                assert r.is_complete(t)
                yielded.append(t)
                assert table.schema.equals(SCHEMA)
            assert len(yielded) == len(set(yielded)), "a time was yielded twice"
            for a, b in itertools.combinations(yielded, 2):  # a before b: b is never strictly earlier
                assert not less_than(b, a), "times not in topological order"
            sent = {s.time for i in r.parts for s in plans[i] if s.op == "send"}
            assert set(yielded) == {t for t in sent if r.is_complete(t)}

        # copy to m parts (assign or repartition) replays to the same records and completion
        copy(log, log, "s", peers=m, key="k" if mode == "repartition" else None, dst_stream="c")
        got2, frontiers2 = replay_all(log, "c", 1, "assign", "uncommitted")
        assert got2 == want  # the copy holds the committed view of the source
        # ... and its own committed view holds back what its merged frontier has not passed
        assert replay_all(log, "c", 1, "assign")[0] == committed_rows(log, "c")
        whole = Replayer(log, "s", 0, 1)
        list(whole)
        assert frontiers2[0] == whole.frontier
    finally:
        memory.drop(name)
