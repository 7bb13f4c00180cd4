"""Operators over several inputs that are not joins: ``union`` and connected streams (``connect``).

* ``UnionOp``: the records of every input, as they come (inputs of the same schema; ``schema=`` casts).
* ``CoFlatMapOp``: connected streams with a row function per input (``fn0`` for input 0, ``fn1`` for input
  1), each returning any number of records; no state.
* ``CoProcessOp``: keyed connected streams with a function per input and one state value per key that both
  share (Flink's ``KeyedCoProcessFunction``): ``fn(acc, record) -> (acc, records)``, ``acc`` starting at
  ``zero()``; an ``acc`` of None forgets the key. Records are processed per completed time — when the meet
  of the inputs' frontiers passes ``t``, the records at ``t``: input 0's, then input 1's, each input's in
  arrival order, keys independent — and their output is emitted at ``t``. So the output does not depend on
  how the two inputs interleaved; within one input and time it may depend on arrival order (one upstream
  instance per input keeps it fixed). Pending records are checkpointed as buffered rows
  (``runtime.checkpoints.rowbuffer``), the per-key values as keyed state (``runtime.checkpoints.keyedstate``,
  ``serializer=`` as for ``aggregate``); both rescale by key group.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np
import pyarrow as pa

from eventlog.antichain import Antichain
from replay.keyhash import Key

from .checkpoints.keyedstate import check_serializer, decode_keyed, encode_table, table_path
from .checkpoints.keygroups import key_groups_of_values
from .checkpoints.rowbuffer import decode_rows, encode_rows
from .checkpoints.store import StateCheck
from .operators import (
    TIME_COLUMN,
    Operator,
    OperatorContext,
    check_state,
    concat_tables,
    conform,
    key_arrays,
    to_batch,
    user_columns,
    with_time,
)

CoFn = Callable[[Any, dict[str, Any]], "tuple[Any, Iterable[dict[str, Any]] | None]"]


class UnionOp(Operator):
    """``union``: the records of all inputs, unchanged (cast to ``schema`` when given)."""

    def __init__(self, schema: pa.Schema | None = None) -> None:
        self.schema = schema

    def process(self, time: int, batch: pa.RecordBatch) -> None:
        self.ctx.emit(time, conform(batch, self.schema))


class CoFlatMapOp(Operator):
    """Connected streams' ``flat_map``: ``fns[i](record)`` (any number of records) per record of input ``i``."""

    def __init__(self, fns: tuple[Callable[[dict[str, Any]], Iterable[dict[str, Any]]], ...],
                 schema: pa.Schema | None = None) -> None:
        self.fns = fns
        self.schema = schema

    def process_input(self, input: int, time: int, batch: pa.RecordBatch) -> None:
        fn = self.fns[input]
        out = to_batch([o for r in batch.to_pylist() for o in (fn(r) or ())], self.schema)
        if out is not None:
            self.ctx.emit(time, out)


class CoProcessOp(Operator):
    """Keyed connected streams: a function per input over a state value per key (see the module doc)."""

    def __init__(self, keys: tuple[Key, Key], fns: tuple[CoFn, CoFn], zero: Callable[[], Any] | None = None,
                 schema: pa.Schema | None = None, serializer: str = "auto") -> None:
        self.keys = keys
        self.fns = fns
        self.zero = zero or (lambda: None)
        self.schema = schema
        self.serializer = check_serializer(serializer)
        self._n_keys = 1 if callable(keys[0]) else (1 if isinstance(keys[0], str) else len(keys[0]))
        self._pending: dict[int, tuple[list[pa.Table], list[pa.Table]]] = {}
        self._state: dict[Any, Any] = {}
        self._key_types: list[pa.DataType] | None = None

    def open(self, ctx: OperatorContext, state: dict[str, Any] | None) -> None:
        super().open(ctx, state)
        if not state:
            return
        inst = state.get("instance") or {}
        if isinstance(inst.get("key_schema"), pa.Table):
            self._key_types = list(inst["key_schema"].schema.types)
        keyed = state.get("keyed") or {}
        for table in keyed.get("state", ()):
            _slots, keys, values = self._decode_state(table, ctx.node, True)
            self._state.update(zip(keys, values))
        for side in (0, 1):
            for table in keyed.get(f"pending{side}", ()):
                times, _keys, rows = decode_rows(table, n_keys=self._n_keys, operator=ctx.node, path=table_path(table))
                rows = rows.append_column(TIME_COLUMN, pa.array(times, pa.int64()))
                for t in np.unique(times).tolist():
                    self._pending.setdefault(t, ([], []))[side].append(rows.filter(pa.array(times == t)))

    def _decode_state(self, table: pa.Table, node: str, unpickle: bool) -> Any:
        return decode_keyed(table, pending=False, n_keys=self._n_keys, allow_pickle=self.serializer == "pickle",
                            unpickle=unpickle, operator=node)

    def verify_state(self, state: dict[str, Any] | None, check: StateCheck) -> None:
        super().verify_state(state, check)
        if not state:
            return
        inst = state.get("instance") or {}
        check_state(isinstance(inst, dict), "'instance' is not a map", check.where)
        ks = inst.get("key_schema")
        check_state(ks is None or (isinstance(ks, pa.Table) and ks.num_columns == self._n_keys),
                    f"'key_schema' is not a table of {self._n_keys} key columns", check.where)
        keyed = state.get("keyed") or {}
        check_state(isinstance(keyed, dict) and set(keyed) <= {"state", "pending0", "pending1"}
                    and all(isinstance(v, list) and all(isinstance(t, pa.Table) for t in v) for v in keyed.values()),
                    "'keyed' is not a map of state tables", check.where)
        for name, tables in keyed.items():
            for table in tables:
                if name == "state":
                    self._decode_state(table, check.node, False)
                else:
                    decode_rows(table, n_keys=self._n_keys, operator=check.node, path=table_path(table))

    def process_input(self, input: int, time: int, batch: pa.RecordBatch) -> None:
        self._pending.setdefault(time, ([], []))[input].append(with_time(batch, time))

    def hold(self) -> int | None:
        return min(self._pending) if self._pending else None

    def on_frontier(self, frontier: Antichain) -> None:
        for t in sorted(t for t in self._pending if not frontier.less_equal(t)):
            out: list[dict[str, Any]] = []
            state, zero = self._state, self.zero
            for side, tables in enumerate(self._pending.pop(t)):
                fn = self.fns[side]
                for table in tables:
                    cols = key_arrays(table, self.keys[side])
                    if self._key_types is None:
                        self._key_types = [c.type for c in cols]
                    keys = cols[0].to_pylist() if len(cols) == 1 else list(zip(*(c.to_pylist() for c in cols)))
                    for k, r in zip(keys, user_columns(table).to_pylist()):
                        acc, rows = fn(state[k] if k in state else zero(), r)
                        if acc is None:
                            state.pop(k, None)
                        else:
                            state[k] = acc
                        if rows:
                            out.extend(rows)
            batch = to_batch(out, self.schema)
            if batch is not None:
                self.ctx.emit(t, batch)

    def snapshot(self, checkpoint: int) -> dict[str, Any]:
        node = self.ctx.node
        keys = list(self._state)
        if keys:
            types = self._key_types or [None] * self._n_keys
            cols = [pa.array(keys, type=types[0])] if self._n_keys == 1 else \
                [pa.array([k[i] for k in keys], type=types[i]) for i in range(self._n_keys)]
            groups = key_groups_of_values(cols, self.ctx.key_groups).tolist()
        else:
            groups = []
        keyed: dict[str, Any] = {"state": encode_table(groups, None, keys, [self._state[k] for k in keys],
                                                       n_keys=self._n_keys, key_types=self._key_types,
                                                       serializer=self.serializer, operator=node,
                                                       what="per-key values of process()")}
        for side in (0, 1):
            tables = [t for bufs in self._pending.values() for t in bufs[side]]
            if tables:
                table = concat_tables(tables)
                keyed[f"pending{side}"] = encode_rows(user_columns(table), table.column(TIME_COLUMN).combine_chunks(),
                                                      key_arrays(user_columns(table), self.keys[side]),
                                                      self.ctx.key_groups)
        inst = {}
        if self._key_types is not None:
            inst["key_schema"] = pa.schema([pa.field(f"k{i}", t) for i, t in enumerate(self._key_types)]).empty_table()
        return {"keyed": keyed, "instance": inst}


