"""The streaming runtime on a Spark standalone cluster (a master and two workers, separate executor JVMs on
a shared disk; ``tests/support/spark_cluster.py``): the output equals the failure-free run's also after an executor JVM
is SIGKILLed mid-job — with folders on the shared disk, and with no local path at all (checkpoints, input and
output on the S3 server, channels on Kafka); the job master's control port refuses connections without the job's secret; slots
are the live executors' (not ``spark.default.parallelism``); bad locations are refused before the job
starts, and a task that does not see the driver's folders fails at once instead of hanging."""

from __future__ import annotations

import glob
import json
import logging
import os
import socket
import threading
import time

import pyarrow as pa
import pytest

from runtime import (
    Job,
    JobFailedError,
    LocationError,
    NotEnoughSlotsError,
    UnreachableLocationError,
)
from runtime.executors.spark import driver_addresses, spark_failure_reason, spark_slots
from tests.runtime import join_pipelines as jp
from tests.support.pipelines import COUNT_SCHEMA, events, expected_counts, read_counts, wordcount_job

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark-cluster")]  # one xdist worker (tests/conftest.py)

ITEMS = 200


class _Records(logging.Handler):
    """Keeps the records of a logger (the job master's address, refused connections)."""

    def __init__(self, name: str) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []
        self._logger = logging.getLogger(name)

    def __enter__(self) -> _Records:
        self._level = self._logger.level
        self._logger.setLevel(logging.INFO)
        self._logger.addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        self._logger.removeHandler(self)
        self._logger.setLevel(self._level)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def find(self, text: str) -> list[logging.LogRecord]:
        return [r for r in self.records if text in r.msg]


def _job(name: str, out: str, delay: float = 0.002) -> Job:
    """source x2 -> upper -> keep -> count x2 -> out: 7 operator instances (8 slots on the cluster)."""
    return wordcount_job(name, out, mapper=1, items=ITEMS, delay=delay)


def _exchange(address: tuple[str, int], *lines: bytes) -> list[bytes]:
    """Send ``lines`` on a new connection; returns every line the server sent until it closed."""
    with socket.create_connection(address, timeout=10) as s:
        for line in lines:
            try:
                s.sendall(line)
            except OSError:
                break
        f = s.makefile("rb")
        return [ln for ln in f]


def test_runtime_on_the_cluster_refuses_connections_without_the_job_secret(cluster_spark, tmp_path):
    out, ck = str(tmp_path / "out"), tmp_path / "ck"
    forged = json.dumps({"task": "out.0", "gen": 1, "failed": "forged failure"}).encode() + b"\n"
    replies: dict[str, list[bytes]] = {}
    with _Records("runtime") as logs:

        def attack() -> None:
            deadline = time.monotonic() + 120
            while not list(ck.glob("secret/chk-*/_COMPLETE")) and time.monotonic() < deadline:
                time.sleep(0.01)  # generation 1 runs: a forged failure of it would restart the job
            rec = logs.find("job master listening")[0]
            bound, address = tuple(rec.args[1:3]), tuple(rec.args[3:5])
            replies["bound"], replies["address"] = [repr(bound).encode()], [repr(address).encode()]
            replies["none"] = _exchange(address, forged, forged)
            replies["wrong"] = _exchange(address, b'{"secret": "0123456789abcdef"}\n', forged)
            replies["garbage"] = _exchange(address, b"\x00\xff not json\n", forged)

        t = threading.Thread(target=attack, daemon=True)
        t.start()
        result = _job("secret", out, delay=0.005).run(
            cluster_spark, channels=str(tmp_path / "ch"), checkpoints=str(ck), checkpoint_interval=0.2, timeout=180)
        t.join(30)
    # the driver binds spark.driver.bindAddress and advertises spark.driver.host (both 127.0.0.1 here)
    assert replies["bound"][0].startswith(b"('127.0.0.1',") and replies["address"][0].startswith(b"('127.0.0.1',")
    for case in ("none", "wrong", "garbage"):
        assert len(replies[case]) == 1 and b"refused" in replies[case][0], (case, replies[case])
    assert b"wrong secret" in replies["wrong"][0]
    assert len(logs.find("refused a connection")) == 3
    # the forged failure reached nothing: no restart, output as without the attack
    assert result.status == "finished" and result.restarts == 0, result.failures
    assert read_counts(out) == expected_counts(items=ITEMS)
    assert result.slot_waits == [0.0]


def test_runtime_survives_sigkill_of_an_executor_jvm(cluster_spark, spark_cluster, tmp_path):
    """The executor JVM on worker 1 is SIGKILLed once the first checkpoint completed: its tasks' barrier stage
    fails with Spark's executor-lost reason, the driver waits for the replacement executor's slots and
    restarts from the checkpoint; the output equals the failure-free run's."""
    out, ck = str(tmp_path / "out"), tmp_path / "ck"
    killed: list[str] = []

    def kill_after_first_checkpoint() -> None:
        deadline = time.monotonic() + 120
        while not list(ck.glob("killjob/chk-*/_COMPLETE")) and time.monotonic() < deadline:
            time.sleep(0.02)
        killed.append(spark_cluster.kill_executor(cluster_spark.sparkContext.applicationId, worker=1))

    t = threading.Thread(target=kill_after_first_checkpoint, daemon=True)
    t.start()
    result = _job("killjob", out, delay=0.01).run(cluster_spark, channels=str(tmp_path / "ch"), checkpoints=str(ck),
                                                  checkpoint_interval=0.2, timeout=240)
    t.join(10)
    assert killed and "killed executor JVM" in killed[0]
    assert result.status == "finished" and result.restarts >= 1, result.failures
    first = result.failures[0]
    assert "ExecutorLostFailure" in first and "exited" in first, first         # Spark's reason, not py4j's
    assert "An error occurred while calling" not in first
    assert result.restored_from[1] is not None                                # from the checkpoint, not from scratch
    assert len(result.slot_waits) == result.generations
    assert result.slot_waits[1] > 0       # the restart waited for the replacement executor, not NotEnoughSlotsError
    assert read_counts(out) == expected_counts(items=ITEMS)


def _s3_keys(uri: str) -> list[str]:
    """Every key under the ``s3://bucket/prefix`` ``uri``."""
    import boto3

    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def _capture_events(uri: str, parts: int = 4) -> None:
    """``pipelines.events(ITEMS)`` captured as stream ``events`` of the log at ``uri`` (``parts`` parts)."""
    from capture import Capture

    gen = events(ITEMS)
    schema = pa.schema([("word", pa.string()), ("n", pa.int64())])
    for p in range(parts):
        with Capture(uri, "events", worker=p, peers=parts, schema=schema) as cap:
            last = None
            for t, rows in gen(p, 0):
                if last is not None and t != last:
                    cap.advance_to(t)
                cap.send(t, rows)
                last = t


def _slow_upper(r: dict) -> dict:
    time.sleep(0.003)
    return {"word": r["word"].upper(), "n": r["n"]}


def _log_job(name: str, inp: str, out: str) -> Job:
    """``wordcount_job``'s operators reading stream ``events`` of the log ``inp``: 7 operator instances."""
    job = Job(name)
    src = job.from_log(inp, "events", parallelism=2, name="source", poll_interval=0.05)
    counts = src.map(_slow_upper, parallelism=1, name="upper").filter(lambda r: r["n"] % 5 != 0, name="keep").key_by(
        "word").window(5).count(parallelism=2, name="count")
    counts.to_log(out, "counts", schema=COUNT_SCHEMA, parallelism=1, parts=3, name="out")
    return job


@pytest.mark.kafka
def test_runtime_on_object_storage_survives_sigkill_of_an_executor_jvm(cluster_spark, spark_cluster, s3_bucket,
                                                                       kafka_uri):
    """No local path anywhere: the input log, the checkpoints (snapshots, manifests, counters, run marks, the
    sink's staged epochs) and the output log live on the S3 server, the channels on Kafka. The executor JVM on
    worker 1 is SIGKILLed once the first checkpoint is complete on S3; the restarted generation restores from
    it, and the output equals the failure-free run's."""
    inp, out, ck = f"{s3_bucket}/in", f"{s3_bucket}/out", f"{s3_bucket}/ck"
    _capture_events(inp)
    killed: list[str] = []

    def kill_after_first_checkpoint() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any(k.endswith("/_COMPLETE") for k in _s3_keys(f"{ck}/s3kill/")):
                break
            time.sleep(0.05)
        killed.append(spark_cluster.kill_executor(cluster_spark.sparkContext.applicationId, worker=1))

    t = threading.Thread(target=kill_after_first_checkpoint, daemon=True)
    t.start()
    result = _log_job("s3kill", inp, out).run(cluster_spark, channels=kafka_uri, checkpoints=ck,
                                              checkpoint_interval=0.2, timeout=300)
    t.join(10)
    assert killed and "killed executor JVM" in killed[0]
    assert result.status == "finished" and result.restarts >= 1, result.failures
    assert "ExecutorLostFailure" in result.failures[0], result.failures
    assert result.restored_from[1] is not None                                # from the checkpoint on S3
    assert read_counts(out) == expected_counts(items=ITEMS)
    keys = _s3_keys(f"{ck}/s3kill/")
    assert f"{ck.removeprefix('s3://').partition('/')[2]}/s3kill/master.json" in keys, keys
    # no executor made a folder of an s3:// URI taken for a path
    assert not glob.glob(os.path.join(spark_cluster.data, "worker-*", "work", "*", "*", "s3:*"))


def test_slots_are_the_live_executors_and_too_few_fail_after_a_bounded_wait(cluster_spark, spark_cluster, tmp_path):
    assert cluster_spark.sparkContext.defaultParallelism == 32   # spark.default.parallelism: not task slots
    assert spark_slots(cluster_spark) == spark_cluster.slots == 8
    job = wordcount_job("toobig", str(tmp_path / "out"), items=20)   # 9 operator instances > 8 slots
    started = time.monotonic()
    with pytest.raises(NotEnoughSlotsError, match=r"9 operator instances, but after 1\.\d s the live executors "
                                                  r"offer 8 task slots"):
        job.run(cluster_spark, channels=str(tmp_path / "ch"), checkpoints=str(tmp_path / "ck"), slot_timeout=1.5,
                timeout=60)
    assert time.monotonic() - started < 30


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self._values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self._values.get(key, default)


class _Session:
    def __init__(self, master: str, conf: dict[str, str]) -> None:
        self.sparkContext = type("Ctx", (), {"master": master, "getConf": lambda _self: _Conf(conf)})()


def test_the_job_master_binds_the_drivers_bind_address_and_advertises_its_host():
    cluster = {"spark.driver.host": "10.1.2.3", "spark.driver.bindAddress": "0.0.0.0"}
    assert driver_addresses(_Session("spark://m:7077", cluster)) == ("0.0.0.0", "10.1.2.3")
    assert driver_addresses(_Session("spark://m:7077", {"spark.driver.host": "10.1.2.3"})) == ("10.1.2.3", "10.1.2.3")
    assert driver_addresses(_Session("local[4]", cluster)) == ("127.0.0.1", "127.0.0.1")


@pytest.mark.parametrize("where, value, words", [
    ("checkpoints", "ck", "relative path"),
    ("checkpoints", "gs://bucket/ck", r"checkpoints on object storage: s3:// only, gs:// is not supported"),
    ("checkpoints", "s3://bucket/ck?endpoint_override=h:1", "take no options"),
    ("channels", "s3://bucket/ch", "an object store cannot carry channels"),
    ("checkpoints", "memory://ck", "not memory://"),
    ("channels", "ch", "relative path"),
    ("channels", "memory://ch", "not memory://"),
    ("output", "memory://out", "memory:// log lives in one process"),
    ("output", "out", "relative path"),
    ("output", "ftp://host/out", "ftp:// is not a log URI"),
])
def test_bad_locations_are_refused_before_the_job_starts(cluster_spark, tmp_path, monkeypatch, where, value, words):
    monkeypatch.chdir(tmp_path)
    locations = {"checkpoints": str(tmp_path / "ck"), "channels": str(tmp_path / "ch"), "output": str(tmp_path / "o")}
    locations[where] = value
    job = _job("refused", locations["output"])
    with pytest.raises(LocationError, match=words) as err:
        job.run(cluster_spark, channels=locations["channels"], checkpoints=locations["checkpoints"], timeout=60)
    assert repr(value) in str(err.value)
    assert os.listdir(tmp_path) == []        # refused before anything was created


def test_threads_keep_memory_outputs_and_relative_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = _job("threads", "memory://cluster-threads-out").run(channels="ch", checkpoints="ck", timeout=120)
    assert result.status == "finished"
    assert read_counts("memory://cluster-threads-out") == expected_counts(items=ITEMS)


@pytest.mark.parametrize("unshared", ["checkpoints", "channels"])
def test_a_task_that_does_not_see_the_drivers_folder_fails_at_once(cluster_spark, spark_cluster, tmp_path, monkeypatch,
                                                                   unshared):
    """``/proc/self/cwd/…`` is one absolute path that names another folder in every process: the driver's
    working directory (``tmp_path`` here) and each executor's own work folder — an executor that does not
    share the driver's disk."""
    monkeypatch.chdir(tmp_path)
    locations = {"checkpoints": str(tmp_path / "ck"), "channels": str(tmp_path / "ch")}
    locations[unshared] = "/proc/self/cwd/" + unshared
    started = time.monotonic()
    with pytest.raises(UnreachableLocationError, match=r"job failed without a restart: .* on host .* does not see "
                                                       rf"the {'checkpoint store' if unshared == 'checkpoints' else 'channels'}"
                                                       r" '/proc/self/cwd/"):
        _job("unshared", str(tmp_path / "out")).run(cluster_spark, channels=locations["channels"],
                                                     checkpoints=locations["checkpoints"], timeout=120)
    assert time.monotonic() - started < 60
    # the tasks made no store of their own in their executors' work folders
    assert not glob.glob(os.path.join(spark_cluster.data, "worker-*", "work", "*", "*", "checkpoints"))


def _drivermod_source() -> str:
    return ("def lines(part, offset):\n"
            "    for i in range(offset, 10):\n"
            "        yield i, [{'word': 'w', 'n': i}]\n")


def test_sparks_failure_reason_is_surfaced(cluster_spark, tmp_path, monkeypatch):
    """A job whose source function lives in a module only the driver can import (the environment was not
    shipped to the executors): the failure names the Python error the executors hit."""
    (tmp_path / "only_on_the_driver.py").write_text(_drivermod_source())
    monkeypatch.syspath_prepend(str(tmp_path))
    from only_on_the_driver import lines  # the module exists only now

    job = Job("unshipped")
    src = job.from_generator(lines, parts=2, name="source")
    schema = pa.schema([("word", pa.string()), ("count", pa.int64())])
    src.key_by("word").count(name="count").to_log(str(tmp_path / "out"), "counts", schema=schema, name="out")
    with pytest.raises(JobFailedError) as err:
        job.run(cluster_spark, channels=str(tmp_path / "ch"), checkpoints=str(tmp_path / "ck"), max_restarts=0,
                timeout=120)
    text = str(err.value)
    assert "ModuleNotFoundError: No module named 'only_on_the_driver'" in text, text
    assert "An error occurred while calling" not in text


class _Py4JLike(Exception):
    """What py4j raises: its text starts with "An error occurred while calling", the Java exception beside it."""

    def __init__(self, java_text: str) -> None:
        super().__init__(f"An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
                         f": {java_text}")
        self.java_exception = type("Java", (), {"toString": lambda _self: java_text})()


def test_spark_failure_reasons_of_recorded_messages():
    lost = ("org.apache.spark.SparkException: Job aborted due to stage failure: Could not recover from a failed "
            "barrier ResultStage. Most recent failure reason: Stage failed because barrier task ResultTask(0, 4) "
            "finished unsuccessfully.\nExecutorLostFailure (executor 0 exited caused by one of the running tasks) "
            "Reason: Command exited with code 137\nDriver stacktrace:\n\tat org.apache.spark.scheduler.DAGScheduler")
    assert spark_failure_reason(_Py4JLike(lost)) == (
        "ExecutorLostFailure (executor 0 exited caused by one of the running tasks) Reason: Command exited with code "
        "137 (Spark: Could not recover from a failed barrier ResultStage. Most recent failure reason: Stage failed "
        "because barrier task ResultTask(0, 4) finished unsuccessfully.)")
    python = ("org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 3.0 failed 4 times\n"
              "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
              '  File "/x/pyspark/worker.py", line 1, in main\n    func = read()\n'
              "ValueError: first\n\nDuring handling of the above exception, another exception occurred:\n\n"
              "Traceback (most recent call last):\n"
              '  File "/x/mod.py", line 2, in f\n'
              "runtime.errors.TaskFailedError: task count.1 failed: boom\n\n"
              "\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(PythonRunner.scala:1)\n"
              "\t... 12 more\nDriver stacktrace:\n\tat x")
    assert spark_failure_reason(_Py4JLike(python)) == (
        "TaskFailedError: task count.1 failed: boom (Spark: Task 1 in stage 3.0 failed 4 times)")


# a job with a join (issue 37) here, among the cluster's tests: a cluster session stops the process's local one
def test_exactly_once_join_on_the_standalone_cluster_with_an_executor_jvm_sigkilled(cluster_spark, spark_cluster,
                                                                                  tmp_path):
    """On the two-worker standalone cluster (8 slots): worker 1's executor JVM is SIGKILLed once the first
    checkpoint completed; the job restarts from the checkpoint on the replacement executor and the windowed
    join's output equals the failure-free run's."""
    out, ck = str(tmp_path / "out"), tmp_path / "ck"
    killed: list[str] = []

    def kill_after_first_checkpoint() -> None:
        deadline = time.monotonic() + 120
        while not list(ck.glob("clusterjoin/chk-*/_COMPLETE")) and time.monotonic() < deadline:
            time.sleep(0.02)
        killed.append(spark_cluster.kill_executor(cluster_spark.sparkContext.applicationId, worker=1))

    t = threading.Thread(target=kill_after_first_checkpoint, daemon=True)
    t.start()
    job = jp.join_job("clusterjoin", out, "window", "left", items=200, delay=0.01)
    result = job.run(cluster_spark, channels=str(tmp_path / "ch"), checkpoints=str(ck), checkpoint_interval=0.2,
                     timeout=300)
    t.join(10)
    assert killed and "killed executor JVM" in killed[0]
    assert result.status == "finished" and result.restarts >= 1, result.failures
    assert "ExecutorLostFailure" in result.failures[0], result.failures[0]
    assert result.restored_from[1] is not None
    assert jp.read_joined(out) == jp.expected("window", "left", items=200)
