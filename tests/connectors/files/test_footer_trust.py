"""A sealed segment's footer is checked as a whole (issue 33 §1): third-party readers (pyarrow.dataset, polars,
DuckDB) believe an Arrow file's footer — its schema, its version, its blocks — so our readers and ``replay verify``
hold it to the footer the segment's own schema and events make, byte for byte. A footer that renames a column or
changes a type, and every single-bit flip of a footer, is refused naming the file."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from capture import Capture
from eventlog import CorruptLogError, open_log
from replay import verify

SCHEMA = pa.schema([("n", pa.int64()), ("word", pa.string())])


def _sealed(root) -> tuple:
    with Capture(open_log(str(root)), "s", 0, 1, schema=SCHEMA) as cap:
        for t in range(3):
            cap.send(t, [{"n": t * 10 + i, "word": f"w{i}"} for i in range(4)])
            cap.advance_to(t + 1)
    seg = next(p for p in (root / "s" / "part=0").iterdir() if p.suffix == ".arrow")
    data = seg.read_bytes()
    footer_len = int.from_bytes(data[-10:-6], "little")
    start = len(data) - 10 - footer_len - 8  # the end-of-stream marker, the footer, its length, the magic
    return seg, data, start


def _read_all(root) -> list:
    return list(open_log(str(root)).reader("s", 0))


def test_a_footer_that_renames_a_column_or_changes_a_type_is_refused(tmp_path):
    root = tmp_path / "log"
    seg, data, start = _sealed(root)
    for old, new in ((b"word", b"wxrd"), (b"n\x00", b"m\x00")):
        at = data.index(old, start)
        damaged = data[:at] + new + data[at + len(old):]
        seg.write_bytes(damaged)
        table = ipc.open_file(pa.py_buffer(damaged)).read_all()  # a third-party reader believes the footer
        assert table.schema.names != ["n", "word", "_time", "_seq"][: len(table.schema.names)] or \
            table.schema != ipc.open_file(pa.py_buffer(data)).read_all().schema
        with pytest.raises(CorruptLogError, match="footer") as ei:
            _read_all(root)
        assert ei.value.path == str(seg)
        report = verify(open_log(str(root)), "s")
        assert not report.ok and any("footer" in p.message and p.path == str(seg) for p in report.problems)
    seg.write_bytes(data)
    assert len([e for e in _read_all(root)]) == 7


def test_every_single_bit_flip_of_a_footer_is_refused(tmp_path):
    root = tmp_path / "log"
    seg, data, start = _sealed(root)
    unseen = []
    for at in range(start, len(data)):
        for bit in (0, 3, 7):
            damaged = bytearray(data)
            damaged[at] ^= 1 << bit
            seg.write_bytes(bytes(damaged))
            try:
                _read_all(root)
            except CorruptLogError:
                continue
            unseen.append((at - start, bit))
    seg.write_bytes(data)
    assert unseen == [], f"{len(unseen)} flips read as whole: {unseen[:10]}"


def test_a_copied_log_with_its_footers_whole_reads_and_verifies(tmp_path):
    root = tmp_path / "log"
    _sealed(root)
    shutil.copytree(root, tmp_path / "copy")
    assert verify(open_log(str(tmp_path / "copy")), "s").ok


def test_a_footer_is_checked_once_per_reading_of_a_finished_segment(tmp_path, monkeypatch):
    """A reader polling a finished segment again (a replayer's next fill) does not check its footer again; a
    footer damaged between two readers is refused by the second."""
    from connectors.files.segment import SegmentFiles

    root = tmp_path / "log"
    seg, data, start = _sealed(root)
    checked = []
    real = SegmentFiles.footer_problem
    monkeypatch.setattr(SegmentFiles, "footer_problem", lambda self, *a: checked.append(a) or real(self, *a))
    with open_log(str(root)).reader("s", 0) as r:
        assert len(list(r)) == 7
        for _ in range(3):  # polled again: nothing new, the footer seen already
            assert list(r) == []
    assert len(checked) == 1
    at = data.index(b"word", start)
    seg.write_bytes(data[:at] + b"wxrd" + data[at + 4:])
    with pytest.raises(CorruptLogError, match="footer"):
        _read_all(root)


def test_the_footer_check_of_a_mapped_segment_reads_the_mapping_not_the_file(tmp_path, monkeypatch):
    """A reader has the finished segment mapped: the footer check (every event's metadata length, the footer, the
    trailer) reads the mapping, not the file — a system call per event, each letting the GIL go. Its verdicts are
    the file's: the single-bit flips above are refused through the mapping."""
    from connectors.files.segment import SegmentFiles

    root = tmp_path / "log"
    _sealed(root)
    inside, file_reads = [], []
    real_check, real_read = SegmentFiles.footer_problem, SegmentFiles.read

    def check(self, *a):  # noqa: ANN001, ANN202
        inside.append(True)
        try:
            return real_check(self, *a)
        finally:
            inside.pop()

    def read(self, offset, length):  # noqa: ANN001, ANN202
        if inside:
            file_reads.append((offset, length))
        return real_read(self, offset, length)

    monkeypatch.setattr(SegmentFiles, "footer_problem", check)
    monkeypatch.setattr(SegmentFiles, "read", read)
    assert len(_read_all(root)) == 7
    assert file_reads == []
