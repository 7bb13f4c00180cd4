"""What kcat and avro-tools users reach for in ``replay cat``/``tail`` (issue 35 §5, §6): output templates
(kcat -f), a position file to resume from where the last run stopped, and salvage past damaged events
(avro-tools repair) that names what it skipped."""

from __future__ import annotations

import json

from capture import Capture
from eventlog import open_log
from tests.support.cli import SCHEMA, capture_numbers, replay_cli


def test_a_template_prints_each_row_its_way(tmp_path):
    capture_numbers(str(tmp_path / "log"), peers=1, times=2, rows=2)
    out = replay_cli("cat", tmp_path / "log", "numbers", "-F", "{part}:{seq}\\t{kind} t={time} {record[n]}").stdout
    lines = out.splitlines()
    assert lines[0] == "0:1\tmessages t=0 0" and lines[1] == "0:1\tmessages t=0 1"
    assert lines[2] == "0:2\tprogress t= "  # a Progress row has no time nor record: empty, not an error
    r = replay_cli("cat", tmp_path / "log", "numbers", "-F", "{offset}", expect=2)
    assert "no field 'offset'" in r.stderr and "record[NAME]" in r.stderr


def test_a_position_file_resumes_exactly_where_the_last_run_stopped(tmp_path):
    log = str(tmp_path / "log")
    pos = tmp_path / "pos.json"
    capture_numbers(log, peers=2, times=3, rows=2, finish=False)
    first = [json.loads(x) for x in replay_cli("cat", log, "numbers", "--format", "jsonl", "-n", "5",
                                               "--position-file", pos).stdout.splitlines()]
    saved = json.loads(pos.read_text())
    assert saved["stream"] == "numbers" and set(saved["next"]) == {"0", "1"}
    second = [json.loads(x) for x in replay_cli("cat", log, "numbers", "--format", "jsonl",
                                                "--position-file", pos).stdout.splitlines()]
    everything = [json.loads(x) for x in replay_cli("cat", log, "numbers", "--format", "jsonl").stdout.splitlines()]
    key = lambda r: (r["part"], r["seq"], json.dumps(r.get("record")), r["kind"])  # noqa: E731
    assert sorted(map(key, first + second)) == sorted(map(key, everything))  # every row once, none twice
    # the job goes on: a third run prints only what was written since
    cap = Capture(open_log(log), "numbers", 0, 2)
    cap.send(3, [{"n": 999, "word": "new"}])
    cap.advance_to(4)
    cap.close()
    third = [json.loads(x) for x in replay_cli("cat", log, "numbers", "--format", "jsonl", "--kind", "messages",
                                               "--position-file", pos).stdout.splitlines()]
    assert [r["record"]["n"] for r in third] == [999]
    r = replay_cli("cat", log, "other", "--position-file", pos, expect=None)
    assert r.exit_code != 0


def test_skip_damaged_reads_past_a_damaged_event_and_names_it(tmp_path):
    root = tmp_path / "log"
    capture_numbers(str(root), peers=1, times=4, rows=2)
    log = open_log(root)
    stored = log.stored("numbers", 0, 3)
    data = bytearray(open(stored.where["path"], "rb").read())
    data[stored.where["offset"] + len(stored.data) // 2] ^= 0xFF
    open(stored.where["path"], "wb").write(bytes(data))
    replay_cli("cat", root, "numbers", expect=3)  # a reader stops at the damage
    r = replay_cli("cat", root, "numbers", "--skip-damaged", "--format", "jsonl", "--kind", "messages")
    got = [json.loads(x)["record"]["n"] for x in r.stdout.splitlines()]
    assert got == [0, 1, 200, 201, 300, 301]  # time 1's event (seq 3) is the one lost
    assert "part 0: skipped seq 3 (" in r.stderr and stored.where["path"] in r.stderr
    assert "1 run(s) of damaged events skipped" in r.stderr


def test_tail_takes_the_template_and_position_file_too(tmp_path):
    log = str(tmp_path / "log")
    capture_numbers(log, peers=1, times=2, rows=1)
    pos = tmp_path / "p.json"
    out = replay_cli("tail", log, "numbers", "-n", "2", "-F", "{seq}", "--position-file", pos).stdout
    assert out.split() == ["4", "5"]  # the last two events: a Progress event and the one that finished the part
    assert json.loads(pos.read_text())["next"] == {"0": 6}
    assert SCHEMA.names == ["n", "word"]
