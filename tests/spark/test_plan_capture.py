"""Capture by configuration (``eventlog.spark.CaptureExtension``, ``connectors/spark/plan_capture.py``): a
query's physical operators captured without a change to its code, with and without AQE; the plan document and
``replay plan``; the captured streams read as any stream; exactly once when tasks fail and are retried and when
two attempts of a partition race (as a speculative copy does: Spark never runs one on the original's host, so a
one-machine test races two jobs over the same plan instead); a session started with ``spark.jars`` and
``spark.sql.extensions`` as users start it."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from click.testing import CliRunner

from connectors.spark.plan_capture import EXTENSION, capture_conf, capture_session, plan_names, read_plan
from eventlog import open_log
from replay import Replayer
from replay.cli import main

pytestmark = pytest.mark.spark

N = 6000


@pytest.fixture(scope="module")
def cap(spark, jvm):
    """A session on the shared SparkContext with the capture extension (the settings are set per test)."""
    return capture_session(spark, "/nonexistent-set-per-test", operators="all")


def use(cap, log: str, operators: str = "all", *, aqe: bool = True, query: str | None = None) -> None:
    cap.conf.set("spark.eventlog.capture.dir", log)
    cap.conf.set("spark.eventlog.capture.operators", operators)
    cap.conf.set("spark.sql.adaptive.enabled", str(aqe).lower())
    cap.conf.set("spark.sql.autoBroadcastJoinThreshold", "10485760")
    if query is None:
        cap.conf.unset("spark.eventlog.capture.query")
    else:
        cap.conf.set("spark.eventlog.capture.query", query)


def tpch_like(cap, n: int = N, cutoff: int = 10**9):
    """Orders joined to a small customer table, aggregated per segment and sorted: a join, an aggregation, a
    sort (``cutoff`` filters orders, to make a run differ)."""
    orders = cap.range(0, n, 1, 3).selectExpr("id as o_id", "id % 50 as o_cust", "(id * 7) % 1000 as o_price") \
        .where(f"o_id < {cutoff}")
    customers = cap.range(0, 50, 1, 2).selectExpr("id as c_id", "concat('seg', cast(id % 5 as string)) as c_seg")
    return orders.join(customers, orders.o_cust == customers.c_id) \
        .groupBy("c_seg").agg({"o_price": "sum", "o_id": "count"}).orderBy("c_seg")


def expected_result(n: int = N) -> list[tuple]:
    sums: dict = collections.defaultdict(lambda: [0, 0])
    for i in range(n):
        seg = f"seg{(i % 50) % 5}"
        sums[seg][0] += (i * 7) % 1000
        sums[seg][1] += 1
    return [(seg, s, c) for seg, (s, c) in sorted(sums.items())]


def stream_rows(log: str, stream: str) -> list[dict]:
    """Every record of ``stream`` (replayed, committed) with its time."""
    return [{"_time": t, **r} for t, table in Replayer(open_log(log), stream).completed() for r in table.to_pylist()]


def test_every_operator_of_an_adaptive_query_is_captured_once(cap, tmp_path):
    log = str(tmp_path / "log")
    use(cap, log, "all")
    rows = [tuple(r) for r in tpch_like(cap).collect()]
    assert rows == expected_result()
    plan = read_plan(log)
    assert plan.query == "q1" or plan.query.startswith("q")
    names = [op.name for op in plan.operators]
    for op_name in ("Range", "BroadcastHashJoin", "HashAggregate", "Sort", "AQEShuffleRead", "Exchange"):
        assert op_name in names, names
    by_name = collections.defaultdict(list)
    for op in plan.operators:
        by_name[op.name].append(op)
        for c in op.children:
            assert c < op.id  # plan order: an operator's inputs come before it
    # every captured stream is complete, and holds exactly the rows the operator produced
    captured = [op for op in plan.operators if op.stream]
    assert len(captured) >= 8
    for op in captured:
        assert op.summary is not None and not op.summary.frontier, (op.name, op.summary)
        assert op.summary.finished_parts == op.summary.parts
    ranges = sorted(by_name["Range"], key=lambda o: o.summary.rows)
    assert [o.summary.rows for o in ranges] == [50, N]
    big = stream_rows(log, ranges[1].stream)
    assert sorted(r["id"] for r in big) == list(range(N)) and {r["_time"] for r in big} == {0}
    (sort,) = by_name["Sort"]
    assert sort.stream is not None and plan.roots == (sort.id,)
    assert [(r["c_seg"], r["sum(o_price)"], r["count(o_id)"]) for r in stream_rows(log, sort.stream)] \
        == expected_result()
    (join,) = by_name["BroadcastHashJoin"]
    assert join.summary.rows == N and join.stage is not None
    # the exchanges' outputs are captured where they are read, the broadcast's input below it
    assert all(op.stream is None and op.note for op in by_name["Exchange"] + by_name["BroadcastExchange"])
    assert not os.path.exists(os.path.join(log, ".staging"))
    # the plan document is canonical JSON of the documented form
    doc = json.loads(open(os.path.join(log, "_plans", plan.query + ".json")).read())
    assert doc["format"] == "eventlog-plan" and doc["version"] == 1 and doc["unused_streams"] == []
    assert [o["id"] for o in doc["operators"]] == sorted(o["id"] for o in doc["operators"])


def test_aqe_replanning_a_join_captures_each_row_once(cap, tmp_path):
    """Planned as a sort-merge join (both sides too large to broadcast by their estimates), re-planned by AQE
    as a broadcast join once the filtered side's shuffle turned out small: the operators of the plan Spark ran
    are captured, each row once; the sort-merge join AQE planned away never ran and has no stream."""
    log = str(tmp_path / "log")
    use(cap, log, "all")
    cap.conf.set("spark.sql.autoBroadcastJoinThreshold", "20000")
    big = cap.range(0, 20000, 1, 4).selectExpr("id", "id % 100 as k", "repeat('x', 20) as pad")
    small = cap.range(0, 20000, 1, 4).selectExpr("id as sid", "id % 100 as sk").where("sid < 30")
    joined = big.join(small, big.k == small.sk)
    initial = joined._jdf.queryExecution().executedPlan().toString()
    assert "SortMergeJoin" in initial, initial
    assert joined.count() == 30 * 200
    plan = read_plan(log)
    names = [op.name for op in plan.operators]
    assert "BroadcastHashJoin" in names and "SortMergeJoin" not in names, names
    for op in plan.operators:
        if op.stream:
            assert op.summary is not None and not op.summary.frontier, op
    ranges = sorted((op for op in plan.operators if op.name == "Range"), key=lambda o: o.id)
    assert [op.summary.rows for op in ranges] == [20000, 20000]
    for op in ranges:
        assert sorted(r["id"] for r in stream_rows(log, op.stream)) == list(range(20000))
    bhj = next(op for op in plan.operators if op.name == "BroadcastHashJoin")
    assert bhj.summary.rows == 30 * 200 and plan.unused_streams == ()


def test_a_second_action_on_the_same_dataframe_captures_nothing_twice(cap, tmp_path):
    log = str(tmp_path / "log")
    use(cap, log, "all")
    df = tpch_like(cap)
    df.collect()
    first = {op.stream: op.summary.rows for op in read_plan(log).operators if op.stream}
    assert df.collect() == df.collect()
    assert plan_names(log) == [read_plan(log).query]  # the same execution plan: no new query
    assert {op.stream: op.summary.rows for op in read_plan(log).operators if op.stream} == first


def test_exchanges_only_without_aqe_and_a_query_name(cap, tmp_path):
    log = str(tmp_path / "log")
    use(cap, log, "exchanges", aqe=False, query="daily sums")
    assert [tuple(r) for r in tpch_like(cap).collect()] == expected_result()
    plan = read_plan(log, "daily_sums")
    captured = {op.name for op in plan.operators if op.stream}
    # without AQE the shuffles themselves are wrapped; the broadcast's input is captured below it
    assert captured == {"Exchange", "Project"}, [(o.name, o.stream) for o in plan.operators]
    assert all(op.stream.startswith("daily_sums.") for op in plan.operators if op.stream)
    assert all(op.stage is None for op in plan.operators)
    shuffles = [op for op in plan.operators if op.name == "Exchange"]
    assert len(shuffles) == 2 and all(op.summary.parts == 4 for op in shuffles)  # spark.sql.shuffle.partitions
    # a second query with the same name gets the next free one
    tpch_like(cap).count()
    assert set(plan_names(log)) == {"daily_sums", "daily_sums-2"}


def test_operators_chosen_by_name_type_and_id(cap, tmp_path):
    log = str(tmp_path / "log")
    use(cap, log, "HashAggregate, SortExec")
    tpch_like(cap).collect()
    plan = read_plan(log)
    assert {op.name for op in plan.operators if op.stream} == {"HashAggregate", "Sort"}
    join_id = next(op.id for op in plan.operators if op.name == "BroadcastHashJoin")
    log2 = str(tmp_path / "log2")
    use(cap, log2, str(join_id))
    tpch_like(cap).collect()
    again = read_plan(log2)
    assert [op.name for op in again.operators if op.stream] == ["BroadcastHashJoin"]
    assert again.operator(join_id).summary.rows == N


def test_explain_and_disabled_capture_write_nothing(cap, tmp_path):
    log = str(tmp_path / "log")
    use(cap, log, "all", aqe=False)
    df = tpch_like(cap)
    df.explain()  # planned outside a SQL execution: nothing runs, nothing is captured
    assert plan_names(log) == []
    cap.conf.set("spark.eventlog.capture.enabled", "false")
    try:
        assert [tuple(r) for r in tpch_like(cap).collect()] == expected_result()
    finally:
        cap.conf.set("spark.eventlog.capture.enabled", "true")
    assert not os.path.exists(log) or open_log(log).streams() == []


def test_captured_streams_read_by_the_data_source_replay_cat_and_replay_plan(cap, spark, tmp_path):
    log = str(tmp_path / "log")
    use(cap, log, "all")
    cap.range(0, 100, 1, 2).selectExpr("id", "id % 3 as `é k`").groupBy("`é k`").count().collect()
    plan = read_plan(log)
    agg = [op for op in plan.operators if op.name == "HashAggregate"][-1]
    df = spark.read.format("eventlog").load(f"{log}/{agg.stream}")
    assert sorted((r["é k"], r["count"]) for r in df.collect()) == [(0, 34), (1, 33), (2, 33)]
    runner = CliRunner()
    out = runner.invoke(main, ["cat", log, agg.stream])
    assert out.exit_code == 0, out.output
    assert len([line for line in out.output.splitlines() if '"record"' in line]) == 3
    shown = runner.invoke(main, ["plan", log])
    assert shown.exit_code == 0, shown.output
    assert agg.stream in shown.output and "complete" in shown.output
    as_json = runner.invoke(main, ["plan", log, plan.query, "--json"])
    assert as_json.exit_code == 0, as_json.output
    doc = json.loads(as_json.output)
    got = {o["stream"]: o["rows"] for o in doc["operators"] if o["stream"]}
    assert got[agg.stream] == 3 and all(o["frontier"] == [] for o in doc["operators"] if o["stream"])
    missing = runner.invoke(main, ["plan", log, "nope"])
    assert missing.exit_code == 3 and "no captured plan of query 'nope'" in missing.output


def test_plan_diff_finds_the_first_diverging_operator(cap, tmp_path):
    a, b, c = (str(tmp_path / x) for x in "abc")
    for log, cutoff in ((a, 10**9), (b, 10**9), (c, 5000)):
        use(cap, log, "all")
        tpch_like(cap, cutoff=cutoff).collect()
    runner = CliRunner()
    same = runner.invoke(main, ["plan", a, "--diff", b])
    assert same.exit_code == 0, same.output
    assert "equal" in same.output
    other = runner.invoke(main, ["plan", a, "--diff", c])
    assert other.exit_code == 1, other.output
    plan = read_plan(a)
    # the orders' Range is equal in both runs; the Filter after it is the first operator whose output differs
    filt = next(op for op in plan.operators if op.name == "Filter" and op.summary.rows == N)
    assert f"first diverging operator: {filt.id} Filter" in other.output, other.output
    assert "records differ" in other.output


def test_a_failed_task_attempt_is_retried_and_each_row_captured_once(cap, tmp_path):
    """The first attempt of partition 0 fails after the operators below a sort published their part (the sort
    read its whole input); the retry recomputes them: their parts, published once, are not written again."""
    log, marks = str(tmp_path / "log"), str(tmp_path / "marks")
    os.mkdir(marks)
    use(cap, log, "all")

    def fail_first(batches):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        open(os.path.join(marks, f"p{ctx.partitionId()}-a{ctx.attemptNumber()}"), "w").close()
        for b in batches:
            yield b
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
            raise RuntimeError("injected failure after the partition's rows went through")

    df = cap.range(0, N, 1, 3).selectExpr("id", "id % 10 as k").sortWithinPartitions("k")
    out = df.mapInArrow(fail_first, df.schema).collect()
    assert sorted(r["id"] for r in out) == list(range(N))
    assert "p0-a1" in os.listdir(marks)  # the task ran again
    plan = read_plan(log)
    for op in plan.operators:
        if op.stream:
            rows = stream_rows(log, op.stream)
            assert len(rows) == N and len({r["id"] for r in rows}) == N, op.name
    assert not os.path.exists(os.path.join(log, ".staging"))


def test_failed_query_leaves_unfinished_parts_and_no_staging(cap, tmp_path):
    log = str(tmp_path / "log")
    use(cap, log, "all", aqe=False)
    df = cap.range(0, 100, 1, 2).selectExpr("id", "raise_error('boom') as x").where("id < 0 or x is null")
    with pytest.raises(Exception, match="boom"):
        df.collect()
    plan = read_plan(log)
    ran = [op for op in plan.operators if op.summary is not None]
    assert ran and all(op.summary.frontier for op in ran)  # nothing published: every part unfinished
    staging = os.path.join(log, ".staging")
    deadline = time.monotonic() + 60  # the job fails while Spark still cancels its other task: its attempt ends after
    while os.path.exists(staging) and any(files for _, _, files in os.walk(staging)) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = sorted(f"{os.path.relpath(os.path.join(d, f), staging)} ({os.path.getsize(os.path.join(d, f))} B)"
                  for d, _, files in os.walk(staging) for f in files) if os.path.exists(staging) else []
    assert left == [], f"files left under .staging 60 s after the job failed: {left}"


def test_the_settings_printed_for_spark_submit(tmp_path, capsys):
    from connectors.spark.plan_capture import main as print_conf

    assert print_conf([str(tmp_path / "cap"), "--operators", "all", "--query", "nightly run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    conf = dict(line.split(" ", 1)[1].strip("'").split("=", 1) for line in lines)
    assert all(line.startswith("--conf ") for line in lines)
    assert conf["spark.sql.extensions"] == EXTENSION and os.path.isfile(conf["spark.jars"])
    assert conf["spark.eventlog.capture.dir"] == str(tmp_path / "cap")
    assert conf["spark.eventlog.capture.operators"] == "all"
    assert conf["spark.eventlog.capture.query"] == "nightly run"


def test_concurrent_attempts_of_a_partition_publish_it_once(cap, tmp_path):
    """Two jobs compute the same captured partitions at the same time (what a speculative copy of a task does:
    two attempts of one partition racing): the first attempt that reads its whole partition publishes it, the
    other keeps nothing."""
    import threading

    log = str(tmp_path / "log")
    use(cap, log, "all", aqe=False)

    def slow(batches):
        import time as _time

        for b in batches:
            _time.sleep(0.5)
            yield b

    base = cap.range(0, N, 1, 4).selectExpr("id", "id % 10 as k")
    df = base.mapInArrow(slow, base.schema)
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(df._jdf.collectAsList().size())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert results == [N, N]
    plan = read_plan(log)
    assert plan_names(log) == [plan.query]  # one execution plan, computed twice
    for op in plan.operators:
        if op.stream:
            rows = stream_rows(log, op.stream)
            assert sorted(r["id"] for r in rows) == list(range(N)), op.name
    assert not os.path.exists(os.path.join(log, ".staging")) or not os.listdir(os.path.join(log, ".staging"))


STARTUP_JOB = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    from connectors.spark.plan_capture import capture_conf
    log = sys.argv[1]
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false") \
        .config("spark.sql.shuffle.partitions", "3")
    for k, v in capture_conf(log, operators="exchanges", query="nightly").items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    orders = spark.range(0, 5000, 1, 3).selectExpr("id", "id % 40 as cust")
    custs = spark.range(0, 40).selectExpr("id as c", "id % 4 as seg")
    out = orders.join(custs.hint("shuffle_merge"), orders.cust == custs.c).groupBy("seg").count().orderBy("seg")
    print(sum(r["count"] for r in out.collect()))
    spark.stop()
""")


def test_the_extension_set_at_startup_captures_a_query(tmp_path):
    """A session started as users start it: ``capture_conf``'s ``spark.jars``, ``spark.sql.extensions`` and
    ``spark.eventlog.capture.*`` settings, and a query that knows nothing of the capture."""
    log = str(tmp_path / "log")
    conf = capture_conf(log)
    assert conf["spark.sql.extensions"] == EXTENSION and os.path.isfile(conf["spark.jars"])
    script = tmp_path / "job.py"
    script.write_text(STARTUP_JOB)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root, PYSPARK_PYTHON=sys.executable)
    done = subprocess.run([sys.executable, str(script), log], capture_output=True, text=True, env=env,
                          timeout=600, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "5000"
    plan = read_plan(log, "nightly")
    captured = [op for op in plan.operators if op.stream]
    assert {op.name for op in captured} == {"AQEShuffleRead"}, [(o.name, o.stream) for o in plan.operators]
    assert all(op.summary is not None and not op.summary.frontier for op in captured)
    assert sum(op.summary.rows for op in captured) > 5000  # the orders' and the customers' shuffles at least
