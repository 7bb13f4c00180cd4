"""What tap attempts leave in the log's staging area, without a Spark session: the attempt that publishes the
last partition removes the job's staging folder, the staging of attempts that died (their process killed before
they discarded it) included; an attempt whose staging was removed under it (its partition published by another
attempt) passes its rows on and keeps nothing; an attempt's own failure is never swallowed. On a local folder,
on S3 (moto's server) and on Kafka (staging logs are topics below the log's prefix; an attempt whose staging
topics were swept learns it from its writer's next sync, LostDataError, within about a second)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from pyspark import TaskContext

from capture.tap import _TapPartition
from connectors.kafka import KafkaLog
from connectors.spark.staging import PartStager, sweep_job
from connectors.spark.times import TimeSpec
from connectors.spark.uri import STAGING_DIR, parse_stream_uri, staging_uri
from eventlog import Messages, StreamHeader, open_log

SCHEMA = pa.schema([("t", pa.int64()), ("x", pa.int64())])
JOB = "job1"


class _Context:
    """What ``TaskContext.get()`` answers inside a Python worker: the partition and the attempt number."""

    def __init__(self, part: int, attempt: int) -> None:
        self.part, self.attempt = part, attempt

    def partitionId(self) -> int:  # noqa: N802 - PySpark's names
        return self.part

    def attemptNumber(self) -> int:  # noqa: N802
        return self.attempt


@pytest.fixture(params=["local", "s3", pytest.param("kafka", marks=pytest.mark.kafka)])
def log_uri(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "log")
    if request.param == "kafka":  # staging logs are topics below the log's prefix
        return request.getfixturevalue("kafka_uri")
    return f"{request.getfixturevalue('s3_bucket')}/log"


@pytest.fixture
def task(monkeypatch):
    """``task(part, attempt)`` makes the next generator started run as that task attempt."""
    ctx = {"now": _Context(0, 0)}
    monkeypatch.setattr(TaskContext, "get", staticmethod(lambda: ctx["now"]))

    def start(fn: _TapPartition, part: int, attempt: int, batches):
        ctx["now"] = _Context(part, attempt)
        return fn(iter(batches))

    return start


def batches_of(part: int, sizes: list[int]) -> list[pa.RecordBatch]:
    """Batches with ``x`` numbering the partition's rows from ``part * 10**6``; big ones go out as events at once."""
    out, start = [], part * 10**6
    for n in sizes:
        xs = range(start, start + n)
        out.append(pa.record_batch([pa.array([v // 1000 % 3 for v in xs], pa.int64()), pa.array(xs, pa.int64())],
                                   schema=SCHEMA))
        start += n
    return out


def make_tap(log_uri: str, peers: int) -> _TapPartition:
    target = parse_stream_uri(log_uri, "s")
    open_log(target.log_uri).create_stream(StreamHeader("s", peers, SCHEMA, "int64", "arrow"))
    return _TapPartition(target, JOB, peers, SCHEMA, TimeSpec.parse("t", SCHEMA), "arrow")


def dead_attempt(fn: _TapPartition, part: int, attempt: int, sizes: list[int]) -> None:
    """An attempt whose process died mid-partition: its staging stays as it was (nothing discarded)."""
    stager = PartStager(fn.target, JOB, part, attempt, SCHEMA, fn.time, "arrow")
    for b in batches_of(part, sizes):
        stager.add(b)
    stager._cap._writer.sync()   # what a live writer had made durable before the kill


def staging_entries(log_uri: str) -> list[str]:
    """Everything below the log's staging folder (object keys on S3, folder markers included)."""
    uri = staging_uri(parse_stream_uri(log_uri, "s"))
    if log_uri.startswith("kafka://"):
        log = KafkaLog(log_uri)
        try:
            return [t for t in log.topics_below() if STAGING_DIR in t]
        finally:
            log.close()
    if "://" not in log_uri:
        root = os.path.join(log_uri, STAGING_DIR)
        return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs + _) \
            if os.path.exists(root) else []
    fs, path = pafs.FileSystem.from_uri(uri.rsplit("/", 1)[0])
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return sorted(i.path for i in infos)


def part_rows(log_uri: str, part: int) -> list[int]:
    with open_log(log_uri).reader("s", part) as r:
        return sorted(x for e in r if isinstance(e.event, Messages) for x in e.event.records.column("x").to_pylist())


def test_the_last_publish_removes_the_staging_of_dead_attempts(log_uri, task):
    fn = make_tap(log_uri, 3)
    dead_attempt(fn, 0, 0, [10000, 5])
    dead_attempt(fn, 2, 0, [7])
    sizes = {0: [9000, 3], 1: [4], 2: [10, 9000]}
    for part, attempt in ((0, 1), (1, 0)):
        assert [b.num_rows for b in task(fn, part, attempt, batches_of(part, sizes[part]))] == sizes[part]
        # partition 2 is not published and its dead attempt's folder is left: its retry may still publish
        assert staging_entries(log_uri), part
    assert [b.num_rows for b in task(fn, 2, 1, batches_of(2, sizes[2]))] == sizes[2]
    assert staging_entries(log_uri) == []
    for part in range(3):
        assert part_rows(log_uri, part) == [x for b in batches_of(part, sizes[part]) for x in b.column(1).to_pylist()]


@pytest.mark.parametrize("sizes", [[3, 4], [9000, 9000, 2]], ids=["buffered", "written"])
@pytest.mark.parametrize("log_uri", ["local", "s3", pytest.param("kafka", marks=pytest.mark.kafka)], indirect=True)
def test_an_attempt_whose_staging_is_swept_passes_its_rows_and_keeps_nothing(log_uri, task, sizes):
    """Attempt 0 stages part of its partition; attempt 1 (speculative, or a second action) publishes the whole
    partition and, being the last, sweeps the job's staging, attempt 0's included; attempt 0 goes on: every
    row passes, no error, nothing of it in the log or the staging area."""
    fn = make_tap(log_uri, 1)
    slow = task(fn, 0, 0, batches_of(0, sizes))
    first = next(slow)
    fast = [b.num_rows for b in task(fn, 0, 1, [b.slice(0, b.num_rows) for b in batches_of(0, sizes)])]
    assert fast == sizes
    assert [first.num_rows] + [b.num_rows for b in slow] == sizes
    assert part_rows(log_uri, 0) == list(range(sum(sizes)))
    assert staging_entries(log_uri) == []


def test_an_attempts_own_failure_is_raised_even_when_its_partition_is_published(log_uri, task):
    """Only capture errors of an attempt whose partition another attempt published are passed over: a failure of
    the job itself (the rows coming in) is raised, on a published partition (a second action) and on one that
    is not, and leaves no staging."""
    fn = make_tap(log_uri, 2)
    assert len(list(task(fn, 0, 0, batches_of(0, [5])))) == 1

    def failing(part: int):
        yield from batches_of(part, [9000, 5])
        raise RuntimeError("the job's own failure")

    second_action = _TapPartition(fn.target, "job2", 2, SCHEMA, fn.time, "arrow")
    for part in (0, 1):
        with pytest.raises(RuntimeError, match="own failure"):
            list(task(second_action, part, 0, failing(part)))
    assert staging_entries(log_uri) == []
    assert part_rows(log_uri, 0) == list(range(5))
    assert open_log(log_uri).part_stats("s", 1).next_seq <= 1


def test_sweep_keeps_a_job_with_an_unpublished_partition_or_entries_it_did_not_make(log_uri, task):
    fn = make_tap(log_uri, 2)
    dead_attempt(fn, 1, 0, [3])
    list(task(fn, 0, 0, batches_of(0, [4])))
    assert not sweep_job(fn.target, JOB)          # partition 1's folder: its retry may still publish it
    list(task(fn, 1, 1, batches_of(1, [4])))      # the last publish swept
    assert staging_entries(log_uri) == []
    assert not sweep_job(fn.target, JOB)          # nothing there any more
    job = staging_uri(fn.target, "other")
    if "://" not in log_uri:
        os.makedirs(os.path.join(job, "notes"))
        assert not sweep_job(fn.target, "other") and os.path.isdir(os.path.join(job, "notes"))


def _attempt_folders(fn: _TapPartition) -> list[str]:
    """The names of the attempt folders in the job's staging folder ([] when it is gone)."""
    from connectors.spark.staging import _list_folder

    try:
        return sorted(_list_folder(staging_uri(fn.target, JOB)))
    except FileNotFoundError:
        return []


def test_a_publish_removes_each_folder_of_a_published_partition_and_leaves_the_others(log_uri, task):
    """Dead attempts' folders go as soon as their partition is published, one by one; the folders of a partition
    not yet published stay (its retry may still publish it)."""
    fn = make_tap(log_uri, 3)
    dead_attempt(fn, 0, 0, [9000, 5])
    dead_attempt(fn, 1, 0, [9000, 3])
    dead_attempt(fn, 2, 0, [7])
    list(task(fn, 0, 1, batches_of(0, [9000, 5])))
    assert [n.split("-")[:2] for n in _attempt_folders(fn)] == [["1", "0"], ["2", "0"]]
    list(task(fn, 2, 1, batches_of(2, [7])))
    assert [n.split("-")[:2] for n in _attempt_folders(fn)] == [["1", "0"]]
    list(task(fn, 1, 1, batches_of(1, [9000, 3])))
    assert staging_entries(log_uri) == []
    assert [part_rows(log_uri, p)[-1] for p in range(3)] == [9004, 10**6 + 9002, 2 * 10**6 + 6]


def test_an_attempt_that_starts_while_a_sweep_runs_keeps_its_staging_and_publishes(log_uri, task, monkeypatch):
    """The sweep lists the job's folder, then removes; an attempt of a partition not yet published that creates
    its folder in between (tasks start as others end) keeps it, and publishes its whole partition."""
    import connectors.spark.staging as staging

    fn = make_tap(log_uri, 2)
    dead_attempt(fn, 0, 0, [5])
    listed = staging._list_folder
    started = []

    def list_then_start(uri: str) -> list[str]:
        names = listed(uri)
        if not started:  # the first sweep, of partition 0's attempt: partition 1's attempt starts now
            started.append(task(fn, 1, 0, batches_of(1, [9000, 9000, 4])))
            assert next(started[0]).num_rows == 9000  # staged, an event written
        return names

    monkeypatch.setattr(staging, "_list_folder", list_then_start)
    assert sum(b.num_rows for b in task(fn, 0, 1, batches_of(0, [5]))) == 5
    assert [n.split("-")[:2] for n in _attempt_folders(fn)] == [["1", "0"]]  # the dead one went, this stays
    assert sum(b.num_rows for b in started[0]) == 9004
    assert staging_entries(log_uri) == []
    log = open_log(log_uri)
    if hasattr(log, "check_part"):  # file logs: every file of the parts whole (Kafka: read below)
        assert [log.check_part("s", p) for p in range(2)] == [[], []]
    assert part_rows(log_uri, 1) == list(range(10**6, 10**6 + 18004))


@pytest.mark.parametrize("version", ["2.0", "1.2"])
def test_a_folder_holding_more_than_the_published_part_stays_unless_the_part_was_renamed(log_uri, task, version):
    """On an object store a part is published by one put per segment, and into a log of another format version
    by copying its events, read from the winner's staging: a folder of a published partition that holds more
    events than the part shows (the winner still putting or copying) stays. On a local disk, a part of the
    staging's format version is published by one rename, so any folder of a published partition goes."""
    target = parse_stream_uri(log_uri, "s")
    opts = {} if log_uri.startswith("kafka://") else {"format": version}  # Kafka logs have one format version
    open_log(target.log_uri, **opts).create_stream(StreamHeader("s", 1, SCHEMA, "int64", "arrow"))
    fn = _TapPartition(target, JOB, 1, SCHEMA, TimeSpec.parse("t", SCHEMA), "arrow")
    dead_attempt(fn, 0, 0, [9000, 9000, 9000, 9000])  # four events staged, where the published part shows two
    list(task(fn, 0, 1, batches_of(0, [5])))
    assert part_rows(log_uri, 0) == list(range(5))
    renamed = "://" not in log_uri and version == "2.0"
    assert len(_attempt_folders(fn)) == (0 if renamed else 1)
