"""``replay gen``, ``replay produce`` and ``replay seek`` (issue 35 items 5 and 6: what avro-tools' ``random`` and
kcat's ``-P`` and ``-o s@MS`` give their users), as a user types them: a random stream read back with ``cat``,
records produced by hand read back at their time and sequence id, readers of an abandoned part released, and
the sequence id written at a wall-clock time.

The three commands are run through a group of their own with the CLI's error handling (``ReplayGroup``); the
commands that read back are the real CLI's (``replay_cli``)."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner, Result

import eventlog.encoding.arrow_file as arrow_file
import replay.cli._wallclock as wallclock
from eventlog import open_log
from eventlog.parts.capture import Capture
from replay import Replayer
from replay.cli._common import ReplayGroup
from replay.cli._wallclock import ts_iso
from replay.cli.gen import gen
from replay.cli.produce import produce
from replay.cli.seek import seek
from tests.support.cli import SCHEMA, jsonl, replay_cli


@click.group(cls=ReplayGroup)
@click.option("--debug", is_flag=True)
def _replay(debug: bool) -> None:
    """The three commands, with the CLI's error handling (one line, exit codes)."""


for _command in (gen, produce, seek):
    _replay.add_command(_command)


def cli(*args: object, expect: int | None = 0, input: str | None = None) -> Result:  # noqa: A002 - CliRunner's name
    """Run ``replay ARGS…`` (gen, produce, seek) in-process; check the exit code unless ``expect`` is None."""
    result = CliRunner().invoke(_replay, [str(a) for a in args], input=input)
    if expect is not None:
        assert result.exit_code == expect, (
            f"exit {result.exit_code}, expected {expect}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
            + (f"\nexception: {result.exception!r}" if result.exception else "")
        )
    return result


def messages(uri: object, stream: str, *extra: object) -> list[dict]:
    """The records ``replay cat`` prints (committed reads unless ``extra`` says otherwise)."""
    return jsonl(replay_cli("cat", uri, stream, "--kind", "messages", "--format", "jsonl", *extra))


def next_seqs(uri: object, stream: str) -> list[int]:
    log = open_log(str(uri))
    return [log.part_stats(stream, p).next_seq for p in range(log.header(stream).peers)]


def lines(*records: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


# -- gen -----------------------------------------------------------------------------------------------------------


def test_gen_writes_parts_times_and_rows_that_cat_reads_back(cli_uri):
    r = cli("gen", cli_uri, "rand", "--parts", 3, "--times", 4, "--rows", 2, "--seed", 7)
    assert "3 parts x 4 times x 2 records = 24 records" in r.stderr and "seed 7" in r.stderr and r.stdout == ""
    rows = messages(cli_uri, "rand")
    assert len(rows) == 24
    assert {(row["part"], row["time"]) for row in rows} == {(p, t) for p in range(3) for t in range(4)}
    assert all(set(row["record"]) == {"id", "word", "value"} for row in rows)
    info = json.loads(replay_cli("info", cli_uri, "rand", "--json").stdout)
    assert [(f["name"], f["type"]) for f in info["fields"]] == [("id", "int64"), ("word", "string"),
                                                                ("value", "double")]
    (row,) = json.loads(replay_cli("ls", cli_uri, "--json").stdout)
    assert row["stream"] == "rand" and row["peers"] == 3 and row["finished"] and row["records"] == 24
    assert replay_cli("verify", cli_uri, "rand").exit_code == 0


def test_gen_values_follow_the_seed(tmp_path):
    for name, seed in (("a", 11), ("b", 11), ("c", 12)):
        cli("gen", tmp_path / name, "s", "--seed", seed, "--times", 3)

    def values(name: str) -> list:
        return [(r["part"], r["seq"], r["time"], r["record"]) for r in messages(tmp_path / name, "s")]

    assert values("a") == values("b")
    assert values("a") != values("c")
    assert replay_cli("diff", tmp_path / "a", tmp_path / "b", "s").exit_code == 0


def test_gen_without_a_seed_says_which_it_drew(tmp_path):
    r = cli("gen", tmp_path / "a", "s", "--times", 2)
    seed = int(r.stderr.split("seed ")[1].split(")")[0])
    cli("gen", tmp_path / "b", "s", "--times", 2, "--seed", seed)
    records = [[x["record"] for x in messages(tmp_path / name, "s")] for name in ("a", "b")]
    assert len(records[0]) == 2 * 2 * 5 and records[0] == records[1]


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_gen_every_field_type_in_either_encoding(tmp_path, encoding):
    schema = "a:int64,b:int32,c:float64,d:string,e:bool,f:timestamp,g:binary,h:int64?"
    cli("gen", tmp_path, "typed", "--schema", schema, "--encoding", encoding, "--rows", 20, "--times", 2,
        "--seed", 3)
    info = json.loads(replay_cli("info", tmp_path, "typed", "--json").stdout)
    assert info["encoding"] == encoding
    fields = {f["name"]: f for f in info["fields"]}
    assert fields["f"]["type"] == "timestamp[ms, tz=UTC]" and fields["g"]["type"] == "binary"
    assert not fields["a"]["nullable"] and fields["h"]["nullable"]
    rows = [r["record"] for r in messages(tmp_path, "typed")]
    assert len(rows) == 2 * 2 * 20
    assert all(r["f"].startswith("2026-01-01T00:00:0") and r["f"].endswith("Z") for r in rows)
    assert all(isinstance(r["e"], bool) and isinstance(r["g"], str) for r in rows)
    assert any(r["h"] is None for r in rows) and all(r["a"] is not None for r in rows)
    assert replay_cli("verify", tmp_path, "typed").exit_code == 0


def test_gen_unfinished_leaves_every_part_open_at_the_last_time(cli_uri):
    cli("gen", cli_uri, "open", "--parts", 2, "--times", 3, "--unfinished", "--seed", 1)
    (row,) = json.loads(replay_cli("ls", cli_uri, "--json").stdout)
    assert row["open_parts"] == 2 and row["frontier"] == [2] and not row["finished"]
    assert {r["time"] for r in messages(cli_uri, "open")} == {0, 1}  # time 2 is not committed yet
    assert {r["time"] for r in messages(cli_uri, "open", "--uncommitted")} == {0, 1, 2}


def test_gen_product_times(tmp_path):
    cli("gen", tmp_path, "grid", "--product", "--times", 4, "--parts", 1, "--seed", 2)
    rows = messages(tmp_path, "grid")
    assert sorted({tuple(r["time"]) for r in rows}) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    progress = jsonl(replay_cli("cat", tmp_path, "grid", "--kind", "progress", "--format", "jsonl"))
    assert progress[0]["frontier"] == [[0, 1], [1, 0]] and progress[-1]["frontier"] == []


def test_gen_refuses_an_existing_stream_and_a_bad_schema(tmp_path):
    cli("gen", tmp_path, "s", "--times", 1)
    before = next_seqs(tmp_path, "s")
    r = cli("gen", tmp_path, "s", expect=2)
    assert "stream 's' already exists" in r.stderr
    assert next_seqs(tmp_path, "s") == before
    r = cli("gen", tmp_path, "t", "--schema", "a:int64,b:decimal", expect=2)
    assert "unknown type 'decimal' of field 'b'" in r.stderr and "timestamp" in r.stderr
    assert "'a b' is not NAME:TYPE" in cli("gen", tmp_path, "t", "--schema", "a b", expect=2).stderr
    assert "appears twice" in cli("gen", tmp_path, "t", "--schema", "a:int64,a:string", expect=2).stderr
    assert "t" not in open_log(str(tmp_path)).streams()


# -- produce -------------------------------------------------------------------------------------------------------


def test_produce_appends_records_read_back_at_their_time_and_seq(cli_uri, tmp_path):
    cli("gen", cli_uri, "s", "--parts", 2, "--times", 3, "--rows", 1, "--unfinished", "--seed", 5)
    (seq0, _) = next_seqs(cli_uri, "s")
    r = cli("produce", cli_uri, "s", "--part", 0, "--advance-to", 5,
            input=lines({"id": 1, "word": "one", "value": 1.5}, {"id": 2, "word": "two", "value": "NaN"}))
    assert "appended 2 records at time 2 to part 0 of 's'" in r.stderr and f"seq {seq0} " in r.stderr
    assert "frontier of part 0: [2] -> [5]" in r.stderr and f"Progress event seq {seq0 + 1}" in r.stderr
    got = [x for x in messages(cli_uri, "s", "--part", 0) if x["seq"] == seq0]
    assert [(x["time"], x["record"]) for x in got] == [(2, {"id": 1, "word": "one", "value": 1.5}),
                                                     (2, {"id": 2, "word": "two", "value": "NaN"})]
    # gen's own record at time 2 is kept (the part's writer continued) and committed now, as the new ones
    assert sorted(x["seq"] for x in messages(cli_uri, "s", "--part", 0) if x["time"] == 2) == [seq0 - 1, seq0, seq0]
    # from a file, at a time of its own, then finished
    path = tmp_path / "more.jsonl"
    path.write_text(lines({"id": 3, "word": "three", "value": 3}))
    r = cli("produce", cli_uri, "s", "--part", 0, "--file", path, "--time", 7, "--finish")
    assert "at time 7" in r.stderr and "[5] -> [] finished" in r.stderr
    last = messages(cli_uri, "s", "--part", 0)[-1]
    assert last["time"] == 7 and last["seq"] == seq0 + 2 and last["record"] == {"id": 3, "word": "three",
                                                                                 "value": 3.0}
    assert replay_cli("verify", cli_uri, "s").exit_code == 0


def test_records_produced_without_advancing_wait_for_the_frontier(tmp_path):
    cli("gen", tmp_path, "s", "--parts", 1, "--times", 2, "--rows", 1, "--unfinished", "--seed", 5)
    r = cli("produce", tmp_path, "s", "--part", 0, input=lines({"id": 9, "word": "w", "value": 0}))
    assert "frontier of part 0: [1] (unchanged)" in r.stderr and "not committed yet" in r.stderr
    assert not any(x["record"]["id"] == 9 for x in messages(tmp_path, "s"))
    assert any(x["record"]["id"] == 9 for x in messages(tmp_path, "s", "--uncommitted"))
    cli("produce", tmp_path, "s", "--part", 0, "--no-records", "--advance-to", 2)
    assert [x["time"] for x in messages(tmp_path, "s") if x["record"]["id"] == 9] == [1]


def test_produce_converts_values_as_cat_writes_them(tmp_path):
    import pyarrow as pa

    schema = pa.schema([("at", pa.timestamp("ms", tz="UTC")), ("raw", pa.binary()), ("n", pa.int32()),
                        ("tags", pa.list_(pa.string())), ("opt", pa.string())])
    log = open_log(str(tmp_path))
    Capture(log, "typed", 0, 1, schema=schema).abort()
    record = {"at": "2026-11-25T10:00:00.123Z", "raw": "AAEC", "n": -5, "tags": ["a", "b"]}  # opt: null
    cli("produce", tmp_path, "typed", "--part", 0, "--finish", input=lines(record))
    (row,) = messages(tmp_path, "typed")
    assert row["record"] == {**record, "opt": None}
    cli("gen", tmp_path, "hex", "--schema", "raw:binary", "--parts", 1, "--times", 1, "--rows", 0, "--unfinished")
    cli("produce", tmp_path, "hex", "--part", 0, "--bytes", "hex", "--finish", input=lines({"raw": "00ff"}))
    (row,) = messages(tmp_path, "hex", "--bytes", "hex")
    assert row["record"] == {"raw": "00ff"}


@pytest.mark.parametrize("bad, says", [
    ('{"id": 1, "word": "x", "value": "high"}', "line 2 of stdin: field 'value': expected a number"),
    ('{"id": "1", "word": "x", "value": 1}', "line 2 of stdin: field 'id': expected an integer (int64)"),
    ('{"id": 1, "wrd": "x", "value": 1}', "line 2 of stdin: field 'wrd' is not in the stream's schema (did you "
                                           "mean 'word'?"),
    ('{"id": 1, "value": 1}', "line 2 of stdin: field 'word' is missing (it is not nullable)"),
    ('{"id": null, "word": "x", "value": 1}', "line 2 of stdin: field 'id': is null, but the field is not nullable"),
    ('{"id": 1, "word": "x", "value": 1', "line 2 of stdin: not JSON"),
    ('[1, 2, 3]', "line 2 of stdin: expected a JSON object"),
    ('{"id": 99999999999999999999, "word": "x", "value": 1}', "line 2 of stdin: field 'id': 99999999999999999999 is "
                                                               "out of range of int64"),
])
def test_a_bad_record_is_one_line_naming_its_line_and_field_and_nothing_is_written(tmp_path, bad, says):
    cli("gen", tmp_path, "s", "--parts", 1, "--times", 2, "--unfinished", "--seed", 5)
    before = next_seqs(tmp_path, "s")
    good = json.dumps({"id": 1, "word": "x", "value": 1})
    r = cli("produce", tmp_path, "s", "--part", 0, "--finish", input=f"{good}\n{bad}\n{good}\n", expect=3)
    assert r.stderr.startswith("replay: error: ") and says in r.stderr and "nothing was written" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "(stream 's', part 0)" in r.stderr
    assert next_seqs(tmp_path, "s") == before
    (row,) = json.loads(replay_cli("ls", tmp_path, "--json").stdout)
    assert row["open_parts"] == 1


def test_finishing_the_parts_of_a_dead_job_releases_stuck_readers(cli_uri):
    cli("gen", cli_uri, "s", "--parts", 3, "--times", 4, "--unfinished", "--seed", 8)
    with Replayer(cli_uri, "s") as stuck:
        times = [t for t, _ in stuck.completed()]
        assert times == [0, 1, 2] and list(stuck.frontier) == [3] and not stuck.is_done()
    cli("produce", cli_uri, "s", "--part", 0, "--no-records", "--finish")
    r = cli("produce", cli_uri, "s", "--part", 1, "--finish", input="")  # empty stdin: no records either
    assert "frontier of part 1: [3] -> [] finished" in r.stderr
    cli("produce", cli_uri, "s", "--part", 2, "--no-records", "--advance-to", 9)
    with Replayer(cli_uri, "s") as r:
        assert [t for t, _ in r.completed()] == [0, 1, 2, 3] and list(r.frontier) == [9]
    cli("produce", cli_uri, "s", "--part", 2, "--no-records", "--finish")
    with Replayer(cli_uri, "s") as released:
        tables = dict(released.completed())
        assert released.frontier.is_empty() and released.is_done()
    assert sorted(tables) == [0, 1, 2, 3] and tables[3].num_rows == 3 * 5  # the open time's records, committed
    (row,) = json.loads(replay_cli("ls", cli_uri, "--json").stdout)
    assert row["finished"] and row["open_parts"] == 0


def test_a_new_writer_voids_what_the_dead_one_left_uncommitted(tmp_path):
    cli("gen", tmp_path, "s", "--parts", 2, "--times", 2, "--rows", 3, "--unfinished", "--seed", 8)
    r = cli("produce", tmp_path, "s", "--part", 1, "--no-records", "--finish", "--new-writer")
    assert "1 Messages event the part's last writer left after its last Progress event is void" in r.stderr
    cli("produce", tmp_path, "s", "--part", 0, "--no-records", "--finish")
    at_1 = [x["part"] for x in messages(tmp_path, "s") if x["time"] == 1]
    assert at_1 == [0, 0, 0]  # part 1's records at its open time are void, part 0's committed
    assert len([x for x in messages(tmp_path, "s", "--uncommitted") if x["time"] == 1]) == 6


def test_produce_behind_the_frontier_is_a_clear_error(cli_uri):
    cli("gen", cli_uri, "s", "--parts", 1, "--times", 4, "--unfinished", "--seed", 1)
    before = next_seqs(cli_uri, "s")
    r = cli("produce", cli_uri, "s", "--part", 0, "--time", 1, input=lines({"id": 1, "word": "x", "value": 1}),
            expect=3)
    assert "cannot send at time 1: not in advance of the part's frontier [3]" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "part 0" in r.stderr
    r = cli("produce", cli_uri, "s", "--part", 0, "--advance-to", 2, input=lines({"id": 1, "word": "x", "value": 1}),
            expect=3)
    assert "cannot move the frontier backwards from [3] to [2]" in r.stderr
    assert next_seqs(cli_uri, "s") == before
    cli("produce", cli_uri, "s", "--part", 0, "--no-records", "--finish")
    r = cli("produce", cli_uri, "s", "--part", 0, "--no-records", "--finish", expect=3)
    assert "part is already finished" in r.stderr


def test_produce_usage_errors(tmp_path):
    cli("gen", tmp_path, "s", "--parts", 2, "--times", 2, "--unfinished", "--seed", 1)
    assert "nothing to write" in cli("produce", tmp_path, "s", "--part", 0, input="", expect=2).stderr
    assert "exclude each other" in cli("produce", tmp_path, "s", "--part", 0, "--no-records", "--finish",
                                       "--advance-to", 4, expect=2).stderr
    assert "has parts 0..1, not 2" in cli("produce", tmp_path, "s", "--part", 2, "--no-records", "--finish",
                                          expect=2).stderr
    assert "Missing option '--part'" in cli("produce", tmp_path, "s", "--finish", expect=2).stderr
    assert cli("produce", tmp_path, "nope", "--part", 0, "--finish", expect=3).stderr.startswith("replay: error: ")


def test_produce_product_times(tmp_path):
    cli("gen", tmp_path, "grid", "--product", "--parts", 1, "--times", 2, "--rows", 1, "--unfinished", "--seed", 4)
    record = lines({"id": 1, "word": "x", "value": 1})
    r = cli("produce", tmp_path, "grid", "--part", 0, input=record, expect=2)
    assert "frontier [[0,1],[1,0]] is not one time: pass --time" in r.stderr
    r = cli("produce", tmp_path, "grid", "--part", 0, "--time", "1,0", "--advance-to", "2,0", input=record)
    assert "at time [1,0]" in r.stderr and "-> [[2,0]]" in r.stderr
    assert sorted({tuple(x["time"]) for x in messages(tmp_path, "grid")}) == [(0, 0), (0, 1), (1, 0)]


def test_produce_into_a_part_a_live_writer_holds_is_one_line(tmp_path):
    log = open_log(str(tmp_path))
    live = Capture(log, "s", 0, 1, schema=SCHEMA)
    try:
        live.send(0, [{"n": 1, "word": "a"}])
        live.flush()
        r = cli("produce", tmp_path, "s", "--part", 0, "--no-records", "--finish", expect=3)
        assert "a live writer holds the part" in r.stderr and "(stream 's', part 0" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    finally:
        live.abort()


def test_produce_help_says_how_to_release_readers_and_what_it_does_to_a_live_writer():
    text = " ".join(CliRunner().invoke(_replay, ["produce", "--help"]).stdout.split())
    assert "died for good" in text and "fences a live writer" in text and "--no-records" in text


# -- seek ----------------------------------------------------------------------------------------------------------

T0 = 1_764_064_800_000
"""2025-11-25T10:00:00Z in ms since the epoch."""


class Clock:
    """The write time the next appended event gets (ms since the epoch)."""

    def __init__(self) -> None:
        self.now = T0


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """Deterministic write times for format 2.0 file and memory logs; ``now`` is T0 + 1 h for relative values."""
    c = Clock()
    monkeypatch.setattr(arrow_file, "now_ms", lambda: c.now)
    monkeypatch.setattr(wallclock, "now_ms", lambda: T0 + 3_600_000)
    return c


def write_timed(uri: str, clock: Clock, stream: str = "s") -> None:
    """Two parts: part p sends time t at T0 + 1000 t + 10 p and advances 100 ms later, four times; part 0
    finishes at T0 + 5000, part 1 stays open."""
    log = open_log(uri)
    for p in range(2):
        cap = Capture(log, stream, p, 2, schema=SCHEMA)
        for t in range(4):
            clock.now = T0 + 1000 * t + 10 * p
            cap.send(t, [{"n": t, "word": f"p{p}"}])
            clock.now += 100
            cap.advance_to(t + 1)
        clock.now = T0 + 5000
        cap.close() if p == 0 else cap.abort()


def test_seek_finds_the_first_event_written_at_or_after_a_time(cli_uri, clock):
    write_timed(cli_uri, clock)
    # part p's seq 2t+1 is time t's Messages event (T0 + 1000 t + 10 p), seq 2t+2 its Progress event (+100 ms)
    rows = json.loads(cli("seek", cli_uri, "s", ts_iso(T0 + 2000), "--json").stdout)
    assert [(r["part"], r["seq"], r["ts_ms"], r["kind"], r.get("time")) for r in rows] == [
        (0, 5, T0 + 2000, "messages", 2), (1, 5, T0 + 2010, "messages", 2)]
    assert rows[0]["ts"] == "2025-11-25T10:00:02.000Z" and rows[0]["records"] == 1 and rows[0]["frontier"] == [2]
    # between two writes: the later one
    (row,) = json.loads(cli("seek", cli_uri, "s", ts_iso(T0 + 2050), "--part", 0, "--json").stdout)
    assert (row["seq"], row["kind"], row["updates"], row["end"]) == (6, "progress", [[2, -1], [3, 1]], False)
    # kcat's s@MS, and @SECONDS
    (row,) = json.loads(cli("seek", cli_uri, "s", f"s@{T0 + 1001}", "-p", 1, "--json").stdout)
    assert (row["seq"], row["ts_ms"]) == (3, T0 + 1010)
    (row,) = json.loads(cli("seek", cli_uri, "s", "@1764064800", "-p", 0, "--json").stdout)
    assert row["seq"] == 1
    # after the last write of part 1; part 0's finishing event is at T0 + 5000
    rows = json.loads(cli("seek", cli_uri, "s", ts_iso(T0 + 4000), "--json").stdout)
    assert [(r["part"], r["seq"], r["end"]) for r in rows] == [(0, 9, False), (1, 9, True)]
    assert rows[1]["ts"] is None and rows[1]["frontier"] == [4]
    rows = json.loads(cli("seek", cli_uri, "s", "-30m", "--json").stdout)  # now is T0 + 1 h
    assert [(r["seq"], r["end"]) for r in rows] == [(10, True), (9, True)] and rows[0]["frontier"] == []


def test_seek_prints_a_table(tmp_path, clock):
    write_timed(str(tmp_path), clock)
    out = cli("seek", tmp_path, "s", "2025-11-25T10:00:01.005Z").stdout
    assert "first event written at or after 2025-11-25T10:00:01.005Z" in out
    assert "2025-11-25T10:00:01.010Z" in out and "messages at 1 (1 record)" in out
    out = cli("seek", tmp_path, "s", "2025-11-25T11:00").stdout
    assert out.count("end: nothing written at or after WHEN") == 2 and "[] finished" in out


def test_seek_on_a_stream_without_write_times_is_the_usage_error_since_ts_gives(tmp_path):
    log = open_log(str(tmp_path), format="1.2")
    cap = Capture(log, "old", 0, 1, schema=SCHEMA)
    cap.send(0, [{"n": 1, "word": "a"}])
    cap.close()
    r = cli("seek", tmp_path, "old", "-1h", expect=2)
    assert "stream 'old'" in r.stderr and "format 1.2" in r.stderr and "record it from format 2.0 on" in r.stderr
    assert "needs the time each event was written" in r.stderr


def test_seek_usage_errors(tmp_path, clock):
    write_timed(str(tmp_path), clock)
    assert "not a wall-clock time" in cli("seek", tmp_path, "s", "yesterday", expect=2).stderr
    assert "not a duration before now" in cli("seek", tmp_path, "s", "-5y", expect=2).stderr
    assert "has parts 0..1, not 4" in cli("seek", tmp_path, "s", "now", "--part", 4, expect=2).stderr
    assert cli("seek", tmp_path, "nope", "now", expect=3).stderr.startswith("replay: error: ")


def test_seek_to_the_write_time_of_a_produced_event(tmp_path):
    cli("gen", tmp_path, "s", "--parts", 1, "--times", 2, "--unfinished", "--seed", 1)
    cli("produce", tmp_path, "s", "--part", 0, "--no-records", "--finish")
    entries = list(open_log(str(tmp_path)).reader("s", 0))
    when = entries[-1].ts  # the finishing Progress event's (earlier events may share it: the first is found)
    (row,) = json.loads(cli("seek", tmp_path, "s", f"s@{when}", "--json").stdout)
    assert row["ts_ms"] == when and not row["end"]
    assert row["seq"] == min(e.seq for e in entries if e.ts >= when)
    (row,) = json.loads(cli("seek", tmp_path, "s", f"s@{when + 1}", "--json").stdout)
    assert row["end"] and row["seq"] == entries[-1].seq + 1


# -- Kafka ---------------------------------------------------------------------------------------------------------


@pytest.mark.kafka
def test_gen_produce_seek_on_kafka(kafka_uri):
    cli("gen", kafka_uri, "s", "--parts", 2, "--times", 3, "--rows", 2, "--unfinished", "--seed", 3)
    cli("produce", kafka_uri, "s", "--part", 1, "--finish", input=lines({"id": 5, "word": "k", "value": 2}))
    cli("produce", kafka_uri, "s", "--part", 0, "--no-records", "--finish")
    rows = messages(kafka_uri, "s")
    assert len(rows) == 2 * 3 * 2 + 1 and rows[-1]["record"] == {"id": 5, "word": "k", "value": 2.0}
    with Replayer(kafka_uri, "s") as r:
        list(r.completed())
        assert r.is_done()
    log = open_log(kafka_uri)
    entries = list(log.reader("s", 1))
    target = entries[-1]  # the finishing Progress event
    (row,) = json.loads(cli("seek", kafka_uri, "s", f"s@{target.ts}", "--part", 1, "--json").stdout)
    assert row["ts_ms"] == target.ts and row["seq"] == min(e.seq for e in entries if e.ts >= target.ts)
    rows = json.loads(cli("seek", kafka_uri, "s", "now", "--json").stdout)
    assert all(r["end"] for r in rows) and [r["seq"] for r in rows] == next_seqs(kafka_uri, "s")
