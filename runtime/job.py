"""Building a job and running it: the public API (``Job``, ``Stream``, ``KeyedStream``).

``Job`` collects the job graph (``runtime.graph``: operators, each with one input and its own parallelism) as
``Stream`` methods add operators; ``Job.run`` runs it (``runtime.failover.run_job``: generations, checkpoints,
restarts), on threads of this process or on Spark.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa

from replay.keyhash import Key

from .channels.writer import WriterSettings
from .checkpoints.keyedstate import check_serializer
from .checkpoints.keygroups import DEFAULT_KEY_GROUPS
from .errors import JobGraphError
from .failover import JobResult, RestartBackoff, run_job
from .faults import FaultPlan
from .graph import OPERATOR, SINK, SOURCE, Node, Plan
from .operators import (
    Aggregation,
    FilterOp,
    FlatMapOp,
    KeyedAggregateOp,
    MapBatchesOp,
    MapOp,
)
from .sinks import CallableSink, LogSink
from .sources import GeneratorSource, LogSource

_NAME = re.compile(r"^[A-Za-z0-9_]+$")


class Job:
    """A streaming job: build it with ``from_generator``/``from_log`` and Stream methods, then ``run`` it.

    ``name`` names the job's checkpoints and channels (restarting a job with the same name and
    checkpoint location resumes it). ``key_groups`` is the number of key groups keyed state is split
    into (the most instances a keyed operator can use; fixed for the life of the job's checkpoints)."""

    def __init__(self, name: str, *, key_groups: int = DEFAULT_KEY_GROUPS) -> None:
        if not _NAME.match(name):
            raise JobGraphError(f"job name {name!r} may use only A-Z a-z 0-9 _")
        if key_groups < 1:
            raise JobGraphError("key_groups must be >= 1")
        self.name = name
        self.key_groups = key_groups
        self.nodes: dict[str, Node] = {}
        self._counter = 0

    # -- building -------------------------------------------------------------------------------------

    def _add(self, kind: str, prefix: str, name: str | None, parallelism: int | None, make: Callable[[], Any],
             upstream: Node | None, key: Key | None = None) -> Node:
        self._counter += 1
        name = name or f"{prefix}{self._counter}"
        if not _NAME.match(name):
            raise JobGraphError(f"operator name {name!r} may use only A-Z a-z 0-9 _")
        if name in self.nodes:
            raise JobGraphError(f"operator name {name!r} is used twice")
        p = parallelism if parallelism is not None else (upstream.parallelism if upstream else 1)
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise JobGraphError(f"parallelism of {name!r} must be a positive int, got {p!r}")
        node = Node(name, kind, p, make, upstream.name if upstream else None, key)
        self.nodes[name] = node
        return node

    def from_generator(self, fn: Callable[[int, int], Iterator[Any]], *, parts: int, parallelism: int | None = None,
                       name: str | None = None, schema: pa.Schema | None = None) -> "Stream":
        """A source over a replayable generator: ``fn(part, offset)`` yields part ``part``'s items from
        item ``offset`` on: ``(time, records)``, ``Advance(time)`` or ``None`` (``runtime.sources``).
        Instance ``j`` of ``parallelism`` (default ``parts``) reads the parts ``p % parallelism == j``."""
        if parts < 1:
            raise JobGraphError("a generator source needs parts >= 1")
        node = self._add(SOURCE, "source", name, parallelism or parts, lambda: GeneratorSource(fn, parts, schema), None)
        return Stream(self, node)

    def from_log(self, uri: str, stream: str, *, parallelism: int = 1, name: str | None = None,
                 poll_interval: float = 0.01) -> "Stream":
        """A source replaying captured stream ``stream`` of the log at ``uri`` (``replay.Replayer``, assign
        mode: instance ``j`` reads the parts ``i % parallelism == j``); it ends when every part finished."""
        node = self._add(SOURCE, "log_source", name, parallelism,
                         lambda: LogSource(uri, stream, poll_interval=poll_interval), None)
        node.location = uri
        return Stream(self, node)

    def set_parallelism(self, name: str, parallelism: int) -> None:
        """Change an operator's parallelism (before ``run``; a restart from a checkpoint rescales its state)."""
        if name not in self.nodes:
            raise JobGraphError(f"no operator named {name!r} (operators: {sorted(self.nodes)})")
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise JobGraphError(f"parallelism must be a positive int, got {parallelism!r}")
        self.nodes[name].parallelism = parallelism

    def validate(self) -> None:
        """Raise JobGraphError unless every operator leads to a sink and the job has a source."""
        if not any(n.kind == SOURCE for n in self.nodes.values()):
            raise JobGraphError(f"job {self.name!r} has no source")
        consumers = {n.input for n in self.nodes.values() if n.input}
        for n in self.nodes.values():
            if n.kind != SINK and n.name not in consumers:
                raise JobGraphError(f"operator {n.name!r} of job {self.name!r} leads to no sink")
            if n.key is not None and self.key_groups < n.parallelism:
                raise JobGraphError(f"keyed operator {n.name!r} has parallelism {n.parallelism} > key_groups "
                                    f"{self.key_groups}")

    def plan(self, chaining: bool = False) -> "Plan":
        """The physical plan of a run with the current parallelisms (``chaining``: see ``Plan``)."""
        self.validate()
        return Plan(self.name, self.key_groups, self.nodes, chaining)

    def run(
        self,
        spark: Any = None,
        *,
        channels: str,
        checkpoints: str,
        checkpoint_interval: float | None = 1.0,
        max_restarts: int = 100,
        faults: FaultPlan | None = None,
        writer: WriterSettings | None = None,
        stop_after_checkpoints: int | None = None,
        timeout: float | None = None,
        heartbeat_interval: float = 0.01,
        chaining: bool = False,
        restart_backoff: RestartBackoff | None = None,
        slot_timeout: float = 60.0,
    ) -> JobResult:
        """Run the job until its sources' frontiers are empty and every sink committed its output.

        ``spark``: None runs every operator instance as a thread of this process; a SparkSession runs
        each as a task of one gang-scheduled (barrier mode) Spark job, which needs a task slot per instance
        (``local[N]``, N >= ``plan().total_slots``; on a cluster, that many cores of live executors, which
        the driver waits for up to ``slot_timeout`` seconds before each generation, then raises
        ``NotEnoughSlotsError``). ``channels``: where channel bundles live (a path / ``file://`` URI, or
        ``kafka://host:port/prefix``). ``checkpoints``: a path / ``file://`` URI every task can reach; if it
        holds a complete checkpoint of this job, the run resumes from it (with the current parallelisms).
        With a SparkSession, paths must be absolute and logs not ``memory://`` (``LocationError`` before
        the run starts; ``runtime.locations``). ``checkpoint_interval``: seconds between checkpoints (None: only
        the final one). A failed task restarts the job from the last complete checkpoint (the one before it
        if it is damaged), at most ``max_restarts`` times, waiting ``restart_backoff`` (default
        ``RestartBackoff()``: 50 ms doubling up to 2 s) before each. ``stop_after_checkpoints``: stop
        (status ``"stopped"``) once that many
        checkpoints completed in this run — to resume later, e.g. with other parallelisms.
        ``chaining=True`` runs forward-connected operators of equal parallelism in one task (fewer tasks
        and channels; off by default, so every operator instance is its own task). ``faults`` injects
        failures (tests); ``writer`` sizes the channel writers."""
        return run_job(self.plan(chaining), spark, channels=channels, checkpoints=checkpoints,
                       checkpoint_interval=checkpoint_interval, max_restarts=max_restarts, faults=faults,
                       writer=writer, stop_after_checkpoints=stop_after_checkpoints, timeout=timeout,
                       heartbeat_interval=heartbeat_interval, restart_backoff=restart_backoff,
                       slot_timeout=slot_timeout)

    def __repr__(self) -> str:
        ops = ", ".join(f"{n.name}x{n.parallelism}" for n in self.nodes.values())
        return f"Job({self.name!r}: {ops})"


class Stream:
    """The output of an operator; its methods add downstream operators. Row functions get each record as a
    dict; ``schema=`` fixes an operator's output schema (default: inferred per batch)."""

    def __init__(self, job: Job, node: Node) -> None:
        self.job = job
        self.node = node

    @property
    def name(self) -> str:
        """The operator's name."""
        return self.node.name

    def _then(self, prefix: str, make: Callable[[], Any], name: str | None, parallelism: int | None,
              kind: str = OPERATOR, key: Key | None = None) -> Node:
        return self.job._add(kind, prefix, name, parallelism, make, self.node, key)

    def map(self, fn: Callable[[dict[str, Any]], dict[str, Any]], *, parallelism: int | None = None,
            name: str | None = None, schema: pa.Schema | None = None) -> "Stream":
        """One output record ``fn(record)`` per record."""
        return Stream(self.job, self._then("map", lambda: MapOp(fn, schema), name, parallelism))

    def flat_map(self, fn: Callable[[dict[str, Any]], Iterable[dict[str, Any]]], *, parallelism: int | None = None,
                 name: str | None = None, schema: pa.Schema | None = None) -> "Stream":
        """The records of ``fn(record)`` (any number) per record."""
        return Stream(self.job, self._then("flat_map", lambda: FlatMapOp(fn, schema), name, parallelism))

    def filter(self, fn: Callable[[dict[str, Any]], bool], *, parallelism: int | None = None,
               name: str | None = None) -> "Stream":
        """The records for which ``fn(record)`` is true."""
        return Stream(self.job, self._then("filter", lambda: FilterOp(fn), name, parallelism))

    def map_batches(self, fn: Callable[[pa.RecordBatch], Any], *, parallelism: int | None = None,
                    name: str | None = None, schema: pa.Schema | None = None) -> "Stream":
        """``fn(batch)`` per record batch (a RecordBatch, Table, list of dicts or None), vectorised."""
        return Stream(self.job, self._then("map_batches", lambda: MapBatchesOp(fn, schema), name, parallelism))

    def key_by(self, key: Key) -> "KeyedStream":
        """Partition by ``key`` (a column name, names, or ``fn(batch) -> array``) for a keyed operator."""
        return KeyedStream(self, key, None)

    def sink(self, fn: Callable[[int, pa.Table], None], *, parallelism: int | None = None, name: str | None = None,
             parts: int | None = None) -> None:
        """Call ``fn(time, table)`` for the records, once each, after the checkpoint that covers them
        completed (``runtime.sinks.CallableSink``)."""
        self._then("sink", lambda: CallableSink(fn, parts), name, parallelism, SINK)

    def to_log(self, uri: str, stream: str, *, schema: pa.Schema | None = None, parallelism: int | None = None,
               name: str | None = None, parts: int | None = None, encoding: str | None = None) -> None:
        """Capture the records as stream ``stream`` of the log at ``uri``, exactly once: output is
        committed at completed checkpoints (``runtime.sinks.LogSink``). ``schema`` creates the stream;
        ``parts`` (default: the parallelism) is its part count, which later rescales keep."""
        node = self._then("log_sink", lambda: LogSink(uri, stream, schema=schema, parts=parts, encoding=encoding),
                          name, parallelism, SINK)
        node.location = uri


class KeyedStream:
    """A stream partitioned by key: aggregate per key (at every completed time) or ``window`` first."""

    def __init__(self, stream: Stream, key: Key, window: int | None) -> None:
        self._stream = stream
        self._key = key
        self._window = window

    def _agg(self, agg: Aggregation, prefix: str, name: str | None, parallelism: int | None,
             schema: pa.Schema | None, serializer: str = "auto") -> Stream:
        key, window = self._key, self._window
        check_serializer(serializer)
        node = self._stream._then(prefix, lambda: KeyedAggregateOp(key, agg, window, schema, serializer), name,
                                  parallelism, key=key)
        return Stream(self._stream.job, node)

    def window(self, size: int) -> "KeyedStream":
        """Tumbling windows of ``size`` times: ``[k*size, (k+1)*size)``, each emitted once, when the
        frontier passes its last time, at that time, with ``window_start``/``window_end`` columns."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise JobGraphError(f"window size must be a positive int, got {size!r}")
        return KeyedStream(self._stream, self._key, size)

    def count(self, *, parallelism: int | None = None, name: str | None = None) -> Stream:
        """Rows ``{key…, "count"}``: records per key (running total, or per window)."""
        return self._agg(Aggregation("count"), "count", name, parallelism, None)

    def sum(self, column: str, *, parallelism: int | None = None, name: str | None = None) -> Stream:
        """Rows ``{key…, column}``: the sum of ``column`` per key (running total, or per window)."""
        return self._agg(Aggregation("sum", column=column), "sum", name, parallelism, None)

    def reduce(self, fn: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]], *,
               parallelism: int | None = None, name: str | None = None, schema: pa.Schema | None = None,
               serializer: str = "auto") -> Stream:
        """Rows ``fn(acc, record)`` folded per key (``fn`` associative; the first record starts ``acc``).
        ``serializer``: how checkpoints store the values (see ``aggregate``)."""
        return self._agg(Aggregation("reduce", fn=fn), "reduce", name, parallelism, schema, serializer)

    def aggregate(self, zero: Callable[[], Any], add: Callable[[Any, dict[str, Any]], Any], *,
                  finish: Callable[[Any, Any], dict[str, Any]] | None = None, parallelism: int | None = None,
                  name: str | None = None, schema: pa.Schema | None = None, serializer: str = "auto") -> Stream:
        """Per key, ``acc = add(acc, record)`` from ``zero()``; rows ``finish(key, acc)`` (default
        ``{key…, "value": acc}``). ``serializer`` says how checkpoints store the accumulators
        (``runtime.checkpoints.keyedstate``): ``"auto"`` (an Arrow column if exact, else tagged JSON), ``"arrow"``,
        ``"json"``, or ``"pickle"`` — an explicit opt-in, for accumulators of other types, since loading a
        pickle runs code: use it only for checkpoints you trust. A value the serializer cannot store exactly
        fails the checkpoint with ``UnstorableStateError`` naming the operator and the value's type."""
        return self._agg(Aggregation("aggregate", fn=add, zero=zero, finish=finish), "aggregate", name,
                         parallelism, schema, serializer)
