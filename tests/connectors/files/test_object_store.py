"""File logs on object stores (FORMAT.md §3.5): every sync puts a sealed segment object, the conditional create of
that object fences a second writer of the part, and nothing a reader lists is ever half-written.

Each behaviour runs against a real S3 server (moto's, the ``s3_server`` fixture) and against ``MemoryStorage(objects=True)``
(the same writer path in one process, which also lets the tests race writers precisely).
"""

from __future__ import annotations

import subprocess
import sys
import threading

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest

from capture import Capture
from connectors.files import FileLog
from connectors.files.storage import MemoryStorage
from eventlog.errors import (
    CorruptLogError,
    EventLogError,
    HeaderMismatchError,
    StorageUnavailableError,
    WriterFencedError,
)
from eventlog.events import Messages, Progress
from eventlog.log import open_log

SCHEMA = pa.schema([("x", pa.int64()), ("s", pa.string())])


class _Store:
    """One object store under test: ``log()`` opens a fresh FileLog (a new client) on the same objects."""

    def __init__(self, kind: str, request) -> None:
        self.kind = kind
        if kind == "s3":
            self.uri = f"{request.getfixturevalue('s3_bucket')}/logs"
            self._mem = None
        else:
            self.uri = "memory-objects"
            self._mem = MemoryStorage(objects=True)

    def log(self, **options) -> FileLog:
        if self._mem is not None:
            return FileLog("logs", storage=self._mem, **options)
        return open_log(self.uri, **options)  # type: ignore[return-value]

    def names(self, stream: str, part: int) -> list[str]:
        log = self.log()
        return log._st.list_dir(log.part_path(stream, part))

    def damage(self, path: str, offset: int) -> None:
        st = self.log()._st
        data = bytearray(st.read_file(path))
        data[offset] ^= 0xFF
        st.remove(path)
        st.write_file(path, bytes(data))


@pytest.fixture(params=["s3", "memory-objects"])
def store(request) -> _Store:
    return _Store(request.param, request)


def _rows(t: int, n: int = 3) -> list[dict]:
    return [{"x": t * 100 + i, "s": f"r{t}-{i}"} for i in range(n)]


def _records(log, stream: str, part: int) -> list[tuple[int, int]]:
    out = []
    for e in log.reader(stream, part):
        if isinstance(e.event, Messages):
            out += [(e.event.time, x) for x in e.event.records.column("x").to_pylist()]
    return out


def test_each_advance_is_durable_and_visible_to_a_new_client_at_once(store):
    cap = Capture(store.log(), "s", 0, 1, schema=SCHEMA)
    for t in range(4):
        cap.send(t, _rows(t))
        cap.advance_to(t + 1)
        fresh = store.log()  # another process's view: only what is on the store
        assert _records(fresh, "s", 0) == [(u, u * 100 + i) for u in range(t + 1) for i in range(3)]
        assert fresh.check_part("s", 0) == []
    cap.close()
    names = store.names("s", 0)
    assert not [n for n in names if n.endswith(".open")], names  # objects are only ever put sealed
    assert len([n for n in names if n.endswith(".arrow")]) == 5  # one per advance, one for close
    assert store.log().part_stats("s", 0).next_seq == 10


def test_nothing_a_writer_has_not_synced_is_on_the_store(store):
    log = store.log(sync="none", segment_bytes=1 << 30)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    for t in range(3):
        cap.send(t, _rows(t))
        cap.advance_to(t + 1)
    assert store.log().segments("s", 0) == []  # sync="none": sealed only when full or closed
    cap.close()
    assert [t for t, _ in _records(store.log(), "s", 0)] == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_segments_rotate_by_size_between_syncs(store):
    log = store.log(segment_bytes=2000)
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    for t in range(10):
        cap.send(t, _rows(t, 20))
    cap.advance_to(10)
    cap.close()
    fresh = store.log()
    assert len(fresh.segments("s", 0)) > 3
    assert len(_records(fresh, "s", 0)) == 200
    assert fresh.check_part("s", 0) == []


def test_a_second_writer_of_a_part_is_fenced_and_the_log_stays_one_writers_per_seq(store):
    log = store.log()
    log.create_stream(Capture(log, "s", 0, 1, schema=SCHEMA).header)  # header only; that capture is dropped
    a = store.log().writer("s", 0)
    b = store.log().writer("s", 0)
    assert a.next_seq == b.next_seq == 1
    a.append(Progress([]))
    b.append(Progress([]))
    b.append(Progress([]))
    b.sync()  # b puts seq 1..2 first
    with pytest.raises(WriterFencedError) as e:
        a.sync()
    assert e.value.seq == 1 and "00000000000000000001" in str(e.value.path)
    with pytest.raises(EventLogError, match="failed earlier"):
        a.append(Progress([]))
    a.close()  # releases without writing
    b.append(Progress([]))
    b.close()
    fresh = store.log()
    assert [e.seq for e in fresh.reader("s", 0)] == [1, 2, 3]
    assert fresh.check_part("s", 0) == []
    # a writer opened now continues after b, with a newer epoch
    c = fresh.writer("s", 0)
    assert c.next_seq == 4 and c.mark.epoch > b.mark.epoch
    c.close()


def test_writers_racing_for_one_segment_exactly_one_wins(store):
    log = store.log()
    log.create_stream(Capture(log, "s", 0, 1, schema=SCHEMA).header)
    writers = [store.log().writer("s", 0) for _ in range(6)]
    for i, w in enumerate(writers):
        w.append(Progress([]))
        for _ in range(i):
            w.append(Progress([]))  # different contents: the winner's object must be whole and its own
    barrier = threading.Barrier(len(writers))
    outcome: list[object] = [None] * len(writers)

    def run(i: int) -> None:
        barrier.wait()
        try:
            writers[i].sync()
            outcome[i] = "won"
        except WriterFencedError:
            outcome[i] = "fenced"
        except BaseException as e:  # noqa: BLE001 - reported below
            outcome[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(writers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(map(str, outcome)) == ["fenced"] * 5 + ["won"], outcome
    winner = outcome.index("won")
    for w in writers:
        w.close()
    assert [e.seq for e in store.log().reader("s", 0)] == list(range(1, winner + 2))
    assert store.log().check_part("s", 0) == []


def test_a_writer_that_died_loses_only_what_it_had_not_synced(store):
    log = store.log()
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    cap.send(0, _rows(0))
    cap.advance_to(1)
    cap.send(1, _rows(1))  # appended, never synced: the process dies here (its memory is gone)
    del cap
    w = store.log().writer("s", 0)
    assert w.next_seq == 3 and w.recovery is None
    w.close()
    assert _records(store.log(), "s", 0) == [(0, 0), (0, 1), (0, 2)]


def test_a_segment_whose_index_was_never_put_reads_whole_and_the_next_writer_rebuilds_it(store):
    log = store.log()
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    for t in range(3):
        cap.send(t, _rows(t))
        cap.advance_to(t + 1)
    cap.close()
    part = log.part_path("s", 0)
    last = log.segments("s", 0)[-1]
    index = log._st.join(part, f"_{last:020d}.index")
    log._st.remove(index)  # the writer died between the segment's put and its index's
    fresh = store.log()
    assert len(_records(fresh, "s", 0)) == 9
    assert [str(e) for e in fresh.check_part("s", 0)]  # reported, not hidden
    w = fresh.writer("s", 0)
    assert w.recovery is not None and w.recovery.events_indexed >= 1
    w.close()
    assert store.log().check_part("s", 0) == []


def test_a_damaged_segment_object_is_named_and_no_writer_changes_it(store):
    log = store.log()
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    for t in range(2):
        cap.send(t, _rows(t, 50))
        cap.advance_to(t + 1)
    cap.close()
    part = log.part_path("s", 0)
    first = log.segments("s", 0)[-1]
    path = log._st.join(part, f"{first:020d}.arrow")
    size = len(log._st.read_file(path))
    store.damage(path, size // 2)
    before = store.log()._st.read_file(path)
    with pytest.raises(CorruptLogError) as e:
        list(store.log().reader("s", 0))
    assert e.value.path == path and e.value.part == 0 and e.value.stream == "s" and e.value.offset is not None
    problems = store.log().check_part("s", 0)
    assert problems and all(p.path in (path, log._st.join(part, f"_{first:020d}.index")) for p in problems)
    with pytest.raises(CorruptLogError):
        store.log().writer("s", 0)
    assert store.log()._st.read_file(path) == before


def test_two_creators_of_one_stream_agree_or_one_is_refused(store):
    a, b = store.log(), store.log()
    header = Capture(a, "s", 0, 2, schema=SCHEMA).header
    other = pa.schema([("y", pa.int32())])
    with pytest.raises(HeaderMismatchError):
        Capture(b, "s", 1, 2, schema=other)
    assert Capture(store.log(), "s", 1, 2, schema=SCHEMA).header.schema == header.schema


def test_a_live_reader_sees_each_sealed_segment_once(store):
    log = store.log()
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    reader = store.log().reader("s", 0)
    seen = []
    for t in range(5):
        cap.send(t, _rows(t))
        cap.advance_to(t + 1)
        seen += [e.seq for e in reader]
    cap.close()
    seen += [e.seq for e in reader]
    assert seen == list(range(1, 12))


# -- S3 only: the stream folder as a dataset, the CLI, URIs, an unreachable store --------------------------


def test_the_s3_stream_folder_is_a_dataset_of_the_captured_records(s3_bucket):
    uri = f"{s3_bucket}/logs"
    cap = Capture(open_log(uri), "s", 0, 2, schema=SCHEMA)
    cap2 = Capture(open_log(uri), "s", 1, 2, schema=SCHEMA)
    for t in range(3):
        cap.send(t, _rows(t))
        cap2.send(t, _rows(t + 10))
        cap.advance_to(t + 1)
        cap2.advance_to(t + 1)
    cap.close()
    cap2.close()
    fs, path = pafs.FileSystem.from_uri(f"{uri}/s")
    table = ds.dataset(path, filesystem=fs, format="ipc", partitioning="hive").to_table()
    assert sorted(table.column("x").to_pylist()) == sorted(
        [t * 100 + i for t in range(3) for i in range(3)] + [t * 100 + i for t in range(10, 13) for i in range(3)])
    assert set(table.column("part").to_pylist()) == {0, 1}
    assert sorted(set(table.column("_time").to_pylist())) == [0, 1, 2]


def _replay(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replay.cli", *args], capture_output=True, text=True, timeout=300,
                          env=env)


def test_replay_copy_verify_and_cat_work_on_s3(s3_bucket, tmp_path, s3_server):
    import os

    local = tmp_path / "local"
    cap = Capture(open_log(str(local)), "s", 0, 1, schema=SCHEMA)
    for t in range(3):
        cap.send(t, _rows(t))
        cap.advance_to(t + 1)
    cap.close()
    env = {**os.environ, **s3_server.env}
    dst = f"{s3_bucket}/copied"
    r = _replay("copy", str(local), dst, "s", env=env)
    assert r.returncode == 0, r.stderr
    r = _replay("verify", dst, env=env)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
    assert _records(open_log(dst), "s", 0) == _records(open_log(str(local)), "s", 0)
    back = tmp_path / "back"
    r = _replay("copy", dst, str(back), "s", env=env)
    assert r.returncode == 0, r.stderr
    assert _records(open_log(str(back)), "s", 0) == _records(open_log(str(local)), "s", 0)
    r = _replay("cat", dst, "s", "--format", "jsonl", env=env)
    assert r.returncode == 0 and '"x": 201' in r.stdout.replace('"x":201', '"x": 201'), r.stdout + r.stderr


def test_the_endpoint_in_the_uri_query_serves_reads_and_conditional_writes(s3_bucket, s3_server, monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    bucket = s3_bucket.removeprefix("s3://")
    uri = f"s3://{bucket}/q?endpoint_override=127.0.0.1:{s3_server.port}&scheme=http"
    a, b = open_log(uri), open_log(uri)
    cap = Capture(a, "s", 0, 1, schema=SCHEMA)
    cap.send(0, _rows(0))
    cap.advance_to(1)
    w = b.writer("s", 0)
    w.append(Progress([]))
    cap.send(1, _rows(1))
    w.sync()
    with pytest.raises(WriterFencedError):  # the conditional create went to the same server
        cap.advance_to(2)
    w.close()
    assert _records(open_log(uri), "s", 0) == [(0, 0), (0, 1), (0, 2)]


def test_an_unreachable_store_is_a_clear_error_not_a_hang(monkeypatch):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    with pytest.raises(StorageUnavailableError) as e:
        Capture(open_log("s3://nobucket/logs"), "s", 0, 1, schema=SCHEMA)
    assert f"127.0.0.1:{port}" in str(e.value) and e.value.stream == "s"


def test_a_store_that_dies_mid_capture_fails_the_advance_clearly(s3_server, tmp_path, monkeypatch):
    """The server stops between two advances: the next write raises StorageUnavailableError (after the clients'
    bounded retries) and the writer takes nothing more."""
    port = 17975
    tool = [sys.executable, "tools/s3-server"]
    data = str(tmp_path / "own-s3")
    subprocess.run([*tool, "start", "--port", str(port), "--data", data, "--bucket", "own"], check=True,
                   capture_output=True, timeout=120)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
        cap = Capture(open_log("s3://own/logs"), "s", 0, 1, schema=SCHEMA)
        cap.send(0, _rows(0))
        cap.advance_to(1)
        assert _records(open_log("s3://own/logs"), "s", 0) == [(0, 0), (0, 1), (0, 2)]
    finally:
        subprocess.run([*tool, "stop", "--port", str(port), "--data", data], capture_output=True, timeout=120)
    with pytest.raises(StorageUnavailableError) as e:
        cap.send(1, _rows(1))  # a new segment starts by looking for another writer's object of its seq
        cap.advance_to(2)
    assert e.value.stream == "s" and e.value.part == 0 and "127.0.0.1:17975" in str(e.value)
    with pytest.raises(EventLogError, match="failed earlier"):
        cap.send(2, _rows(2))


def test_a_put_that_fails_leaves_the_writer_failed_and_the_log_as_acknowledged():
    class Flaky(MemoryStorage):
        fail = False

        def create_exclusive(self, path: str, data: bytes) -> bool:
            if self.fail and path.endswith(".arrow"):
                raise OSError("Could not connect to the endpoint URL: http://127.0.0.1:1/")
            return super().create_exclusive(path, data)

    st = Flaky(objects=True)
    cap = Capture(FileLog("logs", storage=st), "s", 0, 1, schema=SCHEMA)
    cap.send(0, _rows(0))
    cap.advance_to(1)
    st.fail = True
    cap.send(1, _rows(1))
    with pytest.raises(StorageUnavailableError):
        cap.advance_to(2)
    with pytest.raises(EventLogError, match="failed earlier"):
        cap.advance_to(2)
    st.fail = False
    again = Capture(FileLog("logs", storage=st), "s", 0, 1, schema=SCHEMA)
    assert again.frontier == cap.frontier.__class__([1]) and again.next_seq == 3
    again.send(1, _rows(1))
    again.close()
    assert [t for t, _ in _records(FileLog("logs", storage=st), "s", 0)] == [0, 0, 0, 1, 1, 1]


def test_trim_and_schema_changes_on_an_object_store(store):
    """Issue 32 on S3 (and the in-memory object store): a trim records its mark with a conditional put and
    deletes whole segment objects; a writer's schema change is recorded the same way; a new client reads the
    retained times in the current schema."""
    from eventlog.antichain import Antichain
    from eventlog.parts.trim import trim

    log = store.log()
    cap = Capture(log, "s", 0, 1, schema=SCHEMA)
    for t in range(6):
        cap.send(t, _rows(t))
        cap.advance_to(t + 1)  # each sync seals a segment object
    cap.abort()
    before = store.names("s", 0)
    result = trim(store.log(), "s", since=Antichain([3]))
    assert result.since == Antichain([3]) and result.events_removed > 0
    assert len(store.names("s", 0)) < len(before)
    wider = SCHEMA.append(pa.field("extra", pa.int64()))
    with Capture(store.log(), "s", 0, 1, schema=wider) as again:
        again.send(6, [{**r, "extra": 7} for r in _rows(6)])
    fresh = store.log()
    assert fresh.header("s").schema.equals(wider)
    from replay.replayer import Replayer

    with Replayer(fresh, "s") as r:
        got = {t: table.to_pylist() for t, table in r.completed()}
    assert sorted(got) == [3, 4, 5, 6]
    assert got[3][0]["extra"] is None and got[6][0]["extra"] == 7
