"""The file log can be trusted: the segment is the truth and the index an accelerator; damage anywhere in a
part's files gives events exactly as written or a typed error naming file and offset; a writer reopening a
part repairs only what a crash leaves (a torn tail, a short index), crash-safely, and never deletes a whole
event; ``check_part`` reports every problem of a part's files; a refused create writes nothing."""

from __future__ import annotations

import os
import random
import shutil
from typing import Any

import pyarrow as pa
import pytest

from capture import Capture
from connectors.files import FileLog
from connectors.files import index as ix
from connectors.files.storage import LocalStorage
from eventlog import CorruptLogError, EventLogError, SchemaMismatchError, StreamHeader
from tests.support.damage import Crash, damaged_copy, deadline, read_outcome, same, sample_offsets

SCHEMA = pa.schema([("x", pa.int64()), ("s", pa.string())])
EXT = {"arrow": ".arrows", "avro": ".avro"}


def rows(t: int) -> list[dict]:
    return [{"x": t * 100 + i, "s": "r" * (t % 5)} for i in range(t % 3 + 1)]


def make_part(root: str, encoding: str, times: int = 6, segment_bytes: int | None = None,
              finish: bool = True) -> list[Any]:
    """Capture ``times`` times into stream "s" part 0 (finishing the part); return the entries as written
    (read back)."""
    seg = segment_bytes or {"arrow": 900, "avro": 1500}[encoding]
    log = FileLog(root, segment_bytes=seg)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA, encoding=encoding)
    for t in range(times):
        cap.send(t, rows(t))
        cap.advance_to(t + 1)
    cap.close() if finish else cap.abort()
    return list(FileLog(root).reader("s", 0))


def part_dir(root: str) -> str:
    return os.path.join(root, "s", "part-00000")


def part_files(root: str, suffix: str = "") -> list[str]:
    d = part_dir(root)
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(suffix) and f != ".lock")


def reopen_outcome(root: str, original: list[Any], before: int | None, *, may_be_short: bool) -> None:
    """A writer reopening the damaged part raises an EventLogError (changing nothing) or repairs it without
    losing an event a reader returned before."""
    snapshot = {p: open(p, "rb").read() for p in part_files(root)}
    try:
        with deadline(20):
            FileLog(root).writer("s", 0).close()
    except EventLogError:
        assert {p: open(p, "rb").read() for p in part_files(root)} == snapshot, "a refusing writer changed files"
        return
    after = read_outcome(root, original, may_be_short=may_be_short)
    if before is not None and after is not None:
        assert after >= before, f"readers saw {before} events before the writer reopened the part, {after} after"


# -- the segment is the truth, the index an accelerator (item 3) -----------------------------------------


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
@pytest.mark.parametrize("which", ["first", "last"])
def test_a_short_or_missing_index_hides_no_event(tmp_path, encoding, which):
    base = str(tmp_path / "base")
    original = make_part(base, encoding)
    assert len(FileLog(base).segments("s", 0)) >= 3
    index = part_files(base, ".index")[0 if which == "first" else -1]
    full = open(index, "rb").read()
    name = os.path.relpath(index, base)
    cuts = sorted({c for k in range(0, len(full), ix.ENTRY_SIZE) for c in (k, k + 1, k + 17, k + 31)
                   if c < len(full)} | set(range(ix.HEADER_SIZE + 1)))
    for cut in [None, *cuts]:  # None: the index file is missing
        root = str(tmp_path / f"cut{cut}")
        shutil.copytree(base, root)
        path = os.path.join(root, name)
        if cut is None:
            os.remove(path)
        else:
            with open(path, "r+b") as f:
                f.truncate(cut)
        assert read_outcome(root, original, may_be_short=False) == len(original), cut
        assert FileLog(root).part_stats("s", 0).events == len(original)
        problems = FileLog(root).check_part("s", 0)
        if cut is None or cut < len(full):
            assert problems and all(p.path and p.offset is not None for p in problems), (cut, problems)
        # a writer reopening the part keeps every event and (newest segment) lists them all again
        log = FileLog(root)
        w = log.writer("s", 0)
        assert w.next_seq == len(original) + 1
        w.close()
        assert [e.seq for e in FileLog(root).reader("s", 0)] == list(range(1, len(original) + 1))
        if which == "last":
            assert open(path, "rb").read() == full
            assert FileLog(root).check_part("s", 0) == []
        shutil.rmtree(root)


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_writer_reopening_an_emptied_index_keeps_the_events(tmp_path, encoding):
    root = str(tmp_path)
    original = make_part(root, encoding, times=30, segment_bytes=1 << 20, finish=False)  # one segment
    (seg,), (index,) = part_files(root, EXT[encoding]), part_files(root, ".index")
    size = os.path.getsize(seg)
    open(index, "wb").close()
    assert [e.seq for e in FileLog(root).reader("s", 0)] == [e.seq for e in original]
    log = FileLog(root)
    cap = Capture(log, "s", 0, 1)  # reopens the part: the frontier comes from every event
    assert cap.next_seq == len(original) + 1 and list(cap.frontier) == [30]
    assert os.path.getsize(seg) == size
    (rec,) = log.recoveries
    assert rec.events_indexed == len(original) and rec.bytes_cut == 0 and rec.events_cut == 0
    cap.send(30, rows(30))
    cap.close()
    got = list(FileLog(root).reader("s", 0))
    assert [e.seq for e in got] == list(range(1, len(original) + 3))
    assert all(same(a, b) for a, b in zip(got, original))
    assert FileLog(root).check_part("s", 0) == []


# -- check_part ----------------------------------------------------------------------------------------


def _damage(root: str, encoding: str, kind: str) -> str:
    """Damage the part's files one way; returns the file that check_part must name."""
    segs, idxs = part_files(root, EXT[encoding]), part_files(root, ".index")
    d = part_dir(root)
    raw = bytearray(open(idxs[0], "rb").read())
    entries = [ix.unpack_entry(raw, ix.HEADER_SIZE + i * ix.ENTRY_SIZE)
               for i in range((len(raw) - ix.HEADER_SIZE) // ix.ENTRY_SIZE)]
    if kind == "short-index":
        with open(idxs[0], "r+b") as f:
            f.truncate(ix.HEADER_SIZE + ix.ENTRY_SIZE)
        return idxs[0]
    if kind == "long-index":
        last = entries[-1]
        with open(idxs[0], "ab") as f:
            f.write(ix.pack_entry(ix.IndexEntry(last.seq + 1, last.offset + last.length, 50, 0, 1)))
        return idxs[0]
    if kind == "disagreeing-entry":
        e = entries[1]
        at = ix.HEADER_SIZE + ix.ENTRY_SIZE
        raw[at : at + ix.ENTRY_SIZE] = ix.pack_entry(e._replace(offset=e.offset + 1))
        open(idxs[0], "wb").write(bytes(raw))
        return idxs[0]
    if kind == "damaged-entry":
        raw[ix.HEADER_SIZE + ix.ENTRY_SIZE + 3] ^= 0x10
        open(idxs[0], "wb").write(bytes(raw))
        return idxs[0]
    if kind == "orphan-index":
        path = os.path.join(d, f"{10**6:020d}.index")
        open(path, "wb").write(ix.pack_header(10**6))
        return path
    if kind == "no-index":
        os.remove(idxs[-1])
        return segs[-1]
    if kind == "torn-tail":  # a crashed writer: no end-of-stream marker, half an event
        with open(segs[-1], "r+b") as f:
            f.truncate(os.path.getsize(segs[-1]) - (8 if encoding == "arrow" else 0))
            f.seek(0, 2)
            f.write(b"\xff\xff\xff\xff\x40" if encoding == "arrow" else b"\x02\x80")
        return segs[-1]
    if kind == "damaged-prefix":
        with open(segs[0], "r+b") as f:
            f.seek(2)
            f.write(b"\x00")
        return segs[0]
    if kind == "damaged-event":
        e = entries[1]
        with open(segs[0], "r+b") as f:
            f.seek(e.offset + e.length - 20)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0x01]))
        return segs[0]
    if kind == "gap":
        os.remove(segs[1])
        os.remove(idxs[1])
        return segs[2]
    raise AssertionError(kind)


KINDS = ["short-index", "long-index", "disagreeing-entry", "damaged-entry", "orphan-index", "no-index",
         "torn-tail", "damaged-prefix", "damaged-event", "gap"]


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_check_part_reports_each_problem_with_its_place(tmp_path, encoding):
    base = str(tmp_path / "base")
    make_part(base, encoding, times=8)
    assert FileLog(base).check_part("s", 0) == []
    for kind in KINDS:
        root = str(tmp_path / kind)
        shutil.copytree(base, root)
        path = _damage(root, encoding, kind)
        problems = FileLog(root).check_part("s", 0)
        assert problems, kind
        for p in problems:
            assert isinstance(p, CorruptLogError) and (p.stream, p.part) == ("s", 0), (kind, p)
            assert p.path is not None and p.offset is not None, (kind, p)
        assert path in [p.path for p in problems], (kind, problems)
        if kind == "torn-tail":
            assert any("torn" in p.reason for p in problems)
        if kind == "orphan-index":
            assert any("orphan" in p.reason for p in problems)
        if kind == "no-index":
            assert any("without an index" in p.reason for p in problems)


# -- damage anywhere: events as written, or a typed error with its place (items 3, 5) --------------------


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_every_flip_and_truncation_gives_the_events_or_a_typed_error(tmp_path, encoding):
    """Every single-byte change and truncation (at sampled offsets, all of them in prefixes, index headers
    and the first bytes of each event) of each file of a small two-segment part: readers return the
    events as written (a prefix of them when the newest segment was cut) or raise an EventLogError naming
    file and offset; a writer reopening the part never loses an event a reader returned."""
    probe = str(tmp_path / "probe")
    make_part(probe, encoding, times=4, segment_bytes=1 << 20)
    total = os.path.getsize(part_files(probe, EXT[encoding])[0])
    prefix = ix.unpack_entry(open(part_files(probe, ".index")[0], "rb").read(), ix.HEADER_SIZE).offset
    base = str(tmp_path / "base")
    original = make_part(base, encoding, times=4, segment_bytes=(total + prefix) // 2)
    files = part_files(base)
    assert len(files) == 4
    rng = random.Random(f"flips-{encoding}")
    budget = 55
    root = str(tmp_path / "case")
    cases = 0
    for path in files:
        data = open(path, "rb").read()
        name = os.path.relpath(path, base)
        last_segment = path == part_files(base, EXT[encoding])[-1]
        if path.endswith(".index"):
            entries = (ix.HEADER_SIZE + i * ix.ENTRY_SIZE + k for i in range(40) for k in (0, 28))
            must = [*range(ix.HEADER_SIZE), *entries]
        else:
            first_index = open(os.path.splitext(path)[0] + ".index", "rb").read()
            starts = [ix.unpack_entry(first_index, ix.HEADER_SIZE + i * ix.ENTRY_SIZE).offset
                      for i in range((len(first_index) - ix.HEADER_SIZE) // ix.ENTRY_SIZE)]
            head = starts[0] if encoding == "arrow" else 24  # the whole schema message; the Avro magic and map
            must = [*range(min(len(data), head)), *(s + k for s in starts for k in (0, 3, 5, 8))]
        for mode in ("flip", "truncate"):
            for off in sample_offsets(len(data), rng, must if mode == "flip" else [0, *must[::3]], budget):
                damaged_copy(base, root, name, data, mode, off, rng)
                short = mode == "truncate" and last_segment
                before = read_outcome(root, original, may_be_short=short)
                reopen_outcome(root, original, before, may_be_short=short)
                cases += 1
    assert cases > 350


# -- damaged segment prefixes (item 5) -------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_damaged_prefix_raises_a_corrupt_log_error_with_its_place(tmp_path, encoding):
    """Damage to the Arrow schema message or the Avro container header raised a raw OSError or fastavro
    SchemaParseException: each is a CorruptLogError naming stream, part, file and offset."""
    base = str(tmp_path / "base")
    make_part(base, encoding)
    seg = part_files(base, EXT[encoding])[0]
    prefix_len = ix.unpack_entry(open(os.path.splitext(seg)[0] + ".index", "rb").read(), ix.HEADER_SIZE).offset
    damaged = 0
    offsets = range(prefix_len) if prefix_len < 300 else sorted({*range(64), *range(64, prefix_len, 6)})
    for off in offsets:
        root = str(tmp_path / "case")
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(base, root)
        target = os.path.join(root, os.path.relpath(seg, base))
        data = bytearray(open(target, "rb").read())
        data[off] ^= 0x5A
        open(target, "wb").write(bytes(data))
        try:
            list(FileLog(root).reader("s", 0))
        except CorruptLogError as e:
            damaged += 1
            assert (e.stream, e.part, e.path) == ("s", 0, target) and e.offset is not None, repr(e)
        for problem in FileLog(root).check_part("s", 0):
            assert isinstance(problem, CorruptLogError) and problem.path is not None
    assert damaged > len(offsets) // 2


# -- recovery is crash-safe (item 10) -------------------------------------------------------------------


class _CrashingStorage(LocalStorage):
    """Dies at the ``crash_at``-th change it makes (write_file dies after writing its temporary file)."""

    def __init__(self, crash_at: int) -> None:
        self.crash_at = crash_at
        self.changes = 0

    def _change(self) -> None:
        self.changes += 1
        if self.changes == self.crash_at:
            raise Crash

    def write_file(self, path: str, data: bytes) -> None:
        self.changes += 1
        if self.changes == self.crash_at:
            with open(f"{path}.1.2.tmp", "wb") as f:
                f.write(data[: len(data) // 2])
            raise Crash
        super().write_file(path, data)

    def remove(self, path: str) -> None:
        self._change()
        super().remove(path)

    def truncate(self, path: str, size: int) -> None:
        self._change()
        super().truncate(path, size)

    def create(self, path: str):  # noqa: ANN201
        self._change()
        return super().create(path)

    def make_dirs(self, path: str) -> None:
        super().make_dirs(path)


def _crashed_part(root: str, encoding: str) -> tuple[int, list[Any]]:
    """A part as crashes leave it: the newest segment lost index entries and has a torn tail, an empty
    segment was created after it, and an index without segment lies beyond. Returns (whole events, them)."""
    original = make_part(root, encoding, times=5, segment_bytes=1 << 20, finish=False)
    segs, idxs = part_files(root, EXT[encoding]), part_files(root, ".index")
    with open(idxs[-1], "r+b") as f:  # the newest segment's index lost its last two entries
        f.truncate(os.path.getsize(idxs[-1]) - 2 * ix.ENTRY_SIZE)
    with open(segs[-1], "r+b") as f:  # and a partial event follows its whole ones (no end-of-stream marker)
        f.truncate(os.path.getsize(segs[-1]) - (8 if encoding == "arrow" else 0))
        f.seek(0, 2)
        f.write(b"\xff\xff\xff\xff\x80\x00\x00" if encoding == "arrow" else b"\x02\xc0\x01\x07")
    n = len(original)
    d = part_dir(root)
    enc = FileLog(root).header("s")
    from eventlog.encoding import codec_for

    prefix = codec_for(enc).new_segment().prefix
    open(os.path.join(d, f"{n + 1:020d}{EXT[encoding]}"), "wb").write(prefix[: len(prefix) // 2])
    open(os.path.join(d, f"{n + 5:020d}.index"), "wb").write(ix.pack_header(n + 5))
    return n, original


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_recovery_survives_a_crash_at_every_step(tmp_path, encoding):
    base = str(tmp_path / "base")
    n, original = _crashed_part(base, encoding)
    crash_at = 1
    while True:
        root = str(tmp_path / f"crash{crash_at}")
        shutil.copytree(base, root)
        st = _CrashingStorage(crash_at)
        try:
            FileLog(root, storage=st).writer("s", 0).close()
            completed = True
        except Crash:
            completed = False
        # whatever step it died at, the next writer recovers, and every whole event is there
        log = FileLog(root)
        w = log.writer("s", 0)
        assert w.next_seq == n + 1, crash_at
        w.close()
        got = list(FileLog(root).reader("s", 0))
        assert len(got) == n and all(same(a, b) for a, b in zip(got, original)), crash_at
        assert FileLog(root).check_part("s", 0) == [], crash_at
        assert not [f for f in os.listdir(part_dir(root)) if f.endswith(".tmp")]
        shutil.rmtree(root)
        if completed:
            break
        crash_at += 1
    assert crash_at >= 4  # the orphan index, the empty segment (index, data), the index rebuild, the torn tail


def test_an_orphan_index_left_by_a_killed_recovery_does_not_stop_the_next_writer(tmp_path):
    """A writer killed between removing an empty segment and its index left the index; the next writer
    failed once with a raw FileExistsError."""
    root = str(tmp_path)
    original = make_part(root, "arrow", finish=False)
    n = len(original)
    open(os.path.join(part_dir(root), f"{n + 1:020d}.index"), "wb").write(ix.pack_header(n + 1))
    with Capture(FileLog(root), "s", 0, 1) as cap:
        assert cap.next_seq == n + 1
        cap.send(6, rows(6))
    assert [e.seq for e in FileLog(root).reader("s", 0)] == list(range(1, n + 3))


# -- a refused create writes nothing (item 10) ------------------------------------------------------------


@pytest.mark.parametrize("field", [pa.uint64(), pa.map_(pa.string(), pa.int64()), pa.float16()])
def test_a_schema_the_encoding_cannot_store_creates_nothing(tmp_path, field):
    root = str(tmp_path / "log")
    schema = pa.schema([("x", pa.int64()), ("bad", field)])
    with pytest.raises(SchemaMismatchError):
        FileLog(root).create_stream(StreamHeader("s", 1, schema, "int64", "avro"))
    with pytest.raises(SchemaMismatchError):
        Capture(FileLog(root), "s", 0, 1, schema=schema, encoding="avro")
    assert not os.path.exists(root) or os.listdir(root) == []
    assert FileLog(root).streams() == []


def test_a_create_that_fails_after_its_first_write_removes_what_it_wrote(tmp_path):
    class Failing(LocalStorage):
        def create_exclusive(self, path: str, data: bytes) -> bool:
            raise OSError(28, "No space left on device")

    root = str(tmp_path / "log")
    with pytest.raises(EventLogError, match="No space left on device"):  # typed, naming the stream
        FileLog(root, storage=Failing()).create_stream(StreamHeader("s", 1, SCHEMA, "int64", "arrow"))
    assert not os.path.exists(root)


# -- I/O errors are typed too (item 5) ------------------------------------------------------------------


def test_io_errors_reading_or_reopening_a_part_are_typed_and_name_the_file(tmp_path):
    root = str(tmp_path)
    make_part(root, "arrow", finish=False)
    seg = part_files(root, ".arrows")[-1]

    class FailingRead(LocalStorage):
        def open_read(self, path: str):  # noqa: ANN201
            if path == seg:
                raise OSError(5, "Input/output error", path)
            return super().open_read(path)

    with pytest.raises(EventLogError) as reading:
        list(FileLog(root, storage=FailingRead()).reader("s", 0))
    with pytest.raises(EventLogError) as reopening:
        FileLog(root, storage=FailingRead()).writer("s", 0)
    with pytest.raises(EventLogError) as sizing:
        FileLog(root, storage=FailingRead()).part_stats("s", 0)
    for e in (reading.value, reopening.value, sizing.value):
        assert (e.stream, e.part, e.path) == ("s", 0, seg) and "Input/output error" in str(e)
    FileLog(root).writer("s", 0).close()  # the failed writer released the part


# these tests poke at the files of the 1.x layout (format 2.0 files: test_file_format2.py)
pytestmark = pytest.mark.usefixtures("file_format_1")


def test_making_folders_survives_an_empty_folder_above_being_removed_meanwhile(tmp_path, monkeypatch):
    """Spark attempts of one tap job create their staging folders below shared ones that other attempts remove
    when they leave them empty: a folder above vanishing between two steps of the creation is made again."""
    real_mkdir = os.mkdir
    removed = []

    def mkdir(path, mode=0o777, **kw):
        parent = os.path.dirname(os.fspath(path))
        if os.path.basename(os.fspath(path)) == "attempt" and len(removed) < 3:
            removed.append(parent)
            os.rmdir(parent)  # another attempt removes the (still empty) job folder just now
        return real_mkdir(path, mode, **kw)

    monkeypatch.setattr(os, "mkdir", mkdir)
    LocalStorage().make_dirs(str(tmp_path / ".staging" / "job" / "attempt" / "s" / "part=0"))
    assert len(removed) == 3 and os.path.isdir(tmp_path / ".staging" / "job" / "attempt" / "s" / "part=0")
