"""Segments are standard containers: plain pyarrow.ipc and plain fastavro read them, no eventlog code."""

from __future__ import annotations

import datetime as dt
import glob
import json
import os

import fastavro
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from tests.support.paths import GOLDEN_LOGS

GOLDEN = str(GOLDEN_LOGS)


def only(pattern):
    (path,) = glob.glob(pattern)
    return path


def test_arrow_segment_opens_with_plain_pyarrow():
    path = only(os.path.join(GOLDEN, "golden-arrow", "part-00000", "*.arrows"))
    reader = ipc.open_stream(pa.memory_map(path))
    seen = []
    while True:
        try:
            batch, meta = reader.read_next_batch_with_custom_metadata()
        except StopIteration:
            break
        kind = meta[b"eventlog.kind"].decode()
        if kind == "messages":
            seen.append((kind, json.loads(meta[b"eventlog.time"]), batch.column("id").to_pylist()))
        else:
            seen.append((kind, json.loads(meta[b"eventlog.updates"]), batch.num_rows))
    assert seen == [
        ("messages", 0, [1, 2]),
        ("progress", [[0, -1], [2, 1]], 0),
        ("messages", 2, [3]),
        ("messages", 5, [4, 5, 6]),
        ("progress", [[2, -1]], 0),
    ]
    table = ipc.open_stream(pa.memory_map(path)).read_all()  # progress events are empty batches
    assert table.column("id").to_pylist() == [1, 2, 3, 4, 5, 6]
    assert table.column("ts")[0].as_py() == dt.datetime(2026, 1, 1, 0, 0, 1, tzinfo=dt.timezone.utc)


def test_avro_segment_opens_with_plain_fastavro():
    path = only(os.path.join(GOLDEN, "golden-avro", "part-00000", "*.avro"))
    with open(path, "rb") as f:
        records = list(fastavro.reader(f))
    got = [(r["seq"], r["kind"], r["time"], [x["id"] for x in r["records"]],
            [(u["time"], u["delta"]) for u in r["updates"]]) for r in records]
    assert got == [
        (1, "MESSAGES", 0, [1, 2], []),
        (2, "PROGRESS", None, [], [(0, -1), (2, 1)]),
        (3, "MESSAGES", 2, [3], []),
        (4, "MESSAGES", 5, [4, 5, 6], []),
        (5, "PROGRESS", None, [], [(2, -1)]),
    ]
    first = records[0]["records"][0]
    assert first["ts"] == dt.datetime(2026, 1, 1, 0, 0, 1, tzinfo=dt.timezone.utc)  # logical type for readers
    assert first["tags"] == ["a"] and first["loc"] == {"lat": 0.5, "lon": -0.25}


@pytest.mark.usefixtures("file_format_1")
def test_fresh_capture_segments_of_format_1_open_with_plain_readers(tmp_path):
    from capture import Capture
    from eventlog import open_log

    schema = pa.schema([("k", pa.string()), ("v", pa.float64())])
    for enc, ext in (("arrow", "arrows"), ("avro", "avro")):
        with Capture(open_log(tmp_path), f"s-{enc}", 0, 1, schema=schema, encoding=enc) as cap:
            for t in range(3):
                cap.send(t * 10, [{"k": f"key{t}", "v": t / 2}])
                cap.advance_to(t * 10 + 1)
        path = only(str(tmp_path / f"s-{enc}" / "part-00000" / f"*.{ext}"))
        if enc == "arrow":
            assert ipc.open_stream(pa.memory_map(path)).read_all().column("k").to_pylist() == ["key0", "key1", "key2"]
        else:
            with open(path, "rb") as f:
                msgs = [r for r in fastavro.reader(f) if r["kind"] == "MESSAGES"]
            assert [(r["time"], r["records"]) for r in msgs] == [
                (0, [{"k": "key0", "v": 0.0}]), (10, [{"k": "key1", "v": 0.5}]), (20, [{"k": "key2", "v": 1.0}])
            ]


@pytest.mark.parametrize("encoding,compression", [("arrow", "zstd"), ("arrow", "lz4"), ("arrow", "none"),
                                                  ("avro", "deflate"), ("avro", "zstandard"), ("avro", "null")])
def test_every_compression_opens_with_pyarrow_polars_duckdb_and_fastavro(tmp_path, encoding, compression):
    """A stream of each compression (FORMAT.md §13) is read by the standard readers, no eventlog code: its header
    records the choice, its segments are compressed with it, and every reader gets the captured records."""
    import duckdb
    import polars as pl
    import pyarrow.dataset as ds

    from capture import Capture
    from eventlog import open_log

    schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
    rows = [{"k": f"key{i % 7}", "v": i} for i in range(5000)]
    with Capture(open_log(tmp_path), "s", 0, 1, schema=schema, encoding=encoding, compression=compression) as cap:
        for t in range(3):
            cap.send(t, rows)
            cap.advance_to(t + 1)
    with open(tmp_path / "s" / "_header.json") as f:
        assert json.load(f)["compression"] == compression
    path = only(str(tmp_path / "s" / "part=0" / f"*.{encoding}"))
    want = sorted((t, r["k"], r["v"]) for t in range(3) for r in rows)
    if encoding == "avro":
        with open(path, "rb") as f:
            reader = fastavro.reader(f)
            assert reader.codec == compression
            got = sorted((r["_time"], r["k"], r["v"]) for r in reader if r["_time"] is not None)
        assert got == want
        if compression != "zstandard":  # polars reads deflate and null containers, not zstandard ones
            frame = pl.read_avro(path).filter(pl.col("_time").is_not_null())
            assert sorted(zip(frame["_time"], frame["k"], frame["v"])) == want
        return
    codecs = {"zstd": "ZSTD", "lz4": "LZ4_FRAME", "none": None}
    with ipc.open_file(pa.memory_map(path)) as reader:
        for i in range(reader.num_record_batches):
            batch, custom = reader.get_batch_with_custom_metadata(i)
            if custom[b"eventlog.kind"] == b"messages":
                assert _body_codec(path, i) == codecs[compression]
        table = reader.read_all()
    assert sorted(zip(table["_time"].to_pylist(), table["k"].to_pylist(), table["v"].to_pylist())) == want
    d = ds.dataset(str(tmp_path / "s"), format="arrow", partitioning="hive")
    assert sorted(tuple(r.values()) for r in d.to_table(columns=["_time", "k", "v"]).to_pylist()) == want
    frame = pl.scan_ipc(str(tmp_path / "s" / "**" / "*.arrow"), hive_partitioning=True).collect()
    assert sorted(zip(frame["_time"], frame["k"], frame["v"])) == want
    assert duckdb.sql("select count(*), sum(v), count(distinct _time) from d").fetchall() == [
        (len(want), sum(v for _, _, v in want), 3)]


def _body_codec(path: str, i: int) -> "str | None":
    """The body compression of the ``i``-th record batch message of the IPC file at ``path`` (its flatbuffer)."""
    with open(path, "rb") as f:
        data = f.read()
    # walk the file's messages in order (the stream after the 8-byte magic) to the i-th record batch
    message_reader = ipc.MessageReader.open_stream(pa.py_buffer(data[8:]))
    message_reader.read_next_message()  # the schema
    message = message_reader.read_next_message()
    for _ in range(i):
        message = message_reader.read_next_message()
    from eventlog.encoding import ipc_build  # only to read the flatbuffer's codec field

    parts = ipc_build.parse(message.serialize().to_pybytes())
    return None if not parts.compressed else {0: "LZ4_FRAME", 1: "ZSTD"}[parts.codec]
