"""``replay.verify``, the library behind ``replay verify``, on every log kind through the Log interface: the same
damage is reported the same way on a file log on the local disk and on the same log on S3 (a real S3 server,
the ``s3_server`` fixture); damage on Kafka is reported naming the record (topic, partition, Kafka offset) and verify goes on
after it; memory logs are checked through the same storage layer."""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from eventlog import StreamHeader, open_log
from eventlog.header import header_checksum
from replay import VerifyReport, verify
from replay.verify import KINDS, Problem
from tests.support.cli import capture_numbers, replay_cli
from tests.support.kafka import copy_with_records, numbers_records

# -- one log, local and on S3 ----------------------------------------------------------------------------------


def _local_log(root: str) -> None:
    """Two parts of several sealed segments each (format 2.0, the layout S3 logs have)."""
    capture_numbers(open_log(root, segment_bytes=1500), peers=2, times=12)


def _local_and_s3(tmp_path, s3_bucket: str) -> tuple[str, str]:  # noqa: ANN001
    """``_local_log`` in ``tmp_path``, and its files, byte for byte, as objects in ``s3_bucket``: both URIs."""
    root, s3 = str(tmp_path / "log"), f"{s3_bucket}/log"
    _local_log(root)
    fs, path = pafs.FileSystem.from_uri(s3)
    pafs.copy_files(root, path, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
    return root, s3


def _storage(uri: str):  # noqa: ANN202 - the log's Storage, to damage its files the same way on both
    log = open_log(uri)
    return log, log._st  # noqa: SLF001 - the test damages files through the log's own storage layer


def _segments(log, part: int) -> list[str]:
    d = log.part_path("numbers", part)
    return [log._st.join(d, n) for n in log._st.list_dir(d) if n.endswith(".arrow")]  # noqa: SLF001


def _index_of(segment: str) -> str:
    folder, name = segment.rsplit("/", 1)
    return f"{folder}/_{name.replace('.arrow', '.index')}"


def _flip(uri: str) -> None:
    log, st = _storage(uri)
    seg = _segments(log, 1)[0]
    data = bytearray(st.read_file(seg))
    data[len(data) // 2] ^= 0x40  # inside an event's body: its CRC-32 fails
    st.write_file(seg, bytes(data))


def _truncate(uri: str) -> None:
    log, st = _storage(uri)
    seg = _segments(log, 0)[1]  # a sealed segment with one after it
    data = st.read_file(seg)
    st.write_file(seg, data[: len(data) * 2 // 3])


def _missing_index(uri: str) -> None:
    log, st = _storage(uri)
    segs = _segments(log, 0)
    st.remove(_index_of(segs[0]))  # an older segment's index
    st.remove(_index_of(segs[-1]))  # the newest segment's (a writer died between the two puts)


def _wrong_header(uri: str) -> None:
    """The header says 1 part (re-written with a valid checksum, so only the parts can tell)."""
    log, st = _storage(uri)
    path = st.join(log.root, "numbers", "_header.json")
    doc = json.loads(st.read_file(path))
    doc["peers"] = 1
    doc["checksum"] = header_checksum(doc)
    st.write_file(path, json.dumps(doc).encode())


def _stray_files(uri: str) -> None:
    log, st = _storage(uri)
    st.write_file(st.join(log.part_path("numbers", 0), "notes.txt"), b"hello")
    for folder in (st.join(log.root, "numbers", "part=7"), st.join(log.root, "headless", "part=0")):
        st.make_dirs(folder)
        st.write_file(st.join(folder, "x"), b"")


DAMAGES = {
    "flipped-byte": (_flip, {"corrupt"}),
    "truncated-segment": (_truncate, {"corrupt"}),
    "missing-index": (_missing_index, {"layout", "torn-tail"}),
    "wrong-header": (_wrong_header, {"header"}),
    "stray-files": (_stray_files, {"layout"}),
}


def _normal(report: VerifyReport, root: str) -> tuple:
    """The report with the log's root left out of every path and message (the rest must be equal)."""
    def rel(text):  # noqa: ANN001, ANN202
        return None if text is None else text.replace(root, "<root>")

    problems = sorted((p.kind, p.stream, p.part, p.seq, p.offset, rel(p.path), rel(p.message))
                      for p in report.problems)
    parts = [(r.stream, r.part, r.events, r.last_seq, r.frontier, r.truncated, len(r.problems)) for r in report.parts]
    return problems, parts, sorted(report.headers)


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_the_same_damage_is_reported_the_same_way_on_local_disk_and_on_s3(tmp_path, s3_bucket, damage):
    root, s3 = _local_and_s3(tmp_path, s3_bucket)
    clean_local, clean_s3 = verify(open_log(root)), verify(open_log(s3))
    assert clean_local.ok and clean_s3.ok, (clean_local.problems, clean_s3.problems)
    assert _normal(clean_local, root) == _normal(clean_s3, s3.removeprefix("s3://"))

    damage_files, kinds = DAMAGES[damage]
    damage_files(root)
    damage_files(s3)
    local, remote = verify(open_log(root)), verify(open_log(s3))
    assert not local.ok and {p.kind for p in local.problems} == kinds, local.problems
    assert _normal(local, root) == _normal(remote, s3.removeprefix("s3://"))
    for p in remote.problems:  # every problem names the object it is in
        assert p.path is not None and p.path.startswith(s3.removeprefix("s3://")), p


def test_the_damage_is_located_in_the_object(tmp_path, s3_bucket):
    root, s3 = _local_and_s3(tmp_path, s3_bucket)
    _flip(s3)
    log = open_log(s3)
    (p,) = verify(log, "numbers").problems
    seg = _segments(log, 1)[0]
    assert (p.kind, p.stream, p.part, p.path) == ("corrupt", "numbers", 1, seg) and "checksum" in p.message
    assert p.seq is not None and p.offset is not None
    # the CLI is a shell over the library: the same problem, and exit 1
    doc = json.loads(replay_cli("verify", s3, "--json", expect=1).stdout)
    assert [(q["kind"], q["seq"], q["offset"], q["path"]) for q in doc["problems"]] == [
        ("corrupt", p.seq, p.offset, p.path)]


def test_the_cli_reports_what_only_the_layout_shows_on_s3(tmp_path, s3_bucket):
    root, s3 = _local_and_s3(tmp_path, s3_bucket)
    _wrong_header(s3)
    out = replay_cli("verify", s3, expect=1).stdout
    assert "PROBLEM header" in out and "disagrees with the parts" in out


# -- memory logs -------------------------------------------------------------------------------------------------


def test_memory_logs_are_checked_through_the_same_storage_layer():
    uri = f"memory://verify-{uuid.uuid4().hex[:8]}"
    capture_numbers(uri, peers=2, times=3)
    report = verify(open_log(uri))
    assert report.ok and [r.events for r in report.parts] == [7, 7]
    _stray_files(uri)
    problems = verify(open_log(uri)).problems
    assert {(p.kind, p.message) for p in problems} == {
        ("layout", "unexpected file in the part folder"), ("layout", "part folder beyond the stream's 2 peers"),
        ("layout", "stream folder without its header file")}
    (p,) = verify(open_log(uri), "headless").problems  # asked for by name: its folder lost its header
    assert p.kind == "layout" and p.stream == "headless"
    with pytest.raises(KeyError):
        verify(open_log(uri), "nope")


def test_problems_are_typed_and_located():
    p = Problem("gap", "expected seq 3, read 4", "s", 0, 4, 17, record="t.s[0]@17")
    assert p.kind in KINDS and p.located
    assert p.where() == "stream 's' part 0 seq 4 offset 17 record t.s[0]@17"
    assert p.to_json() == {"kind": "gap", "message": "expected seq 3, read 4", "stream": "s", "part": 0, "seq": 4,
                           "offset": 17, "record": "t.s[0]@17"}


# -- Kafka ---------------------------------------------------------------------------------------------------------


def _copy_part(report: VerifyReport):  # noqa: ANN202
    return next(r for r in report.parts if r.stream == "copy")


@pytest.mark.kafka
def test_foreign_records_in_a_kafka_topic_are_each_reported_naming_the_record(kafka_uri, kafka_bootstrap):
    data = numbers_records(kafka_uri, kafka_bootstrap)
    other = StreamHeader("copy", 1, pa.schema([("z", pa.string())]), version=(2, 0))  # a header of another schema
    lying = data[8]  # seq 9, Messages at time 4: its headers say time 5
    assert dict(lying.headers())["eventlog.time"] == b"4"
    lying = (lying.value(), [(k, b"5" if k == "eventlog.time" else v) for k, v in lying.headers()])
    items = [*data[:4], (b"not an eventlog record", None), *data[4:8], (other.to_json(), [("eventlog.kind", b"header")]),
             lying, *data[9:]]
    log, topic, offsets = copy_with_records(kafka_uri, kafka_bootstrap, items)
    report = verify(log, "copy")
    found = [(p.kind, p.seq, p.offset, p.record) for p in report.problems]
    garbage, header, lie = offsets[4], offsets[9], offsets[10]
    assert ("corrupt", None, garbage, f"{topic}[0]@{garbage}") in found, report.problems
    assert ("header", None, header, f"{topic}[0]@{header}") in found, report.problems
    assert ("corrupt", 9, lie, f"{topic}[0]@{lie}") in found, report.problems
    assert all(p.stream == "copy" and p.part == 0 for p in report.problems)
    assert len(found) == len(set(found)) == 3  # each once, though reading and the record check both met some
    text = replay_cli("verify", kafka_uri, "copy", expect=1).stdout
    assert f"record {topic}[0]@{garbage}" in text and f"record {topic}[0]@{header}" in text


@pytest.mark.kafka
def test_duplicated_kafka_records_are_dropped_and_named_and_a_changed_one_is_a_problem(kafka_uri, kafka_bootstrap):
    data = numbers_records(kafka_uri, kafka_bootstrap)
    changed = (data[6].value(), data[2].headers())  # seq 3 again, with another event's value
    items = [*data[:5], data[1], *data[5:9], changed, *data[9:]]
    log, topic, offsets = copy_with_records(kafka_uri, kafka_bootstrap, items)
    report = verify(log, "copy")
    part = _copy_part(report)
    assert part.events == 13 and part.last_seq == 13 and part.frontier is not None  # read through, rules kept
    assert part.duplicates == 2
    assert [(d.seq, d.offset, d.record) for d in part.dropped] == [
        (2, offsets[5], f"{topic}[0]@{offsets[5]}"), (3, offsets[10], f"{topic}[0]@{offsets[10]}")]
    (p,) = report.problems
    assert (p.kind, p.seq, p.offset, p.record) == ("duplicate", 3, offsets[10], f"{topic}[0]@{offsets[10]}")
    assert f"first at kafka offset {offsets[2]}" in p.message
    doc = json.loads(replay_cli("verify", kafka_uri, "copy", "--json", expect=1).stdout)
    assert doc["parts"][0]["duplicates"] == 2 and doc["problems"][0]["record"] == p.record


@pytest.mark.kafka
def test_a_gap_in_a_kafka_part_names_the_record_and_reading_goes_on(kafka_uri, kafka_bootstrap):
    data = numbers_records(kafka_uri, kafka_bootstrap)
    log, topic, offsets = copy_with_records(kafka_uri, kafka_bootstrap, [*data[:2], *data[3:]])  # seq 3 is missing
    report = verify(log, "copy")
    (p,) = report.problems
    assert (p.kind, p.seq, p.offset, p.record) == ("gap", 4, offsets[2], f"{topic}[0]@{offsets[2]}")
    assert "expected 3, got 4" in p.message
    part = _copy_part(report)
    assert part.events == 12 and part.last_seq == 13 and part.frontier is None  # read past the gap
    # a clean Kafka log verifies, every part's records checked
    clean = verify(log, "numbers")
    assert clean.ok and [r.events for r in clean.parts] == [13]
    assert log.check_part("numbers", 0) == []

