"""Capture by configuration into a log on S3 (``spark.eventlog.capture.dir=s3://bucket/prefix``), against the
project's real S3-protocol server: every chosen operator's stream and the plan document are objects in the
bucket, each row captured once when a task attempt fails after its rows went through (the retry finds the part
published); ``replay plan`` reads the plan from S3; a Structured Streaming query into S3 has each micro-batch at
its time, the frontier moving on per micro-batch, each row once across a retried task attempt and a restart from
the checkpoint that runs a batch again."""

from __future__ import annotations

import os
import time

import pyarrow.fs as pafs
import pytest
from click.testing import CliRunner

from connectors.spark.plan_capture import capture_session, plan_names, read_plan
from eventlog import open_log
from replay import Replayer
from replay.cli import main
from tests.support.streaming_capture import (
    expected,
    fail_first_attempt,
    forget_commit,
    frontier,
    ids_by_time,
    project_stream,
    rerun_batch_1_then_2,
    run_files,
    run_until_poisoned,
    wait_frontier,
)

from .conftest import object_keys

pytestmark = pytest.mark.spark

N = 3000


@pytest.fixture(scope="module")
def cap(spark, jvm, s3_server):
    session = capture_session(spark, "/nonexistent-set-per-test", operators="all")
    env = s3_server.env  # the store's settings as a Spark user sets them (the driver JVM's environment predates them)
    session.conf.set("spark.eventlog.capture.s3.endpoint", env["AWS_ENDPOINT_URL"])
    session.conf.set("spark.eventlog.capture.s3.region", env["AWS_REGION"])
    session.conf.set("spark.eventlog.capture.s3.accessKey", env["AWS_ACCESS_KEY_ID"])
    session.conf.set("spark.eventlog.capture.s3.secretKey", env["AWS_SECRET_ACCESS_KEY"])
    session.conf.set("spark.sql.adaptive.enabled", "true")
    return session


def ids(log: str, stream: str) -> list[int]:
    return sorted(i for _, table in Replayer(open_log(log), stream).completed() for i in table.column("id").to_pylist())


def test_every_operator_captured_into_s3_once_with_a_retried_task(cap, s3_bucket, tmp_path):
    log = f"{s3_bucket}/run1"
    cap.conf.set("spark.eventlog.capture.dir", log)
    cap.conf.set("spark.eventlog.capture.query", "orders")
    marks = str(tmp_path / "marks")
    os.mkdir(marks)

    def fail_first(batches):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        open(os.path.join(marks, f"p{ctx.partitionId()}-a{ctx.attemptNumber()}"), "w").close()
        yield from batches
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
            raise RuntimeError("injected failure after the partition's rows went through")

    try:
        df = cap.range(0, N, 1, 3).selectExpr("id", "id % 10 as k").sortWithinPartitions("k")
        out = df.mapInArrow(fail_first, df.schema).groupBy("k").count().collect()
    finally:
        cap.conf.unset("spark.eventlog.capture.query")
    assert sorted((r["k"], r["count"]) for r in out) == [(k, N // 10) for k in range(10)]
    assert "p0-a1" in os.listdir(marks)  # the failed attempt ran again
    assert plan_names(log) == ["orders"]
    plan = read_plan(log)
    captured = [op for op in plan.operators if op.stream]
    assert {"Range", "Sort", "MapInArrow", "HashAggregate"} <= {op.name for op in captured}
    for op in captured:
        assert op.summary is not None and not op.summary.frontier, op.name  # every part published: complete
        if "id" in op.columns:
            assert ids(log, op.stream) == list(range(N)), op.name  # each row once
    keys = object_keys(log)
    assert "_plans/orders.json" in keys
    assert not [k for k in keys if ".staging" in k or k.endswith(".lock")]
    result = CliRunner().invoke(main, ["plan", log, "orders"])
    assert result.exit_code == 0, result.output
    assert "HashAggregate" in result.output and "complete" in result.output


def staging_keys(log: str) -> list[str]:
    """The staging objects left (waiting a while: a cancelled attempt may still be removing its upload)."""
    deadline = time.monotonic() + 90
    while True:
        left = [k for k in object_keys(log) if k.startswith(".staging/")]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


@pytest.fixture
def streaming(cap):
    cap.conf.set("spark.sql.shuffle.partitions", "2")
    try:
        yield cap
    finally:
        cap.conf.unset("spark.sql.shuffle.partitions")


def _capture_into(cap, log: str, tmp_path):  # noqa: ANN001, ANN202
    """Capture the session's queries into ``log``; the input folder (made) and the checkpoint of a query."""
    cap.conf.set("spark.eventlog.capture.dir", log)
    src = tmp_path / "src"
    src.mkdir()
    return log, src, str(tmp_path / "ckpt")


def test_a_streaming_query_into_s3_captures_each_micro_batch_at_its_time(streaming, s3_bucket, s3_server, tmp_path):
    """Three micro-batches: each operator's stream on S3 holds each batch's rows at its batch id, the frontier is
    3, ``replay plan s3://…`` shows the streaming query, the state is an object under ``_plans``, and nothing is
    left staged (nor does any object hold the store's secret key)."""
    cap = streaming
    log, src, ckpt = _capture_into(cap, f"{s3_bucket}/streaming", tmp_path)
    run_files(cap, src, ckpt, "s3_orders", range(3))
    stream = project_stream(log, "s3_orders")
    assert stream.startswith("s3_orders.")
    wait_frontier(log, stream, 3, deadline_s=90)
    assert ids_by_time(log, stream) == {t: expected(t) for t in range(3)}
    filt = next(op for op in read_plan(log, "s3_orders").operators if op.name == "Filter")
    assert ids_by_time(log, filt.stream) == {t: expected(t) for t in range(3)}
    keys = object_keys(log)
    assert "_plans/s3_orders.state" in keys and "_plans/s3_orders.json" in keys
    # the part continues over micro-batches: segments numbered from the part's next sequence id
    segments = sorted(k for k in keys if k.startswith(stream + "/part=0/") and k.endswith(".arrow"))
    assert len(segments) == 3 and not segments[1].endswith("00000000000000000001.arrow")
    assert staging_keys(log) == []
    secret = s3_server.env["AWS_SECRET_ACCESS_KEY"].encode()
    fs, path = pafs.FileSystem.from_uri(log)
    for k in keys:
        with fs.open_input_stream(f"{path}/{k}") as f:
            assert secret not in f.read(), k
    out = CliRunner().invoke(main, ["plan", log, "s3_orders"])
    assert out.exit_code == 0, out.output
    assert "streaming query s3_orders" in out.output and "micro-batches before 3 complete" in out.output


def test_a_streaming_query_into_s3_captures_each_row_once_across_a_retry_and_a_restart(
        streaming, s3_bucket, tmp_path):
    """The first attempt of a task of batch 1 fails after its rows went through (the retry's rows are kept, once);
    then batch 1's commit is removed from the checkpoint and the restarted query runs batch 1 again (the stream
    holds it already: not captured again), and batch 2 continues the stream."""
    cap = streaming
    log, src, ckpt = _capture_into(cap, f"{s3_bucket}/streaming-again", tmp_path)
    marks = str(tmp_path / "marks")
    os.mkdir(marks)

    fail_first = fail_first_attempt(marks)

    run_files(cap, src, ckpt, "s3_again", range(2), fail_first)
    assert any(m.startswith("b1-") and m.endswith("-a1") for m in os.listdir(marks))  # batch 1's task ran again
    stream = project_stream(log, "s3_again")
    wait_frontier(log, stream, 2, deadline_s=90)
    assert ids_by_time(log, stream) == {t: expected(t) for t in range(2)}
    forget_commit(ckpt, 1)
    _restart_and_finish(cap, src, ckpt, "s3_again", fail_first, log, stream)


def test_a_streaming_run_into_s3_that_failed_before_committing_its_batch_is_captured_once_on_restart(
        streaming, s3_bucket, s3_server, tmp_path):
    """Every attempt of a task of batch 1 fails after its partition was claimed on the store: the query stops
    with batch 1 uncommitted and its claim left staged (its ``_spec`` object holding no credentials); the
    restarted run drops that staging, runs batch 1 again and the stream holds it once."""
    cap = streaming
    log, src, ckpt = _capture_into(cap, f"{s3_bucket}/streaming-failed", tmp_path)
    poison = str(tmp_path / "poison")

    def fail_while_poisoned(df):
        def check(batches):
            for b in batches:
                yield b
            if os.path.exists(poison):
                raise RuntimeError("injected failure of batch 1")

        return df.mapInArrow(check, df.schema)

    run_until_poisoned(cap, src, ckpt, "s3_failing", fail_while_poisoned, poison)
    stream = project_stream(log, "s3_failing")
    # the failed run's claim of batch 1's partition is staged on the store, never appended (not committed)
    claims = [k for k in object_keys(log) if k.startswith(f".staging/{stream}/b00000000000000000001-")
              and k.endswith("/part=0")]
    assert claims
    spec = claims[0].rsplit("/", 1)[0] + "/_spec"
    assert spec in object_keys(log)
    fs, path = pafs.FileSystem.from_uri(log)
    with fs.open_input_stream(f"{path}/{spec}") as f:
        assert s3_server.env["AWS_SECRET_ACCESS_KEY"].encode() not in f.read()
    assert frontier(log, stream) == [1] and ids_by_time(log, stream) == {0: expected(0)}
    os.remove(poison)
    _restart_and_finish(cap, src, ckpt, "s3_failing", fail_while_poisoned, log, stream)


def _restart_and_finish(cap, src, ckpt: str, name: str, transform, log: str, stream: str) -> None:  # noqa: ANN001
    """Restart the query: it runs batch 1 again, then batch 2 of a new file; the stream then holds batches 0-2,
    each row once, and nothing is left staged on the store."""
    rerun_batch_1_then_2(cap, src, ckpt, name, transform)
    wait_frontier(log, stream, 3, deadline_s=90)
    assert ids_by_time(log, stream) == {t: expected(t) for t in range(3)}
    assert staging_keys(log) == []
