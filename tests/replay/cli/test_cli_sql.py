"""``replay sql``: DuckDB over a log's streams (each a view named after it, over ``replay.dataset``), output
as ``replay cat`` writes it, DuckDB's errors on one line with exit 1 (3 for I/O), and the missing extra."""

from __future__ import annotations

import csv
import importlib
import io
import os
import sys

import pyarrow as pa
import pytest

from capture import Capture
from eventlog import open_log
from tests.support.cli import capture_numbers, jsonl, replay_cli

sql_module = importlib.import_module("replay.cli.sql")  # the CLI loads its commands lazily


@pytest.fixture(params=["file", "memory"])
def uri(request, tmp_path) -> str:
    """A fresh log of each kind, with the stream ``numbers``: 3 parts, times 0..4, 2 records a part and time
    (n = 100*t + 10*w + i, word = f"w{t}")."""
    log = f"memory://sql-{os.getpid()}-{tmp_path.name}" if request.param == "memory" else str(tmp_path / "log")
    capture_numbers(log)
    return log


def test_a_query_over_a_stream_prints_json_lines(uri):
    out = jsonl(replay_cli("sql", uri, "select _time, count(*) as n, min(word) as w from numbers group by 1 order by 1"))
    assert out == [{"_time": t, "n": 6, "w": f"w{t}"} for t in range(5)]
    rows = jsonl(replay_cli("sql", uri, "select * from numbers where _part = 2 and _time = 1 order by n"))
    assert rows == [{"n": 120 + i, "word": "w1", "_time": 1, "_part": 2, "_seq": 3} for i in range(2)]


def test_table_and_csv_formats(uri):
    query = "select _time, sum(n) as total, 'x' as updates from numbers group by 1 order by 1"
    table = replay_cli("sql", uri, query, "--format", "table").stdout.splitlines()
    assert table[0].split() == ["_time", "total", "updates"] and table[1].split() == ["0", "63", "x"]
    rows = list(csv.reader(io.StringIO(replay_cli("sql", uri, query, "--format", "csv").stdout)))
    assert rows[0] == ["_time", "total", "updates"] and rows[5] == ["4", "2463", "x"]
    assert jsonl(replay_cli("sql", uri, "select 1 as a, 2 as a")) == [{"a": 1, "a_2": 2}]


def test_only_the_streams_the_query_names_are_read_and_odd_names_are_quoted(uri, monkeypatch):
    capture_numbers(uri, stream="jobA.counts", peers=1, times=2)
    capture_numbers(uri, stream="to-do", peers=1, times=2)
    read = []
    real = sql_module.read_dataset
    monkeypatch.setattr(sql_module, "read_dataset", lambda log, name, **kw: read.append(name) or real(log, name, **kw))
    out = jsonl(replay_cli("sql", uri, 'select count(*) as n from "jobA.counts" a join "jobA.counts" b using (_time)'))
    assert out == [{"n": 2 * 2 * 2}] and read == ["jobA.counts"]  # a self-join scans the view twice
    read.clear()
    assert jsonl(replay_cli("sql", uri, 'with x as (select * from "TO-DO") select count(*) as n from x')) == [{"n": 4}]
    assert read == ["to-do"]  # DuckDB's names ignore case
    read.clear()
    assert jsonl(replay_cli("sql", uri, "select 42 as answer")) == [{"answer": 42}] and read == []


def test_statements_other_than_select_see_the_streams_they_name(uri, tmp_path):
    out = tmp_path / "out.csv"
    replay_cli("sql", uri, f"copy (select n from numbers where _time = 0 order by n) to '{out}' (header false)")
    assert out.read_text().split() == ["0", "1", "10", "11", "20", "21"]


def test_since_until_and_uncommitted(uri):
    out = jsonl(replay_cli("sql", uri, "select distinct _time from numbers order by 1", "--since", 1, "--until", 3))
    assert out == [{"_time": 1}, {"_time": 2}]
    cap = Capture(open_log(uri), "open", 0, 1, schema=pa.schema([("n", pa.int64())]))
    cap.send(0, [{"n": 1}])
    cap.advance_to(1)
    cap.send(1, [{"n": 2}])  # time 1 not complete: not committed
    cap.abort()
    assert jsonl(replay_cli("sql", uri, "select n from open order by n")) == [{"n": 1}]
    assert jsonl(replay_cli("sql", uri, "select n from open order by n", "--uncommitted")) == [{"n": 1}]
    everything = replay_cli("sql", uri, "select n from open order by n", "--uncommitted", "--incomplete")
    assert jsonl(everything) == [{"n": 1}, {"n": 2}]
    replay_cli("sql", uri, "select * from open", "--since", "1,2", expect=2)  # not an int64 time


def test_only_complete_times_by_default_as_export_gives_and_stderr_says_what_was_left_out(tmp_path):
    """A stream with a stalled part: the other consumers give only the times every part has passed; so does sql,
    saying on stderr what it left out; --incomplete gives every record (issue 33 §8)."""
    uri = str(tmp_path / "log")
    schema = pa.schema([("n", pa.int64())])
    log = open_log(uri)
    with Capture(log, "s", 0, 2, schema=schema) as fast:
        for t in range(5):
            fast.send(t, [{"n": t}])
            fast.advance_to(t + 1)
    slow = Capture(log, "s", 1, 2, schema=schema)
    for t in range(2):
        slow.send(t, [{"n": 100 + t}])
        slow.advance_to(t + 1)
    slow.send(2, [{"n": 102}])
    slow.advance_to(3)  # part 1 stalls at 3: times 3 and 4 of part 0 are not complete
    r = replay_cli("sql", uri, "select count(*) as n, max(_time) as t from s")
    assert jsonl(r) == [{"n": 6, "t": 2}]  # times 0, 1, 2 of both parts; 3 and 4 of part 0 wait for part 1
    assert "left out 2 records at 2 time(s) not complete yet (3, 4; stream frontier [3])" in r.stderr
    assert "--incomplete" in r.stderr
    assert jsonl(replay_cli("sql", uri, "select count(*) as n from s", "--incomplete")) == [{"n": 8}]
    out = tmp_path / "s.jsonl"
    replay_cli("export", uri, "s", out)
    assert len(out.read_text().splitlines()) == 6  # what export gives
    slow.close()
    done = replay_cli("sql", uri, "select count(*) as n from s")
    assert jsonl(done) == [{"n": 8}] and "left out" not in done.stderr


def test_product_times_and_binary_values(tmp_path):
    uri = str(tmp_path / "log")
    with Capture(open_log(uri), "grid", 0, 1, schema=pa.schema([("b", pa.binary())]), time="product:2") as cap:
        cap.send((1, 2), [{"b": b"\x00\xff"}])
    out = jsonl(replay_cli("sql", uri, "select _time, b from grid", "--bytes", "hex"))
    assert out == [{"_time": [1, 2], "b": "00ff"}]


def test_duckdb_errors_are_one_line(uri):
    r = replay_cli("sql", uri, "selec 1", expect=1)
    assert r.stderr.startswith('replay: error: SQL: Parser Error: syntax error at or near "selec"')
    assert len(r.stderr.splitlines()) == 1
    r = replay_cli("sql", uri, "select * from nope", expect=1)
    assert "Table with name nope does not exist" in r.stderr and "(streams in " in r.stderr
    assert r.stderr.rstrip().endswith(": numbers)") and len(r.stderr.splitlines()) == 1
    r = replay_cli("sql", uri, "select case when _time > 3 then cast(word as int) else 0 end from numbers", expect=1)
    assert "Conversion Error" in r.stderr and len(r.stderr.splitlines()) == 1  # raised while the rows are read
    r = replay_cli("sql", uri, "select * from read_parquet('/no/such/file.parquet')", expect=3)
    assert r.stderr.startswith("replay: error: SQL: IO Error")
    replay_cli("sql", uri, "create table t as select 1")  # no result: nothing printed


def test_no_such_log_is_a_log_error(tmp_path):
    replay_cli("sql", tmp_path / "missing", "select 1", expect=3)


def test_without_duckdb_the_error_names_the_extra(uri, monkeypatch):
    monkeypatch.setitem(sys.modules, "duckdb", None)  # import duckdb raises ImportError
    r = replay_cli("sql", uri, "select 1", expect=3)  # as every feature whose extra is missing
    assert r.stderr.strip() == ("replay: error: replay sql needs duckdb, which is not installed: "
                                "pip install 'eventlog[sql]' (or 'eventlog[all]')")
