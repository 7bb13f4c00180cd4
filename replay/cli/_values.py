"""Records as JSON values, exactly and for every Arrow type a stream may hold.

* timestamps: ISO-8601 strings with the unit's digits (``2024-05-01T12:00:00.000123``); a time zone on the
  type gives the instant in UTC with ``Z``; dates ``2024-05-01``; times of day ``12:00:00.500``;
* durations: the integer count of the type's unit (``duration[ms]`` → milliseconds);
* binary: base64 (or hex) strings; decimals: strings (exact); NaN and ±infinity: ``"NaN"``,
  ``"Infinity"``, ``"-Infinity"`` (JSON has no such numbers);
* structs: objects; lists: arrays; maps: arrays of ``[key, value]`` pairs; null: ``null``.

Temporal values are read as their integer storage, so nanoseconds and dates outside Python's range stay
exact (an out-of-range timestamp becomes its integer).
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import math
from typing import Any, Callable

import pyarrow as pa

Converter = Callable[[Any], Any]

_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}
_EPOCH = _dt.datetime(1970, 1, 1)
_EPOCH_DATE = _dt.date(1970, 1, 1)

BINARY_ENCODINGS = ("base64", "hex")
"""How binary values are written: ``base64`` (default) or ``hex``."""


def _storage_type(t: pa.DataType) -> pa.DataType:
    """``t`` with every temporal type replaced by its integer storage type (nested types recursively)."""
    T = pa.types
    if T.is_timestamp(t) or T.is_duration(t) or T.is_date64(t) or T.is_time64(t):
        return pa.int64()
    if T.is_date32(t) or T.is_time32(t):
        return pa.int32()
    if T.is_struct(t):
        return pa.struct([t.field(i).with_type(_storage_type(t.field(i).type)) for i in range(t.num_fields)])
    if T.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_storage_type(t.value_type)))
    if T.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(_storage_type(t.value_type)), t.list_size)
    if T.is_list(t):
        return pa.list_(t.value_field.with_type(_storage_type(t.value_type)))
    if T.is_map(t):
        return pa.map_(t.key_field.with_type(_storage_type(t.key_type)),
                       t.item_field.with_type(_storage_type(t.item_type)))
    return t


def _timestamp(unit: str, tz: str | None) -> Converter:
    per, digits = _PER_SECOND[unit], _DIGITS[unit]
    suffix = "Z" if tz else ""

    def conv(v: int) -> Any:
        seconds, frac = divmod(v, per)
        try:
            text = (_EPOCH + _dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")
        except OverflowError:
            return v
        return f"{text}.{frac:0{digits}d}{suffix}" if digits else f"{text}{suffix}"

    return conv


def _date(days_per_unit_ms: bool) -> Converter:
    def conv(v: int) -> Any:
        days = v // 86_400_000 if days_per_unit_ms else v
        try:
            return (_EPOCH_DATE + _dt.timedelta(days=days)).isoformat()
        except OverflowError:
            return v

    return conv


def _time_of_day(unit: str) -> Converter:
    per, digits = _PER_SECOND[unit], _DIGITS[unit]

    def conv(v: int) -> Any:
        seconds, frac = divmod(v, per)
        h, rest = divmod(seconds, 3600)
        text = f"{h:02d}:{rest // 60:02d}:{rest % 60:02d}"
        return f"{text}.{frac:0{digits}d}" if digits else text

    return conv


def _float(v: float) -> Any:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def _binary(encoding: str) -> Converter:
    if encoding == "hex":
        return lambda v: bytes(v).hex()
    return lambda v: base64.b64encode(bytes(v)).decode("ascii")


def _nullable(conv: Converter) -> Converter:
    return lambda v: None if v is None else conv(v)


def _converter(t: pa.DataType, binary: str) -> Converter | None:  # noqa: C901 - one branch per type family
    """The function turning a Python value of storage type ``_storage_type(t)`` into JSON, None when the
    value already is JSON (ints, strings, booleans)."""
    T = pa.types
    if isinstance(t, pa.ExtensionType):
        return _converter(t.storage_type, binary)
    if T.is_timestamp(t):
        return _timestamp(t.unit, t.tz)
    if T.is_date32(t) or T.is_date64(t):
        return _date(T.is_date64(t))
    if T.is_time32(t) or T.is_time64(t):
        return _time_of_day(t.unit)
    if T.is_floating(t):
        return _float
    if T.is_binary(t) or T.is_large_binary(t) or T.is_fixed_size_binary(t) or T.is_binary_view(t):
        return _binary(binary)
    if T.is_decimal(t):
        return str
    if T.is_struct(t):
        children = [(t.field(i).name, _converter(t.field(i).type, binary)) for i in range(t.num_fields)]
        if all(c is None for _, c in children):
            return None
        return lambda v: {k: (c(v[k]) if c is not None and v[k] is not None else v[k]) for k, c in children}
    if T.is_map(t):
        kc, vc = _converter(t.key_type, binary), _converter(t.item_type, binary)
        k_conv, v_conv = _nullable(kc) if kc else (lambda x: x), _nullable(vc) if vc else (lambda x: x)
        return lambda v: [[k_conv(k), v_conv(x)] for k, x in v]
    if T.is_list(t) or T.is_large_list(t) or T.is_fixed_size_list(t) or T.is_list_view(t) \
            or T.is_large_list_view(t):
        item = _converter(t.value_type, binary)
        if item is None:
            return None
        return lambda v: [None if x is None else item(x) for x in v]
    if T.is_union(t):
        return lambda v: jsonable(v, binary)
    if T.is_integer(t) or T.is_boolean(t) or T.is_string(t) or T.is_large_string(t) or T.is_string_view(t) \
            or T.is_null(t) or T.is_duration(t):
        return None
    return lambda v: jsonable(v, binary)


def jsonable(value: Any, binary: str = "base64") -> Any:
    """Any Python value (what a user function returns, a union member) as JSON, by its Python type."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _binary(binary)(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, dict):
        return {str(k): jsonable(v, binary) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v, binary) for v in value]
    if isinstance(value, (pa.Table, pa.RecordBatch)):
        return RecordConverter(value.schema, binary).rows(value)
    if isinstance(value, (pa.Array, pa.ChunkedArray)):
        return [jsonable(v, binary) for v in value.to_pylist()]
    if isinstance(value, pa.Scalar):
        return jsonable(value.as_py(), binary)
    return repr(value)


class RecordConverter:
    """Turns record batches of one schema into lists of JSON-ready dicts (see the module doc for how each
    type is written); ``binary`` is ``"base64"`` or ``"hex"``."""

    def __init__(self, schema: pa.Schema, binary: str = "base64") -> None:
        if binary not in BINARY_ENCODINGS:
            raise ValueError(f"binary must be one of {BINARY_ENCODINGS}, got {binary!r}")
        self.schema = schema
        self.names = list(schema.names)
        self._columns: list[tuple[pa.DataType | None, Converter | None]] = []
        for f in schema:
            storage = _storage_type(f.type)
            self._columns.append((None if storage.equals(f.type) else storage, _converter(f.type, binary)))

    def columns(self, batch: "pa.RecordBatch | pa.Table") -> list[list[Any]]:
        """The JSON values of each column of ``batch``."""
        out = []
        for col, (storage, conv) in zip(batch.columns, self._columns):
            if storage is not None:
                col = col.cast(storage)
            values = col.to_pylist()
            if conv is not None:
                values = [None if v is None else conv(v) for v in values]
            out.append(values)
        return out

    def rows(self, batch: "pa.RecordBatch | pa.Table") -> list[dict[str, Any]]:
        """One dict per record, fields in schema order."""
        cols = self.columns(batch)
        return [dict(zip(self.names, values)) for values in zip(*cols)] if cols else [{}] * batch.num_rows
