"""The time of captured records: a literal time, or a column holding each record's time.

``time=`` (the tap) and ``.option("time", …)`` (the writer) take an ``int`` (``7``), a product time
(``(1, 2)`` or the string ``"[1, 2]"``) or a column name. An integer column gives int64 times; an
``array<bigint>`` column gives ``product:K`` times, K taken from ``timeType`` (``"product:K"``). Records
are grouped by time with vectorised Arrow/numpy operations: one Messages event per time per batch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eventlog.errors import InvalidTimeError, SchemaMismatchError
from eventlog.time import Time, TimeType

TimeArg = Union[int, tuple[int, ...], list[int], str]
"""What ``time=`` accepts: an int, a product time, its JSON text, or a column name."""


@dataclass(frozen=True)
class TimeSpec:
    """Where the records' time comes from: ``literal`` (a time) or ``column`` (a column name)."""

    time_type: TimeType
    literal: Time | None = None
    column: str | None = None
    strip: tuple[str, ...] = ()
    """Columns ``split`` removes from the records it yields: a replayed frame's ``_time``, ``_part`` and
    ``_seq`` (its ``_time`` is the time; none of them is stored as data)."""

    @staticmethod
    def parse(value: "TimeArg | None", schema: pa.Schema, time_type: "str | TimeType | None" = None) -> "TimeSpec":
        """Resolve ``value`` against the records' ``schema``; ``None`` is time 0 (or all zeros)."""
        tt = TimeType.parse(time_type) if time_type is not None else None
        if isinstance(value, str):
            text = value.strip()
            if text and (text[0].isdigit() or text[0] in "[("):
                try:
                    value = json.loads(text.replace("(", "[").replace(")", "]"))
                except json.JSONDecodeError:
                    raise InvalidTimeError(f"time {value!r} is neither a column name nor a time") from None
        if value is None:
            tt = tt or TimeType.parse("int64")
            return TimeSpec(tt, literal=tt.minimum)
        if isinstance(value, str):
            i = schema.get_field_index(value)
            if i < 0:
                raise SchemaMismatchError(f"time column {value!r} is not in the DataFrame (columns {schema.names})")
            t = schema.field(i).type
            if pa.types.is_integer(t):
                if tt is not None and tt.arity != 0:
                    raise InvalidTimeError(f"time column {value!r} is an integer but timeType is {tt}")
                return TimeSpec(TimeType.parse("int64"), column=value)
            if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) and \
                    pa.types.is_integer(t.value_type):
                if tt is None or tt.arity == 0:
                    raise InvalidTimeError(
                        f"time column {value!r} holds arrays: say how long they are with timeType='product:K'"
                    )
                return TimeSpec(tt, column=value)
            raise InvalidTimeError(f"time column {value!r} has type {t}; use an integer or array<bigint> column")
        if isinstance(value, (list, tuple)):
            tt = tt or TimeType.parse(f"product:{len(value)}")
        else:
            tt = tt or TimeType.parse("int64")
        return TimeSpec(tt, literal=tt.check(value))

    def split(self, batch: pa.RecordBatch) -> Iterator[tuple[Time, pa.RecordBatch]]:
        """``(time, records)`` for each distinct time in ``batch`` (in time order for int64 times), without
        the ``strip`` columns."""
        if self.strip:
            keep = [n for n in batch.schema.names if n not in self.strip]
            for t, records in self._split(batch):
                yield t, records.select(keep)
            return
        yield from self._split(batch)

    def _split(self, batch: pa.RecordBatch) -> Iterator[tuple[Time, pa.RecordBatch]]:
        if batch.num_rows == 0:
            return
        if self.column is None:
            yield self.literal, batch  # type: ignore[misc]
            return
        col = batch.column(batch.schema.get_field_index(self.column))
        if col.null_count:
            raise InvalidTimeError(f"time column {self.column!r} has nulls")
        if self.time_type.arity == 0:
            yield from self._split_int(batch, col)
        else:
            yield from self._split_product(batch, col)

    def _split_int(self, batch: pa.RecordBatch, col: pa.Array) -> Iterator[tuple[int, pa.RecordBatch]]:
        lo, hi = pc.min_max(col).values()
        if lo.as_py() == hi.as_py():  # the common case: one time per batch, no copy
            yield int(lo.as_py()), batch
            return
        values = col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        order = np.argsort(values, kind="stable")
        ordered = values[order]
        cuts = np.flatnonzero(np.diff(ordered)) + 1
        taken = batch.take(pa.array(order))
        for start, end in zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [len(ordered)]))):
            yield int(ordered[start]), taken.slice(int(start), int(end - start))

    def _split_product(self, batch: pa.RecordBatch, col: pa.Array) -> Iterator[tuple[Time, pa.RecordBatch]]:
        k = self.time_type.arity
        lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
        if (lengths != k).any():
            raise InvalidTimeError(f"time column {self.column!r} has arrays whose length is not {k}")
        flat = pc.list_flatten(col)
        if flat.null_count:
            raise InvalidTimeError(f"time column {self.column!r} has null components")
        values = flat.to_numpy(zero_copy_only=False).astype(np.int64, copy=False).reshape(-1, k)
        times, inverse = np.unique(values, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        if len(times) == 1:
            yield tuple(int(c) for c in times[0]), batch
            return
        order = np.argsort(inverse, kind="stable")
        cuts = np.flatnonzero(np.diff(inverse[order])) + 1
        taken = batch.take(pa.array(order))
        for start, end in zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [len(order)]))):
            t = times[inverse[order[start]]]
            yield tuple(int(c) for c in t), taken.slice(int(start), int(end - start))
