"""``replay import``: files of each format into file and memory logs, in-process with click's CliRunner."""

from __future__ import annotations

import collections
import json
import os

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from capture import Capture
from eventlog import Messages, open_log
from replay import Replayer
from replay.cli import main
from replay.keyhash import worker_of

SCHEMA = pa.schema([("n", pa.int64()), ("word", pa.string())])
ROWS = [{"t": t, "n": 10 * t + i, "word": f"w{t}"} for t in (3, 1, 2, 1) for i in range(2)]


@pytest.fixture(params=["file", "memory"])
def uri(request, tmp_path) -> str:
    if request.param == "memory":
        return f"memory://import-{os.getpid()}-{tmp_path.name}"
    return str(tmp_path / "log")


def replay_cli(*args: object, expect: int | None = 0, input: "bytes | None" = None) -> Result:
    result = CliRunner().invoke(main, [str(a) for a in args], input=input)
    if expect is not None:
        assert result.exit_code == expect, (
            f"exit {result.exit_code}, expected {expect}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
            + (f"\nexception: {result.exception!r}" if result.exception else ""))
    return result


def records_by_time(uri: str, stream: str) -> dict:
    """time -> multiset of records (as sorted JSON), over every part; also checks every part is finished."""
    log = open_log(uri)
    header = log.header(stream)
    out: dict = collections.defaultdict(collections.Counter)
    for p in range(header.peers):
        with Replayer(log, stream, p, header.peers) as r:
            for ev in r:
                if isinstance(ev, Messages):
                    for row in ev.records.to_pylist():
                        out[ev.time][json.dumps(row, sort_keys=True)] += 1
    return dict(out)


def expected(rows: list[dict], drop: str = "t") -> dict:
    out: dict = collections.defaultdict(collections.Counter)
    for r in rows:
        out[r[drop]][json.dumps({k: v for k, v in r.items() if k != drop}, sort_keys=True)] += 1
    return dict(out)


def write_input(path, fmt: str, rows: list[dict]) -> None:
    table = pa.Table.from_pylist(rows)
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "parquet":
        pq.write_table(table, path)
    elif fmt == "arrow":
        with pa.ipc.new_file(path, table.schema) as w:
            w.write_table(table)
    elif fmt == "arrows":
        with pa.ipc.new_stream(path, table.schema) as w:
            w.write_table(table)
    elif fmt == "avro":
        schema = {"type": "record", "name": "r", "fields": [
            {"name": "t", "type": "long"}, {"name": "n", "type": "long"}, {"name": "word", "type": "string"}]}
        with open(path, "wb") as f:
            fastavro.writer(f, schema, rows)


@pytest.mark.parametrize("suffix", ["jsonl", "ndjson", "parquet", "arrow", "arrows", "feather", "avro"])
def test_each_format_imports_every_row_at_its_time(tmp_path, uri, suffix):
    src = tmp_path / f"in.{suffix}"
    write_input(src, {"ndjson": "jsonl", "feather": "arrow"}.get(suffix, suffix), ROWS)
    r = replay_cli("import", src, uri, "s", "--time", "t")
    assert f"imported {len(ROWS)} rows in 3 events into" in r.stderr and "(1 part)" in r.stderr
    assert records_by_time(uri, "s") == expected(ROWS)
    header = open_log(uri).header("s")
    assert header.schema.names == ["n", "word"] and str(header.time_type) == "int64"


def test_stdin_json_lines_and_format_option(tmp_path, uri):
    data = "".join(json.dumps(r) + "\n" for r in ROWS).encode()
    replay_cli("import", "-", uri, "s", "--time", "t", input=data)
    assert records_by_time(uri, "s") == expected(ROWS)
    other = tmp_path / "rows.txt"
    other.write_bytes(data)
    replay_cli("import", other, uri, "s2", "--time", "t", expect=2)  # no format from .txt
    replay_cli("import", other, uri, "s2", "--time", "t", "--format", "jsonl")
    assert records_by_time(uri, "s2") == expected(ROWS)


def test_frontier_advances_per_time_and_part_finishes_unless_open(tmp_path, uri):
    src = tmp_path / "in.parquet"
    write_input(src, "parquet", ROWS)
    replay_cli("import", src, uri, "s", "--time", "t")
    log = open_log(uri)
    updates = []
    with log.reader("s", 0) as reader:
        for entry in reader:
            if not isinstance(entry.event, Messages):
                updates.append(sorted(entry.event.updates))
    assert updates == [[(0, -1), (2, 1)], [(2, -1), (3, 1)], [(3, -1)]]
    r = replay_cli("import", src, uri, "o", "--time", "t", "--open")
    assert "left open at [3]" in r.stderr
    with Capture(log, "o", 0, 1) as cap:  # appendable at the last time
        assert list(cap.frontier) == [3]


def test_keep_time_drop_and_time_const(tmp_path, uri):
    src = tmp_path / "in.jsonl"
    write_input(src, "jsonl", ROWS)
    replay_cli("import", src, uri, "kept", "--time", "t", "--keep-time", "--drop", "word")
    got = records_by_time(uri, "kept")
    assert open_log(uri).header("kept").schema.names == ["t", "n"]
    assert got == expected([{"t": r["t"], "n": r["n"], "time": r["t"]} for r in ROWS], drop="time")
    replay_cli("import", src, uri, "const", "--time-const", 7)
    assert list(records_by_time(uri, "const")) == [7]
    assert sum(records_by_time(uri, "const")[7].values()) == len(ROWS)
    replay_cli("import", src, uri, "both", "--time", "t", "--time-const", 7, expect=2)
    replay_cli("import", src, uri, "neither", expect=2)


def test_product_times_from_columns_and_from_a_list_column(tmp_path, uri):
    rows = [{"a": a, "b": b, "v": 10 * a + b} for a, b in [(1, 0), (0, 2), (0, 1), (1, 0), (2, 2)]]
    src = tmp_path / "in.parquet"
    write_input(src, "parquet", rows)
    replay_cli("import", src, uri, "p", "--time", "a,b")
    assert str(open_log(uri).header("p").time_type) == "product:2"
    got = records_by_time(uri, "p")
    assert {t: sum(c.values()) for t, c in got.items()} == {(0, 1): 1, (0, 2): 1, (1, 0): 2, (2, 2): 1}
    replay_cli("verify", uri)
    # export writes product times as a list column: importing it back gives the same stream
    out = tmp_path / "p.arrow"
    replay_cli("export", uri, "p", out)
    replay_cli("import", out, uri, "p2", "--time", "_time")
    replay_cli("diff", uri, uri, "p", "--stream-b", "p2")


def test_round_trip_export_then_import(tmp_path, uri):
    log = open_log(uri)
    for w in range(3):
        with Capture(log, "numbers", w, 3, schema=SCHEMA) as cap:
            for t in range(4):
                cap.send(t, [{"n": 100 * t + 10 * w + i, "word": f"w{t}"} for i in range(2)])
                cap.advance_to(t + 1)
    for fmt in ("parquet", "arrow", "avro", "jsonl"):
        path = tmp_path / f"numbers.{fmt}"
        replay_cli("export", uri, "numbers", path)
        r = replay_cli("import", path, uri, f"back-{fmt}", "--time", "_time", "--workers", 2)
        assert "dropping the columns _part and _seq" in r.stderr
        assert records_by_time(uri, f"back-{fmt}") == records_by_time(uri, "numbers")
        replay_cli("diff", uri, uri, "numbers", "--stream-b", f"back-{fmt}")


def test_key_assigns_rows_by_the_stable_key_hash(tmp_path, uri):
    rows = [{"t": i % 3, "user": f"u{i % 7}", "v": i} for i in range(50)]
    src = tmp_path / "in.parquet"
    write_input(src, "parquet", rows)
    r = replay_cli("import", src, uri, "k", "--time", "t", "--workers", 3, "--key", "user")
    assert "(3 parts)" in r.stderr
    log = open_log(uri)
    for p in range(3):
        with log.reader("k", p) as reader:
            for entry in reader:
                if isinstance(entry.event, Messages):
                    batch = entry.event.records
                    assert set(worker_of(batch, ["user"], 3).tolist()) == {p}
    assert records_by_time(uri, "k") == expected(rows)


def test_round_robin_by_batch_without_a_key(tmp_path, uri):
    rows = [{"t": i // 10, "v": i} for i in range(40)]
    src = tmp_path / "in.parquet"
    write_input(src, "parquet", rows)
    replay_cli("import", src, uri, "rr", "--time", "t", "--workers", 2, "--batch-size", 10)
    log = open_log(uri)
    per_part = [sorted(v for e in log.reader("rr", p) if isinstance(e.event, Messages)
                       for v in e.event.records.column("v").to_pylist()) for p in range(2)]
    assert per_part == [list(range(0, 10)) + list(range(20, 30)), list(range(10, 20)) + list(range(30, 40))]
    replay_cli("verify", uri)


def test_events_are_bounded_by_batch_size_and_large_inputs_stream(tmp_path, uri):
    rows = [{"t": i // 25, "v": i} for i in range(100)]
    src = tmp_path / "in.parquet"
    write_input(src, "parquet", rows)
    r = replay_cli("import", src, uri, "b", "--time", "t", "--batch-size", 10, "--sort-rows", 30)
    assert "streamed in chunks" in r.stderr
    log = open_log(uri)
    sizes = [e.event.records.num_rows for e in log.reader("b", 0) if isinstance(e.event, Messages)]
    assert max(sizes) <= 10 and sum(sizes) == 100
    assert records_by_time(uri, "b") == expected(rows)
    replay_cli("verify", uri)


def test_unsorted_small_input_is_sorted_large_one_must_not_go_back(tmp_path, uri):
    rows = [{"t": t, "v": i} for i, t in enumerate([5, 1, 4, 1, 3, 0, 2, 0])]
    src = tmp_path / "in.jsonl"
    write_input(src, "jsonl", rows)
    replay_cli("import", src, uri, "small", "--time", "t")
    assert records_by_time(uri, "small") == expected(rows)
    r = replay_cli("import", src, uri, "big", "--time", "t", "--batch-size", 2, "--sort-rows", 2, expect=3)
    assert "time 1 is behind the part's frontier [5]" in r.stderr and "stream 'big', part 0" in r.stderr
    # the first chunk (times 5 and 1 sorted) was written; nothing of the failing chunk
    log = open_log(uri)
    written = [(e.event.time, e.event.records.num_rows) for e in log.reader("big", 0) if isinstance(e.event, Messages)]
    assert written == [(1, 1), (5, 1)]
    cap = Capture(log, "big", 0, 1, continues=True)
    assert list(cap.frontier) == [5]  # left unfinished
    cap.abort()


def test_appending_to_an_existing_stream(tmp_path, uri):
    first = tmp_path / "first.jsonl"
    write_input(first, "jsonl", [r for r in ROWS if r["t"] <= 2])
    replay_cli("import", first, uri, "s", "--time", "t", "--open")
    later = tmp_path / "later.parquet"
    write_input(later, "parquet", [r for r in ROWS if r["t"] >= 2])
    replay_cli("import", later, uri, "s", "--time", "t")
    assert records_by_time(uri, "s") == expected([r for r in ROWS if r["t"] <= 2] + [r for r in ROWS if r["t"] >= 2])
    # finished now: another append is refused
    r = replay_cli("import", later, uri, "s", "--time", "t", expect=3)
    assert "already finished" in r.stderr


def test_appending_behind_the_frontier_writes_nothing(tmp_path, uri):
    src = tmp_path / "in.jsonl"
    write_input(src, "jsonl", [{"t": 5, "n": 1, "word": "x"}])
    replay_cli("import", src, uri, "s", "--time", "t", "--open")
    before = records_by_time(uri, "s")
    write_input(src, "jsonl", [{"t": 6, "n": 2, "word": "y"}, {"t": 4, "n": 3, "word": "z"}])
    r = replay_cli("import", src, uri, "s", "--time", "t", expect=3)
    assert "time 4 is behind the part's frontier [5]" in r.stderr and "stream 's', part 0" in r.stderr
    assert records_by_time(uri, "s") == before


def test_appending_needs_the_same_schema(tmp_path, uri):
    log = open_log(uri)
    Capture(log, "s", 0, 1, schema=SCHEMA).abort()
    src = tmp_path / "in.parquet"
    write_input(src, "parquet", [{"t": 1, "n": 1, "other": "x"}])
    r = replay_cli("import", src, uri, "s", "--time", "t", expect=3)
    assert "does not match the stream's schema" in r.stderr and "lacks 'word'" in r.stderr
    write_input(src, "parquet", [{"t": 1, "n": "not a number", "word": "x"}])
    r = replay_cli("import", src, uri, "s", "--time", "t", expect=3)
    assert "column 'n' does not convert to int64" in r.stderr
    write_input(src, "parquet", [{"t": 1, "n": 1, "word": "x"}, {"t": 2, "n": 2, "word": "y"}])
    r = replay_cli("import", src, uri, "s", "--time", "t", "--workers", 2, expect=2)
    assert "exists with 1 parts" in r.stderr
    write_input(src, "parquet", [{"a": 1, "b": 1, "n": 1, "word": "x"}])
    r = replay_cli("import", src, uri, "s", "--time", "a,b", expect=3)
    assert "the input's times are product:2, the stream's int64" in r.stderr
    assert records_by_time(uri, "s") == {}  # nothing written by the refused imports
    write_input(src, "parquet", [{"t": 1, "n": 1, "word": "x"}])
    replay_cli("import", src, uri, "s", "--time", "t")  # int32 vs int64, field order: cast safely
    assert records_by_time(uri, "s") == {1: collections.Counter({'{"n": 1, "word": "x"}': 1})}


def test_bad_time_columns(tmp_path, uri):
    src = tmp_path / "in.jsonl"
    write_input(src, "jsonl", ROWS)
    r = replay_cli("import", src, uri, "s", "--time", "missing", expect=2)
    assert "no column 'missing'" in r.stderr
    r = replay_cli("import", src, uri, "s", "--time", "word", expect=2)
    assert "'word' is string" in r.stderr
    src.write_text('{"t": -1, "n": 1}\n')
    r = replay_cli("import", src, uri, "s", "--time", "t", expect=3)
    assert "outside" in r.stderr
    src.write_text('{"t": 1, "n": 1}\n{"t": null, "n": 2}\n')
    r = replay_cli("import", src, uri, "s2", "--time", "t", expect=3)
    assert "nulls" in r.stderr
    src.write_text('{"t": 1, "n": 1}\nnot json\n')
    r = replay_cli("import", src, uri, "s3", "--time", "t", expect=3)
    assert "cannot read the input as jsonl" in r.stderr
    replay_cli("import", tmp_path / "nope.jsonl", uri, "s4", "--time", "t", expect=2)


def test_schema_from_a_file_types_json_values(tmp_path, uri):
    typed = tmp_path / "schema.parquet"
    pq.write_table(pa.table({"t": pa.array([0], pa.int64()), "n": pa.array([0], pa.int32()),
                             "when": pa.array([0], pa.timestamp("ms"))}), typed)
    src = tmp_path / "in.jsonl"
    src.write_text('{"t": 1, "n": 5, "when": "2024-05-01T12:00:00.000"}\n')
    replay_cli("import", src, uri, "s", "--time", "t", "--schema-from", typed)
    schema = open_log(uri).header("s").schema
    assert schema.field("n").type == pa.int32() and schema.field("when").type == pa.timestamp("ms")


def test_progress_bar_on_a_terminal_only(tmp_path, uri, monkeypatch):
    import rich.console

    src = tmp_path / "in.parquet"
    write_input(src, "parquet", ROWS)
    monkeypatch.setattr(rich.console.Console, "is_terminal", property(lambda self: True))
    r = replay_cli("import", src, uri, "s", "--time", "t")
    assert "importing into 's'" in r.stderr


# these tests poke at the files of the 1.x layout (format 2.0 files: test_file_format2.py)
pytestmark = pytest.mark.usefixtures("file_format_1")


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_evolve_adds_the_inputs_new_columns_and_fills_missing_nullable_ones(tmp_path, uri, fmt, monkeypatch):
    """A later day's file with a new column: refused without --evolve (the error says --evolve), nothing written;
    with it the stream's schema gains the column (a new version), earlier records read it as null, and a later
    input lacking a nullable column writes nulls there. Every reader sees the current schema."""
    monkeypatch.setenv("EVENTLOG_FILE_FORMAT", "2.0")   # schema evolution is format 2's (this module writes 1.2)
    src = tmp_path / f"in.{fmt}"
    write_input(src, fmt, [{"t": 1, "n": 1, "word": "a"}])
    replay_cli("import", src, uri, "s", "--time", "t", "--open")
    write_input(src, fmt, [{"t": 2, "n": 2, "word": "b", "score": 0.5}])
    r = replay_cli("import", src, uri, "s", "--time", "t", "--open", expect=3)
    assert "'score' not in the stream" in r.stderr and "--evolve" in r.stderr
    assert open_log(uri).header("s").schema.names == ["n", "word"]
    r = replay_cli("import", src, uri, "s", "--time", "t", "--open", "--evolve")
    assert "schema of stream 's' changes" in r.stderr and "score" in r.stderr
    assert open_log(uri).header("s").schema.names == ["n", "word", "score"]
    assert open_log(uri).header("s").schema.field("score").nullable
    write_input(src, fmt, [{"t": 3, "n": 3, "score": 1.5}])                    # no 'word' this time
    if fmt == "parquet":
        assert "the input lacks 'word'" in replay_cli("import", src, uri, "s", "--time", "t", "--open",
                                                      expect=3).stderr
    replay_cli("import", src, uri, "s", "--time", "t", "--evolve")
    assert records_by_time(uri, "s") == {
        1: collections.Counter({'{"n": 1, "score": null, "word": "a"}': 1}),
        2: collections.Counter({'{"n": 2, "score": 0.5, "word": "b"}': 1}),
        3: collections.Counter({'{"n": 3, "score": 1.5, "word": null}': 1})}
    assert len(open_log(uri).schema_history("s").versions) == 2


def test_evolve_refuses_an_input_that_shares_no_column_with_the_stream(tmp_path, uri, monkeypatch):
    monkeypatch.setenv("EVENTLOG_FILE_FORMAT", "2.0")
    log = open_log(uri)
    Capture(log, "s", 0, 1, schema=SCHEMA).abort()
    src = tmp_path / "in.parquet"
    write_input(src, "parquet", [{"t": 1, "price": 1.0}])
    r = replay_cli("import", src, uri, "s", "--time", "t", "--evolve", expect=3)
    assert "shares no column with the stream" in r.stderr
    assert open_log(uri).header("s").schema == SCHEMA and records_by_time(uri, "s") == {}


def test_evolve_on_a_format_1_stream_says_it_cannot_change_and_how_to_upgrade(tmp_path):
    """This module's file logs write format 1.2 streams, whose header holds the one schema they can have."""
    uri = str(tmp_path / "log")
    src = tmp_path / "in.parquet"
    write_input(src, "parquet", [{"t": 1, "n": 1, "word": "a"}])
    replay_cli("import", src, uri, "s", "--time", "t", "--open")
    assert open_log(uri).header("s").version[0] == 1
    write_input(src, "parquet", [{"t": 2, "n": 2, "word": "b", "score": 0.5}])
    r = replay_cli("import", src, uri, "s", "--time", "t", "--evolve", expect=3)
    assert "format 1.2 stream cannot change its schema" in r.stderr and "replay copy" in r.stderr
    assert open_log(uri).header("s").schema.names == ["n", "word"] and open_log(uri).part_stats("s", 0).events == 2
