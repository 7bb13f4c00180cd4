"""The callable sink's cursor as an append-only log (one 16-byte checksummed record per call, emptied into the
``cursor`` document after each committed epoch): a crash between calls — between checkpoints, in the middle
of committing an epoch — still makes every call exactly once (the only window stays the one documented: a
process that dies after a call returned and before its record was appended gets that call again); a record
cut short is ignored, a damaged one is a ``CheckpointCorruptError`` naming the file; in-process with raised
failures and on Spark with SIGKILLed workers the output is exact."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from runtime import Fault, FaultPlan, Job, RestartBackoff
from runtime.checkpoints.store import StateCheck
from runtime.errors import CheckpointCorruptError
from runtime.operators import OperatorContext
from runtime.sinks import _CURSOR_RECORD, CallableSink
from tests.support.pipelines import WORDS, events


class _Crash(Exception):
    pass


def _open(ck: str, calls: list, state=None, *, generation: int = 1, horizon: int = 0, crash_at: int | None = None):
    def fn(t: int, table: pa.Table) -> None:
        if crash_at is not None and len(calls) + 1 == crash_at:
            raise _Crash(f"dies before call {crash_at}")
        calls.append((t, table.column("v").to_pylist()))

    op = CallableSink(fn, parts=1)
    op.open(OperatorContext("j", "out", 0, 1, 128, generation, ck, commit_horizon=horizon), state)
    return op


def _state(snap: dict) -> dict:
    return {"parts": snap["parts"], "instance": snap["instance"], "checkpoint": snap["checkpoint"]}


def _batch(t: int) -> pa.RecordBatch:
    return pa.record_batch({"v": [t, t + 1]})


def _files(ck: str) -> tuple[str, str]:
    d = os.path.join(ck, "staging", "out", "p00000")
    return os.path.join(d, "cursor"), os.path.join(d, "cursor.log")


def _logged(path: str) -> list[int]:
    data = open(path, "rb").read()
    return [_CURSOR_RECORD.unpack_from(data, o)[1] for o in range(0, len(data) - len(data) % 16, 16)]


def _crashed(ck: str, calls: list, items: int, crash_at: int) -> dict:
    """One epoch of ``items`` batches staged and checkpointed (1), its commit dying before call ``crash_at``;
    returns the checkpoint's state."""
    op = _open(ck, calls, crash_at=crash_at)
    for t in range(items):
        op.process(t, _batch(t))
    s1 = op.snapshot(1)
    with pytest.raises(_Crash):
        op.notify_complete(1)
    op.close()
    return _state(s1)


def test_crash_in_the_middle_of_an_epoch_commit_makes_each_call_once(tmp_path):
    ck = str(tmp_path / "ck")
    calls: list = []
    op = _open(ck, calls, crash_at=14)
    for t in range(10):
        op.process(t, _batch(t))
    s1 = op.snapshot(1)
    for t in range(10, 15):
        op.process(t, _batch(t))
    s2 = op.snapshot(2)
    op.notify_complete(1)                       # epoch 1: 10 calls, then the document takes the count
    cursor, log = _files(ck)
    assert json.loads(open(cursor).read())["body"] == {"calls": 10} and _logged(log) == []
    with pytest.raises(_Crash):
        op.notify_complete(2)                   # dies before call 14: calls 11-13 made, each logged
    assert _logged(log) == [11, 12, 13]
    op.close()

    # the restart restores checkpoint 2 (the horizon): the epoch is committed from call 14 on
    op = _open(ck, calls, _state(s2), generation=2, horizon=2)
    assert [t for t, _ in calls] == list(range(15))
    assert calls == [(t, [t, t + 1]) for t in range(15)]
    assert json.loads(open(cursor).read())["body"] == {"calls": 15} and _logged(log) == []
    op.close()
    assert s1["parts"][0]["pending"][0][2] == 10


def test_restart_from_an_earlier_checkpoint_skips_what_the_log_counted(tmp_path):
    """The document is behind the log (a crash before the epoch's end): the position is the log's."""
    ck = str(tmp_path / "ck")
    calls: list = []
    s1 = _crashed(ck, calls, 8, 6)
    cursor, log = _files(ck)
    assert not os.path.exists(cursor) and _logged(log) == [1, 2, 3, 4, 5]
    op = _open(ck, calls, s1, generation=2, horizon=1)
    assert calls == [(t, [t, t + 1]) for t in range(8)]
    op.close()


def test_a_record_cut_short_is_ignored_and_cut_off(tmp_path):
    ck = str(tmp_path / "ck")
    calls: list = []
    s1 = _crashed(ck, calls, 6, 4)
    _cursor, log = _files(ck)
    with open(log, "ab") as f:                 # the machine stopped in the middle of the 4th call's append
        f.write(_CURSOR_RECORD.pack(0x52435345, 4, 0)[:7])
    # the record of call 4 never made it whole: call 4 is made (its fn was never called here, as the test
    # crashed before it; a real crash after fn returned would make it again — the documented window)
    op = _open(ck, calls, s1, generation=2, horizon=1)
    assert calls == [(t, [t, t + 1]) for t in range(6)]
    assert os.path.getsize(log) == 0            # emptied into the document at the epoch's end
    op.close()


@pytest.mark.parametrize("damage", ["bit flip", "goes back", "bad magic"])
def test_a_damaged_cursor_log_is_a_typed_error_naming_it(tmp_path, damage):
    ck = str(tmp_path / "ck")
    calls: list = []
    s1 = _crashed(ck, calls, 6, 5)
    _cursor, log = _files(ck)
    data = bytearray(open(log, "rb").read())
    if damage == "bit flip":
        data[16 + 5] ^= 0x10
    elif damage == "bad magic":
        data[32:36] = b"XXXX"
    else:
        data += data[:16]                       # a record of 1 call after one of 4
    open(log, "wb").write(bytes(data))
    check = StateCheck("out", "snapshot", ck, 1)
    with pytest.raises(CheckpointCorruptError) as e:
        CallableSink(lambda t, tb: None, parts=1).verify_state(s1, check)
    assert e.value.path.endswith("cursor.log")
    with pytest.raises(CheckpointCorruptError):
        _open(ck, calls, s1, generation=2, horizon=1)
    assert len(calls) == 4                       # nothing was delivered from a damaged cursor


# -- whole jobs --------------------------------------------------------------------------------------------


def _expected(parts: int, items: int) -> list[tuple]:
    acc: dict[tuple[str, int], int] = {}
    gen = events(items)
    for p in range(parts):
        for t, recs in gen(p, 0):
            for r in recs:
                w = t - t % 5
                acc[(r["word"], w)] = acc.get((r["word"], w), 0) + 1
    return sorted((word, w, c) for (word, w), c in acc.items())


def _job(name: str, out: str, items: int, delay: float = 0.0) -> Job:
    def write(t: int, table: pa.Table) -> None:
        with open(out, "a") as f:
            for r in table.to_pylist():
                f.write(json.dumps([r["word"], r["window_start"], r["count"]]) + "\n")

    job = Job(name)
    src = job.from_generator(events(items, delay=delay), parts=4, parallelism=2, name="source")
    src.key_by("word").window(5).count(parallelism=2, name="count").sink(write, parallelism=2, parts=3, name="out")
    return job


def _read(out: str) -> list[tuple]:
    rows = [tuple(json.loads(line)) for line in open(out)]
    assert len(rows) == len(set(rows)), "a sink call was made twice"
    return sorted(rows)


def test_exactly_once_calls_with_random_failures_in_process(tmp_path):
    """Twelve faults, one per attempt. The sources are paced (1 ms an item) and long enough (8,000 items) that
    every attempt's fault point comes before the end however slow the machine: a fault comes within 40 records
    or 3 checkpoints of an attempt's start (at most ~300 items), so the job cannot finish with faults left
    unfired (with 400 items, a loaded machine finished after 6)."""
    out = str(tmp_path / "calls.jsonl")
    job = _job("sinkfaults", out, 2000, delay=0.001)
    tasks = {n: node.parallelism for n, node in job.nodes.items()}
    faults = FaultPlan.random(12, 3, tasks, max_after={"source": 40, "count": 8, "out": 3},
                              points=("record", "commit", "commit", "barrier"), sinks=["out"])
    result = job.run(channels=str(tmp_path / "ch"), checkpoints=str(tmp_path / "ck"), checkpoint_interval=0.05,
                     faults=faults, timeout=150, restart_backoff=RestartBackoff(initial=0.005, maximum=0.05))
    assert result.status == "finished" and result.restarts >= 8, result.failures
    assert any("at commit #" in f for f in result.failures)
    assert _read(out) == _expected(4, 2000)
    assert set(WORDS) >= {w for w, _, _ in _read(out)}


@pytest.mark.spark
def test_exactly_once_calls_on_spark_with_sinks_killed_between_checkpoints(tmp_path, runtime_spark):
    """The sink's Python worker is SIGKILLed in the middle of committing an epoch (between checkpoints), in
    the first generation and (when it still commits enough) the second; each restart makes only the calls
    its cursor log does not count."""
    out = str(tmp_path / "calls.jsonl")
    job = _job("sinkkill", out, 400, delay=0.003)
    faults = FaultPlan([Fault(0, "out", 0, "commit", 3, kind="kill"), Fault(1, "out", 0, "commit", 4, kind="kill")])
    result = job.run(runtime_spark, channels=str(tmp_path / "ch"), checkpoints=str(tmp_path / "ck"),
                     checkpoint_interval=0.2, faults=faults, timeout=240)
    assert result.status == "finished" and result.restarts >= 1, result.failures
    assert all("Python worker exited unexpectedly" in f for f in result.failures), result.failures
    assert _read(out) == _expected(4, 400)
