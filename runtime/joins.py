"""Keyed joins of two inputs: windowed, interval, and with a changing table (Flink's semantics).

Both inputs are keyed (``a.key_by(k).join(b.key_by(k2))``): rows reach the instance owning their key group,
so every key's rows of both inputs meet in one instance. Rows are matched by equal keys (SQL semantics: a
null key matches nothing; key columns of different integer widths compare by value). A joined row has the
left row's columns, then the right row's — without the right key columns when both inputs key by the same
column names, and with ``_right`` appended to any other right column whose name the left row uses. ``how``
is ``"inner"`` (pairs only) or ``"left"`` (left outer: also each left row that can no longer match any right
row, once, with nulls in the right columns).

* **Windowed join** (``WindowJoinOp``): tumbling windows ``[w, w+size)`` of both inputs; when the window's
  last time is complete on both inputs (the meet of their frontiers passed it) the instance emits every
  pair of a left and a right row of the window with equal keys, at the window's last time, with
  ``window_start``/``window_end`` columns, and forgets the window.
* **Interval join** (``IntervalJoinOp``): a left row at ``tl`` and a right row at ``tr`` with equal keys
  join when ``tl + lower <= tr <= tl + upper``; the pair is emitted as soon as both are present, at
  ``max(tl, tr)``. A left row is forgotten once the right input's frontier passed ``tl + upper`` (no right row
  can match it any more) — in a left outer join it is then emitted unmatched, at ``tl``, if it never matched —
  and a right row once the left input's frontier passed ``tr - lower``.
* **Join with a changing table** (``TableJoinOp``): input 1 is a stream of table rows (upserts by key); each
  left row at ``t`` joins the latest table row of its key at a time ``<= t`` (of several rows of a key at one
  time, the last to arrive wins), emitted at ``t`` once the table input's frontier passed ``t`` (every update
  up to ``t`` is known). Table versions no left row can ask for any more are forgotten.

State — the buffered rows of each input, the table's versions — is checkpointed as keyed state tables of
buffered rows (``runtime.checkpoints.rowbuffer``), so it rescales by key group. Matching is vectorised: Arrow's
hash join on the key columns and row numbers, then ``take`` of the rows (any column types).
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eventlog.antichain import Antichain
from replay.keyhash import Key

from .checkpoints.rowbuffer import decode_rows, encode_rows
from .checkpoints.store import StateCheck
from .errors import JobGraphError
from .operators import (
    INTERNAL,
    TIME_COLUMN,
    Operator,
    OperatorContext,
    check_state,
    concat_tables,
    conform,
    key_arrays,
    key_names,
    user_columns,
    with_time,
)

HOWS = ("inner", "left")
"""The join kinds: inner, and left outer."""

_MATCHED = INTERNAL + "m"
_SEQ = INTERNAL + "s"
_FAR = 1 << 62
"""Frontiers and bounds are clamped here (a finished input's frontier, ``2^63``, would overflow int64 sums)."""


def check_how(how: str) -> str:
    """``how`` if it is one of ``HOWS``; raises ``JobGraphError`` otherwise."""
    if how not in HOWS:
        raise JobGraphError(f"how must be one of {HOWS}, not {how!r}")
    return how


def _key_col(i: int) -> str:
    return f"{INTERNAL}k{i}"


def _low(frontier: Antichain) -> int:
    return min(int(frontier.elements[0]), _FAR) if frontier.elements else _FAR  # type: ignore[arg-type]


def match_keys(left: list[pa.Array], right: list[pa.Array]) -> tuple[np.ndarray, np.ndarray]:
    """Row numbers ``(i, j)`` of every pair of a left and a right row with equal keys (null matches nothing)."""
    if not len(left[0]) or not len(right[0]):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    names = [f"k{i}" for i in range(len(left))]
    rk = []
    for lcol, rcol in zip(left, right):
        if rcol.type != lcol.type:
            try:
                rcol = rcol.cast(lcol.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise JobGraphError(f"join keys of types {lcol.type} and {rcol.type} do not compare: {e}") from None
        rk.append(rcol)
    lt = pa.Table.from_arrays([*left, pa.array(np.arange(len(left[0]), dtype=np.int64))], names=[*names, "i"])
    rt = pa.Table.from_arrays([*rk, pa.array(np.arange(len(rk[0]), dtype=np.int64))], names=[*names, "j"])
    joined = lt.join(rt, names, join_type="inner", use_threads=False)
    return (joined.column("i").to_numpy().astype(np.int64, copy=False),
            joined.column("j").to_numpy().astype(np.int64, copy=False))


class _Join(Operator):
    """What the joins share: keys, output columns, buffers with their times and keys, state tables."""

    def __init__(self, left_key: Key, right_key: Key, how: str, schema: pa.Schema | None) -> None:
        self.keys = (left_key, right_key)
        self.how = check_how(how)
        self.schema = schema
        same = not callable(left_key) and not callable(right_key) and key_names(left_key) == key_names(right_key)
        self._skip_right = set(key_names(left_key)) if same else set()
        self._n_keys = len(key_names(left_key))
        self._right_schema: pa.Schema | None = None
        self._fronts = [0, 0]

    # -- rows ----------------------------------------------------------------------------------------

    def _prepare(self, input: int, time: int, batch: pa.RecordBatch) -> pa.Table:
        """The batch as a buffer table: its columns, its time, its key columns."""
        if any(n.startswith(INTERNAL) for n in batch.schema.names):
            raise JobGraphError(f"operator {self.ctx.node!r}: input columns may not start with {INTERNAL!r}")
        table = with_time(batch, time)
        for i, k in enumerate(key_arrays(batch, self.keys[input])):
            table = table.append_column(_key_col(i), k)
        if input == 1:
            self._right_schema = batch.schema
        return table

    def _keys(self, table: pa.Table) -> list[pa.Array]:
        return [table.column(_key_col(i)).combine_chunks() for i in range(self._n_keys)]

    def _right_part(self, right: pa.Table | None, n: int) -> tuple[list[str], list[Any]]:
        if right is not None:
            right = user_columns(right)
            return right.column_names, list(right.columns)
        schema = self._right_schema
        if schema is None:
            return [], []
        return schema.names, [pa.nulls(n, f.type) for f in schema]

    def _combine(self, left: pa.Table, right: pa.Table | None) -> pa.Table:
        """Joined rows: ``left``'s columns, then ``right``'s (None: nulls of the right input's columns)."""
        left = user_columns(left)
        names, cols = list(left.column_names), list(left.columns)
        used = set(names)
        for name, col in zip(*self._right_part(right, left.num_rows)):
            if name in self._skip_right:
                continue
            while name in used:
                name += "_right"
            used.add(name)
            names.append(name)
            cols.append(col)
        return pa.Table.from_arrays(cols, names=names)

    def _emit(self, time: int, table: pa.Table) -> None:
        if not table.num_rows:
            return
        for batch in table.combine_chunks().to_batches():
            if batch.num_rows:
                self.ctx.emit(time, conform(batch, self.schema))

    def _emit_by_time(self, times: np.ndarray, table: pa.Table) -> None:
        """Emit each row of ``table`` at its time (``times``), earliest first."""
        if not len(times):
            return
        order = np.argsort(times, kind="stable")
        times = times[order]
        table = table.take(pa.array(order))
        bounds = np.flatnonzero(np.diff(times)) + 1
        starts = [0, *bounds.tolist()]
        ends = [*bounds.tolist(), len(times)]
        for s, e in zip(starts, ends):
            self._emit(int(times[s]), table.slice(s, e - s))

    # -- state ---------------------------------------------------------------------------------------

    def _encode(self, table: pa.Table | None) -> pa.Table | None:
        if table is None or not table.num_rows:
            return None
        rows = table.drop_columns([TIME_COLUMN, *(_key_col(i) for i in range(self._n_keys))])
        return encode_rows(rows, table.column(TIME_COLUMN).combine_chunks(), self._keys(table), self.ctx.key_groups)

    def _decode(self, tables: list[pa.Table], node: str) -> pa.Table | None:
        out = []
        for t in tables:
            path = (t.schema.metadata or {}).get(b"path", b"").decode("utf-8", "replace") or None
            times, keys, rows = decode_rows(t, n_keys=self._n_keys, operator=node, path=path)
            if not len(times):
                continue
            rows = rows.append_column(TIME_COLUMN, pa.array(times, pa.int64()))
            for i, k in enumerate(keys):
                rows = rows.append_column(_key_col(i), k)
            out.append(rows)
        return concat_tables(out) if out else None

    def _instance(self) -> dict[str, Any]:
        return {"right_schema": self._right_schema.empty_table()} if self._right_schema is not None else {}

    def _open_instance(self, state: dict[str, Any] | None) -> dict[str, list[pa.Table]]:
        if not state:
            return {}
        inst = state.get("instance") or {}
        if isinstance(inst.get("right_schema"), pa.Table):
            self._right_schema = inst["right_schema"].schema
        return state.get("keyed") or {}

    def _restored_sides(self, state: dict[str, Any] | None, node: str) -> Iterator[tuple[int, pa.Table, np.ndarray]]:
        """The rows of each input (0 left, 1 right) a checkpoint buffered, with their times."""
        keyed = self._open_instance(state)
        for side, name in enumerate(("left", "right")):
            table = self._decode(keyed.get(name, []), node)
            if table is not None:
                yield side, table, table.column(TIME_COLUMN).to_numpy()

    def _verify(self, state: dict[str, Any] | None, check: StateCheck, names: set[str]) -> None:
        Operator.verify_state(self, state, check)
        if not state:
            return
        inst = state.get("instance") or {}
        check_state(isinstance(inst, dict), "'instance' is not a map", check.where)
        rs = inst.get("right_schema")
        check_state(rs is None or isinstance(rs, pa.Table), "'right_schema' is not a table", check.where)
        keyed = state.get("keyed") or {}
        check_state(isinstance(keyed, dict) and set(keyed) <= names
                    and all(isinstance(v, list) and all(isinstance(t, pa.Table) for t in v) for v in keyed.values()),
                    f"'keyed' is not a map of buffered-row tables ({sorted(names)})", check.where)
        for tables in keyed.values():
            self._decode(tables, check.node)


class WindowJoinOp(_Join):
    """The windowed join of two keyed inputs over tumbling windows of ``size`` times (see the module doc)."""

    def __init__(self, left_key: Key, right_key: Key, size: int, how: str = "inner",
                 schema: pa.Schema | None = None) -> None:
        super().__init__(left_key, right_key, how, schema)
        self.size = size
        self._windows: dict[int, tuple[list[pa.Table], list[pa.Table]]] = {}   # start -> (left, right) buffers

    def open(self, ctx: OperatorContext, state: dict[str, Any] | None) -> None:
        super().open(ctx, state)
        for side, table, times in self._restored_sides(state, ctx.node):
            starts = times - times % self.size
            for w in np.unique(starts).tolist():
                self._windows.setdefault(w, ([], []))[side].append(table.filter(pa.array(starts == w)))

    def verify_state(self, state: dict[str, Any] | None, check: StateCheck) -> None:
        self._verify(state, check, {"left", "right"})

    def process_input(self, input: int, time: int, batch: pa.RecordBatch) -> None:
        w = time - time % self.size
        self._windows.setdefault(w, ([], []))[input].append(self._prepare(input, time, batch))

    def hold(self) -> int | None:
        return min(self._windows) + self.size - 1 if self._windows else None

    def on_frontier(self, frontier: Antichain) -> None:
        for w in sorted(w for w in self._windows if not frontier.less_equal(w + self.size - 1)):
            lefts, rights = self._windows.pop(w)
            if not lefts:
                continue
            left = concat_tables(lefts)
            right = concat_tables(rights) if rights else None
            parts = []
            if right is not None:
                i, j = match_keys(self._keys(left), self._keys(right))
                parts.append(self._combine(left.take(pa.array(i)), right.take(pa.array(j))))
                unmatched = np.setdiff1d(np.arange(left.num_rows), i) if self.how == "left" else None
            else:
                unmatched = np.arange(left.num_rows) if self.how == "left" else None
            if unmatched is not None and len(unmatched):
                parts.append(self._combine(left.take(pa.array(unmatched)), None))
            for out in parts:
                if out.num_rows:
                    n = out.num_rows
                    out = out.append_column("window_start", pa.array(np.full(n, w, np.int64)))
                    out = out.append_column("window_end", pa.array(np.full(n, w + self.size, np.int64)))
                    self._emit(w + self.size - 1, out)

    def snapshot(self, checkpoint: int) -> dict[str, Any]:
        keyed = {}
        for side, name in enumerate(("left", "right")):
            tables = [t for bufs in self._windows.values() for t in bufs[side]]
            enc = self._encode(concat_tables(tables)) if tables else None
            if enc is not None:
                keyed[name] = enc
        return {"keyed": keyed, "instance": self._instance()}


_STEP_ROWS = 1 << 16
"""Rows an interval or table join buffers before it joins them without waiting for a frontier change."""


class IntervalJoinOp(_Join):
    """The interval join of two keyed inputs: ``tl + lower <= tr <= tl + upper`` (see the module doc).

    Rows are kept per time, so joining new rows touches only the other input's times that can match them
    (``upper - lower + 1`` of them), not its whole buffer."""

    def __init__(self, left_key: Key, right_key: Key, lower: int, upper: int, how: str = "inner",
                 schema: pa.Schema | None = None) -> None:
        super().__init__(left_key, right_key, how, schema)
        self.lower, self.upper = lower, upper
        self._bufs: list[dict[int, list[pa.Table]]] = [{}, {}]   # per input, time -> rows joined already
        self._new: list[dict[int, list[pa.Table]]] = [{}, {}]    # per input, time -> rows not yet joined
        self._new_rows = 0
        self._unmatched_min: int | None = None                 # left outer: the earliest unmatched left row

    def open(self, ctx: OperatorContext, state: dict[str, Any] | None) -> None:
        super().open(ctx, state)
        for side, table, times in self._restored_sides(state, ctx.node):
            for t in np.unique(times).tolist():
                self._bufs[side][t] = [table.filter(pa.array(times == t))]
        self._unmatched_min = self._earliest_unmatched()

    def verify_state(self, state: dict[str, Any] | None, check: StateCheck) -> None:
        self._verify(state, check, {"left", "right"})

    def process_input(self, input: int, time: int, batch: pa.RecordBatch) -> None:
        table = self._prepare(input, time, batch)
        if input == 0 and self.how == "left":
            table = table.append_column(_MATCHED, pa.array(np.zeros(table.num_rows, bool)))
        self._new[input].setdefault(time, []).append(table)
        self._new_rows += table.num_rows
        if self._new_rows >= _STEP_ROWS:
            self._step()

    def hold(self) -> int | None:
        holds = [min(n) for n in self._new if n]
        if self._unmatched_min is not None:
            holds.append(self._unmatched_min)
        return min(holds) if holds else None

    def on_input_frontiers(self, frontiers: tuple[Antichain, ...]) -> None:
        self._fronts = [_low(frontiers[0]), _low(frontiers[1])]
        self._step()

    @staticmethod
    def _rows(bucket: dict[int, list[pa.Table]], lo: int, hi: int) -> pa.Table | None:
        if hi - lo + 1 <= len(bucket):
            tables = [t for k in range(lo, hi + 1) for t in bucket.get(k, ())]
        else:
            tables = [t for k, ts in bucket.items() if lo <= k <= hi for t in ts]
        return concat_tables(tables) if tables else None

    def _join(self, left: pa.Table, right: pa.Table, times: list[np.ndarray], outs: list[pa.Table]) -> np.ndarray:
        """Join ``left`` with ``right`` (bounds checked), collect the pairs; the left rows that matched."""
        i, j = match_keys(self._keys(left), self._keys(right))
        if len(i):
            tl = left.column(TIME_COLUMN).to_numpy()[i]
            tr = right.column(TIME_COLUMN).to_numpy()[j]
            ok = (tr >= tl + self.lower) & (tr <= tl + self.upper)
            i, j = i[ok], j[ok]
            if len(i):
                times.append(np.maximum(tl[ok], tr[ok]))
                outs.append(self._combine(left.take(pa.array(i)), right.take(pa.array(j))))
        return i

    def _mark(self, table: pa.Table, matched_rows: np.ndarray) -> pa.Table:
        if self.how != "left" or not len(matched_rows):
            return table
        matched = table.column(_MATCHED).to_numpy(zero_copy_only=False).copy()
        matched[matched_rows] = True
        return table.set_column(table.schema.get_field_index(_MATCHED), _MATCHED, pa.array(matched))

    def _step(self) -> None:
        """Join the new rows (new left with all right rows of the times that can match, old left with new
        right), then forget what can no longer match (left outer: emitting unmatched left rows)."""
        new_l, new_r = self._new
        if new_l or new_r:
            self._new = [{}, {}]
            self._new_rows = 0
            old_l, old_r = self._bufs
            times: list[np.ndarray] = []
            outs: list[pa.Table] = []
            for t in new_r:                                  # right rows are joined in, then kept
                old_r.setdefault(t, []).extend(new_r[t])
            for t, tables in new_l.items():
                left = concat_tables(tables)
                right = self._rows(old_r, t + self.lower, t + self.upper)
                if right is not None:
                    left = self._mark(left, self._join(left, right, times, outs))
                new_l[t] = [left]
            for t in sorted(new_r):
                right = concat_tables(new_r[t])
                lo, hi = t - self.upper, t - self.lower      # old left rows that a right row at t matches
                for tl in ([k for k in range(lo, hi + 1) if k in old_l] if hi - lo + 1 <= len(old_l)
                           else [k for k in old_l if lo <= k <= hi]):
                    left = concat_tables(old_l[tl])
                    old_l[tl] = [self._mark(left, self._join(left, right, times, outs))]
            for t, tables in new_l.items():
                old_l.setdefault(t, []).extend(tables)
            if outs:
                self._emit_by_time(np.concatenate(times), concat_tables(outs))
        self._forget()

    def _forget(self) -> None:
        f_left, f_right = self._fronts
        left, right = self._bufs
        for t in [t for t in left if t + self.upper < f_right]:
            tables = left.pop(t)
            if self.how == "left":
                gone = concat_tables(tables)
                lonely = ~gone.column(_MATCHED).to_numpy(zero_copy_only=False)
                if lonely.any():
                    self._emit(t, self._combine(gone.filter(pa.array(lonely)), None))
        for t in [t for t in right if t - self.lower < f_left]:
            del right[t]
        self._unmatched_min = self._earliest_unmatched()

    def _earliest_unmatched(self) -> int | None:
        if self.how != "left":
            return None
        for t in sorted(self._bufs[0]):
            if any(not tb.column(_MATCHED).to_numpy(zero_copy_only=False).all() for tb in self._bufs[0][t]):
                return t
        return None

    def snapshot(self, checkpoint: int) -> dict[str, Any]:
        self._step()   # the state holds joined rows only (the frontiers it forgets by did not move)
        keyed = {}
        for side, name in enumerate(("left", "right")):
            tables = [t for ts in self._bufs[side].values() for t in ts]
            enc = self._encode(concat_tables(tables)) if tables else None
            if enc is not None:
                keyed[name] = enc
        return {"keyed": keyed, "instance": self._instance()}


class TableJoinOp(_Join):
    """Input 0 joined with the latest row per key of the table that input 1 updates (see the module doc)."""

    def __init__(self, left_key: Key, right_key: Key, how: str = "inner", schema: pa.Schema | None = None) -> None:
        super().__init__(left_key, right_key, how, schema)
        self._waiting: list[pa.Table] = []       # left rows until the table's frontier passes their time
        self._waiting_min: int | None = None
        self._waiting_rows = 0
        self._table: pa.Table | None = None      # the table's versions, in arrival order
        self._updates: list[pa.Table] = []
        self._compacted = 0                      # versions after the last compaction

    def open(self, ctx: OperatorContext, state: dict[str, Any] | None) -> None:
        super().open(ctx, state)
        keyed = self._open_instance(state)
        stream = self._decode(keyed.get("stream", []), ctx.node)
        if stream is not None:
            self._waiting = [stream]
            self._waiting_rows = stream.num_rows
            self._waiting_min = int(stream.column(TIME_COLUMN).to_numpy().min())
        table = self._decode(keyed.get("table", []), ctx.node)
        if table is not None:
            self._table = table
            self._compacted = table.num_rows

    def verify_state(self, state: dict[str, Any] | None, check: StateCheck) -> None:
        self._verify(state, check, {"stream", "table"})

    def process_input(self, input: int, time: int, batch: pa.RecordBatch) -> None:
        table = self._prepare(input, time, batch)
        if input == 1:
            valid = None
            for k in self._keys(table):           # a row with a null key matches nothing: not kept
                ok = k.is_valid()
                valid = ok if valid is None else pc.and_(valid, ok)
            if valid is not None and valid.false_count:
                table = table.filter(valid)
            self._updates.append(table)
            return
        self._waiting.append(table)
        self._waiting_rows += table.num_rows
        self._waiting_min = time if self._waiting_min is None else min(self._waiting_min, time)
        if self._waiting_rows >= _STEP_ROWS and time < self._fronts[1]:
            self._step()

    def hold(self) -> int | None:
        return self._waiting_min

    def on_input_frontiers(self, frontiers: tuple[Antichain, ...]) -> None:
        self._fronts = [_low(frontiers[0]), _low(frontiers[1])]
        self._step()

    def _step(self) -> None:
        if self._updates:
            self._table = concat_tables([t for t in (self._table, *self._updates) if t is not None])
            self._updates = []
        f_left, f_table = self._fronts
        if self._waiting and self._waiting_min is not None and self._waiting_min < f_table:
            waiting = concat_tables(self._waiting)
            tl = waiting.column(TIME_COLUMN).to_numpy()
            ready = tl < f_table
            rows = waiting.filter(pa.array(ready)) if not ready.all() else waiting
            rest = waiting.filter(pa.array(~ready)) if not ready.all() else None
            self._waiting = [rest] if rest is not None else []
            self._waiting_rows = rest.num_rows if rest is not None else 0
            self._waiting_min = int(tl[~ready].min()) if rest is not None else None
            self._join(rows)
        if self._table is not None and self._table.num_rows > 2 * self._compacted + 1024:
            self._compact(f_left)

    def _join(self, rows: pa.Table) -> None:
        tl = rows.column(TIME_COLUMN).to_numpy()
        table = self._table
        picked_i = picked_j = np.zeros(0, np.int64)
        if table is not None and table.num_rows:
            i, j = match_keys(self._keys(rows), self._keys(table))
            tv = table.column(TIME_COLUMN).to_numpy()
            ok = tv[j] <= tl[i]
            i, j = i[ok], j[ok]
            if len(i):
                order = np.lexsort((j, tv[j], i))          # by left row, then version time, then arrival
                i, j = i[order], j[order]
                last = np.ones(len(i), bool)
                last[:-1] = i[1:] != i[:-1]
                picked_i, picked_j = i[last], j[last]
        outs, times = [], []
        if len(picked_i):
            outs.append(self._combine(rows.take(pa.array(picked_i)), table.take(pa.array(picked_j))))  # type: ignore[union-attr]
            times.append(tl[picked_i])
        if self.how == "left":
            lonely = np.ones(rows.num_rows, bool)
            lonely[picked_i] = False
            if lonely.any():
                outs.append(self._combine(rows.filter(pa.array(lonely)), None))
                times.append(tl[lonely])
        if outs:
            self._emit_by_time(np.concatenate(times), concat_tables(outs))

    def _compact(self, f_left: int) -> None:
        """Forget versions no left row can ask for: of the versions at or before the earliest time a left row
        may still have, all but the latest of each key."""
        table = self._table
        assert table is not None
        bound = f_left if self._waiting_min is None else min(f_left, self._waiting_min)
        tv = table.column(TIME_COLUMN).to_numpy()
        old = tv <= bound
        if old.sum() > 1:
            idx = np.flatnonzero(old)
            order = idx[np.lexsort((idx, tv[idx]))]            # old versions by time, then arrival
            keys = [k.take(pa.array(order)) for k in self._keys(table)]
            names = [f"k{i}" for i in range(len(keys))]
            pos = pa.array(np.arange(len(order), dtype=np.int64))
            grouped = pa.Table.from_arrays([*keys, pos], names=[*names, "pos"]).group_by(
                names, use_threads=False).aggregate([("pos", "max")])
            keep = np.zeros(len(tv), bool)
            keep[order[grouped.column("pos_max").to_numpy()]] = True
            keep |= ~old
            table = table.filter(pa.array(keep))
        self._table = table.combine_chunks()
        self._compacted = table.num_rows

    def snapshot(self, checkpoint: int) -> dict[str, Any]:
        if self._updates:
            self._table = concat_tables([t for t in (self._table, *self._updates) if t is not None])
            self._updates = []
        keyed = {}
        stream = self._encode(concat_tables(self._waiting)) if self._waiting else None
        if stream is not None:
            keyed["stream"] = stream
        if self._table is not None:
            # arrival order within a key is kept: rows are stored in arrival order
            table = self._encode(self._table)
            if table is not None:
                keyed["table"] = table
        return {"keyed": keyed, "instance": self._instance()}
