"""Capture by configuration with speculative tasks, on a standalone cluster whose two workers Spark sees as two
hosts (127.0.0.2 and 127.0.0.3: ``tools/spark-cluster --distinct-hosts``; Spark never runs a speculative copy
on a host that runs an attempt of the task already). One partition's first attempt stalls half-way through its
rows, above the captured operators below it and below the one above it; Spark launches a speculative copy on
the other host, which finishes first; the original is killed. Each captured operator holds every row once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.support import spark_cluster as _spark_cluster

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark-cluster")]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N = 4000

APP = textwrap.dedent("""
    import json, os, sys, time
    from pyspark.sql import SparkSession
    from connectors.spark.plan_capture import capture_conf, read_plan
    from eventlog import open_log
    from replay import Replayer

    master, log, marks = sys.argv[1:4]
    b = (SparkSession.builder.master(master).appName("eventlog-speculation")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
         .config("spark.executor.memory", "512m").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").config("spark.sql.adaptive.enabled", "false")
         .config("spark.speculation", "true").config("spark.speculation.multiplier", "1.5")
         .config("spark.speculation.quantile", "0.5").config("spark.speculation.minTaskRuntime", "500ms")
         .config("spark.speculation.interval", "100ms"))
    for k, v in capture_conf(log, operators="all", query="spec").items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("FATAL")
    deadline = time.monotonic() + 120  # both executors registered (a speculative copy needs the other host)
    while len(spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    hosts = sorted({e.host() for e in spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()})

    def stall(batches):
        from pyspark import TaskContext
        ctx = TaskContext.get()
        tag = f"p{ctx.partitionId()}-a{ctx.attemptNumber()}"
        open(os.path.join(marks, tag + "-start"), "w").close()
        for batch in batches:
            yield batch
            if ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
                time.sleep(600)  # the original attempt stalls after its first rows: a speculative copy overtakes it
        open(os.path.join(marks, tag + "-end"), "w").close()

    df = spark.range(0, %(n)d, 1, 4).selectExpr("id", "id %% 7 as k")
    df = df.mapInArrow(stall, df.schema).selectExpr("id", "k", "id * 2 as v")
    ids = sorted(r["id"] for r in df.collect())
    streams = {}
    for op in read_plan(log).operators:
        if op.stream:
            got = [i for t, table in Replayer(open_log(log), op.stream).completed()
                   for i in table.column("id").to_pylist()]
            streams[f"{op.id}-{op.name}"] = sorted(got)
    print(json.dumps({"hosts": hosts, "ids": ids == list(range(%(n)d)), "streams": streams,
                      "marks": sorted(os.listdir(marks))}))
    spark.stop()
""") % {"n": N}


@pytest.fixture(scope="module")
def two_host_cluster():
    cluster = _spark_cluster.start_cluster(distinct_hosts=True)
    try:
        yield cluster
    finally:
        cluster.stop()


def test_a_speculative_copy_of_a_task_captures_each_row_once(two_host_cluster, tmp_path):
    # no local session here (no ``spark``/``jvm`` fixture): this module runs in the cluster group's process, where
    # the cluster's session stops any local SparkContext, which later local-mode tests of that process would share
    log, marks = str(tmp_path / "log"), str(tmp_path / "marks")
    os.mkdir(marks)
    env = dict(os.environ, PYTHONPATH=ROOT, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run(
        [sys.executable, "-c", APP, two_host_cluster.master_url, log, marks],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"127.0.0.2", "127.0.0.3"} <= set(out["hosts"])  # Spark sees the workers as two hosts
    assert out["ids"]
    # the speculative copy of partition 0 ran to its end; the original stalled (and was killed) before its end
    assert "p0-a1-end" in out["marks"] and "p0-a0-start" in out["marks"] and "p0-a0-end" not in out["marks"]
    assert len(out["streams"]) >= 3
    for name, ids in out["streams"].items():
        assert ids == list(range(N)), name  # every row of every captured operator once
