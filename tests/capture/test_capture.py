"""Capture follows timely's rules, converts what users send, and refuses bad input without writing."""

from __future__ import annotations

import pyarrow as pa
import pytest

from capture import Capture
from eventlog import (
    Antichain,
    HeaderMismatchError,
    InvalidTimeError,
    Messages,
    Progress,
    ProgressError,
    SchemaMismatchError,
    StreamNotFoundError,
    open_log,
)


def events(log, stream, part=0):
    return [e.event for e in log.reader(stream, part)]


def test_first_progress_retracts_the_minimum_time(log_uri, schema, encoding):
    log = open_log(log_uri)
    with Capture(log, "s", worker=0, peers=1, schema=schema, encoding=encoding) as cap:
        assert list(cap.frontier) == [0]
        cap.send(0, [{"x": 1, "s": "a"}])
        cap.send(2, [{"x": 2, "s": "b"}])
        cap.advance_to(2)
        cap.advance_to(2)  # no change: nothing written
        cap.send(2, [{"x": 3, "s": None}])
        cap.advance_to(5)
    evs = events(log, "s")
    assert [type(e).__name__ for e in evs] == ["Messages", "Messages", "Progress", "Messages", "Progress", "Progress"]
    assert evs[2] == Progress(((0, -1), (2, 1)))
    assert evs[4] == Progress(((2, -1), (5, 1)))
    assert evs[5] == Progress(((5, -1),))
    assert evs[3].records.to_pylist() == [{"x": 3, "s": None}]


def test_accepts_batches_tables_and_dicts(log_uri, schema):
    log = open_log(log_uri)
    with Capture(log, "s", 0, 1, schema=schema) as cap:
        cap.send(1, pa.record_batch({"x": [1], "s": ["a"]}))
        cap.send(1, pa.Table.from_batches([pa.record_batch({"x": [2], "s": ["b"]})] * 2))
        cap.send(1, ({"x": 4, "s": None},))  # a tuple of dicts; an explicit None is a null
        cap.send(1, [])  # nothing to write
    msgs = [e for e in events(log, "s") if isinstance(e, Messages)]
    assert [m.records.to_pylist() for m in msgs] == [
        [{"x": 1, "s": "a"}],
        [{"x": 2, "s": "b"}, {"x": 2, "s": "b"}],
        [{"x": 4, "s": None}],
    ]
    assert all(m.records.schema.equals(schema) for m in msgs)


def test_errors_write_nothing(log_uri, schema):
    log = open_log(log_uri)
    cap = Capture(log, "s", 0, 1, schema=schema)
    cap.advance_to(5)
    before = len(events(log, "s"))
    with pytest.raises(ProgressError, match="not in advance of the frontier") as ei:
        cap.send(4, [{"x": 1, "s": "a"}])
    assert ei.value.stream == "s" and ei.value.part == 0 and ei.value.seq == 2
    with pytest.raises(ProgressError, match="backwards"):
        cap.advance_to(3)
    with pytest.raises(SchemaMismatchError):
        cap.send(6, pa.record_batch({"x": ["not an int"], "s": ["a"]}))
    with pytest.raises(SchemaMismatchError, match="not in the schema"):
        cap.send(6, [{"x": 1, "zzz": 2}])
    with pytest.raises(SchemaMismatchError):
        cap.send(6, [{"x": "nope", "s": "a"}])
    with pytest.raises(InvalidTimeError):
        cap.send(-1, [{"x": 1, "s": None}])
    with pytest.raises(InvalidTimeError):
        cap.advance_to(1.5)
    assert len(events(log, "s")) == before
    assert list(cap.frontier) == [5]
    cap.close()
    with pytest.raises(ProgressError, match="closed"):
        cap.send(9, [{"x": 1, "s": None}])


def test_a_dict_must_have_every_column_and_no_other_key(log_uri, encoding):
    schema = pa.schema([("word", pa.string()), ("count", pa.int64()), pa.field("note", pa.string(), nullable=True)])
    log = open_log(log_uri)
    cap = Capture(log, "counts", 1, 2, schema=schema, encoding=encoding)
    cap.send(0, [{"word": "a", "count": 1, "note": None}])  # an explicit None is a null
    before = [e.seq for e in log.reader("counts", 1)]

    def refused(rows, *phrases):
        with pytest.raises(SchemaMismatchError) as ei:
            cap.send(1, rows)
        assert (ei.value.stream, ei.value.part) == ("counts", 1)
        assert "(stream 'counts', part 1)" in str(ei.value)
        for phrase in phrases:
            assert phrase in str(ei.value), str(ei.value)
        return str(ei.value)

    # a nullable column simply absent from the dict is missing, not a silent null
    refused([{"word": "a", "count": 1}], "records[0] has no column 'note' (pass None for a null)")
    # the first bad record is named, after good ones: nothing of the call is written
    refused([{"word": "a", "count": 1, "note": "x"}, {"word": "b", "note": None}], "records[1] has no column 'count'")
    refused(({},), "records[0] has no columns 'word', 'count', 'note'")
    refused([{"word": "a", "count": 1, "note": None, "extra": 1, 7: 2}],
            "records[0] has keys not in the schema: 'extra', 7")
    message = refused([{"word": "a", "cnt": 1, "note": None}],
                      "has no column 'count' (pass None for a null) and has a key not in the schema: 'cnt' "
                      "(did you mean 'count'?)")
    assert "the stream's columns are 'word', 'count', 'note'" in message
    assert [e.seq for e in log.reader("counts", 1)] == before
    cap.send(1, [{"note": "k", "count": 2, "word": "b"}])  # key order does not matter
    cap.close()
    msgs = [e.records.to_pylist() for e in events(log, "counts", 1) if isinstance(e, Messages)]
    assert msgs == [[{"word": "a", "count": 1, "note": None}], [{"word": "b", "count": 2, "note": "k"}]]


def _capture_warnings(make) -> list[str]:
    """The ResourceWarnings about captures while ``make()`` runs and its objects are collected."""
    import gc
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make()
        gc.collect()
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning) and "Capture" in str(w.message)]


def test_a_capture_collected_unclosed_warns_like_an_unclosed_file(log_uri, schema):
    log = open_log(log_uri)

    def forgotten():
        cap = Capture(log, "s", 1, 2, schema=schema)
        cap.send(0, [{"x": 1, "s": "a"}])
        cap.advance_to(3)

    (message,) = _capture_warnings(forgotten)
    assert message.startswith("unclosed Capture of stream 's' part 1 (of 2, frontier [3])")
    assert "replayers wait for the part forever" in message and "close()" in message and "abort()" in message
    assert [e.seq for e in log.reader("s", 1)] == [1, 2]  # nothing written or finished on its behalf


def test_closed_aborted_and_refused_captures_do_not_warn(log_uri, schema):
    log = open_log(log_uri)

    def closed():
        Capture(log, "a", 0, 1, schema=schema).close()
        Capture(log, "b", 0, 1, schema=schema).abort()
        with Capture(log, "c", 0, 1, schema=schema) as cap:
            cap.advance_to(1)
        with pytest.raises(RuntimeError):
            with Capture(log, "d", 0, 1, schema=schema):
                raise RuntimeError("operator failed")  # the with block aborts
        with pytest.raises(ProgressError, match="already finished"):
            Capture(log, "a", 0, 1)  # opened its writer, then refused
        with pytest.raises(HeaderMismatchError):
            Capture(log, "a", 0, 3)  # refused before opening a writer

    assert _capture_warnings(closed) == []


def test_not_null_fields_are_enforced(log_uri):
    schema = pa.schema([pa.field("x", pa.int64(), nullable=False)])
    with Capture(open_log(log_uri), "s", 0, 1, schema=schema) as cap:
        cap.send(0, pa.record_batch({"x": [1, 2]}))  # nullable field in the batch, but no nulls: fine
        with pytest.raises(SchemaMismatchError, match="not nullable"):
            cap.send(0, pa.record_batch({"x": [1, None]}))


def test_reopen_with_other_header_is_refused(log_uri, schema):
    log = open_log(log_uri)
    Capture(log, "s", 0, 2, schema=schema).close()
    with pytest.raises(HeaderMismatchError, match="peers"):
        Capture(log, "s", 1, 3, schema=schema)
    with pytest.raises(HeaderMismatchError, match="peers"):
        Capture(log, "s", 1, 3)
    with pytest.raises(HeaderMismatchError, match="schema"):
        Capture(log, "s", 1, 2, schema=pa.schema([("x", pa.int32())]))
    with pytest.raises(HeaderMismatchError, match="encoding"):
        Capture(log, "s", 1, 2, schema=schema, encoding="avro")
    with pytest.raises(HeaderMismatchError, match="time type"):
        Capture(log, "s", 1, 2, time="product:2")
    with pytest.raises(StreamNotFoundError, match="pass schema"):
        Capture(log, "other", 0, 1)
    assert [e.seq for e in log.reader("s", 1)] == []  # nothing was written by the refused opens
    with Capture(log, "s", 1, 2) as cap:  # header taken from the log
        cap.send(0, [{"x": 1, "s": None}])
    assert len(events(log, "s", 1)) == 2


def test_reopen_continues_with_frontier_and_sequence(log_uri, schema):
    log = open_log(log_uri)
    cap = Capture(log, "s", 0, 1, schema=schema)
    cap.send(0, [{"x": 1, "s": None}])
    cap.advance_to(3)
    cap.abort()  # leaves the part unfinished
    cap = Capture(open_log(log_uri), "s", 0, 1)
    assert list(cap.frontier) == [3] and cap.next_seq == 3
    with pytest.raises(ProgressError):
        cap.send(2, [{"x": 2, "s": None}])
    cap.send(3, [{"x": 2, "s": None}])
    cap.close()
    assert [e.seq for e in open_log(log_uri).reader("s", 0)] == [1, 2, 3, 4]
    with pytest.raises(ProgressError, match="already finished"):
        Capture(open_log(log_uri), "s", 0, 1)


def test_exception_in_with_block_does_not_finish_the_part(log_uri, schema):
    log = open_log(log_uri)
    with pytest.raises(RuntimeError):
        with Capture(log, "s", 0, 1, schema=schema) as cap:
            cap.send(0, [{"x": 1, "s": None}])
            cap.advance_to(1)
            raise RuntimeError("operator failed")
    evs = events(log, "s")
    assert evs[-1] == Progress(((0, -1), (1, 1)))  # frontier still [1]: time 1 is not claimed complete


def test_product_times_and_antichain_frontiers(log_uri, schema, encoding):
    log = open_log(log_uri)
    with Capture(log, "p", 0, 1, schema=schema, time="product:2", encoding=encoding) as cap:
        cap.send((0, 0), [{"x": 1, "s": None}])
        cap.advance_to(Antichain([(1, 0), (0, 1)]))
        cap.send((3, 0), [{"x": 2, "s": None}])
        cap.send((0, 5), [{"x": 3, "s": None}])
        with pytest.raises(ProgressError):
            cap.send((0, 0), [{"x": 4, "s": None}])
        cap.advance_to([(1, 1)])
        with pytest.raises(ProgressError):
            cap.send((0, 5), [{"x": 5, "s": None}])
    evs = events(log, "p")
    assert evs[1] == Progress((((0, 0), -1), ((0, 1), 1), ((1, 0), 1)))
    assert evs[2].time == (3, 0)
    assert evs[4] == Progress((((0, 1), -1), ((1, 0), -1), ((1, 1), 1)))


def test_one_writer_per_part(tmp_path, schema):
    from eventlog import PartLockedError

    log = open_log(tmp_path)
    with Capture(log, "s", 0, 2, schema=schema):
        with pytest.raises(PartLockedError):
            Capture(open_log(tmp_path), "s", 0, 2)
        Capture(open_log(tmp_path), "s", 1, 2).close()  # another part is free


def test_avro_roundtrip_of_nested_null_structs_beside_temporal_columns(log_uri):
    # found by the property test: a whole-batch cast to Avro's storage types broke list<struct<null>>
    schema = pa.schema([
        ("c", pa.list_(pa.struct([("a", pa.null())]))),
        pa.field("b", pa.struct([pa.field("a", pa.timestamp("s"), nullable=False)]), nullable=False),
    ])
    batch = pa.record_batch([pa.array([None, [{"a": None}] * 2, []], schema.field("c").type),
                             pa.array([{"a": 1}, {"a": 2}, {"a": 3}], schema.field("b").type)], schema=schema)
    log = open_log(log_uri)
    with Capture(log, "n", 0, 1, schema=schema, encoding="avro") as cap:
        cap.send(0, batch)
    assert events(log, "n")[0] == Messages(0, batch)


def test_expect_next_seq_refuses_a_log_that_lost_events(log_uri, schema):
    """An application that saved ``next_seq`` in its checkpoint learns that acknowledged events are gone,
    instead of silently starting a new history at seq 1 (issue: a broker restarted empty)."""
    from eventlog import LostDataError

    cap = Capture(log_uri, "s", 0, 1, schema=schema)
    cap.send(0, [{"x": 1, "s": "a"}])
    cap.advance_to(1)
    saved = cap.next_seq
    cap.abort()  # the application stops without finishing the part
    # the saved position holds: the writer continues
    cap = Capture(log_uri, "s", 0, 1, expect_next_seq=saved)
    assert cap.next_seq == saved
    cap.send(1, [{"x": 2, "s": "b"}])
    cap.advance_to(2)
    cap.abort()  # a crash: the part is not finished (abort only releases the writer)
    # a position beyond what the part holds: events are gone
    with pytest.raises(LostDataError) as e:
        Capture(log_uri, "s", 0, 1, expect_next_seq=saved + 10)
    assert (e.value.stream, e.value.part) == ("s", 0)
    # a stream that is gone is not recreated when the application expects to continue
    with pytest.raises(LostDataError):
        Capture(log_uri, "gone", 0, 1, schema=schema, expect_next_seq=3)
    from eventlog import StreamNotFoundError, open_log

    with pytest.raises(StreamNotFoundError):
        open_log(log_uri).header("gone")
    with pytest.raises(ValueError):
        Capture(log_uri, "s", 0, 1, expect_next_seq=0)
