"""``replay.dataset``: a stream's records as a pyarrow dataset with ``_time``, ``_part`` and ``_seq``, the
committed view by default, on file, memory and Kafka logs (the ``log_uri`` fixture)."""

from __future__ import annotations

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from capture import Capture
from eventlog import Messages, open_log
from eventlog.errors import SchemaMismatchError, StreamNotFoundError
from replay import Replayer, dataset

SCHEMA = pa.schema([("n", pa.int64()), ("word", pa.string())])


def capture(uri: str, stream: str = "numbers", peers: int = 2, times: int = 4, encoding: str = "arrow",
            time_of=lambda t: t) -> None:
    """Part w sends records n = 100*t + w and n + 50 at each time t (``time_of(t)`` for product streams)."""
    log = open_log(uri)
    for w in range(peers):
        with Capture(log, stream, w, peers, schema=SCHEMA, encoding=encoding,
                     time="int64" if time_of(0) == 0 else "product:2") as cap:
            for t in range(times):
                cap.send(time_of(t), [{"n": 100 * t + w, "word": f"w{w}"}, {"n": 100 * t + w + 50, "word": None}])
                cap.advance_to(time_of(t + 1))


def rows(d: ds.Dataset) -> list[dict]:
    return sorted(d.to_table().to_pylist(), key=lambda r: (r["_part"], r["_seq"], r["n"]))


def test_records_with_time_part_and_seq_of_their_event(log_uri, encoding):
    capture(log_uri, encoding=encoding)
    d = dataset(log_uri, "numbers")
    assert d.schema.names == ["n", "word", "_time", "_part", "_seq"]
    assert [d.schema.field(c).type for c in ("_time", "_part", "_seq")] == [pa.int64(), pa.int32(), pa.int64()]
    log = open_log(log_uri)
    expected = []
    for p in range(2):
        for entry in log.reader("numbers", p):
            if isinstance(entry.event, Messages):
                expected += [{**r, "_time": entry.event.time, "_part": p, "_seq": entry.seq}
                             for r in entry.event.records.to_pylist()]
    assert rows(d) == sorted(expected, key=lambda r: (r["_part"], r["_seq"], r["n"]))
    assert d.count_rows() == d.count_rows() == 16  # scanned again: the same rows


def test_product_times_are_lists(log_uri):
    capture(log_uri, time_of=lambda t: (t, 2 * t))
    d = dataset(log_uri, "numbers", since=(1, 0), until=(3, 0))
    assert d.schema.field("_time").type == pa.list_(pa.int64())
    assert sorted({tuple(r["_time"]) for r in rows(d)}) == [(1, 2), (2, 4)]


def test_the_same_records_as_a_replayer_with_bounds_and_parts(log_uri):
    capture(log_uri, peers=3, times=5)
    d = dataset(log_uri, "numbers", since=1, until=4, parts=[0, 2])
    got = rows(d)
    assert {r["_time"] for r in got} == {1, 2, 3} and {r["_part"] for r in got} == {0, 2}
    replayed = []
    for worker in (0, 2):  # replay worker w of 3 reads part w
        with Replayer(log_uri, "numbers", worker, 3, since=1, until=4) as r:
            replayed += [x["n"] for ev in r if isinstance(ev, Messages) for x in ev.records.to_pylist()]
    assert sorted(r["n"] for r in got) == sorted(replayed)


def test_committed_by_default_uncommitted_on_request(log_uri):
    log = open_log(log_uri)
    cap = Capture(log, "numbers", 0, 1, schema=SCHEMA)
    cap.send(0, [{"n": 1, "word": "done"}])
    cap.advance_to(1)
    cap.send(1, [{"n": 2, "word": "crashed"}])
    cap.abort()  # a crash: time 1 was not complete
    cap = Capture(log, "numbers", 0, 1, schema=SCHEMA)  # the restarted writer re-sends time 1
    cap.send(1, [{"n": 3, "word": "re-sent"}])
    cap.advance_to(2)
    cap.send(2, [{"n": 4, "word": "open"}])  # written, not committed: time 2 is not complete
    cap.abort()
    assert [r["word"] for r in rows(dataset(log_uri, "numbers"))] == ["done", "re-sent"]
    assert sorted(r["word"] for r in rows(dataset(log_uri, "numbers", isolation="uncommitted"))) == [
        "crashed", "done", "open", "re-sent"]


def test_small_events_are_joined_into_few_batches(tmp_path):
    uri = str(tmp_path / "log")
    with Capture(open_log(uri), "numbers", 0, 1, schema=SCHEMA) as cap:
        for t in range(3000):
            cap.send(t, [{"n": t, "word": None}])
            cap.advance_to(t + 1)
    d = dataset(uri, "numbers")
    assert len(list(list(d.get_fragments())[0].to_batches())) < 10  # a batch per 64 Ki rows, not per event
    t = d.to_table()
    assert t["_seq"].to_pylist() == list(range(1, 6000, 2)) and t["_time"].to_pylist() == list(range(3000))


def test_duckdb_and_polars_read_it(tmp_path):
    uri = str(tmp_path / "log")
    capture(uri)
    d = dataset(uri, "numbers")
    assert duckdb.sql("select _time, count(*) from d group by 1 order by 1").fetchall() == [(t, 4) for t in range(4)]
    assert pl.scan_pyarrow_dataset(d).filter(pl.col("_part") == 1).collect().height == 8


def test_errors_name_the_stream_and_part(tmp_path):
    uri = str(tmp_path / "log")
    capture(uri)
    with pytest.raises(StreamNotFoundError, match="nope"):
        dataset(uri, "nope")
    with pytest.raises(ValueError, match=r"stream 'numbers' has parts 0..1, not 2"):
        dataset(uri, "numbers", parts=[0, 2])
    with pytest.raises(ValueError, match="isolation"):
        dataset(uri, "numbers", isolation="dirty")

@pytest.mark.kafka
def test_a_record_field_named_like_a_log_column_is_refused(kafka_uri):
    uri = kafka_uri  # file and memory logs of format 2 refuse such a stream at capture
    with Capture(open_log(uri), "clash", 0, 1, schema=pa.schema([("_time", pa.int64())])) as cap:
        cap.send(0, [{"_time": 5}])
    with pytest.raises(SchemaMismatchError, match=r"named like the columns .*stream 'clash'"):
        dataset(uri, "clash")
