"""The JVM-side batch reader: a stream of a file log (local or on S3) as a DataFrame, read inside Spark's JVM.

``read_log(spark, uri, engine=…, **options)`` gives what ``spark.read.format("eventlog").options(**options)
.load(uri)`` gives — the same rows, the stream's columns then ``_time``, ``_part``, ``_seq``, the same schema,
one Spark partition per replay worker (assign mode: worker ``j`` reads the parts ``i % workers == j``),
records only at times complete at the merged frontier planned on the driver (all committed ones with
``incomplete``) — but no Python worker runs: each task (``src/eventlog/spark/JvmRead.java``, ``PartRead``,
``PartBatches``) reads its parts' sealed segments (memory-mapped; on S3 each segment object is first copied into
the executor's Spark local directory by a ``GetObject``, the part's folder listed with ``ListObjectsV2``, with
the endpoint and credentials the driver resolved, as the tap's), makes the checks the Python file reader makes,
in its order (index headers, entry checksums and chain, the Arrow framing where the index has no entry, every
body's CRC-32, every IPC message bounded before anything is allocated for it and verified as pyarrow verifies
it, the sequence id, kind, write time and time or updates of every event, timely's progress rules, every
Messages event decoded and validated as pyarrow's full validation does — delivered or not —, the footer,
segment prefixes, writer epochs and continuity, ``_time``/``_seq`` columns), applies the committed view of
FORMAT.md §1.1 (void messages of an ended incarnation dropped, the held suffix not delivered), and hands Spark
the decoded Arrow vectors (``ArrowColumnVector``) through ``internalCreateDataFrame``. A damaged log fails the
job with ``CorruptLogException`` whose message starts with the Python reader's error for the same damage
(``CorruptLogError:`` / ``LogLimitError:`` / ``UnsupportedVersionError:`` / ``SequenceError:`` /
``ProgressError:``) and names the same file, with stream, part, seq and byte offset; no row of a damaged event
is returned. ``tests/spark/test_conformance.py`` holds both readers to that on one corpus of good and damaged
logs (``tools/conformance_corpus.py``). A sealed segment (FORMAT.md §3.4) is whole, the newest one too: one cut
short is damage here, also where the Python reader still reads it as a torn tail (cut inside its prefix).

**What it reads.** File logs of format 2.x, local or on S3, the Arrow encoding (zstd, LZ4 frames or uncompressed:
FORMAT.md §13), sealed segments only (a part with an
open segment — a live writer — or a crashed writer's unsealed one is read by the Python reader), assign mode
without ``since``/``until``, columns whose stored Arrow type Spark's Arrow reader reads as the type the
Python reader gives (timestamps in microseconds, …). Anything else raises :class:`JvmReadUnavailable` at
planning, naming why, so ``engine="auto"`` falls back to the Python reader (saying why once per process).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from . import JvmTapUnavailable, _check_place, _java_strings, _where, prepare

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ENGINES = ("python", "jvm", "auto")
ENGINE_ENV = "EVENTLOG_READ_ENGINE"
"""Environment variable choosing ``read_log``'s engine when the call does not (default ``auto``)."""

_said: set[str] = set()


class JvmReadUnavailable(JvmTapUnavailable):
    """The JVM reader cannot read this stream here (see the module doc); the Python reader can."""


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        logging.getLogger("eventlog.read").warning(message)


def _options(uri: str, stream: str | None, options: dict[str, Any]) -> dict[str, str]:
    out = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items() if v is not None}
    out["path"] = os.fspath(uri)
    if stream is not None:
        out["stream"] = stream
    return out


def read_log(spark: "SparkSession", uri: "str | os.PathLike[str]", stream: str | None = None, *,
             engine: str | None = None, **options: Any) -> "DataFrame":
    """The stream at ``uri`` (a stream URI, or a log URI with ``stream``) as a DataFrame, with the options of
    ``spark.read.format("eventlog")`` (``workers``, ``mode``, ``key``, ``since``, ``until``, ``incomplete``).
    ``engine`` (default ``$EVENTLOG_READ_ENGINE``, else ``"auto"``): ``"auto"`` is the JVM reader where it can
    read the stream, else the data source, saying why once per process; ``"jvm"`` the JVM reader
    (``JvmReadUnavailable`` where it cannot read the stream); ``"python"`` the data source."""
    engine = engine or os.environ.get(ENGINE_ENV) or "auto"
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
    opts = _options(os.fspath(uri), stream, options)
    if engine != "python":
        try:
            return jvm_read(spark, opts)
        except JvmTapUnavailable as e:
            if engine == "jvm":
                raise
            _say_once(f"eventlog: the JVM reader cannot read this stream ({e.reason}); reading in Python workers")
    return spark.read.format("eventlog").options(**opts).load()


def jvm_read(spark: "SparkSession", options: dict[str, str]) -> "DataFrame":
    """The JVM reader (``read_log(engine="jvm")``) over data-source ``options`` (``path`` included)."""
    from pyspark.sql import DataFrame

    from connectors.spark import frontier as fr
    from connectors.spark.options import ReadOptions
    from connectors.spark.schema import read_schema
    from eventlog.encoding.arrow_file import ArrowFileCodec
    from eventlog.log import open_log

    opts = ReadOptions.parse(options)
    target = opts.target
    stream = target.stream
    if getattr(spark, "_jsparkSession", None) is None:
        raise JvmReadUnavailable("the JVM reader needs a classic SparkSession (Spark Connect is not supported)")
    _check_place(target, JvmReadUnavailable, "the JVM reader reads")
    if opts.mode != "assign":
        raise JvmReadUnavailable(f"the JVM reader plans assign mode only, not mode={opts.mode!r}", stream=stream)
    if opts.since is not None or opts.until is not None:
        raise JvmReadUnavailable("the JVM reader does not apply since/until", stream=stream)
    log = open_log(target.log_uri)
    header = log.header(stream)
    if header.version[0] != 2:
        raise JvmReadUnavailable(f"the JVM reader reads streams of format 2.x, not {header.version[0]}."
                                 f"{header.version[1]}", stream=stream)
    if header.encoding != "arrow":
        raise JvmReadUnavailable(f"the JVM reader reads the arrow encoding, not {header.encoding!r}", stream=stream)
    if log.retention(stream) is not None:  # FORMAT.md §10: its parts start at their cuts
        raise JvmReadUnavailable("the JVM reader does not read trimmed streams (a retention mark)", stream=stream)
    if log.schema_history(stream) is not None:  # FORMAT.md §12: segments of several schemas
        raise JvmReadUnavailable("the JVM reader does not read streams whose schema changed", stream=stream)
    root, store = _where(target, log, stream)
    stream_dir = os.path.join(root, stream) if store is None else "/".join(x for x in (root, stream) if x)
    st = log._st  # type: ignore[attr-defined]
    for part in range(header.peers):
        try:
            names = st.list_dir(log.part_path(stream, part))  # type: ignore[attr-defined]
        except FileNotFoundError:
            names = []
        unsealed = [n for n in names if n.endswith(".open")]
        if unsealed:
            raise JvmReadUnavailable(f"part {part} has a segment not sealed yet ({unsealed[0]}: a live or crashed "
                                     "writer), which only the Python reader reads", stream=stream)
        compacted = [n for n in names if "-" in n.lstrip("_").split(".")[0]]  # FORMAT.md §11: <first>-<last>.arrow
        if compacted:
            raise JvmReadUnavailable(f"part {part} has a compacted segment ({compacted[0]}, format 2.1), which only the "
                                     "Python reader reads", stream=stream)
    schema = read_schema(header)
    segment_schema = ArrowFileCodec(header).schema.serialize().to_pybytes()
    prepare(spark)  # builds and loads the jar (the tap's and the reader's classes)
    jread = spark.sparkContext._jvm.eventlog.spark.JvmRead
    jss = spark._jsparkSession
    jschema = jss.parseDataType(schema.json())
    why = jread.unsupported(bytearray(segment_schema), jschema)
    if why is not None:
        raise JvmReadUnavailable(f"the JVM reader cannot read this stream: {why}", stream=stream)
    workers = opts.workers or header.peers
    if opts.incomplete:
        frontier = ""
    else:
        f = fr.merged_frontier(log, stream)
        frontier = ";".join(str(t) if isinstance(t, int) else ",".join(str(c) for c in t) for t in fr.to_json(f))
    spec = spark.sparkContext._jvm.eventlog.spark.ReadSpec(
        stream_dir, stream, header.peers, workers, bytearray(segment_schema), header.time_type.arity, frontier,
        bool(opts.incomplete), _java_strings(spark, store))
    return DataFrame(jread.read(jss, spec, jschema), spark)


__all__ = ["ENGINES", "ENGINE_ENV", "JvmReadUnavailable", "jvm_read", "read_log"]
