"""The Spark sources never drop a record silently: a part that breaks timely's progress rules (a capability
added behind its frontier, a record behind it, activity after it finished) makes the streaming and the batch
source raise ProgressError naming the stream, part and sequence id. Logs are written directly through
``log.writer(...).append`` (bypassing Capture's checks).

Most tests drive the sources' planners and readers without Spark (fast); one streaming query and one batch
query show the error reaching the user through Spark.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from eventlog import Messages, Progress, ProgressError, StreamHeader, open_log

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("n", pa.int64())])

GOOD = [Progress(((0, -1), (5, 1))), Messages(5, None), Progress(((5, -1), (9, 1)))]
"""Part 0 (valid): times 0..4 complete for it, then 5..8."""

BEHIND = [
    Progress(((0, -1), (5, 1))),   # seq 1: the part's frontier is [5]
    Progress(((2, 1),)),           # seq 2: a capability at 2, behind [5]: broken rule
    Messages(2, None),             # seq 3: a record at 2, a time the stream may report complete
    Progress(((2, -1), (5, -1), (9, 1))),
]


def batch(n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"n": n}], schema=SCHEMA)


def write(log_dir: str, parts: list[list], stream: str = "s") -> None:
    log = open_log(log_dir)
    log.create_stream(StreamHeader(stream, len(parts), SCHEMA))
    for p, events in enumerate(parts):
        with log.writer(stream, p) as w:
            for i, ev in enumerate(events):
                w.append(Messages(ev.time, batch(100 * p + i)) if isinstance(ev, Messages) else ev)


def stream_reader(path: str, **options):
    from connectors.spark.options import ReadOptions
    from connectors.spark.schema import read_schema
    from connectors.spark.stream_read import StreamReader

    opts = ReadOptions.parse({"path": path, **options})
    return StreamReader(opts, read_schema(open_log(path.rsplit("/", 1)[0]).header(path.rsplit("/", 1)[1])))


def test_the_planner_raises_for_a_capability_added_behind_the_frontier(log_dir):
    write(log_dir, [GOOD, BEHIND])
    reader = stream_reader(f"{log_dir}/s")
    with pytest.raises(ProgressError, match="behind the part's frontier") as ei:
        reader.latestOffset(reader.initialOffset(), None)
    assert (ei.value.stream, ei.value.part, ei.value.seq) == ("s", 1, 2)
    reader.stop()


@pytest.mark.parametrize("events, seq, match", [
    ([Progress(((0, -1), (5, 1))), Messages(3, None)], 2, "messages at time 3 behind"),
    ([Progress(((0, -1),)), Messages(7, None)], 2, "after the part finished"),
    ([Progress(((0, -1),)), Progress(((7, 1),))], 2, "progress after the part finished"),
    ([Progress(((0, -2),))], 1, "negative capability count"),
])
def test_the_planner_raises_for_every_broken_rule(log_dir, events, seq, match):
    write(log_dir, [GOOD, events])
    reader = stream_reader(f"{log_dir}/s")
    with pytest.raises(ProgressError, match=match) as ei:
        reader.latestOffset(reader.initialOffset(), None)
    assert (ei.value.part, ei.value.seq) == (1, seq)
    reader.stop()


def test_a_planner_resumed_from_an_offset_checks_what_it_reads_next(log_dir):
    """The offset is saved on a valid log; the broken events arrive later and a restarted planner (from the
    checkpointed offset) meets them."""
    write(log_dir, [GOOD, BEHIND[:1]])
    first = stream_reader(f"{log_dir}/s")
    offset = first.latestOffset(first.initialOffset(), None)
    assert offset["frontier"] == [5]
    first.stop()
    with open_log(log_dir).writer("s", 1) as w:
        w.append(BEHIND[1])
        w.append(Messages(2, batch(7)))
    again = stream_reader(f"{log_dir}/s")
    with pytest.raises(ProgressError) as ei:
        again.latestOffset(offset, None)
    assert (ei.value.part, ei.value.seq) == (1, 2)
    again.stop()


def test_a_task_never_skips_a_new_record_at_a_time_complete_before_its_batch(log_dir):
    """The tasks' own check (the planner raises first on a log that breaks the rules; a task still refuses
    to drop a record that is new to its micro-batch and at a time complete before it)."""
    from connectors.spark.stream_read import RangeSlice

    write(log_dir, [[Progress(((0, -1), (5, 1))), Messages(2, None)]])
    reader = stream_reader(f"{log_dir}/s")
    new = RangeSlice(0, 1, {0: (1, 3)}, [5], [6], starts={0: 2})
    with pytest.raises(ProgressError, match="after the time was complete") as ei:
        list(reader.read(new))
    assert (ei.value.part, ei.value.seq) == (0, 2)
    delivered_before = RangeSlice(0, 1, {0: (1, 3)}, [5], [6], starts={0: 3})
    assert list(reader.read(delivered_before)) == []  # seq 2 came before the batch: an earlier batch had it


def test_the_batch_source_raises_on_the_driver_and_in_tasks(log_dir):
    from connectors.spark import frontier as fr
    from connectors.spark.batch_read import BatchReader, WorkerSlice
    from connectors.spark.options import ReadOptions
    from connectors.spark.schema import read_schema

    write(log_dir, [GOOD, BEHIND])
    with pytest.raises(ProgressError) as ei:
        fr.merged_frontier(open_log(log_dir), "s")
    assert (ei.value.part, ei.value.seq) == (1, 2)
    # a record behind its part's frontier is only seen when the part is read: in the task
    write(log_dir, [GOOD, [Progress(((0, -1), (5, 1))), Messages(3, None), Progress(((5, -1),))]], stream="m")
    opts = ReadOptions.parse({"path": f"{log_dir}/m", "incomplete": "true"})
    reader = BatchReader(opts, read_schema(open_log(log_dir).header("m")))
    with pytest.raises(ProgressError, match="behind") as ei:
        list(reader.read(WorkerSlice(1, 2, [1], None)))
    assert (ei.value.stream, ei.value.part, ei.value.seq) == ("m", 1, 2)


def test_spark_queries_fail_with_the_progress_error(spark, log_dir, tmp_path):
    write(log_dir, [GOOD, BEHIND])
    rows: list = []
    q = (spark.readStream.format("eventlog").load(f"{log_dir}/s").writeStream
         .foreachBatch(lambda df, _id: rows.extend(df.collect()))
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    with pytest.raises(Exception) as ei:
        q.awaitTermination(120)
    text = str(ei.value)
    assert "ProgressError" in text and "part 1" in text and "seq 2" in text, text[:2000]
    assert all(r["n"] != 102 for r in rows)  # the record at time 2 was never delivered as complete
    with pytest.raises(Exception) as ei:
        spark.read.format("eventlog").load(f"{log_dir}/s").collect()
    assert "ProgressError" in str(ei.value) and "seq 2" in str(ei.value)
