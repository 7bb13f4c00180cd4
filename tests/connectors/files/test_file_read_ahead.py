"""Decoding ahead (``connectors/files/readahead.py``) changes when a file reader decodes, never what it reads
or reports: on intact, damaged, live and forked reads, a reader decoding ahead gives the same events, the same
error (type, text, location) after the same events, as one decoding each event in place."""

from __future__ import annotations

import gc
import glob
import multiprocessing
import os
import random
import threading
import time

import numpy as np
import pyarrow as pa
import pytest

from capture import Capture
from connectors.files import index as ix
from connectors.files import readahead
from eventlog import EventLogError, Messages, open_log, workers
from tests.support.paths import ROOT

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string())])
ROWS = 2_000  # ~70 KB of random hex per batch: Messages events well over readahead.MIN_BYTES


def batch(t: int, n: int = ROWS) -> pa.RecordBatch:
    rng = np.random.default_rng(t)
    s = np.char.mod("%032x", rng.integers(0, 2**62, n)).astype(object)
    return pa.record_batch([pa.array(np.arange(t * n, (t + 1) * n)), pa.array(s, pa.string())], schema=SCHEMA)


def capture(root: str, times: int, *, segment_bytes: int = 1 << 20, small_every: int = 3, finish: bool = True) -> None:
    """Part 0 of stream "s": per time a large batch, every ``small_every``-th time a tiny one too (events
    decoded in place between those decoded ahead), and a Progress event."""
    log = open_log(root, sync="none", segment_bytes=segment_bytes)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    for t in range(times):
        cap.send(t, batch(t))
        if t % small_every == 0:
            cap.send(t, batch(1000 + t, 3))
        cap.advance_to(t + 1)
    cap.close() if finish else cap.abort()


def read(root: str, depth: int, monkeypatch: pytest.MonkeyPatch, start: int = 1,
         prefetch: bool = False) -> tuple[list, str | None]:
    """Everything a reader yields (seq, time or updates, records) and the error it ends with (None);
    ``prefetch``: told to start its first events before it is read (as a replayer does)."""
    monkeypatch.setenv("EVENTLOG_READ_AHEAD", str(depth))
    out: list = []
    try:
        with open_log(root).reader("s", 0, start) as r:
            if prefetch:
                r.prefetch()
            for e in r:
                ev = e.event
                out.append((e.seq, ev.time, ev.records) if isinstance(ev, Messages) else (e.seq, ev.updates))
        return out, None
    except EventLogError as err:
        return out, f"{type(err).__name__}: {err} @ seq={err.seq} offset={err.offset} path={err.path}"


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        x[:2] == y[:2] and (len(x) == 2 or x[2].equals(y[2])) for x, y in zip(a, b))


def segments(root: str) -> list[str]:
    return sorted(glob.glob(os.path.join(root, "s", "part=0", "*.arrow")) +
                  glob.glob(os.path.join(root, "s", "part=0", "*.arrow.open")))


def entries(seg: str) -> tuple[str, list[ix.IndexEntry]]:
    d, name = os.path.split(seg)
    index = os.path.join(d, "_" + name.split(".")[0] + ".index")
    raw = open(index, "rb").read()
    n = (len(raw) - ix.HEADER_SIZE) // ix.ENTRY_SIZE
    return index, [ix.unpack_entry(raw, ix.HEADER_SIZE + i * ix.ENTRY_SIZE) for i in range(n)]


def large(es: list[ix.IndexEntry]) -> list[ix.IndexEntry]:
    return [e for e in es if e.kind == ix.KIND_MESSAGES and e.length >= readahead.MIN_BYTES]


def test_an_intact_log_reads_the_same_and_events_are_decoded_ahead(tmp_path, monkeypatch) -> None:
    # the pool decodes what it was handed (on a loaded machine it may start it after the reader comes to it)
    monkeypatch.setattr(readahead, "PATIENCE", None)
    root = str(tmp_path)
    capture(root, 12)
    calls = []
    real = readahead.decode
    monkeypatch.setattr(readahead, "decode", lambda *a: calls.append(threading.current_thread().name) or real(*a))
    ahead, err = read(root, 2, monkeypatch)
    assert err is None
    assert calls and all(n.startswith(workers.THREAD_PREFIX) for n in calls)  # the path under test ran
    in_place, err = read(root, 0, monkeypatch)
    assert err is None and same(ahead, in_place)
    msgs = [x for x in ahead if len(x) == 3]
    assert [x[1] for x in msgs if len(x[2]) == ROWS] == list(range(12))
    assert all(x[2].equals(batch(x[1])) for x in msgs if len(x[2]) == ROWS)
    for start in (1, 5, 6, 17):  # a reader starting inside a segment skips what is before, decoding nothing more
        assert same(read(root, 2, monkeypatch, start)[0], [x for x in in_place if x[0] >= start])


@pytest.mark.parametrize("steal", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_damage_in_an_event_decoded_ahead_is_reported_as_in_place(tmp_path, monkeypatch, seed, steal) -> None:
    """Damage in an event decoded ahead (by the pool; with ``steal``, wherever the reader took events back from
    the pool) is reported exactly as when every event is decoded in place."""
    monkeypatch.setattr(readahead, "PATIENCE", 0 if steal else None)
    rnd = random.Random(seed)
    root = str(tmp_path)
    capture(root, 10, segment_bytes=rnd.choice([300_000, 1 << 20]))
    seg = rnd.choice(segments(root))
    index, es = entries(seg)
    victim = rnd.choice([e for e in large(es) if es.index(e) >= 2])  # the segment's first event: in place
    data = bytearray(open(seg, "rb").read())
    how = rnd.choice(["flip", "flip+crc", "zero-body", "truncate"])
    if how == "truncate":
        del data[victim.offset + rnd.randrange(victim.length):]
    elif how == "zero-body":
        data[victim.offset + 300: victim.offset + victim.length] = bytes(victim.length - 300)
    else:
        at = victim.offset + rnd.randrange(victim.length)
        data[at] ^= 1 << rnd.randrange(8)
    if how in ("flip+crc", "zero-body"):  # the checksum agrees: what the decoder finds is what is reported
        raw = bytearray(open(index, "rb").read())
        fixed = ix.IndexEntry(victim.seq, victim.offset, victim.length,
                              ix.checksum(bytes(data[victim.offset:victim.offset + victim.length])), victim.kind)
        pos = ix.HEADER_SIZE + es.index(victim) * ix.ENTRY_SIZE
        raw[pos:pos + ix.ENTRY_SIZE] = ix.pack_entry(fixed)
        open(index, "wb").write(bytes(raw))
    open(seg, "wb").write(bytes(data))
    offsets = []
    real = readahead.decode
    monkeypatch.setattr(readahead, "decode", lambda *a: offsets.append(a[2]) or real(*a))
    ahead, err_ahead = read(root, 2, monkeypatch)
    if how != "truncate" and not steal:
        assert victim.offset in offsets  # the damaged event was one decoded ahead
    in_place, err_in_place = read(root, 0, monkeypatch)
    assert err_ahead == err_in_place, how
    assert same(ahead, in_place), how
    if how == "flip":
        assert err_ahead is not None and f"seq={victim.seq}" in err_ahead, (how, err_ahead)
    if how in ("flip", "truncate"):  # a cut last segment reads as a torn tail: the events before it, no error
        assert all(x[0] < victim.seq for x in ahead)
        assert err_ahead is not None or segments(root)[-1] == seg


@pytest.mark.parametrize("seed", range(16))
def test_a_prefetched_reader_reads_and_reports_as_one_decoding_in_place(tmp_path, monkeypatch, seed) -> None:
    """``prefetch`` starts a segment's first events before the read: whatever the damage (the first event's
    bytes or checksum, the segment's prefix, a cut file, a missing index) and wherever the read starts, the
    prefetched reader yields the same events and ends with the same error as one decoding each in place."""
    monkeypatch.setattr(readahead, "PATIENCE", None)  # the first event stays the pool's, however late it starts
    rnd = random.Random(seed)
    root = str(tmp_path)
    capture(root, 8, segment_bytes=rnd.choice([300_000, 1 << 20]))
    seg = rnd.choice(segments(root))
    index, es = entries(seg)
    data = bytearray(open(seg, "rb").read())
    how = rnd.choice(["intact", "flip-first", "flip-prefix", "truncate-prefix", "truncate-first", "no-index"])
    first = large(es)[0]
    if how == "flip-first":
        data[first.offset + rnd.randrange(first.length)] ^= 1 << rnd.randrange(8)
    elif how == "flip-prefix":
        data[rnd.randrange(8, first.offset)] ^= 1 << rnd.randrange(8)
    elif how == "truncate-prefix":
        del data[rnd.randrange(1, first.offset):]
    elif how == "truncate-first":
        del data[first.offset + rnd.randrange(first.length):]
    elif how == "no-index":
        os.remove(index)
    open(seg, "wb").write(bytes(data))
    start = rnd.choice([1, 1, 2, es[0].seq, es[0].seq + 1])
    offsets = []
    real = readahead.decode
    monkeypatch.setattr(readahead, "decode", lambda *a: offsets.append(a[2]) or real(*a))
    ahead, err_ahead = read(root, 2, monkeypatch, start, prefetch=True)
    in_place, err_in_place = read(root, 0, monkeypatch, start)
    assert err_ahead == err_in_place, (how, start)
    assert same(ahead, in_place), (how, start)
    if how == "intact":
        assert err_ahead is None and len(ahead) > 0
        first_read = segments(root)[0]
        if start == 1:  # the first segment's first event was decoded ahead, before the read began
            assert large(entries(first_read)[1])[0].offset in offsets


def test_prefetching_an_empty_or_finished_part_changes_nothing(tmp_path, monkeypatch) -> None:
    """A part with no segment yet, then written; a reader past the end: prefetch is a no-op, the reads that
    follow see what is there then."""
    root = str(tmp_path)
    monkeypatch.setenv("EVENTLOG_READ_AHEAD", "2")
    log = open_log(root, sync="none")
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    with open_log(root).reader("s", 0) as r:
        r.prefetch()
        assert list(r) == []
        cap.send(0, batch(0))
        cap.advance_to(1)
        r.prefetch()  # the first segment exists now: its first event starts
        got = [e.seq for e in r]
        cap.close()
        r.prefetch()
        got += [e.seq for e in r]
    assert got == list(range(1, 4))


def test_a_live_part_read_while_it_is_written(tmp_path, monkeypatch) -> None:
    """A reader following a part as it grows (segments open, remapped, sealed and renamed under it) reads
    exactly what was written, decoding ahead whatever is already there."""
    root = str(tmp_path)
    monkeypatch.setenv("EVENTLOG_READ_AHEAD", "2")
    log = open_log(root, sync="none", segment_bytes=400_000)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    cap.send(0, batch(0))
    cap.advance_to(1)

    def write() -> None:
        for t in range(1, 40):
            cap.send(t, batch(t))
            if t % 4 == 0:
                time.sleep(0.005)
            cap.advance_to(t + 1)
        cap.close()

    w = threading.Thread(target=write)
    w.start()
    got = []
    with open_log(root).reader("s", 0) as r:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done = not w.is_alive()  # taken before the pass: a pass after the writer finished reads it all
            got += [e.event for e in r]
            if done:
                break
            time.sleep(0.001)
    w.join()
    times = [ev.time for ev in got if isinstance(ev, Messages)]
    assert times == list(range(40))
    assert all(ev.records.equals(batch(ev.time)) for ev in got if isinstance(ev, Messages))


def _child_reads(root: str, q) -> None:  # noqa: ANN001
    with open_log(root).reader("s", 0) as r:
        q.put(sum(e.event.records.num_rows for e in r if isinstance(e.event, Messages)))


def test_a_forked_child_reads_ahead_with_threads_of_its_own(tmp_path, monkeypatch) -> None:
    """Spark forks its Python workers from a daemon: a child of a process that decoded ahead has none of its
    threads, and must not wait for them."""
    root = str(tmp_path)
    capture(root, 6)
    rows, err = read(root, 2, monkeypatch)
    assert err is None and workers.started()  # the parent's pool exists
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_reads, args=(root, q))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    assert q.get(timeout=5) == sum(len(x[2]) for x in rows if len(x) == 3)


def test_the_setting_is_checked(monkeypatch) -> None:
    monkeypatch.setenv("EVENTLOG_READ_AHEAD", "lots")
    with pytest.raises(ValueError, match="EVENTLOG_READ_AHEAD"):
        readahead.depth()
    monkeypatch.setenv("EVENTLOG_READ_AHEAD", "3")
    assert readahead.depth() == 3
    monkeypatch.delenv("EVENTLOG_READ_AHEAD")
    assert readahead.depth() == (4 if (os.cpu_count() or 1) > 1 else 0)


@pytest.mark.parametrize("env, threads", [({}, True), ({"EVENTLOG_PRELOAD": "0"}, False),
                                          ({"EVENTLOG_READ_AHEAD": "0"}, False)])
def test_opening_a_file_log_warms_the_threads_once(tmp_path, env, threads) -> None:
    """The first replay of a process does not pay for starting the threads (``bench_replay``'s first-replay
    headline); nothing starts when preloading or decoding ahead is off."""
    import subprocess
    import sys

    code = ("import threading; from eventlog import open_log; open_log(%r); open_log(%r); "
            "print(sum(t.name.startswith('eventlog-worker') for t in threading.enumerate()))"
            % (str(tmp_path), str(tmp_path)))
    clean = {k: v for k, v in os.environ.items() if k not in ("EVENTLOG_PRELOAD", "EVENTLOG_READ_AHEAD")}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
                         check=True, cwd=ROOT)
    want = max(2, os.cpu_count() or 1) if threads and (os.cpu_count() or 1) > 1 else 0
    assert int(out.stdout.strip()) == want, out.stderr


def test_many_parts_hold_no_more_than_the_process_budget(tmp_path, monkeypatch) -> None:
    """A repartitioning replayer reads every part at once: the events decoded ahead across all of them stay
    within one process-wide budget, and every one is given back when readers finish or are dropped."""
    import gc

    from replay import Replayer

    monkeypatch.setenv("EVENTLOG_READ_AHEAD", "2")
    root = str(tmp_path)
    log = open_log(root, sync="none")
    parts = 10
    for p in range(parts):
        with Capture(log, "s", p, parts, schema=SCHEMA) as cap:
            for t in range(4):
                cap.send(t, batch(100 * p + t))
                cap.advance_to(t + 1)
    gc.collect()
    before = readahead._held
    peak = 0
    rows = 0
    real = readahead.ReadAhead.start

    def start(self, *a):  # noqa: ANN001, ANN002
        nonlocal peak
        real(self, *a)
        peak = max(peak, readahead._held)

    monkeypatch.setattr(readahead.ReadAhead, "start", start)
    with Replayer(open_log(root), "s", 0, 1, mode="repartition", key="id") as r:
        for ev in r:
            if isinstance(ev, Messages):
                rows += ev.records.num_rows
    assert rows == parts * 4 * ROWS
    assert 0 < peak - before <= readahead._budget()
    gc.collect()
    assert readahead._held == before
    with open_log(root).reader("s", 3) as reader:  # a reader left after its first events
        next(iter(reader)), next(iter(reader))
    gc.collect()
    assert readahead._held == before


def test_each_index_entry_is_looked_at_about_once(tmp_path, monkeypatch) -> None:
    """Looking for events to decode ahead resumes where the last look stopped: a reader of N events reads
    at most about 2N index entries for it, not ``LOOK`` per event (that walk held the GIL the replayer needs)."""
    from connectors.files.segment import SegmentFiles

    root = str(tmp_path)
    capture(root, 40, segment_bytes=64 << 20)   # one segment: 40 large, 14 small and 40 Progress events
    looked = []
    real = SegmentFiles.entry

    def counting(self, seq):  # noqa: ANN001
        looked.append(seq)
        return real(self, seq)

    monkeypatch.setattr(SegmentFiles, "entry", counting)
    ahead, err = read(root, 2, monkeypatch)
    assert err is None
    events = len(ahead)
    assert events == 40 + 14 + 40 + 1   # and the Progress that closed the part
    in_place = len(looked)
    looked.clear()
    read(root, 0, monkeypatch)
    reader_own = len(looked)   # what the reader looks at without decoding ahead
    # each entry once, and once more where a look stopped with the events in flight at their limit
    assert in_place - reader_own <= 2 * events + readahead.LOOK, (in_place, reader_own, events)


def test_a_worker_merging_three_parts_decodes_their_large_events_ahead(tmp_path, monkeypatch) -> None:
    """A replay worker assigned three parts keeps two events ahead in each, and starts every part's first
    events before it reads any: no large event is decoded in place (with two events a core for the whole
    process, ten of 36 were; without the start, each part's first was)."""
    from replay import Replayer

    monkeypatch.setenv("EVENTLOG_READ_AHEAD", "2")
    monkeypatch.setattr(workers, "size", lambda: 2)  # the smallest pool: the budget that must suffice
    root = str(tmp_path)
    log = open_log(root, sync="none")
    parts, times = 3, 12
    for p in range(parts):
        with Capture(log, "s", p, parts, schema=SCHEMA) as cap:
            for t in range(times):
                cap.send(t, batch(100 * p + t))
                cap.advance_to(t + 1)
    taken = {"ahead": 0, "in place": 0}
    real = readahead.ReadAhead.take

    def take(self, seq, offset, length):  # noqa: ANN001, ANN202
        started = seq in self._flight  # handed to the pool (which may not have begun it: then the reader takes it)
        if length >= readahead.MIN_BYTES:
            taken["ahead" if started else "in place"] += 1
        return real(self, seq, offset, length)

    monkeypatch.setattr(readahead.ReadAhead, "take", take)
    rows = 0
    with Replayer(open_log(root), "s", 0, 1, mode="assign") as r:
        for ev in r:
            if isinstance(ev, Messages):
                rows += ev.records.num_rows
    assert rows == parts * times * ROWS
    segments = len(glob.glob(os.path.join(root, "s", "part=*", "*.arrow")))
    assert segments == parts
    # each part's first event too: the replayer has every part start its first events before it reads any
    assert taken == {"ahead": parts * times, "in place": 0}, taken


@pytest.mark.parametrize("shared", [2, readahead.SHARED_DEPTH])
def test_a_reader_alone_decodes_four_ahead_and_readers_side_by_side_the_shared_depth(tmp_path, monkeypatch,
                                                                                      shared) -> None:
    """The default depth: a reader alone in its process keeps up to four events decoding ahead; while several
    readers decode ahead at once, each keeps at most ``SHARED_DEPTH``. Decoding is slowed so that what the
    reader allows is reached."""
    monkeypatch.delenv("EVENTLOG_READ_AHEAD", raising=False)
    monkeypatch.setattr(workers, "CORES", 2)
    monkeypatch.setattr(readahead, "SHARED_DEPTH", shared)
    # readers of earlier tests in this process that the garbage collector has not closed yet count as readers
    # side by side (each then keeps two ahead, not four): collect them, and start from nothing held
    gc.collect()
    monkeypatch.setattr(readahead, "_live", 0)
    monkeypatch.setattr(readahead, "_held", 0)
    root = str(tmp_path)
    log = open_log(root, sync="none")
    for p in range(3):
        with Capture(log, "s", p, 3, schema=SCHEMA) as cap:
            for t in range(10):
                cap.send(t, batch(100 * p + t))
                cap.advance_to(t + 1)
    real = readahead.decode
    monkeypatch.setattr(readahead, "decode", lambda *a: (time.sleep(0.01), real(*a))[1])
    most: list[int] = []
    start = readahead.ReadAhead.start

    def spy(self, *a):  # noqa: ANN001, ANN002, ANN202
        start(self, *a)
        most.append(len(self._flight))

    monkeypatch.setattr(readahead.ReadAhead, "start", spy)
    alone = [e.seq for e in open_log(root).reader("s", 0)]
    assert len(alone) == 21 and max(most) == 4
    most.clear()
    readers = [open_log(root).reader("s", p) for p in range(3)]
    its = [iter(r) for r in readers]
    for _ in range(20):  # side by side, as a replayer merging three parts reads them
        for it in its:
            next(it)
    for r in readers:
        r.close()
    assert max(most) == shared


def test_events_go_to_the_pool_in_chunks(tmp_path, monkeypatch) -> None:
    """A reader hands its large events to the pool a chunk at a time (one hand-off for several), each chunk at
    most ``CHUNK`` events of the segment in order, every large event in one chunk at most once."""
    monkeypatch.setattr(readahead, "PATIENCE", None)
    root = str(tmp_path)
    capture(root, 24, segment_bytes=64 << 20)
    chunks: list[list[int]] = []
    real = readahead._run_chunk

    def spy(ahead, decoder, mapped, items):  # noqa: ANN001, ANN202
        chunks.append([offset for offset, *_ in items])
        return real(ahead, decoder, mapped, items)

    monkeypatch.setattr(readahead, "_run_chunk", spy)
    ahead, err = read(root, 4, monkeypatch)
    assert err is None and same(ahead, read(root, 0, monkeypatch)[0])
    offsets = [o for c in chunks for o in c]
    assert all(1 <= len(c) <= readahead.CHUNK for c in chunks)
    assert all(c == sorted(c) for c in chunks) and len(set(offsets)) == len(offsets)
    big = large(entries(segments(root)[0])[1])
    assert set(offsets) <= {e.offset for e in big}
    assert len(chunks) < len(offsets)  # fewer hand-offs than events decoded ahead


@pytest.mark.parametrize("seed", range(4))
def test_a_reader_does_not_wait_behind_a_busy_pool(tmp_path, monkeypatch, seed) -> None:
    """While every pool thread is busy elsewhere, a reader takes back the events it handed to the pool once it has
    waited ``readahead.PATIENCE`` for each, and decodes them itself: it reads everything (the same events, the
    same error after damage) without waiting for the pool to be free, and the pool decodes none of them."""
    rnd = random.Random(seed)
    root = str(tmp_path)
    capture(root, 10, segment_bytes=rnd.choice([300_000, 1 << 20]))
    if seed % 2:  # damage in an event the pool was handed
        seg = rnd.choice(segments(root))
        victim = rnd.choice(large(entries(seg)[1])[1:])
        data = bytearray(open(seg, "rb").read())
        data[victim.offset + rnd.randrange(victim.length)] ^= 1 << rnd.randrange(8)
        open(seg, "wb").write(bytes(data))
    want = read(root, 0, monkeypatch)
    decoded = []
    real = readahead.decode
    monkeypatch.setattr(readahead, "decode", lambda *a: decoded.append(a[2]) or real(*a))
    pool = workers.pool()
    release = threading.Event()
    busy = [pool.submit(release.wait, 30) for _ in range(workers.size())]
    try:
        got = read(root, 4, monkeypatch)
        assert not decoded  # the pool was busy all along: the reader decoded everything it read
    finally:
        release.set()
        for f in busy:
            f.result()
    assert got[1] == want[1] and same(got[0], want[0])
