"""Operators: what runs inside an operator instance, between its input reader and its output writers.

Records are Arrow record batches at a time (``(time, pa.RecordBatch)``); row functions (``map``,
``flat_map``, ``filter``, ``reduce``…) see each record as a dict and return dicts, batch functions
(``map_batches``) see the batch. Every operator gets the instance's input frontier (``on_frontier``) and
may hold back its output frontier (``hold``) for times it will still emit at; the task's output frontier is
the meet of the two. Stateful operators snapshot their state at checkpoint barriers as
``{"keyed": {name: pa.Table}, "parts": {part: …}, "instance": …}`` — tagged JSON and Arrow tables, which
load without running code (``runtime.checkpoints.formats``); each keyed table has a ``group`` column
(``runtime.checkpoints.keyedstate``) — so that a restart with another parallelism can hand each key group (or part) to
the instance that now owns it. A restored state has a *list* of tables per name (one per old instance).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
import pyarrow as pa

from eventlog.antichain import Antichain
from replay.keyhash import Key

from .checkpoints.keyedstate import check_serializer, decode_keyed, encode_table
from .checkpoints.keygroups import key_groups_of_values
from .checkpoints.store import StateCheck
from .errors import CheckpointCorruptError

RowFn = Callable[[dict[str, Any]], Any]


@dataclass
class OperatorContext:
    """What an operator instance knows about its place in the job (given to ``Operator.open``)."""

    job: str
    """The job's name."""
    node: str
    """The operator's name in the job graph."""
    index: int
    """This instance's index, 0 … parallelism-1."""
    parallelism: int
    """The operator's parallelism in this run."""
    key_groups: int
    """The job's number of key groups."""
    generation: int
    """The run of the job graph (increases at every restart)."""
    checkpoint_dir: str
    """The job's checkpoint directory (sinks stage pre-committed output under it): a local path or an
    ``s3://bucket/prefix/job`` location (``runtime.checkpoints.storage.open_state_fs`` opens either)."""
    emit: Callable[[int, pa.RecordBatch], None] = field(repr=False, default=lambda t, b: None)
    """Sends records downstream at a time (not behind the output frontier)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Runtime services (the fault plan, timing hooks)."""
    commit_horizon: int = 0
    """Output of checkpoints up to this id may be committed at ``open`` (``Operator.notify_complete``)."""


def check_state(ok: bool, what: str, where: str) -> None:
    """Raise ``CheckpointCorruptError`` (``restored state: what``, naming ``where``) unless ``ok``."""
    if not ok:
        raise CheckpointCorruptError(f"restored state: {what}", path=where)


def is_int(value: Any, low: int = 0) -> bool:
    """True for an ``int`` (not a bool) of at least ``low``."""
    return type(value) is int and value >= low


def int_keyed(value: Any, where: str, what: str) -> dict[int, Any]:
    """``value`` if it is a dict with non-negative int keys (parts, key groups), else a typed error."""
    check_state(isinstance(value, dict) and all(is_int(k) for k in value), f"{what} is not a map of parts", where)
    return value


class Operator:
    """Base of operator implementations (one object per instance, made from the node's spec)."""

    def open(self, ctx: OperatorContext, state: dict[str, Any] | None) -> None:
        """Start the instance, with the state restored from a checkpoint (None on a fresh start)."""
        self.ctx = ctx

    def process(self, time: int, batch: pa.RecordBatch) -> None:
        """Handle records at ``time``."""

    def on_frontier(self, frontier: Antichain) -> None:
        """The input frontier moved (times not in advance of it are complete)."""

    def process_input(self, input: int, time: int, batch: pa.RecordBatch) -> None:
        """Handle records at ``time`` of input ``input`` (operators with several inputs; the others get
        ``process``)."""
        self.process(time, batch)

    def on_input_frontiers(self, frontiers: tuple[Antichain, ...]) -> None:
        """Some input's frontier moved (operators with several inputs; called before ``on_frontier``, whose
        frontier is the meet of these)."""

    def hold(self) -> int | None:
        """The earliest time this instance may still emit at because of what it buffers (None: none)."""
        return None

    def snapshot(self, checkpoint: int) -> dict[str, Any] | None:
        """The instance's state at a checkpoint barrier (None: stateless): tagged JSON values and Arrow
        tables (``runtime.checkpoints.formats``); anything else fails the checkpoint (``UnstorableStateError``)."""
        return None

    def verify_state(self, state: dict[str, Any] | None, check: StateCheck) -> None:
        """Check a restored state (``open``'s argument) without running anything from it — no pickle is
        loaded; raise ``CheckpointCorruptError`` naming the file when it is not a state this operator
        wrote. The driver calls it before it restores a checkpoint, the task before ``open``."""
        check_state(state is None or isinstance(state, dict), "the state is not a map", check.where)

    def notify_complete(self, checkpoint: int) -> None:
        """Output up to checkpoint ``checkpoint`` may be committed: a later checkpoint is complete too (or
        this one is final, or the job stops at it), so the job never restores from before it."""

    def close(self) -> None:
        """The instance stops (after its input finished, or on abort)."""


def to_batch(records: Any, schema: pa.Schema | None = None) -> pa.RecordBatch | None:
    """Records (a RecordBatch, a Table, or a list of dicts) as one RecordBatch, or None when empty."""
    if isinstance(records, pa.RecordBatch):
        batch = records
    elif isinstance(records, pa.Table):
        batch = records.combine_chunks().to_batches()[0] if records.num_rows else None
        if batch is None:
            return None
    else:
        rows = records if isinstance(records, list) else list(records)
        if not rows:
            return None
        batch = pa.RecordBatch.from_pylist(rows, schema=schema)
    if batch.num_rows == 0:
        return None
    if schema is not None and not batch.schema.equals(schema):
        batch = batch.select(schema.names).cast(schema) if set(schema.names) <= set(batch.schema.names) else batch.cast(schema)
    return batch


# -- stateless operators -------------------------------------------------------------------------------


class MapOp(Operator):
    """``map``: one output row per input row."""

    def __init__(self, fn: RowFn, schema: pa.Schema | None) -> None:
        self.fn, self.schema = fn, schema

    def process(self, time: int, batch: pa.RecordBatch) -> None:
        fn = self.fn
        out = to_batch([fn(r) for r in batch.to_pylist()], self.schema)
        if out is not None:
            self.ctx.emit(time, out)


class FlatMapOp(Operator):
    """``flat_map``: any number of output rows per input row."""

    def __init__(self, fn: Callable[[dict[str, Any]], Iterable[dict[str, Any]]], schema: pa.Schema | None) -> None:
        self.fn, self.schema = fn, schema

    def process(self, time: int, batch: pa.RecordBatch) -> None:
        fn = self.fn
        out = to_batch([o for r in batch.to_pylist() for o in fn(r)], self.schema)
        if out is not None:
            self.ctx.emit(time, out)


class FilterOp(Operator):
    """``filter``: the rows for which the predicate is true."""

    def __init__(self, fn: RowFn) -> None:
        self.fn = fn

    def process(self, time: int, batch: pa.RecordBatch) -> None:
        fn = self.fn
        mask = pa.array([bool(fn(r)) for r in batch.to_pylist()], pa.bool_())
        out = batch.filter(mask)
        if out.num_rows:
            self.ctx.emit(time, out)


class MapBatchesOp(Operator):
    """``map_batches``: a function of the whole batch (vectorised)."""

    def __init__(self, fn: Callable[[pa.RecordBatch], Any], schema: pa.Schema | None) -> None:
        self.fn, self.schema = fn, schema

    def process(self, time: int, batch: pa.RecordBatch) -> None:
        out = self.fn(batch)
        if isinstance(out, pa.Table):
            for b in out.to_batches():
                b = to_batch(b, self.schema)
                if b is not None:
                    self.ctx.emit(time, b)
            return
        b = to_batch(out, self.schema) if out is not None else None
        if b is not None:
            self.ctx.emit(time, b)


# -- keyed aggregations --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Aggregation:
    """What a keyed operator computes per key: ``kind`` is ``count``, ``sum``, ``reduce`` or ``aggregate``."""

    kind: str
    column: str | None = None
    fn: Callable[..., Any] | None = None
    zero: Callable[[], Any] | None = None
    finish: Callable[[Any, Any], dict[str, Any]] | None = None


class KeyedAggregateOp(Operator):
    """A keyed aggregation, per completed time (``window=None``) or per tumbling window of ``window`` times.

    Without a window, when time ``t`` is complete the instance folds ``t``'s records into each key's
    running aggregate and emits, at ``t``, one row per key updated at ``t``. With a window of size ``w``,
    records at ``t`` go to the window starting at ``t - t % w``; when the frontier passes the window's last
    time the instance emits one row per key of the window, at that last time, with ``window_start`` and
    ``window_end`` columns, and forgets the window. Both orders are by time, so the output does not depend
    on how the inputs interleaved (for ``reduce``, given an associative function).
    """

    def __init__(self, key: Key, agg: Aggregation, window: int | None, schema: pa.Schema | None,
                 serializer: str = "auto") -> None:
        self.key = key
        self.agg = agg
        self.window = window
        self.schema = schema
        self.serializer = check_serializer(serializer)
        """How checkpoints store the values (``runtime.checkpoints.keyedstate``): ``auto``, ``arrow``, ``json`` or, by
        explicit opt-in only, ``pickle``."""
        self._state: dict[Any, Any] = {}                 # key -> running aggregate (no window)
        self._pending: dict[int, dict[Any, Any]] = {}    # time or window start -> key -> partial
        self._key_names: list[str] = []
        self._key_types: list[pa.DataType] | None = None
        self._counted: dict[int, list[list[pa.Array]]] = {}   # count(): slot -> key columns not yet counted
        self._counted_rows = 0

    # -- keys ----------------------------------------------------------------------------------------

    def _key_columns(self, batch: pa.RecordBatch) -> list[pa.Array]:
        if callable(self.key):
            arr = self.key(batch)
            return [arr if isinstance(arr, pa.Array) else pa.array(arr)]
        names = [self.key] if isinstance(self.key, str) else list(self.key)
        return [batch.column(n) for n in names]

    def _names(self) -> list[str]:
        if callable(self.key):
            return ["key"]
        return [self.key] if isinstance(self.key, str) else list(self.key)

    def open(self, ctx: OperatorContext, state: dict[str, Any] | None) -> None:
        super().open(ctx, state)
        self._key_names = self._names()
        if state:
            inst = state.get("instance") or {}
            if inst.get("key_schema") is not None:
                self._key_types = list(inst["key_schema"].schema.types)
            keyed = state.get("keyed") or {}
            for table in keyed.get("state", ()):
                _slots, keys, values = self._decode(table, False, ctx.node, True)
                self._state.update(zip(keys, values))
            for table in keyed.get("pending", ()):
                slots, keys, values = self._decode(table, True, ctx.node, True)
                for t, k, v in zip(slots, keys, values):
                    self._pending.setdefault(t, {})[k] = v

    def _decode(self, table: pa.Table, pending: bool, node: str, unpickle: bool) -> Any:
        return decode_keyed(table, pending=pending, n_keys=len(self._names()), allow_pickle=self.serializer == "pickle",
                            unpickle=unpickle, operator=node)

    def verify_state(self, state: dict[str, Any] | None, check: StateCheck) -> None:
        super().verify_state(state, check)
        if not state:
            return
        where = check.where
        inst = state.get("instance") or {}
        check_state(isinstance(inst, dict), "'instance' is not a map", where)
        ks = inst.get("key_schema")
        check_state(ks is None or (isinstance(ks, pa.Table) and ks.num_columns == len(self._names())),
                    f"'key_schema' is not a table of {len(self._names())} key columns", where)
        keyed = state.get("keyed") or {}
        check_state(isinstance(keyed, dict) and set(keyed) <= {"state", "pending"}
                    and all(isinstance(v, list) and all(isinstance(t, pa.Table) for t in v) for v in keyed.values()),
                    "'keyed' is not a map of state tables", where)
        for name, tables in keyed.items():
            for table in tables:
                self._decode(table, name == "pending", check.node, False)

    # -- records -------------------------------------------------------------------------------------

    def process(self, time: int, batch: pa.RecordBatch) -> None:
        cols = self._key_columns(batch)
        if self._key_types is None:
            self._key_types = [c.type for c in cols]
        slot = time if self.window is None else time - time % self.window
        bucket = self._pending.setdefault(slot, {})
        kind = self.agg.kind
        if kind == "count":
            # counted per slot in one pass when the slot is folded (or at a snapshot): fewer, larger groupings
            self._counted.setdefault(slot, []).append(cols)
            self._counted_rows += batch.num_rows
            if self._counted_rows > _COUNT_BUFFER_ROWS:
                for s in list(self._counted):
                    self._count_slot(s)
            return
        if kind == "sum":
            names = [f"k{i}" for i in range(len(cols))]
            table = pa.Table.from_arrays([*cols, batch.column(self.agg.column)], names=[*names, "v"])
            grouped = table.group_by(names, use_threads=False).aggregate([("v", "sum")])
            values = grouped.column("v_sum").to_pylist()
            keys = self._keys_of(grouped, names)
            get = bucket.get
            for k, v in zip(keys, values):
                if v is not None:
                    bucket[k] = get(k, 0) + v
            return
        keys = self._keys_of_columns(cols)
        rows = batch.to_pylist()
        if kind == "reduce":
            fn = self.agg.fn
            for k, r in zip(keys, rows):
                acc = bucket.get(k)
                bucket[k] = r if acc is None else fn(acc, r)
        elif self.window is not None:  # aggregate into the window at once (arrival order)
            add, zero = self.agg.fn, self.agg.zero
            for k, r in zip(keys, rows):
                bucket[k] = add(bucket[k] if k in bucket else zero(), r)
        else:  # aggregate without a window: keep rows until the time is complete
            for k, r in zip(keys, rows):
                bucket.setdefault(k, []).append(r)

    @staticmethod
    def _keys_of(table: pa.Table, names: list[str]) -> list[Any]:
        if len(names) == 1:
            return table.column(names[0]).to_pylist()
        return list(zip(*(table.column(n).to_pylist() for n in names)))

    @staticmethod
    def _keys_of_columns(cols: list[pa.Array]) -> list[Any]:
        if len(cols) == 1:
            return cols[0].to_pylist()
        return list(zip(*(c.to_pylist() for c in cols)))

    def _count_slot(self, slot: int) -> None:
        """Add the key columns buffered for ``slot`` to its pending counts."""
        buffered = self._counted.pop(slot, None)
        if not buffered:
            return
        n_cols = len(buffered[0])
        cols = [pa.concat_arrays([b[i] for b in buffered]) if len(buffered) > 1 else buffered[0][i]
                for i in range(n_cols)]
        self._counted_rows -= len(cols[0])
        keys, counts = count_keys(cols)
        bucket = self._pending.setdefault(slot, {})
        get = bucket.get
        for k, v in zip(keys, counts):
            bucket[k] = get(k, 0) + v

    # -- time ----------------------------------------------------------------------------------------

    def _last_time(self, slot: int) -> int:
        return slot if self.window is None else slot + self.window - 1

    def hold(self) -> int | None:
        if not self._pending:
            return None
        return self._last_time(min(self._pending))

    def on_frontier(self, frontier: Antichain) -> None:
        done = sorted(s for s in self._pending if not frontier.less_equal(self._last_time(s)))
        for slot in done:
            self._count_slot(slot)
            bucket = self._pending.pop(slot)
            if self.agg.kind in ("count", "sum"):
                batch = self._fold_columns(slot, bucket)
            else:
                rows = self._fold(slot, bucket)
                batch = pa.RecordBatch.from_pylist(rows, schema=self.schema) if rows else None
            if batch is not None:
                self.ctx.emit(self._last_time(slot), batch)

    def _fold_columns(self, slot: int, bucket: dict[Any, Any]) -> pa.RecordBatch | None:
        """``count``/``sum``: what ``_fold`` computes, built column by column (the same batch as
        ``from_pylist`` of ``_fold``'s rows, without a dict per row)."""
        if not bucket:
            return None
        keys = _sorted(bucket)
        if self.window is not None:
            values = [bucket[k] for k in keys]
        else:
            state = self._state
            get = state.get
            values = [get(k, 0) + bucket[k] for k in keys]
            state.update(zip(keys, values))
        n = len(keys)
        cols: dict[str, list[Any]] = {}
        names = self._key_names
        if len(names) == 1:
            cols[names[0]] = keys
        else:
            for i, name in enumerate(names):
                cols[name] = [k[i] for k in keys]
        cols["count" if self.agg.kind == "count" else self.agg.column] = values
        if self.window is not None:
            cols["window_start"] = [slot] * n
            cols["window_end"] = [slot + self.window] * n
        schema = self.schema
        if schema is None:
            return pa.RecordBatch.from_arrays([pa.array(c) for c in cols.values()], names=list(cols))
        return pa.RecordBatch.from_arrays([pa.array(cols.get(f.name, [None] * n), type=f.type) for f in schema],
                                          schema=schema)

    def _key_dict(self, k: Any) -> dict[str, Any]:
        if len(self._key_names) == 1:
            return {self._key_names[0]: k}
        return dict(zip(self._key_names, k))

    def _result(self, k: Any, acc: Any) -> dict[str, Any]:
        kind = self.agg.kind
        if kind == "count":
            return {**self._key_dict(k), "count": acc}
        if kind == "sum":
            return {**self._key_dict(k), self.agg.column: acc}
        if kind == "reduce":
            return dict(acc)
        if self.agg.finish is not None:
            return dict(self.agg.finish(k, acc))
        return {**self._key_dict(k), "value": acc}

    def _fold(self, slot: int, bucket: dict[Any, Any]) -> list[dict[str, Any]]:
        kind = self.agg.kind
        out = []
        if self.window is not None:
            extra = {"window_start": slot, "window_end": slot + self.window}
            for k in _sorted(bucket):
                out.append({**self._result(k, bucket[k]), **extra})
            return out
        state = self._state
        for k in _sorted(bucket):
            partial = bucket[k]
            if kind in ("count", "sum"):
                acc = state.get(k, 0) + partial
            elif kind == "reduce":
                acc = partial if k not in state else self.agg.fn(state[k], partial)
            else:
                acc = state[k] if k in state else self.agg.zero()
                for r in partial:
                    acc = self.agg.fn(acc, r)
            state[k] = acc
            out.append(self._result(k, acc))
        return out

    # -- state ---------------------------------------------------------------------------------------

    def _groups(self, keys: list[Any]) -> np.ndarray:
        if not keys:
            return np.zeros(0, np.int64)
        n = len(self._key_names)
        types = self._key_types or [None] * n
        if n == 1:
            cols = [pa.array(keys, type=types[0])]
        else:
            cols = [pa.array([k[i] for k in keys], type=types[i]) for i in range(n)]
        return key_groups_of_values(cols, self.ctx.key_groups)

    def _what(self, pending: bool) -> str:
        kind = self.agg.kind
        if pending:
            if kind == "aggregate" and self.window is None:
                return "buffered records of aggregate()"
            return f"pending partial values of {kind}()"
        return f"running values of {kind}()" if kind != "aggregate" else "accumulators of aggregate()"

    def snapshot(self, checkpoint: int) -> dict[str, Any]:
        for slot in list(self._counted):
            self._count_slot(slot)
        n = len(self._key_names)
        node = self.ctx.node
        state_keys = list(self._state)
        state = encode_table(self._groups(state_keys).tolist(), None, state_keys, [self._state[k] for k in state_keys],
                             n_keys=n, key_types=self._key_types, serializer=self.serializer, operator=node,
                             what=self._what(False))
        slots: list[int] = []
        keys: list[Any] = []
        values: list[Any] = []
        for slot, bucket in self._pending.items():
            slots.extend([slot] * len(bucket))
            keys.extend(bucket)
            values.extend(bucket.values())
        pending = encode_table(self._groups(keys).tolist(), slots, keys, values, n_keys=n, key_types=self._key_types,
                               serializer=self.serializer, operator=node, what=self._what(True))
        inst = {}
        if self._key_types is not None:
            inst["key_schema"] = pa.schema([pa.field(f"k{i}", t) for i, t in enumerate(self._key_types)]).empty_table()
        return {"keyed": {"state": state, "pending": pending}, "instance": inst}


_COUNT_BUFFER_ROWS = 1 << 20
"""Key rows ``count()`` buffers (all slots together) before it counts them into its pending counts."""


def count_keys(cols: list[pa.Array]) -> tuple[list[Any], list[int]]:
    """The distinct keys of the key columns ``cols`` (one Python value per key, a tuple for several columns)
    and how many rows have each — what ``group_by(...).aggregate([([], "count_all")])`` gives. One integer
    column without nulls whose values span at most a few times the rows (ids, buckets, small keys) is counted
    with ``numpy.bincount``; anything else with Arrow's hash grouping."""
    if len(cols) == 1:
        col = cols[0]
        if pa.types.is_integer(col.type) and col.null_count == 0 and len(col):
            values = col.to_numpy(zero_copy_only=False)
            lo, hi = int(values.min()), int(values.max())
            if hi - lo <= 4 * len(values) + 1024 and hi < 1 << 63:
                counts = np.bincount(np.subtract(values, lo, dtype=np.int64), minlength=hi - lo + 1)
                present = np.flatnonzero(counts)
                return (present + lo).tolist(), counts[present].tolist()
    names = [f"k{i}" for i in range(len(cols))]
    grouped = pa.Table.from_arrays(cols, names=names).group_by(names, use_threads=False).aggregate([([], "count_all")])
    return KeyedAggregateOp._keys_of(grouped, names), grouped.column("count_all").to_pylist()


def _sorted(keys: Iterable[Any]) -> list[Any]:
    keys = list(keys)
    try:
        return sorted(keys)
    except TypeError:  # keys of mixed types (or None): arrival order
        return keys


# -- rows with their times (operators with several inputs buffer them) ----------------------------------

INTERNAL = "__el_"
"""Prefix of the columns operators add to buffered rows (time, key, markers); input columns may not use it."""
TIME_COLUMN = INTERNAL + "t"
"""The time of each buffered row."""


def with_time(batch: pa.RecordBatch, time: int) -> pa.Table:
    """``batch`` as a table with a ``TIME_COLUMN`` of ``time``."""
    return pa.Table.from_batches([batch]).append_column(TIME_COLUMN, pa.array(np.full(batch.num_rows, time,
                                                                                        np.int64)))


def concat_tables(tables: list[pa.Table]) -> pa.Table:
    """The tables' rows in order, their schemas unified (a null column takes the type of the others)."""
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="permissive")


def user_columns(table: pa.Table) -> pa.Table:
    """``table`` without the columns operators added (``INTERNAL``)."""
    drop = [n for n in table.column_names if n.startswith(INTERNAL)]
    return table.drop_columns(drop) if drop else table


def key_arrays(table: "pa.Table | pa.RecordBatch", key: Key) -> list[pa.Array]:
    """The key columns of ``table`` (one array for a function key: its result)."""
    if callable(key):
        batch = table
        if isinstance(table, pa.Table):
            batches = table.combine_chunks().to_batches()
            batch = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)
        arr = key(batch)
        return [arr if isinstance(arr, pa.Array) else pa.array(arr)]
    names = [key] if isinstance(key, str) else list(key)
    out = []
    for n in names:
        col = table.column(n)
        out.append(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
    return out


def key_names(key: Key) -> list[str]:
    """The column names of a key (``["key"]`` for a function key)."""
    if callable(key):
        return ["key"]
    return [key] if isinstance(key, str) else list(key)


def conform(batch: pa.RecordBatch, schema: pa.Schema | None) -> pa.RecordBatch:
    """``batch`` with ``schema``'s columns, in its order and types (a column ``batch`` lacks: nulls)."""
    if schema is None or batch.schema.equals(schema):
        return batch
    n = batch.num_rows
    cols = []
    for f in schema:
        i = batch.schema.get_field_index(f.name)
        col = batch.column(i) if i >= 0 else pa.nulls(n, f.type)
        cols.append(col if col.type == f.type else col.cast(f.type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)
