"""What the tests of capture by configuration of Structured Streaming queries share, on local disk and on S3
(``tests/spark/test_plan_capture_streaming.py``, ``tests/spark/test_plan_capture_s3.py``): input files, the
query, the captured ids per micro-batch, the stream's frontier, and a task attempt that fails once."""

from __future__ import annotations

import collections
import os
import time

import pytest

from connectors.spark.plan_capture import read_plan
from eventlog import open_log
from replay import Replayer

ROWS = 40  # rows per input file: file i holds ids 100*i .. 100*i + ROWS - 1


def add_file(src: "str | os.PathLike[str]", i: int) -> None:
    """Input file ``i`` (written aside and renamed in: the file source never sees half a file)."""
    src = os.fspath(src)
    tmp = os.path.join(os.path.dirname(src), f".in-{i}.csv")
    with open(tmp, "w") as f:
        for n in range(100 * i, 100 * i + ROWS):
            f.write(f"{n},{n % 3}\n")
    os.rename(tmp, os.path.join(src, f"in-{i:04d}.csv"))


def expected(i: int) -> list[int]:
    """The ids of file ``i`` the query keeps (the even ones)."""
    return [n for n in range(100 * i, 100 * i + ROWS) if n % 2 == 0]


def start_stream(cap, src: "str | os.PathLike[str]", ckpt: str, name: str, transform=None):  # noqa: ANN001, ANN201
    """The query: one input file per micro-batch, the even ids kept, a column added, into the ``noop`` sink."""
    df = cap.readStream.schema("id LONG, k LONG").option("maxFilesPerTrigger", 1).csv(os.fspath(src))
    df = df.where("id % 2 = 0").selectExpr("id", "k", "id * 10 as v")
    if transform is not None:
        df = transform(df)
    return df.writeStream.format("noop").queryName(name).option("checkpointLocation", ckpt).start()


def run_files(cap, src: "str | os.PathLike[str]", ckpt: str, name: str, files: range,  # noqa: ANN001
              transform=None) -> None:  # noqa: ANN001
    """Start the query, add each of ``files`` and process it, stop; the query must not have failed."""
    q = start_stream(cap, src, ckpt, name, transform)
    try:
        for i in files:
            add_file(src, i)
            q.processAllAvailable()
    finally:
        q.stop()
    assert q.exception() is None


def run_until_poisoned(cap, src: "str | os.PathLike[str]", ckpt: str, name: str, transform,  # noqa: ANN001
                       poison: str) -> None:
    """Start the query, process file 0, then create ``poison`` (the ``transform``'s cue to fail) and add file 1:
    micro-batch 1 must fail with the transform's "injected failure"; the query is stopped."""
    q = start_stream(cap, src, ckpt, name, transform)
    try:
        add_file(src, 0)
        q.processAllAvailable()
        open(poison, "w").close()
        add_file(src, 1)
        with pytest.raises(Exception, match="injected failure"):
            q.processAllAvailable()
    finally:
        q.stop()


def forget_commit(ckpt: str, batch: int) -> None:
    """Remove micro-batch ``batch``'s commit from the checkpoint: a restarted query runs that batch again."""
    for name in (str(batch), f".{batch}.crc"):
        path = os.path.join(ckpt, "commits", name)
        if os.path.exists(path):
            os.remove(path)


def rerun_batch_1_then_2(cap, src: "str | os.PathLike[str]", ckpt: str, name: str,  # noqa: ANN001
                         transform=None) -> None:  # noqa: ANN001
    """Restart the query whose batch 1 is uncommitted: it must run batch 1 again, then batch 2 of a new file;
    the query is stopped and must not have failed."""
    q = start_stream(cap, src, ckpt, name, transform)
    try:
        q.processAllAvailable()  # batch 1 again
        assert q.lastProgress["batchId"] == 1
        add_file(src, 2)
        q.processAllAvailable()
    finally:
        q.stop()
    assert q.exception() is None


def project_stream(log: str, name: str) -> str:
    """The stream of the query's ``Project`` operator."""
    plan = read_plan(log, name)
    return next(op.stream for op in plan.operators if op.name == "Project" and op.stream)


def ids_by_time(log: str, stream: str) -> dict[int, list[int]]:
    """Each complete time's captured ids, sorted (duplicates kept)."""
    out: dict[int, list[int]] = collections.defaultdict(list)
    for t, table in Replayer(open_log(log), stream).completed():
        out[t].extend(table.column("id").to_pylist())
    return {t: sorted(v) for t, v in out.items()}


def frontier(log: str, stream: str) -> list[int]:
    r = Replayer(open_log(log), stream)
    for _ in r:
        pass
    return list(r.frontier)


def wait_frontier(log: str, stream: str, want: int, *, deadline_s: float = 60) -> None:
    """The last committed micro-batch is appended by the query's progress event (Spark's listener bus delivers
    it asynchronously): wait until the stream's frontier got there, or fail saying where it is."""
    deadline = time.monotonic() + deadline_s
    while frontier(log, stream) != [want] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert frontier(log, stream) == [want]


def fail_first_attempt(marks: str, batch: str = "1"):  # noqa: ANN201
    """A transform whose tasks leave a mark ``b<batch>-p<partition>-a<attempt>`` in ``marks`` and whose first
    attempt of each task of micro-batch ``batch`` fails after its rows went through."""

    def transform(df):  # noqa: ANN001, ANN202
        def run(batches):  # noqa: ANN001, ANN202
            from pyspark import TaskContext

            ctx = TaskContext.get()
            b = ctx.getLocalProperty("streaming.sql.batchId")
            open(os.path.join(marks, f"b{b}-p{ctx.partitionId()}-a{ctx.attemptNumber()}"), "w").close()
            yield from batches
            if b == batch and ctx.attemptNumber() == 0:
                raise RuntimeError("injected failure after the partition's rows went through")

        return df.mapInArrow(run, df.schema)

    return transform
