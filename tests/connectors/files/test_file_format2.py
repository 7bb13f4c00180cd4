"""Format 2.0 file logs: a stream folder is a dataset any Arrow tool scans, and the 2.0 layout (sealed IPC
files with a footer, hidden open segments and indexes, Hive part folders) keeps every trust rule of 1.x:
crashes at any step, damaged bytes, footers that disagree with the segment."""

from __future__ import annotations

import json
import os
import random
import shutil
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.ipc as ipc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capture import Capture
from connectors.files import FileLog
from connectors.files import index as ix
from connectors.files.storage import LocalStorage
from eventlog import CorruptLogError, EventLogError, SchemaMismatchError, StreamHeader, open_log
from eventlog.encoding.ipc_file import Block, footer
from replay import Replayer, copy
from tests.support.damage import Crash, damaged_copy, deadline, same, sample_offsets
from tests.support.paths import GOLDEN_LOGS

SCHEMA = pa.schema([("x", pa.int64()), ("s", pa.string())])
GOLDEN = str(GOLDEN_LOGS)


def rows(t: int) -> list[dict]:
    return [{"x": t * 100 + i, "s": "r" * (t % 5)} for i in range(t % 3 + 1)]


def capture(root: str, *, stream: str = "s", peers: int = 1, times: int = 6, segment_bytes: int = 64 << 20,
            close: bool = True) -> list[Any]:
    """Capture ``times`` times into every part of ``stream``; return part 0's entries read back."""
    log = FileLog(root, segment_bytes=segment_bytes)
    for w in range(peers):
        cap = Capture(log, stream, w, peers, schema=SCHEMA)
        for t in range(times):
            cap.send(t, rows(t))
            cap.advance_to(t + 1)
        if close:
            cap.close()
    return list(FileLog(root).reader(stream, 0))


def part_dir(root: str, part: int = 0, stream: str = "s") -> str:
    return os.path.join(root, stream, f"part={part}")


def files(root: str, part: int = 0) -> list[str]:
    d = part_dir(root, part)
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f != ".lock")


def expected_rows(log, stream: str = "s") -> list[tuple]:
    """(x, s, _time, _seq, part) of every committed record, as the replayer delivers them."""
    out = []
    header = log.header(stream)
    for part in range(header.peers):
        for e in log.reader(stream, part):
            if hasattr(e.event, "records"):
                for r in e.event.records.to_pylist():
                    out.append((r["x"], r["s"], e.event.time, e.seq, part))
    return sorted(out)


# -- a stream folder is a dataset ----------------------------------------------------------------------------


def test_the_layout_hides_everything_that_is_not_sealed_data(tmp_path):
    root = str(tmp_path)
    capture(root, peers=2)
    assert sorted(os.listdir(tmp_path / "s")) == ["_header.json", "part=0", "part=1"]
    assert sorted(os.listdir(part_dir(root))) == [".lock", "00000000000000000001.arrow", "_00000000000000000001.index"]
    header = json.loads((tmp_path / "s" / "_header.json").read_text())
    assert header["version"] == "2.0"
    seg = os.path.join(part_dir(root), "00000000000000000001.arrow")
    reader = ipc.open_file(seg)  # a sealed segment is an Arrow IPC file: its footer lists every event
    assert reader.schema.names == ["x", "s", "_time", "_seq"]
    entries = list(FileLog(root).reader("s", 0))
    assert reader.num_record_batches == len(entries)
    batch, meta = reader.get_batch_with_custom_metadata(0)
    assert meta[b"eventlog.seq"] == b"1" and meta[b"eventlog.kind"] == b"messages"


def test_pyarrow_polars_and_duckdb_read_a_stream_folder_as_one_table(tmp_path):
    root = str(tmp_path)
    capture(root, peers=3, segment_bytes=700)  # several sealed segments per part
    want = expected_rows(FileLog(root))
    assert len(want) > 10
    folder = str(tmp_path / "s")

    table = ds.dataset(folder, format="arrow", partitioning="hive").to_table()
    got = sorted(zip(*(table.column(c).to_pylist() for c in ("x", "s", "_time", "_seq", "part"))))
    assert got == want

    import polars as pl

    frame = pl.scan_ipc(os.path.join(folder, "**", "*.arrow"), hive_partitioning=True).collect()
    assert sorted(frame.select("x", "s", "_time", "_seq", "part").iter_rows()) == want

    import duckdb

    dataset = ds.dataset(folder, format="arrow", partitioning="hive")  # noqa: F841 - DuckDB finds it by name
    per_time = duckdb.sql("select _time, count(*) from dataset group by 1 order by 1").fetchall()
    counts: dict[int, int] = {}
    for r in want:
        counts[r[2]] = counts.get(r[2], 0) + 1
    assert per_time == sorted(counts.items())


def test_product_times_are_a_list_column(tmp_path):
    log = FileLog(str(tmp_path))
    with Capture(log, "p", 0, 1, schema=SCHEMA, time="product:2") as cap:
        cap.send((0, 1), [{"x": 1, "s": "a"}, {"x": 2, "s": "b"}])
        cap.advance_to((1, 0))
        cap.send((1, 3), [{"x": 3, "s": "c"}])
    table = ds.dataset(str(tmp_path / "p"), format="arrow").to_table()
    assert table.schema.field("_time").type == pa.list_(pa.int64())
    assert sorted(zip(table.column("x").to_pylist(), table.column("_time").to_pylist())) == [
        (1, [0, 1]), (2, [0, 1]), (3, [1, 3])]
    got = [e.event.time for e in log.reader("p", 0) if hasattr(e.event, "records")]
    assert got == [(0, 1), (1, 3)]


def test_a_live_stream_scans_its_sealed_segments_while_the_open_one_is_hidden(tmp_path):
    root = str(tmp_path)
    log = FileLog(root, segment_bytes=700)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    for t in range(8):
        cap.send(t, rows(t))
        cap.advance_to(t + 1)
    cap.send(8, rows(8))  # the open segment holds records
    total = sum(len(rows(t)) for t in range(9))
    names = os.listdir(part_dir(root))
    opened = [n for n in names if n.endswith(".arrow.open")]
    assert len(opened) == 1 and opened[0].startswith("_")
    sealed = ds.dataset(str(tmp_path / "s"), format="arrow").to_table()  # no InvalidFooter from the open one
    assert 0 < sealed.num_rows < total
    cap.advance_to(9)
    assert len(list(log.reader("s", 0))) == cap.next_seq - 1  # eventlog's readers see the open segment too
    cap.close()
    assert not [n for n in os.listdir(part_dir(root)) if n.endswith(".open")]
    assert ds.dataset(str(tmp_path / "s"), format="arrow").to_table().num_rows == total


def test_the_write_time_of_every_event_is_recorded(tmp_path):
    import time

    before = time.time_ns() // 1_000_000
    capture(str(tmp_path), times=3)
    after = time.time_ns() // 1_000_000
    reader = ipc.open_file(os.path.join(part_dir(str(tmp_path)), "00000000000000000001.arrow"))
    stamps = [int(reader.get_batch_with_custom_metadata(i)[1][b"eventlog.ts"]) for i in range(reader.num_record_batches)]
    assert len(stamps) == 7 and stamps == sorted(stamps) and before <= stamps[0] and stamps[-1] <= after


def test_a_schema_with_the_file_columns_is_refused_and_creates_nothing(tmp_path):
    schema = pa.schema([("x", pa.int64()), ("_seq", pa.int64())])
    with pytest.raises(SchemaMismatchError, match="_seq"):
        FileLog(str(tmp_path)).create_stream(StreamHeader("s", 1, schema))
    assert not os.path.exists(tmp_path / "s")
    # the 1.2 layout has no such columns: the schema is fine there
    FileLog(str(tmp_path), format="1.2").create_stream(StreamHeader("s", 1, schema))
    assert os.path.exists(tmp_path / "s" / "header.json")


# -- versions -------------------------------------------------------------------------------------------------


def test_a_1_2_stream_keeps_its_layout_when_appended_to(tmp_path):
    root = str(tmp_path)
    cap = Capture(FileLog(root, format="1.2"), "s", 0, 1, schema=SCHEMA)
    cap.send(0, rows(0))
    cap.advance_to(1)
    cap.abort()  # released unfinished: another writer continues the part
    with Capture(FileLog(root), "s", 0, 1, schema=SCHEMA) as cap:  # the default log creates 2.0 streams
        assert cap.next_seq > 1
        cap.send(1, rows(1))
    assert sorted(os.listdir(tmp_path / "s")) == ["header.json", "part-00000"]
    assert all(n.endswith((".arrows", ".index")) or n == ".lock" for n in os.listdir(tmp_path / "s" / "part-00000"))
    assert FileLog(root).header("s").version == (1, 2)
    assert [e.event.time for e in FileLog(root).reader("s", 0) if hasattr(e.event, "records")] == [0, 1]


def test_the_format_is_chosen_by_option_or_environment(tmp_path, monkeypatch):
    assert FileLog(str(tmp_path / "a")).format_version == (2, 0)
    assert open_log(str(tmp_path / "b"), format="1.2").format_version == (1, 2)
    monkeypatch.setenv("EVENTLOG_FILE_FORMAT", "1.2")
    assert FileLog(str(tmp_path / "c")).format_version == (1, 2)
    with pytest.raises(ValueError, match="2.0"):
        FileLog(str(tmp_path / "d"), format="1.1")


def test_copy_upgrades_a_golden_1_0_log_to_a_dataset(tmp_path):
    src = open_log(GOLDEN)
    stream = sorted(s for s in src.streams() if src.header(s).encoding == "arrow")[0]
    assert src.header(stream).version == (1, 0)
    copy(src, str(tmp_path), stream)
    dst = open_log(str(tmp_path))
    assert dst.header(stream).version == (2, 0)
    want = list(Replayer(src, stream).completed())
    got = list(Replayer(dst, stream).completed())
    assert [t for t, _ in got] == [t for t, _ in want]
    assert all(a.equals(b) for (_, a), (_, b) in zip(got, want))
    table = ds.dataset(str(tmp_path / stream), format="arrow", partitioning="hive").to_table()
    assert table.num_rows == sum(tb.num_rows for _, tb in want)


# -- crashes and damage ---------------------------------------------------------------------------------------


def _crashed(root: str, times: int = 5) -> list[Any]:
    """A part as a writer killed mid-segment leaves it: the open segment has no footer and its name is still
    the hidden one (a copy of the files taken while the writer was alive). Returns the events written."""
    live = root + "-live"
    log = FileLog(live, segment_bytes=900)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    for t in range(times):
        cap.send(t, rows(t))
        cap.advance_to(t + 1)
    shutil.copytree(live, root, ignore=shutil.ignore_patterns(".lock"))
    cap.close()
    shutil.rmtree(live)
    return list(FileLog(root).reader("s", 0))


def test_the_next_writer_seals_the_segment_a_crashed_writer_left_open(tmp_path):
    root = str(tmp_path / "log")
    original = _crashed(root)
    opened = [f for f in files(root) if f.endswith(".open")]
    assert len(opened) == 1
    with pytest.raises(pa.ArrowInvalid):
        ipc.open_file(opened[0])  # no footer yet: hidden from dataset tools by its name
    ds.dataset(str(tmp_path / "log" / "s"), format="arrow").count_rows()  # the open segment is skipped
    w = FileLog(root).writer("s", 0)
    assert w.next_seq == len(original) + 1
    w.close()
    assert not [f for f in files(root) if f.endswith(".open")]
    sealed = os.path.join(part_dir(root), os.path.basename(opened[0])[1:].removesuffix(".open"))
    assert ipc.open_file(sealed).num_record_batches > 0
    got = list(FileLog(root).reader("s", 0))
    assert len(got) == len(original) and all(same(a, b) for a, b in zip(got, original))
    assert FileLog(root).check_part("s", 0) == []


class _CrashingStorage(LocalStorage):
    """Dies at the ``crash_at``-th change it makes to the part's files."""

    def __init__(self, crash_at: int) -> None:
        self.crash_at, self.changes = crash_at, 0

    def _change(self) -> None:
        self.changes += 1
        if self.changes == self.crash_at:
            raise Crash

    def write_file(self, path, data):  # noqa: ANN001, ANN201
        self._change()
        super().write_file(path, data)

    def remove(self, path):  # noqa: ANN001, ANN201
        self._change()
        super().remove(path)

    def truncate(self, path, size):  # noqa: ANN001, ANN201
        self._change()
        super().truncate(path, size)

    def append_to(self, path):  # noqa: ANN001, ANN201
        self._change()
        out = super().append_to(path)
        crash = self.changes + 1 == self.crash_at

        class _Half:  # the crash comes half-way through the footer's bytes
            def write(self, data: bytes) -> None:
                if crash:
                    out.write(data[: len(data) // 2])
                    out.close()
                    raise Crash
                out.write(data)

            def fsync(self) -> None:
                out.fsync()

            def close(self) -> None:
                out.close()

        self.changes += 1
        return _Half()

    def rename(self, src, dst):  # noqa: ANN001, ANN201
        self._change()
        super().rename(src, dst)


def test_sealing_survives_a_crash_at_every_step(tmp_path):
    """The next writer of a part a crashed writer left (a torn tail after the open segment's events) cuts the
    tail, writes the footer and renames the segment; killed at any of those steps, the writer after it
    finishes the job and every whole event is there."""
    base = str(tmp_path / "base")
    original = _crashed(base)
    (seg,) = [f for f in files(base) if f.endswith(".open")]
    with open(seg, "ab") as f:  # a partial event after the whole ones
        f.write(b"\xff\xff\xff\xff\x80\x00\x00")
    crash_at = 1
    while True:
        root = str(tmp_path / f"crash{crash_at}")
        shutil.copytree(base, root)
        try:
            FileLog(root, storage=_CrashingStorage(crash_at)).writer("s", 0).close()
            completed = True
        except Crash:
            completed = False
        w = FileLog(root).writer("s", 0)
        assert w.next_seq == len(original) + 1, crash_at
        w.close()
        got = list(FileLog(root).reader("s", 0))
        assert len(got) == len(original) and all(same(a, b) for a, b in zip(got, original)), crash_at
        assert FileLog(root).check_part("s", 0) == [], crash_at
        assert not [f for f in files(root) if f.endswith((".open", ".tmp"))], crash_at
        for f in files(root):
            if f.endswith(".arrow"):
                assert ipc.open_file(f).num_record_batches > 0
        shutil.rmtree(root)
        if completed:
            break
        crash_at += 1
    assert crash_at >= 4  # the cut, the footer (twice: half of it, then whole), the rename


def test_a_footer_that_does_not_list_the_events_is_a_corrupt_log_error(tmp_path):
    root = str(tmp_path)
    capture(root, times=4)
    seg = os.path.join(part_dir(root), "00000000000000000001.arrow")
    data = open(seg, "rb").read()
    reader = ipc.open_file(seg)
    n = reader.num_record_batches
    eos = len(data) - 10 - int.from_bytes(data[-10:-6], "little") - 8
    # a footer that lists the batches out of order: pyarrow would read them in that order
    idx = open(os.path.join(part_dir(root), "_00000000000000000001.index"), "rb").read()
    entries = [ix.unpack_entry(idx, ix.HEADER_SIZE + i * ix.ENTRY_SIZE) for i in range(n)]
    blocks = []
    for e in entries:
        meta = 8 + int.from_bytes(data[e.offset + 4 : e.offset + 8], "little", signed=True)
        blocks.append(Block(e.offset, meta, e.length - meta))
    blocks[0], blocks[1] = blocks[1], blocks[0]
    schema_message = data[8 : entries[0].offset]
    open(seg, "wb").write(data[:eos] + footer(schema_message, blocks))
    assert ipc.open_file(seg).num_record_batches == n  # a valid file that lies
    with pytest.raises(CorruptLogError, match="footer") as e:
        list(FileLog(root).reader("s", 0))
    assert e.value.path == seg and e.value.part == 0
    problems = FileLog(root).check_part("s", 0)
    assert any("footer" in p.reason and p.path == seg for p in problems)


def test_columns_that_disagree_with_the_event_are_a_corrupt_log_error(tmp_path, monkeypatch):
    from eventlog.encoding import arrow_file

    real = arrow_file._FileSegmentEncoder._rows

    def lying(self, event, seq):  # noqa: ANN001, ANN202
        batch = real(self, event, seq)
        return batch.set_column(batch.schema.get_field_index("_seq"), pa.field("_seq", pa.int64(), nullable=False),
                                pa.array([seq + 1] * batch.num_rows, pa.int64()))

    monkeypatch.setattr(arrow_file._FileSegmentEncoder, "_rows", lying)
    log = FileLog(str(tmp_path))
    with Capture(log, "s", 0, 1, schema=SCHEMA) as cap:
        cap.send(0, rows(0))
    monkeypatch.undo()
    with pytest.raises(CorruptLogError, match="_seq column") as e:
        list(FileLog(str(tmp_path)).reader("s", 0))
    assert e.value.seq == 1 and e.value.path.endswith("00000000000000000001.arrow")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-(1 << 63), (1 << 63) - 1) | st.sampled_from([0, 7, -1]), max_size=40),
       st.integers(0, 5), st.integers(-(1 << 64), 1 << 64) | st.sampled_from([0, 7, -1]))
def test_a_column_is_constant_exactly_when_every_row_it_shows_is_the_value(values, start, value):
    """The check that an event's _seq and _time columns agree with its metadata (a view over the int64 buffer)
    answers as a row-by-row comparison would, for sliced arrays and values outside int64 too."""
    from eventlog.encoding.arrow_file import _constant

    col = pa.array(values, pa.int64()).slice(start)
    shown = values[start:]
    assert _constant(col, value) == (len(shown) > 0 and all(v == value for v in shown))
    lengths = pa.array([[0] * (v % 3) for v in values], pa.list_(pa.int64())).slice(start)
    import pyarrow.compute as pc

    assert _constant(pc.list_value_length(lengths), 2) == (len(shown) > 0 and all(v % 3 == 2 for v in shown))


def test_one_row_of_the_time_column_that_disagrees_is_a_corrupt_log_error(tmp_path, monkeypatch):
    from eventlog.encoding import arrow_file

    real = arrow_file._FileSegmentEncoder._rows

    def lying(self, event, seq):  # noqa: ANN001, ANN202
        batch = real(self, event, seq)
        times = [event.time] * (batch.num_rows - 1) + [event.time + 1]
        return batch.set_column(batch.schema.get_field_index("_time"), pa.field("_time", pa.int64(), nullable=False),
                                pa.array(times, pa.int64()))

    monkeypatch.setattr(arrow_file._FileSegmentEncoder, "_rows", lying)
    log = FileLog(str(tmp_path))
    with Capture(log, "s", 0, 1, schema=SCHEMA) as cap:
        cap.send(3, rows(2))  # three rows: only the last disagrees
    monkeypatch.undo()
    with pytest.raises(CorruptLogError, match="_time column") as e:
        list(FileLog(str(tmp_path)).reader("s", 0))
    assert e.value.seq == 1 and e.value.path.endswith("00000000000000000001.arrow")


def test_every_flip_and_truncation_gives_the_events_or_a_typed_error(tmp_path):
    """Single-byte changes and truncations of each file of a two-segment 2.0 part (the magic, the schema
    message, event starts, the footer, index entries): readers return the events as written (fewer when the
    newest segment was cut) or raise an EventLogError naming the file; a writer reopening the part raises
    (changing nothing) or repairs it without losing an event a reader returned."""
    base = str(tmp_path / "base")
    original = capture(base, times=4, segment_bytes=400)
    paths = files(base)
    segs = [p for p in paths if p.endswith(".arrow")]
    assert len(segs) >= 2
    rng = random.Random("flips-2.0")
    root = str(tmp_path / "case")
    cases = 0

    def outcome(may_be_short: bool) -> int | None:
        got: list[Any] = []
        try:
            with deadline(20):
                got.extend(FileLog(root).reader("s", 0))
        except EventLogError as e:
            assert e.path is not None and e.stream == "s" and e.part == 0, repr(e)
            assert all(same(a, b) for a, b in zip(got, original))
            return None
        assert all(same(a, b) for a, b in zip(got, original))
        if not may_be_short:
            assert len(got) == len(original), f"{len(got)} of {len(original)} events, no error"
        return len(got)

    for path in paths:
        data = open(path, "rb").read()
        name = os.path.relpath(path, base)
        newest = path == segs[-1]
        if path.endswith(".index"):
            must = [0, 4, 8, 15, *(ix.HEADER_SIZE + i * ix.ENTRY_SIZE + k for i in range(3) for k in (0, 8, 28))]
        else:  # the magic, the schema message's start, the end-of-stream marker, the footer, its length and magic
            eos = len(data) - 18 - int.from_bytes(data[-10:-6], "little")
            must = [0, 5, 8, 12, 16, eos, eos + 4, eos + 8, eos + 12, (eos + len(data)) // 2, *range(len(data) - 10, len(data), 2)]
        for mode in ("flip", "truncate"):
            for off in sample_offsets(len(data), rng, must if mode == "flip" else must[::4], 14):
                damaged_copy(base, root, name, data, mode, off, rng)
                short = mode == "truncate" and newest
                before = outcome(short)
                snapshot = {p: open(p, "rb").read() for p in files(root)}
                try:
                    with deadline(20):
                        FileLog(root).writer("s", 0).close()
                except EventLogError:
                    assert {p: open(p, "rb").read() for p in files(root)} == snapshot, "a refusing writer changed files"
                else:
                    after = outcome(short)
                    if before is not None and after is not None:
                        assert after >= before
                cases += 1
    assert cases > 80


def test_verify_and_ls_on_a_2_0_log(tmp_path):
    from click.testing import CliRunner

    from replay.cli import main

    capture(str(tmp_path), peers=2, segment_bytes=700)
    r = CliRunner().invoke(main, ["verify", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["ls", str(tmp_path)])
    assert r.exit_code == 0 and "s" in r.output
    # a stray file in a part folder is reported, a hidden one too; the stream's own files are not
    open(os.path.join(part_dir(str(tmp_path)), "notes.txt"), "w").write("x")
    r = CliRunner().invoke(main, ["verify", str(tmp_path), "--json"])
    assert r.exit_code == 1 and "unexpected file in the part folder" in r.output


@pytest.mark.parametrize("kind", ["file-2.0", "file-1.2", pytest.param("kafka", marks=pytest.mark.kafka)])
def test_readers_give_each_event_s_write_time_where_the_log_records_it(tmp_path, request, kind):
    import time

    uri = request.getfixturevalue("kafka_uri") if kind == "kafka" else str(tmp_path)
    log = open_log(uri, format="1.2") if kind == "file-1.2" else open_log(uri)
    before = time.time_ns() // 1_000_000
    with Capture(log, "s", 0, 1, schema=SCHEMA) as cap:
        for t in range(3):
            cap.send(t, rows(t))
            cap.advance_to(t + 1)
    after = time.time_ns() // 1_000_000
    stamps = [e.ts for e in open_log(uri).reader("s", 0)]
    assert len(stamps) == 7
    if kind == "file-1.2":
        assert stamps == [None] * 7  # 1.x segments do not record it
    else:
        assert stamps == sorted(stamps) and before - 5 <= stamps[0] and stamps[-1] <= after + 5


def test_the_cli_names_a_2_0_stream_or_part_folder_passed_as_a_log(tmp_path):
    from click.testing import CliRunner

    from replay.cli import main

    capture(str(tmp_path), peers=2)
    r = CliRunner().invoke(main, ["cat", part_dir(str(tmp_path), 1), "s"])
    assert r.exit_code == 2 and "is the folder of part 1 of stream 's'" in r.output
    r = CliRunner().invoke(main, ["ls", str(tmp_path / "s")])
    assert r.exit_code == 2 and "is the folder of stream 's'" in r.output
