"""The capture tap and the ``eventlog`` data source (batch and Structured Streaming) on a Spark standalone
cluster (a master and two workers, separate executor JVMs; ``tests/support/spark_cluster.py``), including an executor JVM
SIGKILLed mid-job: what the logs hold equals the failure-free run. Each runs twice: with the logs in a folder
on the disk every process shares, and with every location an ``s3://`` URI on the session's S3 server
(the ``s3_server`` fixture), which the executors reach through their own client settings, sharing no disk."""

from __future__ import annotations

import os
import threading
import time

import pyarrow as pa
import pytest

from capture import Capture, tap
from eventlog import open_log
from replay import Replayer
from tests.spark.conftest import by_time, object_keys

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark-cluster")]  # one xdist worker (tests/conftest.py)

COLS = ["id", "word", "t"]


def words(spark, n: int, partitions: int):
    return spark.range(0, n, 1, partitions).selectExpr(
        "id", "concat('w', cast(id % 7 as string)) as word", "id % 4 as t")


def expected_words(n: int) -> dict:
    return by_time([{"id": i, "word": f"w{i % 7}", "t": i % 4} for i in range(n)], "t", COLS)


def slow_marked(marks: str, delay: float):
    """A mapInArrow function that leaves a file ``p<partition>-s<stage>-a<attempt>`` in ``marks`` when its task
    starts, then passes every batch on after ``delay`` seconds."""

    def fn(batches):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        open(os.path.join(marks, f"p{ctx.partitionId()}-s{ctx.stageId()}-a{ctx.attemptNumber()}"), "w").close()
        for b in batches:
            time.sleep(delay)
            yield b

    return fn


def kill_when_running(cluster, session, marks: str, tasks: int, killed: list[str]) -> threading.Thread:
    """A thread that SIGKILLs the session's executor on worker 1 once ``tasks`` task marks exist."""

    def run() -> None:
        deadline = time.monotonic() + 120
        while len(os.listdir(marks)) < tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        killed.append(cluster.kill_executor(session.sparkContext.applicationId, worker=1))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def tap_while_killing(cluster, session, marks: str, tapper) -> dict:
    """``tapper(df)`` (a tapped DataFrame) collected while the executor JVM on worker 1 is SIGKILLed: 8 slow
    partitions of 4,000 rows, the kill once 4 tasks have started (their marks below ``marks``: a new local folder,
    or an ``s3://`` URI). Checks that the kill happened and that Spark ran tasks again; returns the collected rows
    by time."""
    on_s3 = marks.startswith("s3://")
    if not on_s3:
        os.mkdir(marks)
    df = words(session, 4000, 8)
    df = df.mapInArrow((slow_marked_s3 if on_s3 else slow_marked)(marks, 2.0), df.schema)
    killed: list[str] = []
    t = (kill_when_running_s3 if on_s3 else kill_when_running)(cluster, session, marks, 4, killed)
    collected = by_time(tapper(df).collect(), "t", COLS)
    t.join(10)
    assert killed and "killed executor JVM" in killed[0]
    left = object_keys(marks) if on_s3 else sorted(os.listdir(marks))
    assert any(not m.endswith("-a0") for m in left), left   # tasks ran again
    return collected


def test_tap_and_batch_read_on_the_cluster(cluster_spark, tmp_path):
    log_dir = str(tmp_path / "log")
    tapped = tap(words(cluster_spark, 2000, 6), log_dir, "words", time="t", engine="python")
    assert by_time(tapped.collect(), "t", COLS) == expected_words(2000)
    assert open_log(log_dir).header("words").peers == 6
    replayed = cluster_spark.read.format("eventlog").option("workers", 3).load(f"{log_dir}/words")
    assert replayed.rdd.getNumPartitions() == 3
    assert by_time(replayed.collect(), "_time", COLS) == expected_words(2000)
    # a batch write of the replay (3 partitions) into a new stream, read back here with a replayer
    replayed.drop("_time", "_part", "_seq").write.format("eventlog").option("time", "t").mode("append") \
        .save(f"{log_dir}/copy")
    copied = [{"_time": t, **row} for t, table in Replayer(open_log(log_dir), "copy").completed()
              for row in table.to_pylist()]
    assert open_log(log_dir).header("copy").peers == 3
    assert by_time(copied, "_time", COLS) == expected_words(2000)


def test_tap_survives_sigkill_of_an_executor_jvm(cluster_spark, spark_cluster, tmp_path):
    """8 tapped partitions run at once on the two executors; once 4 have started, the executor JVM on worker 1
    is SIGKILLed. Spark runs its tasks again; the log holds each row once, as a failure-free run would."""
    log_dir = str(tmp_path / "log")
    collected = tap_while_killing(spark_cluster, cluster_spark, str(tmp_path / "marks"),
                                  lambda df: tap(df, log_dir, "words", time="t", engine="python"))
    assert collected == expected_words(4000)
    replayed = cluster_spark.read.format("eventlog").option("workers", 3).load(f"{log_dir}/words")
    assert by_time(replayed.collect(), "_time", COLS) == expected_words(4000)
    assert replayed.select("id").distinct().count() == 4000
    assert not os.path.exists(os.path.join(log_dir, ".staging"))


def test_jvm_tap_and_jvm_read_on_the_cluster(cluster_spark, spark_cluster, tmp_path):
    """The JVM tap and reader run in the cluster's executor JVMs (the jar reaches them with their tasks): the
    tapped job's result is unchanged, the Python replayer reads what the executors wrote, the JVM reader gives
    the Python reader's rows; an executor JVM SIGKILLed mid-tap leaves each row once (one attempt per part
    published) and no staging behind."""
    from connectors.spark.jvm import available, jvm_tap
    from connectors.spark.jvm.read import read_log

    why = available(cluster_spark)
    assert why is None, why   # a JDK is part of this project's test machine: the tap must build and load
    log_dir = str(tmp_path / "log")
    tapped = jvm_tap(words(cluster_spark, 3000, 6), log_dir, "words", time="t")
    assert by_time(tapped.collect(), "t", COLS) == expected_words(3000)
    assert open_log(log_dir).header("words").peers == 6
    replayed = [{"t": t, **row} for t, table in Replayer(open_log(log_dir), "words").completed()
                for row in table.to_pylist()]
    assert by_time(replayed, "t", COLS) == expected_words(3000)
    jvm_rows = read_log(cluster_spark, f"{log_dir}/words", engine="jvm", workers=3)
    assert jvm_rows.rdd.getNumPartitions() == 3
    py_rows = read_log(cluster_spark, f"{log_dir}/words", engine="python", workers=3)
    assert sorted(map(tuple, jvm_rows.collect())) == sorted(map(tuple, py_rows.collect()))

    collected = tap_while_killing(spark_cluster, cluster_spark, str(tmp_path / "marks"),
                                  lambda df: jvm_tap(df, log_dir, "killed", time="t"))
    assert collected == expected_words(4000)
    again = [{"t": t, **row} for t, table in Replayer(open_log(log_dir), "killed").completed()
             for row in table.to_pylist()]
    assert by_time(again, "t", COLS) == expected_words(4000)
    assert not os.path.exists(os.path.join(log_dir, ".staging"))


def test_jvm_micro_batches_on_the_cluster_survive_sigkill_of_an_executor_jvm(cluster_spark, spark_cluster, tmp_path):
    """``tap_batches(engine="jvm")`` on the cluster: the executors stage each micro-batch's partitions in their
    JVMs and the driver appends what Spark kept; a batch staged while an executor JVM is SIGKILLed holds each
    row once, the frontier moves past it, and no staging is left."""
    from capture import tap_batches

    log_dir = str(tmp_path / "log")
    run = tap_batches(log_dir, "mb", time="t", peers=4, engine="jvm")
    run(words(cluster_spark, 3000, 6), 0)  # times 0..3
    marks = str(tmp_path / "marks")
    os.mkdir(marks)
    later = words(cluster_spark, 4000, 8).selectExpr("id + 10000 as id", "word", "t + 4 as t")  # times 4..7
    later = later.mapInArrow(slow_marked(marks, 2.0), later.schema)
    killed: list[str] = []
    t = kill_when_running(spark_cluster, cluster_spark, marks, 4, killed)
    run(later, 1)
    t.join(10)
    assert killed and "killed executor JVM" in killed[0]
    assert any(not m.endswith("-a0") for m in os.listdir(marks)), sorted(os.listdir(marks))  # tasks ran again
    log = open_log(log_dir)
    assert log.header("mb").peers == 4
    got = sorted((t, row["id"], row["word"]) for t, table in Replayer(log, "mb").completed()
                 for row in table.to_pylist())
    want = sorted([(i % 4, i, f"w{i % 7}") for i in range(3000)]
                  + [(i % 4 + 4, i + 10000, f"w{i % 7}") for i in range(4000)])
    assert got == want
    assert not os.path.exists(os.path.join(log_dir, ".staging"))


SCHEMA = pa.schema([("n", pa.int64())])
PEERS, TIMES, PER_TIME = 3, 8, 50


def write_input(log_dir: str) -> list[tuple[int, int]]:
    """Three parts of ``PER_TIME`` records at each of ``TIMES`` times, every part finished; returns ``(time, n)``."""
    log = open_log(log_dir)
    rows = []
    for p in range(PEERS):
        with Capture(log, "live", p, PEERS, schema=SCHEMA) as cap:
            for t in range(TIMES):
                ns = [10_000 * t + 100 * p + i for i in range(PER_TIME)]
                cap.send(t, [{"n": n} for n in ns])
                cap.advance_to(t + 1)
                rows += [(t, n) for n in ns]
    return sorted(rows)


def test_structured_streaming_read_and_write_survive_sigkill_of_an_executor_jvm(cluster_spark, spark_cluster,
                                                                                 tmp_path):
    """A streaming query reads a log through the ``eventlog`` source (two micro-batches) and writes it with
    the ``eventlog`` sink; the executor JVM on worker 1 is SIGKILLed once 4 of the first micro-batch's 8 tasks run.
    The output holds every input record once, at its input time."""
    src, out, marks = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "marks")
    os.mkdir(marks)
    rows = write_input(src)
    stream = (cluster_spark.readStream.format("eventlog").option("workers", 8)       # a task per slot: both executors
              .option("mode", "repartition").option("key", "n")
              .option("maxRecordsPerTrigger", TIMES // 2 * PEERS * PER_TIME).load(f"{src}/live")
              .selectExpr("n", "_time as src_time"))
    stream = stream.mapInArrow(slow_marked(marks, 0.15), stream.schema)
    killed: list[str] = []
    t = kill_when_running(spark_cluster, cluster_spark, marks, 4, killed)
    q = (stream.writeStream.format("eventlog").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start(f"{out}/copy"))
    q.awaitTermination(180)
    t.join(10)
    assert killed and "killed executor JVM" in killed[0]
    assert q.exception() is None and len(q.recentProgress) >= 2     # 2 micro-batches of 4 times each
    back = cluster_spark.read.format("eventlog").load(f"{out}/copy").collect()
    assert sorted((r["src_time"], r["n"]) for r in back) == rows
    assert len({r["_time"] for r in back}) >= 2                     # the sink's time is the batch id
    assert any(not m.endswith("-a0") for m in os.listdir(marks)), sorted(os.listdir(marks))   # tasks ran again


# -- the same on object storage: every location an s3:// URI (the session's S3 server, ``s3_server``) ---------
#
# The executors reach the server with the client settings the session gives them (spark.executorEnv.AWS_*); the
# logs, their staging and the tasks' start marks are objects, so nothing depends on a disk the driver and the
# executors share. (Spark's own checkpoint of the streaming query stays on the driver's disk: it is Spark's, and
# only the driver reads and writes it for a stateless query; on S3 it needs Hadoop's s3a connector.)


def slow_marked_s3(marks: str, delay: float):
    """``slow_marked`` with its marks as objects below ``marks`` (an ``s3://`` URI)."""

    def fn(batches):
        import pyarrow.fs as pafs
        from pyspark import TaskContext

        ctx = TaskContext.get()
        fs, path = pafs.FileSystem.from_uri(marks)
        with fs.open_output_stream(f"{path}/p{ctx.partitionId()}-s{ctx.stageId()}-a{ctx.attemptNumber()}"):
            pass
        for b in batches:
            time.sleep(delay)
            yield b

    return fn


def kill_when_running_s3(cluster, session, marks: str, tasks: int, killed: list[str]) -> threading.Thread:
    """``kill_when_running`` with the marks below ``marks`` (an ``s3://`` URI)."""

    def run() -> None:
        deadline = time.monotonic() + 120
        while len(object_keys(marks)) < tasks and time.monotonic() < deadline:
            time.sleep(0.05)
        killed.append(cluster.kill_executor(session.sparkContext.applicationId, worker=1))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def no_staging_left(log_uri: str) -> list[str]:
    """The objects below the log's staging folder."""
    return [k for k in object_keys(log_uri) if k.startswith(".staging")]


def test_tap_batch_read_and_write_on_s3_on_the_cluster(cluster_spark, s3_bucket, s3_server):
    log = f"{s3_bucket}/log?endpoint_override=127.0.0.1:{s3_server.port}&scheme=http"   # the endpoint in the URI
    tapped = tap(words(cluster_spark, 2000, 6), log, "words", time="t", engine="python")
    assert by_time(tapped.collect(), "t", COLS) == expected_words(2000)
    assert open_log(log).header("words").peers == 6
    replayed = cluster_spark.read.format("eventlog").option("workers", 3).load(
        f"{s3_bucket}/log/words?endpoint_override=127.0.0.1:{s3_server.port}&scheme=http")
    assert replayed.rdd.getNumPartitions() == 3
    assert by_time(replayed.collect(), "_time", COLS) == expected_words(2000)
    replayed.drop("_time", "_part", "_seq").write.format("eventlog").option("time", "t").mode("append") \
        .save(f"{s3_bucket}/log/copy")
    copied = [{"_time": t, **row} for t, table in Replayer(open_log(f"{s3_bucket}/log"), "copy").completed()
              for row in table.to_pylist()]
    assert open_log(f"{s3_bucket}/log").header("copy").peers == 3
    assert by_time(copied, "_time", COLS) == expected_words(2000)
    assert object_keys(f"{s3_bucket}/log/words") == sorted(
        [f"part={p}/00000000000000000001.arrow" for p in range(6)] + [f"part={p}/_00000000000000000001.index"
                                                                      for p in range(6)] + ["_header.json"])
    assert no_staging_left(f"{s3_bucket}/log") == []


def test_tap_on_s3_survives_sigkill_of_an_executor_jvm(cluster_spark, spark_cluster, s3_bucket):
    """As ``test_tap_survives_sigkill_of_an_executor_jvm``, with the log (and the marks) on S3: each row once."""
    log, marks = f"{s3_bucket}/log", f"{s3_bucket}/marks"
    collected = tap_while_killing(spark_cluster, cluster_spark, marks, lambda df: tap(df, log, "words", time="t", engine="python"))
    assert collected == expected_words(4000)
    replayed = cluster_spark.read.format("eventlog").option("workers", 3).load(f"{log}/words")
    assert by_time(replayed.collect(), "_time", COLS) == expected_words(4000)
    assert replayed.select("id").distinct().count() == 4000
    assert open_log(log).streams() == ["words"]
    # attempts on the killed executor left their staging (their Python workers exited without discarding it):
    # the attempt that published the last partition removed it
    assert no_staging_left(log) == []


def test_structured_streaming_on_s3_survives_sigkill_of_an_executor_jvm(cluster_spark, spark_cluster, s3_bucket,
                                                                         tmp_path):
    """As ``test_structured_streaming_read_and_write_survive_sigkill_of_an_executor_jvm``, with the source log,
    the sink's log and the marks on S3: the output holds every input record once, at its input time."""
    src, out, marks = f"{s3_bucket}/in", f"{s3_bucket}/out", f"{s3_bucket}/marks"
    rows = write_input(src)
    stream = (cluster_spark.readStream.format("eventlog").option("workers", 8)
              .option("mode", "repartition").option("key", "n")
              .option("maxRecordsPerTrigger", TIMES // 2 * PEERS * PER_TIME).load(f"{src}/live")
              .selectExpr("n", "_time as src_time"))
    stream = stream.mapInArrow(slow_marked_s3(marks, 0.15), stream.schema)
    killed: list[str] = []
    t = kill_when_running_s3(spark_cluster, cluster_spark, marks, 4, killed)
    q = (stream.writeStream.format("eventlog").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start(f"{out}/copy"))
    q.awaitTermination(180)
    t.join(10)
    assert killed and "killed executor JVM" in killed[0]
    assert q.exception() is None and len(q.recentProgress) >= 2
    back = cluster_spark.read.format("eventlog").load(f"{out}/copy").collect()
    assert sorted((r["src_time"], r["n"]) for r in back) == rows
    assert len({r["_time"] for r in back}) >= 2
    assert any(not m.endswith("-a0") for m in object_keys(marks)), object_keys(marks)
    assert no_staging_left(out) == []


def test_jvm_tap_and_micro_batches_on_s3_survive_sigkill_of_an_executor_jvm(cluster_spark, spark_cluster, s3_bucket):
    """The JVM tap with the log on S3, on the cluster: the executor JVMs stage on their own disks and publish with
    conditional puts; an executor JVM SIGKILLed mid-tap leaves each row once (one attempt per part published,
    each part's objects exactly the segment and its index), which the JVM reader reads back in the executors;
    micro-batches staged in the JVMs on S3 likewise."""
    from capture import tap_batches
    from connectors.spark.jvm import available, jvm_tap
    from connectors.spark.jvm.read import read_log

    why = available(cluster_spark)
    assert why is None, why
    log, marks = f"{s3_bucket}/jvm", f"{s3_bucket}/marks"
    collected = tap_while_killing(spark_cluster, cluster_spark, marks, lambda df: jvm_tap(df, log, "words", time="t"))
    assert collected == expected_words(4000)
    replayed = [{"t": t, **row} for t, table in Replayer(open_log(log), "words").completed()
                for row in table.to_pylist()]
    assert by_time(replayed, "t", COLS) == expected_words(4000)
    assert object_keys(f"{log}/words") == sorted(
        [f"part={p}/00000000000000000001.arrow" for p in range(8)] + [f"part={p}/_00000000000000000001.index"
                                                                      for p in range(8)] + ["_header.json"])
    jvm_rows = read_log(cluster_spark, f"{log}/words", engine="jvm", workers=3)   # read back in the executor JVMs
    assert jvm_rows.rdd.getNumPartitions() == 3
    assert by_time(jvm_rows.drop("_part", "_seq").collect(), "_time", COLS) == expected_words(4000)

    run = tap_batches(log, "mb", time="t", peers=4, engine="jvm")
    run(words(cluster_spark, 3000, 6), 0)
    marks2 = f"{s3_bucket}/marks2"
    later = words(cluster_spark, 4000, 8).selectExpr("id + 10000 as id", "word", "t + 4 as t")
    later = later.mapInArrow(slow_marked_s3(marks2, 2.0), later.schema)
    killed = []
    t = kill_when_running_s3(spark_cluster, cluster_spark, marks2, 4, killed)
    run(later, 1)
    t.join(10)
    assert killed and "killed executor JVM" in killed[0]
    got = sorted((t, row["id"], row["word"]) for t, table in Replayer(open_log(log), "mb").completed()
                 for row in table.to_pylist())
    assert got == sorted([(i % 4, i, f"w{i % 7}") for i in range(3000)]
                         + [(i % 4 + 4, i + 10000, f"w{i % 7}") for i in range(4000)])
    assert no_staging_left(log) == []


def test_capture_by_configuration_survives_sigkill_of_an_executor_jvm(cluster_spark, spark_cluster, tmp_path):
    """Every operator of an adaptive query (a slow Python stage, a broadcast join, an aggregation, a sort)
    captured by configuration (``eventlog.spark.CaptureExtension``) into a shared-disk log, once without a
    failure and once while the executor JVM on worker 1 is SIGKILLed mid-query: Spark runs the lost tasks (and
    the lost shuffle outputs' stages) again, and ``replay plan --diff``'s rule finds no operator whose output
    differs between the two runs — no captured row is lost or doubled."""
    from pyspark.sql import functions as F

    from connectors.spark.plan_capture import capture_session, read_plan
    from replay.cli.plan import first_divergence

    def query(session, marks: str, delay: float):
        df = words(session, 4000, 8)
        df = df.mapInArrow(slow_marked(marks, delay), df.schema)
        names = session.range(0, 7).selectExpr("concat('w', cast(id as string)) as word", "id as w")
        return df.join(names, "word").groupBy("t").agg(F.expr("sum(id)"), F.expr("count(w)")).orderBy("t")

    expected = [(t, sum(i for i in range(4000) if i % 4 == t), 1000) for t in range(4)]
    clean, broken = str(tmp_path / "clean"), str(tmp_path / "killed")
    runs = {}
    for log, kill in ((clean, False), (broken, True)):
        marks = str(tmp_path / f"marks-{kill}")
        os.mkdir(marks)
        cap = capture_session(cluster_spark, log, operators="all", query="words")
        killed: list[str] = []
        t = kill_when_running(spark_cluster, cap, marks, 4, killed) if kill else None
        runs[log] = [tuple(r) for r in query(cap, marks, 2.0 if kill else 0.2).collect()]
        if t is not None:
            t.join(10)
            assert killed and "killed executor JVM" in killed[0]
            assert any(not m.endswith("-a0") for m in os.listdir(marks)), sorted(os.listdir(marks))  # ran again
        assert runs[log] == expected
    plan = read_plan(broken, "words")
    mapped = [op for op in plan.operators if op.name == "MapInArrow"]
    assert mapped and mapped[0].summary is not None and mapped[0].summary.rows == 4000
    assert all(op.summary is not None and not op.summary.frontier for op in plan.operators if op.stream)
    assert first_divergence(clean, broken, "words") == (None, None)
    assert not os.path.exists(os.path.join(broken, ".staging"))
