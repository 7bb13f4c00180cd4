"""Schema evolution (issue 32 §3, FORMAT.md §12): a writer may reopen a stream with a compatible change of its
schema; every reader hands out the current schema (missing columns null, widened ones converted, dropped ones
left out); an incompatible change is refused, naming the column, before anything is written."""

from __future__ import annotations

import decimal
import itertools
import json
import os

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog import CorruptLogError, HeaderMismatchError, open_log
from eventlog.parts.capture import Capture
from eventlog.schema_history import SchemaEvolutionError, check_evolution, conform
from replay.replayer import Replayer
from replay.verify import verify

_names = itertools.count()

V1 = pa.schema([("id", pa.int32()), ("name", pa.string()), ("score", pa.float32())])


def _replay(log, stream: str = "s") -> dict[int, list[dict]]:
    with Replayer(log, stream) as r:
        return {t: sorted(table.to_pylist(), key=lambda row: json.dumps(row, sort_keys=True, default=str))
                for t, table in r.completed()}


def _write(log, schema: pa.Schema, part: int, peers: int, t: int, rows: list[dict], *, encoding=None,
           finish: bool = False) -> None:
    cap = Capture(log, "s", part, peers, schema=schema, encoding=encoding)
    cap.send(t, rows)
    if finish:
        cap.close()
    else:
        cap.advance_to(t + 1)
        cap.abort()  # the job stops; a later run reopens the part


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
@pytest.mark.parametrize("kind", ["file", "memory", pytest.param("kafka", marks=pytest.mark.kafka)])
def test_every_compatible_change_reads_as_the_current_schema(tmp_path, encoding, kind, request):
    log = open_log(str(tmp_path / "log") if kind == "file" else f"memory://evolve-{next(_names)}" if kind == "memory"
                   else request.getfixturevalue("kafka_uri"))
    _write(log, V1, 0, 1, 0, [{"id": 1, "name": "a", "score": 0.5}], encoding=encoding)
    v2 = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()),
                    ("tag", pa.string())])  # widen two, add a nullable column
    _write(log, v2, 0, 1, 1, [{"id": 2**40, "name": "b", "score": 1.25, "tag": "x"}])
    v3 = pa.schema([("id", pa.int64()), ("score", pa.float64()), ("tag", pa.string())])  # drop a column
    _write(log, v3, 0, 1, 2, [{"id": 3, "score": 2.5, "tag": None}], finish=True)
    assert log.header("s").schema.equals(v3)
    assert _replay(log) == {0: [{"id": 1, "score": 0.5, "tag": None}],
                            1: [{"id": 2**40, "score": 1.25, "tag": "x"}],
                            2: [{"id": 3, "score": 2.5, "tag": None}]}
    history = log.schema_history("s")
    assert [s.names for s in history.versions] == [V1.names, v2.names, v3.names]
    assert history.switches[0] == ((3, 1), (5, 2))  # part 0 wrote v2 from seq 3, v3 from seq 5
    assert verify(log).ok
    assert _replay(open_log(log.uri)) == _replay(log)  # a new reader of the log


def test_parts_switch_at_their_own_sequence_ids(tmp_path):
    """Part 0's job restarts with the new schema while part 1 still writes the old one: readers convert each
    event by the schema its part wrote it with."""
    log = open_log(str(tmp_path / "log"))
    old = Capture(log, "s", 1, 2, schema=V1)
    _write(log, V1, 0, 2, 0, [{"id": 1, "name": "a", "score": 1.0}])
    v2 = V1.append(pa.field("extra", pa.int64()))
    _write(log, v2, 0, 2, 1, [{"id": 2, "name": "b", "score": 2.0, "extra": 7}], finish=True)
    for t in range(2):
        old.send(t, [{"id": 10 + t, "name": "old", "score": 0.0}])
        old.advance_to(t + 1)
    old.close()
    got = _replay(log)
    assert got[1] == [{"id": 2, "name": "b", "score": 2.0, "extra": 7}, {"id": 11, "name": "old", "score": 0.0,
                                                                          "extra": None}]
    assert log.schema_history("s").switches == {0: ((3, 1),)}


@pytest.mark.parametrize("change,column,why", [
    (pa.schema([("id", pa.int16()), ("name", pa.string()), ("score", pa.float32())]), "id", "changes type"),
    (pa.schema([("id", pa.string()), ("name", pa.string()), ("score", pa.float32())]), "id", "changes type"),
    (pa.schema([("id", pa.int32()), ("name", pa.string()), ("score", pa.float32()),
                pa.field("must", pa.int64(), nullable=False)]), "must", "not nullable"),
    (pa.schema([pa.field("id", pa.int32(), nullable=False), ("name", pa.string()), ("score", pa.float32())]), "id",
     "non-nullable"),
    (pa.schema([("id", pa.int32()), ("name", pa.binary()), ("score", pa.float32())]), "name", "changes type"),
])
def test_an_incompatible_change_is_refused_naming_the_column_and_writes_nothing(tmp_path, change, column, why):
    log = open_log(str(tmp_path / "log"))
    _write(log, V1, 0, 1, 0, [{"id": 1, "name": "a", "score": 0.5}])
    before = log.part_stats("s", 0).next_seq
    with pytest.raises(SchemaEvolutionError, match=f"column '{column}' .*{why}") as e:
        Capture(log, "s", 0, 1, schema=change)
    assert e.value.stream == "s"
    assert log.part_stats("s", 0).next_seq == before and log.schema_history("s") is None
    assert not os.path.exists(tmp_path / "log" / "s" / "_schemas.json")


def test_decimal_and_integer_widenings_follow_avro_delta_and_iceberg():
    base = pa.schema([("d", pa.decimal128(10, 2)), ("u", pa.uint16()), ("i", pa.int32()), ("f", pa.float16())])
    wider = pa.schema([("d", pa.decimal128(14, 4)), ("u", pa.int32()), ("i", pa.float64()), ("f", pa.float64())])
    assert len(check_evolution(base, wider)) == 4
    with pytest.raises(SchemaEvolutionError, match="'d'"):
        check_evolution(base, pa.schema([("d", pa.decimal128(10, 4)), *list(base)[1:]]))  # loses integer digits
    with pytest.raises(SchemaEvolutionError, match="'u'"):
        check_evolution(base, pa.schema([base[0], ("u", pa.int16()), *list(base)[2:]]))  # uint16 > int16
    batch = pa.RecordBatch.from_pylist([{"d": decimal.Decimal("12345678.91"), "u": 65535, "i": -3, "f": 0.5}],
                                       schema=base)
    out = conform(batch, wider)
    assert out.to_pylist() == [{"d": decimal.Decimal("12345678.9100"), "u": 65535, "i": -3.0, "f": 0.5}]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sampled_from(["add", "drop", "widen", "nullable", "same"]), st.integers(0, 1)),
                      min_size=1, max_size=5))
def test_random_chains_of_compatible_changes_read_back_converted(tmp_path, steps):
    """Any chain of compatible changes over restarts of two parts: every record reads back as the current
    schema would hold it (what the writer wrote, null where the column did not exist, cast where widened)."""
    log = open_log(f"memory://evolve-chain-{next(_names)}")
    schema = pa.schema([("k", pa.int8()), pa.field("v", pa.float32(), nullable=False)])
    written: list[tuple[int, dict]] = []
    frontiers = [0, 0]
    added = itertools.count()
    for i, (op, part) in enumerate([("same", 0), ("same", 1), *steps]):
        if op == "add":
            schema = schema.append(pa.field(f"c{next(added)}", pa.int32()))
        elif op == "drop" and len(schema) > 1:
            schema = schema.remove(len(schema) - 1)
        elif op == "widen":
            schema = pa.schema([pa.field(f.name, {pa.int8(): pa.int16(), pa.int16(): pa.int32(), pa.int32(): pa.int64(),
                                                  pa.float32(): pa.float64()}.get(f.type, f.type), f.nullable)
                                for f in schema])
        elif op == "nullable":
            schema = pa.schema([f.with_nullable(True) for f in schema])
        t = frontiers[part]
        row = {f.name: (i if pa.types.is_integer(f.type) else float(i)) for f in schema}
        cap = Capture(log, "s", part, 2, schema=schema)
        cap.send(t, [row])
        cap.advance_to(t + 1)
        cap.abort()
        frontiers[part] = t + 1
        written.append((t, row))
    for part in range(2):
        Capture(log, "s", part, 2).close()
    current = log.header("s").schema
    expected: dict[int, list] = {}
    for t, row in written:
        expected.setdefault(t, []).append({f.name: row.get(f.name) for f in current})
    got = _replay(log)
    canon = {t: sorted(json.dumps(r, sort_keys=True) for r in rows) for t, rows in expected.items()}
    assert {t: sorted(json.dumps(r, sort_keys=True) for r in rows) for t, rows in got.items()} == canon


def test_a_reader_opened_before_a_change_keeps_its_schema_and_reads_on(tmp_path):
    """A follower opened before a writer changed the schema reads the new events as its own schema (a new
    column left out); a reader opened afterwards sees the new column."""
    uri = str(tmp_path / "log")
    log = open_log(uri)
    first = Capture(log, "s", 0, 1, schema=V1)
    first.send(0, [{"id": 1, "name": "a", "score": 0.5}])
    first.advance_to(1)
    with Replayer(uri, "s", follow=True, timeout=30) as r:
        it = r.completed()
        t, table = next(it)
        assert t == 0 and table.schema.names == V1.names
        first.abort()
        v2 = V1.append(pa.field("extra", pa.string()))
        with Capture(open_log(uri), "s", 0, 1, schema=v2) as again:
            again.send(1, [{"id": 2, "name": "b", "score": 1.5, "extra": "new"}])
        t, table = next(it)
        assert t == 1 and table.to_pylist() == [{"id": 2, "name": "b", "score": 1.5}]
    assert _replay(open_log(uri))[1] == [{"id": 2, "name": "b", "score": 1.5, "extra": "new"}]


def test_a_damaged_history_is_a_corrupt_log_error_naming_the_file(tmp_path):
    uri = str(tmp_path / "log")
    log = open_log(uri)
    _write(log, V1, 0, 1, 0, [{"id": 1, "name": "a", "score": 0.5}])
    _write(log, V1.append(pa.field("x", pa.int8())), 0, 1, 1, [{"id": 2, "name": "b", "score": 1.0, "x": 1}])
    path = tmp_path / "log" / "s" / "_schemas.json"
    path.write_bytes(path.read_bytes().replace(b'"version":"2.1"', b'"version":"2.2"'))
    with pytest.raises(CorruptLogError, match="schema history: checksum mismatch") as e:
        open_log(uri).header("s")
    assert "_schemas.json" in str(e.value)


def test_a_1x_stream_keeps_refusing_another_schema(tmp_path):
    log = open_log(str(tmp_path / "log"), format="1.2")
    _write(log, V1, 0, 1, 0, [{"id": 1, "name": "a", "score": 0.5}])
    with pytest.raises(HeaderMismatchError, match="schema"):
        Capture(log, "s", 0, 1, schema=V1.append(pa.field("x", pa.int8())))


def test_third_party_dataset_readers_read_every_version_given_the_current_schema(tmp_path):
    """pyarrow.dataset over the stream folder, told the current schema (``replay info --json`` has it), reads
    segments of every version: columns they lack are null, widened ones cast."""
    import pyarrow.dataset as ds

    uri = str(tmp_path / "log")
    log = open_log(uri)
    _write(log, V1, 0, 1, 0, [{"id": 1, "name": "a", "score": 0.5}])
    v2 = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float32()), ("extra", pa.string())])
    _write(log, v2, 0, 1, 1, [{"id": 2, "name": "b", "score": 1.5, "extra": "e"}], finish=True)
    current = log.header("s").schema
    table = ds.dataset(f"{uri}/s", format="arrow", partitioning="hive",
                       schema=current.append(pa.field("_time", pa.int64())).append(pa.field("_seq", pa.int64()))
                       ).to_table(columns=["id", "extra", "_time"])
    assert sorted(table.to_pylist(), key=lambda r: r["_time"]) == [{"id": 1, "extra": None, "_time": 0},
                                                                   {"id": 2, "extra": "e", "_time": 1}]


def test_replay_copy_writes_a_trimmed_and_evolved_stream_as_a_plain_one(tmp_path):
    """``replay copy`` upgrades (FORMAT.md §6): the copy of a stream that was trimmed and whose schema changed holds
    the retained times in the current schema, with no mark and no history — what any 2.0 reader reads."""
    from eventlog.antichain import Antichain
    from eventlog.parts.trim import trim
    from tests.support.cli import replay_cli

    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    log = open_log(src, segment_bytes=300)
    for t in range(6):
        _write(log, V1, 0, 1, t, [{"id": t, "name": f"n{t}", "score": 0.5}])
    v2 = pa.schema([("id", pa.int64()), ("score", pa.float64()), ("tag", pa.string())])
    for t in range(6, 9):
        _write(log, v2, 0, 1, t, [{"id": t, "score": 1.5, "tag": "x"}])
    trim(log, "s", since=Antichain([3]))
    replay_cli("copy", src, dst, "s")
    copy = open_log(dst)
    assert copy.retention("s") is None and copy.schema_history("s") is None
    assert copy.header("s").schema.equals(v2)
    assert _replay(copy) == _replay(open_log(src)) and sorted(_replay(copy)) == list(range(3, 9))


def test_the_writers_of_every_part_record_a_change_at_once(tmp_path):
    """The part writers of one job open at the same moment with the job's new schema: each waits its turn to
    record its switch (the tap appends its parts in threads); none fails, and every part reads back."""
    import threading

    log = open_log(str(tmp_path / "log"))
    for part in range(4):
        _write(log, V1, part, 4, 0, [{"id": part, "name": "a", "score": 0.5}])
    v2 = V1.append(pa.field("extra", pa.int64()))
    errors: list[BaseException] = []

    def reopen(part: int) -> None:
        try:
            _write(log, v2, part, 4, 1, [{"id": 10 + part, "name": "b", "score": 1.0, "extra": part}], finish=True)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=reopen, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert set(log.schema_history("s").switches) == {0, 1, 2, 3}
    assert [r["extra"] for r in _replay(log)[1]] == [0, 1, 2, 3]
