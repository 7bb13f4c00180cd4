"""Keyed routing (``runtime.checkpoints.keygroups.destinations`` / ``split_by_destination``, ``task._Router``) sends every
row where the per-row definition says — instance ``keyhash(key) % key_groups * P // key_groups`` with
``replay.keyhash`` — for every key type, and each destination gets its rows in their batch order."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

from replay.keyhash import hash_array, key_hashes
from runtime.channels.payload import decode_batch
from runtime.checkpoints.keygroups import (
    destinations,
    fast_key_hashes,
    hash_values,
    instance_of_group,
    key_groups_of,
    key_groups_of_values,
    split_by_destination,
)
from runtime.task import _Router

RNG = np.random.default_rng(17)
N = 700


def _columns() -> dict[str, pa.Array]:
    small = RNG.integers(-50, 50, N)
    return {
        "int64 dense": pa.array(small, pa.int64()),
        "int64 sparse": pa.array(RNG.integers(-(1 << 62), 1 << 62, N), pa.int64()),
        "int64 extremes": pa.array(np.r_[np.iinfo(np.int64).max, np.iinfo(np.int64).min, small[: N - 2]], pa.int64()),
        "int8": pa.array(small, pa.int8()),
        "int16": pa.array(small * 300, pa.int16()),
        "int32": pa.array(small * 70000, pa.int32()),
        "uint8": pa.array(small + 50, pa.uint8()),
        "uint16": pa.array((small + 50) * 600, pa.uint16()),
        "uint32": pa.array(RNG.integers(0, 1 << 32, N), pa.uint32()),
        "uint64": pa.array(RNG.integers(0, 1 << 62, N).astype(np.uint64), pa.uint64()),
        "int64 with nulls": pa.array([None if i % 7 == 0 else int(v) for i, v in enumerate(small)], pa.int64()),
        "bool": pa.array(small > 0),
        "float64": pa.array(np.r_[0.0, -0.0, np.nan, small[: N - 3] / 3]),
        "float32": pa.array(small / 4, pa.float32()),
        "string": pa.array([f"w{v}" for v in small]),
        "large_string": pa.array([f"w{v}" for v in small], pa.large_string()),
        "binary": pa.array([bytes([v % 256]) * (v % 5) for v in small + 50], pa.binary()),
        "string with nulls": pa.array([None if i % 5 == 0 else f"k{v}" for i, v in enumerate(small)]),
        "timestamp": pa.array([dt.datetime(2024, 1, 1) + dt.timedelta(seconds=int(v)) for v in small],
                              pa.timestamp("us")),
        "date32": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=int(v)) for v in small], pa.date32()),
        "dictionary": pa.array([f"d{v % 9}" for v in small]).dictionary_encode(),
    }


COLUMNS = _columns()


def _per_row_instances(batch: pa.RecordBatch, key, key_groups: int, p: int) -> list[int]:
    """The old way, one row at a time: ``replay.keyhash`` of the row's key, its group, the owning instance."""
    out = []
    for i in range(batch.num_rows):
        h = int(key_hashes(batch.slice(i, 1), key)[0])
        out.append(int(instance_of_group(h % key_groups, key_groups, p)))
    return out


@pytest.mark.parametrize("name", sorted(COLUMNS))
def test_hash_values_equal_replay_keyhash(name):
    col = COLUMNS[name]
    try:
        want = hash_array(col)
    except (TypeError, pa.ArrowInvalid) as e:          # a type replay.keyhash refuses is refused alike
        with pytest.raises(type(e)):
            hash_values(col)
        return
    assert hash_values(col).tolist() == want.tolist()
    assert hash_values(pa.chunked_array([col.slice(0, 10), col.slice(10)])).tolist() == want.tolist()
    sliced = col.slice(3, 50)                                   # an offset into the buffers
    assert hash_values(sliced).tolist() == hash_array(sliced).tolist()


@pytest.mark.parametrize("name", sorted(COLUMNS))
@pytest.mark.parametrize("key_groups", [128, 100, 7])
def test_destinations_equal_the_per_row_way(name, key_groups):
    batch = pa.record_batch({"k": COLUMNS[name], "v": pa.array(np.arange(N))})
    for p in (1, 2, 3, 5, 8):
        want = _per_row_instances(batch, "k", key_groups, p)
        assert destinations(batch, "k", key_groups, p).tolist() == want, (name, p)
        groups = key_groups_of(batch, "k", key_groups)
        assert (groups == (key_hashes(batch, "k") % np.uint64(key_groups)).astype(np.int64)).all()


def test_several_key_columns_and_key_functions():
    batch = pa.record_batch({"a": COLUMNS["int64 dense"], "b": COLUMNS["string"], "c": COLUMNS["float64"]})
    for key in (["a", "b"], ["b", "c", "a"], lambda b: b.column(0), lambda b: np.asarray(b.column(0)) * 3,
                lambda b: b.column("b")):
        for p in (2, 3):
            assert destinations(batch, key, 128, p).tolist() == _per_row_instances(batch, key, 128, p)
        assert fast_key_hashes(batch, key).tolist() == key_hashes(batch, key).tolist()
    cols = [COLUMNS["int64 dense"], COLUMNS["string"]]
    both = pa.RecordBatch.from_arrays(cols, names=["k0", "k1"])
    assert key_groups_of_values(cols, 128).tolist() == (key_hashes(both, ["k0", "k1"]) % np.uint64(128)).tolist()
    assert key_groups_of_values(cols[:1], 100).tolist() == (hash_array(cols[0]) % np.uint64(100)).tolist()


def test_missing_key_column_is_named():
    with pytest.raises(KeyError, match="'nope'"):
        destinations(pa.record_batch({"k": [1, 2]}), "nope", 128, 2)


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 8, 13])
def test_split_by_destination_keeps_row_order(p):
    dest = RNG.integers(0, p, 5000).astype(np.int16)
    parts = split_by_destination(dest, p)
    for j in range(p):
        want = np.flatnonzero(dest == j)
        got = parts[j]
        if len(want) == len(dest):
            assert got is Ellipsis
        elif len(want) == 0:
            assert got is None
        else:
            assert got.tolist() == want.tolist()
    one = np.full(100, p - 1, np.int16)
    assert split_by_destination(one, p)[p - 1] is Ellipsis
    assert split_by_destination(np.zeros(0, np.int16), p) == [None] * p


class _Writer:
    def __init__(self) -> None:
        self.payloads: list = []

    def write(self, payload, nbytes=None) -> int:
        self.payloads.append(payload)
        return len(self.payloads)


@pytest.mark.parametrize("name", ["int64 dense", "int64 sparse", "string", "int64 with nulls", "float64",
                                  "uint32", "timestamp"])
@pytest.mark.parametrize("p", [2, 3, 8])
def test_router_sends_each_destination_its_rows_in_order(name, p):
    batch = pa.record_batch({"k": COLUMNS[name], "v": pa.array(np.arange(N))})
    writers = [_Writer() for _ in range(p)]
    _Router("key", writers, "k", 128).send(42, batch)
    want = _per_row_instances(batch, "k", 128, p)
    for j, w in enumerate(writers):
        rows = [i for i in range(N) if want[i] == j]
        if not rows:
            assert w.payloads == []
            continue
        assert len(w.payloads) == 1
        t, got = decode_batch(w.payloads[0])
        assert t == 42
        want_batch = batch.take(pa.array(rows, pa.int64()))
        assert got.schema == want_batch.schema and got.column("v").equals(want_batch.column("v"))
        assert repr(got.column("k").to_pylist()) == repr(want_batch.column("k").to_pylist())   # NaN-safe


def test_router_whole_batch_to_one_destination_and_forward_and_rebalance():
    batch = pa.record_batch({"k": pa.array([5] * 100, pa.int64())})
    writers = [_Writer() for _ in range(3)]
    _Router("key", writers, "k", 128).send(1, batch)
    (j,) = [i for i, w in enumerate(writers) if w.payloads]
    assert decode_batch(writers[j].payloads[0])[1].equals(batch)
    fw = [_Writer()]
    _Router("forward", fw, None, 128).send(3, batch)
    assert decode_batch(fw[0].payloads[0]) == (3, batch)
    rb = [_Writer(), _Writer()]
    router = _Router("rebalance", rb, None, 128)
    for t in range(5):
        router.send(t, batch)
    assert [len(w.payloads) for w in rb] == [3, 2]


def test_keys_past_the_fast_path_follow_replay_keyhash():
    """uint64 past 2**63 - 1 and types replay.keyhash refuses go through it: the same destinations, or the
    same error."""
    for col in (pa.array([1 << 63, 1, (1 << 64) - 1], pa.uint64()), pa.array([[1], [2]])):
        batch = pa.record_batch({"k": col})
        try:
            want = _per_row_instances(batch, "k", 128, 3)
        except Exception as e:  # noqa: BLE001 - whatever replay.keyhash raises
            with pytest.raises(type(e)):
                destinations(batch, "k", 128, 3)
            continue
        assert destinations(batch, "k", 128, 3).tolist() == want
