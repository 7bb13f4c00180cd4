"""Checkpoint state runs no code and damaged checkpoints fall back (issue 12, item 8).

Most tests start from one *crashed* job (built once per module, copied per test): a source -> keyed window
count -> keyed aggregate (tuple accumulators, stored as tagged JSON) -> callable sink, whose source part 0
raised once two checkpoints were complete. It leaves the newest complete checkpoint ``c``, the one before it
``h`` (the commit horizon: sinks committed output up to ``h`` only), sink staging files and cursors.
Resuming it — after planting a pickle in a file, truncating or flipping bits — must never unpickle
anything the operator did not opt in to, must name the damaged file in a typed error, and must fall back
to ``h`` with output that is exactly the failure-free output."""

from __future__ import annotations

import collections
import json
import logging
import os
import pathlib
import pickle
import shutil
import time
import zlib

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import (
    CheckpointCorruptError,
    Fault,
    FaultPlan,
    Job,
    JobFailedError,
    JobGraphError,
    RestartBackoff,
    UnstorableStateError,
)
from runtime.checkpoints import formats as statefile
from runtime.checkpoints.formats import (
    decode_document,
    decode_snapshot,
    encode_document,
    encode_snapshot,
    from_tagged_json,
    read_snapshot,
    to_tagged_json,
)
from runtime.checkpoints.keyedstate import decode_table, encode_table
from runtime.checkpoints.store import CheckpointStore

WORDS = ["spark", "kafka", "flink", "ray", "arrow"]
ITEMS = 120
DELAY = 0.004
NAME = "safe"


# -- the job ---------------------------------------------------------------------------------------------


def _cursors(root: str) -> list[str]:
    d = os.path.join(root, "staging", "out")
    parts = sorted(os.listdir(d)) if os.path.isdir(d) else []
    return [os.path.join(d, p, "cursor") for p in parts if os.path.exists(os.path.join(d, p, "cursor"))]


def _ready(ck: str, complete: int, horizon: int | None) -> bool:
    """True once the job's checkpoint directory has ``complete`` complete checkpoints and the horizon: exactly
    0 when ``horizon`` is None; else at least ``horizon``, with some output committed and the newest
    checkpoint listing a staged epoch not committed yet."""
    root = os.path.join(ck, NAME)
    if not os.path.isdir(root):
        return False
    store = CheckpointStore(ck, NAME)
    done = [c for c in store.checkpoints() if store.is_complete(c)]
    if len(done) < complete:
        return False
    h = store.commit_horizon()
    if horizon is None:
        return h == 0
    if h < horizon or not _cursors(root):
        return False
    try:
        parts = store.load_task(done[-1], "out", 0)["state"]["parts"].values()
    except CheckpointCorruptError:        # pruned meanwhile
        return False
    return any(e[0] > h for p in parts for e in p["pending"])


def _events(crash: tuple[str, int, int | None] | None, delay: float = DELAY):
    """Source part items; with ``crash``, part 0 raises as soon as ``_ready(*crash)`` (data keeps flowing
    until then, so every checkpoint epoch has output)."""
    def gen(part: int, offset: int):
        for i in range(offset, ITEMS):
            if crash is not None and part == 0 and i >= 8 and _ready(*crash):
                raise RuntimeError("planned crash")
            time.sleep(delay)
            yield i // 4, [{"word": WORDS[(i * 3 + part + j) % len(WORDS)]} for j in range(3)]
        while crash is not None and part == 0:
            if _ready(*crash):
                raise RuntimeError("planned crash")
            yield None
            time.sleep(0.002)
    return gen


def _writer(path: str):
    def write(t: int, table: pa.Table) -> None:
        with open(path, "a") as f:
            for r in table.to_pylist():
                f.write(json.dumps([t, r["word"], r["windows"], r["total"]]) + "\n")
    return write


def _tuple_acc():
    return (lambda: (0, 0)), (lambda acc, r: (acc[0] + 1, acc[1] + r["count"])), \
        (lambda k, acc: {"word": k, "windows": acc[0], "total": acc[1]})


def _counter_acc():
    return collections.Counter, (lambda acc, r: acc + collections.Counter({"windows": 1, "total": r["count"]})), \
        (lambda k, acc: {"word": k, "windows": acc["windows"], "total": acc["total"]})


def _job(out: str, crash=None, acc=_tuple_acc, serializer: str = "auto") -> Job:
    job = Job(NAME)
    src = job.from_generator(_events(crash), parts=2, parallelism=2, name="source")
    counts = src.key_by("word").window(4).count(parallelism=2, name="count")
    zero, add, finish = acc()
    totals = counts.key_by("word").aggregate(zero, add, finish=finish, parallelism=2, name="agg",
                                             serializer=serializer)
    totals.sink(_writer(out), parallelism=1, parts=2, name="out")
    return job


def _expected() -> list[tuple]:
    counts: dict = collections.Counter()
    for part in range(2):
        for i in range(ITEMS):
            t = i // 4
            for j in range(3):
                counts[(WORDS[(i * 3 + part + j) % len(WORDS)], t - t % 4)] += 1
    acc: dict = {}
    rows = []
    for ws in sorted({w for _, w in counts}):
        for word in sorted(w for w, s in counts if s == ws):
            n, total = acc.get(word, (0, 0))
            acc[word] = (n + 1, total + counts[(word, ws)])
            rows.append((ws + 3, word, *acc[word]))
    return sorted(rows)


def _output(out: str) -> list[tuple]:
    if not os.path.exists(out):
        return []
    return sorted(tuple(json.loads(line)) for line in pathlib.Path(out).read_text().splitlines())


def _run(job: Job, d: pathlib.Path, spark=None, **kw):
    kw.setdefault("max_restarts", 3)
    return job.run(spark, channels=str(d / "ch"), checkpoints=str(d / "ck"), checkpoint_interval=0.05, timeout=90,
                   **kw)


def _crash(d: pathlib.Path, acc=_tuple_acc, serializer="auto", complete: int = 2, horizon: int | None = 1,
           interval: float = 0.08) -> None:
    """Run the job until source part 0 raises (once ``complete`` checkpoints and the horizon are there)."""
    job = _job(str(d / "out"), (str(d / "ck"), complete, horizon), acc, serializer)
    with pytest.raises(JobFailedError, match="planned crash"):
        job.run(channels=str(d / "ch"), checkpoints=str(d / "ck"), checkpoint_interval=interval, timeout=90,
                max_restarts=0)


class Crashed:
    """A copy of a crashed job: ``c`` the newest complete checkpoint, ``h`` the horizon (the one before)."""

    def __init__(self, d: pathlib.Path) -> None:
        self.dir = d
        self.out = str(d / "out")
        self.store = CheckpointStore(str(d / "ck"), NAME)
        done = [c for c in self.store.checkpoints() if self.store.is_complete(c)]
        self.c = done[-1]
        self.h = self.store.commit_horizon()

    def chk(self, name: str, checkpoint: int | None = None) -> str:
        return os.path.join(self.store.root, f"chk-{checkpoint or self.c:010d}", name)

    def staged(self, checkpoint: int | None = None) -> list[str]:
        """Staging files of epochs after the horizon that checkpoint ``checkpoint`` lists (never committed)."""
        c = checkpoint or self.c
        out = []
        for p, s in self.store.load_task(c, "out", 0)["state"]["parts"].items():
            for e in s["pending"]:
                if e[0] > self.h:
                    out.append(os.path.join(self.store.root, "staging", "out", f"p{p:05d}", e[1]))
        return out

    def files(self) -> list[str]:
        """Every file of checkpoint ``c`` (snapshots, manifest) and the staged epochs it lists."""
        d = os.path.dirname(self.chk("_COMPLETE"))
        return sorted(os.path.join(d, n) for n in os.listdir(d)) + self.staged()

    def operators(self) -> dict:
        return {n: node.make() for n, node in _job(self.out).plan().nodes.items()}


@pytest.fixture(scope="module")
def crashed_template(tmp_path_factory):
    d = tmp_path_factory.mktemp("crashed")
    _crash(d)
    shutil.rmtree(d / "ch", ignore_errors=True)
    return d


@pytest.fixture
def crashed(crashed_template, tmp_path) -> Crashed:
    d = tmp_path / "job"
    shutil.copytree(crashed_template, d)
    cr = Crashed(d)
    assert 0 < cr.h < cr.c, (cr.h, cr.c)
    assert cr.staged(), "the newest checkpoint lists no uncommitted staged epoch"
    return cr


class _Plant:
    """Pickles to a call that creates ``path`` when unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.path),))


def _plant(path: str, marker: str) -> None:
    with open(path, "wb") as f:
        f.write(pickle.dumps(_Plant(marker), protocol=2))


def test_the_planted_pickle_runs_when_unpickled(tmp_path):
    """The payload the tests plant really runs code when someone unpickles it (so its absence means
    nothing unpickled it)."""
    marker = tmp_path / "ran"
    pickle.loads(pickle.dumps(_Plant(str(marker))))
    assert marker.exists()


def test_the_crashed_job_resumes_from_its_newest_checkpoint(crashed, tmp_path):
    assert _output(crashed.out) != _expected()           # part of the output is still to come
    result = _run(_job(crashed.out), crashed.dir)
    assert result.status == "finished" and result.restored_from[0] == crashed.c and not result.fallbacks
    assert _output(crashed.out) == _expected()


# -- planted pickles ---------------------------------------------------------------------------------------

_CHECKPOINT_FILES = {
    "source snapshot": lambda cr: cr.chk("source-00000.state"),
    "keyed count snapshot": lambda cr: cr.chk("count-00001.state"),
    "aggregate snapshot": lambda cr: cr.chk("agg-00000.state"),
    "sink snapshot": lambda cr: cr.chk("out-00000.state"),
    "manifest": lambda cr: cr.chk("_COMPLETE"),
    "staged epoch": lambda cr: cr.staged()[0],
}


@pytest.mark.parametrize("kind", sorted(_CHECKPOINT_FILES))
def test_planted_pickle_in_a_checkpoint_file_falls_back_without_running(crashed, tmp_path, kind):
    path = _CHECKPOINT_FILES[kind](crashed)
    marker = tmp_path / "ran"
    _plant(path, str(marker))
    result = _run(_job(crashed.out), crashed.dir)
    assert not marker.exists()
    assert result.status == "finished" and result.restarts == 0
    assert result.restored_from[0] == crashed.h, "did not fall back to the previous complete checkpoint"
    assert len(result.fallbacks) == 1 and f"file {path!r}" in result.fallbacks[0], result.fallbacks
    assert _output(crashed.out) == _expected()


@pytest.mark.parametrize("kind", ["LATEST", "master.json", "master.bak.json"])
def test_planted_pickle_in_one_job_file_is_ignored(crashed, tmp_path, kind, caplog):
    """``LATEST`` is a copy for people and the counters have two copies: one damaged file is named in a
    warning, and the job resumes from its newest checkpoint."""
    path = os.path.join(crashed.store.root, kind)
    marker = tmp_path / "ran"
    _plant(path, str(marker))
    with caplog.at_level(logging.WARNING, logger="runtime"):
        result = _run(_job(crashed.out), crashed.dir)
    assert not marker.exists()
    assert result.status == "finished" and result.restored_from[0] == crashed.c
    assert any(f"file {path!r}" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    assert _output(crashed.out) == _expected()


@pytest.mark.parametrize("kind", ["both counters", "cursor"])
def test_planted_pickle_where_no_fallback_helps_is_a_typed_error(crashed, tmp_path, kind):
    """Both copies of the counters (ids and commit horizon unknown), or a callable sink's cursor (shared by
    every checkpoint): the job fails at once with a typed error naming the file, without a restart."""
    marker = tmp_path / "ran"
    if kind == "cursor":
        paths = _cursors(crashed.store.root)[-1:]
    else:
        paths = [os.path.join(crashed.store.root, n) for n in ("master.json", "master.bak.json")]
    for p in paths:
        assert os.path.exists(p)
        _plant(p, str(marker))
    before = _output(crashed.out)
    with pytest.raises(CheckpointCorruptError) as e:
        _run(_job(crashed.out), crashed.dir)
    assert not marker.exists()
    assert paths[0] in str(e.value) and e.value.path in paths
    assert _output(crashed.out) == before                 # nothing was run, nothing was output


def _with_value_column(path: str, table_name: str, cells: list[bytes], encoding: bytes) -> None:
    """Rewrite a snapshot (with a valid checksum) whose keyed table's value column holds ``cells``."""
    doc = read_snapshot(path)
    t = doc["state"]["keyed"][table_name]
    assert t.num_rows, "no rows to plant into"
    type_ = pa.string() if encoding == b"json" else pa.binary()
    field = pa.field("value", type_, nullable=False, metadata={b"encoding": encoding})
    doc["state"]["keyed"][table_name] = t.set_column(t.num_columns - 1, field, pa.array(cells[:1] * t.num_rows, type_))
    with open(path, "wb") as f:
        f.write(encode_snapshot(doc))


def test_pickle_in_a_well_formed_snapshot_is_refused_without_opt_in(crashed, tmp_path):
    """A snapshot whose checksum is fine but whose aggregate values say ``pickle``: the operator did not opt
    in, so the column is refused unread, and the job falls back."""
    marker = tmp_path / "ran"
    path = crashed.chk("agg-00000.state")
    _with_value_column(path, "state", [pickle.dumps(_Plant(str(marker)))], b"pickle")
    result = _run(_job(crashed.out), crashed.dir)
    assert not marker.exists()
    assert result.restored_from[0] == crashed.h and f"file {path!r}" in result.fallbacks[0]
    assert "does not opt in" in result.fallbacks[0]
    assert _output(crashed.out) == _expected()


def test_no_usable_checkpoint_fails_with_the_newest_file(crashed, tmp_path):
    marker = tmp_path / "ran"
    newest, older = crashed.chk("count-00000.state"), crashed.chk("count-00000.state", crashed.h)
    _plant(newest, str(marker))
    _plant(older, str(marker))
    before = _output(crashed.out)
    with pytest.raises(CheckpointCorruptError, match="no usable checkpoint") as e:
        _run(_job(crashed.out), crashed.dir)
    assert e.value.path == newest and older in str(e.value)
    assert not marker.exists() and _output(crashed.out) == before


# -- damage at many offsets --------------------------------------------------------------------------------


def _offsets(size: int, count: int = 24) -> list[int]:
    step = max(1, size // count)
    return sorted({*range(0, min(size, 40)), *range(0, size, step), *range(max(0, size - 12), size)})


def test_every_flipped_bit_and_truncation_of_each_checkpoint_file_is_detected(crashed):
    """Each file of the newest checkpoint (every snapshot, the manifest, each uncommitted staged epoch),
    damaged at many offsets: choosing where to restore skips it with a typed error naming the file and
    picks the previous checkpoint, every time."""
    store, ops = crashed.store, crashed.operators()
    cases = 0
    for path in crashed.files():
        original = pathlib.Path(path).read_bytes()
        damaged = [original[:n] for n in _offsets(len(original))]
        for i in _offsets(len(original)):
            b = bytearray(original)
            b[i] ^= 1 << (i % 8)
            damaged.append(bytes(b))
        for data in damaged:
            pathlib.Path(path).write_bytes(data)
            manifest, skipped = store.select(ops)
            assert manifest["checkpoint"] == crashed.h, path
            assert len(skipped) == 1 and isinstance(skipped[0], CheckpointCorruptError) and skipped[0].path == path, \
                (path, skipped)
            cases += 1
        pathlib.Path(path).write_bytes(original)
        os.remove(path)                                    # a missing file, too
        manifest, skipped = store.select(ops)
        assert manifest["checkpoint"] == crashed.h and skipped[0].path == path
        pathlib.Path(path).write_bytes(original)
    assert cases > 500
    manifest, skipped = store.select(ops)
    assert manifest["checkpoint"] == crashed.c and not skipped


@pytest.mark.parametrize("damage", ["truncate snapshot", "flip manifest", "flip staged epoch", "empty snapshot"])
def test_damaged_newest_checkpoint_resumes_from_the_previous_one_exactly_once(crashed, damage):
    """The issue's loop (a truncated state file: 101 restarts, an UnpicklingError naming no file) is gone:
    no restart, the damaged file named, output exactly once."""
    path = {"truncate snapshot": crashed.chk("agg-00001.state"), "flip manifest": crashed.chk("_COMPLETE"),
            "flip staged epoch": crashed.staged()[-1], "empty snapshot": crashed.chk("source-00001.state")}[damage]
    data = bytearray(pathlib.Path(path).read_bytes())
    if damage.startswith("truncate"):
        data = data[:len(data) // 2]
    elif damage.startswith("empty"):
        data = bytearray()
    else:
        data[len(data) // 3] ^= 0x10
    pathlib.Path(path).write_bytes(bytes(data))
    result = _run(_job(crashed.out), crashed.dir)
    assert result.status == "finished" and result.restarts == 0
    assert result.restored_from == [crashed.h] and f"file {path!r}" in result.fallbacks[0]
    assert _output(crashed.out) == _expected()
    assert not os.path.exists(os.path.dirname(crashed.chk("_COMPLETE")))   # the damaged checkpoint is gone


def test_damaged_only_checkpoint_before_any_commit_starts_over(tmp_path):
    """With one complete checkpoint and the horizon at 0 no output was ever committed, so a fresh start is
    exactly-once: a damaged only checkpoint is skipped and the job starts from scratch."""
    _crash(tmp_path, complete=1, horizon=None, interval=0.3)
    cr = Crashed(tmp_path)
    assert cr.h == 0 and _output(cr.out) == []
    path = cr.chk("count-00000.state")
    pathlib.Path(path).write_bytes(pathlib.Path(path).read_bytes()[:-1])
    result = _run(_job(cr.out), tmp_path)
    assert result.restored_from == [None] and f"file {path!r}" in result.fallbacks[0]
    assert _output(cr.out) == _expected()


# -- the container and tagged JSON: properties -------------------------------------------------------------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=-2**80, max_value=2**80),
                     st.floats(allow_nan=True), st.text(max_size=8), st.binary(max_size=8))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(tuple),
    st.dictionaries(st.one_of(st.text(max_size=4), st.integers(), st.tuples(st.integers())), inner, max_size=4)),
    max_leaves=20)


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return repr(a) == repr(b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(_same, a, b))
    return a == b


@settings(max_examples=300, deadline=None)
@given(_values)
def test_tagged_json_round_trips_exactly(value):
    assert _same(from_tagged_json(to_tagged_json(value)), value)
    doc = {"state": value, "t": pa.table({"x": [1, 2]})}
    back = decode_snapshot(encode_snapshot(doc), "f")
    assert _same(back["state"], value) and back["t"].equals(doc["t"])


@settings(max_examples=200, deadline=None)
@given(st.lists(_values, min_size=1, max_size=6), st.sampled_from(["auto", "json", "pickle"]))
def test_keyed_state_values_round_trip_exactly(values, serializer):
    keys = [f"k{i}" for i in range(len(values))]
    t = encode_table(list(range(len(values))), None, keys, values, n_keys=1, key_types=[pa.string()],
                     serializer=serializer, operator="agg", what="values")
    _slots, k2, v2 = decode_table(t, pending=False, n_keys=1, allow_pickle=serializer == "pickle", operator="agg",
                                  path="f")
    assert k2 == keys and all(map(_same, values, v2))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_damage_to_a_snapshot_is_a_typed_error(data):
    """Bit flips, truncations and overwritten bytes anywhere in a snapshot: a typed error, never another
    exception, never a different document."""
    doc = {"state": {"parts": {0: (1, 2)}, "keyed": {"state": pa.table({"group": pa.array([1, 2], pa.int32())})}}}
    good = encode_snapshot(doc)
    b = bytearray(good)
    op = data.draw(st.sampled_from(["flip", "truncate", "overwrite", "extend"]))
    if op == "flip":
        i = data.draw(st.integers(0, len(b) - 1))
        b[i] ^= 1 << data.draw(st.integers(0, 7))
    elif op == "truncate":
        b = b[:data.draw(st.integers(0, len(b) - 1))]
    elif op == "overwrite":
        i = data.draw(st.integers(0, len(b) - 1))
        chunk = data.draw(st.binary(min_size=1, max_size=16))
        b[i:i + len(chunk)] = chunk
    else:
        b += data.draw(st.binary(min_size=1, max_size=16))
    if bytes(b) == good:
        return
    with pytest.raises(CheckpointCorruptError) as e:
        decode_snapshot(bytes(b), "/ck/x.state")
    assert e.value.path == "/ck/x.state"


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_damage_to_a_document_is_a_typed_error(data):
    good = encode_document("manifest", {"checkpoint": 3, "parallelism": {"a": 2}, "final": False})
    b = bytearray(good)
    if data.draw(st.booleans()):
        b = b[:data.draw(st.integers(0, len(b) - 1))]
    else:
        i = data.draw(st.integers(0, len(b) - 1))
        b[i] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(CheckpointCorruptError) as e:
        decode_document(bytes(b), "manifest", "/ck/_COMPLETE")
    assert e.value.path == "/ck/_COMPLETE"


def _container(doc: bytes, blobs: list[bytes], *, doc_len: int | None = None, n_blobs: int | None = None,
               blob_len: int | None = None) -> bytes:
    """A snapshot container with a valid checksum around what the arguments declare (hostile on purpose)."""
    body = [doc] + [statefile._BLOB_LEN.pack(len(b) if blob_len is None else blob_len) + b for b in blobs]
    total = statefile._HEAD.size + sum(map(len, body)) + 4
    head = statefile._HEAD.pack(statefile.MAGIC, 1, 1, len(doc) if doc_len is None else doc_len, total,
                                len(blobs) if n_blobs is None else n_blobs, 0)
    data = head + b"".join(body)
    return data + statefile._CRC.pack(zlib.crc32(data))


def test_hostile_container_sizes_and_compressed_blobs_are_refused_before_allocation():
    """Valid checksums around impossible sizes (a 4 GiB document, 4 billion blobs, a 2^63-byte blob) or an
    Arrow blob with IPC body compression (which declares its own decompressed size): typed errors, nothing
    allocated for the declared sizes."""
    sink = pa.BufferOutputStream()
    t = pa.table({"group": pa.array([1] * 100, pa.int32())})
    with pa.ipc.new_stream(sink, t.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(t)
    blob = sink.getvalue().to_pybytes()
    cases = {
        "more than the file holds": _container(b"{}", [], doc_len=2**32 - 1),
        "more than the file holds ": _container(b"{}", [], n_blobs=2**32 - 1),
        "runs past the end": _container(b'{"$arrow":0}', [blob], blob_len=2**63),
        "compression": _container(b'{"$arrow":0}', [blob]),
    }
    extra = statefile._HEAD.pack(statefile.MAGIC, 1, 1, 2, statefile._HEAD.size + 4 + 4, 0, 0) + b"{}xx"
    cases["unexplained bytes"] = extra + statefile._CRC.pack(zlib.crc32(extra))
    for what, data in cases.items():
        with pytest.raises(CheckpointCorruptError, match=what.strip()) as e:
            decode_snapshot(data, "/ck/h.state")
        assert e.value.path == "/ck/h.state"
    assert decode_snapshot(_container(b'{"a":[1,{"$t":[2]}]}', []), "x") == {"a": [1, (2,)]}


def test_hostile_snapshots_with_valid_checksums_get_typed_errors(crashed):
    """Snapshots re-encoded with valid checksums but wrong contents (another task's file, wrong field types,
    a path outside the staging folder, a pickle cell, a bad JSON cell) are refused by the driver's check."""
    store, ops = crashed.store, crashed.operators()
    agg = crashed.chk("agg-00000.state")
    out = crashed.chk("out-00000.state")
    src = crashed.chk("source-00000.state")

    def edit(path, fn):
        doc = read_snapshot(path)
        fn(doc)
        pathlib.Path(path).write_bytes(encode_snapshot(doc))

    def traversal(d):
        part = next(p for p in d["state"]["parts"].values() if p["pending"])
        part["pending"][0] = (part["pending"][0][0], "../../../../etc/passwd", *part["pending"][0][2:])

    cases = [
        (src, lambda d: d.update(index=1)),
        (src, lambda d: d["state"]["parts"].update({0: {"offset": "7", "time": 0, "done": False}})),
        (src, lambda d: d.update(inputs={"x": -1})),
        (out, traversal),
        (out, lambda d: d["state"]["parts"].update({0: {"base": 0, "pending": [[1, "x"]], "frontier": [0]}})),
        (agg, lambda d: d["state"]["keyed"].update(state=pa.table({"x": [1]}))),
        (agg, lambda d: d["state"].update(keyed={"state": "not a table"})),
    ]
    for path, fn in cases:
        original = pathlib.Path(path).read_bytes()
        edit(path, fn)
        manifest, skipped = store.select(ops)
        assert manifest["checkpoint"] == crashed.h and skipped[0].path == path, (path, skipped)
        pathlib.Path(path).write_bytes(original)
    _with_value_column(agg, "state", [b"{not json"], b"json")
    manifest, skipped = store.select(ops)
    assert manifest["checkpoint"] == crashed.h and "not valid tagged JSON" in str(skipped[0])


# -- serializers -------------------------------------------------------------------------------------------


def test_unstorable_state_fails_at_the_checkpoint_naming_operator_and_type(tmp_path):
    """A Counter accumulator has no exact Arrow or JSON form: the first checkpoint fails with a typed error
    naming the operator and the type, at once (no restart loop), before anything is committed."""
    started = time.monotonic()
    with pytest.raises(UnstorableStateError, match=r"operator 'agg' keeps accumulators of aggregate\(\) of type "
                                                   r"collections\.Counter.*serializer=\"pickle\""):
        _run(_job(str(tmp_path / "out"), acc=_counter_acc), tmp_path, max_restarts=100)
    assert time.monotonic() - started < 30
    assert _output(str(tmp_path / "out")) == []
    with pytest.raises(JobGraphError, match="serializer must be one of"):
        _job(str(tmp_path / "o2"), serializer="marshal")


def test_pickle_serializer_is_an_explicit_opt_in(tmp_path):
    """With ``serializer="pickle"`` the Counter accumulators are checkpointed as pickles and restored (the
    job crashes once and resumes exactly once); a job that does not opt in refuses those checkpoints with a
    typed error, unpickling nothing."""
    _crash(tmp_path, acc=_counter_acc, serializer="pickle")
    cr = Crashed(tmp_path)
    snap = cr.store.load_task(cr.c, "agg", 0)["state"]["keyed"]["state"][0]
    assert snap.num_rows and snap.schema.field("value").metadata == {b"encoding": b"pickle"}
    assert snap.schema.field("k0").metadata == {b"encoding": b"arrow"}        # keys stay Arrow
    work = tmp_path / "copy"
    shutil.copytree(tmp_path, work, ignore=shutil.ignore_patterns("copy"))
    result = _run(_job(cr.out, acc=_counter_acc, serializer="pickle"), tmp_path)
    assert result.restored_from == [cr.c] and _output(cr.out) == _expected()

    marker = tmp_path / "ran"
    copy = Crashed(work)
    for c in (copy.c, copy.h):
        _with_value_column(copy.chk("agg-00000.state", c), "state", [pickle.dumps(_Plant(str(marker)))], b"pickle")
    with pytest.raises(CheckpointCorruptError, match="does not opt in"):
        _run(_job(copy.out, acc=_counter_acc, serializer="auto"), work)
    assert not marker.exists()


# -- restarts back off -------------------------------------------------------------------------------------


def _small_job(out: str) -> Job:
    job = Job("backoff")
    job.from_generator(_events(None, 0.005), parts=2, parallelism=2, name="source").key_by("word").window(4).count(
        name="count").sink(lambda t, tb: None, name="out")
    return job


def test_restarts_back_off_exponentially_and_the_budget_ends_the_job(tmp_path, caplog):
    faults = FaultPlan([Fault(a, "source", 0, "record", 1) for a in range(10)])
    backoff = RestartBackoff(initial=0.1, maximum=0.3, factor=2.0)
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="runtime"), \
            pytest.raises(JobFailedError, match=r"failed 5 times \(max_restarts=4\); last failure: .*"
                                                r"InjectedFailure: injected failure at record #1 .*attempt 4"):
        _small_job(str(tmp_path / "o")).run(channels=str(tmp_path / "ch"), checkpoints=str(tmp_path / "ck"),
                                            checkpoint_interval=2.0, timeout=90, faults=faults, max_restarts=4,
                                            restart_backoff=backoff)
    waits = [float(r.getMessage().rsplit("restarting in ", 1)[1].split()[0]) for r in caplog.records
             if "restarting in" in r.getMessage()]
    assert waits == [0.1, 0.2, 0.3, 0.3]                  # doubling, capped, 4 restarts then the budget is out
    assert time.monotonic() - started >= sum(waits)


def test_backoff_starts_over_after_a_generation_made_progress(tmp_path):
    """Failures before any checkpoint completed (at the first record) double the delay; a generation that
    completed a checkpoint (failing at the second barrier) resets it."""
    faults = FaultPlan([Fault(0, "source", 0, "record", 1), Fault(1, "source", 0, "record", 1),
                        Fault(2, "count", 0, "barrier", 2), Fault(3, "source", 1, "record", 1)])
    result = _small_job(str(tmp_path / "o")).run(
        channels=str(tmp_path / "ch"), checkpoints=str(tmp_path / "ck"), checkpoint_interval=0.15, timeout=90,
        faults=faults, restart_backoff=RestartBackoff(initial=0.05, maximum=1.0))
    assert result.status == "finished" and result.restarts == 4, result.failures
    assert result.restart_delays == [0.05, 0.1, 0.05, 0.1]
    starts, fails = result.generation_starts, result.failure_times
    assert all(starts[i + 1] - fails[i] >= result.restart_delays[i] for i in range(4))


# -- on Spark ------------------------------------------------------------------------------------------------


@pytest.mark.spark
def test_damaged_checkpoint_falls_back_on_spark(crashed, runtime_spark, tmp_path):
    marker = tmp_path / "ran"
    path = crashed.chk("count-00000.state")
    _plant(path, str(marker))
    result = _run(_job(crashed.out), crashed.dir, spark=runtime_spark)
    assert not marker.exists()
    assert result.status == "finished" and result.restored_from == [crashed.h] and path in result.fallbacks[0]
    assert _output(crashed.out) == _expected()


@pytest.mark.parametrize("key", [[1, 2], {"a": 1}])
def test_a_restored_key_of_an_unhashable_type_is_a_typed_error_naming_the_file(key):
    """A well-formed state table whose key column holds lists or maps (written by hand, or by a damaged writer)
    cannot key a dict: decode_keyed refuses it naming the operator, the type and the table's file."""
    from runtime.checkpoints.keyedstate import decode_keyed

    t = encode_table([0], None, [key], [1], n_keys=1, key_types=None, serializer="auto", operator="agg",
                     what="values")
    t = t.replace_schema_metadata({**(t.schema.metadata or {}), b"path": b"/ck/chk-3/agg.0.arrow"})
    assert decode_table(t, pending=False, n_keys=1, allow_pickle=False, operator="agg", path="f")[1] == [key]
    with pytest.raises(CheckpointCorruptError, match=f"operator 'agg' has a key of unhashable type "
                                                      f"{type(key).__name__}") as e:
        decode_keyed(t, pending=False, n_keys=1, allow_pickle=False, unpickle=True, operator="agg")
    assert e.value.path == "/ck/chk-3/agg.0.arrow"
