"""The CLI reads committed by default (FORMAT.md §1.1): a restarted writer's replaced records are not shown,
records at times their part has not completed wait (and the command says so); --uncommitted shows all."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from capture import Capture
from eventlog import open_log
from tests.support.cli import replay_cli

SCHEMA = pa.schema([("v", pa.string())])


def restarted_part(root: str) -> None:
    """Part 0: run 1 sends "old" at time 0 and stops mid-time; run 2 re-sends time 0 as "new", then leaves
    "open" at time 1, not complete."""
    log = open_log(root)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    cap.send(0, [{"v": "old"}])
    cap.advance_to(0)
    cap.abort()
    cap = Capture(log, "s", 0, 1)
    cap.send(0, [{"v": "new"}])
    cap.advance_to(1)
    cap.send(1, [{"v": "open"}])
    cap.advance_to(1)
    cap.abort()


def values(stdout: str) -> list[str]:
    return [json.loads(line)["record"]["v"] for line in stdout.splitlines() if '"record"' in line]


def test_cat_shows_one_version_and_says_what_it_holds_back(tmp_path):
    root = str(tmp_path / "log")
    restarted_part(root)
    r = replay_cli("cat", root, "s", "--format", "jsonl")
    assert values(r.stdout) == ["new"]
    assert "part 0: 1 event(s) held back from seq 4 (times not complete: 1)" in r.stderr
    assert "--uncommitted" in r.stderr
    r = replay_cli("cat", root, "s", "--format", "jsonl", "--uncommitted")
    assert values(r.stdout) == ["old", "new", "open"] and "held back" not in r.stderr


def test_export_writes_the_committed_view_and_incomplete_writes_everything(tmp_path):
    root = str(tmp_path / "log")
    restarted_part(root)
    replay_cli("export", root, "s", tmp_path / "c.parquet")
    assert pq.read_table(tmp_path / "c.parquet").column("v").to_pylist() == ["new"]
    replay_cli("export", root, "s", tmp_path / "all.parquet", "--incomplete")
    assert sorted(pq.read_table(tmp_path / "all.parquet").column("v").to_pylist()) == ["new", "old", "open"]


def test_a_committed_message_blocked_behind_an_uncommitted_one_fails_the_export(tmp_path):
    root = str(tmp_path / "log")
    cap = Capture(root, "s", 0, 1, schema=SCHEMA)
    cap.send(5, [{"v": "later"}])  # sent first, never passed
    cap.send(3, [{"v": "earlier"}])
    cap.advance_to(4)  # time 3 complete, its message waits behind the one at 5
    cap.abort()
    r = replay_cli("export", root, "s", tmp_path / "x.parquet", expect=1)
    assert "part 0 holds records at time 3" in r.stderr and "--uncommitted" in r.stderr
    replay_cli("export", root, "s", tmp_path / "x.parquet", "--uncommitted")
    assert pq.read_table(tmp_path / "x.parquet").column("v").to_pylist() == ["earlier"]


def test_verify_reports_void_and_held_events_as_information(tmp_path):
    root = str(tmp_path / "log")
    restarted_part(root)
    r = replay_cli("verify", root, "--json")
    doc = json.loads(r.stdout)
    assert doc["ok"] is True
    (part,) = doc["parts"]
    assert (part["void"], part["held"]) == (1, 1)
    r = replay_cli("verify", root)
    assert "1 void (a writer restarted mid-time)" in r.stdout and "1 held back" in r.stdout
