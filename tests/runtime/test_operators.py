"""Operators compute what they say, in-process: row and batch functions, keyed aggregations per time and
per window; sources rewind; checkpoint files are atomic."""

from __future__ import annotations

import os
from collections import defaultdict

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from connectors.files.storage import LocalStorage
from runtime import Advance, Job, JobFailedError
from runtime.checkpoints.keygroups import groups_of_instance, instance_of_group, key_groups_of
from runtime.checkpoints.store import CheckpointStore


def _source(items: int = 40):
    def gen(part: int, offset: int):
        for i in range(offset, items):
            yield i // 4, [{"k": f"k{(i + part) % 3}", "v": i, "part": part}]
    return gen


def _run(tmp_path, build, parts: int = 2, **kw) -> list[tuple[int, dict]]:
    out: list = []
    job = Job("ops")
    build(job.from_generator(_source(), parts=parts, name="src")).sink(
        lambda t, tb: out.extend((t, r) for r in tb.to_pylist()), name="out")
    result = job.run(channels=str(tmp_path / "ch"), checkpoints=str(tmp_path / "ck"), checkpoint_interval=0.02,
                     timeout=60, **kw)
    assert result.status == "finished"
    return out


def _inputs(parts: int = 2, items: int = 40):
    return [(t, r) for p in range(parts) for t, rows in _source(items)(p, 0) for r in rows]


def test_map_flat_map_filter_map_batches(tmp_path):
    out = _run(tmp_path, lambda s: s.map(lambda r: {"k": r["k"], "v": r["v"] * 10})
               .flat_map(lambda r: [r, {"k": r["k"] + "!", "v": r["v"] + 1}], parallelism=1)
               .filter(lambda r: r["v"] % 3 != 0)
               .map_batches(lambda b: b.append_column("w", pc.multiply(b.column("v"), 2))))
    want = []
    for t, r in _inputs():
        for x in ({"k": r["k"], "v": r["v"] * 10}, {"k": r["k"] + "!", "v": r["v"] * 10 + 1}):
            if x["v"] % 3 != 0:
                want.append((t, {**x, "w": x["v"] * 2}))
    key = lambda tr: (tr[0], tr[1]["k"], tr[1]["v"])  # noqa: E731
    assert sorted(out, key=key) == sorted(want, key=key)


def test_keyed_count_sum_reduce_aggregate_per_time(tmp_path):
    totals: dict = defaultdict(lambda: [0, 0, 0])
    per_time: dict = defaultdict(set)
    for t, r in _inputs():
        per_time[t].add(r["k"])
    want_count, want_sum = [], []
    for t in sorted(per_time):
        for t2, r in _inputs():
            if t2 == t:
                totals[r["k"]][0] += 1
                totals[r["k"]][1] += r["v"]
                totals[r["k"]][2] = max(totals[r["k"]][2], r["v"])
        for k in sorted(per_time[t]):
            want_count.append((t, k, totals[k][0]))
            want_sum.append((t, k, totals[k][1]))
    got = _run(tmp_path / "c", lambda s: s.key_by("k").count(parallelism=2))
    assert sorted((t, r["k"], r["count"]) for t, r in got) == sorted(want_count)
    got = _run(tmp_path / "s", lambda s: s.key_by("k").sum("v", parallelism=3))
    assert sorted((t, r["k"], r["v"]) for t, r in got) == sorted(want_sum)
    got = _run(tmp_path / "r", lambda s: s.key_by("k").reduce(lambda a, b: {"k": a["k"], "v": max(a["v"], b["v"])}))
    assert sorted((t, r["k"], r["v"]) for t, r in got)[-3:] == sorted((9, k, totals[k][2]) for k in per_time[9])
    got = _run(tmp_path / "a", lambda s: s.key_by("k").aggregate(
        list, lambda acc, r: acc + [r["v"]], finish=lambda k, acc: {"k": k, "n": len(acc), "total": sum(acc)}))
    final = {r["k"]: (r["n"], r["total"]) for t, r in sorted(got, key=lambda x: x[0])}
    assert final == {k: (v[0], v[1]) for k, v in totals.items()}


def test_windows_by_function_key_and_several_columns(tmp_path):
    got = _run(tmp_path / "w", lambda s: s.key_by(["k", "part"]).window(3).sum("v", parallelism=2))
    want: dict = defaultdict(int)
    for t, r in _inputs():
        want[(t - t % 3, r["k"], r["part"])] += r["v"]
    assert sorted((r["window_start"], r["k"], r["part"], r["v"]) for _t, r in got) == \
        sorted((w, k, p, v) for (w, k, p), v in want.items())
    assert all(t == r["window_end"] - 1 for t, r in got)      # emitted at the window's last time
    got = _run(tmp_path / "f", lambda s: s.key_by(lambda b: pc.utf8_length(b.column("k"))).window(100).count())
    assert [(r["key"], r["count"]) for _t, r in got] == [(2, 80)]


def test_source_advance_none_and_time_errors(tmp_path):
    def gen(part: int, offset: int):
        items = [None, (0, [{"x": 1}]), Advance(5), None, (5, [{"x": 2}]), (7, [{"x": 3}])]
        yield from items[offset:]

    out: list = []
    job = Job("adv")
    job.from_generator(gen, parts=1).key_by("x").window(5).count().sink(lambda t, tb: out.extend(tb.to_pylist()))
    job.run(channels=str(tmp_path / "ch"), checkpoints=str(tmp_path / "ck"), timeout=30)
    assert sorted((r["window_start"], r["x"], r["count"]) for r in out) == [(0, 1, 1), (5, 2, 1), (5, 3, 1)]

    def back(part: int, offset: int):
        yield from [(3, [{"x": 1}]), (2, [{"x": 1}])][offset:]

    job = Job("back")
    job.from_generator(back, parts=1).sink(lambda t, tb: None)
    with pytest.raises(JobFailedError, match="went back in time from 3 to 2"):
        job.run(channels=str(tmp_path / "ch2"), checkpoints=str(tmp_path / "ck2"), max_restarts=0, timeout=30)


def test_key_groups_route_each_key_to_one_instance():
    batch = pa.record_batch({"k": [f"w{i}" for i in range(1000)]})
    groups = key_groups_of(batch, "k", 128)
    assert groups.min() >= 0 and groups.max() < 128
    assert (key_groups_of(batch, "k", 128) == groups).all()           # stable
    for p in (1, 2, 3, 5):
        owned = [set(groups_of_instance(j, 128, p)) for j in range(p)]
        assert set().union(*owned) == set(range(128)) and sum(map(len, owned)) == 128
        for g in range(128):
            assert g in owned[instance_of_group(g, 128, p)]


def _snap(checkpoint: int, state: dict) -> dict:
    return {"checkpoint": checkpoint, "generation": 1, "node": "op", "index": 0, "parallelism": 1, "inputs": {},
            "outputs": {"op.0-out.0": 7}, "state": state, "finished": False}


def test_checkpoint_store_is_atomic(tmp_path):
    store = CheckpointStore(f"file://{tmp_path}", "job")
    assert store.latest() is None and store.next_generation() == 1 and store.next_generation() == 2
    store.save_task(3, "op", 0, _snap(3, {"a": 1, "parts": {0: (1, b"x", float("nan"))}}))
    assert not store.is_complete(3) and store.latest() is None
    store.complete({"checkpoint": 3, "generation": 2, "parallelism": {"op": 1}, "key_groups": 128, "final": False})
    assert store.latest()["checkpoint"] == 3
    state = store.load_task(3, "op", 0)["state"]
    assert state["a"] == 1 and state["parts"][0][:2] == (1, b"x") and state["parts"][0][2] != state["parts"][0][2]
    store.save_task(4, "op", 0, _snap(4, {"a": 2}))
    store.remove_before(4)
    assert store.checkpoints() == [4]
    LocalStorage().write_file(str(tmp_path / "f"), b"x")
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []
