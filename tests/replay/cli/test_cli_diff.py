"""``replay diff`` as multisets per time (pyarrow's group-by, and the JSON-text keys of nested columns) on
file and memory logs: equal however records are spread over parts, events and encodings; duplicates counted;
nulls, NaNs, nested values and product times; differences found in every chunk the captures are compared in."""

from __future__ import annotations

import importlib
import math
import os

import pyarrow as pa
import pytest

from capture import Capture
from eventlog import open_log
from tests.support.cli import replay_cli

diff_module = importlib.import_module("replay.cli.diff")  # replay.cli.diff as an attribute is the command

FLAT = pa.schema([("word", pa.string()), ("n", pa.int64()), ("x", pa.float64())])
NESTED = pa.schema([("tags", pa.list_(pa.string())), ("point", pa.struct([("x", pa.int64()), ("y", pa.float64())])),
                    ("id", pa.int32())])
MAP = pa.field("attrs", pa.map_(pa.string(), pa.int64()))
"""A map column (not in the avro encoding)."""


@pytest.fixture(params=["file", "memory"])
def uris(request, tmp_path) -> tuple[str, str]:
    """Two fresh logs of one kind."""
    if request.param == "memory":
        return f"memory://diff-{os.getpid()}-{tmp_path.name}-a", f"memory://diff-{os.getpid()}-{tmp_path.name}-b"
    return str(tmp_path / "a"), str(tmp_path / "b")


def put(uri: str, records: dict, *, schema: pa.Schema = FLAT, peers: int = 1, encoding: str = "arrow",
        stream: str = "s", time: str = "int64", events: int = 1) -> None:
    """Capture ``records`` ({time: [record…]}) with ``peers`` parts, record i of a time in part i % peers,
    each part's share of a time in ``events`` Messages events; every part finished."""
    log = open_log(uri)
    times = sorted(records)
    for w in range(peers):
        with Capture(log, stream, w, peers, schema=schema, encoding=encoding, time=time) as cap:
            for i, t in enumerate(times):
                mine = records[t][w::peers]
                for e in range(events):
                    if mine[e::events]:
                        cap.send(t, mine[e::events])
                if i + 1 < len(times):
                    cap.advance_to(times[i + 1])


def rec(word: str | None, n: int | None = 1, x: float | None = 0.5) -> dict:
    return {"word": word, "n": n, "x": x}


def test_equal_multisets_across_parts_events_and_encodings(uris):
    a, b = uris
    records = {t: [rec(f"w{i % 3}", i, i / 7) for i in range(10)] + [rec("dup"), rec("dup")] for t in range(4)}
    put(a, records, peers=3)
    put(b, {t: list(reversed(rs)) for t, rs in records.items()}, peers=2, encoding="avro", events=3)
    assert replay_cli("diff", a, b, "s").stdout.startswith("equal: 4 times, 48 records, frontier []")


def test_duplicates_are_counted(uris):
    a, b = uris
    put(a, {0: [rec("r"), rec("r"), rec("s")], 1: [rec("t")]})
    put(b, {0: [rec("r"), rec("s"), rec("s")], 1: [rec("t")]}, peers=2)
    out = replay_cli("diff", a, b, "s", expect=1).stdout
    assert "captures differ at 1 of 2 times; first diverging time: 0" in out
    assert 'only in A (1):\n    {"word":"r","n":1,"x":0.5}' in out
    assert 'only in B (1):\n    {"word":"s","n":1,"x":0.5}' in out


def test_nulls_and_nans_are_values_like_any_other(uris):
    a, b = uris
    records = {0: [rec(None, None, None), rec("a", None, math.nan), rec(None, 2, -math.inf)]}
    put(a, records)
    put(b, {0: records[0][::-1]}, peers=2, encoding="avro")
    replay_cli("diff", a, b, "s")
    put(a, records, stream="t")
    put(b, {0: [rec(None, None, None), rec("a", 0, math.nan), rec(None, 2, -math.inf)]}, stream="t")
    out = replay_cli("diff", a, b, "t", expect=1).stdout
    assert 'only in A (1):\n    {"word":"a","n":null,"x":"NaN"}' in out
    assert 'only in B (1):\n    {"word":"a","n":0,"x":"NaN"}' in out


def nested(i: int, y: float = 0.5, attrs: bool = False) -> dict:
    return {"tags": [f"t{i}", None] if i % 2 else [], "point": {"x": i, "y": y} if i % 3 else None, "id": i,
            **({"attrs": [("k", i), ("z", None)]} if attrs else {})}


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_nested_columns_are_compared_by_value(uris, encoding):
    a, b = uris
    maps = encoding == "arrow"
    schema = NESTED.append(MAP) if maps else NESTED
    put(a, {t: [nested(i, attrs=maps) for i in range(8)] for t in range(3)}, schema=schema, peers=2)
    put(b, {t: [nested(i, attrs=maps) for i in reversed(range(8))] for t in range(3)}, schema=schema, peers=3,
        encoding=encoding)
    assert replay_cli("diff", a, b, "s").stdout.startswith("equal: 3 times, 24 records")
    put(a, {t: [nested(i, attrs=maps) for i in range(8)] for t in range(3)}, schema=schema, stream="t")
    put(b, {t: [nested(i, y=0.25 if (t, i) == (1, 5) else 0.5, attrs=maps) for i in range(8)] for t in range(3)},
        schema=schema, stream="t", encoding=encoding)
    out = replay_cli("diff", a, b, "t", expect=1).stdout
    assert "captures differ at 1 of 3 times; first diverging time: 1" in out
    assert '"point":{"x":5,"y":0.5}' in out.split("only in B")[0]
    assert '"point":{"x":5,"y":0.25}' in out.split("only in B")[1]


def test_product_times(uris):
    a, b = uris
    times = [(0, 0), (0, 1), (1, 1), (2, 5)]
    put(a, {t: [rec("a", i) for i in range(4)] for t in times}, time="product:2", peers=2)
    put(b, {t: [rec("a", i if t != (1, 1) else i + 1) for i in range(4)] for t in times}, time="product:2")
    out = replay_cli("diff", a, b, "s", expect=1).stdout
    assert "captures differ at 1 of 4 times; first diverging time: [1,1]" in out
    assert '{"word":"a","n":0,"x":0.5}' in out.split("only in B")[0] and '"n":4' in out.split("only in B")[1]


def test_a_time_on_one_side_only_and_times_compared_in_chunks(uris, monkeypatch):
    monkeypatch.setattr(diff_module, "_CHUNK_ROWS", 7)  # read both sides a few records at a time, and
    monkeypatch.setattr(diff_module, "_COMPARE_ROWS", 20)  # compare the complete times in many group-bys
    a, b = uris
    records = {t: [rec("w", i) for i in range(5)] for t in range(40)}
    put(a, records, peers=2)
    changed = {t: [rec("w", i + (t in (3, 20, 39))) for i in range(5)] for t in range(40) if t != 30}
    changed[30] = []
    put(b, changed, peers=3)
    out = replay_cli("diff", a, b, "s", expect=1).stdout
    assert "captures differ at 4 of 40 times; first diverging time: 3" in out
    assert "other differing times: 20, 30, 39" in out
    monkeypatch.setattr(diff_module, "_COMPARE_ROWS", 10_000)  # one group-by at the end: the same result
    assert replay_cli("diff", a, b, "s", expect=1).stdout == out


def test_completed_leaves_out_times_open_in_either_capture(uris):
    a, b = uris
    put(a, {0: [rec("a")], 1: [rec("b")]})
    log = open_log(b)
    cap = Capture(log, "s", 0, 1, schema=FLAT)
    cap.send(0, [rec("a")])
    cap.advance_to(1)
    cap.send(1, [rec("other")])  # time 1 open in B: committed reads do not show it
    cap.abort()
    out = replay_cli("diff", a, b, "s", expect=1).stdout
    assert "first diverging time: 1" in out and "B has 0 records (not complete)" in out
    assert replay_cli("diff", a, b, "s", "--completed").stdout.startswith("equal: 1 times, 1 records")


def test_samples_say_which_part_and_seq_each_record_came_from(uris):
    a, b = uris
    put(a, {0: [rec("r"), rec("r"), rec("s")], 1: [rec("t")]})
    put(b, {0: [rec("r"), rec("s"), rec("s")], 1: [rec("t")]}, peers=2)
    out = replay_cli("diff", a, b, "s", expect=1).stdout
    only_a = out.split("only in A (1):\n")[1].splitlines()[0]
    assert only_a.endswith("  [part 0 seq 1]")  # "r" twice in A's one event, once in B
    only_b = out.split("only in B (1):\n")[1].splitlines()[0]
    assert only_b.endswith("[part 0 seq 1, part 1 seq 1]")  # "s" in both of B's parts
