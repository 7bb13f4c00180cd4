"""The JVM side of the Spark connector: a tap that captures every row of a DataFrame inside Spark's JVM, and
a reader (``read_log``, ``connectors.spark.jvm.read``) that replays a stream into a DataFrame there, neither
with a Python worker. This module doc is about the tap; ``read``'s says what the reader reads and checks.

``jvm_tap(df, log_uri, stream, time=…, time_type=…)`` has the semantics of ``capture.tap.tap`` — same rows
and schema; each Spark partition becomes one part of ``stream`` (Messages per time, then the Progress that
finishes the part); each task attempt stages its part under ``<log>/.staging`` and the first attempt that
reads its whole partition publishes it by one atomic rename; the others keep nothing — but the rows never
leave the JVM: ``queryExecution().toRdd()`` → ``mapPartitionsWithIndex`` (Java, ``src/eventlog/spark``) →
``internalCreateDataFrame``. Rows become Arrow batches through Spark's own ``ArrowWriter`` and are written as
format 2.0 segments (FORMAT.md §3.4, §4.1), with their index (§3.2), exactly as the Python writer writes them.

**On S3** (``s3://`` file logs, any S3-protocol store): an attempt stages its part in the executor's Spark local
directory, and the attempt that reads its whole partition publishes it as ``staging.py`` publishes to object stores:
its sealed segments are put in sequence order, each followed by its index, the first by a conditional
``PutObject`` (``If-None-Match: *``) that exactly one of racing attempts wins (the others keep nothing; a
part already there is skipped at the task's start by a ``HeadObject``). A micro-batch's staged parts are put
below the log's ``.staging`` for the driver to append. The requests (``ObjectStore.java``: Signature Version 4,
retried on transport errors, 5xx, 429 and conflicts) use the endpoint, region and credentials the driver's S3
client resolved — the URI's query, else the standard AWS settings and credential chain — shipped with the
tasks, so executors need no settings of their own; temporary credentials must outlast the job. Path-style
requests go to an explicit endpoint, virtual-hosted ones (HTTPS) to AWS S3, except for a bucket with dots, which
goes path-style to ``s3.<region>.amazonaws.com`` (AWS's certificate does not cover it as a host). When AWS
answers that the bucket is in another region (a redirect, a malformed-authorization error), the task's error
names that region and how to set it (``AWS_REGION`` or the URI's ``?region=``).

**Where it runs, and where it does not.** File logs of format 2.x, local or on S3, the Arrow encoding, classic
(not Connect) sessions of the Spark versions in ``SUPPORTED_SPARK`` (with this package's prebuilt jar for that
minor, or a JDK on the driver to compile one), and columns whose Arrow type (the stream header's) Spark's
``ArrowWriter`` writes. Anything else raises :class:`JvmTapUnavailable`, naming why, *before anything is
written*, so that the caller can fall back to the Python tap (``engine="auto"``, the default, does).

**Building and loading.** The package carries the tap prebuilt for each Spark minor it supports
(``lib/eventlog-spark-<minor>.jar``, built with the package by ``build.py``: against Spark's artifacts from Maven
Central and against the installed pyspark's jars; no jar is committed), so no JDK is needed where the job runs.
``prepare(spark)`` (run by ``jvm_tap``) takes the jar of the running Spark's minor whose manifest says it was
built from the package's Java sources (``Eventlog-Source-Hash``). Only where there is none (another minor, or
sources edited since the build) does it compile them on first use against the installed pyspark (``javac
--release 17``, said once per process) into ``~/.cache/eventlog/jvm/<pyspark version>-<source
hash>/eventlog-spark-tap.jar`` (``$EVENTLOG_JVM_CACHE`` or ``$XDG_CACHE_HOME/eventlog/jvm`` instead;
``$EVENTLOG_JAVAC`` names the compiler); without a JDK there it raises :class:`JvmTapUnavailable`. It then adds the
jar to the running session: ``SparkContext.addJar`` ships it to executors (their task class loaders fetch it), and
the driver's context class loader — the ``MutableURLClassLoader`` spark-submit gives the py4j threads — gets its
URL, so py4j finds the classes. A session whose driver class loader cannot take URLs raises
:class:`JvmTapUnavailable`: start it with ``spark.jars=<the jar>`` then. ``python -m connectors.spark.jvm``
builds the installed pyspark's jar ahead of use (``--maven``: every prebuilt jar, as the package build does).

**Structured Streaming.** ``append_batch(batch_df, log_uri, stream, batch_id)`` (what
``tap_batches(…, engine="jvm")`` runs in ``foreachBatch``) appends a micro-batch with the semantics of the Python
writer's ``option("batchId", …)``: each task stages its partition in the JVM (``PartStage``), and the driver
appends the staged parts of the attempts Spark kept (``connectors/spark/write.py::append_micro_batch``: one
Messages event per part and time, then the Progress that moves the frontier past the batch; a re-executed batch
is written once).

**The tapped DataFrame's scan.** ``jvm_tap`` adds ``TapStrategy`` to the session's
``experimental.extraStrategies`` once: it plans the scan of the tap's RDD as ``TapScanExec``
(``EventlogTapScan`` in ``explain()``), which hands the tap's rows on as they are, where Spark's ``RDDScanExec``
would copy every row into a new ``UnsafeRow`` (the tap makes sure its rows are ``UnsafeRow`` s). Where the
strategy cannot be added, Spark's scan is used.

**Rows into Arrow.** Flat columns (booleans, integers, floats, dates, timestamps, strings, binaries) are written
by the tap's own ``RowWriter`` straight into the vectors' memory; decimals and nested types by Spark's
``ArrowWriter`` field writers. ``_time`` (int64 times) and ``_seq`` hold one value per event and are written as
zstd frames built directly (``ConstantFrame``), byte for byte the Python writer's (the values themselves in a stream
compressed with ``none``; the tap writes ``zstd`` and ``none``, not ``lz4``: ``TAP_COMPRESSIONS``).

Tested with pyspark 4.3.0 in local mode (``tests/spark/test_jvm_tap.py``, ``test_jvm_batches.py``,
``test_jvm_build.py``: the prebuilt jar, no JDK) and on a standalone cluster (``tests/test_cluster_spark.py``); the
prebuilt 4.2 jar was run by hand on pyspark 4.2.0 with no JDK (the default tap and reader, the log equal to the
Python tap's).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import uuid
from typing import TYPE_CHECKING

from eventlog.errors import EventLogError

from . import build as _build

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from connectors.spark.uri import StreamURI

SUPPORTED_SPARK = ("4.2", "4.3")
"""``major.minor`` of the Spark versions the JVM tap is built for (it uses Spark's internal ``ArrowWriter``,
``QueryExecution.toRdd`` and ``classic.SparkSession.internalCreateDataFrame``; ``build.MAVEN_SPARK`` says why not
4.0, 4.1 or 3.5). Others raise :class:`JvmTapUnavailable`."""

EVENT_ROWS = 65536
"""Records of one Messages event at most (fewer once a time's buffered Arrow data reaches ``EVENT_BYTES``)."""
EVENT_BYTES = 16 << 20
"""Buffered Arrow bytes of one time at which its records are written as one event."""

SEGMENT_BYTES: "int | None" = None
"""Segment size at which a staged part's segment is sealed and the next one started (None: the file log's
default, ``DEFAULT_SEGMENT_BYTES``, as the Python tap's staging log)."""

TAP_COMPRESSIONS = (None, "zstd", "none")
"""The compressions the JVM tap writes (None: the default, zstd). Not ``lz4``: pyarrow writes LZ4 frames of linked
64 KiB blocks, which the LZ4 library Spark ships (lz4-java: independent blocks only) cannot reproduce, and the two
taps write byte-identical logs."""

JAR_NAME = "eventlog-spark-tap.jar"
"""The file name of a jar compiled on first use (in ``<cache>/<pyspark version>-<source hash>/``)."""
SOURCES = _build.SOURCES
LIB = _build.LIB
"""The folder of the prebuilt jars (``eventlog-spark-<minor>.jar``)."""
_lock = threading.Lock()


class JvmTapUnavailable(EventLogError):
    """The JVM tap cannot capture this DataFrame here (no JDK, an unsupported Spark version, a log, encoding
    or column type it does not write): nothing was written; use the Python tap (``capture.tap``)."""


# -- building --------------------------------------------------------------------------------------------


def source_hash() -> str:
    """A hash of the Java sources (names and contents): a change makes a new build. Computed once per
    process, so that sources edited while a session runs do not make its loaded build look stale."""
    global _hash
    if _hash is None:
        _hash = _build.source_hash()
    return _hash


_hash: "str | None" = None


def _pyspark() -> tuple[str, str]:
    """``(version, jars folder)`` of the installed pyspark (JvmTapUnavailable without one)."""
    try:
        import pyspark
    except ImportError:
        raise JvmTapUnavailable("pyspark is not installed") from None
    found = _build.pyspark_jars()
    if found is None:
        raise JvmTapUnavailable(f"pyspark {pyspark.__version__} has no jars folder to compile against")
    return found


def check_spark_version(version: str) -> None:
    """JvmTapUnavailable unless Spark ``version`` (``"4.3.0"``) is one the JVM tap supports."""
    if _build.minor_of(version) not in SUPPORTED_SPARK:
        raise JvmTapUnavailable(f"Spark {version} is not supported by the JVM tap (it uses Spark internals; "
                                f"supported: {', '.join(SUPPORTED_SPARK)})")


def cache_dir() -> str:
    """Where jars compiled on first use are kept (outside the repository)."""
    explicit = os.environ.get("EVENTLOG_JVM_CACHE")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "eventlog", "jvm")


def find_javac() -> str:
    """The Java compiler: ``$EVENTLOG_JAVAC``, ``$JAVA_HOME/bin/javac`` or ``javac`` on the PATH."""
    try:
        return _build.find_javac()
    except _build.BuildError as e:
        raise JvmTapUnavailable(str(e)) from None


def jar_path(*, javac: str | None = None, cache: str | None = None) -> str:
    """The JVM tap's jar compiled against the installed pyspark in the cache (:func:`cache_dir`), compiled now
    if not built yet (JvmTapUnavailable when it cannot be: no JDK, or sources that do not compile against this
    Spark). :func:`prepare` uses it only where the package carries no up-to-date prebuilt jar for the Spark."""
    version, jars = _pyspark()
    digest = source_hash()
    jar = os.path.join(cache or cache_dir(), f"{version}-{digest}", JAR_NAME)
    if os.path.isfile(jar):
        return jar
    with _lock:
        if os.path.isfile(jar):
            return jar
        try:
            return _build.compile_jar(jar, [os.path.join(jars, "*")], version, javac=javac or find_javac())
        except _build.BuildError as e:
            raise JvmTapUnavailable(str(e)) from None


def prebuilt_jar(spark_version: str) -> str:
    """The prebuilt jar this package carries for the Spark minor of ``spark_version`` (``lib/eventlog-spark-
    <minor>.jar``, built from Spark's artifacts when the package was built). JvmTapUnavailable, saying why, when
    there is none for this minor or it was built from other Java sources than the package's (a developer's
    edit): :func:`prepare` then compiles one on first use."""
    minor = _build.minor_of(spark_version)
    jar = os.path.join(LIB, _build.prebuilt_name(minor))
    info = _build.jar_info(jar) if os.path.isfile(jar) else None
    if info is None or info.spark_minor != minor:
        have = sorted(n[len("eventlog-spark-"):-len(".jar")] for n in _listdir(LIB)
                      if n.startswith("eventlog-spark-") and n.endswith(".jar"))
        raise JvmTapUnavailable(f"this install carries no prebuilt JVM tap for Spark {minor} (it has "
                                f"{', '.join(have) or 'none'})")
    if info.source_hash != source_hash():
        raise JvmTapUnavailable(f"the prebuilt JVM tap for Spark {minor} was built from other Java sources "
                                f"({info.source_hash}; the sources are {source_hash()})")
    return jar


def installed_jar(*, javac: str | None = None) -> str:
    """The jar to run with the installed pyspark: the prebuilt one for its Spark minor, else one compiled now (a JDK
    needed; said once); JvmTapUnavailable saying why neither. What ``spark.jars`` names for capture by
    configuration (``connectors.spark.plan_capture.capture_conf``)."""
    version, _ = _pyspark()
    return _jar_for(version, javac)


def _listdir(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _jar_for(spark_version: str, javac: str | None) -> str:
    """The jar for a session of Spark ``spark_version``: the prebuilt one for its minor, else one compiled now
    against the installed pyspark (said once per process), else JvmTapUnavailable saying why neither."""
    try:
        return prebuilt_jar(spark_version)
    except JvmTapUnavailable as e:
        why = e.reason
    try:
        installed, _ = _pyspark()
        if _build.minor_of(installed) != _build.minor_of(spark_version):
            raise JvmTapUnavailable(f"the session runs Spark {spark_version} but pyspark {installed} is installed "
                                    "(it compiles against the installed pyspark's jars)")
        jar = jar_path(javac=javac)
    except JvmTapUnavailable as e:
        raise JvmTapUnavailable(f"{why}, and it cannot be compiled here: {e.reason}") from None
    _say_once(f"eventlog: {why}; using one compiled on first use ({jar})")
    return jar


_said: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        logging.getLogger("eventlog.jvm").warning(message)


# -- loading into a session ------------------------------------------------------------------------------


def prepare(spark: "SparkSession", *, javac: str | None = None) -> object:
    """Check the session's Spark version, find its jar (the prebuilt one for its minor, else compiled now) and
    load it into ``spark`` (once per session); returns the py4j view of ``eventlog.spark.JvmTap``.
    JvmTapUnavailable when any step fails."""
    jss = getattr(spark, "_jsparkSession", None)
    if jss is None:
        raise JvmTapUnavailable("the JVM tap needs a classic SparkSession (Spark Connect is not supported)")
    check_spark_version(spark.version)
    jar = _jar_for(spark.version, javac)
    sc = spark.sparkContext
    jvm = sc._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    name = "eventlog.spark.JvmTap"
    if getattr(sc, "_eventlog_jvm_jar", None) != jar:
        try:
            cls = jvm.java.lang.Class.forName(name, True, loader)
        except Exception:  # noqa: BLE001 - py4j raises Py4JJavaError (ClassNotFoundException): not loaded yet
            cls = None
        if cls is None:
            try:
                url = jvm.java.io.File(jar).toURI().toURL()
                loader.addURL(url)  # MutableURLClassLoader (spark-submit's): the driver and py4j see the classes
            except Exception as e:  # noqa: BLE001 - a loader without addURL
                raise JvmTapUnavailable(f"cannot add the JVM tap's jar to the driver's class loader ({e}); start "
                                        f"the session with spark.jars={jar}") from None
        sc._jsc.addJar(jar)  # executors fetch it with their next tasks
        sc._eventlog_jvm_jar = jar
    try:
        built = jvm.eventlog.spark.JvmTap.build()
    except Exception as e:  # noqa: BLE001
        raise JvmTapUnavailable(f"the JVM tap's classes do not load in this session: {e}") from None
    if built != source_hash():
        raise JvmTapUnavailable(f"another build of the JVM tap ({built}) is loaded in this JVM; restart the session "
                                "to load the current one")
    return jvm.eventlog.spark.JvmTap


# -- the tap ---------------------------------------------------------------------------------------------


def jvm_tap(
    df: "DataFrame",
    log_uri: "str | os.PathLike[str]",
    stream: str,
    *,
    time: object = None,
    time_type: str | None = None,
    encoding: str = "arrow",
    replace: bool = False,
    compression: str | None = None,
) -> "DataFrame":
    """``capture.tap.tap`` run inside the JVM: ``df`` with a capture tap (same rows, same schema); each
    partition becomes one part of ``stream`` in the file log at ``log_uri`` (local or S3) when a job runs. Raises
    JvmTapUnavailable, having written nothing, where it cannot (see the module doc); the errors of the Python
    tap (a streaming DataFrame, an existing stream, a bad time) otherwise."""
    from pyspark.sql import DataFrame

    planned = _plan_tap(df, log_uri, stream, time=time, time_type=time_type, encoding=encoding, replace=replace,
                        compression=compression)
    if planned is None:  # no partition, no task: the stream is one empty, finished part
        return df
    jtap, rdd, tap_spec = planned
    spark = df.sparkSession
    jds = jtap.tap(spark._jsparkSession, rdd, df._jdf.queryExecution().analyzed().schema(), tap_spec)
    return DataFrame(jds, spark)


@dataclasses.dataclass(frozen=True)
class _Checked:
    """What the JVM tap checked it can write, and where."""

    target: "object"
    log: "object"
    schema: "object"
    time: "object"
    header: "object"
    segment_schema: bytes
    jtap: "object"
    root: str
    """The log's root folder (local), or its key prefix in the bucket (S3)."""
    store: "tuple[str, ...] | None"
    """``(endpoint, region, bucket, access key, secret key, session token)`` of a log on S3, else None."""


def _check(df: "DataFrame", log_uri: "str | os.PathLike[str]", stream: str, *, time: object,
           time_type: str | None, encoding: str, compression: str | None = None) -> _Checked:
    """Check that the JVM tap can capture ``df`` into ``stream`` (JvmTapUnavailable, saying why, if not),
    loading the tap's classes into the session."""
    from connectors.spark.schema import canonical_arrow_schema
    from connectors.spark.times import TimeSpec
    from connectors.spark.uri import parse_stream_uri
    from eventlog.encoding.arrow_file import ArrowFileCodec
    from eventlog.header import StreamHeader
    from eventlog.log import open_log

    if encoding != "arrow":
        raise JvmTapUnavailable(f"the JVM tap writes the arrow encoding, not {encoding!r}", stream=stream)
    if compression not in TAP_COMPRESSIONS:
        raise JvmTapUnavailable(f"the JVM tap compresses with {' or '.join(c or 'zstd' for c in TAP_COMPRESSIONS)}, not "
                                f"{compression!r} (its LZ4 frames would not be byte for byte the Python tap's)",
                                stream=stream)
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        raise JvmTapUnavailable("the JVM tap needs a classic SparkSession (Spark Connect is not supported)")
    target = parse_stream_uri(os.fspath(log_uri), stream)
    _check_place(target, JvmTapUnavailable, "the JVM tap writes")
    log = open_log(target.log_uri)
    root, store = _where(target, log, stream)
    version = getattr(log, "format_version", None)
    if version is None or version[0] != 2:
        raise JvmTapUnavailable(f"the JVM tap writes format 2.x file logs; this log creates streams of format "
                                f"{version}", stream=stream)
    schema = canonical_arrow_schema(df.schema, stream=stream)
    spec = TimeSpec.parse(time, schema, time_type)
    header = dataclasses.replace(StreamHeader(stream, 1, schema, spec.time_type, encoding, compression=compression),
                                 version=version)
    codec = ArrowFileCodec(header)  # SchemaMismatchError for a _time/_seq column, as the Python tap's create
    segment_schema = codec.schema.serialize().to_pybytes()
    jtap = prepare(df.sparkSession)
    why = jtap.unsupported(bytearray(segment_schema), jdf.schema())
    if why is not None:
        raise JvmTapUnavailable(f"the JVM tap cannot capture this DataFrame: {why}", stream=stream)
    return _Checked(target, log, schema, spec, header, segment_schema, jtap, root, store)


def _check_place(target: "StreamURI", error: type, says: str) -> None:
    """``error`` (JvmTapUnavailable or a subclass), beginning with ``says``, unless ``target``'s log is a local
    file log or on S3."""
    uri = target.log_uri
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if not target.is_local and scheme not in ("s3", "s3a"):
        raise error(f"{says} local file logs and file logs on S3, not {uri.split('?')[0]}", stream=target.stream)


def _where(target: "StreamURI", log: "object", stream: str) -> "tuple[str, tuple[str, ...] | None]":
    """The log's root and, on S3, the store settings the tasks use: the endpoint, region and credentials this
    process's S3 client resolved (the URI's query, else the standard AWS settings and credential chain),
    shipped with the tasks."""
    from connectors.files.storage import S3Storage

    if target.is_local:
        return target.local_root, None
    st = getattr(log, "_st", None)
    if not isinstance(st, S3Storage):
        raise JvmTapUnavailable(f"the JVM tap writes file logs on S3, not {type(st).__name__}", stream=stream)
    bucket, _, prefix = log.root.strip("/").partition("/")
    st.check_fencing(log.root.strip("/"))  # the tasks publish with conditional puts: only where the store honours them
    endpoint, region, access, secret, token = st.resolved()
    return prefix.strip("/"), (endpoint, region, bucket, access, secret, token)


def _tap_spec(df: "DataFrame", c: _Checked, job: str, peers: int, staged_header: str) -> object:
    """The ``TapSpec`` the tasks capturing ``df`` as ``c`` says run with."""
    from connectors.files.log import DEFAULT_SEGMENT_BYTES

    spec = c.time
    literal = "" if spec.literal is None else ",".join(
        str(x) for x in (spec.literal if isinstance(spec.literal, tuple) else (spec.literal,)))
    column = -1 if spec.column is None else c.schema.get_field_index(spec.column)
    fsync = c.store is None  # on S3 a put is durable once it returns
    return df.sparkSession.sparkContext._jvm.eventlog.spark.TapSpec(
        c.root, c.target.stream, job, peers, bytearray(c.segment_schema), bytearray(staged_header),
        column, spec.time_type.arity, literal, SEGMENT_BYTES or DEFAULT_SEGMENT_BYTES, EVENT_ROWS, EVENT_BYTES,
        fsync, _java_strings(df.sparkSession, c.store), c.header.arrow_compression)


def _java_strings(spark: "SparkSession", values: "tuple[str, ...] | None") -> object:
    """``values`` as a Java ``String[]`` (None stays null)."""
    if values is None:
        return None
    sc = spark.sparkContext
    out = sc._gateway.new_array(sc._jvm.java.lang.String, len(values))
    for i, v in enumerate(values):
        out[i] = v
    return out


def _plan_tap(df: "DataFrame", log_uri: "str | os.PathLike[str]", stream: str, *, time: object,
              time_type: str | None, encoding: str, replace: bool,
              compression: str | None = None) -> "tuple[object, object, object] | None":
    """Check that the JVM tap can capture ``df``, create the stream, and return the JVM tap class, the plan's
    RDD and the ``TapSpec`` its tasks run with (None: the RDD has no partition, the stream is finished)."""
    from connectors.spark.staging import StreamExistsError, remove_stream, stream_exists

    if df.isStreaming:
        raise TypeError("tap() takes batch DataFrames; capture a streaming DataFrame with "
                        "writeStream.format('eventlog') or foreachBatch(tap_batches(...))")
    c = _check(df, log_uri, stream, time=time, time_type=time_type, encoding=encoding, compression=compression)
    log = c.log
    # from here on as capture.tap.tap: the stream, the pinned partition count, the header
    if stream_exists(log, stream):
        if not replace:
            raise StreamExistsError(f"stream exists in {c.target.log_uri}; tap into a new stream name or pass "
                                    "replace=True", stream=stream)
        remove_stream(c.target)
    rdd = df._jdf.queryExecution().toRdd()  # for an adaptive plan this runs the stages below its last shuffle
    peers = rdd.getNumPartitions()
    created = log.create_stream(dataclasses.replace(c.header, peers=max(peers, 1), created=""))
    if peers == 0:  # no partition, no task: the stream is one empty, finished part
        from eventlog.parts import Capture

        Capture(log, stream, 0, 1).close()
        return None
    staged = dataclasses.replace(created, peers=1, created="").to_json()
    return c.jtap, rdd, _tap_spec(df, c, uuid.uuid4().hex, peers, staged)


def append_batch(batch_df: "DataFrame", log_uri: "str | os.PathLike[str]", stream: str, batch_id: int, *,
                 time: str | None = None, peers: int | None = None, encoding: str = "arrow",
                 compression: str | None = None) -> int:
    """Append ``batch_df`` (a micro-batch handed to ``foreachBatch``) to the open ``stream`` as micro-batch
    ``batch_id``, with the semantics of ``write.format("eventlog").option("batchId", …)``
    (``connectors/spark/write.py``: time = the batch id or the int64 column ``time``, exactly once per batch
    id, the stream left open), the rows captured inside the JVM: each task stages its partition, the driver
    appends the staged parts of the attempts Spark kept. Returns the records written. JvmTapUnavailable
    (nothing written) where the JVM tap cannot run."""
    from connectors.spark.staging import StagedPart, remove_tree, stream_exists
    from connectors.spark.uri import staging_uri
    from connectors.spark.write import append_micro_batch, check_micro_batch_time, committed_parts

    if batch_df.isStreaming:
        raise TypeError("append_batch() takes the batch DataFrame foreachBatch hands over")
    c = _check(batch_df, log_uri, stream, time=time, time_type=None, encoding=encoding, compression=compression)
    check_micro_batch_time(c.time)
    if stream_exists(c.log, stream):  # refused before any task runs, as the commit would refuse it
        stored = c.log.header(stream)
        if not stored.schema.equals(c.header.schema, check_metadata=False):  # the Python writer records the change
            raise JvmTapUnavailable("the micro-batch's schema is not the stream's: the Python writer records the "
                                    "change (FORMAT.md §12) or refuses it", stream=stream)
        stored.check_same(dataclasses.replace(c.header, peers=stored.peers, version=stored.version))
    rdd = batch_df._jdf.queryExecution().toRdd()
    job = uuid.uuid4().hex
    staged_header = dataclasses.replace(c.header, peers=1, created="").to_json()
    try:
        if rdd.getNumPartitions() == 0:
            staged = []
        else:
            lines = c.jtap.stage(rdd, _tap_spec(batch_df, c, job, rdd.getNumPartitions(), staged_header))
            staged = []
            for line in lines:
                part, attempt, rows, folder = str(line).split("\t", 3)
                staged.append(StagedPart(partition=int(part), attempt=int(attempt), rows=int(rows),
                                         uri=staging_uri(c.target, job, folder)))
            staged = committed_parts(staged, c.target)  # one per partition, in order (Spark kept one attempt each)
        return append_micro_batch(c.target, staged, int(batch_id), c.schema, c.time, encoding, peers,
                                  compression=compression)
    finally:
        remove_tree(staging_uri(c.target, job))


def available(spark: "SparkSession") -> "str | None":
    """None when the JVM tap can run in ``spark`` (building and loading it now if needed), else why not."""
    try:
        prepare(spark)
    except JvmTapUnavailable as e:
        return e.reason
    return None


__all__ = ["EVENT_BYTES", "EVENT_ROWS", "LIB", "SUPPORTED_SPARK", "TAP_COMPRESSIONS", "JvmTapUnavailable", "append_batch",
           "available", "check_spark_version", "installed_jar", "jar_path", "jvm_tap", "prebuilt_jar", "prepare",
           "source_hash"]


from .read import JvmReadUnavailable, read_log  # noqa: E402 - the JVM batch reader builds on the above

__all__ += ["JvmReadUnavailable", "read_log"]
