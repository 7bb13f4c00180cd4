"""The tap, the ``eventlog`` data source (batch and streaming) and the streaming sink on S3 (moto's S3 server,
``tests.support.s3``), in local-mode Spark: what they write and read on ``s3://`` equals the same on a local folder;
attempts racing to publish one part (one wins, the other keeps nothing); a publish cut short; an unreachable
server gives a clear error."""

from __future__ import annotations

import os
import socket
import threading

import pyarrow as pa
import pytest

from capture import Capture, tap, tap_batches
from connectors.spark import parse_stream_uri
from connectors.spark.staging import PartStager, _publish_by_copy, publish, remove_tree
from connectors.spark.times import TimeSpec
from connectors.spark.uri import STAGING_DIR, StorageUnavailableError, staging_uri
from eventlog import Messages, open_log
from replay import Replayer

from .conftest import by_time, object_keys, workers_env

pytestmark = pytest.mark.spark


@pytest.fixture(autouse=True)
def _python_engine(monkeypatch):
    """These are the Python tap's tests (``mapInArrow``; the JVM tap's are ``test_jvm_*.py``): pin the engine,
    which is ``auto`` (the JVM tap where it can run) by default."""
    monkeypatch.setenv("EVENTLOG_TAP_ENGINE", "python")


COLS = ["id", "word", "t"]


@pytest.fixture(scope="module", autouse=True)
def _workers_reach_s3(spark, s3_server):
    """The session's Python workers get the S3 server's client settings (as a cluster's executors get them from
    ``spark.executorEnv.*``)."""
    with workers_env(spark, s3_server.env):
        yield


def words(spark, n: int, partitions: int):
    return spark.range(0, n, 1, partitions).selectExpr(
        "id", "concat('w', cast(id % 7 as string)) as word", "id % 4 as t")


def objects(uri: str) -> list[str]:
    """Every object key below ``uri``, folder markers included."""
    return object_keys(uri, markers=True)


def parts(log_uri: str, stream: str) -> list[list[tuple]]:
    """Per part, its events: ``("M", time, rows)`` or ``("P", updates)``, in sequence order."""
    log = open_log(log_uri)
    out = []
    for p in range(log.header(stream).peers):
        events = []
        with log.reader(stream, p) as r:
            for e in r:
                ev = e.event
                events.append(("M", ev.time, ev.records.to_pylist()) if isinstance(ev, Messages)
                              else ("P", sorted(ev.updates)))
        out.append(events)
    return out


def test_tap_write_and_read_on_s3_equal_a_local_folder(spark, s3_bucket, s3_server, log_dir):
    """A tap, a batch read and a batch write of the replay, once into a local folder and once into S3 (the
    log URI naming its endpoint in its query): the same events in every part, the same rows read back."""
    port = s3_server.port
    s3_log = f"{s3_bucket}/logs?endpoint_override=127.0.0.1:{port}&scheme=http"
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "300")
    try:
        results = {}
        for name, log in (("local", log_dir), ("s3", s3_log)):
            tapped = tap(words(spark, 2000, 3), log, "words", time="t")
            collected = by_time(tapped.collect(), "t", COLS)
            stream = parse_stream_uri(log, "words").uri
            replayed = spark.read.format("eventlog").option("workers", 2).load(stream)
            back = by_time(replayed.collect(), "_time", COLS)
            replayed.write.format("eventlog").mode("append").save(parse_stream_uri(log, "copy").uri)
            results[name] = (collected, back)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert results["s3"] == results["local"]
    assert results["s3"][0] == results["s3"][1] and sum(sum(c.values()) for c in results["s3"][1].values()) == 2000
    assert parts(s3_log, "words") == parts(log_dir, "words")     # the same events, part by part
    assert parts(s3_log, "copy") == parts(log_dir, "copy")
    assert open_log(s3_log).header("copy").peers == 2
    left = objects(f"{s3_bucket}/logs")
    assert not [k for k in left if k.startswith(STAGING_DIR)], left   # staging removed, folder markers too
    assert not os.path.exists(os.path.join(log_dir, STAGING_DIR))


def _fail_first_attempt(batches):
    from pyspark import TaskContext

    for i, b in enumerate(batches):
        if TaskContext.get().attemptNumber() == 0 and i == 2:
            raise RuntimeError("injected failure of the first attempt")
        yield b


@pytest.mark.parametrize("where", ["tap", "write"])
def test_retried_tasks_on_s3_publish_each_part_once(spark, s3_bucket, where):
    """Each task fails once after staging some batches (local[2,3] retries it): every row is in S3 once."""
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    try:
        df = words(spark, 6000, 2)
        if where == "tap":
            out = tap(df, s3_bucket, "words", time="t")
            out.mapInArrow(_fail_first_attempt, out.schema).collect()
        else:
            df.mapInArrow(_fail_first_attempt, df.schema).write.format("eventlog").option("time", "t") \
                .mode("append").save(f"{s3_bucket}/words")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    replayed = spark.read.format("eventlog").load(f"{s3_bucket}/words")
    assert replayed.count() == 6000 and replayed.select("id").distinct().count() == 6000
    assert by_time(replayed.collect(), "_time", COLS) == by_time(words(spark, 6000, 2).collect(), "t", COLS)
    if where == "write":   # the driver's commit removed the job's staging, failed attempts' included
        assert not [k for k in objects(s3_bucket) if k.startswith(STAGING_DIR)]


SCHEMA = pa.schema([("n", pa.int64())])
PEERS, TIMES, PER_TIME = 3, 6, 40


def write_input(log_uri: str) -> list[tuple[int, int]]:
    log = open_log(log_uri)
    rows = []
    for p in range(PEERS):
        with Capture(log, "live", p, PEERS, schema=SCHEMA) as cap:
            for t in range(TIMES):
                ns = [10_000 * t + 100 * p + i for i in range(PER_TIME)]
                cap.send(t, [{"n": n} for n in ns])
                cap.advance_to(t + 1)
                rows += [(t, n) for n in ns]
    return sorted(rows)


def test_streaming_read_sink_and_tap_batches_on_s3_equal_a_local_folder(spark, s3_bucket, tmp_path):
    """A Structured Streaming query reads a log through the ``eventlog`` source in micro-batches and writes it
    with the ``eventlog`` sink, and another captures with ``tap_batches``: on S3 as on a local folder."""
    results = {}
    for name, log in (("local", str(tmp_path / "log")), ("s3", s3_bucket)):
        rows = write_input(log)
        stream = (spark.readStream.format("eventlog").option("workers", 2)
                  .option("maxRecordsPerTrigger", TIMES // 2 * PEERS * PER_TIME).load(f"{log}/live")
                  .selectExpr("n", "_time as src_time"))
        q = (stream.writeStream.format("eventlog").option("checkpointLocation", str(tmp_path / f"ck-{name}"))
             .trigger(availableNow=True).start(f"{log}/copy"))
        q.awaitTermination(180)
        assert q.exception() is None and len(q.recentProgress) >= 2
        back = spark.read.format("eventlog").load(f"{log}/copy").collect()
        assert sorted((r["src_time"], r["n"]) for r in back) == rows
        q = (stream.writeStream.foreachBatch(tap_batches(log, "tapped", time="src_time"))
             .option("checkpointLocation", str(tmp_path / f"ck2-{name}")).trigger(availableNow=True).start())
        q.awaitTermination(180)
        assert q.exception() is None
        tapped = [(t, r["n"]) for t, table in Replayer(open_log(log), "tapped").completed()
                  for r in table.to_pylist()]
        assert sorted(tapped) == rows
        results[name] = (sorted((r["_time"], r["src_time"], r["n"]) for r in back), sorted(tapped))
    assert results["s3"] == results["local"]
    assert not [k for k in objects(s3_bucket) if k.startswith(STAGING_DIR)]


def test_micro_batch_reexecuted_on_s3_is_not_written_twice(spark, s3_bucket, tmp_path):
    """A micro-batch written again with the same batch id (Spark re-running it after a failure between the
    sink's commit and its own commit log) leaves the S3 stream as it was."""
    df = spark.range(0, 90, 1, 3).selectExpr("id")
    for _ in range(2):
        df.write.format("eventlog").option("batchId", 0).mode("append").save(f"{s3_bucket}/mb")
    back = spark.read.format("eventlog").load(f"{s3_bucket}/mb")
    assert back.count() == 90 and {r["_time"] for r in back.collect()} == {0}


# -- publishing on S3 without Spark tasks ------------------------------------------------------------------


def _stage(target, attempt: int, values: list[int], segment_bytes: int | None = None) -> str:
    """A finished staged part of ``target`` (attempt ``attempt``) holding ``values`` at time 0, each its own
    event; ``segment_bytes`` makes the staging log rotate segments that small (a staged part of several)."""
    stager = PartStager(target, "job", 0, attempt, SCHEMA, TimeSpec.parse(0, SCHEMA, None), "arrow")
    if segment_bytes is not None:
        stager._cap.abort()
        stager._cap = Capture(open_log(stager.uri, segment_bytes=segment_bytes), target.stream, 0, 1,
                              schema=SCHEMA)
    for v in values:
        stager._cap.send(0, [{"n": v}])
    return stager.finish().uri


def _target(root: str, peers: int = 1):
    from eventlog.header import StreamHeader

    target = parse_stream_uri(root, "s")
    time_type = TimeSpec.parse(0, SCHEMA, None).time_type
    open_log(target.log_uri).create_stream(StreamHeader("s", peers, SCHEMA, time_type, "arrow"))
    return target


def _values(log_uri: str, part: int = 0) -> list[int]:
    with open_log(log_uri).reader("s", part) as r:
        return [v for e in r if isinstance(e.event, Messages) for v in e.event.records.column("n").to_pylist()]


@pytest.mark.parametrize("how", ["objects", "copy"])
def test_attempts_racing_to_publish_one_part_on_s3_one_wins(s3_bucket, how):
    """Two attempts stage different records for part 0 and publish at the same moment (raw objects with the
    conditional create as the fence, or by copying the events through the part writer): exactly one wins,
    the part holds exactly its records, the other keeps nothing. Repeated with fresh streams."""
    for round_ in range(4):
        target = _target(f"{s3_bucket}/r{round_}")
        staged = [_stage(target, a, [100 * a + i for i in range(5)]) for a in (1, 2)]
        go = threading.Barrier(2)
        won: dict[int, object] = {}

        def run(a: int, uri: str) -> None:
            go.wait()
            try:
                won[a] = publish(uri, target, 0) if how == "objects" else _publish_by_copy(uri, target, 0)
            except BaseException as e:  # noqa: BLE001 - reported by the assertion below
                won[a] = e

        threads = [threading.Thread(target=run, args=(a, uri)) for a, uri in zip((1, 2), staged)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(won.values(), key=str) == [False, True], won
        winner = next(a for a, w in won.items() if w is True)
        assert _values(target.log_uri) == [100 * winner + i for i in range(5)]
        frontier = [e.event for e in open_log(target.log_uri).reader("s", 0, progress_only=True)]
        assert len(frontier) == 1   # one closing Progress: the winner's part, finished, nothing of the other
        for uri in staged:
            remove_tree(uri)
        assert not [k for k in objects(target.log_uri) if k.startswith(STAGING_DIR)]


def test_a_part_published_on_s3_is_not_published_again(s3_bucket):
    target = _target(f"{s3_bucket}/x")
    assert publish(_stage(target, 0, [1, 2]), target, 0) is True
    assert publish(_stage(target, 1, [3]), target, 0) is False
    assert _values(target.log_uri) == [1, 2]


class _Crash(BaseException):
    """Stands for the process dying in the middle of a publish."""


def _crash_after(monkeypatch, log_uri: str, method: str, calls: int) -> None:
    """Make the ``calls``+1-th call of ``method`` on the storage of logs at ``log_uri`` die."""
    from connectors.files.storage import S3Storage

    real = getattr(S3Storage, method)
    seen = [0]

    def dying(self, path, data):  # noqa: ANN001
        if path.startswith(log_uri.removeprefix("s3://").partition("?")[0] + "/s/"):
            seen[0] += 1
            if seen[0] > calls:
                raise _Crash(path)
        return real(self, path, data)

    monkeypatch.setattr(S3Storage, method, dying)


def test_a_publish_cut_short_on_s3(s3_bucket, monkeypatch):
    """What a crash in the middle of a publish leaves (staging.py's module doc): a one-segment part cut after
    its segment put and before its index is whole (readers read around the missing index); a part of several
    segments cut after its first is an unfinished prefix — its times never complete, nothing is wrong, and a
    retried attempt keeps nothing."""
    one = _target(f"{s3_bucket}/one")
    staged = _stage(one, 0, [1, 2, 3])
    with monkeypatch.context() as m:
        _crash_after(m, one.log_uri, "write_file", 0)       # the index put dies
        with pytest.raises(_Crash):
            publish(staged, one, 0)
    assert [k for k in objects(f"{one.log_uri}/s/part=0")] == ["00000000000000000001.arrow"]
    assert _values(one.log_uri) == [1, 2, 3]
    assert [(t, table.column("n").to_pylist()) for t, table in Replayer(open_log(one.log_uri), "s").completed()] \
        == [(0, [1, 2, 3])]
    assert publish(_stage(one, 1, [9]), one, 0) is False

    many = _target(f"{s3_bucket}/many")
    staged = _stage(many, 0, list(range(40)), segment_bytes=1500)
    segments = [k for k in objects(staged) if k.endswith(".arrow")]
    assert len(segments) >= 3, segments
    with monkeypatch.context() as m:
        _crash_after(m, many.log_uri, "create_exclusive", 1)    # the second segment's put dies
        with pytest.raises(_Crash):
            publish(staged, many, 0)
    kept = _values(many.log_uri)
    assert kept and kept == list(range(len(kept))) and len(kept) < 40      # a prefix of the staged events
    assert list(Replayer(open_log(many.log_uri), "s").completed()) == []  # never complete: stuck, not wrong
    assert publish(_stage(many, 1, [7]), many, 0) is False                 # the retry keeps nothing
    assert _values(many.log_uri) == kept


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_s3_server_gives_a_clear_error(spark, s3_server):
    """An endpoint nobody listens on: the tap, a read and a write fail at once on the driver with an error that
    names the log, the endpoint and where the setting came from."""
    log = f"s3://nowhere/logs?endpoint_override=127.0.0.1:{_closed_port()}&scheme=http"
    with pytest.raises(StorageUnavailableError, match=r"cannot reach the storage of log s3://nowhere/logs: .*"
                       r"endpoint 127\.0\.0\.1:\d+ \(from the URI's endpoint_override\)") as e:
        tap(words(spark, 10, 1), log, "words")
    assert "scheme=http" not in str(e.value)   # the URI's query (settings) stays out of messages
    stream = parse_stream_uri(log, "words").uri
    with pytest.raises(Exception, match="cannot reach the storage of log s3://nowhere/logs"):
        spark.read.format("eventlog").load(stream).collect()
    with pytest.raises(Exception, match="cannot reach the storage of log s3://nowhere/logs"):
        words(spark, 10, 1).write.format("eventlog").mode("append").save(stream)


def test_staging_uris_keep_the_log_uris_query():
    t = parse_stream_uri("s3://b/logs/words?endpoint_override=h:1&scheme=http")
    assert (t.log_uri, t.stream, t.uri) == ("s3://b/logs?endpoint_override=h:1&scheme=http", "words",
                                            "s3://b/logs/words?endpoint_override=h:1&scheme=http")
    assert staging_uri(t, "job", "0-0-x") == "s3://b/logs/.staging/words/job/0-0-x?endpoint_override=h:1&scheme=http"
    assert parse_stream_uri("s3://b/logs?scheme=http", "words") == t.__class__("s3://b/logs?scheme=http", "words")
