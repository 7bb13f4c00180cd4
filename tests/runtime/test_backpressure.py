"""Backpressure: a slow sink holds its producers back, and every writer's memory stays within its bound."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest

from runtime import Job, WriterSettings

CAPACITY = 256 << 10          # ring bytes per writer
CHANNEL = 512 << 10           # unacknowledged bytes per channel
BATCH_ROWS = 4096             # ~64 KiB per batch (two int64 columns)


def _source(items: int):
    def gen(part: int, offset: int):
        for i in range(offset, items):
            yield i // 20, pa.record_batch({"k": np.arange(BATCH_ROWS, dtype=np.int64) % 97,
                                            "v": np.full(BATCH_ROWS, i, dtype=np.int64)})

    return gen


def _slow_sink(calls: list):
    def fn(t: int, table: pa.Table) -> None:
        time.sleep(0.01)
        calls.append(table.num_rows)

    return fn


def _job(name: str, calls: list, items: int) -> Job:
    job = Job(name)
    src = job.from_generator(_source(items), parts=2, parallelism=2, name="source")
    src.map_batches(lambda b: b, name="copy").sink(_slow_sink(calls), parallelism=1, name="slow")
    return job


def _check(result, items: int, rows: int) -> None:
    assert result.status == "finished"
    assert rows == 2 * items * BATCH_ROWS
    src = [s for k, s in result.tasks.items() if k.startswith("source.")]
    copy = [s for k, s in result.tasks.items() if k.startswith("copy.")]
    assert len(src) == 2 and len(copy) == 2
    payload = BATCH_ROWS * 16 + 1024      # one message: the batch and its IPC framing
    for s in src + copy:
        # the ring never held more than its capacity (plus the one message that may exceed it when it is
        # the only one), and no channel ran further ahead of its reader than its bound (plus one bundle)
        assert s["writer_peak_bytes"] <= CAPACITY + payload, s
        assert s["writer_peak_unacked"] <= CHANNEL + CAPACITY + payload, s
    total = sum(s["bytes_sent"] for s in src)
    assert total > 20 * CAPACITY          # far more data flowed than the bound
    # the slow sink held the sources back: until their input was all written they spent a large part of the
    # time blocked on full rings (without backpressure they never block; on a loaded machine the share seen
    # was 0.43-0.9, so the bound leaves room for the load without letting "no backpressure" pass)
    assert sum(s["writer_blocked_s"] for s in src) > 0.3 * sum(s["finished_after_s"] for s in src), src


def test_slow_sink_bounds_writer_memory(tmp_path):
    calls: list = []
    items = 150
    settings = WriterSettings(capacity=CAPACITY, channel_capacity=CHANNEL, bundle_bytes=128 << 10)
    result = _job("backpressure", calls, items).run(channels=str(tmp_path / "ch"), checkpoints=str(tmp_path / "ck"),
                                                    checkpoint_interval=0.1, writer=settings, timeout=120)
    _check(result, items, sum(calls))


@pytest.mark.spark
def test_slow_sink_bounds_writer_memory_on_spark(tmp_path, runtime_spark):
    items = 100
    settings = WriterSettings(capacity=CAPACITY, channel_capacity=CHANNEL, bundle_bytes=128 << 10)
    counter = tmp_path / "rows"

    def fn(t: int, table: pa.Table) -> None:   # runs in a Spark worker: count rows in a file
        time.sleep(0.01)
        with open(counter, "a") as f:
            f.write(f"{table.num_rows}\n")

    job = Job("backpressure_spark")
    src = job.from_generator(_source(items), parts=2, parallelism=2, name="source")
    src.map_batches(lambda b: b, name="copy").sink(fn, parallelism=1, name="slow")
    result = job.run(runtime_spark, channels=str(tmp_path / "ch"), checkpoints=str(tmp_path / "ck"),
                     checkpoint_interval=0.1, writer=settings, timeout=180)
    rows = sum(int(x) for x in counter.read_text().split())
    _check(result, items, rows)
