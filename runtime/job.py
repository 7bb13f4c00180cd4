"""Building a job and running it: the public API (``Job``, ``Stream``, ``KeyedStream``).

``Job`` collects the job graph (``runtime.graph``: operators, each with one input — or several: ``union``,
``connect``, joins — and its own parallelism) as ``Stream`` methods add operators; ``Job.run`` runs it
(``runtime.failover.run_job``: generations, checkpoints, restarts), on threads of this process or on Spark.
Operators of several inputs: ``a.union(b)``; ``a.connect(b)`` (``ConnectedStreams``: ``map``/``flat_map``
with a function per input, or keyed — ``a.key_by(k).connect(b.key_by(k))`` — ``process`` with state per key
shared by both); ``a.key_by(k).join(b.key_by(k))`` (``JoinedStreams``: ``window(size)`` or ``interval(lower,
upper)``, inner or left outer); ``a.join_table(t, key=k)`` (each record with the latest row of its key in the
table ``t`` updates, as of the record's time). Their semantics: ``runtime.connect``, ``runtime.joins``.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa

from replay.keyhash import Key

from .channels.writer import WriterSettings
from .checkpoints.keyedstate import check_serializer
from .checkpoints.keygroups import DEFAULT_KEY_GROUPS
from .connect import CoFlatMapOp, CoProcessOp, UnionOp
from .errors import JobGraphError
from .failover import JobResult, RestartBackoff, run_job
from .faults import FaultPlan
from .graph import OPERATOR, SINK, SOURCE, Node, Plan
from .joins import IntervalJoinOp, TableJoinOp, WindowJoinOp, check_how
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
             upstream: "Node | list[Node] | None", key: Key | None = None,
             keys: "list[Key | None] | None" = None) -> Node:
        """Add an operator reading ``upstream`` (several: a list, each input keyed by ``keys[i]``)."""
        ups = upstream if isinstance(upstream, list) else ([upstream] if upstream is not None else [])
        keys = keys if keys is not None else [key] * len(ups)
        upstream = ups[0] if ups else None
        self._counter += 1
        name = name or f"{prefix}{self._counter}"
        if not _NAME.match(name):
            raise JobGraphError(f"operator name {name!r} may use only A-Z a-z 0-9 _")
        if name in self.nodes:
            raise JobGraphError(f"operator name {name!r} is used twice")
        p = parallelism if parallelism is not None else (upstream.parallelism if upstream else 1)
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise JobGraphError(f"parallelism of {name!r} must be a positive int, got {p!r}")
        node = Node(name, kind, p, make, [u.name for u in ups], keys)
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
        consumers = {up for n in self.nodes.values() for up in n.inputs}
        for n in self.nodes.values():
            if n.kind != SINK and n.name not in consumers:
                raise JobGraphError(f"operator {n.name!r} of job {self.name!r} leads to no sink")
            if n.keyed and self.key_groups < n.parallelism:
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

    def _same_job(self, others: "Iterable[Stream]") -> None:
        for o in others:
            if o.job is not self.job:
                raise JobGraphError(f"stream {o.name!r} belongs to another job than {self.name!r}")

    def union(self, *others: "Stream", parallelism: int | None = None, name: str | None = None,
              schema: pa.Schema | None = None) -> "Stream":
        """The records of this stream and of ``others`` (streams of the same schema; ``schema=`` casts
        them to one), each at its time; the frontier is the meet of theirs (``runtime.connect.UnionOp``)."""
        if not others:
            raise JobGraphError("union needs at least one other stream")
        self._same_job(others)
        node = self.job._add(OPERATOR, "union", name, parallelism, lambda: UnionOp(schema),
                             [self.node, *(o.node for o in others)])
        return Stream(self.job, node)

    def connect(self, other: "Stream") -> "ConnectedStreams":
        """This stream (input 0) and ``other`` (input 1) for an operator with a function per input
        (``ConnectedStreams``); ``key_by`` both (or connect two ``KeyedStream``) for keyed state."""
        self._same_job([other])
        return ConnectedStreams(self, other, None, None)

    def join_table(self, table: "Stream", *, key: Key, table_key: Key | None = None, how: str = "inner",
                   parallelism: int | None = None, name: str | None = None,
                   schema: pa.Schema | None = None) -> "Stream":
        """Each record joined with the latest row of its key (``key`` here, ``table_key`` in ``table``,
        default the same) among the rows ``table`` sent at or before the record's time — a table changing
        over time, e.g. replayed from a log (``Job.from_log``) — emitted at the record's time once the table's
        frontier passed it. ``how``: ``"inner"`` or ``"left"`` (records without a row: nulls) (``runtime.joins``)."""
        self._same_job([table])
        check_how(how)
        tkey = key if table_key is None else table_key
        node = self.job._add(OPERATOR, "join_table", name, parallelism,
                             lambda: TableJoinOp(key, tkey, how, schema), [self.node, table.node],
                             keys=[key, tkey])
        return Stream(self.job, node)

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

    def connect(self, other: "KeyedStream") -> "ConnectedStreams":
        """This keyed stream (input 0) and ``other`` (input 1, keyed by a key of equal values) for a keyed
        two-input operator (``ConnectedStreams.process``)."""
        if not isinstance(other, KeyedStream):
            raise JobGraphError("connect a KeyedStream with another KeyedStream (key_by both inputs)")
        self._stream._same_job([other._stream])
        return ConnectedStreams(self._stream, other._stream, self._key, other._key)

    def join(self, other: "KeyedStream", *, how: str = "inner") -> "JoinedStreams":
        """A keyed join of this stream (left, input 0) with ``other`` (right, input 1): rows whose keys are
        equal, inner or left outer (``how="left"``); then ``window(size)`` or ``interval(lower, upper)``."""
        if not isinstance(other, KeyedStream):
            raise JobGraphError("join a KeyedStream with another KeyedStream (key_by both inputs)")
        if self._window is not None or other._window is not None:
            raise JobGraphError("join windows are given by JoinedStreams.window(size), not key_by(...).window()")
        self._stream._same_job([other._stream])
        return JoinedStreams(self, other, check_how(how))

    def join_table(self, table: "KeyedStream", *, how: str = "inner", parallelism: int | None = None,
                   name: str | None = None, schema: pa.Schema | None = None) -> Stream:
        """``Stream.join_table`` with both keys given by ``key_by``."""
        if not isinstance(table, KeyedStream):
            raise JobGraphError("join_table of a KeyedStream takes a KeyedStream (key_by the table too)")
        return self._stream.join_table(table._stream, key=self._key, table_key=table._key, how=how,
                                       parallelism=parallelism, name=name, schema=schema)


class ConnectedStreams:
    """Two streams feeding one operator with a function per input (Flink's ``ConnectedStreams``): ``map`` or
    ``flat_map``; keyed (both inputs keyed), ``process`` with a state value per key that both functions share."""

    def __init__(self, first: Stream, second: Stream, first_key: Key | None, second_key: Key | None) -> None:
        self._streams = (first, second)
        self._keys = (first_key, second_key)

    def key_by(self, first: Key, second: Key | None = None) -> "ConnectedStreams":
        """Key input 0 by ``first`` and input 1 by ``second`` (default: the same key)."""
        return ConnectedStreams(*self._streams, first, first if second is None else second)

    def _node(self, prefix: str, make: Callable[[], Any], name: str | None, parallelism: int | None) -> Stream:
        a, b = self._streams
        keys = list(self._keys)
        node = a.job._add(OPERATOR, prefix, name, parallelism, make, [a.node, b.node], keys=keys)
        return Stream(a.job, node)

    def flat_map(self, fn0: Callable[[dict[str, Any]], Iterable[dict[str, Any]]],
                 fn1: Callable[[dict[str, Any]], Iterable[dict[str, Any]]], *, parallelism: int | None = None,
                 name: str | None = None, schema: pa.Schema | None = None) -> Stream:
        """The records of ``fn0(record)`` for input 0's records and of ``fn1(record)`` for input 1's."""
        return self._node("co_flat_map", lambda: CoFlatMapOp((fn0, fn1), schema), name, parallelism)

    def map(self, fn0: Callable[[dict[str, Any]], dict[str, Any]], fn1: Callable[[dict[str, Any]], dict[str, Any]],
            *, parallelism: int | None = None, name: str | None = None, schema: pa.Schema | None = None) -> Stream:
        """One record ``fn0(record)`` per record of input 0, ``fn1(record)`` per record of input 1."""
        return self._node("co_map", lambda: CoFlatMapOp((lambda r: [fn0(r)], lambda r: [fn1(r)]), schema), name,
                          parallelism)

    def process(self, fn0: Callable[[Any, dict[str, Any]], Any], fn1: Callable[[Any, dict[str, Any]], Any], *,
                zero: Callable[[], Any] | None = None, parallelism: int | None = None, name: str | None = None,
                schema: pa.Schema | None = None, serializer: str = "auto") -> Stream:
        """Keyed: ``fn0(acc, record)`` for input 0's records, ``fn1(acc, record)`` for input 1's, each returning
        ``(acc, records)``: the key's new value (None forgets it) and any records to emit. ``acc`` starts at
        ``zero()`` (default None). Records are handled per completed time, input 0's before input 1's, and
        emitted at that time (``runtime.connect.CoProcessOp``); ``serializer`` as for ``aggregate``."""
        if self._keys[0] is None or self._keys[1] is None:
            raise JobGraphError("process() needs keyed inputs: connect two KeyedStreams, or key_by(...) first")
        keys = (self._keys[0], self._keys[1])
        check_serializer(serializer)
        return self._node("co_process", lambda: CoProcessOp(keys, (fn0, fn1), zero, schema, serializer), name,
                          parallelism)


class JoinedStreams:
    """Two keyed streams to join (``KeyedStream.join``): ``window(size)`` or ``interval(lower, upper)``."""

    def __init__(self, left: KeyedStream, right: KeyedStream, how: str) -> None:
        self._left = left
        self._right = right
        self._how = how

    def _node(self, prefix: str, make: Callable[[], Any], name: str | None, parallelism: int | None) -> Stream:
        a, b = self._left._stream, self._right._stream
        node = a.job._add(OPERATOR, prefix, name, parallelism, make, [a.node, b.node],
                          keys=[self._left._key, self._right._key])
        return Stream(a.job, node)

    def window(self, size: int, *, parallelism: int | None = None, name: str | None = None,
               schema: pa.Schema | None = None) -> Stream:
        """Tumbling windows ``[w, w+size)``: every pair of a left and a right row of the window with equal
        keys (left outer: and each left row without one, right columns null), emitted at the window's last
        time once it is complete on both inputs, with ``window_start``/``window_end`` (``runtime.joins``)."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise JobGraphError(f"window size must be a positive int, got {size!r}")
        lk, rk, how = self._left._key, self._right._key, self._how
        return self._node("window_join", lambda: WindowJoinOp(lk, rk, size, how, schema), name, parallelism)

    def interval(self, lower: int, upper: int, *, parallelism: int | None = None, name: str | None = None,
                 schema: pa.Schema | None = None) -> Stream:
        """A left row at ``tl`` and a right row at ``tr`` with equal keys join when ``tl + lower <= tr <= tl +
        upper``; each pair is emitted once both are there, at ``max(tl, tr)`` (left outer: each left row that
        matched nothing, once no right row can, at ``tl``) (``runtime.joins``)."""
        for v in (lower, upper):
            if isinstance(v, bool) or not isinstance(v, int):
                raise JobGraphError(f"interval bounds must be ints, got {v!r}")
        if lower > upper:
            raise JobGraphError(f"interval lower bound {lower} is above its upper bound {upper}")
        lk, rk, how = self._left._key, self._right._key, self._how
        return self._node("interval_join", lambda: IntervalJoinOp(lk, rk, lower, upper, how, schema), name,
                          parallelism)
