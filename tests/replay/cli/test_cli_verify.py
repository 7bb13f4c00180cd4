"""``replay verify``: a clean log passes; injected damage is found and located (stream, part, seq, offset, file)."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from capture import Capture
from eventlog import Messages, Progress, StreamHeader, open_log
from tests.support.cli import SCHEMA, capture_numbers, replay_cli
from tests.support.damage import index_entries, part_files


def problems(root, *args) -> tuple[list[dict], dict]:
    """Run verify --json expecting problems; returns (problems, the whole report)."""
    doc = json.loads(replay_cli("verify", root, *args, "--json", expect=1).stdout)
    assert doc["ok"] is False and doc["problems"]
    return doc["problems"], doc


def test_a_clean_log_verifies(cli_uri):
    capture_numbers(cli_uri, peers=3, times=4)
    capture_numbers(cli_uri, stream="open", peers=2, times=2, finish=False)
    out = replay_cli("verify", cli_uri).stdout
    assert "verified 2 stream(s), 5 part(s)" in out and out.rstrip().endswith("ok")
    doc = json.loads(replay_cli("verify", cli_uri, "open", "--json").stdout)
    assert doc["ok"] and [p["frontier"] for p in doc["parts"]] == [[2], [2]]
    replay_cli("verify", cli_uri, "nope", expect=3)


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_a_flipped_byte_is_located_and_reading_resumes_after_it(tmp_path, encoding):
    capture_numbers(str(tmp_path), peers=2, times=5, encoding=encoding)
    seg = part_files(tmp_path, ".arrows" if encoding == "arrow" else ".avro", part=1)[0]
    entries = index_entries(part_files(tmp_path, ".index", part=1)[0])
    victim = entries[4]
    with open(seg, "r+b") as f:
        f.seek(victim.offset + victim.length // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x40]))
    found, doc = problems(tmp_path)
    assert [(p["kind"], p["stream"], p["part"], p["seq"], p["offset"], p["path"]) for p in found] == [
        ("corrupt", "numbers", 1, victim.seq, victim.offset, seg)]
    assert "checksum" in found[0]["message"]
    part1 = next(p for p in doc["parts"] if p["part"] == 1)
    assert part1["events"] == len(entries) - 1 and part1["frontier"] is None  # read on past the damage
    text = replay_cli("verify", tmp_path, expect=1).stdout
    assert "PROBLEM corrupt" in text and f"seq {victim.seq}" in text and f"offset {victim.offset}" in text
    assert seg in text


def test_a_missing_middle_segment_is_a_gap(tmp_path):
    log = open_log(tmp_path, segment_bytes=2000)
    cap = Capture(log, "numbers", 0, 1, schema=SCHEMA)
    for t in range(40):
        cap.send(t, [{"n": t, "word": "x" * 40}])
        cap.advance_to(t + 1)
    cap.close()
    segments = log.segments("numbers", 0)
    assert len(segments) >= 4
    gone = segments[1]
    for path in part_files(tmp_path, f"{gone:020d}.arrows") + part_files(tmp_path, f"{gone:020d}.index"):
        os.unlink(path)
    found, doc = problems(tmp_path)
    gaps = [p for p in found if p["kind"] == "gap"]
    assert gaps and gaps[0]["seq"] == gone and gaps[0]["part"] == 0
    assert f"next segment starts at {segments[2]}" in gaps[0]["message"]
    read = doc["parts"][0]["events"]
    assert read == 81 - (segments[2] - gone)  # every event outside the lost segment was still checked


def test_a_missing_first_segment_is_a_gap(tmp_path):
    log = open_log(tmp_path, segment_bytes=2000)
    capture_numbers(log, peers=1, times=30)
    first, second = log.segments("numbers", 0)[:2]
    for path in part_files(tmp_path, f"{first:020d}.arrows") + part_files(tmp_path, f"{first:020d}.index"):
        os.unlink(path)
    found, _ = problems(tmp_path, "numbers")
    assert found[0]["kind"] == "gap" and f"1..{second - 1}" in found[0]["message"]


def test_torn_tails_are_reported(tmp_path):
    capture_numbers(str(tmp_path), peers=2, times=3, finish=False)
    with open(part_files(tmp_path, ".index", part=0)[-1], "ab") as f:
        f.write(b"\x07" * 10)  # half an index entry: a writer died mid-append
    found, _ = problems(tmp_path)
    assert [(p["kind"], p["part"]) for p in found] == [("torn-tail", 0)]
    assert "partial index entry" in found[0]["message"]
    # a crash right after a new segment was created: a newest segment with no index
    stray = os.path.join(tmp_path, "numbers", "part-00001", f"{99:020d}.arrows")
    with open(stray, "wb") as f:
        f.write(SCHEMA.serialize().to_pybytes()[:20])
    found, _ = problems(tmp_path)
    assert ("torn-tail", 1, stray) in [(p["kind"], p["part"], p.get("path")) for p in found]


def test_progress_rules_are_checked(tmp_path):
    log = open_log(tmp_path)
    log.create_stream(StreamHeader("bad", 1, SCHEMA))
    batch = pa.RecordBatch.from_pylist([{"n": 1, "word": "x"}], schema=SCHEMA)
    with log.writer("bad", 0) as w:  # events no Capture would write
        w.append(Progress(((0, -1), (5, 1))))
        w.append(Messages(3, batch))  # seq 2: behind the frontier [5]
        w.append(Progress(((2, 1), (5, -1))))  # seq 3: the frontier moves back to [2]
        w.append(Progress(((2, -2),)))  # seq 4: a negative count
        w.append(Progress(((2, -1),)))  # seq 5: finished
        w.append(Messages(9, batch))  # seq 6: after the part finished
    found, _ = problems(tmp_path)
    assert [(p["kind"], p["seq"]) for p in found] == [("progress", 2), ("progress", 3), ("progress", 4),
                                                      ("progress", 6)]
    messages = [p["message"] for p in found]
    assert "behind the part's frontier [5]" in messages[0] and "backwards" in messages[1]
    assert "negative" in messages[2] and "after the part finished" in messages[3]


def test_layout_and_header_problems(tmp_path):
    capture_numbers(str(tmp_path), peers=2, times=2)
    os.makedirs(tmp_path / "numbers" / "part-00005")
    idx = part_files(tmp_path, ".index", part=1)[0]
    os.rename(idx, idx.replace(".index", ".index.bak"))
    os.makedirs(tmp_path / "headless" / "part-00000")
    found, _ = problems(tmp_path)
    kinds = sorted((p["kind"], p["message"]) for p in found)
    assert ("layout", "part folder beyond the stream's 2 peers") in kinds
    assert ("layout", "stream folder without its header file") in kinds
    assert ("layout", "unexpected file in the part folder") in kinds  # the renamed index
    assert any(k == "torn-tail" and "no index" in m for k, m in kinds)  # its segment now lacks an index
    capture_numbers(str(tmp_path), stream="other", peers=1, times=1)
    (tmp_path / "other" / "header.json").write_text("{not json")
    found, _ = problems(tmp_path, "other")
    assert [(p["kind"], p["stream"]) for p in found] == [("header", "other")]


# these tests poke at the files of the 1.x layout (format 2.0 files: test_file_format2.py)
pytestmark = pytest.mark.usefixtures("file_format_1")
