"""Capture by configuration of Structured Streaming queries (``CaptureStreaming.java``): each micro-batch is a
time (its batch id) of every chosen operator's stream, the frontier moves on as micro-batches are committed, and
each row is captured once across a retried task attempt, a query restarted from its checkpoint that runs a batch
again, and a run that failed before committing its batch; a micro-batch with more partitions than the stream
has parts stops the stream at its frontier."""

from __future__ import annotations

import glob
import json
import os
import time

import pytest
from click.testing import CliRunner

from connectors.spark.plan_capture import capture_session, read_plan
from eventlog import open_log
from replay.cli import main
from tests.support.streaming_capture import (
    ROWS,
    add_file,
    expected,
    fail_first_attempt,
    forget_commit,
    frontier,
    ids_by_time,
    project_stream,
    rerun_batch_1_then_2,
    run_files,
    run_until_poisoned,
    start_stream,
    wait_frontier,
)

pytestmark = pytest.mark.spark

@pytest.fixture(scope="module")
def cap(spark, jvm):
    session = capture_session(spark, "/nonexistent-set-per-test", operators="all")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    return session


def use(cap, log: str) -> None:
    cap.conf.set("spark.eventlog.capture.dir", log)
    cap.conf.set("spark.eventlog.capture.operators", "all")


def assert_no_staging(log: str) -> None:
    """Nothing is left staged once every stream caught up (the streams are appended one after the other, and a
    cancelled attempt of a failed run removes its folder when it ends: wait for both)."""
    staging = os.path.join(log, ".staging")

    def left() -> list[str]:
        return [os.path.join(d, f) for d, _, files in os.walk(staging) for f in files]

    deadline = time.monotonic() + 60
    while left() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left()


@pytest.fixture
def dirs(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    return str(tmp_path / "log"), str(src), str(tmp_path / "ckpt")


def test_each_micro_batch_is_a_time_of_each_operator_stream(cap, dirs):
    log, src, ckpt = dirs
    use(cap, log)
    run_files(cap, src, ckpt, "orders", range(3))
    stream = project_stream(log, "orders")
    assert stream.startswith("orders.") and stream.endswith("-Project")
    wait_frontier(log, stream, 3)
    assert ids_by_time(log, stream) == {t: expected(t) for t in range(3)}
    assert_no_staging(log)
    filt = next(op for op in read_plan(log, "orders").operators if op.name == "Filter")
    assert ids_by_time(log, filt.stream) == {t: expected(t) for t in range(3)}
    scan = next(op for op in read_plan(log, "orders").operators if op.stream and not op.children)
    assert {t: len(v) for t, v in ids_by_time(log, scan.stream).items()} == {t: ROWS for t in range(3)}
    assert_no_staging(log)
    # replay plan shows the streaming query's plan: each captured operator's rows over all micro-batches, frontier 3
    plan = read_plan(log, "orders")
    assert plan.streaming_id and plan.batch == 2
    out = CliRunner().invoke(main, ["plan", log, "orders", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["streaming"] == {"id": plan.streaming_id, "batch": 2}
    project = next(op for op in doc["operators"] if op["stream"] == stream)
    assert project["rows"] == sum(len(expected(t)) for t in range(3)) and project["frontier"] == [3]
    out = CliRunner().invoke(main, ["plan", log, "orders"])
    assert out.exit_code == 0, out.output
    assert "streaming query orders" in out.output and "micro-batches before 3 complete" in out.output


def test_a_restarted_query_running_a_batch_again_captures_it_once(cap, dirs):
    """Batch 1 is appended, then its commit is removed from the checkpoint: the restarted query runs batch 1
    again (same offsets), which the stream holds already; batch 2 continues the stream."""
    log, src, ckpt = dirs
    use(cap, log)
    run_files(cap, src, ckpt, "restarted", range(2))
    stream = project_stream(log, "restarted")
    wait_frontier(log, stream, 2)
    forget_commit(ckpt, 1)
    rerun_batch_1_then_2(cap, src, ckpt, "restarted")
    wait_frontier(log, stream, 3)
    assert ids_by_time(log, stream) == {t: expected(t) for t in range(3)}
    assert_no_staging(log)


def test_a_run_that_failed_before_committing_its_batch_is_captured_once_on_restart(cap, dirs, tmp_path):
    """Every attempt of a task of batch 1 fails (after other partitions' parts may be claimed): the query
    stops with batch 1 uncommitted; restarted, it runs batch 1 again and the stream holds it once."""
    log, src, ckpt = dirs
    use(cap, log)
    poison = str(tmp_path / "poison")

    def fail_while_poisoned(df):
        def check(batches):
            for b in batches:
                if os.path.exists(poison) and 100 in b.column("id").to_pylist():
                    raise RuntimeError("injected failure of batch 1")
                yield b

        return df.mapInArrow(check, df.schema)

    run_until_poisoned(cap, src, ckpt, "failing", fail_while_poisoned, poison)
    # the failed run claimed batch 1's partition (its rows went through before the task failed): staged, never
    # appended, since Spark did not commit the batch
    staged = glob.glob(os.path.join(log, ".staging", "failing.*-Project", "b00000000000000000001-*", "part=0"))
    assert staged
    stream = project_stream(log, "failing")
    assert frontier(log, stream) == [1] and ids_by_time(log, stream) == {0: expected(0)}
    os.remove(poison)
    run_files(cap, src, ckpt, "failing", range(2, 3), fail_while_poisoned)
    wait_frontier(log, stream, 3)
    assert ids_by_time(log, stream) == {t: expected(t) for t in range(3)}
    assert_no_staging(log)


def test_a_failed_task_attempt_in_a_micro_batch_is_retried_and_captured_once(cap, dirs, tmp_path):
    """The first attempt of a task of batch 1 fails after its rows went through the captured operators; the
    retry's rows are the ones the stream holds, once."""
    log, src, ckpt = dirs
    use(cap, log)
    marks = str(tmp_path / "marks")
    os.mkdir(marks)

    fail_first = fail_first_attempt(marks)

    run_files(cap, src, ckpt, "retried", range(3), fail_first)
    assert any(m.startswith("b1-") and m.endswith("-a1") for m in os.listdir(marks))  # a task of batch 1 ran again
    stream = project_stream(log, "retried")
    wait_frontier(log, stream, 3)
    assert ids_by_time(log, stream) == {t: expected(t) for t in range(3)}
    assert_no_staging(log)


def test_a_micro_batch_with_more_partitions_than_the_stream_has_parts_stops_it(cap, dirs):
    """Batch 0 reads one small file (one partition: the stream gets one part); batch 1 a file split into several
    partitions. The stream stops at its frontier 1 (batch 1 never shows as complete), the reason is in the
    query's state file, and the query's own output is unchanged."""
    log, src, ckpt = dirs
    use(cap, log)
    q = start_stream(cap, src, ckpt, "growing")
    try:
        add_file(src, 0)
        q.processAllAvailable()
        cap.conf.set("spark.sql.files.maxPartitionBytes", "128")
        cap.conf.set("spark.sql.files.openCostInBytes", "0")
        add_file(src, 1)
        q.processAllAvailable()
    finally:
        cap.conf.unset("spark.sql.files.maxPartitionBytes")
        cap.conf.unset("spark.sql.files.openCostInBytes")
        q.stop()
    assert q.exception() is None and q.lastProgress["batchId"] == 1
    assert q.lastProgress["numInputRows"] == ROWS
    stream = project_stream(log, "growing")
    assert open_log(log).header(stream).peers == 1
    wait_frontier(log, stream, 1)
    assert ids_by_time(log, stream) == {0: expected(0)}
    with open(os.path.join(log, "_plans", "growing.state")) as f:
        state = f.read()
    assert f"stream {stream} peers 1 batch 0 " in state and "stopped micro-batch 1 has" in state
    op = next(o for o in read_plan(log, "growing").operators if o.stream == stream)
    assert op.summary is not None and list(op.summary.frontier) == [1]


def test_a_staged_description_is_read_back_only_as_a_tap_spec(cap, tmp_path):
    """A staged micro-batch's ``_spec`` lies in the log's folder: reading it back builds a ``TapSpec`` and its
    fields' strings and arrays, nothing else — another serialized class (a collection here; a gadget in an
    attack) and an oversized file are refused with an IOException naming the file, before any of it is built."""
    from py4j.protocol import Py4JJavaError

    jvm = cap.sparkContext._jvm
    hostile = str(tmp_path / "_spec")
    out = jvm.java.io.ObjectOutputStream(jvm.java.io.FileOutputStream(hostile))
    items = jvm.java.util.ArrayList()
    items.add(jvm.java.util.HashMap())
    out.writeObject(items)
    out.writeInt(2)
    out.close()
    with pytest.raises(Py4JJavaError, match="is not a staged batch's description") as e:
        jvm.eventlog.spark.StagedBatch.read(jvm.java.io.File(hostile).toPath())
    assert hostile in str(e.value)
    with open(hostile, "wb") as f:
        f.truncate((16 << 20) + 1)
    with pytest.raises(Py4JJavaError, match="more than a staged batch's description holds"):
        jvm.eventlog.spark.StagedBatch.read(jvm.java.io.File(hostile).toPath())
