"""``replay trim``: drops old times (by time, wall-clock instant or age), says what it did, and every other command
then shows the retained frontier (issue 32 §1)."""

from __future__ import annotations

import json

import pytest

from eventlog import open_log
from tests.support.cli import capture_numbers, jsonl, replay_cli


@pytest.fixture
def trimmable(cli_uri) -> str:
    log = open_log(cli_uri, segment_bytes=500) if not cli_uri.startswith("kafka") else open_log(cli_uri)
    capture_numbers(log, times=20, finish=False)
    return cli_uri


def test_dry_run_changes_nothing_then_the_trim_drops_whole_times(trimmable):
    plan = json.loads(replay_cli("trim", trimmable, "numbers", "--before", 8, "--dry-run", "--json").stdout)
    assert plan["dry_run"] and plan["since"] == [8] and plan["completed"] == [20]
    assert all(p["start"] > p["start_before"] == 1 for p in plan["parts"])
    assert open_log(trimmable).retention("numbers") is None
    assert {r["time"] for r in jsonl(replay_cli("cat", trimmable, "numbers", "--format", "jsonl")) if "time" in r} == set(range(20))
    done = json.loads(replay_cli("trim", trimmable, "numbers", "--before", 8, "--json").stdout)
    assert done["since"] == [8] and done["changed"] and done["bytes_removed"] > 0
    assert [p["start"] for p in done["parts"]] == [p["start"] for p in plan["parts"]]
    assert {r["time"] for r in jsonl(replay_cli("cat", trimmable, "numbers", "--format", "jsonl")) if "time" in r} == set(range(8, 20))
    info = json.loads(replay_cli("info", trimmable, "numbers", "--json").stdout)
    assert info["retained"]["since"] == [8]
    assert [p["first_seq"] for p in info["parts"]] == [p["start"] for p in done["parts"]]
    assert "times from [8] on" in replay_cli("info", trimmable, "numbers").stdout
    assert "trimmed" in replay_cli("ls", trimmable).stdout
    assert "times before [8] trimmed" in replay_cli("stats", trimmable, "numbers").stdout
    replay_cli("verify", trimmable)
    again = replay_cli("trim", trimmable, "numbers", "--before", 5)
    assert "already trimmed to [8]" in again.stdout


def test_a_frontier_beyond_the_completed_one_is_clamped_and_said(trimmable):
    result = replay_cli("trim", trimmable, "numbers", "--before", 50)
    assert "dropped the times not beyond [20]" in result.stdout
    assert "only complete times are dropped; the stream's completed frontier is [20]" in result.stderr
    assert not [r for r in jsonl(replay_cli("cat", trimmable, "numbers", "--format", "jsonl")) if "record" in r]


def test_older_than_keeps_what_is_recent_and_bad_ages_are_usage_errors(trimmable):
    result = json.loads(replay_cli("trim", trimmable, "numbers", "--older-than", "7d", "--json").stdout)
    assert result["since"] == [0] and not result["changed"]
    bad = replay_cli("trim", trimmable, "numbers", "--older-than", "7 days", expect=2)
    assert "--older-than" in bad.stderr and "an age" in bad.stderr
    none = replay_cli("trim", trimmable, "numbers", expect=2)
    assert "give one of --before TIME, --before-ts WHEN, --older-than AGE and --max-bytes N" in none.stderr
    both = replay_cli("trim", trimmable, "numbers", "--before", 3, "--older-than", "1d", expect=2)
    assert "give one of" in both.stderr


def test_a_position_file_inside_the_dropped_range_is_refused_with_the_earliest_position(trimmable, tmp_path):
    positions = tmp_path / "pos.json"
    replay_cli("cat", trimmable, "numbers", "--format", "jsonl", "--position-file", positions)
    saved = json.loads(positions.read_text())
    positions.write_text(json.dumps({**saved, "next": {p: 2 for p in saved["next"]}}))  # a reader that was early
    replay_cli("trim", trimmable, "numbers", "--before", 10)
    result = replay_cli("cat", trimmable, "numbers", "--position-file", positions, expect=None)
    assert result.exit_code != 0
    assert "which was dropped" in result.stderr and "the earliest event still there is" in result.stderr
