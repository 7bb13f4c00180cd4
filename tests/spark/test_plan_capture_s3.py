"""Capture by configuration into a log on S3 (``spark.eventlog.capture.dir=s3://bucket/prefix``), against the
project's real S3-protocol server: every chosen operator's stream and the plan document are objects in the
bucket, each row captured once when a task attempt fails after its rows went through (the retry finds the part
published); ``replay plan`` reads the plan from S3; a streaming query into S3 is refused, uncaptured, with its
rows unchanged."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from connectors.spark.plan_capture import capture_session, plan_names, read_plan
from eventlog import open_log
from replay import Replayer
from replay.cli import main

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


def test_a_streaming_query_into_s3_is_not_captured_and_runs_unchanged(cap, s3_bucket, tmp_path):
    log = f"{s3_bucket}/streaming"
    cap.conf.set("spark.eventlog.capture.dir", log)
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.csv").write_text("".join(f"{i},{i % 3}\n" for i in range(10)))
    q = (
        cap.readStream.schema("id LONG, k LONG")
        .csv(str(src))
        .where("id % 2 = 0")
        .writeStream.format("memory")
        .queryName("s3_streaming")
        .start()
    )
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert object_keys(log) == []  # nothing written: refused with a warning
    cap.conf.set("spark.eventlog.capture.enabled", "false")
    try:
        assert sorted(r["id"] for r in cap.sql("select id from s3_streaming").collect()) == [0, 2, 4, 6, 8]
    finally:
        cap.conf.unset("spark.eventlog.capture.enabled")
