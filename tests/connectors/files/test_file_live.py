"""Live reads of a file log: a reader following a part while a writer appends, flushes, syncs, rotates
segments, crashes and recovers must deliver every event exactly once, in order, with its content.

Two tests drive the interleavings:

* ``test_every_interleaving_delivers_each_event_once``: a writer thread and a reader share a storage
  whose every operation is a scheduling point; hypothesis chooses how many writer operations run
  between two reader operations (a write may also land in pieces, as buffered bytes reach the OS), and
  where the writer crashes (its lock released, nothing else) and a new writer recovers the part.
  ``EVENTLOG_LIVE_EXAMPLES=2000`` explores more interleavings (60 by default).
* ``test_stress_writer_process_and_followers``: the bounded run of ``tools/stress_live_reads.py``: a
  writer process on tiny segments, killed once, and followers (``log.reader`` polled,
  ``Replayer(follow=True)``) in their own processes, for every sync mode and both encodings.
"""

from __future__ import annotations

import importlib.util
import os
import random
import sys
import threading
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.files import FileLog
from connectors.files.storage import LocalStorage, MemoryStorage
from eventlog import Messages, Progress, StreamHeader
from tests.support.paths import TOOLS

SCHEMA = pa.schema([("x", pa.int64()), ("s", pa.string())])


def event(seq: int) -> Messages | Progress:
    """The event the writer appends at ``seq`` (whichever writer session writes it)."""
    if seq % 3 == 0:
        return Progress(((seq - 1, -1), (seq, 1)))
    return Messages(seq, pa.RecordBatch.from_pylist([{"x": seq * 10 + i, "s": "w" * (seq % 7)}
                                                      for i in range(seq % 4 + 1)], schema=SCHEMA))


class _Crash(Exception):
    """The writer "process" dies here."""


class _Sched:
    """Runs a writer thread step by step: the reader grants it a number of storage operations at each of
    its own storage operations, so the interleaving is the one the random choices describe."""

    def __init__(self, rng: random.Random, crash_points: set[int]) -> None:
        self.rng = rng
        self.cv = threading.Condition()
        self.grant = 0
        self.done = False
        self.points = 0
        self.crash_points = crash_points
        self.dying = False
        self.writer_thread: threading.Thread | None = None

    def point(self) -> None:
        if threading.current_thread() is self.writer_thread:
            self._writer_point()
        else:
            self.run_writer(self.rng.choice((0, 0, 1, 1, 2, 3, 8)))

    def _writer_point(self) -> None:
        with self.cv:
            while self.grant == 0:
                if not self.cv.wait(timeout=20):
                    raise TimeoutError("the reader stopped granting steps")
            self.grant -= 1
            self.points += 1
            self.cv.notify_all()
            if self.points in self.crash_points and not self.dying:
                raise _Crash

    def run_writer(self, steps: int) -> None:
        """Let the writer run ``steps`` storage operations (fewer if it finishes)."""
        if self.writer_thread is None:
            return
        with self.cv:
            self.grant += steps
            self.cv.notify_all()
            while self.grant > 0 and not self.done:
                if not self.cv.wait(timeout=20):
                    raise TimeoutError("the writer thread stopped")

    def finish(self) -> None:
        with self.cv:
            self.done = True
            self.cv.notify_all()


class _SchedAppend:
    def __init__(self, inner: Any, sched: _Sched) -> None:
        self._inner, self._sched = inner, sched

    def write(self, data: bytes) -> None:
        # bytes reach the OS in pieces (a buffered writer flushing mid-event): readers may see any prefix
        cuts = sorted(self._sched.rng.sample(range(1, len(data)), min(2, len(data) - 1))) if len(data) > 1 else []
        start = 0
        for end in [*cuts, len(data)]:
            self._sched.point()
            self._inner.write(data[start:end])
            self._inner.flush()
            start = end

    def flush(self) -> None:
        self._sched.point()
        self._inner.flush()

    def fsync(self) -> None:
        self._sched.point()
        self._inner.fsync()

    def close(self) -> None:
        self._sched.point()
        self._inner.close()


class _SchedRead:
    def __init__(self, inner: Any, sched: _Sched) -> None:
        self._inner, self._sched = inner, sched

    def size(self) -> int:
        self._sched.point()
        return self._inner.size()

    def read_at(self, offset: int, length: int) -> bytes:
        self._sched.point()
        return self._inner.read_at(offset, length)

    def map(self) -> pa.Buffer:
        self._sched.point()
        return self._inner.map()

    def close(self) -> None:
        self._inner.close()


class _SchedStorage:
    """A storage whose every operation is a scheduling point."""

    def __init__(self, inner: Any, sched: _Sched) -> None:
        self._inner, self._sched = inner, sched

    def create(self, path: str) -> _SchedAppend:
        self._sched.point()
        return _SchedAppend(self._inner.create(path), self._sched)

    def open_read(self, path: str) -> _SchedRead:
        self._sched.point()
        return _SchedRead(self._inner.open_read(path), self._sched)

    def join(self, *parts: str) -> str:
        return self._inner.join(*parts)

    def lock(self, path: str) -> object:
        return self._inner.lock(path)

    def unlock(self, handle: object) -> None:
        self._inner.unlock(handle)

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._inner, name)

        def op(*args: Any, **kwargs: Any) -> Any:
            self._sched.point()
            return fn(*args, **kwargs)

        return op


def _writer_loop(log: FileLog, n: int, sync_every: int, sched: _Sched, errors: list[BaseException]) -> None:
    try:
        while True:
            w = None
            try:
                w = log.writer("s", 0)
                while w.next_seq <= n:
                    seq = w.append(event(w.next_seq))
                    if seq % sync_every == 0:
                        w.sync()
                w.close()
                return
            except _Crash:
                sched.dying = True
                if w is not None and not w._closed:  # the process died: its lock is released (close() releases
                    w._closed = True                   # it itself), its files are closed
                    if w._seg is not None:
                        w._seg.data.close()
                        w._seg.index.close()
                    w._st.unlock(w._lock)
                sched.dying = False
    except BaseException as e:  # noqa: BLE001 - reported by the test
        errors.append(e)
    finally:
        sched.finish()


def _check_entry(entry: Any, expected_seq: int) -> None:
    assert entry.seq == expected_seq, f"got seq {entry.seq}, expected {expected_seq}"
    want = event(entry.seq)
    if isinstance(want, Messages):
        assert isinstance(entry.event, Messages) and entry.event.time == want.time
        assert entry.event.records.to_pylist() == want.records.to_pylist()
    else:
        assert entry.event == want


@settings(max_examples=int(os.environ.get("EVENTLOG_LIVE_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    encoding=st.sampled_from(["arrow", "avro"]),
    storage=st.sampled_from(["memory", "local"]),
    n=st.integers(5, 40),
    segment_bytes=st.integers(1, 1600),
    sync_every=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
    crashes=st.lists(st.integers(1, 400), max_size=3),
)
def test_every_interleaving_delivers_each_event_once(tmp_path_factory, encoding, storage, n, segment_bytes,
                                                     sync_every, seed, crashes):
    rng = random.Random(seed)
    sched = _Sched(rng, set(crashes))
    inner = MemoryStorage() if storage == "memory" else LocalStorage()
    root = "" if storage == "memory" else str(tmp_path_factory.mktemp("live"))
    st_ = _SchedStorage(inner, sched)
    wlog = FileLog(root, storage=st_, sync="none", segment_bytes=segment_bytes)
    wlog.create_stream(StreamHeader("s", 1, SCHEMA, "int64", encoding))
    rlog = FileLog(root, storage=st_, segment_bytes=segment_bytes)
    errors: list[BaseException] = []
    t = threading.Thread(target=_writer_loop, args=(wlog, n, sync_every, sched, errors), daemon=True)
    sched.writer_thread = t
    t.start()
    reader = rlog.reader("s", 0)
    got = 0
    try:
        while True:
            done = sched.done
            for entry in reader:
                _check_entry(entry, got + 1)
                got += 1
            if done and not errors:  # one more poll after the writer finished saw everything
                break
            if errors:
                break
            sched.run_writer(rng.choice((1, 3, 10)))
    finally:
        sched.finish()
        t.join(timeout=60)
        reader.close()
    assert not errors, errors
    assert got == n
    assert [e.seq for e in FileLog(root, storage=inner).reader("s", 0)] == list(range(1, n + 1))


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_reader_that_read_a_segment_sees_appends_made_before_the_rotation_it_sees(tmp_path, encoding):
    """The race of issue 12 item 1, made deterministic: between the reader's last read of a segment and
    its look for the next one, the writer appends to that segment and rotates."""

    class HookStorage(LocalStorage):
        hook: Any = None

        def list_dir(self, path: str) -> list[str]:
            if self.hook is not None:
                hook, self.hook = self.hook, None
                hook()
            return super().list_dir(path)

    st_ = HookStorage()
    root = str(tmp_path)
    log = FileLog(root, storage=st_, segment_bytes=1600)
    log.create_stream(StreamHeader("s", 1, SCHEMA, "int64", encoding))
    w = log.writer("s", 0)
    w.append(event(1))
    w.sync()
    reader = FileLog(root, storage=st_).reader("s", 0)
    assert [e.seq for e in reader] == [1]

    def append_and_rotate() -> None:
        segments = len(log.segments("s", 0))
        while len(log.segments("s", 0)) == segments:
            w.append(event(w.next_seq))
        w.append(event(w.next_seq))
        w.sync()

    st_.hook = append_and_rotate
    seen = []
    for e in reader:
        _check_entry(e, len(seen) + 2)
        seen.append(e.seq)
    assert st_.hook is None and len(FileLog(root).segments("s", 0)) == 2
    assert seen == list(range(2, w.next_seq))
    w.close()
    assert list(reader) == []


def _stress_module() -> Any:
    path = TOOLS / "stress_live_reads.py"
    spec = importlib.util.spec_from_file_location("stress_live_reads", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["stress_live_reads"] = mod  # dataclasses and spawned followers look it up by name
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("encoding", ["arrow", "avro"])
def test_stress_writer_process_and_followers(tmp_path, encoding):
    stress = _stress_module()
    for sync in ("fsync", "flush", "none"):
        r = stress.run_config(encoding, sync, times=150, followers=1, kills=1, seed=7, idle_timeout=60,
                              workdir=str(tmp_path))
        assert not r.problems, (sync, r.problems)
        assert r.events >= 300 and r.segments >= 20 and r.kills == 1
        assert len(r.followers) == 2 and all(o.events for o in r.followers)


# these tests poke at the files of the 1.x layout (format 2.0 files: test_file_format2.py)
pytestmark = pytest.mark.usefixtures("file_format_1")
