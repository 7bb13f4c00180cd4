"""The data source's pieces without a Spark session: stream URIs, time columns, staging and publishing
(rename and copy), and the options."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from connectors.spark.options import ReadOptions, WriteOptions
from connectors.spark.staging import PartStager, publish, stage_all
from connectors.spark.times import TimeSpec
from connectors.spark.uri import StreamURI, parse_stream_uri
from eventlog import InvalidTimeError, InvalidURIError, Messages, SchemaMismatchError, open_log
from replay import Replayer

SCHEMA = pa.schema([("t", pa.int64()), ("x", pa.int64())])


@pytest.mark.parametrize("uri, log_uri, stream", [
    ("file:///tmp/cap/numbers", "file:///tmp/cap", "numbers"),
    ("/tmp/cap/numbers/", "/tmp/cap", "numbers"),
    ("s3://bucket/logs/numbers", "s3://bucket/logs", "numbers"),
    ("kafka://127.0.0.1:9092/jobA/numbers", "kafka://127.0.0.1:9092/jobA", "numbers"),
])
def test_stream_uris(uri, log_uri, stream):
    got = parse_stream_uri(uri)
    assert (got.log_uri, got.stream) == (log_uri, stream)
    assert parse_stream_uri(got.log_uri, got.stream) == got


def test_relative_paths_become_absolute_and_bad_uris_are_refused():
    assert parse_stream_uri("cap/numbers").log_uri == os.path.abspath("cap")
    for bad in ("memory://x/numbers", "/numbers", "file:///numbers", "", "/tmp/cap/bad name"):
        with pytest.raises(InvalidURIError):
            parse_stream_uri(bad)


def test_time_spec_splits_batches_per_time():
    batch = pa.record_batch({"t": [3, 1, 3, 2], "x": [0, 1, 2, 3]}, schema=SCHEMA)
    split = [(t, r.column("x").to_pylist()) for t, r in TimeSpec.parse("t", SCHEMA).split(batch)]
    assert split == [(1, [1]), (2, [3]), (3, [0, 2])]
    assert [t for t, _ in TimeSpec.parse("[1, 2]", SCHEMA).split(batch)] == [(1, 2)]
    assert [t for t, _ in TimeSpec.parse(None, SCHEMA).split(batch)] == [0]
    with pytest.raises(SchemaMismatchError):
        TimeSpec.parse("nope", SCHEMA)
    with pytest.raises(InvalidTimeError):
        TimeSpec.parse("x", SCHEMA, "product:2")


def test_product_time_column_needs_its_arity():
    schema = pa.schema([("e", pa.list_(pa.int64()))])
    with pytest.raises(InvalidTimeError, match="product:K"):
        TimeSpec.parse("e", schema)
    batch = pa.record_batch({"e": [[1, 0], [0, 1], [1, 0]]}, schema=schema)
    got = [(t, r.num_rows) for t, r in TimeSpec.parse("e", schema, "product:2").split(batch)]
    assert got == [((0, 1), 1), ((1, 0), 2)]


def _stage(target, partition, attempt, values):
    stager = PartStager(target, "job", partition, attempt, SCHEMA, TimeSpec.parse("t", SCHEMA), "arrow")
    return stage_all(stager, [pa.record_batch({"t": [v % 2 for v in values], "x": values}, schema=SCHEMA)])


@pytest.mark.parametrize("kind", ["file", "memory"])  # memory logs take the copy path (like Kafka will)
def test_publish_makes_exactly_one_attempt_a_part(tmp_path, kind):
    from eventlog.header import StreamHeader

    root = str(tmp_path / "log") if kind == "file" else f"memory://publish-{os.getpid()}"
    target = parse_stream_uri(root, "s") if kind == "file" else StreamURI(root, "s")
    open_log(root).create_stream(StreamHeader("s", 2, SCHEMA))
    first, second = _stage(target, 0, 0, [1, 2, 3]), _stage(target, 0, 1, [1, 2, 3, 4])
    assert publish(first.uri, target, 0) is True
    assert publish(second.uri, target, 0) is False  # another attempt won: nothing changes
    assert publish(_stage(target, 1, 0, [5]).uri, target, 1) is True
    r = Replayer(open_log(root), "s", 0, 1)
    rows = sorted(x for ev in r if isinstance(ev, Messages) for x in ev.records.column("x").to_pylist())
    assert rows == [1, 2, 3, 5] and r.frontier.is_empty()


def test_a_failing_stage_leaves_nothing(tmp_path):
    target = parse_stream_uri(str(tmp_path / "log"), "s")

    def batches():
        yield pa.record_batch({"t": [0], "x": [1]}, schema=SCHEMA)
        raise RuntimeError("task failed")

    stager = PartStager(target, "job", 0, 0, SCHEMA, TimeSpec.parse("t", SCHEMA), "arrow")
    with pytest.raises(RuntimeError):
        stage_all(stager, batches())
    assert not os.path.exists(tmp_path / "log" / ".staging")


def test_options():
    opts = ReadOptions.parse({"path": "/tmp/cap/s", "workers": "3", "mode": "repartition", "key": "a, b",
                              "since": "[1, 2]", "incomplete": "true"})
    assert (opts.workers, opts.key, opts.since, opts.incomplete) == (3, ["a", "b"], (1, 2), True)
    with pytest.raises(ValueError, match="workers"):
        ReadOptions.parse({"path": "/tmp/cap/s", "workers": "0"})
    with pytest.raises(ValueError, match="give the stream URI"):
        ReadOptions.parse({})
    w = WriteOptions.parse({"path": "/tmp/cap", "stream": "s", "time": "epoch", "batchId": "4"})
    assert (w.target.stream, w.time, w.batch_id) == ("s", "epoch", 4)
