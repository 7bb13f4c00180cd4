"""``replay compact``: merges a file log stream's small segments, says what it did, and every other command reads the
stream as before (issue 32 §2)."""

from __future__ import annotations

import json

import pytest

from capture import Capture
from eventlog import open_log
from tests.support.cli import SCHEMA, capture_numbers, jsonl, replay_cli


@pytest.fixture
def fragmented(cli_uri) -> str:
    if cli_uri.startswith("kafka"):
        pytest.skip("compaction rewrites file segments; a Kafka log keeps Kafka's own (tested below: it says so)")
    log = open_log(cli_uri)
    for t in range(6):  # six writer incarnations (micro-batches): six segments per part
        for w in range(3):
            cap = Capture(log, "numbers", w, 3, schema=SCHEMA)
            cap.send(t, [{"n": 100 * t + 10 * w, "word": f"w{t}"}])
            cap.advance_to(t + 1)
            cap.flush()
            cap.abort()
    return cli_uri


def _cat(uri: str) -> list[dict]:
    return jsonl(replay_cli("cat", uri, "numbers", "--format", "jsonl"))


def test_dry_run_changes_nothing_then_compact_merges_and_every_command_reads_the_same(fragmented):
    before = _cat(fragmented)
    segments = [open_log(fragmented).part_stats("numbers", p).segments for p in range(3)]
    assert segments == [6, 6, 6]
    plan = json.loads(replay_cli("compact", fragmented, "numbers", "--dry-run", "--json").stdout)
    assert plan["dry_run"] and plan["segments_before"] == 18 and plan["segments_after"] == 6
    assert [open_log(fragmented).part_stats("numbers", p).segments for p in range(3)] == segments
    done = json.loads(replay_cli("compact", fragmented, "numbers", "--json").stdout)
    assert done["segments_after"] == 6 and done["events"] > 0 and done["bytes_written"] > 0
    assert [m["segments"] for p in done["parts"] for m in p["merges"]] == [5, 5, 5]
    assert [open_log(fragmented).part_stats("numbers", p).segments for p in range(3)] == [2, 2, 2]
    assert _cat(fragmented) == before
    replay_cli("verify", fragmented)
    again = replay_cli("compact", fragmented, "numbers", "--part", "1")
    assert "merged 0 segments away" in again.stdout


def test_options_are_checked(fragmented):
    assert "not a size" in replay_cli("compact", fragmented, "numbers", "--target-size", "lots", expect=2).output
    assert "parts 0..2" in replay_cli("compact", fragmented, "numbers", "--part", "7", expect=2).output
    small = json.loads(replay_cli("compact", fragmented, "numbers", "--part", "0", "--min-segments", "3",
                                  "--target-size", "1g", "--json").stdout)
    assert [p["part"] for p in small["parts"]] == [0] and small["segments_after"] == 2


def test_a_kafka_log_is_refused(kafka_uri):
    capture_numbers(kafka_uri, times=1, finish=False)
    out = replay_cli("compact", kafka_uri, "numbers", expect=2).output
    assert "not a file log" in out and "Kafka" in out


def test_verify_notes_what_an_interrupted_compaction_left_and_passes(fragmented):
    """A compaction stopped before it removed the small segments leaves them beside the compacted one: readers pass
    over them, so `replay verify` exits 0 and says what is left and which command removes it."""
    from eventlog.errors import EventLogError

    class _Stop(EventLogError):
        pass

    def hook(step: str) -> None:
        if step == "remove":
            raise _Stop("stopped")

    log = open_log(fragmented)
    before = _cat(fragmented)
    with pytest.raises(_Stop):
        log.compact("numbers", hook=hook)
    assert _cat(fragmented) == before
    out = replay_cli("verify", fragmented)                          # exit 0
    assert "NOTE leftover" in out.stdout and "replay compact" in out.stdout and "PROBLEM" not in out.stdout
    doc = json.loads(replay_cli("verify", fragmented, "--json").stdout)
    assert doc["ok"] and doc["problems"] == [] and doc["notes"]
    assert {n["kind"] for n in doc["notes"]} == {"leftover"} and all(n["path"] for n in doc["notes"])
    open_log(fragmented).compact("numbers")
    assert json.loads(replay_cli("verify", fragmented, "--json").stdout)["notes"] == []
