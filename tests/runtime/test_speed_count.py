"""The vectorised keyed ``count``/``sum`` (key columns buffered per time and counted in one pass, with
``numpy.bincount`` for dense integer keys; output batches built column by column) emits exactly the batches
the row-by-row definition gives — ``from_pylist`` of one dict per key, keys sorted — for every key type,
with and without windows, schemas and checkpoints in between; and its snapshots restore the same."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

from eventlog.antichain import Antichain
from runtime import operators
from runtime.operators import Aggregation, KeyedAggregateOp, OperatorContext, count_keys

RNG = np.random.default_rng(5)


def _key_columns(n: int) -> dict[str, pa.Array]:
    small = RNG.integers(-20, 20, n)
    return {
        "int64 dense": pa.array(small, pa.int64()),
        "int64 sparse": pa.array(RNG.integers(-(1 << 62), 1 << 62, n) // 1000 * 1000 + small, pa.int64()),
        "int8": pa.array(small, pa.int8()),
        "uint32": pa.array(small + 20, pa.uint32()),
        "uint64 big": pa.array((small + 20).astype(np.uint64) + np.uint64(1 << 63), pa.uint64()),
        "int64 nulls": pa.array([None if i % 6 == 0 else int(v) for i, v in enumerate(small)], pa.int64()),
        "string": pa.array([f"w{v}" for v in small]),
        "string nulls": pa.array([None if i % 4 == 0 else f"w{v}" for i, v in enumerate(small)]),
        "float64": pa.array(small / 2),
        "bool": pa.array(small > 0),
        "date32": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=int(v)) for v in small], pa.date32()),
    }


def _reference(batches: list[tuple[int, pa.RecordBatch]], key: list[str], kind: str, column: str | None,
               window: int | None, schema: pa.Schema | None) -> list[tuple[int, pa.RecordBatch]]:
    """The row-by-row definition: per completed slot, the keys (sorted when they sort) with their running
    (or window) aggregate, one dict per key, ``from_pylist``."""
    pending: dict[int, dict] = {}
    for t, b in batches:
        slot = t if window is None else t - t % window
        bucket = pending.setdefault(slot, {})
        for r in b.to_pylist():
            k = r[key[0]] if len(key) == 1 else tuple(r[n] for n in key)
            v = 1 if kind == "count" else r[column]
            if v is not None:
                bucket[k] = bucket.get(k, 0) + v
    state: dict = {}
    out = []
    for slot in sorted(pending):
        bucket = pending[slot]
        try:
            keys = sorted(bucket)
        except TypeError:
            keys = list(bucket)
        rows = []
        for k in keys:
            acc = bucket[k] if window is not None else state.get(k, 0) + bucket[k]
            if window is None:
                state[k] = acc
            kd = {key[0]: k} if len(key) == 1 else dict(zip(key, k))
            row = {**kd, ("count" if kind == "count" else column): acc}
            if window is not None:
                row.update(window_start=slot, window_end=slot + window)
            rows.append(row)
        if rows:
            out.append((slot if window is None else slot + window - 1, pa.RecordBatch.from_pylist(rows, schema=schema)))
    return out


def _run(batches, key, kind, column, window, schema, *, snapshot_every: int = 0):
    """Feed ``batches`` (times ascending) to the operator, the frontier following the times; with
    ``snapshot_every`` the operator is snapshotted and restored into a new instance every so many batches."""
    emitted: list[tuple[int, pa.RecordBatch]] = []

    def make(state=None):
        op = KeyedAggregateOp(key if len(key) > 1 else key[0], Aggregation(kind, column), window, schema)
        op.open(OperatorContext("j", "agg", 0, 1, 128, 1, "/nonexistent", lambda t, b: emitted.append((t, b))), state)
        return op

    op = make()
    last = None
    for i, (t, b) in enumerate(batches):
        if last is not None and t > last:
            op.on_frontier(Antichain([t]))
        op.process(t, b)
        last = t
        if snapshot_every and (i + 1) % snapshot_every == 0:
            snap = op.snapshot(i + 1)
            state = {"keyed": {k: [v] for k, v in snap["keyed"].items()}, "instance": snap["instance"]}
            op = make(state)
    op.on_frontier(Antichain())
    return emitted


def _same(got, want):
    """Equal batches at equal times; rows compared in order when their keys sort (the defined order), as a
    multiset when they do not (keys of mixed types or None: arrival order, which the grouping decides)."""
    assert [t for t, _ in got] == [t for t, _ in want]
    for (_, g), (_, w) in zip(got, want):
        assert g.schema == w.schema
        rows_g, rows_w = g.to_pylist(), w.to_pylist()
        if any(v is None for r in rows_w for v in r.values()):
            rows_g, rows_w = sorted(rows_g, key=repr), sorted(rows_w, key=repr)
        assert repr(rows_g) == repr(rows_w)       # NaN-safe, types included


def _batches(col: pa.Array, times: int = 6, per_time: int = 3) -> list[tuple[int, pa.RecordBatch]]:
    n = len(col)
    out = []
    cut = 0
    step = n // (times * per_time)
    for t in range(times):
        for _ in range(per_time):
            piece = col.slice(cut, step)
            out.append((t * 3, pa.record_batch({"k": piece, "v": pa.array(RNG.integers(-5, 50, len(piece)))})))
            cut += step
    return out


@pytest.mark.parametrize("name", sorted(_key_columns(10)))
@pytest.mark.parametrize("window", [None, 2])
@pytest.mark.parametrize("kind", ["count", "sum"])
def test_count_and_sum_equal_the_row_by_row_definition(name, window, kind):
    batches = _batches(_key_columns(1800)[name])
    column = None if kind == "count" else "v"
    try:
        want = _reference(batches, ["k"], kind, column, window, None)
    except OverflowError as e:       # keys over int64 do not convert without a schema: refused alike
        with pytest.raises(type(e)):
            _run(batches, ["k"], kind, column, window, None)
        schema = pa.schema([("k", pa.uint64()), ("count" if kind == "count" else "v", pa.int64())])
        if window is None:
            _same(_run(batches, ["k"], kind, column, window, schema),
                  _reference(batches, ["k"], kind, column, window, schema))
        return
    _same(_run(batches, ["k"], kind, column, window, None), want)
    _same(_run(batches, ["k"], kind, column, window, None, snapshot_every=4), want)


def test_several_key_columns_schemas_and_a_key_named_count():
    cols = _key_columns(1200)
    batches = [(t, pa.record_batch({"a": cols["int64 dense"].slice(100 * t, 100),
                                    "b": cols["string nulls"].slice(100 * t, 100)})) for t in range(12)]
    _same(_run(batches, ["a", "b"], "count", None, None, None),
          _reference(batches, ["a", "b"], "count", None, None, None))
    _same(_run(batches, ["b", "a"], "count", None, 4, None, snapshot_every=5),
          _reference(batches, ["b", "a"], "count", None, 4, None))
    schema = pa.schema([("a", pa.int32()), ("count", pa.int32()), ("extra", pa.string())])
    _same(_run(batches, ["a"], "count", None, None, schema), _reference(batches, ["a"], "count", None, None, schema))
    named = [(t, pa.record_batch({"count": b.column(0)})) for t, b in batches]   # the key column is called count
    _same(_run(named, ["count"], "count", None, 3, None), _reference(named, ["count"], "count", None, 3, None))


def test_many_buffered_rows_are_counted_early(monkeypatch):
    monkeypatch.setattr(operators, "_COUNT_BUFFER_ROWS", 250)
    batches = _batches(_key_columns(3000)["int64 dense"], times=3, per_time=10)
    _same(_run(batches, ["k"], "count", None, None, None), _reference(batches, ["k"], "count", None, None, None))


@pytest.mark.parametrize("name", sorted(_key_columns(10)))
def test_count_keys_equals_group_by(name):
    col = _key_columns(3000)[name]
    keys, counts = count_keys([col])
    g = pa.table({"k0": col}).group_by(["k0"], use_threads=False).aggregate([([], "count_all")])
    want = dict(zip(g.column("k0").to_pylist(), g.column("count_all").to_pylist()))
    got = dict(zip(keys, counts))
    assert repr(sorted(got.items(), key=repr)) == repr(sorted(want.items(), key=repr))
    assert all(type(k) is type(w) for k, w in zip(sorted(got, key=repr), sorted(want, key=repr)))
    assert count_keys([pa.array([], pa.int64())]) == ([], [])
