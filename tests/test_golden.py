"""Golden logs (committed in tests/golden/logs) read by today's code: the format cannot drift silently."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from eventlog import Messages, Progress, open_log

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "logs")
GOLDEN_BY_VERSION = {(1, 0): GOLDEN, (2, 0): os.path.join(os.path.dirname(__file__), "golden", "logs-2.0")}
"""Golden file logs of each format version: written once by that version's code, never changed."""
UTC = dt.timezone.utc


def row(i, name, tags, loc):
    return {"id": i, "name": name, "ts": dt.datetime(2026, 1, 1, 0, 0, i, tzinfo=UTC), "tags": tags, "loc": loc}


ROWS = {
    1: row(1, "n1", ["a"], {"lat": 0.5, "lon": -0.25}),
    2: row(2, None, ["a", "b"], {"lat": 1.0, "lon": -0.5}),
    3: row(3, "n3", [], None),
    4: row(4, None, ["a"], {"lat": 2.0, "lon": -1.0}),
    5: row(5, "n5", ["a", "b"], {"lat": 2.5, "lon": -1.25}),
    6: row(6, None, [], {"lat": 3.0, "lon": -1.5}),
    7: row(7, "n7", ["a"], {"lat": 3.5, "lon": -1.75}),
    8: row(8, None, ["a", "b"], {"lat": 4.0, "lon": -2.0}),
    9: row(9, "n9", [], {"lat": 4.5, "lon": -2.25}),
}

EXPECTED = {
    ("", 0): [("M", 0, [1, 2]), ("P", ((0, -1), (2, 1))), ("M", 2, [3]), ("M", 5, [4, 5, 6]), ("P", ((2, -1),))],
    ("", 1): [("M", 1, [7]), ("P", ((0, -1), (4, 1))), ("P", ((4, -1),))],
    ("-product", 0): [
        ("M", (0, 1), [8]),
        ("P", (((0, 0), -1), ((0, 2), 1), ((1, 0), 1))),
        ("M", (1, 1), [9]),
        ("P", (((0, 2), -1), ((1, 0), -1))),
    ],
}


def as_tuples(events):
    out = []
    for e in events:
        if isinstance(e, Messages):
            out.append(("M", e.time, e.records.to_pylist()))
        else:
            assert isinstance(e, Progress)
            out.append(("P", e.updates))
    return out


@pytest.mark.parametrize("version", list(GOLDEN_BY_VERSION), ids=lambda v: f"{v[0]}.{v[1]}")
@pytest.mark.parametrize("encoding", ["arrow", "avro"])
@pytest.mark.parametrize("suffix,part", list(EXPECTED))
def test_golden_logs_read_the_same(version, encoding, suffix, part):
    log = open_log(GOLDEN_BY_VERSION[version])
    stream = f"golden-{encoding}{suffix}"
    h = log.header(stream)
    assert h.encoding == encoding and h.created == "2026-11-22T00:00:00.000Z" and h.version == version
    assert h.peers == (1 if suffix else 2) and h.time_type.name == ("product:2" if suffix else "int64")
    assert [f.name for f in h.schema] == ["id", "name", "ts", "tags", "loc"]
    assert str(h.schema.field("ts").type) == "timestamp[us, tz=UTC]"
    want = [("M", item[1], [ROWS[i] for i in item[2]]) if item[0] == "M" else item for item in EXPECTED[(suffix, part)]]
    got = as_tuples(e.event for e in log.reader(stream, part))
    assert got == want
    assert [e.seq for e in log.reader(stream, part)] == list(range(1, len(want) + 1))


@pytest.mark.parametrize("version", list(GOLDEN_BY_VERSION), ids=lambda v: f"{v[0]}.{v[1]}")
def test_golden_streams_are_listed(version):
    assert sorted(open_log(GOLDEN_BY_VERSION[version]).streams()) == [
        "golden-arrow", "golden-arrow-product", "golden-avro", "golden-avro-product"]


def test_golden_2_0_logs_are_datasets_third_party_readers_scan():
    """The 2.0 golden streams read as tables of records with their time without eventlog: pyarrow.dataset for
    Arrow, fastavro for Avro (rows with ``_time``; Progress rows have none)."""
    import glob

    import fastavro
    import pyarrow.dataset as ds

    root = GOLDEN_BY_VERSION[(2, 0)]
    want = sorted((i, t) for key, items in EXPECTED.items() if key[0] == "" for item in items if item[0] == "M"
                  for t, ids in [(item[1], item[2])] for i in ids)
    table = ds.dataset(os.path.join(root, "golden-arrow"), format="arrow", partitioning="hive").to_table()
    assert sorted(zip(table.column("id").to_pylist(), table.column("_time").to_pylist())) == want
    assert sorted(set(table.column("part").to_pylist())) == [0, 1]
    rows = []
    for path in glob.glob(os.path.join(root, "golden-avro", "part=*", "*.avro")):
        with open(path, "rb") as f:
            rows += [(r["id"], r["_time"]) for r in fastavro.reader(f) if r["_time"] is not None]
    assert sorted(rows) == want
