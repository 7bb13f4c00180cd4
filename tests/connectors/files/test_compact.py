"""Compaction of small segments (issue 32 §2, FORMAT.md §11): ``FileLog.compact`` rewrites runs of small sealed
segments into compacted segments named by their range, byte for byte the same events with the writer epoch of each
run; readers before, during and after see the same events; every step is safe to stop at.

The memory-log, local-disk and S3 variants share the helpers here; the crash tests stop a compaction at each step
(through the ``hook`` it calls before each change, and through a storage operation that fails midway); the
property test draws random incarnation histories, segment sizes and compaction settings.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capture import Capture
from connectors.files import FileLog
from connectors.files.compact import _Part
from connectors.files.layout import LAYOUT_2, Span
from connectors.files.storage import MemoryStorage
from eventlog.antichain import Antichain
from eventlog.errors import CorruptLogError, UnsupportedVersionError
from eventlog.events import Messages
from eventlog.log import open_log
from eventlog.parts import CheckedPart
from eventlog.parts.trim import trim
from replay.verify import verify

SCHEMA = pa.schema([("x", pa.int64()), ("s", pa.string())])


class Stop(Exception):
    """What a test's hook raises to stop a compaction at a step (as a kill would)."""


def micro_batches(log, stream: str = "s", batches: int = 12, *, part: int = 0, peers: int = 1, void_every: int = 3,
                  encoding: str = "arrow", start: int = 0) -> None:
    """A Structured Streaming tap's history: each micro-batch is a new writer incarnation (a new segment) that sends
    one time and completes it; every ``void_every``-th one also sends at the next time and dies before completing
    it (the next incarnation voids that message)."""
    t = start
    for b in range(batches):
        cap = Capture(log, stream, part, peers, schema=SCHEMA, encoding=encoding)
        cap.send(t, [{"x": t * 10 + i, "s": f"b{b}"} for i in range(1 + b % 3)])
        cap.advance_to(t + 1)
        if void_every and b % void_every == void_every - 1:
            cap.send(t + 1, [{"x": -1, "s": "void"}])
        cap.flush()
        cap.abort()
        t += 1


def _event(e) -> tuple:
    if isinstance(e.event, Messages):
        return ("M", e.event.time, e.event.records.to_pylist())
    return ("P", e.event.updates)


def raw(log, stream: str = "s", part: int = 0, start: int = 1) -> list[tuple]:
    """Every event as stored: (seq, writer epoch, write time, event)."""
    r = log.reader(stream, part, start)
    try:
        return [(e.seq, r.epoch, e.ts, _event(e)) for e in r]
    finally:
        r.close()


def committed(log, stream: str = "s") -> list[tuple]:
    """What a committed reader delivers, every part."""
    header = log.header(stream)
    out = []
    for part in range(header.peers):
        with CheckedPart(log, header, part) as p:
            out += [(part, e.seq, _event(e)) for e in p.read()]
    return out


def names(log, stream: str = "s", part: int = 0) -> list[str]:
    return sorted(log._st.list_dir(log.part_path(stream, part)))


def data_files(log, stream: str = "s", part: int = 0) -> list[str]:
    return [n for n in names(log, stream, part) if n.endswith((".arrow", ".avro"))]


def problems(log) -> list[tuple[str, str]]:
    return [(p.kind, p.message) for p in verify(log).problems]


def notes(log) -> list[tuple[str, str]]:
    """What verify notes without failing the log: an interrupted compaction's harmless leftovers."""
    return [(p.kind, p.message) for p in verify(log).notes]


@pytest.fixture(params=["memory", "local"])
def log_factory(request, tmp_path):
    """Opens a fresh log object on the same storage each call."""
    if request.param == "memory":
        store = MemoryStorage()
        return lambda **kw: FileLog("logs", storage=store, **kw)
    return lambda **kw: FileLog(str(tmp_path / "log"), **kw)


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_compaction_keeps_every_event_epoch_and_write_time(log_factory, encoding):
    log = log_factory()
    micro_batches(log, batches=12, encoding=encoding)
    before_raw, before_committed = raw(log), committed(log)
    assert len(data_files(log)) == 12
    assert any(ev[0] == "M" and ev[2][0]["s"] == "void" for _, _, _, ev in before_raw)
    assert all(ev[2][0]["s"] != "void" for _, _, ev in before_committed if ev[0] == "M")

    result = log.compact("s", target_bytes=1 << 20)

    assert (result.segments_before, result.segments_after) == (12, 2)
    [merge] = result.parts[0].merges
    assert (merge.first, merge.segments, merge.runs) == (1, 11, 11)
    ext = "." + encoding
    assert data_files(log) == [f"{1:020d}-{merge.last:020d}{ext}", f"{merge.last + 1:020d}{ext}"]
    fresh = log_factory()
    assert raw(fresh) == before_raw
    assert committed(fresh) == before_committed
    assert fresh.check_part("s", 0) == []
    assert problems(fresh) == []
    stats = fresh.part_stats("s", 0)
    assert (stats.first_seq, stats.next_seq, stats.segments) == (1, before_raw[-1][0] + 1, 2)
    assert fresh.compact("s", target_bytes=1 << 20).segments_after == 2  # nothing more to do


def test_the_compacted_segment_is_an_arrow_file_with_its_runs(tmp_path):
    log = FileLog(str(tmp_path))
    micro_batches(log, batches=5)
    table_before = _dataset(tmp_path)
    log.compact("s", target_bytes=1 << 20)
    [compacted] = [n for n in data_files(log) if "-" in n]
    with pa.memory_map(os.path.join(log.part_path("s", 0), compacted)) as f:
        reader = ipc.open_file(f)  # what third-party readers believe: the footer
        meta = reader.schema.metadata
        table = reader.read_all()
    runs = json.loads(meta[b"eventlog.epochs"])
    assert [(s, e) for s, e, _ in runs] == [(1, 1), (3, 2), (5, 3), (8, 4)]  # the third batch left a void message
    assert meta[b"eventlog.epoch"] == b"4" and meta[b"eventlog.writer"].decode() == runs[-1][2]
    assert table.column("_seq").to_pylist() == sorted(table.column("_seq").to_pylist())
    assert _dataset(tmp_path).sort_by([("_seq", "ascending")]).equals(table_before.sort_by([("_seq", "ascending")]))


def _dataset(root) -> pa.Table:
    import pyarrow.dataset as ds

    return ds.dataset(str(root / "s"), format="arrow", partitioning="hive").to_table()


def test_newest_segment_and_the_one_before_an_open_segment_are_never_compacted(tmp_path):
    log = FileLog(str(tmp_path))
    micro_batches(log, batches=6, void_every=0)
    live = Capture(log, "s", 0, 1, schema=SCHEMA)
    live.send(6, [{"x": 60, "s": "live"}])
    live.flush()
    assert any(n.endswith(".open") for n in names(log))
    result = log.compact("s", target_bytes=1 << 20)
    [merge] = result.parts[0].merges
    assert merge.segments == 5  # 6 sealed segments: the newest sealed one stays, so does the open one
    assert sum(n.endswith(".open") for n in names(log)) == 1
    live.advance_to(7)
    live.flush()
    live.abort()  # a crashed writer: its open segment is left for the next writer to seal
    expected = raw(FileLog(str(tmp_path)))
    assert ("M", 6, [{"x": 60, "s": "live"}]) in [ev for _, _, _, ev in expected]
    reopened = Capture(FileLog(str(tmp_path)), "s", 0, 1, schema=SCHEMA)  # recovery next to a compacted segment
    reopened.send(7, [{"x": 70, "s": "after"}])
    reopened.advance_to(8)
    reopened.close()
    fresh = FileLog(str(tmp_path))
    got = raw(fresh)
    assert got[: len(expected)] == expected and ("M", 7, [{"x": 70, "s": "after"}]) in [g[3] for g in got]
    assert problems(fresh) == []


def test_a_writer_reopening_after_compaction_continues_with_a_higher_epoch(log_factory):
    log = log_factory()
    micro_batches(log, batches=8)
    log.compact("s", target_bytes=1 << 20)
    before = raw(log)
    micro_batches(log, batches=2, start=8, void_every=0)
    after = raw(log_factory())
    assert after[: len(before)] == before
    assert after[-1][1] > before[-1][1]
    assert problems(log_factory()) == []


def test_compaction_keeps_a_retention_cut_start_readable(log_factory):
    log = log_factory()
    micro_batches(log, batches=16, void_every=0)
    trim(log, "s", since=Antichain([6]))
    cut = log.retention("s").cut(0).start
    before = raw(log, start=cut), committed(log)
    log.compact("s", target_bytes=1 << 20)
    fresh = log_factory()
    assert (raw(fresh, start=cut), committed(fresh)) == before
    assert fresh.part_stats("s", 0).first_seq == cut
    assert problems(fresh) == []
    micro_batches(fresh, batches=3, start=16, void_every=0)
    trim(fresh, "s", since=Antichain([12]))  # a trim after a compaction removes whole compacted segments too
    assert committed(log_factory())[0][2] == ("M", 12, [{"x": 120, "s": "b12"}])


def test_target_size_and_min_segments_bound_the_merges(log_factory):
    log = log_factory()
    micro_batches(log, batches=30, void_every=0)
    sizes = log._st.file_sizes(log.part_path("s", 0))
    one = max(v for k, v in sizes.items() if k.endswith(".arrow"))
    before = raw(log)
    plan = log.compact("s", target_bytes=one * 6, dry_run=True)
    assert plan.dry_run and len(data_files(log)) == 30
    result = log.compact("s", target_bytes=one * 6)
    assert [(m.first, m.last, m.segments) for m in plan.parts[0].merges] == \
        [(m.first, m.last, m.segments) for m in result.parts[0].merges]
    assert all(2 <= m.segments <= 6 and m.bytes_before <= one * 6 for m in result.parts[0].merges)
    assert len(result.parts[0].merges) >= 4
    assert raw(log_factory()) == before
    # a second pass merges the compacted segments (each under half the target) with their neighbours
    again = log.compact("s", target_bytes=one * 60)
    assert again.segments_after == 2 and raw(log_factory()) == before
    assert log.compact("s", target_bytes=one * 60, min_segments=3).segments_after == 2


def test_format_1_streams_are_not_compacted(tmp_path):
    log = FileLog(str(tmp_path), format="1.2")
    micro_batches(log, batches=3)
    with pytest.raises(UnsupportedVersionError, match="format 2"):
        log.compact("s")


def test_damaged_segments_are_not_compacted(tmp_path):
    log = FileLog(str(tmp_path))
    micro_batches(log, batches=5)
    path = os.path.join(log.part_path("s", 0), data_files(log)[1])
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) - 200)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    before = names(log)
    with pytest.raises(CorruptLogError):
        log.compact("s", target_bytes=1 << 20)
    assert [n for n in names(log) if n != ".compact.lock"] == [n for n in before if n != ".compact.lock"]


# -- readers during a compaction ----------------------------------------------------------------------------------


@pytest.mark.parametrize("taken", [1, 5, 9, 20])
def test_a_reader_inside_a_segment_that_a_compaction_removes_reads_on(log_factory, taken):
    log = log_factory()
    micro_batches(log, batches=10)
    expected = raw(log)
    reader = log.reader("s", 0)
    it = iter(reader)
    got = [(e.seq, reader.epoch, e.ts, _event(e)) for _, e in zip(range(taken), it)]
    log_factory().compact("s", target_bytes=1 << 20)  # another log object: another process would do the same
    got += [(e.seq, reader.epoch, e.ts, _event(e)) for e in it]
    assert got == expected


def test_a_reader_that_listed_before_the_compaction_reads_on(log_factory):
    log = log_factory()
    micro_batches(log, batches=10)
    expected = raw(log)
    reader = log.reader("s", 0)
    reader._list()  # it listed the small segments, then the compaction removed them
    log_factory().compact("s", target_bytes=1 << 20)
    assert [(e.seq, reader.epoch, e.ts, _event(e)) for e in reader] == expected


def test_following_readers_see_every_event_once_while_compactions_run(tmp_path):
    log = FileLog(str(tmp_path))
    micro_batches(log, batches=40, void_every=4)
    expected = committed(log)
    seen: list[list] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def follow() -> None:
        while not stop.is_set():
            try:
                seen.append(committed(FileLog(str(tmp_path))))
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
                return

    threads = [threading.Thread(target=follow) for _ in range(2)]
    for t in threads:
        t.start()
    sizes = log._st.file_sizes(log.part_path("s", 0))
    one = max(sizes.values())
    for factor in (3, 5, 9, 17, 100):
        FileLog(str(tmp_path)).compact("s", target_bytes=one * factor)
        time.sleep(0.01)
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors
    assert seen and all(s == expected for s in seen)


# -- a compaction stopped at each step ---------------------------------------------------------------------------


STEPS = ["leftovers", "create", "index", "remove"]


def _stopped_at(log_factory, step: str, nth: int) -> None:
    calls = {"n": 0}

    def hook(s: str) -> None:
        if s == step:
            calls["n"] += 1
            if calls["n"] == nth:
                raise Stop(s)

    with pytest.raises(Stop):
        log_factory().compact("s", target_bytes=1 << 20, hook=hook)


@pytest.mark.parametrize("step,nth", [("create", 1), ("index", 1), ("remove", 1), ("remove", 4), ("remove", 9)])
def test_a_compaction_stopped_at_any_step_leaves_a_readable_log_and_the_next_finishes_it(log_factory, step, nth):
    log = log_factory()
    micro_batches(log, batches=10)
    expected_raw, expected = raw(log), committed(log)
    _stopped_at(log_factory, step, nth)
    stopped = log_factory()
    assert raw(stopped) == expected_raw and committed(stopped) == expected
    assert problems(stopped) == []                  # verify passes: what the stop left is no problem
    found = notes(stopped)
    assert all(kind == "leftover" and ("harmless" in msg) for kind, msg in found), found
    result = log_factory().compact("s", target_bytes=1 << 20)
    done = log_factory()
    assert raw(done) == expected_raw and committed(done) == expected
    assert problems(done) == [] and len(data_files(done)) == 2
    assert result.segments_after == 2


def test_a_leftover_cleanup_stopped_midway_is_finished_by_the_next(log_factory):
    log = log_factory()
    micro_batches(log, batches=10)
    expected = raw(log)
    _stopped_at(log_factory, "remove", 3)
    _stopped_at(log_factory, "leftovers", 1)
    log_factory().compact("s", target_bytes=1 << 20)
    assert raw(log_factory()) == expected and problems(log_factory()) == []


@pytest.mark.parametrize("op,nth", [("create_exclusive", 1), ("write_file", 1), ("remove", 1), ("remove", 7)])
def test_a_storage_operation_failing_midway_leaves_a_readable_log(op, nth):
    store = MemoryStorage()
    log = FileLog("logs", storage=store)
    micro_batches(log, batches=10)
    expected = raw(log)
    real = getattr(store, op)
    calls = {"n": 0}

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == nth:
            raise OSError(5, "I/O error (injected)")
        return real(*args, **kwargs)

    setattr(store, op, failing)
    with pytest.raises(Exception, match="injected"):
        FileLog("logs", storage=store).compact("s", target_bytes=1 << 20)
    setattr(store, op, real)
    assert raw(FileLog("logs", storage=store)) == expected
    FileLog("logs", storage=store).compact("s", target_bytes=1 << 20)
    fresh = FileLog("logs", storage=store)
    assert raw(fresh) == expected and problems(fresh) == [] and len(data_files(fresh)) == 2


def test_a_compacted_segment_without_its_index_is_read_by_framing_and_the_index_written_later(tmp_path):
    log = FileLog(str(tmp_path))
    micro_batches(log, batches=6)
    expected = raw(log)
    _stopped_at(lambda: FileLog(str(tmp_path)), "index", 1)
    assert not any(n.startswith("_") and "-" in n for n in names(log))
    assert raw(FileLog(str(tmp_path))) == expected
    assert problems(FileLog(str(tmp_path))) == []
    found = notes(FileLog(str(tmp_path)))
    assert any("compacted segment without its index" in m for _, m in found)
    assert all(k == "leftover" for k, _ in found)
    assert FileLog(str(tmp_path)).compact("s").parts[0].leftovers_removed > 0
    assert any(n.startswith("_") and "-" in n for n in names(log))
    assert problems(FileLog(str(tmp_path))) == []


def test_overlapping_compacted_segments_are_reported_as_damage_and_read_without_error(tmp_path):
    log = FileLog(str(tmp_path))
    micro_batches(log, batches=8, void_every=0)
    expected = raw(log)
    d = log.part_path("s", 0)
    firsts = log.segments("s", 0)
    # two compactions that could not have run (one over segments 0-3, one over 2-5), each stopped before removing
    a = FileLog(str(tmp_path))
    p = _Part(a._st, a.header("s"), d, 0, history=None, cut_start=None)
    spans = [Span(f) for f in firsts]
    m1 = [p.read_member(s, 0) for s in spans[0:4]]
    m2 = [p.read_member(s, 0) for s in spans[2:6]]
    for members in (m1, m2):
        span, data, index, _ = p.build(members)
        a._st.create_exclusive(os.path.join(d, p.data_name(span)), data)
        a._st.write_file(os.path.join(d, p.index_name(span)), index)
    assert raw(FileLog(str(tmp_path))) == expected
    found = problems(FileLog(str(tmp_path)))
    assert any(k == "corrupt" and "overlap" in m for k, m in found), found
    assert FileLog(str(tmp_path)).compact("s").parts[0].skipped


# -- a real kill ----------------------------------------------------------------------------------------------------


_KILLED = """
import sys, time
from connectors.files import FileLog
def hook(step):
    if step in ("create", "index", "remove"):
        print(step, flush=True)
        time.sleep(0.05)
FileLog(sys.argv[1]).compact("s", target_bytes=int(sys.argv[2]), hook=hook)
print("done", flush=True)
"""


@pytest.mark.parametrize("after_steps", [1, 2, 5])
def test_a_compaction_killed_with_sigkill_while_a_reader_follows(tmp_path, after_steps):
    root = str(tmp_path / "log")
    log = FileLog(root)
    micro_batches(log, batches=30, void_every=4)
    expected_raw, expected = raw(log), committed(log)
    one = max(log._st.file_sizes(log.part_path("s", 0)).values())
    seen: list[list] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def follow() -> None:
        while not stop.is_set():
            try:
                seen.append(committed(FileLog(root)))
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
                return

    reader = threading.Thread(target=follow)
    reader.start()
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, root, str(one * 8)], stdout=subprocess.PIPE, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    steps = 0
    assert proc.stdout is not None
    for _line in proc.stdout:
        steps += 1
        if steps == after_steps:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    time.sleep(0.05)
    stop.set()
    reader.join()
    assert not errors, errors
    assert seen and all(s == expected for s in seen)
    assert raw(FileLog(root)) == expected_raw
    assert problems(FileLog(root)) == [] and all(k == "leftover" for k, _ in notes(FileLog(root)))
    FileLog(root).compact("s", target_bytes=one * 8)
    assert raw(FileLog(root)) == expected_raw and problems(FileLog(root)) == [] and notes(FileLog(root)) == []


# -- object stores ----------------------------------------------------------------------------------------------------


@pytest.fixture(params=["s3", "memory-objects"])
def object_log(request):
    if request.param == "s3":
        uri = f"{request.getfixturevalue('s3_bucket')}/logs"
        return lambda **kw: open_log(uri, **kw)
    store = MemoryStorage(objects=True)
    return lambda **kw: FileLog("logs", storage=store, **kw)


def test_compaction_on_an_object_store(object_log):
    log = object_log()
    micro_batches(log, batches=12)
    expected_raw, expected = raw(log), committed(log)
    reader = log.reader("s", 0)
    it = iter(reader)
    got = [(e.seq, reader.epoch, e.ts, _event(e)) for _, e in zip(range(7), it)]
    _stopped_at(object_log, "remove", 3)
    assert raw(object_log()) == expected_raw
    result = object_log().compact("s", target_bytes=1 << 20)
    assert result.parts[0].leftovers_removed > 0
    got += [(e.seq, reader.epoch, e.ts, _event(e)) for e in it]
    assert got == expected_raw
    fresh = object_log()
    assert len(data_files(fresh)) == 2 and not any(n.startswith(".") for n in names(fresh))
    assert raw(fresh) == expected_raw and committed(fresh) == expected and problems(fresh) == []
    micro_batches(fresh, batches=2, start=12, void_every=0)  # writers go on after it
    assert raw(object_log())[: len(expected_raw)] == expected_raw


# -- property: any history, any compaction settings, the same replay ---------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(st.tuples(st.integers(1, 4), st.booleans(), st.booleans()), min_size=2, max_size=14),
       targets=st.lists(st.integers(1, 40), min_size=1, max_size=3), min_segments=st.integers(2, 4),
       segment_bytes=st.sampled_from([300, 2000, 1 << 20]))
def test_property_any_history_compacts_to_the_same_replay(history, targets, min_segments, segment_bytes):
    store = MemoryStorage()
    log = FileLog("logs", storage=store, segment_bytes=segment_bytes)
    t = 0
    for times, continues, dies in history:
        cap = Capture(log, "s", 0, 1, schema=SCHEMA, continues=continues)
        t = min(cap.frontier) if list(cap.frontier) else t
        for _ in range(times):
            cap.send(t, [{"x": t, "s": "r"}] * (1 + t % 3))
            cap.advance_to(t + 1)
            t += 1
        if dies:
            cap.send(t, [{"x": -1, "s": "void"}])
        cap.flush()
        cap.abort()
    expected_raw, expected = raw(log), committed(log)
    one = max(store.file_sizes(log.part_path("s", 0)).values())
    for target in targets:
        FileLog("logs", storage=store).compact("s", target_bytes=one * target // 4 + 1, min_segments=min_segments)
        fresh = FileLog("logs", storage=store)
        assert raw(fresh) == expected_raw
        assert committed(fresh) == expected
        assert fresh.check_part("s", 0) == []
    listing = LAYOUT_2.list_part(store, log.part_path("s", 0), "arrow")
    assert not listing.hidden and not listing.superseded and not listing.overlapping


def test_the_jvm_reader_declines_a_compacted_part(tmp_path):
    """The JVM reader knows only plain segments: it names the compacted one instead of misreading the part (the check
    runs before Spark is touched, so a stand-in session shows it)."""
    pytest.importorskip("pyspark", reason="the JVM reader lives in the spark extra")
    from connectors.spark.jvm.read import JvmReadUnavailable, jvm_read

    log = FileLog(str(tmp_path))
    micro_batches(log, batches=4)
    log.compact("s")

    class Session:
        _jsparkSession = object()

    with pytest.raises(JvmReadUnavailable, match="compacted segment"):
        jvm_read(Session(), {"path": str(tmp_path), "stream": "s"})


def test_a_writer_with_a_compaction_policy_keeps_its_part_in_few_segments(tmp_path):
    """``Capture(…, compact=N)``: once the part holds N segments or more, its small sealed segments are merged in
    the background, off the writer's thread; readers read the same events throughout. On a log without
    compaction (Kafka keeps its own segments) the policy does nothing."""
    import pyarrow as pa

    from eventlog import open_log as _open
    from eventlog.parts.capture import Capture as _Capture
    from eventlog.parts.compaction_policy import CompactionPolicy

    uri = str(tmp_path / "log")
    log = _open(uri, segment_bytes=256)
    schema = pa.schema([("x", pa.int64())])
    cap = _Capture(log, "s", 0, 1, schema=schema, compact=8)
    cap._compaction.interval = 0.0  # compact as soon as the part allows, for the test
    for t in range(40):
        cap.send(t, [{"x": t}])
        cap.advance_to(t + 1)
        cap._compaction.close()  # (wait for a run the tick started: the test then counts segments exactly)
    cap.close()
    assert cap._compaction.runs >= 1 and cap._compaction.last_error is None
    assert _open(uri).part_stats("s", 0).segments < 12
    from replay.replayer import Replayer

    with Replayer(uri, "s") as r:
        assert [t for t, _ in r.completed()] == list(range(40))
    with pytest.raises(ValueError, match="compact= is the number of segments"):
        CompactionPolicy(lambda: log, "s", 0, 1)
