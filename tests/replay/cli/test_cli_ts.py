"""Wall-clock time in the CLI (issue 15 §3): ``--since-ts``/``--until-ts`` values, seeking by write time on file
and Kafka logs with frontiers restored across the cut, write times in ``cat``/``stats``/``frontier`` output, the
error on logs without write times, and the frontier plot against the wall clock (its data, and that it renders).

File logs get deterministic write times from a fake clock (``eventlog.encoding.arrow_file.now_ms``, read at each
append); Kafka's come from the producer, so those tests cut at instants observed between captures."""

from __future__ import annotations

import json
import time

import pytest

import eventlog.encoding.arrow_file as arrow_file
import replay.cli._wallclock as wallclock
from capture import Capture
from eventlog import open_log
from replay.cli._plot import _figure, frontier_series
from replay.cli._wallclock import parse_when, ts_iso
from replay.cli.frontier import frontier_history
from tests.support.cli import SCHEMA, jsonl, replay_cli

T0 = 1_764_064_800_000
"""2025-11-25T10:00:00Z in ms since the epoch."""
NOW = 1_764_068_400_000
"""An hour later: what relative values count back from in these tests."""


def iso(ms: int) -> str:
    return ts_iso(ms)


# -- parsing -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("2025-11-25T10:00:00Z", T0),
    ("2025-11-25T10:00:00.250Z", T0 + 250),
    ("2025-11-25T11:00:00+01:00", T0),
    ("2025-11-25T10:00:00", T0),  # no zone: UTC, not the local time zone
    ("2025-11-25 10:00", T0),
    ("2025-11-25", T0 - 10 * 3_600_000),  # a date: its midnight (UTC)
    ("20251125", T0 - 10 * 3_600_000),  # ISO-8601's basic date
    ("@1764064800", T0),
    ("@1764064800.5", T0 + 500),
    ("@1764064800.123", T0 + 123),
    ("-10m", NOW - 600_000),
    ("-2h", NOW - 7_200_000),
    ("-1d", NOW - 86_400_000),
    ("-1w", NOW - 7 * 86_400_000),
    ("-90s", NOW - 90_000),
    ("-500ms", NOW - 500),
    ("-1h30m", NOW - 5_400_000),
    ("-1.5h", NOW - 5_400_000),
    ("now", NOW),
    (" NOW ", NOW),
])
def test_every_accepted_form(text, expected):
    assert parse_when(text, NOW) == expected


@pytest.mark.parametrize("text, says", [
    ("", "empty"),
    ("-10", "a number and a unit"),
    ("-10y", "a number and a unit"),
    ("-m", "a number and a unit"),
    ("@1764064800123", "looks like milliseconds; write @1764064800.123"),
    ("@12.5.1", "not @SECONDS"),
    ("@-5", "not @SECONDS"),
    ("1764064800", "with an @ (@1764064800)"),
    ("yesterday", "not a wall-clock time"),
    ("2025-13-01", "not a wall-clock time"),
    ("10m", "not a wall-clock time"),
])
def test_values_that_are_refused_say_what_is_accepted(text, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        parse_when(text, NOW)


def test_relative_values_count_back_from_the_wall_clock():
    before = time.time_ns() // 1_000_000
    got = parse_when("-10m")
    assert before - 600_000 <= got <= time.time_ns() // 1_000_000 - 600_000


def test_write_times_are_shown_as_iso_8601_utc_with_milliseconds():
    assert ts_iso(T0) == "2025-11-25T10:00:00.000Z"
    assert ts_iso(T0 + 7) == "2025-11-25T10:00:00.007Z"
    assert ts_iso(0) == "1970-01-01T00:00:00.000Z"
    assert parse_when(ts_iso(T0 + 123_456)) == T0 + 123_456  # what is shown can be passed back


def test_bad_values_and_an_empty_window_are_usage_errors(tmp_path, clock):
    two_parts(tmp_path)
    r = replay_cli("cat", tmp_path, "s", "--since-ts", "tomorrow", expect=2)
    assert "--since-ts" in r.stderr and "not a wall-clock time" in r.stderr
    r = replay_cli("cat", tmp_path, "s", "--since-ts", "-10m", "--until-ts", "-20m", expect=2)
    assert "--until-ts" in r.stderr and "is before --since-ts" in r.stderr
    # relative values of one command line count back from one instant: an empty window is no error
    assert jsonl(replay_cli("cat", tmp_path, "s", "--since-ts", "-1m", "--until-ts", "-1m")) == []


# -- a log with controlled write times -----------------------------------------------------------------------------


class Clock:
    """The write time the next appended event gets (ms since the epoch)."""

    def __init__(self) -> None:
        self.now = T0


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """Deterministic write times for format 2.0 file and memory logs, and ``now`` = NOW for relative values."""
    c = Clock()
    monkeypatch.setattr(arrow_file, "now_ms", lambda: c.now)
    monkeypatch.setattr(wallclock, "now_ms", lambda: NOW)
    return c


def write_part(log, clock: Clock, stream: str, part: int, peers: int, schedule: list[tuple[int, int, int]],
               finish: bool = True, end: int | None = None) -> None:
    """Part ``part`` sends one record at each time t of ``schedule`` ``(t, message written at, its progress
    written at)`` and advances to t + 1; then finishes at ``end`` (default: the last progress's time) or stays
    open."""
    cap = Capture(log, stream, part, peers, schema=SCHEMA)
    for t, sent, advanced in schedule:
        clock.now = sent
        cap.send(t, [{"n": 10 * t + part, "word": f"p{part}"}])
        clock.now = advanced
        cap.advance_to(t + 1)
    clock.now = end if end is not None else clock.now
    cap.close() if finish else cap.abort()


def two_parts(path, clock: "Clock | None" = None, times: int = 4) -> None:
    """Stream ``s``, 2 parts: part 0 writes time t at T0 + 1 s·t (progress 100 ms later), part 1 lags, at
    T0 + 3 s·t + 500 ms (progress 100 ms later); both finish right after their last time."""
    log = open_log(path)
    c = clock or Clock()
    write_part(log, c, "s", 0, 2, [(t, T0 + 1000 * t, T0 + 1000 * t + 100) for t in range(times)])
    write_part(log, c, "s", 1, 2, [(t, T0 + 3000 * t + 500, T0 + 3000 * t + 600) for t in range(times)])


def stamps(uri: str, stream: str = "s") -> dict[tuple[int, int], int]:
    """``(part, seq) -> ts`` of every stored event."""
    log = open_log(uri)
    return {(p, e.seq): e.ts for p in range(log.header(stream).peers) for e in log.reader(stream, p)}


def test_the_fake_clock_gives_each_event_its_write_time(tmp_path, clock):
    two_parts(tmp_path, clock)
    got = stamps(str(tmp_path))
    assert got[(0, 1)] == T0 and got[(0, 2)] == T0 + 100 and got[(1, 3)] == T0 + 3500 and got[(1, 4)] == T0 + 3600


def test_cat_rows_carry_their_write_time(tmp_path, clock):
    two_parts(tmp_path, clock)
    rows = jsonl(replay_cli("cat", tmp_path, "s"))
    written = stamps(str(tmp_path))
    assert rows and all(r["ts"] == iso(written[(r["part"], r["seq"])]) for r in rows)
    table = replay_cli("cat", tmp_path, "s", "--format", "table").stdout.splitlines()
    # the table shows times of day, the day in its header (the same day throughout here)
    assert table[0].split()[:6] == ["part", "seq", "ts", iso(T0)[:10], "kind", "time"]
    assert iso(T0 + 3600)[:10] == iso(T0)[:10] and iso(T0 + 3600)[11:] in "\n".join(table)
    csv_head = replay_cli("cat", tmp_path, "s", "--format", "csv").stdout.splitlines()[0]
    assert csv_head.startswith("part,seq,ts,kind,time")


def test_cat_since_ts_shows_what_was_written_since_with_frontiers_from_every_event(tmp_path, clock):
    two_parts(tmp_path, clock)
    cut = T0 + 2050  # part 0 wrote times 0, 1 and the message of 2 before it; part 1 only time 0
    rows = jsonl(replay_cli("cat", tmp_path, "s", "--since-ts", iso(cut)))
    written = stamps(str(tmp_path))
    expected = sorted(k for k, ts in written.items() if ts >= cut)
    assert sorted({(r["part"], r["seq"]) for r in rows}) == expected
    assert all(r["ts"] >= iso(cut) for r in rows)
    first = {p: next(r for r in rows if r["part"] == p and r["kind"] == "progress") for p in (0, 1)}
    # the part's frontier after its first Progress event shown counts the events before the cut
    assert first[0]["updates"] == [[2, -1], [3, 1]] and first[0]["frontier"] == [3]
    assert first[1]["updates"] == [[1, -1], [2, 1]] and first[1]["frontier"] == [2]
    assert {r["time"] for r in rows if r["kind"] == "messages"} == {2, 3, 1}
    # the same instant written other ways selects the same rows
    for same in (f"@{cut // 1000}.{cut % 1000:03d}", "2025-11-25T11:00:02.050+01:00", "-3597950ms"):
        assert jsonl(replay_cli("cat", tmp_path, "s", "--since-ts", same)) == rows


def test_cat_until_ts_shows_the_log_as_it_was_then(tmp_path, clock):
    two_parts(tmp_path, clock)
    cut = T0 + 3550  # part 1 wrote its message at time 1 (T0 + 3500) but not yet the progress that commits it
    rows = jsonl(replay_cli("cat", tmp_path, "s", "--until-ts", iso(cut)))
    written = stamps(str(tmp_path))
    assert all(r["ts"] <= iso(cut) for r in rows)
    shown = {(r["part"], r["seq"]) for r in rows}
    assert (1, 3) not in shown  # reading committed: the message waits for a progress written after the cut
    assert shown == {k for k, ts in written.items() if ts <= cut} - {(1, 3)}
    r = replay_cli("cat", tmp_path, "s", "--until-ts", iso(cut))
    assert "part 1:" in r.stderr and "--uncommitted" in r.stderr  # the held message is named
    loose = jsonl(replay_cli("cat", tmp_path, "s", "--until-ts", iso(cut), "--uncommitted"))
    assert {(r["part"], r["seq"]) for r in loose} == {k for k, ts in written.items() if ts <= cut}
    window = jsonl(replay_cli("cat", tmp_path, "s", "--since-ts", iso(T0 + 1000), "--until-ts", iso(T0 + 1100)))
    assert [(r["part"], r["seq"], r["kind"]) for r in window] == [(0, 3, "messages"), (0, 4, "progress")]
    assert window[1]["frontier"] == [2]


def test_cat_since_ts_works_with_the_other_filters(tmp_path, clock):
    two_parts(tmp_path, clock)
    cut = iso(T0 + 2050)
    rows = jsonl(replay_cli("cat", tmp_path, "s", "--since-ts", cut, "--part", "1", "--kind", "messages", "-n", "2"))
    assert [(r["part"], r["time"]) for r in rows] == [(1, 1), (1, 2)]
    rows = jsonl(replay_cli("cat", tmp_path, "s", "--since-ts", cut, "--since", "3"))
    assert {r.get("time") for r in rows if r["kind"] == "messages"} == {3}
    # --offset and --since-ts: each part starts at the later of the two
    rows = jsonl(replay_cli("cat", tmp_path, "s", "--since-ts", cut, "--offset", "-2"))
    assert sorted((r["part"], r["seq"]) for r in rows) == [(0, 8), (0, 9), (1, 8), (1, 9)]


def test_tail_since_ts_and_follow_until_ts(tmp_path, clock):
    log = open_log(tmp_path)
    # an open part that keeps writing after the cut: tail -f --until-ts ends once it has passed it
    write_part(log, clock, "s", 0, 1, [(t, T0 + 1000 * t, T0 + 1000 * t + 100) for t in range(6)], finish=False)
    rows = jsonl(replay_cli("tail", tmp_path, "s", "-n", "4", "--since-ts", iso(T0 + 5000)))
    assert [r["seq"] for r in rows] == [11, 12]
    r = replay_cli("tail", "-f", tmp_path, "s", "--until-ts", iso(T0 + 2500), "--interval", "0.01")
    assert [row["seq"] for row in jsonl(r)] == [3, 4, 5, 6]  # the last 10 events, up to the cut; then it ends


def test_stats_since_ts_counts_what_was_written_since_and_shows_when(tmp_path, clock):
    two_parts(tmp_path, clock)
    doc = json.loads(replay_cli("stats", tmp_path, "s", "--json").stdout)
    by_time = {row["time"]: row for row in doc["times"]}
    assert by_time[1]["written_from"] == iso(T0 + 1000) and by_time[1]["written_to"] == iso(T0 + 3500)
    assert {p["part"]: p["written_to"] for p in doc["parts"]} == {0: iso(T0 + 3100), 1: iso(T0 + 9600)}
    table = replay_cli("stats", tmp_path, "s").stdout
    assert "written from" in table and iso(T0 + 3500) in table
    doc = json.loads(replay_cli("stats", tmp_path, "s", "--json", "--since-ts", iso(T0 + 3000)).stdout)
    by_time = {row["time"]: row for row in doc["times"]}
    assert sorted(by_time) == [1, 2, 3] and by_time[3]["records"] == 2 and by_time[1]["records"] == 1
    assert by_time[1]["written_from"] == iso(T0 + 3500)
    parts = {p["part"]: p for p in doc["parts"]}
    assert parts[0]["records"] == 1 and parts[1]["records"] == 3
    assert parts[0]["frontier"] == parts[1]["frontier"] == []  # frontiers count every event
    doc = json.loads(replay_cli("stats", tmp_path, "s", "--json", "--until-ts", iso(T0 + 3200)).stdout)
    parts = {p["part"]: p for p in doc["parts"]}
    assert parts[0]["frontier"] == [] and parts[1]["frontier"] == [1] and parts[1]["times_behind"] == 3


def test_frontier_since_ts_rows_have_stream_frontiers_from_every_event(tmp_path, clock):
    two_parts(tmp_path, clock)
    doc = json.loads(replay_cli("frontier", tmp_path, "s", "--json").stdout)
    full = {(s["part"], s["seq"]): s for s in doc["steps"]}
    assert all(s["ts"] is not None for s in doc["steps"])
    cut = T0 + 2050
    doc = json.loads(replay_cli("frontier", tmp_path, "s", "--json", "--since-ts", iso(cut)).stdout)
    assert doc["steps"] and all(s["ts"] >= iso(cut) for s in doc["steps"])
    assert {(s["part"], s["seq"]) for s in doc["steps"]} == {k for k, s in full.items() if s["ts"] >= iso(cut)}
    assert all(s == full[(s["part"], s["seq"])] for s in doc["steps"])  # the same frontiers as without the cut
    table = replay_cli("frontier", tmp_path, "s", "--since-ts", iso(cut)).stdout
    assert "written" in table and iso(T0 + 9600) in table and iso(T0 + 600) not in table
    doc = json.loads(replay_cli("frontier", tmp_path, "s", "--json", "--until-ts", iso(T0 + 3200)).stdout)
    assert doc["frontier"] == [1] and [p["frontier"] for p in doc["parts"]] == [[], [1]]


def test_export_since_ts(tmp_path, clock):
    two_parts(tmp_path / "log", clock)
    out = tmp_path / "out.jsonl"
    replay_cli("export", tmp_path / "log", "s", out, "--since-ts", iso(T0 + 3000))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["_part"], r["_time"]) for r in rows) == [(0, 3), (1, 1), (1, 2), (1, 3)]
    replay_cli("export", tmp_path / "log", "s", out, "--force", "--until-ts", iso(T0 + 3550))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    # complete as it was then: time 0 (part 1 completed it at T0 + 600); time 1 not yet
    assert sorted((r["_part"], r["_time"]) for r in rows) == [(0, 0), (1, 0)]


def test_a_log_without_write_times_is_a_usage_error_naming_the_stream_and_why(tmp_path):
    log = open_log(tmp_path, format="1.2")
    write_part(log, Clock(), "old", 0, 1, [(0, T0, T0)])
    for command in (["cat"], ["tail"], ["stats"], ["frontier"]):
        r = replay_cli(*command, tmp_path, "old", "--since-ts", "-1h", expect=2)
        assert "stream 'old'" in r.stderr and "format 1.2" in r.stderr and "--since-ts" in r.stderr, command
        assert "record it from format 2.0 on" in r.stderr
    r = replay_cli("export", tmp_path, "old", tmp_path / "x.parquet", "--until-ts", "-1h", expect=2)
    assert "--until-ts" in r.stderr and "stream 'old'" in r.stderr and not (tmp_path / "x.parquet").exists()
    rows = jsonl(replay_cli("cat", tmp_path, "old"))
    assert rows and all("ts" not in r for r in rows)  # no write time: no "ts" at all
    assert replay_cli("cat", tmp_path, "old", "--format", "table").stdout.split()[:3] == ["part", "seq", "kind"]


# -- Kafka: record timestamps --------------------------------------------------------------------------------------


@pytest.mark.kafka
def test_kafka_since_ts_and_until_ts_cut_at_record_timestamps(kafka_uri):
    log = open_log(kafka_uri)
    caps = [Capture(log, "s", w, 2, schema=SCHEMA) for w in range(2)]
    mark = None
    for t in range(5):
        if t == 3:
            time.sleep(0.05)
            mark = time.time_ns() // 1_000_000
            time.sleep(0.05)
        for w, cap in enumerate(caps):
            cap.send(t, [{"n": 10 * t + w, "word": "k"}])
            cap.advance_to(t + 1)
    for cap in caps:
        cap.close()
    written = stamps(kafka_uri)
    assert all(ts is not None for ts in written.values())
    after = {k for k, ts in written.items() if ts >= mark}
    rows = jsonl(replay_cli("cat", kafka_uri, "s", "--since-ts", iso(mark)))
    assert {(r["part"], r["seq"]) for r in rows} == after and after
    assert {r["time"] for r in rows if r["kind"] == "messages"} == {3, 4}
    first = [next(r for r in rows if r["part"] == p and r["kind"] == "progress") for p in (0, 1)]
    assert [f["frontier"] for f in first] == [[4], [4]]  # restored from the progress before the cut
    rows = jsonl(replay_cli("cat", kafka_uri, "s", "--until-ts", iso(mark)))
    assert {(r["part"], r["seq"]) for r in rows} == set(written) - after
    doc = json.loads(replay_cli("frontier", kafka_uri, "s", "--json", "--until-ts", iso(mark)).stdout)
    assert doc["frontier"] == [3]


# -- the plot against the wall clock -------------------------------------------------------------------------------


def test_frontier_series_on_the_wall_clock_with_lag(tmp_path, clock):
    two_parts(tmp_path, clock)
    log = open_log(tmp_path)
    history = frontier_history(log, log.header("s"), first_writes=True)
    series = frontier_series(history)
    assert series.wallclock and series.components == [None]
    assert series.x_range == (T0, T0 + 9600)
    part0, part1 = series.parts[0][None], series.parts[1][None]
    assert part0.xs == [T0, T0 + 100, T0 + 1100, T0 + 2100, T0 + 3100, T0 + 3100]  # then it finished
    assert part0.ys[:5] == [0, 1, 2, 3, 4] and part1.xs[1:5] == [T0 + 600, T0 + 3600, T0 + 6600, T0 + 9600]
    assert series.finished == {0: T0 + 3100, 1: T0 + 9600} and series.stream_finished == T0 + 9600
    # the stream's frontier in write-time order: it follows the lagging part 1
    assert series.stream[None].xs == [T0, T0 + 600, T0 + 3600, T0 + 6600, T0 + 9600, T0 + 9600]
    assert series.stream[None].ys[:5] == [0, 1, 2, 3, 4]
    # lag: first record written (part 0, T0 + 1 s·t) to the write that completed t (part 1, T0 + 3 s·t + 600)
    assert [(c.time, c.first_write, c.completed, c.lag_ms) for c in series.completions] == [
        (t, T0 + 1000 * t, T0 + 3000 * t + 600, 2000 * t + 600) for t in range(4)]
    assert series.waiting == [] and series.holds_back == set()
    assert series.pauses == []  # 2.9 s between writes is no pause (under 5 s)


def test_frontier_series_of_an_open_stream_with_a_pause_and_a_window(tmp_path, clock):
    log = open_log(tmp_path)
    write_part(log, clock, "s", 0, 2, [(t, T0 + 1000 * t, T0 + 1000 * t + 100) for t in range(6)])
    # part 1 stops writing for a minute after time 1, then sends time 2 and stays open
    write_part(log, clock, "s", 1, 2, [(0, T0 + 200, T0 + 300), (1, T0 + 1200, T0 + 1300),
                                       (2, T0 + 61_000, T0 + 61_100)], finish=False)
    history = frontier_history(log, log.header("s"), first_writes=True)
    series = frontier_series(history)
    assert series.holds_back == {1} and series.stream_finished is None and 0 in series.finished
    assert [(t, w) for t, w in series.waiting] == [(3, T0 + 3000), (4, T0 + 4000), (5, T0 + 5000)]
    assert [c.time for c in series.completions] == [0, 1, 2]
    assert series.completions[2].completed == T0 + 61_100
    assert series.pauses == [(T0 + 5100, T0 + 61_000)]
    # a window from T0 + 30 s: every line starts there, at the value it held then
    history = frontier_history(log, log.header("s"), since_ts=T0 + 30_000, first_writes=True)
    series = frontier_series(history)
    assert series.x_range == (T0 + 30_000, T0 + 61_100)
    assert series.parts[1][None].xs[0] == T0 + 30_000 and series.parts[1][None].ys[0] == 2
    assert series.stream[None].xs[:2] == [T0 + 30_000, T0 + 61_100] and series.stream[None].ys[:2] == [2, 3]


def test_frontier_plot_renders_on_the_wall_clock_and_falls_back_without_write_times(tmp_path, clock):
    pytest.importorskip("matplotlib")
    two_parts(tmp_path / "new", clock, times=12)
    png = tmp_path / "f.png"
    r = replay_cli("frontier", tmp_path / "new", "s", "--plot", png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 30_000
    assert "no write times" not in r.stderr
    replay_cli("frontier", tmp_path / "new", "s", "--plot", tmp_path / "f.svg", "--since-ts", iso(T0 + 5000))
    assert (tmp_path / "f.svg").stat().st_size > 30_000
    log = open_log(tmp_path / "new")
    axes = _figure(frontier_history(log, log.header("s"), first_writes=True)).axes
    assert len(axes) == 2 and axes[1].get_ylabel() == "lag (s)"  # lags up to 22.6 s
    assert axes[1].get_xlabel().startswith("write time (UTC")
    assert "written 2025-11-25 10:00:00" in axes[0].get_title("left")
    old = open_log(tmp_path / "old", format="1.2")
    write_part(old, Clock(), "s", 0, 1, [(t, T0, T0) for t in range(3)])
    history = frontier_history(old, old.header("s"), first_writes=True)
    series = frontier_series(history)
    assert not series.wallclock and series.parts[0][None].xs == [0, 1, 2, 3, 4] and series.completions == []
    axes = _figure(history).axes
    assert len(axes) == 1 and "no write times" in axes[0].get_title("left") and "replay order" in axes[0].get_xlabel()
    r = replay_cli("frontier", tmp_path / "old", "s", "--plot", tmp_path / "old.png")
    assert "records no write times" in r.stderr and (tmp_path / "old.png").stat().st_size > 20_000
