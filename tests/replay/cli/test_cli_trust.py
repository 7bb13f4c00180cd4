"""The CLI never hides a problem: ``replay verify`` reports every damaged part and header and goes on,
verify decodes and validates every record batch, a path that is not a log is a usage error, and output
options overwrite regular files only."""

from __future__ import annotations

import base64
import json
import os
import stat
import struct
import subprocess
import sys

import pytest

from connectors.files import FileLog
from connectors.files import index as ix
from eventlog import CorruptLogError, StreamHeader, open_log
from tests.support.cli import SCHEMA, capture_numbers, replay_cli
from tests.support.damage import index_entries, part_files
from tests.support.paths import ROOT


def verify_json(root, *args, expect=1) -> dict:
    return json.loads(replay_cli("verify", root, *args, "--json", expect=expect).stdout)


def two_streams(root, encoding="arrow") -> None:
    capture_numbers(str(root), peers=3, times=3, encoding=encoding)
    capture_numbers(str(root), stream="other", peers=2, times=2, encoding=encoding)


def events_of(doc: dict) -> dict:
    return {(p["stream"], p["part"]): p["events"] for p in doc["parts"]}


# -- verify goes on after damage --------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
@pytest.mark.parametrize("where", [0, 4, 9])
def test_damage_to_a_segments_first_bytes_is_one_located_problem(tmp_path, encoding, where):
    """The Arrow schema message / Avro container header of part 1's segment is damaged: verify names the
    file, checks every other part and stream, and exits 1 (it used to abort with exit 3, naming no file)."""
    two_streams(tmp_path, encoding)
    clean = events_of(verify_json(tmp_path, expect=0))
    seg = part_files(tmp_path, ".arrows" if encoding == "arrow" else ".avro", part=1)[0]
    raw = bytearray(open(seg, "rb").read())
    for i in range(where, where + 6):
        raw[i] ^= 0xA5
    open(seg, "wb").write(bytes(raw))
    doc = verify_json(tmp_path)
    mine = [p for p in doc["problems"] if (p["stream"], p.get("part")) == ("numbers", 1)]
    assert mine and all(p["kind"] in ("corrupt", "header") for p in mine)
    assert any(p.get("path") == seg for p in mine), mine
    assert all(p.get("part") == 1 for p in doc["problems"] if p["stream"] == "numbers")
    assert not [p for p in doc["problems"] if p["stream"] == "other"]
    got = events_of(doc)
    for key, n in clean.items():
        if key != ("numbers", 1):
            assert got[key] == n, key  # everything else was read to its end


def test_an_unreadable_error_in_one_part_does_not_stop_verify(tmp_path, monkeypatch):
    """Whatever a reader raises (here a bug: a RuntimeError) is a problem of that part, located at the
    segment it was reading; the other parts and streams are still verified."""
    two_streams(tmp_path)
    real = FileLog.reader

    def reader(self, stream, part, start=1, *, progress_only=False):
        r = real(self, stream, part, start, progress_only=progress_only)
        if (stream, part) != ("numbers", 2):
            return r

        class Exploding:
            tail_problem = None
            next_seq = r.next_seq

            def __iter__(self):
                raise RuntimeError("boom")
                yield

            def close(self):
                r.close()

        return Exploding()

    monkeypatch.setattr(FileLog, "reader", reader)
    doc = verify_json(tmp_path)
    (problem,) = doc["problems"]
    seg = part_files(tmp_path, ".arrows", part=2)[0]
    assert (problem["kind"], problem["stream"], problem["part"], problem["path"]) == ("corrupt", "numbers", 2, seg)
    assert "RuntimeError: boom" in problem["message"]
    assert events_of(doc)[("other", 1)] == 5 and events_of(doc)[("numbers", 0)] == 7


def test_a_part_with_damage_after_damage_says_verify_stopped_reading_it(tmp_path):
    capture_numbers(str(tmp_path), peers=2, times=30)
    seg = part_files(tmp_path, ".arrows", part=0)[0]
    raw = bytearray(open(seg, "rb").read())
    entries = index_entries(part_files(tmp_path, ".index", part=0)[0])
    for e in entries[::2]:
        raw[e.offset + e.length // 2] ^= 0x10  # 31 damaged events
    open(seg, "wb").write(bytes(raw))
    doc = verify_json(tmp_path)
    parts = {p["part"]: p for p in doc["parts"]}
    assert parts[0]["problems"] >= 20 and parts[0]["truncated"] is True
    assert parts[1]["problems"] == 0 and parts[1]["truncated"] is False and parts[1]["events"] == 61
    assert "more may follow" in replay_cli("verify", tmp_path, expect=1).stdout


def _damage_schema(header_path: str) -> None:
    doc = json.load(open(header_path))
    schema = bytearray(base64.b64decode(doc["schema"]))
    schema[8:20] = b"\xff" * 12
    doc["schema"] = base64.b64encode(bytes(schema)).decode()
    open(header_path, "w").write(json.dumps(doc))


@pytest.mark.parametrize("damage", ["schema", "json", "empty"])
def test_an_unreadable_header_is_a_problem_of_its_stream_only(tmp_path, damage):
    two_streams(tmp_path)
    path = str(tmp_path / "numbers" / "header.json")
    if damage == "schema":
        _damage_schema(path)
    else:
        open(path, "w").write("{not json" if damage == "json" else "")
    doc = verify_json(tmp_path)
    assert [(p["kind"], p["stream"], p.get("path")) for p in doc["problems"]] == [("header", "numbers", path)]
    assert events_of(doc) == {("other", 0): 5, ("other", 1): 5}
    text = replay_cli("verify", tmp_path, expect=1).stdout
    assert "PROBLEM header" in text and path in text
    doc = verify_json(tmp_path, "numbers")  # asked for by name: still a problem, not a crash
    assert [p["kind"] for p in doc["problems"]] == ["header"]


def test_a_header_whose_peers_disagree_with_the_parts_is_reported(tmp_path):
    """The header says 2 parts (re-written, so its own checks pass) while part-00002 holds events."""
    capture_numbers(str(tmp_path), peers=3, times=2)
    old = open_log(tmp_path).header("numbers")
    (tmp_path / "numbers" / "header.json").write_bytes(
        StreamHeader("numbers", 2, SCHEMA, old.time_type, old.encoding, old.created).to_json())
    doc = verify_json(tmp_path)
    (problem,) = doc["problems"]
    assert (problem["kind"], problem["part"]) == ("header", 2)
    assert problem["path"] == str(tmp_path / "numbers" / "part-00002") and "disagrees" in problem["message"]


def test_segments_of_another_encoding_are_a_header_problem(tmp_path):
    capture_numbers(str(tmp_path), peers=1, times=2)
    seg = part_files(tmp_path, ".arrows")[0]
    os.rename(seg, seg.replace(".arrows", ".avro"))
    doc = verify_json(tmp_path)
    assert any(p["kind"] == "header" and "avro encoding" in p["message"] and p["path"].endswith(".avro")
               for p in doc["problems"])


# -- check_part: the file log's own look at a part's files ----------------------------------------------------


def test_what_check_part_finds_is_reported_once(tmp_path, monkeypatch):
    capture_numbers(str(tmp_path), peers=2, times=2, finish=False)
    idx = part_files(tmp_path, ".index", part=0)[0]
    with open(idx, "ab") as f:
        f.write(b"\x01" * 7)  # a torn tail the reader reports too
    seg1 = part_files(tmp_path, ".arrows", part=1)[0]
    calls = []

    def check_part(self, stream, part):
        calls.append((stream, part))
        if part == 0:
            return [CorruptLogError("torn tail: partial index entry", stream=stream, part=0, path=idx, offset=400)]
        return [CorruptLogError("index is shorter than its segment: 2 whole events after its last entry",
                                stream=stream, part=1, path=seg1, offset=900, seq=6)]

    monkeypatch.setattr(FileLog, "check_part", check_part, raising=False)
    doc = verify_json(tmp_path)
    assert sorted(calls) == [("numbers", 0), ("numbers", 1)]
    found = sorted((p["kind"], p["part"]) for p in doc["problems"])
    assert found == [("corrupt", 1), ("torn-tail", 0)]  # the torn tail once, though both saw it
    corrupt = next(p for p in doc["problems"] if p["kind"] == "corrupt")
    assert (corrupt["path"], corrupt["offset"], corrupt["seq"]) == (seg1, 900, 6)

    def failing(self, stream, part):
        raise OSError(5, "Input/output error", seg1)

    monkeypatch.setattr(FileLog, "check_part", failing, raising=False)
    doc = verify_json(tmp_path)
    assert any(p["kind"] == "corrupt" and "OSError" in p["message"] and p["part"] == 1 for p in doc["problems"])


# -- every batch is validated ---------------------------------------------------------------------------------


def _overstate_rows(seg: str, idx: str, entry: ix.IndexEntry, rows: int, claimed: int) -> None:
    """Make the event's RecordBatch message claim ``claimed`` rows instead of ``rows`` (its buffers stay),
    then fix its checksums in the index: only decoding can tell."""
    data = bytearray(open(seg, "rb").read())
    body = data[entry.offset:entry.offset + entry.length]
    assert body[:4] == b"\xff\xff\xff\xff"
    meta_len = struct.unpack_from("<i", body, 4)[0]
    meta = body[8:8 + meta_len]
    old, new = struct.pack("<q", rows), struct.pack("<q", claimed)
    assert meta.count(old) >= 2  # RecordBatch.length and the field nodes' lengths
    body[8:8 + meta_len] = meta.replace(old, new)
    data[entry.offset:entry.offset + entry.length] = body
    open(seg, "wb").write(bytes(data))
    raw = bytearray(open(idx, "rb").read())
    pos = ix.HEADER_SIZE + (entry.seq - int(os.path.basename(idx).split(".")[0])) * ix.ENTRY_SIZE
    raw[pos:pos + ix.ENTRY_SIZE] = ix.pack_entry(entry._replace(crc=ix.checksum(bytes(body))))
    open(idx, "wb").write(bytes(raw))


def test_an_event_claiming_more_rows_than_its_buffers_hold_is_reported(tmp_path):
    capture_numbers(str(tmp_path), peers=1, times=3, rows=37)
    seg, idx = part_files(tmp_path, ".arrows")[0], part_files(tmp_path, ".index")[0]
    victim = next(e for e in index_entries(idx) if e.kind == ix.KIND_MESSAGES and e.seq > 1)
    _overstate_rows(seg, idx, victim, 37, 1 << 20)
    # a subprocess: reading such a batch's data without validation may crash the interpreter
    out = subprocess.run([sys.executable, "-m", "replay.cli", "verify", str(tmp_path), "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    problems = json.loads(out.stdout)["problems"]
    hit = [p for p in problems if p.get("seq") == victim.seq]
    assert hit and hit[0]["kind"] == "corrupt", problems
    assert (hit[0]["path"], hit[0]["offset"]) == (seg, victim.offset)


# -- paths that are not logs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["verify"], ["ls"], ["info", "numbers"], ["cat", "numbers"],
                                     ["stats", "numbers"], ["frontier", "numbers"]])
def test_a_stream_folder_is_not_a_log(tmp_path, command):
    capture_numbers(str(tmp_path), peers=1, times=1)
    stream_dir = tmp_path / "numbers"
    r = replay_cli(command[0], stream_dir, *command[1:], expect=2)
    hint = f"replay {command[0]} {tmp_path}" + ("" if command[0] == "ls" else " numbers")
    assert "stream 'numbers'" in r.stderr and hint in r.stderr  # the command that works (ls takes no stream)
    r = replay_cli(command[0], stream_dir / "part-00000", *command[1:], expect=2)
    assert "part 0 of stream 'numbers'" in r.stderr


def test_a_folder_without_streams_or_a_file_is_not_a_log(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "photos").mkdir()
    r = replay_cli("verify", tmp_path, expect=2)
    assert "is not a log" in r.stderr and "header.json" in r.stderr
    r = replay_cli("verify", tmp_path / "notes.txt", expect=2)
    assert "is not a log" in r.stderr and "regular file" in r.stderr
    replay_cli("ls", tmp_path, expect=2)
    empty = tmp_path / "empty"
    empty.mkdir()
    r = replay_cli("verify", empty, expect=0)  # an empty folder is an empty log
    assert "no streams" in r.stderr
    capture_numbers(str(tmp_path), peers=1, times=1)  # now a log that also holds other files
    replay_cli("verify", tmp_path, expect=0)


def test_copy_refuses_a_stream_folder_as_destination(tmp_path):
    capture_numbers(str(tmp_path / "a"), peers=1, times=1)
    capture_numbers(str(tmp_path / "b"), stream="x", peers=1, times=1)
    r = replay_cli("copy", tmp_path / "a", tmp_path / "b" / "x", "numbers", expect=2)
    assert "stream 'x'" in r.stderr
    assert not (tmp_path / "b" / "x" / "numbers").exists()


# -- output files -----------------------------------------------------------------------------------------------


def test_export_force_overwrites_regular_files_only(tmp_path):
    log = tmp_path / "log"
    capture_numbers(str(log), peers=1, times=2)
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    for target in (fifo, tmp_path / "link-to-fifo.jsonl"):
        if target != fifo:
            os.symlink(fifo, target)
        r = replay_cli("export", log, "numbers", target, "--force", expect=2)
        assert "fifo" in r.stderr and "regular files" in r.stderr
        assert stat.S_ISFIFO(os.stat(target).st_mode)  # untouched
    os.symlink(tmp_path, tmp_path / "link-to-dir.jsonl")
    replay_cli("export", log, "numbers", tmp_path / "link-to-dir.jsonl", "--force", expect=2)
    dangling = tmp_path / "dangling.jsonl"
    os.symlink(tmp_path / "nowhere", dangling)
    r = replay_cli("export", log, "numbers", dangling, "--force", expect=2)
    assert "broken symbolic link" in r.stderr
    regular = tmp_path / "out.jsonl"
    regular.write_text("old\n")
    replay_cli("export", log, "numbers", regular, expect=2)  # exists, no --force
    replay_cli("export", log, "numbers", regular, "--force")
    assert len(regular.read_text().splitlines()) == 4
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_frontier_plot_refuses_devices(tmp_path):
    capture_numbers(str(tmp_path / "log"), peers=1, times=2)
    os.symlink("/dev/null", tmp_path / "null.svg")
    r = replay_cli("frontier", tmp_path / "log", "numbers", "--plot", tmp_path / "null.svg", expect=2)
    assert "device" in r.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


# these tests poke at the files of the 1.x layout (format 2.0 files: test_file_format2.py)
pytestmark = pytest.mark.usefixtures("file_format_1")
