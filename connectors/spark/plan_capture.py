"""Capture by configuration: the Spark settings that capture a query's physical operators without touching its
code, and the captured plans read back (what ``replay plan`` prints).

With the package's jar in ``spark.jars``, ``spark.sql.extensions=eventlog.spark.CaptureExtension`` and
``spark.eventlog.capture.dir`` set, each SQL execution's chosen operators are captured by the JVM tap's code
(``connectors/spark/jvm``, ``CaptureRule.java``): every Spark partition of an operator's output is one part of
the stream ``<query>.<id>-<operator>`` (time 0, exactly once across retried and speculative tasks), and the
query's physical plan — operators, ids, children, the stream holding each output — is the JSON document
``<log>/_plans/<query>.json`` (FORMAT.md §14). ``capture_conf`` returns the settings (``python -m connectors.spark.plan_capture LOG`` prints them as
``spark-submit`` options); ``plan_names`` /
``read_plan`` read the documents back with each captured stream's row count and frontier. See
docs/spark_capture.md.
"""

from __future__ import annotations

import dataclasses
import json
import os
import urllib.parse
from typing import TYPE_CHECKING, Any

from connectors.files.log import FileLog
from eventlog.antichain import Antichain
from eventlog.errors import CorruptLogError, EventLogError, StreamNotFoundError
from eventlog.events import Messages
from eventlog.log import Log, open_log
from eventlog.parts import CheckedPart

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EXTENSION = "eventlog.spark.CaptureExtension"
"""The class ``spark.sql.extensions`` names to turn capture by configuration on."""
PLANS_DIR = "_plans"
"""The folder of a log that holds the plan documents (``<query>.json``)."""
PLAN_FORMAT = "eventlog-plan"
OPERATOR_MODES = ("all", "exchanges")
_MAX_PLAN_BYTES = 64 << 20


class PlanNotFoundError(EventLogError, KeyError):
    """The log holds no captured plan (of that query)."""


def capture_conf(log: "str | os.PathLike[str]", *, operators: str = "exchanges", query: str | None = None,
                 jar: str | None = None) -> dict[str, str]:
    """The Spark settings that capture the chosen ``operators`` (``all``, ``exchanges``, or a comma-separated list
    of ``exchanges``, operator names or types and plan ids) of every query into the file log ``log`` (a local or
    shared-disk path or ``file://`` URI; or ``s3://bucket/prefix`` for batch queries, the store's endpoint and
    credentials then ``spark.eventlog.capture.s3.*``, the ``spark.hadoop.fs.s3a.*`` settings or the driver's AWS
    environment: docs/spark_capture.md); ``query`` names the queries' streams (default ``q1``, ``q2``, …).
    ``jar`` defaults to the JVM tap's jar for the installed pyspark (``connectors.spark.jvm.installed_jar``: the
    package's prebuilt one, else one compiled on first use)."""
    root = os.fspath(log) if _on_s3(os.fspath(log)) else _local_root(os.fspath(log))
    if jar is None:
        from connectors.spark.jvm import installed_jar

        jar = installed_jar()
    conf = {
        "spark.jars": jar,
        "spark.sql.extensions": EXTENSION,
        "spark.eventlog.capture.enabled": "true",
        "spark.eventlog.capture.dir": root,
        "spark.eventlog.capture.operators": operators,
    }
    if query is not None:
        conf["spark.eventlog.capture.query"] = query
    return conf


def capture_session(spark: "SparkSession", log: "str | os.PathLike[str]", *, operators: str = "exchanges",
                    query: str | None = None) -> "SparkSession":
    """A new session on ``spark``'s SparkContext with the capture extension and settings (for a running
    application that did not start with ``spark.sql.extensions``); ``spark`` stays the default session. Loads
    the JVM tap's jar into the application first (``connectors.spark.jvm.prepare``)."""
    from pyspark.sql import SparkSession

    from connectors.spark.jvm import prepare

    prepare(spark)
    jvm: Any = spark.sparkContext._jvm
    builder = (jvm.org.apache.spark.sql.classic.SparkSession.builder()
               .sparkContext(spark.sparkContext._jsc.sc())  # type: ignore[union-attr]
               .withExtensions(jvm.eventlog.spark.CaptureExtension()))
    static = jvm.org.apache.spark.sql.internal.SQLConf.isStaticConfigKey
    for key, value in spark.conf.getAll.items():  # the caller's runtime SQL settings carry over
        if key.startswith("spark.sql.") and not static(key):
            builder = builder.config(key, value)
    for key, value in capture_conf(log, operators=operators, query=query, jar="").items():
        if key.startswith("spark.eventlog."):
            builder = builder.config(key, value)
    jsession = builder.create()
    default = jvm.org.apache.spark.sql.classic.SparkSession.getDefaultSession()
    active = jvm.org.apache.spark.sql.classic.SparkSession.getActiveSession()
    session = SparkSession(spark.sparkContext, jsession)
    # pyspark's constructor makes the new session the default one: the caller's stays it
    if default.isDefined():
        jvm.org.apache.spark.sql.classic.SparkSession.setDefaultSession(default.get())
    if active.isDefined():
        jvm.org.apache.spark.sql.classic.SparkSession.setActiveSession(active.get())
    SparkSession._instantiatedSession = spark
    SparkSession._activeSession = spark
    return session


# -- reading captured plans ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StreamSummary:
    """What one captured operator's stream holds now."""

    stream: str
    parts: int
    """Parts of the stream (the operator's partitions)."""
    finished_parts: int
    """Parts published whole (a part is written once its partition was computed to the end)."""
    rows: int
    frontier: Antichain
    """The stream's frontier: empty when every part is finished (the operator's output is complete)."""


@dataclasses.dataclass(frozen=True)
class PlanOperator:
    """One physical operator of a captured plan."""

    id: int
    name: str
    type: str
    detail: str
    children: tuple[int, ...]
    columns: tuple[str, ...]
    stage: int | None
    """The AQE query stage the operator ran in (None without AQE, or in the result stage)."""
    stream: str | None
    """The stream holding its output, None when not captured."""
    note: str | None
    """Why a chosen operator was not captured."""
    summary: StreamSummary | None = None
    """The stream's rows and frontier (``read_plan(..., summaries=True)``); None when not captured or not run."""


@dataclasses.dataclass(frozen=True)
class CapturedPlan:
    """A captured query's physical plan (``<log>/_plans/<query>.json``)."""

    query: str
    application: str
    execution: str
    spark: str
    created: str
    roots: tuple[int, ...]
    operators: tuple[PlanOperator, ...]
    """In plan order: by id, an operator's inputs before it."""
    unused_streams: tuple[str, ...]
    """Streams the query captured whose operators are not in the final plan (a stage AQE did not use)."""
    streaming_id: str | None = None
    """A Structured Streaming query's id (its plan is the latest micro-batch's; each micro-batch is a time of its
    streams); None for a batch query."""
    batch: int | None = None
    """A streaming query's latest micro-batch planned (its batch id); None for a batch query."""

    def operator(self, op_id: int) -> PlanOperator:
        for op in self.operators:
            if op.id == op_id:
                return op
        raise KeyError(op_id)


def _on_s3(uri: str) -> bool:
    return uri.startswith(("s3://", "s3a://"))


def _s3_log(log: str) -> "FileLog":
    """The file log on S3 at ``log`` (its plan documents are read through it)."""
    lg = open_log("s3://" + log.split("://", 1)[1])
    if not isinstance(lg, FileLog):
        raise EventLogError(f"cannot read the captured plans of {log.split('?')[0]}: not a file log")
    return lg


def _read_plan_file(log: str, query: str) -> tuple[bytes, str]:
    """The bytes (at most the limit + 1) of ``query``'s plan document and where it is; FileNotFoundError."""
    if _on_s3(log):
        where = f"{log.split('?')[0].rstrip('/')}/{PLANS_DIR}/{query}.json"
        return _s3_log(log).read_aside(PLANS_DIR, query + ".json", _MAX_PLAN_BYTES + 1), where
    path = os.path.join(_local_root(log), PLANS_DIR, query + ".json")
    with open(path, "rb") as f:
        return f.read(_MAX_PLAN_BYTES + 1), path


def _local_root(uri: str) -> str:
    if uri.startswith("file:"):
        return urllib.parse.unquote(urllib.parse.urlparse(uri).path)
    if "://" in uri:
        raise EventLogError(f"captured plans are in file logs on a local or shared disk or on S3, not "
                            f"{uri.split('?')[0]}")
    return os.path.abspath(uri)


def plan_names(log: "str | os.PathLike[str]") -> list[str]:
    """The queries with a plan document in the log, in the order they were captured (by the documents'
    ``created``, then name)."""
    uri = os.fspath(log)
    try:
        if _on_s3(uri):
            listed = _s3_log(uri).list_aside(PLANS_DIR)
        else:
            listed = os.listdir(os.path.join(_local_root(uri), PLANS_DIR))
    except FileNotFoundError:
        return []
    names = [n[:-5] for n in listed if n.endswith(".json") and not n.startswith(".")]

    def created(name: str) -> str:
        try:
            doc = json.loads(_read_plan_file(uri, name)[0][:_MAX_PLAN_BYTES] or b"{}")
            return str(doc.get("created", "~")) if isinstance(doc, dict) else "~"
        except (OSError, ValueError):
            return "~"  # being written, or not a plan: last

    return sorted(names, key=lambda n: (created(n), len(n), n))


def _operator(d: dict[str, Any], where: str) -> PlanOperator:
    try:
        return PlanOperator(
            id=int(d["id"]), name=str(d["name"]), type=str(d.get("type", "")), detail=str(d.get("detail", "")),
            children=tuple(int(c) for c in d.get("children", ())),
            columns=tuple(str(c) for c in d.get("columns", ())),
            stage=None if d.get("stage") is None else int(d["stage"]),
            stream=None if d.get("stream") is None else str(d["stream"]),
            note=None if d.get("note") is None else str(d["note"]))
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptLogError(f"plan document {where} has a malformed operator: {e}") from None


def read_plan(log: "str | os.PathLike[str]", query: str | None = None, *, summaries: bool = True) -> CapturedPlan:
    """The captured plan of ``query`` (default: the last query captured into the log), with each captured
    stream's summary unless ``summaries`` is false. PlanNotFoundError when there is none; CorruptLogError
    for a document that is not a plan."""
    names = plan_names(log)
    if query is None:
        if not names:
            raise PlanNotFoundError(f"no captured plan in {os.fspath(log)} (is spark.eventlog.capture.dir set?)")
        query = names[-1]
    try:
        data, path = _read_plan_file(os.fspath(log), query)
    except FileNotFoundError:
        raise PlanNotFoundError(f"no captured plan of query {query!r} in {os.fspath(log)} "
                                f"(queries: {', '.join(names) or 'none'})") from None
    if len(data) > _MAX_PLAN_BYTES:
        raise CorruptLogError(f"plan document {path} is over {_MAX_PLAN_BYTES} bytes")
    if not data.strip():  # claimed by a query whose first fragment is still being prepared
        doc: dict[str, Any] = {"format": PLAN_FORMAT, "query": query, "operators": []}
    else:
        try:
            doc = json.loads(data)
        except ValueError as e:
            raise CorruptLogError(f"plan document {path} is not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
        raise CorruptLogError(f"{path} is not an eventlog plan document")
    ops = tuple(sorted((_operator(o, path) for o in doc.get("operators", ())), key=lambda o: o.id))
    streaming = doc.get("streaming")
    if streaming is not None and (not isinstance(streaming, dict) or not isinstance(streaming.get("batch", 0), int)):
        raise CorruptLogError(f"plan document {path} has a malformed 'streaming' entry")
    if summaries:
        uri = os.fspath(log)
        lg = open_log(uri if _on_s3(uri) else _local_root(uri))
        ops = tuple(dataclasses.replace(o, summary=summarise_stream(lg, o.stream)) if o.stream else o for o in ops)
    return CapturedPlan(
        query=str(doc.get("query", query)), application=str(doc.get("application", "")),
        execution=str(doc.get("execution", "")), spark=str(doc.get("spark", "")), created=str(doc.get("created", "")),
        roots=tuple(int(r) for r in doc.get("roots", ())), operators=ops,
        unused_streams=tuple(str(s) for s in doc.get("unused_streams", ())),
        streaming_id=None if streaming is None else str(streaming.get("id", "")),
        batch=None if streaming is None else int(streaming.get("batch", 0)))


def summarise_stream(log: Log, stream: str) -> StreamSummary | None:
    """Rows, finished parts and frontier of ``stream`` as the log holds it now (committed reads); None when
    the stream does not exist (its operator has not run)."""
    try:
        header = log.header(stream)
    except StreamNotFoundError:
        return None
    rows = finished = 0
    frontiers: list[Antichain] = []
    for p in range(header.peers):
        stats = log.part_stats(stream, p)
        part = CheckedPart(log, header, p, end=stats.next_seq)
        try:
            for entry in part.read():
                if isinstance(entry.event, Messages):
                    rows += entry.event.records.num_rows
            frontiers.append(part.frontier)
            finished += part.frontier.is_empty()
        finally:
            part.close()
    return StreamSummary(stream, header.peers, finished, rows, Antichain(t for f in frontiers for t in f))


def main(argv: "list[str] | None" = None) -> int:
    """``python -m connectors.spark.plan_capture LOG [--operators all] [--query NAME]``: print the
    ``spark-submit`` options that capture into LOG (``capture_conf``), one ``--conf key=value`` a line."""
    import argparse
    import shlex

    p = argparse.ArgumentParser(prog="python -m connectors.spark.plan_capture", description=main.__doc__)
    p.add_argument("log", help="the file log to capture into (a path or file:// URI)")
    p.add_argument("--operators", default="exchanges", help="all, exchanges, or names, types and ids (default "
                   "exchanges)")
    p.add_argument("--query", default=None, help="the queries' name (default q1, q2, ...)")
    args = p.parse_args(argv)
    for key, value in capture_conf(args.log, operators=args.operators, query=args.query).items():
        print(f"--conf {shlex.quote(f'{key}={value}')}")
    return 0


__all__ = ["EXTENSION", "OPERATOR_MODES", "PLANS_DIR", "CapturedPlan", "PlanNotFoundError", "PlanOperator",
           "StreamSummary", "capture_conf", "capture_session", "main", "plan_names", "read_plan", "summarise_stream"]


if __name__ == "__main__":
    raise SystemExit(main())
