"""Golden logs (committed in tests/golden/logs) read by today's code: the format cannot drift silently."""

from __future__ import annotations

import os

import pytest

from eventlog import open_log
from tests.support.golden import EXPECTED, ROWS, as_tuples
from tests.support.paths import GOLDEN_LOGS, GOLDEN_LOGS_2

GOLDEN = str(GOLDEN_LOGS)
GOLDEN_BY_VERSION = {(1, 0): GOLDEN, (2, 0): str(GOLDEN_LOGS_2)}
"""Golden file logs of each format version: written once by that version's code, never changed."""


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


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_golden_2_1_trimmed_streams_read_from_their_cuts(encoding):
    """Format 2.1: a stream trimmed to [3] (tests/golden/make_golden_logs.py 2.1). Part 0 sent at time 4 before it
    completed time 2: its cut is that record (seq 4, frontier [1]); its record at time 2 (seq 6) is skipped."""
    from eventlog.parts import CheckedPart
    from eventlog.retention import TrimmedError
    from replay import Replayer
    from replay.verify import verify
    from tests.support.paths import GOLDEN_LOGS_2_1

    log = open_log(str(GOLDEN_LOGS_2_1))
    stream = f"golden-{encoding}-trimmed"
    mark = log.retention(stream)
    assert list(mark.since) == [3] and [(c.start, c.counts) for c in mark.parts] == [(4, ((1, 1),)), (7, ((3, 1),))]
    assert log.header(stream).version == (2, 0)
    with CheckedPart(log, log.header(stream), 0, isolation="uncommitted") as p:
        assert [e.seq for e in p.read()] == [4, 5, 7, 8, 9, 10] and p.trimmed == 1 and p.frontier.is_empty()
    with pytest.raises(TrimmedError):
        CheckedPart(log, log.header(stream), 1, start=3)
    with Replayer(log, stream) as r:
        got = {t: sorted(table.column("id").to_pylist()) for t, table in r.completed()}
    assert got == {3: [4, 8], 4: [9, 9]}
    assert verify(log, stream).ok
    assert [log.part_stats(stream, p).first_seq for p in (0, 1)] == [4, 7]
