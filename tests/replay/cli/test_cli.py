"""The replay CLI in-process (click's CliRunner): every command on logs built with Capture.

Log-independent tests take the ``cli_uri`` fixture (file and memory logs; Kafka can join, see
``tests.support.cli.LOG_KINDS``);
tests that touch files (plots, exports, corruption) use ``tmp_path``.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import io
import json
import os
import struct
import threading
import time

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from capture import Capture
from eventlog import CorruptLogError, Messages, open_log
from replay import Replayer
from tests.support.cli import SCHEMA, capture_numbers, jsonl, replay_cli


def sibling(uri: str, suffix: str) -> str:
    """Another log next to ``uri`` (a path, a memory name or a Kafka prefix with ``suffix`` appended)."""
    return uri.rstrip("/") + suffix


def stored_entries(uri: str, stream: str) -> list[tuple[int, object]]:
    """(part, entry) of every event, read straight from the log."""
    log = open_log(uri)
    return [(p, e) for p in range(log.header(stream).peers) for e in log.reader(stream, p)]


# -- the group --------------------------------------------------------------------------------------------------


def test_help_lists_commands_exit_codes_and_examples():
    out = replay_cli("--help").stdout
    commands = ["ls", "info", "cat", "tail", "stats", "frontier", "diff", "verify", "copy", "export", "run"]
    for name in commands:
        assert f"  {name} " in out
    assert "Exit codes" in out and "130" in out
    for name in commands:
        assert "Example" in replay_cli(name, "--help").stdout, name


def test_errors_are_one_line_with_exit_3_and_debug_shows_the_exception(tmp_path):
    r = replay_cli("cat", tmp_path / "nowhere", "numbers", expect=3)
    assert r.stderr.count("\n") == 1 and "no log at" in r.stderr and "Traceback" not in r.stderr
    capture_numbers(str(tmp_path))
    r = replay_cli("cat", tmp_path, "nope", expect=3)
    assert "numbers" in r.stderr and "nope" in r.stderr  # names the stream asked for and those there are
    seg = next(p for p in (tmp_path / "numbers" / "part-00000").iterdir() if p.suffix == ".arrows")
    raw = bytearray(seg.read_bytes())
    raw[-40] ^= 0xFF  # inside the last event body (the end-of-stream marker is the last 8 bytes)
    seg.write_bytes(bytes(raw))
    r = replay_cli("cat", tmp_path, "numbers", expect=3)
    assert r.stderr.strip().count("\n") == 0 and "checksum" in r.stderr and str(seg) in r.stderr
    r = replay_cli("--debug", "cat", tmp_path, "numbers", expect=None)
    assert r.exit_code != 0 and isinstance(r.exception, CorruptLogError)


def test_usage_errors_exit_2(cli_uri):
    capture_numbers(cli_uri)
    for args in (["--part", "7"], ["--since", "x"], ["--since", "1,2"], ["--offset", "0"], ["--kind", "nope"]):
        r = replay_cli("cat", cli_uri, "numbers", *args, expect=2)
        assert "Usage" in r.stderr or "Error" in r.stderr


# -- ls / info --------------------------------------------------------------------------------------------------


def test_ls_lists_streams_with_sizes_times_and_frontiers(cli_uri):
    capture_numbers(cli_uri, peers=3, times=4)
    capture_numbers(cli_uri, stream="open", peers=2, times=3, finish=False)
    log = open_log(cli_uri)
    listing = {row["stream"]: row for row in json.loads(replay_cli("ls", cli_uri, "--json").stdout)}
    assert set(listing) == {"numbers", "open"}
    for name, row in listing.items():
        peers = log.header(name).peers
        assert row["events"] == sum(log.part_stats(name, p).events for p in range(peers))
        sizes = [log.part_stats(name, p).bytes for p in range(peers)]
        assert row["bytes"] == (None if None in sizes else sum(sizes))  # Kafka cannot tell sizes cheaply
    assert listing["numbers"]["records"] == 3 * 4 * 2 and listing["numbers"]["times"] == 4
    assert (listing["numbers"]["first_time"], listing["numbers"]["last_time"]) == (0, 3)
    assert listing["numbers"]["frontier"] == [] and listing["open"]["frontier"] == [3]
    assert listing["open"]["open_parts"] == 2
    table = replay_cli("ls", cli_uri).stdout
    assert "numbers" in table and "open" in table and "0..3 (4)" in table
    quick = json.loads(replay_cli("ls", cli_uri, "--quick", "--json").stdout)
    assert [r["stream"] for r in quick] == ["numbers", "open"] and "frontier" not in quick[0]


def test_info_shows_header_schema_and_parts(cli_uri):
    capture_numbers(cli_uri, peers=2, times=3)
    log = open_log(cli_uri)
    doc = json.loads(replay_cli("info", cli_uri, "numbers", "--json").stdout)
    assert (doc["stream"], doc["peers"], doc["time"], doc["encoding"], doc["version"]) == (
        "numbers", 2, "int64", "arrow", "1.2")
    assert [f["name"] for f in doc["fields"]] == SCHEMA.names
    for p in doc["parts"]:
        st = log.part_stats("numbers", p["part"])
        assert (p["first_seq"], p["last_seq"], p["events"]) == (st.first_seq, st.next_seq - 1, st.events)
        assert p["frontier"] == [] and p["finished"]
    table = replay_cli("info", cli_uri, "numbers").stdout
    assert "word" in table and "string" in table and "first seq" in table
    assert doc["compression"] == "zstd" and "arrow, zstd compression" in table


@pytest.mark.parametrize("encoding,compression", [("arrow", "lz4"), ("arrow", "none"), ("avro", "zstandard")])
def test_info_shows_the_streams_compression(tmp_path, encoding, compression, monkeypatch):
    monkeypatch.setenv("EVENTLOG_FILE_FORMAT", "2.0")   # a compression choice is format 2's (this module writes 1.2)
    uri = str(tmp_path / "log")
    with Capture(open_log(uri), "s", 0, 1, schema=SCHEMA, encoding=encoding, compression=compression) as cap:
        cap.send(0, [{"n": 1, "word": "a"}])
    assert json.loads(replay_cli("info", uri, "s", "--json").stdout)["compression"] == compression
    assert f"{encoding}, {compression} compression" in replay_cli("info", uri, "s").stdout


# -- cat / tail -------------------------------------------------------------------------------------------------


def test_cat_jsonl_has_every_record_and_progress_event(cli_uri):
    capture_numbers(cli_uri, peers=3, times=4, rows=2)
    rows = jsonl(replay_cli("cat", cli_uri, "numbers"))
    messages = [r for r in rows if r["kind"] == "messages"]
    progress = [r for r in rows if r["kind"] == "progress"]
    stored = stored_entries(cli_uri, "numbers")
    expected = sorted((p, e.seq, e.event.time, rec["n"]) for p, e in stored if isinstance(e.event, Messages)
                      for rec in e.event.records.to_pylist())
    assert sorted((r["part"], r["seq"], r["time"], r["record"]["n"]) for r in messages) == expected
    assert len(progress) == sum(1 for _, e in stored if not isinstance(e.event, Messages))
    assert all(r["record"]["word"] == f"w{r['time']}" for r in messages)
    last = {r["part"]: r for r in progress}
    assert all(r["frontier"] == [] for r in last.values())
    times = [r["time"] for r in messages]
    assert times == sorted(times)  # parts merged lowest time first


def test_cat_filters_part_offset_times_kind_and_count(cli_uri):
    capture_numbers(cli_uri, peers=3, times=5, rows=1)
    one = jsonl(replay_cli("cat", cli_uri, "numbers", "--part", "1"))
    assert {r["part"] for r in one} == {1} and [r["seq"] for r in one] == list(range(1, 12))
    last = jsonl(replay_cli("cat", cli_uri, "numbers", "--part", "1", "--offset", "-3"))
    assert [r["seq"] for r in last] == [9, 10, 11]
    assert last[0]["kind"] == "messages" and last[1]["frontier"] == [5]  # frontier restored before the offset
    assert [r["seq"] for r in jsonl(replay_cli("cat", cli_uri, "numbers", "-p", "1", "-o", "10"))] == [10, 11]
    assert jsonl(replay_cli("cat", cli_uri, "numbers", "--offset", "end")) == []
    window = jsonl(replay_cli("cat", cli_uri, "numbers", "--since", "1", "--until", "3", "--kind", "messages"))
    assert sorted({r["time"] for r in window}) == [1, 2] and len(window) == 6
    progress = jsonl(replay_cli("cat", cli_uri, "numbers", "--kind", "progress"))
    assert progress and all(r["kind"] == "progress" for r in progress)
    assert len(jsonl(replay_cli("cat", cli_uri, "numbers", "-n", "4"))) == 4


def test_cat_count_is_rows_and_events_is_events(cli_uri):
    capture_numbers(cli_uri, peers=2, times=3, rows=5)  # 5 records per Messages event
    every = jsonl(replay_cli("cat", cli_uri, "numbers"))
    for n in (0, 1, 3, 5, 7, 12):  # -n counts rows printed, cutting a Messages event in the middle
        assert jsonl(replay_cli("cat", cli_uri, "numbers", "-n", n)) == every[:n]
        assert json.loads(replay_cli("cat", cli_uri, "numbers", "--count", n, "--format", "json").stdout) == every[:n]
    assert len(jsonl(replay_cli("cat", cli_uri, "numbers", "-n", 10_000))) == len(every)
    events = [(r["part"], r["seq"]) for r in every]
    first_events = list(dict.fromkeys(events))
    def rows_of_events(n):  # how many rows the first n events are
        return sum(1 for e in events if e in first_events[:n])

    assert rows_of_events(1) == 5  # a Messages event comes first, so --events 1 prints 5 rows, -n 1 one
    for n in (1, 2, 3, 4):  # --events counts events, however many records each holds
        assert jsonl(replay_cli("cat", cli_uri, "numbers", "--events", n)) == every[:rows_of_events(n)]
    for events_limit, n in ((1, 7), (2, 3), (3, 7), (4, 30)):  # both: whichever limit is reached first
        rows = jsonl(replay_cli("cat", cli_uri, "numbers", "--events", events_limit, "-n", n))
        assert rows == every[:min(n, rows_of_events(events_limit))]
    # part 1 holds seq 1 M, 2 P, 3 M, 4 P, 5 M, 6 P, 7 P (finished); its last 5 events hold two Messages
    msgs = jsonl(replay_cli("cat", cli_uri, "numbers", "--kind", "messages", "--part", 1, "--offset", "-5", "-n", 6))
    assert [(r["part"], r["seq"]) for r in msgs] == [(1, 3)] * 5 + [(1, 5)]
    since = jsonl(replay_cli("cat", cli_uri, "numbers", "--since", 2, "--kind", "messages", "-n", 3))
    assert len(since) == 3 and all(r["time"] == 2 for r in since)


def test_cat_formats_json_csv_table(cli_uri):
    capture_numbers(cli_uri, peers=2, times=2, rows=2)
    lines = jsonl(replay_cli("cat", cli_uri, "numbers"))
    assert json.loads(replay_cli("cat", cli_uri, "numbers", "--format", "json").stdout) == lines
    table = list(csv.DictReader(io.StringIO(replay_cli("cat", cli_uri, "numbers", "--format", "csv").stdout)))
    assert len(table) == len(lines)
    assert [row["n"] for row in table if row["kind"] == "messages"] == [
        str(r["record"]["n"]) for r in lines if r["kind"] == "messages"]
    assert json.loads(next(row["updates"] for row in table if row["kind"] == "progress")) == next(
        r["updates"] for r in lines if r["kind"] == "progress")
    out = replay_cli("cat", cli_uri, "numbers", "--format", "table").stdout
    assert out.splitlines()[0].split() == ["part", "seq", "kind", "time", "updates", "frontier", "n", "word"]
    assert "0:-1 1:+1" in out
    assert json.loads(replay_cli("cat", cli_uri, "numbers", "--format", "json", "--offset", "end").stdout) == []


def test_cat_writes_every_type_as_json(tmp_path):
    schema = pa.schema([
        ("ts", pa.timestamp("ns")), ("utc", pa.timestamp("ms", tz="UTC")), ("day", pa.date32()),
        ("blob", pa.binary()), ("price", pa.decimal128(6, 2)), ("ratio", pa.float64()),
        ("nested", pa.struct([("at", pa.timestamp("us")), ("tags", pa.list_(pa.string()))])),
        ("dur", pa.duration("ms")),
    ])
    record = {"ts": 1_700_000_000_000_000_123, "utc": 1_500, "day": 19_000, "blob": b"\x00\xffab",
              "price": decimal.Decimal("12.30"), "ratio": float("inf"),
              "nested": {"at": 1, "tags": ["a", None]}, "dur": 1500}
    with Capture(open_log(tmp_path), "typed", 0, 1, schema=schema, time="product:2") as cap:
        cap.send((1, 2), pa.RecordBatch.from_pylist([record], schema=schema))
    (row,) = [r for r in jsonl(replay_cli("cat", tmp_path, "typed")) if r["kind"] == "messages"]
    assert row["time"] == [1, 2]
    rec = row["record"]
    assert rec["ts"] == "2023-11-14T22:13:20.000000123"
    assert rec["utc"] == "1970-01-01T00:00:01.500Z"
    assert rec["day"] == (dt.date(1970, 1, 1) + dt.timedelta(days=19_000)).isoformat()
    assert base64.b64decode(rec["blob"]) == b"\x00\xffab"
    assert (rec["price"], rec["ratio"], rec["dur"]) == ("12.30", "Infinity", 1500)
    assert rec["nested"] == {"at": "1970-01-01T00:00:00.000001", "tags": ["a", None]}
    hexed = jsonl(replay_cli("cat", tmp_path, "typed", "--bytes", "hex", "--kind", "messages"))
    assert hexed[0]["record"]["blob"] == "00ff6162"
    since = jsonl(replay_cli("cat", tmp_path, "typed", "--since", "1,2", "--kind", "messages"))
    assert len(since) == 1 and jsonl(replay_cli("cat", tmp_path, "typed", "--since", "2,0", "--kind", "messages")) == []


def test_tail_shows_the_last_events_of_each_part(cli_uri):
    capture_numbers(cli_uri, peers=2, times=3)
    rows = jsonl(replay_cli("tail", cli_uri, "numbers", "-n", "2"))
    assert sorted((r["part"], r["seq"]) for r in rows) == [(0, 6), (0, 7), (1, 6), (1, 7)]


def test_tail_follow_prints_until_every_part_finishes(cli_uri):
    log = open_log(cli_uri)
    caps = [Capture(log, "live", w, 2, schema=SCHEMA) for w in range(2)]

    def write() -> None:
        for t in range(5):
            for w, cap in enumerate(caps):
                cap.send(t, [{"n": 10 * t + w, "word": "x"}])
                cap.advance_to(t + 1)
            time.sleep(0.02)
        for cap in caps:
            cap.close()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        r = replay_cli("tail", "-f", cli_uri, "live", "-n", "100", "--kind", "messages", "--interval", "0.01")
    finally:
        writer.join()
    assert sorted(row["record"]["n"] for row in jsonl(r)) == sorted(10 * t + w for t in range(5) for w in range(2))


def test_tail_follow_stops_at_until(cli_uri):
    capture_numbers(cli_uri, peers=1, times=4, finish=False)  # the part stays open at frontier 4
    r = replay_cli("tail", "-f", cli_uri, "numbers", "--until", "3", "--kind", "messages", "--interval", "0.01")
    assert sorted({row["time"] for row in jsonl(r)}) == [0, 1, 2]


# -- stats / frontier -------------------------------------------------------------------------------------------


def test_stats_counts_per_time_and_finds_the_lagging_part(cli_uri):
    log = open_log(cli_uri)
    for w, last in enumerate([5, 5, 2]):  # part 2 stops early, at frontier 2
        cap = Capture(log, "s", w, 3, schema=SCHEMA)
        for t in range(last):
            cap.send(t, [{"n": t, "word": "x"}] * (w + 1))
            cap.advance_to(t + 1)
        cap.abort()
    doc = json.loads(replay_cli("stats", cli_uri, "s", "--json").stdout)
    by_time = {row["time"]: row for row in doc["times"]}
    assert sorted(by_time) == [0, 1, 2, 3, 4]
    assert by_time[0]["records"] == 1 + 2 + 3 and by_time[4]["records"] == 1 + 2
    assert {p["part"]: p["records"] for p in by_time[1]["parts"]} == {0: 1, 1: 2, 2: 3}
    assert all(row["bytes"] > 0 for row in doc["times"])
    parts = {p["part"]: p for p in doc["parts"]}
    assert parts[2]["times_behind"] == 3 and parts[0]["times_behind"] == parts[1]["times_behind"] == 0
    assert parts[2]["seq_behind"] == 6 and parts[0]["seq_behind"] == 0
    assert doc["frontier"] == [2]
    table = replay_cli("stats", cli_uri, "s").stdout
    assert "times behind" in table and "part 2" in table


def test_frontier_table_and_json_follow_every_progress_event(cli_uri):
    capture_numbers(cli_uri, peers=2, times=3)
    doc = json.loads(replay_cli("frontier", cli_uri, "numbers", "--json").stdout)
    n_progress = sum(1 for _, e in stored_entries(cli_uri, "numbers") if not isinstance(e.event, Messages))
    assert len(doc["steps"]) == n_progress and [s["step"] for s in doc["steps"]] == list(range(1, n_progress + 1))
    stream = [s["stream_frontier"] for s in doc["steps"] if s["moved"]]
    assert stream == [[1], [2], [3], []]  # the merged frontier moves once both parts moved
    assert doc["frontier"] == [] and all(p["frontier"] == [] for p in doc["parts"])
    table = replay_cli("frontier", cli_uri, "numbers").stdout
    assert "stream frontier" in table
    moves = replay_cli("frontier", cli_uri, "numbers", "--moves-only").stdout
    assert len(moves.splitlines()) < len(table.splitlines())


def table_rows(out: str) -> list[list[str]]:
    """The body rows of the rich tables in ``out`` (plain text), as lists of stripped cells."""
    return [[c.strip() for c in line.strip("│").split("│")] for line in out.splitlines() if line.startswith("│")]


def test_stats_and_frontier_tables_show_the_last_50_rows_and_say_what_they_left_out(cli_uri):
    capture_numbers(cli_uri, peers=1, times=60, rows=1)  # 60 times, 61 progress events
    r = replay_cli("stats", cli_uri, "numbers")
    times, parts = table_rows(r.stdout)[:51], table_rows(r.stdout)[51:]
    assert times[0] == ["…"] * len(times[0])  # the rows left out come first, marked
    assert [row[0] for row in times[1:]] == [str(t) for t in range(10, 60)]  # the newest times
    assert [row[0] for row in parts] == ["0"]
    assert r.stderr.strip().splitlines()[-1] == (
        "not shown (--limit 50): 10 earlier times; --limit 0 shows every row, --json lists them all")
    r = replay_cli("stats", cli_uri, "numbers", "--limit", 3)
    assert [row[0] for row in table_rows(r.stdout)] == ["…", "57", "58", "59", "0"]
    assert "57 earlier times" in r.stderr
    r = replay_cli("stats", cli_uri, "numbers", "--limit", 0)
    assert [row[0] for row in table_rows(r.stdout)] == [str(t) for t in range(60)] + ["0"] and r.stderr == ""
    assert len(json.loads(replay_cli("stats", cli_uri, "numbers", "--json").stdout)["times"]) == 60  # JSON: all

    r = replay_cli("frontier", cli_uri, "numbers")
    rows = table_rows(r.stdout)
    assert rows[0] == ["…"] * 6 and [row[0] for row in rows[1:]] == [str(s) for s in range(12, 62)]
    assert r.stderr.strip().splitlines()[-1] == (
        "not shown (--limit 50): 11 earlier progress events; --limit 0 shows every row, --moves-only only those "
        "that moved the stream's frontier, --json lists them all")
    assert [row[0] for row in table_rows(replay_cli("frontier", cli_uri, "numbers", "--limit", 0).stdout)] == [
        str(s) for s in range(1, 62)]
    r = replay_cli("frontier", cli_uri, "numbers", "--moves-only", "--limit", 2)
    assert [row[5] for row in table_rows(r.stdout)] == ["…", "[60]", "[] finished"]
    assert "59 earlier moves of the stream's frontier" in r.stderr
    assert len(json.loads(replay_cli("frontier", cli_uri, "numbers", "--json").stdout)["steps"]) == 61


def test_stats_limit_keeps_the_parts_most_behind(cli_uri):
    log = open_log(cli_uri)
    for w, last in enumerate([6, 2, 6, 4, 6]):  # part 1 is most behind, then part 3
        cap = Capture(log, "s", w, 5, schema=SCHEMA)
        for t in range(last):
            cap.send(t, [{"n": t, "word": "x"}])
            cap.advance_to(t + 1)
        cap.abort()
    r = replay_cli("stats", cli_uri, "s", "--limit", 2)
    rows = table_rows(r.stdout)
    assert [row[0] for row in rows] == ["…", "4", "5", "1", "3", "…"]  # parts in part order, the rest marked
    assert "4 earlier times, 3 parts less behind" in r.stderr
    r = replay_cli("stats", cli_uri, "s")  # 5 parts, 6 times: under the default limit, nothing left out
    assert [row[0] for row in table_rows(r.stdout)] == ["0", "1", "2", "3", "4", "5", "0", "1", "2", "3", "4"]
    assert r.stderr == ""


@pytest.mark.parametrize("product", [False, True])
def test_frontier_plots_png_svg_and_html(tmp_path, product):
    log = open_log(tmp_path / "log")
    for w in range(3):
        cap = Capture(log, "s", w, 3, schema=SCHEMA, time="product:2" if product else None)
        for t in range(4 + w):
            cap.send((t, 0) if product else t, [{"n": t, "word": "x"}])
            cap.advance_to((t + 1, 0) if product else t + 1)
        cap.close() if w else cap.abort()
    png = tmp_path / "f.png"
    replay_cli("frontier", tmp_path / "log", "s", "--plot", png)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert width >= 800 and height >= 400 and len(data) > 20_000
    replay_cli("frontier", tmp_path / "log", "s", "--plot", tmp_path / "f.svg")
    assert (tmp_path / "f.svg").read_text().count("<svg") == 1
    replay_cli("frontier", tmp_path / "log", "s", "--plot", tmp_path / "f.html")
    page = (tmp_path / "f.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "part 0" in page and "<script" not in page
    replay_cli("frontier", tmp_path / "log", "s", "--plot", tmp_path / "f.jpg", expect=2)


# -- diff -------------------------------------------------------------------------------------------------------


def test_diff_equal_across_part_counts_and_encodings(cli_uri):
    capture_numbers(cli_uri, peers=3, times=4)
    other = sibling(cli_uri, "-copy")
    replay_cli("copy", cli_uri, other, "numbers", "--workers", "2", "--encoding", "avro")
    r = replay_cli("diff", cli_uri, other, "numbers")
    assert r.stdout.startswith("equal: 4 times, 24 records")


def test_diff_reports_the_first_diverging_time_and_differing_records(cli_uri):
    a, b = cli_uri, sibling(cli_uri, "-b")
    capture_numbers(a, peers=2, times=6)
    log_b = open_log(b)
    for w in range(3):  # same records over 3 parts, except one record at time 3 and the records at time 5
        cap = Capture(log_b, "numbers", w, 3, schema=SCHEMA)
        for t in range(6):
            if w < 2 and t != 5:
                rows = [{"n": 100 * t + 10 * w + i, "word": f"w{t}"} for i in range(2)]
                if (t, w) == (3, 1):
                    rows[0]["word"] = "changed"
                cap.send(t, rows)
            cap.advance_to(t + 1)
        cap.close()
    r = replay_cli("diff", a, b, "numbers", expect=1)
    out = r.stdout
    assert "first diverging time: 3" in out and "differ at 2 of 6 times" in out
    assert '"word":"w3"' in out.split("only in A")[1] and '"word":"changed"' in out.split("only in B")[1]
    assert "other differing times: 5" in out
    only_completed = replay_cli("diff", a, b, "numbers", "--completed", expect=1).stdout
    assert "first diverging time: 3" in only_completed
    assert "stream-b" in replay_cli("diff", "--help").stdout


def test_diff_reports_frontiers_and_schemas(cli_uri):
    capture_numbers(cli_uri, stream="done", peers=1, times=3)
    capture_numbers(cli_uri, stream="open", peers=1, times=3, finish=False)
    r = replay_cli("diff", cli_uri, cli_uri, "done", "--stream-b", "open", expect=1)
    assert "frontiers differ" in r.stdout and "[3]" in r.stdout
    replay_cli("diff", cli_uri, cli_uri, "done", "--stream-b", "open", "--completed")  # same complete times
    with Capture(open_log(cli_uri), "other", 0, 1, schema=pa.schema([("n", pa.int32())])) as cap:
        cap.send(0, [{"n": 1}])
    assert "schemas differ" in replay_cli("diff", cli_uri, cli_uri, "done", "--stream-b", "other", expect=1).stdout


# -- copy / export / run ----------------------------------------------------------------------------------------


def test_copy_with_workers_key_and_encoding(cli_uri):
    capture_numbers(cli_uri, peers=3, times=3)
    dst = sibling(cli_uri, "-dst")
    r = replay_cli("copy", cli_uri, dst, "numbers", "--workers", "2", "--key", "n", "--encoding", "avro")
    assert "2 parts, avro" in r.stderr
    header = open_log(dst).header("numbers")
    assert (header.peers, header.encoding) == (2, "avro")
    worker0 = [n for _, table in Replayer(dst, "numbers", 0, 2).completed() for n in table.column("n").to_pylist()]
    everything = [n for _, table in Replayer(cli_uri, "numbers", 0, 1).completed()
                  for n in table.column("n").to_pylist()]
    assert 0 < len(worker0) < len(everything)
    replay_cli("diff", cli_uri, dst, "numbers")
    replay_cli("copy", cli_uri, dst, "numbers", expect=2)  # the destination stream exists
    replay_cli("copy", cli_uri, cli_uri, "numbers", "--to-stream", "again")
    replay_cli("copy", cli_uri, dst, "numbers", "--to-stream", "k", "--key", "nope", expect=2)


def test_copy_progress_shows_the_total_and_an_eta_on_a_terminal_only(cli_uri, monkeypatch):
    import re

    from rich.console import Console

    import replay.cli._common as common

    capture_numbers(cli_uri, peers=3, times=4)
    events = len(stored_entries(cli_uri, "numbers"))
    piped = replay_cli("copy", cli_uri, sibling(cli_uri, "-piped"), "numbers", "--workers", 2)
    assert len(piped.stderr.splitlines()) == 1 and piped.stderr.startswith("copied ")  # nothing else when piped
    screen = io.StringIO()
    monkeypatch.setattr(common, "stderr_console", lambda: Console(file=screen, force_terminal=True, width=200))
    for args, total in ((["--workers", 2], events), (["--workers", 2, "--key", "n"], 2 * events)):
        screen.seek(0)
        screen.truncate()
        r = replay_cli("copy", cli_uri, sibling(cli_uri, f"-tty{len(args)}"), "numbers", *args)
        frames = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue()).split("\r")
        bars = [f for f in frames if "copying 'numbers'" in f]
        # the source's events (read once per part of the copy with --key) are the total, from the first frame
        assert bars and all(re.search(rf" \d+/{total} \d:\d\d:\d\d eta (-:--:--|\d:\d\d:\d\d)", f) for f in bars), bars
        assert f" {total}/{total} " in bars[-1] and bars[-1].rstrip().endswith("eta 0:00:00")  # every read counted
        assert r.stderr.startswith("copied ")


def test_copy_of_an_open_stream_warns(cli_uri):
    capture_numbers(cli_uri, peers=1, times=2, finish=False)
    r = replay_cli("copy", cli_uri, cli_uri, "numbers", "--to-stream", "c")
    assert "not finished" in r.stderr


@pytest.mark.parametrize("fmt", ["parquet", "arrow", "avro", "jsonl"])
def test_export_each_format_is_readable(tmp_path, cli_uri, fmt):
    capture_numbers(cli_uri, peers=2, times=3, rows=2)
    path = tmp_path / f"out.{fmt}"
    r = replay_cli("export", cli_uri, "numbers", path)
    assert "exported 12 records at 3 times" in r.stderr
    if fmt == "parquet":
        rows = pq.read_table(path).to_pylist()
    elif fmt == "arrow":
        rows = pa.ipc.open_file(path).read_all().to_pylist()
    elif fmt == "avro":
        with open(path, "rb") as f:
            rows = list(fastavro.reader(f))
    else:
        rows = [json.loads(line) for line in path.read_text().splitlines()]
    expected = sorted((t, w, 100 * t + 10 * w + i) for t in range(3) for w in range(2) for i in range(2))
    assert sorted((r["_time"], r["_part"], r["n"]) for r in rows) == expected
    log = open_log(cli_uri)
    for row in rows:  # _seq is where the record is in its part
        entry = next(e for e in log.reader("numbers", row["_part"], start=row["_seq"]))
        assert isinstance(entry.event, Messages) and row["n"] in entry.event.records.column("n").to_pylist()


def test_export_only_complete_times_unless_incomplete(tmp_path, cli_uri):
    log = open_log(cli_uri)
    for w in range(2):
        cap = Capture(log, "g", w, 2, schema=SCHEMA, time="product:2")
        for t in range(3):
            cap.send((t, w), [{"n": t, "word": "x"}])
            cap.advance_to((t + 1, 0) if w == 0 or t < 1 else (1, 0))
        cap.abort()  # part 1 stays at frontier (1, 0): times (1, 1), (2, 1) are not complete
    out = tmp_path / "complete.parquet"
    r = replay_cli("export", cli_uri, "g", out)
    table = pq.read_table(out)
    assert table.schema.field("_time").type == pa.list_(pa.int64())
    assert sorted(map(tuple, table.column("_time").to_pylist())) == [(0, 0), (0, 1)]
    assert "--incomplete" in r.stderr
    replay_cli("export", cli_uri, "g", tmp_path / "all.parquet", "--incomplete")
    assert pq.read_table(tmp_path / "all.parquet").num_rows == 6
    replay_cli("export", cli_uri, "g", out, expect=2)  # exists
    replay_cli("export", cli_uri, "g", out, "--force", "--since", "0,1")
    assert pq.read_table(out).column("_time").to_pylist() == [[0, 1]]
    replay_cli("export", cli_uri, "g", tmp_path / "x.unknown", expect=2)
    replay_cli("export", cli_uri, "g", "--to", "jsonl", tmp_path / "x.unknown")
    assert len((tmp_path / "x.unknown").read_text().splitlines()) == 2
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_run_calls_the_function_per_worker_and_completed_time(tmp_path, cli_uri):
    capture_numbers(cli_uri, peers=3, times=4, rows=2)
    (tmp_path / "fns.py").write_text(
        "def count(time, table):\n"
        "    return {'rows': table.num_rows}\n"
        "def with_worker(time, table, worker):\n"
        "    return [worker, sum(table.column('n').to_pylist())]\n"
        "def fail(time, table):\n"
        "    if time == 2:\n"
        "        raise ValueError('bad record')\n"
        "def interrupt(time, table):\n"
        "    raise KeyboardInterrupt\n"
    )
    fns = tmp_path / "fns.py"
    calls = jsonl(replay_cli("run", cli_uri, "numbers", "--workers", "2", "--fn", f"{fns}:count"))
    assert {(c["worker"], c["time"]) for c in calls} == {(w, t) for w in range(2) for t in range(4)}
    by_worker = {w: sum(c["result"]["rows"] for c in calls if c["worker"] == w) for w in range(2)}
    assert by_worker == {0: 4 * 2 * 2, 1: 4 * 2}  # worker 0 replays parts 0 and 2, worker 1 part 1
    sums = jsonl(replay_cli("run", cli_uri, "numbers", "-w", "2", "--worker", "1", "--fn", f"{fns}:with_worker"))
    assert [c["result"] for c in sums] == [[1, sum(100 * t + 10 + i for i in range(2))] for t in range(4)]
    r = replay_cli("run", cli_uri, "numbers", "--fn", f"{fns}:fail", expect=4)
    assert "ValueError: bad record" in r.stderr and "at time 2" in r.stderr and 'fns.py", line 7' in r.stderr
    replay_cli("run", cli_uri, "numbers", "--fn", f"{fns}:interrupt", expect=130)
    replay_cli("run", cli_uri, "numbers", "--fn", f"{fns}:missing", expect=2)
    replay_cli("run", cli_uri, "numbers", "--fn", "no_such_module_xyz:f", expect=2)


# these tests poke at the files of the 1.x layout (format 2.0 files: test_file_format2.py)
pytestmark = pytest.mark.usefixtures("file_format_1")
