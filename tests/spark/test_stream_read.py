"""Streaming reads: each completed time arrives exactly once, never split across micro-batches, through
admission control, query restarts from the checkpoint and re-executed batches."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pytest

from capture import Capture
from eventlog import open_log

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("n", pa.int64())])
PEERS = 3


def write_round(log_dir: str, times: range, lagging: int | None = None) -> None:
    """Each part sends 4 records per time (n = 1000*t + 10*part + i) and advances past it; part ``lagging``
    stops one time short (its last time stays incomplete until the next round)."""
    log = open_log(log_dir)
    for p in range(PEERS):
        cap = Capture(log, "live", p, PEERS, schema=SCHEMA)
        (start,) = cap.frontier  # a reopened writer re-sends the times its part had not completed (FORMAT §1.1)
        for t in range(start, times.stop):
            cap.send(t, [{"n": 1000 * t + 10 * p + i} for i in range(4)])
            if p == lagging and t == times[-1]:
                break
            cap.advance_to(t + 1)
        cap.abort()  # leave the part open: the stream goes on


class Sink:
    """A foreachBatch sink keeping ``{batch_id: Counter(time -> rows)}`` and the records (idempotent per
    batch id, as Spark asks of sinks)."""

    def __init__(self) -> None:
        self.batches: dict[int, Counter] = {}
        self.records: dict[int, list[int]] = {}

    def __call__(self, df, batch_id: int) -> None:
        rows = df.select("_time", "n").collect()
        self.batches[batch_id] = Counter(r["_time"] for r in rows)
        self.records[batch_id] = sorted(r["n"] for r in rows)

    def times(self) -> list[int]:
        return sorted(t for c in self.batches.values() for t in c)


def run(spark, log_dir: str, checkpoint: str, sink: Sink, **options) -> None:
    reader = spark.readStream.format("eventlog")
    for k, v in options.items():
        reader = reader.option(k, v)
    q = (reader.load(f"{log_dir}/live").writeStream.foreachBatch(sink)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination()


def test_three_rounds_with_restarts_deliver_every_time_once(spark, log_dir, tmp_path):
    checkpoint = str(tmp_path / "ck")
    sink = Sink()
    write_round(log_dir, range(0, 4), lagging=1)  # part 1 has sent time 3 but not passed it
    run(spark, log_dir, checkpoint, sink, maxRecordsPerTrigger=30, workers=2)
    assert sink.times() == [0, 1, 2]
    assert len(sink.batches) >= 2  # admission control cut the round into several micro-batches
    write_round(log_dir, range(4, 7))  # part 1 re-sends time 3 (the first version is void) and completes it
    run(spark, log_dir, checkpoint, sink, maxRecordsPerTrigger=30, workers=2)  # restart from the checkpoint
    assert sink.times() == [0, 1, 2, 3, 4, 5, 6]
    write_round(log_dir, range(7, 9))
    run(spark, log_dir, checkpoint, sink, workers=2)
    # every time exactly once, whole: 3 parts x 4 records, in one micro-batch
    assert sink.times() == list(range(9))
    for counts in sink.batches.values():
        assert all(n == PEERS * 4 for n in counts.values())
    delivered = sorted(n for rs in sink.records.values() for n in rs)
    expected = sorted(1000 * t + 10 * p + i for t in range(9) for p in range(PEERS) for i in range(4))
    assert delivered == expected


def test_a_reexecuted_micro_batch_delivers_the_same_records(spark, log_dir, tmp_path):
    checkpoint = str(tmp_path / "ck")
    first, again = Sink(), Sink()
    write_round(log_dir, range(0, 3))
    run(spark, log_dir, checkpoint, first, maxRecordsPerTrigger=20)
    last = max(first.batches)
    for name in (str(last), f".{last}.crc"):  # Spark forgets it committed the last batch: runs it again
        os.remove(os.path.join(checkpoint, "commits", name))
    run(spark, log_dir, checkpoint, again)
    assert again.records == {last: first.records[last]}


def test_offsets_move_by_frontier_without_spark(log_dir):
    """The planner alone: offsets, the frontier stored in them and ``low`` for parts with pending times."""
    from connectors.spark.options import ReadOptions
    from connectors.spark.schema import read_schema
    from connectors.spark.stream_read import StreamReader

    write_round(log_dir, range(0, 2), lagging=0)
    opts = ReadOptions.parse({"path": f"{log_dir}/live"})
    reader = StreamReader(opts, read_schema(open_log(log_dir).header("live")))
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert end["frontier"] == [1]  # part 0 still holds time 1
    assert end["next"] == [4, 5, 5]  # part 0: M0 P M1 (no final progress)
    assert end["low"] == [3, 3, 3]  # every part's time-1 records (seq 3) wait for part 0 to pass time 1
    slices = reader.partitions(start, end)
    got = [b for s in slices for b in reader.read(s)]
    assert sorted(n for b in got for n in b.column("n").to_pylist()) == [10 * p + i for p in range(3) for i in range(4)]
    again = StreamReader(opts, reader.schema)  # a restarted planner resumes from the stored offset
    assert again.latestOffset(end, None) == end
    assert reader.partitions(end, end) == []
    reader.stop()
    again.stop()
