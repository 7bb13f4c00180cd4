"""Capture taps for Spark DataFrames: the rows pass through unchanged and are captured into a stream.

``tap(df, log_uri, stream)`` returns a DataFrame with ``df``'s rows and schema; when a job computes it,
each Spark partition is captured as one part of ``stream`` (peers = ``df``'s partition count): Messages
per time (``time=``: a literal time or a column), then a Progress that finishes the part. The tap is a
``mapInArrow`` stage: rows reach Python as Arrow batches and go back to Spark as the same batches.

**Partition count.** The stream's header (and its ``peers``) is written when ``tap`` is called, so the
partition count must be known then. When ``df`` has shuffles under adaptive query execution (AQE), which
picks the count at run time, ``tap`` runs the stages below the last shuffle right away and builds the
tapped DataFrame on their result: that work is not repeated when the job runs, and the count is exact.

**Re-execution — each part is published once.** Every task attempt captures into its own staging folder
and, having passed its *whole* partition through, publishes it at once as part ``p``
(``connectors.spark.staging``: a rename on a local disk; on S3 a copy of its segment objects whose first put is
a conditional create that exactly one attempt wins); an attempt that finds part ``p`` already published (a retried or
speculative task, or the same tapped DataFrame evaluated by a second action) passes its rows through and
keeps nothing. A task that fails, or whose output is not read to the end (``limit``, ``take``), discards its
staging; each attempt that publishes removes the staging that attempts of published partitions left (attempts
killed mid-partition, an executor lost), so the last partition's leaves no staging behind. So replay never sees
duplicates or partial parts. What the log holds is the rows of the *first*
complete evaluation of each partition: for deterministic jobs, exactly the rows of every evaluation.

**Where.** ``log_uri`` is a local folder (every executor must see it: one machine, or a shared disk) or an
object store URI (``s3://bucket/prefix``; the executors need the store's client settings, e.g.
``spark.executorEnv.AWS_ENDPOINT_URL`` and the keys): tasks stage and publish there, the driver reads only
headers, so executors need share no disk. On a Kafka log (``kafka://host:port/prefix``) each attempt stages
into a topic of its own below the prefix (``prefix..staging.<stream>.<job>.<attempt>.<stream>``), publishes by
copying the events through the part's writer, and the staging topics are deleted as on a file log.

**Streaming DataFrames** are captured per micro-batch: ``df.writeStream.format("eventlog")`` as the sink,
or, to keep your own sink, ``foreachBatch(tap_batches(log_uri, stream, then=your_function))``.
"""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING, Callable, Iterator, TypeVar

import pyarrow as pa

from eventlog.errors import EventLogError
from eventlog.header import StreamHeader
from eventlog.log import open_log

if TYPE_CHECKING:  # Spark and the data source load when a tap is made, not when ``capture`` is imported
    from pyspark.sql import DataFrame

    from connectors.spark.staging import PartStager
    from connectors.spark.times import TimeArg, TimeSpec
    from connectors.spark.uri import StreamURI


def tap(
    df: "DataFrame",
    log_uri: "str | os.PathLike[str]",
    stream: str,
    *,
    time: "TimeArg | None" = None,
    time_type: str | None = None,
    encoding: str = "arrow",
    replace: bool = False,
    engine: str | None = None,
    compression: str | None = None,
) -> "DataFrame":
    """``df`` with a capture tap: same rows, same schema; each partition becomes one part of ``stream`` in
    the log at ``log_uri`` when a job runs. ``time``: an int, a product time or a column name (default 0);
    ``time_type``: ``"product:K"`` for an ``array<bigint>`` time column. The stream must be new unless
    ``replace=True`` (file logs: the old stream is deleted). See the module doc for retries and AQE.

    ``engine`` (default ``$EVENTLOG_TAP_ENGINE``, else ``"auto"``): ``"auto"`` captures inside Spark's JVM where
    the JVM tap can (``connectors.spark.jvm``: a classic session of a supported Spark, file logs local or on S3,
    Arrow, columns Spark's ``ArrowWriter`` writes; no JDK needed, the package carries it prebuilt) and in Python
    workers otherwise, saying why once per process; ``"jvm"`` insists (``JvmTapUnavailable`` saying why where it
    cannot run); ``"python"`` always captures in Python workers (``mapInArrow``). Both write the same bytes.

    ``compression`` (recorded in the stream's header; FORMAT.md §13): ``"zstd"`` (default), ``"lz4"`` or
    ``"none"`` for Arrow, ``"deflate"`` (default), ``"zstandard"`` or ``"null"`` for Avro."""
    def in_jvm() -> "DataFrame":
        from connectors.spark.jvm import jvm_tap

        return jvm_tap(df, log_uri, stream, time=time, time_type=time_type, encoding=encoding, replace=replace,
                       compression=compression)

    tapped = _in_jvm(_engine(engine), in_jvm)
    if tapped is not None:
        return tapped
    from eventlog._extras import require

    require("pandas", "spark", "tap() (PySpark's mapInArrow)")
    from connectors.spark.schema import canonical_arrow_schema
    from connectors.spark.staging import StreamExistsError, remove_stream, stream_exists
    from connectors.spark.times import TimeSpec
    from connectors.spark.uri import parse_stream_uri

    if df.isStreaming:
        raise TypeError("tap() takes batch DataFrames; capture a streaming DataFrame with "
                        "writeStream.format('eventlog') or foreachBatch(tap_batches(...))")
    target = parse_stream_uri(os.fspath(log_uri), stream)
    schema = canonical_arrow_schema(df.schema, stream=stream)
    spec = TimeSpec.parse(time, schema, time_type)
    log = open_log(target.log_uri)
    if stream_exists(log, stream):
        if not replace:
            raise StreamExistsError(f"stream exists in {target.log_uri}; tap into a new stream name or pass "
                                    "replace=True", stream=stream)
        remove_stream(target)
    base, peers = _pinned(df)
    log.create_stream(StreamHeader(stream, max(peers, 1), schema, spec.time_type, encoding, compression=compression))
    if peers == 0:  # no partition, no task: the stream is one empty, finished part
        from eventlog.parts import Capture

        Capture(log, stream, 0, 1).close()
        return base
    return base.mapInArrow(_TapPartition(target, uuid.uuid4().hex, peers, schema, spec, encoding, compression),
                           df.schema)


ENGINE_ENV = "EVENTLOG_TAP_ENGINE"
"""Environment variable choosing ``tap()``'s engine when the call does not: ``auto`` (the default), ``jvm`` or
``python``."""
_said: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        import logging

        logging.getLogger("eventlog.tap").warning(message)


def _pinned(df: "DataFrame") -> "tuple[DataFrame, int]":
    """``df`` with a partition count that is fixed now, and that count."""
    from pyspark.sql import DataFrame

    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        raise TypeError("tap() needs a classic SparkSession (Spark Connect is not supported)")
    qe = jdf.queryExecution()
    rdd = qe.toRdd()  # for an adaptive plan this runs the stages below its last shuffle
    if qe.executedPlan().getClass().getSimpleName() != "AdaptiveSparkPlanExec":
        return df, rdd.getNumPartitions()
    spark = df.sparkSession
    pinned = spark._jsparkSession.internalCreateDataFrame(rdd, qe.analyzed().schema(), False)
    return DataFrame(pinned, spark), rdd.getNumPartitions()


class _TapPartition:
    """The function ``mapInArrow`` runs on each partition: pass batches through, capture, publish once."""

    def __init__(self, target: StreamURI, job: str, peers: int, schema: pa.Schema, time: TimeSpec,
                 encoding: str, compression: str | None = None) -> None:
        self.target, self.job, self.peers, self.schema, self.time, self.encoding = (
            target, job, peers, schema, time, encoding)
        self.compression = compression

    def _published(self, part: int) -> bool:
        return open_log(self.target.log_uri).part_stats(self.target.stream, part).next_seq > 1

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        from connectors.spark.staging import PartStager, publish, remove_tree, sweep_job

        ctx = TaskContext.get()
        if ctx is None:
            raise RuntimeError("a tap's partition function runs in a Spark task")
        part, attempt = ctx.partitionId(), ctx.attemptNumber()
        if part >= self.peers:
            raise EventLogError(f"the tapped DataFrame has more partitions than the {self.peers} the tap was "
                                "created with", stream=self.target.stream, part=part)
        if self._published(part):  # an earlier evaluation captured this partition
            yield from batches
            return
        stager: PartStager | None = None
        try:
            stager = PartStager(self.target, self.job, part, attempt, self.schema, self.time, self.encoding,
                                self.compression)
        except Exception as e:
            self._lost(None, part, e)  # published meanwhile: its sweep may have removed this staging under it
        try:
            for batch in batches:
                if stager is not None:
                    try:
                        stager.add(batch)
                    except Exception as e:
                        self._lost(stager, part, e)
                        stager = None
                yield batch
        except BaseException:  # the job's own failure, or GeneratorExit when Spark stops reading early
            if stager is not None:
                stager.discard()
            raise
        if stager is None:
            return
        try:
            staged = stager.finish()
            publish(staged.uri, self.target, part)  # False: another attempt published this partition first
        except Exception as e:
            self._lost(stager, part, e)
            return
        remove_tree(staged.uri)
        try:
            sweep_job(self.target, self.job)  # the last partition published removes what dead attempts left
        except Exception as e:  # noqa: BLE001 - tidying only: the log is complete either way
            _say_once(f"eventlog: could not remove the tap's staging folder ({e})")

    def _lost(self, stager: PartStager | None, part: int, error: Exception) -> None:
        """Capturing ``part`` failed with ``error``. If another attempt has published the partition (the last
        partition's attempt may have swept this one's staging away), drop the staging and let the rows pass on;
        otherwise raise ``error``: the log must not miss this partition."""
        if stager is not None:
            stager.discard()
        if not self._published(part):
            raise error


def tap_batches(
    log_uri: "str | os.PathLike[str]",
    stream: str,
    then: "Callable[[DataFrame, int], None] | None" = None,
    *,
    time: str | None = None,
    peers: int | None = None,
    encoding: str = "arrow",
    engine: str | None = None,
    retention: "str | float | None" = None,
    compression: str | None = None,
) -> "Callable[[DataFrame, int], None]":
    """A ``foreachBatch`` function that appends each micro-batch to ``stream`` (time = batch id, or the
    integer column ``time``), exactly once per batch id, then calls ``then(batch_df, batch_id)``.
    ``batch_df`` is computed twice unless ``then`` is None or you persist it. ``engine`` as for ``tap`` (default
    ``"auto"``): the JVM way stages each partition inside Spark's JVM (``connectors.spark.jvm.append_batch``);
    ``"auto"`` falls back to the Python writer where it cannot, saying why once. ``retention`` (an age: ``"7d"``) drops
    the stream's times complete longer ago than that, now and then, on the driver in the background
    (``eventlog.parts.retention_policy``). ``compression``: a new stream's codec, as for ``tap``."""
    from connectors.spark.uri import parse_stream_uri
    from eventlog.parts.retention_policy import RetentionPolicy

    target = parse_stream_uri(os.fspath(log_uri), stream)
    engine = _engine(engine)
    policy = RetentionPolicy(lambda: open_log(target.log_uri), stream, retention) if retention is not None else None

    def run(batch_df: "DataFrame", batch_id: int) -> None:
        from connectors.spark import register

        register(batch_df.sparkSession)
        def in_jvm() -> int:
            from connectors.spark.jvm import append_batch

            return append_batch(batch_df, log_uri, stream, batch_id, time=time, peers=peers, encoding=encoding,
                                compression=compression)

        if _in_jvm(engine, in_jvm) is None:
            writer = batch_df.write.format("eventlog").option("batchId", batch_id).option("encoding", encoding)
            if time is not None:
                writer = writer.option("time", time)
            if peers is not None:
                writer = writer.option("peers", peers)
            if compression is not None:
                writer = writer.option("compression", compression)
            writer.mode("append").save(target.uri)
        if policy is not None:
            policy.tick()
        if then is not None:
            then(batch_df, batch_id)

    return run


def _engine(engine: str | None) -> str:
    """The engine a tap runs with: ``engine``, else ``$EVENTLOG_TAP_ENGINE``, else ``"auto"`` (the fastest that
    works here: the JVM tap where it can run, the Python one otherwise)."""
    engine = engine or os.environ.get(ENGINE_ENV) or "auto"
    if engine not in ("python", "jvm", "auto"):
        raise ValueError(f"engine must be 'python', 'jvm' or 'auto', not {engine!r}")
    return engine


_T = TypeVar("_T")


def _in_jvm(engine: str, run: "Callable[[], _T]") -> "_T | None":
    """``run()`` (the JVM tap's way) where ``engine`` asks for it; None when the Python side must do the work:
    ``engine`` is ``"python"``, or ``"auto"`` where the JVM tap cannot run (said once per process)."""
    if engine == "python":
        return None
    from connectors.spark.jvm import JvmTapUnavailable

    try:
        return run()
    except JvmTapUnavailable as e:
        if engine == "jvm":
            raise
        _say_once(f"eventlog: the JVM tap cannot run here ({e.reason}); capturing in Python workers")
        return None


__all__ = ["tap", "tap_batches"]
