"""The runtime's checkpoints, sink staging and outputs on S3 (moto's S3 server, the ``s3_server`` fixture): pipelines run
with every checkpoint object, staged epoch, cursor and output segment in a bucket — in threads and on local
Spark — and fail over from checkpoints there with output equal to the failure-free run's; damaged or
missing checkpoint objects are ``CheckpointCorruptError``\\ s naming the ``s3://`` object (and the job falls
back as on a local disk); two drivers of one job are fenced at the counters; a store that stops answering
mid-run ends the run with ``StoreUnavailableError`` instead of a hang; locations S3 cannot serve are
refused before anything starts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse

import pyarrow as pa
import pytest

from capture import Capture
from runtime import (
    CheckpointCorruptError,
    CheckpointError,
    Fault,
    FaultPlan,
    Job,
    JobFailedError,
    LocationError,
    StoreUnavailableError,
    UnreachableLocationError,
)
from runtime.checkpoints.marks import check_mark, write_mark
from runtime.checkpoints.storage import open_state_fs
from runtime.checkpoints.store import CheckpointStore
from runtime.locations import check_locations
from tests.support.pipelines import COUNT_SCHEMA, WORDS, events, expected_counts, read_counts, wordcount_job
from tests.support.ports import worker_index

OWN_PORT = 17995 + 300 * worker_index()
"""The port of the server ``own_s3`` starts (per pytest-xdist worker: two workers never share one)."""


def _dead_port() -> int:
    """A port nothing listens on: one the OS hands out for a moment (ephemeral, where no test server binds)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- S3 helpers ------------------------------------------------------------------------------------------


def _client():
    import boto3

    return boto3.client("s3")


def _split(uri: str) -> tuple[str, str]:
    p = urlparse(uri)
    return p.netloc, p.path.lstrip("/")


def _keys(uri: str) -> list[str]:
    """Every key under ``uri`` (a prefix), relative to it."""
    bucket, prefix = _split(uri)
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    out = []
    for page in _client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += [o["Key"][len(prefix):] for o in page.get("Contents", [])]
    return sorted(out)


def _get(uri: str) -> bytes:
    bucket, key = _split(uri)
    return _client().get_object(Bucket=bucket, Key=key)["Body"].read()


def _put(uri: str, data: bytes) -> None:
    bucket, key = _split(uri)
    _client().put_object(Bucket=bucket, Key=key, Body=data)


def _delete(uri: str) -> None:
    bucket, key = _split(uri)
    _client().delete_object(Bucket=bucket, Key=key)


def _copy_tree(src: str, dst: str) -> None:
    sb, sp = _split(src)
    db, dp = _split(dst)
    c = _client()
    for k in _keys(src):
        c.copy_object(Bucket=db, Key=f"{dp}/{k}".lstrip("/"), CopySource={"Bucket": sb, "Key": f"{sp}/{k}".lstrip("/")})


def _no_local_state(d) -> None:
    """Nothing under ``d`` but the channels: no folder named ``s3:`` (a URI taken for a relative path)."""
    assert sorted(os.listdir(d)) in ([], ["ch"]), os.listdir(d)


# -- pipelines on S3 ---------------------------------------------------------------------------------------


@pytest.fixture
def spark_s3(request, s3_server):
    """None (tasks in threads) or the local Spark session, its Python workers given the S3 client settings."""
    if request.param == "threads":
        yield None
        return
    spark = request.getfixturevalue("runtime_spark")
    env = spark.sparkContext.environment     # the environment of Python workers started from now on
    saved = {k: env.get(k) for k in s3_server.env}
    env.update(s3_server.env)
    yield spark
    for k, v in saved.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v


_WHERE = ["threads", pytest.param("spark", marks=pytest.mark.spark)]


@pytest.mark.parametrize("spark_s3", _WHERE, indirect=True)
def test_wordcount_keeps_checkpoints_staging_and_output_on_s3(spark_s3, s3_bucket, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out, ck = f"{s3_bucket}/out", f"{s3_bucket}/ck"
    job = wordcount_job("wc", out, mapper=1, items=200)
    result = job.run(spark_s3, channels=str(tmp_path / "ch"), checkpoints=ck, checkpoint_interval=0.1, timeout=240)
    assert result.status == "finished" and result.restarts == 0, result.failures
    assert read_counts(out) == expected_counts(items=200)
    keys = _keys(f"{ck}/wc")
    for name in ("master.json", "master.bak.json", "LATEST", "_RUN"):
        assert name in keys, keys
    final = f"chk-{result.last_checkpoint:010d}"
    assert f"{final}/_COMPLETE" in keys and f"{final}/count-00001.state" in keys and f"{final}/out-00000.state" in keys
    assert not [k for k in keys if k.endswith(".bundles")], "committed staged epochs are deleted"
    store = CheckpointStore(ck, "wc", create=False)
    assert store.location == f"{ck}/wc" and store.commit_horizon() == result.last_checkpoint
    _no_local_state(tmp_path)


@pytest.mark.parametrize("spark_s3", _WHERE, indirect=True)
def test_failover_from_checkpoints_on_s3_gives_the_failure_free_output(spark_s3, s3_bucket, tmp_path):
    """Failures while handling records, at a barrier (after the snapshot objects were put) and in the middle
    of a sink's commit (in threads: raised; on Spark: the worker SIGKILLed): every restart restores from the
    checkpoint on S3, and the output is the failure-free run's."""
    out, ck = f"{s3_bucket}/out", f"{s3_bucket}/ck"
    job = wordcount_job("wcfail", out, mapper=1, items=200, delay=0.002)
    if spark_s3 is None:
        faults = FaultPlan([Fault(0, "count", 1, "record", 15), Fault(1, "out", 0, "commit", 2),
                            Fault(2, "upper", 0, "barrier", 1)])
    else:
        faults = FaultPlan([Fault(0, "count", 0, "record", 40, kind="kill"),
                            Fault(1, "out", 0, "commit", 2, kind="kill")])
    result = job.run(spark_s3, channels=str(tmp_path / "ch"), checkpoints=ck, checkpoint_interval=0.1, faults=faults,
                     timeout=300)
    assert result.status == "finished" and result.restarts == len(faults.faults), result.failures
    assert any(r is not None for r in result.restored_from[1:]), result.restored_from   # restored from S3
    assert read_counts(out) == expected_counts(items=200)


def _write_input(uri: str, stream: str = "events", parts: int = 4, items: int = 200) -> None:
    """``pipelines.events`` captured as stream ``stream`` of the log at ``uri`` (``parts`` parts)."""
    gen = events(items)
    schema = pa.schema([("word", pa.string()), ("n", pa.int64())])
    for p in range(parts):
        with Capture(uri, stream, worker=p, peers=parts, schema=schema) as cap:
            last = None
            for t, rows in gen(p, 0):
                if last is not None and t != last:
                    cap.advance_to(t)
                cap.send(t, rows)
                last = t


def log_wordcount_job(name: str, inp: str, out: str, *, delay: float = 0.0) -> Job:
    """``wordcount_job``'s operators reading ``pipelines.events`` from stream ``events`` of the log ``inp``
    (``delay`` seconds per record in the map)."""
    def upper(r):
        if delay:
            time.sleep(delay)
        return {"word": r["word"].upper(), "n": r["n"]}

    job = Job(name)
    src = job.from_log(inp, "events", parallelism=2, name="source", poll_interval=0.05)
    counts = src.map(upper, parallelism=1, name="upper").filter(lambda r: r["n"] % 5 != 0, name="keep").key_by(
        "word").window(5).count(parallelism=2, name="count")
    counts.to_log(out, "counts", schema=COUNT_SCHEMA, parallelism=1, parts=3, name="out")
    return job


def test_input_output_and_checkpoints_all_on_s3(s3_bucket, tmp_path):
    """``from_log("s3://…")`` feeds the job, ``to_log("s3://…")`` takes its output, and one failure restores
    the source's read positions from the checkpoint on S3."""
    inp, out, ck = f"{s3_bucket}/in", f"{s3_bucket}/out", f"{s3_bucket}/ck"
    _write_input(inp)
    faults = FaultPlan([Fault(0, "count", 0, "record", 20)])
    result = log_wordcount_job("fromlog", inp, out, delay=0.0005).run(
        channels=str(tmp_path / "ch"), checkpoints=ck, checkpoint_interval=0.1, faults=faults, timeout=240)
    assert result.status == "finished" and result.restarts == 1, result.failures
    assert read_counts(out) == expected_counts(items=200)


def test_callable_sink_cursor_on_s3_delivers_each_batch_once(s3_bucket, tmp_path):
    """A callable sink's cursor objects (one PUT per call) and staged epochs on S3: failures in the middle of
    its commits make no call twice."""
    calls: list[tuple] = []
    job = Job("calls")
    src = job.from_generator(events(120, delay=0.001), parts=2, parallelism=2, name="source")
    src.key_by("word").window(5).count(parallelism=2, name="count").sink(
        lambda t, tb: calls.extend((t, r["word"], r["window_start"], r["count"]) for r in tb.to_pylist()),
        parallelism=1, parts=2, name="out")
    faults = FaultPlan([Fault(0, "out", 0, "commit", 3), Fault(1, "out", 0, "commit", 2)])
    ck = f"{s3_bucket}/ck"
    result = job.run(channels=str(tmp_path / "ch"), checkpoints=ck, checkpoint_interval=0.1, faults=faults,
                     timeout=180)
    assert result.status == "finished" and result.restarts == 2, result.failures
    assert len(calls) == len(set(calls))
    assert sorted(calls) == _count_all(120)
    assert any(k.endswith("/cursor") for k in _keys(f"{ck}/calls/staging/out"))


def _count_all(items: int, parts: int = 2, window: int = 5) -> list[tuple]:
    """Per-word window counts of ``events(items)`` over ``parts`` parts, without the map and filter."""
    acc: dict[tuple[str, int], int] = {}
    gen = events(items)
    for p in range(parts):
        for t, recs in gen(p, 0):
            for r in recs:
                w = t - t % window
                acc[(r["word"], w)] = acc.get((r["word"], w), 0) + 1
    return sorted((w + window - 1, word, w, c) for (word, w), c in acc.items())


# -- damaged checkpoint objects ----------------------------------------------------------------------------

NAME = "dmg"
ITEMS = 120


def _crash_ready(ck: str) -> bool:
    """Two complete checkpoints, the horizon 0 < h < the newest, some calls made, and the newest checkpoint
    listing staged epochs of both sinks that were never committed."""
    try:
        store = CheckpointStore(ck, NAME, create=False)
        done = [c for c in store.checkpoints() if store.is_complete(c)]
        if len(done) < 2:
            return False
        h = store.commit_horizon()
        if not 0 < h < done[-1]:
            return False
        for sink in ("calls", "out"):
            parts = store.load_task(done[-1], sink, 0)["state"]["parts"].values()
            if not any(e[0] > h for p in parts for e in p["pending"]):
                return False
        return any(k.endswith("/cursor") for k in _keys(f"{ck}/{NAME}/staging/calls"))
    except (CheckpointError, OSError):
        return False


def _crashing_events(ck: str | None):
    """``events``-like items (time ``i // 4``); with ``ck``, part 0 raises once ``_crash_ready(ck)``."""
    def gen(part: int, offset: int):
        for i in range(offset, ITEMS):
            if ck is not None and part == 0 and i >= 8 and i % 4 == 0 and _crash_ready(ck):
                raise RuntimeError("planned crash")
            time.sleep(0.004)
            yield i // 4, [{"word": WORDS[(i * 3 + part + j) % 5]} for j in range(3)]
        while ck is not None and part == 0:
            if _crash_ready(ck):
                raise RuntimeError("planned crash")
            yield None
            time.sleep(0.01)
    return gen


def _lines(path: str):
    def write(t: int, table: pa.Table) -> None:
        with open(path, "a") as f:
            for r in table.to_pylist():
                f.write(f"{t} {r['word']} {r['window_start']} {r['count']}\n")
    return write


def _damage_job(root: str, calls_file: str, crash: bool = False) -> Job:
    """source -> key_by(word).window(4).count -> a callable sink (lines of a local file) and a log sink on S3."""
    job = Job(NAME)
    src = job.from_generator(_crashing_events(f"{root}/ck" if crash else None), parts=2, parallelism=2,
                             name="source")
    counts = src.key_by("word").window(4).count(parallelism=2, name="count")
    counts.sink(_lines(calls_file), parallelism=1, parts=2, name="calls")
    counts.to_log(f"{root}/out", "counts", schema=COUNT_SCHEMA, parallelism=1, parts=2, name="out")
    return job


def _damage_expected() -> list[tuple]:
    acc: dict[tuple[str, int], int] = {}
    gen = _crashing_events(None)
    for p in range(2):
        for t, recs in gen(p, 0):
            for r in recs:
                acc[(r["word"], t - t % 4)] = acc.get((r["word"], t - t % 4), 0) + 1
    return sorted((w + 3, word, w, c) for (word, w), c in acc.items())


def _read_lines(path: str) -> list[tuple]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return sorted((int(a), b, int(c), int(d)) for a, b, c, d in (ln.split() for ln in f))


class Crashed:
    """A copy of a job that crashed on S3: ``c`` its newest complete checkpoint, ``h`` the horizon before it."""

    def __init__(self, root: str, calls_file: str) -> None:
        self.root = root
        self.ck = f"{root}/ck"
        self.calls_file = calls_file
        self.store = CheckpointStore(self.ck, NAME, create=False)
        done = [c for c in self.store.checkpoints() if self.store.is_complete(c)]
        self.c = done[-1]
        self.h = self.store.commit_horizon()

    def obj(self, name: str, checkpoint: int | None = None) -> str:
        return f"{self.ck}/{NAME}/chk-{checkpoint or self.c:010d}/{name}"

    def staged(self, sink: str) -> str:
        """The first staged epoch of ``sink`` after the horizon that checkpoint ``c`` lists."""
        for p, s in sorted(self.store.load_task(self.c, sink, 0)["state"]["parts"].items()):
            for e in s["pending"]:
                if e[0] > self.h:
                    return f"{self.ck}/{NAME}/staging/{sink}/p{p:05d}/{e[1]}"
        raise AssertionError(f"checkpoint {self.c} lists no uncommitted epoch of {sink}")

    def resume(self, **kw):
        kw.setdefault("max_restarts", 2)
        return _damage_job(self.root, self.calls_file).run(channels=os.path.join(os.path.dirname(self.calls_file),
                                                                                   "ch"),
                                                            checkpoints=self.ck, checkpoint_interval=0.05,
                                                            timeout=120, **kw)

    def check_output(self) -> None:
        assert _read_lines(self.calls_file) == _damage_expected()
        got = read_counts(f"{self.root}/out")
        assert got == _damage_expected()


@pytest.fixture(scope="module")
def crashed_template(s3_server, tmp_path_factory):
    d = tmp_path_factory.mktemp("crashed")
    root = f"s3://{s3_server.new_bucket()}/job"
    with pytest.raises(JobFailedError, match="planned crash"):
        _damage_job(root, str(d / "calls"), crash=True).run(channels=str(d / "ch"), checkpoints=f"{root}/ck",
                                                             checkpoint_interval=0.1, timeout=120, max_restarts=0)
    return root, str(d / "calls")


@pytest.fixture
def crashed(crashed_template, s3_bucket, tmp_path) -> Crashed:
    src_root, src_calls = crashed_template
    root = f"{s3_bucket}/job"
    _copy_tree(src_root, root)
    calls = str(tmp_path / "calls")
    with open(src_calls) as f, open(calls, "w") as g:
        g.write(f.read())
    cr = Crashed(root, calls)
    assert 0 < cr.h < cr.c, (cr.h, cr.c)
    return cr


def test_the_crashed_job_resumes_from_its_newest_checkpoint_on_s3(crashed):
    assert _read_lines(crashed.calls_file) != _damage_expected()
    result = crashed.resume()
    assert result.status == "finished" and result.restored_from[0] == crashed.c and not result.fallbacks
    crashed.check_output()


_OBJECTS = {
    "source snapshot": lambda cr: cr.obj("source-00001.state"),
    "keyed count snapshot": lambda cr: cr.obj("count-00000.state"),
    "callable sink snapshot": lambda cr: cr.obj("calls-00000.state"),
    "log sink snapshot": lambda cr: cr.obj("out-00000.state"),
    "manifest": lambda cr: cr.obj("_COMPLETE"),
    "callable sink staged epoch": lambda cr: cr.staged("calls"),
    "log sink staged epoch": lambda cr: cr.staged("out"),
}


def _truncated(uri: str) -> None:
    data = _get(uri)
    _put(uri, data[: len(data) // 2])


def _flipped(uri: str) -> None:
    data = bytearray(_get(uri))
    data[len(data) // 2] ^= 0x10
    _put(uri, bytes(data))


_DAMAGE = {"truncated": _truncated, "flipped": _flipped, "deleted": _delete}


@pytest.mark.parametrize("damage", sorted(_DAMAGE))
@pytest.mark.parametrize("kind", sorted(_OBJECTS))
def test_a_damaged_checkpoint_object_is_named_and_the_job_falls_back(crashed, kind, damage):
    uri = _OBJECTS[kind](crashed)
    _DAMAGE[damage](uri)
    result = crashed.resume()
    assert result.status == "finished" and result.restarts == 0, result.failures
    assert result.restored_from[0] == crashed.h, "did not fall back to the previous complete checkpoint"
    assert len(result.fallbacks) == 1 and f"file {uri!r}" in result.fallbacks[0], (uri, result.fallbacks)
    crashed.check_output()


@pytest.mark.parametrize("kind", ["both counters", "cursor"])
@pytest.mark.parametrize("damage", ["flipped", "oversized"])
def test_damage_no_fallback_helps_is_a_typed_error_naming_the_object(crashed, kind, damage):
    """Both copies of the counters or a callable sink's cursor: a ``CheckpointCorruptError`` naming the object
    and nothing output; an object larger than its kind may be is refused from its declared size."""
    if kind == "cursor":
        uris = [f"{crashed.ck}/{NAME}/staging/calls/{k}" for k in _keys(f"{crashed.ck}/{NAME}/staging/calls")
                if k.endswith("/cursor")][:1]
    else:
        uris = [f"{crashed.ck}/{NAME}/{n}" for n in ("master.json", "master.bak.json")]
    for u in uris:
        if damage == "flipped":
            _flipped(u)
        else:
            _put(u, b" " * (1 << 20))
    before = _read_lines(crashed.calls_file)
    with pytest.raises(CheckpointCorruptError) as e:
        crashed.resume()
    assert e.value.path in uris, (e.value.path, uris)
    if damage == "oversized":
        assert "more than the" in str(e.value)
    assert _read_lines(crashed.calls_file) == before


def test_one_damaged_counters_copy_is_ignored(crashed, caplog):
    uri = f"{crashed.ck}/{NAME}/master.json"
    _flipped(uri)
    import logging

    with caplog.at_level(logging.WARNING, logger="runtime"):
        result = crashed.resume()
    assert result.status == "finished" and result.restored_from[0] == crashed.c
    assert any(f"file {uri!r}" in r.getMessage() for r in caplog.records)
    crashed.check_output()


# -- the seam, the counters, run marks -----------------------------------------------------------------------


def test_state_objects_are_written_whole_read_bounded_and_deleted_by_prefix(s3_bucket):
    fs, root = open_state_fs(f"{s3_bucket}/st")
    assert fs.objects and fs.display(root) == f"{s3_bucket}/st"
    p = fs.join(root, "a", "x")
    fs.write(p, b"hello")
    assert fs.read(p, 5) == b"hello" and fs.exists(p) and fs.size(p) == 5
    fs.write(p, b"hello!")
    with pytest.raises(CheckpointCorruptError, match="6 bytes, more than the 5") as e:
        fs.read(p, 5)
    assert e.value.path == f"{s3_bucket}/st/a/x"
    with pytest.raises(CheckpointCorruptError, match="missing") as e:
        fs.read(fs.join(root, "a", "nothing"), 10)
    assert e.value.path == f"{s3_bucket}/st/a/nothing"
    out = fs.stage(fs.join(root, "a", "staged"))
    out.write(b"one ")
    assert not fs.exists(fs.join(root, "a", "staged"))      # nothing is visible before the barrier
    out.write(memoryview(b"two"))
    out.finish()
    with fs.open_read(fs.join(root, "a", "staged")) as f:
        assert f.read() == b"one two"
    assert fs.list(root) == ["a"] and fs.list(fs.join(root, "a")) == ["staged", "x"]
    fs.remove_tree(fs.join(root, "a"))
    assert fs.list(root) == [] and _keys(f"{s3_bucket}/st/a") == []
    fs.remove(fs.join(root, "gone"))        # missing: nothing to do


def test_a_second_driver_of_the_job_fences_the_first_at_the_counters(s3_bucket, tmp_path):
    """The counters are the one read-modify-write: on S3 a conditional write on the ETag read, so a driver
    whose counters another driver changed fails before it triggers or commits anything more."""
    first = CheckpointStore(f"{s3_bucket}/ck", "twice")
    assert first.next_generation() == 1
    first.reserve_checkpoint(1)
    second = CheckpointStore(f"{s3_bucket}/ck", "twice")
    assert second.next_generation() == 2
    with pytest.raises(CheckpointError, match="another driver of job 'twice' changed its counters"):
        first.reserve_checkpoint(2)
    with pytest.raises(CheckpointError, match="another driver"):
        first.advance_horizon(1)
    assert second.last_checkpoint_id() == 1 and second.commit_horizon() == 0
    # the local disk has no conditional writes: documented, nothing fences there
    a, b = CheckpointStore(str(tmp_path / "ck"), "twice"), CheckpointStore(str(tmp_path / "ck"), "twice")
    a.next_generation()
    b.next_generation()
    a.reserve_checkpoint(3)


def test_run_marks_on_s3(s3_bucket, monkeypatch):
    loc = f"{s3_bucket}/ck/job"
    write_mark(loc, 3, "t0k")
    check_mark(loc, 3, "t0k", what="checkpoint store", uri=loc, task="a.0")
    with pytest.raises(UnreachableLocationError, match="holds another run's mark"):
        check_mark(loc, 4, "t0k", what="checkpoint store", uri=loc, task="a.0")
    other = f"{s3_bucket}/elsewhere/job"
    with pytest.raises(UnreachableLocationError, match=rf"does not see the checkpoint store .*{other}/_RUN does not "
                                                       r"exist here; the object store must be reachable"):
        check_mark(other, 3, "t0k", what="checkpoint store", uri=other, task="a.0")
    # an executor whose S3 settings point nowhere: fails at once, naming the store
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_dead_port()}")  # not OWN_PORT: own_s3 may run
    with pytest.raises(UnreachableLocationError, match=r"task a\.0 on host .* the store cannot be reached: .*"
                                                       rf"{loc}/_RUN"):
        check_mark(loc, 3, "t0k", what="checkpoint store", uri=loc, task="a.0")


class _Plan:
    nodes: dict = {}


@pytest.mark.parametrize("kind, location, words", [
    ("checkpoints", "gs://bucket/ck", "checkpoints on object storage: s3:// only"),
    ("checkpoints", "s3:///ck", "names a bucket"),
    ("checkpoints", "s3://bucket/ck?endpoint_override=x", "take no options"),
    ("channels", "s3://bucket/ch", "an object store cannot carry channels"),
])
def test_locations_s3_cannot_serve_are_refused(kind, location, words):
    where = {"checkpoints": "s3://bucket/ck", "channels": "/abs/ch", kind: location}
    check_locations(_Plan(), channels="/abs/ch", checkpoints="s3://bucket/ck", on_spark=True)   # accepted
    with pytest.raises(LocationError, match=words) as e:
        check_locations(_Plan(), channels=where["channels"], checkpoints=where["checkpoints"], on_spark=True)
    assert repr(location) in str(e.value)


# -- the store stops answering ---------------------------------------------------------------------------


@pytest.fixture
def own_s3(tmp_path, monkeypatch):
    """A server of this test's own on ``OWN_PORT`` (stopping it leaves the session's server to the others),
    the process environment pointing at it."""
    pytest.importorskip("moto.server")
    from tests.support.s3 import TOOL, S3Server

    data = str(tmp_path / "own-s3")
    proc = subprocess.run([sys.executable, TOOL, "start", "--port", str(OWN_PORT), "--data", data],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    env = dict(line.removeprefix("export ").split("=", 1) for line in subprocess.run(
        [sys.executable, TOOL, "env", "--port", str(OWN_PORT)], capture_output=True, text=True, timeout=60,
        check=True).stdout.splitlines() if "=" in line)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    server = S3Server(OWN_PORT, data, env)
    try:
        yield server
    finally:
        server.stop()


def test_the_store_stopping_mid_run_ends_the_run_with_a_clear_error(own_s3, tmp_path):
    bucket = f"s3://{own_s3.new_bucket()}"
    out, ck = f"{bucket}/out", f"{bucket}/ck"
    stopped: list[float] = []

    def stop_after_first_checkpoint() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if any(k.endswith("/_COMPLETE") for k in _keys(f"{ck}/stop")):
                    break
            except Exception:  # noqa: BLE001 - not there yet
                pass
            time.sleep(0.05)
        own_s3.stop()
        stopped.append(time.monotonic())

    t = threading.Thread(target=stop_after_first_checkpoint, daemon=True)
    t.start()
    job = wordcount_job("stop", out, items=2000, delay=0.005)   # far longer than the wait for one checkpoint
    with pytest.raises(StoreUnavailableError) as e:
        job.run(channels=str(tmp_path / "ch"), checkpoints=ck, checkpoint_interval=0.1, timeout=600)
    t.join(10)
    assert stopped, "the server was not stopped"
    text = str(e.value)
    # the path of whatever the run asked first after the stop: an object under the job's checkpoints, or (when
    # the stop lands between two writes) the listing of the job's checkpoint folder itself
    assert "the object store failed to" in text and (e.value.path or "").startswith(f"{ck}/stop"), text
    assert "host" in text

