"""Repartition with shared decoding: ``Replayer.split()`` reads, checks and decodes each event once and hashes
each key once for all workers; for every worker it must give exactly what ``Replayer(..., worker=j)`` gives —
the same events in the same order, the same rows routed to the same worker — for every key type (ints of
every width, floats with NaN and -0.0, strings, binaries, booleans, dates, times, timestamps, nulls), several
key columns, function keys, resumed replays and committed reads of unfinished parts."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capture import Capture
from eventlog import Messages, Progress, open_log
from eventlog.time import TimeType
from replay import Replayer, worker_of
from replay.replayer import _bool_array
from tests.support.strategies import run_capture, schedules

_names = itertools.count()
PROPS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

KEY_TYPES = [
    pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(), pa.uint64(), pa.bool_(),
    pa.float32(), pa.float64(), pa.string(), pa.large_string(), pa.binary(), pa.large_binary(),
    pa.date32(), pa.time64("us"), pa.timestamp("ms"), pa.timestamp("ns", tz="UTC"), pa.duration("s"),
]


def _values(t: pa.DataType) -> st.SearchStrategy:
    T = pa.types
    if T.is_boolean(t):
        s: st.SearchStrategy = st.booleans()
    elif T.is_integer(t):
        lo, hi = (0, 2**t.bit_width - 1) if T.is_unsigned_integer(t) else (-(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1)
        s = st.integers(lo, hi)
    elif T.is_floating(t):
        s = st.floats(width=t.bit_width, allow_nan=True) | st.sampled_from([0.0, -0.0, float("nan")])
    elif T.is_string(t) or T.is_large_string(t):
        s = st.text(max_size=10)
    elif T.is_binary(t) or T.is_large_binary(t):
        s = st.binary(max_size=10)
    elif T.is_date32(t):
        s = st.integers(-100_000, 100_000)
    elif T.is_time64(t):
        s = st.integers(0, 86_400_000_000 - 1)
    else:
        s = st.integers(-(2**40), 2**40)
    return st.none() | s | s  # nulls hash to 0


@st.composite
def keyed_batches(draw, schema: pa.Schema, max_rows: int = 12) -> pa.RecordBatch:
    n = draw(st.integers(1, max_rows))
    cols = []
    for f in schema:
        vals = draw(st.lists(_values(f.type), min_size=n, max_size=n))
        if pa.types.is_date32(f.type) or pa.types.is_time64(f.type) or pa.types.is_timestamp(f.type) \
                or pa.types.is_duration(f.type):
            cols.append(pa.array(vals, pa.int64()).cast(f.type) if not pa.types.is_date32(f.type)
                        else pa.array(vals, pa.int32()).cast(f.type))
        else:
            cols.append(pa.array(vals, type=f.type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


@st.composite
def keyed_captures(draw):
    types = draw(st.lists(st.sampled_from(KEY_TYPES), min_size=1, max_size=3))
    schema = pa.schema([pa.field(f"k{i}", t) for i, t in enumerate(types)] + [pa.field("v", pa.int64())])
    key = draw(st.sampled_from(["k0", [f"k{i}" for i in range(len(types))], "function"]))
    parts = draw(st.integers(1, 4))
    time_type = TimeType.parse(draw(st.sampled_from(["int64", "product:2"])))
    plans = []
    for _ in range(parts):
        steps = draw(schedules(pa.schema([("x", pa.int8())]), time_type, max_steps=8))
        for s in steps:
            if s.op == "send":
                s.batch = draw(keyed_batches(schema))
        plans.append(steps)
    return schema, key, time_type, plans


def _key(key):
    if key == "function":  # a function key: hashed from what it returns (here a numpy array)
        return lambda batch: (np.arange(batch.num_rows) * 7) % 5
    return key


def _events(events):
    return [("P", e.updates) if isinstance(e, Progress) else ("M", e.time, e.records) for e in events]


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x[:2] == y[:2]
        if x[0] == "M":
            assert repr(x[2].to_pylist()) == repr(y[2].to_pylist())  # (NaN keys: equals() says NaN != NaN)
            assert x[2].schema.equals(y[2].schema, check_metadata=True)


def _check_split(log, stream, peers, key, **kw):
    each = []
    for j in range(peers):
        with Replayer(log, stream, j, peers, mode="repartition", key=key, **kw) as r:
            each.append(_events(r))
            frontier = r.frontier
    with Replayer(log, stream, 0, peers, mode="repartition", key=key, **kw) as r:
        pairs = list(r.split())
        assert r.frontier == frontier
    assert all(0 <= j < peers for j, _ in pairs)
    for j in range(peers):
        _same(_events(ev for w, ev in pairs if w == j), each[j])
    return pairs


@given(keyed_captures(), st.integers(1, 5), st.sampled_from(["committed", "uncommitted"]))
@PROPS
def test_split_gives_each_worker_exactly_its_replayers_events(cap, peers, isolation):
    schema, key, time_type, plans = cap
    uri = f"memory://split-{next(_names)}"
    run_capture(open_log(uri), schema, time_type, plans, "arrow")
    _check_split(open_log(uri), "s", peers, _key(key), isolation=isolation)


@given(keyed_captures(), st.integers(1, 5))
@PROPS
def test_split_routes_every_row_as_worker_of(cap, peers):
    """Each Messages event's rows go to ``worker_of`` of their key, in their order, and nowhere else."""
    schema, key, time_type, plans = cap
    uri = f"memory://route-{next(_names)}"
    run_capture(open_log(uri), schema, time_type, plans, "arrow")
    key = _key(key)
    log = open_log(uri)
    with Replayer(log, "s", 0, peers, mode="repartition", key=key, isolation="uncommitted") as r:
        pairs = list(r.split())
    got = {}
    for j, ev in pairs:
        if isinstance(ev, Messages):
            for row in ev.records.to_pylist():
                got.setdefault(j, []).append(repr(row))
    want = {}
    for i in range(log.header("s").peers):
        for e in log.reader("s", i):
            if isinstance(e.event, Messages):
                owner = worker_of(e.event.records, key, peers)
                for row, j in zip(e.event.records.to_pylist(), owner):
                    want.setdefault(int(j), []).append(repr(row))
    assert {j: sorted(v) for j, v in got.items()} == {j: sorted(v) for j, v in want.items()}


def test_split_from_a_file_log_resumed_and_with_a_one_worker_event(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("s", pa.string())])
    log = open_log(tmp_path, sync="none")
    for p in range(3):
        with Capture(log, "r", p, 3, schema=schema) as cap:
            for t in range(5):
                ids = np.arange(t * 100, t * 100 + 50) + p * 10_000
                cap.send(t, pa.record_batch([pa.array(ids), pa.array([f"v{i}" for i in ids])], schema=schema))
                cap.send(t, pa.record_batch([pa.array([7] * 4), pa.array(["same"] * 4)], schema=schema))
                cap.advance_to(t + 1)
    log = open_log(tmp_path)
    pairs = _check_split(log, "r", 4, "id")
    assert sum(ev.records.num_rows for _, ev in pairs if isinstance(ev, Messages)) == 3 * 5 * 54
    with Replayer(log, "r", 0, 4, mode="repartition", key="id") as r:
        for _ in itertools.islice(r, 9):
            pass
        start = r.position
    _check_split(log, "r", 4, "id", start=start)
    _check_split(log, "r", 3, ["s", "id"], since=1, until=4)


def test_split_needs_repartition_mode(tmp_path):
    schema = pa.schema([("id", pa.int64())])
    with Capture(open_log(tmp_path), "r", 0, 1, schema=schema) as cap:
        cap.send(0, [{"id": 1}])
    with pytest.raises(ValueError, match="repartition"):
        next(Replayer(open_log(tmp_path), "r", 0, 2).split())


@given(st.lists(st.booleans(), max_size=200))
@settings(max_examples=200, deadline=None)
def test_bool_array_is_pa_array(bits):
    mask = np.array(bits, dtype=bool)
    got = _bool_array(mask)
    assert got.equals(pa.array(mask, pa.bool_())) and got.null_count == 0
    got.validate(full=True)


def test_uint64_keys_past_int64_hash_as_their_bits():
    """A uint64 key past 2**63 - 1 is hashed as its 64 bits read as int64 (it raised before); smaller ones as
    before."""
    from replay.keyhash import hash_array

    big = pa.array([2**63, 2**64 - 1, 5, None], pa.uint64())
    same = pa.array([-(2**63), -1, 5, None], pa.int64())
    assert (hash_array(big) == hash_array(same)).all()
    assert (hash_array(pa.array([5], pa.uint64())) == hash_array(pa.array([5], pa.int8()))).all()
