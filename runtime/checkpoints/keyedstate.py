"""Keyed operator state as Arrow tables, and the serializers of the values users keep in it.

A keyed operator's snapshot holds its state as Arrow tables (stored as Arrow IPC blobs of the task's
snapshot file, ``runtime.checkpoints.formats``): one row per key (and per pending time or window), with columns

    group  int32     the key's key group (a restart with another parallelism moves rows by group)
    slot   int64     the pending time or window start (pending tables only)
    k0 …   any       the key's columns
    value  any       the running aggregate or pending partial

Each key or value column says in its field metadata (``encoding``) how its cells are stored:

* ``arrow``: as a typed Arrow column (ints, floats, strings, dates, structs, lists …). Used only when
  reading the column back gives exactly the same Python values, types included (a tuple would come back a
  list, an int mixed with floats a float: those go on to the next encoding).
* ``json``: each cell as tagged JSON text (``runtime.checkpoints.formats``): ``None``, bools, ints of any size,
  floats, strings, bytes, lists, tuples and dicts of those, exactly.
* ``pickle``: each cell as a pickle. Written only for an operator built with ``serializer="pickle"``,
  and read back only by such an operator; anything else refuses the column (``CheckpointCorruptError``)
  without unpickling it.

An operator's ``serializer`` chooses the value encoding: ``"auto"`` (the default) ``arrow`` if exact, else
``json``; ``"arrow"`` or ``"json"`` only that one; ``"pickle"`` pickle (the user's explicit opt-in: loading
a pickle runs code, so use it only for checkpoints you trust). Keys, which come from Arrow columns, are
stored as typed Arrow columns when exact, else JSON, else (opted-in operators only) pickle. A value no
allowed encoding stores exactly raises ``UnstorableStateError`` at the checkpoint, naming the operator
and the value's type.
"""

from __future__ import annotations

import math
import pickle
from typing import Any, Iterable

import pyarrow as pa

from ..errors import CheckpointCorruptError, JobGraphError, UnstorableStateError
from .formats import StateTypeError, from_tagged_json, to_tagged_json

SERIALIZERS = ("auto", "arrow", "json", "pickle")
"""The value serializers an operator may use (see the module doc)."""

_ORDER = {"auto": ("arrow", "json"), "arrow": ("arrow",), "json": ("json",), "pickle": ("pickle",)}
_KEY_ORDER = {"auto": ("arrow", "json"), "arrow": ("arrow", "json"), "json": ("arrow", "json"),
              "pickle": ("arrow", "json", "pickle")}
_ENCODING = b"encoding"


def check_serializer(serializer: str) -> str:
    """``serializer`` if it names one of ``SERIALIZERS``; raises ``JobGraphError`` otherwise."""
    if serializer not in SERIALIZERS:
        raise JobGraphError(f"serializer must be one of {SERIALIZERS}, not {serializer!r}")
    return serializer


def _same(a: Any, b: Any) -> bool:
    """True when ``b`` is ``a`` read back exactly: equal, and of the same types all the way down."""
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is float:
        return (a == b and math.copysign(1.0, a) == math.copysign(1.0, b)) or (a != a and b != b)
    if ta is dict:
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if ta is list or ta is tuple:
        return len(a) == len(b) and all(map(_same, a, b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - a value that cannot compare is not known to round-trip
        return False


_FAST = ((pa.types.is_integer, int), (pa.types.is_string, str), (pa.types.is_large_string, str),
         (pa.types.is_boolean, bool))


def _as_arrow(values: list[Any], type_: pa.DataType | None) -> pa.Array | None:
    try:
        arr = pa.array(values, type=type_)
    except (pa.ArrowException, TypeError, ValueError, OverflowError, RecursionError):
        return None
    for is_type, py in _FAST:   # exact by construction: the same Python type in and out
        if is_type(arr.type) and all(type(v) is py or v is None for v in values):
            return arr
    if arr.type == pa.float64() and all(type(v) is float or v is None for v in values):
        return arr
    try:
        back = arr.to_pylist()
    except (pa.ArrowException, ValueError, OverflowError):
        return None
    return arr if all(map(_same, values, back)) else None


def _first_bad(values: Iterable[Any], encode: Any) -> Any:
    for v in values:
        try:
            encode(v)
        except Exception:  # noqa: BLE001 - the value that fails is what the error names
            return v
    return None


def _encode(values: list[Any], order: tuple[str, ...], name: str, type_: pa.DataType | None, operator: str,
            what: str, serializer: str) -> tuple[pa.Field, pa.Array]:
    bad: Any = None
    for enc in order:
        if enc == "arrow":
            arr = _as_arrow(values, type_)
            if arr is not None:
                return pa.field(name, arr.type, metadata={_ENCODING: b"arrow"}), arr
        elif enc == "json":
            try:
                texts = [to_tagged_json(v) for v in values]
            except StateTypeError:
                bad = _first_bad(values, to_tagged_json)
                continue
            field = pa.field(name, pa.string(), nullable=False, metadata={_ENCODING: b"json"})
            return field, pa.array(texts, pa.string())
        else:
            try:
                blobs = [pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL) for v in values]
            except Exception:  # noqa: BLE001 - any pickling failure means the value cannot be stored
                bad = _first_bad(values, pickle.dumps)
                continue
            field = pa.field(name, pa.binary(), nullable=False, metadata={_ENCODING: b"pickle"})
            return field, pa.array(blobs, pa.binary())
    if bad is None:
        bad = next((v for v in values if _as_arrow([v], type_) is None), values[0] if values else None)
    kind = f"{type(bad).__module__}.{type(bad).__qualname__}".removeprefix("builtins.")
    hint = ("pass serializer=\"pickle\" to the operator to store them with pickle (only for checkpoints you "
            "trust), or keep values of JSON or Arrow types (None, bool, int, float, str, bytes, list, tuple, "
            "dict)") if serializer != "pickle" else "the value cannot be pickled either"
    raise UnstorableStateError(f"operator {operator!r} keeps {what} of type {kind} (e.g. {_short(bad)}), which "
                               f"its serializer {serializer!r} cannot store exactly ({'/'.join(order)}); {hint}")


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001
        text = object.__repr__(value)
    return text if len(text) <= 60 else text[:57] + "..."


def encode_table(groups: list[int], slots: list[int] | None, keys: list[Any], values: list[Any], *, n_keys: int,
                 key_types: list[pa.DataType] | None, serializer: str, operator: str, what: str) -> pa.Table:
    """A state table (see the module doc): one row per ``(group, slot, key, value)``; ``slots`` None for a
    table without a ``slot`` column. Raises ``UnstorableStateError`` when a key or value cannot be stored."""
    fields = [pa.field("group", pa.int32(), nullable=False)]
    arrays: list[pa.Array] = [pa.array(groups, pa.int32())]
    if slots is not None:
        fields.append(pa.field("slot", pa.int64(), nullable=False))
        arrays.append(pa.array(slots, pa.int64()))
    types = key_types or [None] * n_keys
    key_cols = [keys] if n_keys == 1 else [[k[i] for k in keys] for i in range(n_keys)]
    for i, col in enumerate(key_cols):
        f, a = _encode(col, _KEY_ORDER[serializer], f"k{i}", types[i], operator, f"keys ({what})", serializer)
        fields.append(f)
        arrays.append(a)
    f, a = _encode(values, _ORDER[serializer], "value", None, operator, what, serializer)
    fields.append(f)
    arrays.append(a)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _decode(col: pa.ChunkedArray, field: pa.Field, *, allow_pickle: bool, unpickle: bool, operator: str,
            path: str) -> list[Any] | None:
    enc = (field.metadata or {}).get(_ENCODING)
    if enc == b"arrow":
        return col.to_pylist()
    if col.null_count:
        raise CheckpointCorruptError(f"state column {field.name!r} of operator {operator!r} has null cells",
                                     path=path)
    if enc == b"json":
        if not pa.types.is_string(field.type):
            raise CheckpointCorruptError(f"JSON state column {field.name!r} is not a string column", path=path)
        out = []
        for i, text in enumerate(col.to_pylist()):
            try:
                out.append(from_tagged_json(text))
            except ValueError as e:
                raise CheckpointCorruptError(f"row {i} of state column {field.name!r} of operator {operator!r} "
                                             f"is not valid tagged JSON: {e}", path=path) from None
        return out
    if enc == b"pickle":
        if not allow_pickle:
            raise CheckpointCorruptError(f"state column {field.name!r} of operator {operator!r} was stored with "
                                         f"pickle, and the operator does not opt in to it (serializer=\"pickle\"); "
                                         f"refusing to unpickle it", path=path)
        if not pa.types.is_binary(field.type):
            raise CheckpointCorruptError(f"pickle state column {field.name!r} is not a binary column", path=path)
        if not unpickle:
            return None
        out = []
        for i, blob in enumerate(col.to_pylist()):
            try:
                out.append(pickle.loads(blob))  # noqa: S301 - the operator opted in to pickle
            except Exception as e:  # noqa: BLE001 - any unpickling failure is damage
                raise CheckpointCorruptError(f"row {i} of pickled state column {field.name!r} of operator "
                                             f"{operator!r} does not unpickle: {type(e).__name__}: {e}",
                                             path=path) from None
        return out
    raise CheckpointCorruptError(f"state column {field.name!r} of operator {operator!r} has no known encoding "
                                 f"({enc!r})", path=path)


def table_path(table: pa.Table) -> str | None:
    """The file a restored state table was read from (its ``path`` metadata), for errors."""
    return (table.schema.metadata or {}).get(b"path", b"").decode("utf-8", "replace") or None


def decode_keyed(table: pa.Table, *, pending: bool, n_keys: int, allow_pickle: bool, unpickle: bool,
                 operator: str) -> tuple[list[int] | None, list[Any], list[Any]] | None:
    """``decode_table`` of a restored table whose keys become dict keys: also ``CheckpointCorruptError`` (naming
    the table's file) for a key of an unhashable type."""
    path = table_path(table)
    out = decode_table(table, pending=pending, n_keys=n_keys, allow_pickle=allow_pickle, unpickle=unpickle,
                       operator=operator, path=path)  # type: ignore[arg-type]
    if out is not None:
        for k in out[1]:
            try:
                hash(k)
            except TypeError:
                raise CheckpointCorruptError(f"state of operator {operator!r} has a key of unhashable type "
                                             f"{type(k).__name__}", path=path) from None
    return out


def decode_table(table: pa.Table, *, pending: bool, n_keys: int, allow_pickle: bool, unpickle: bool = True,
                 operator: str, path: str) -> tuple[list[int] | None, list[Any], list[Any]] | None:
    """``(slots, keys, values)`` of a state table (``slots`` None without a slot column; keys are tuples
    when ``n_keys > 1``); None when ``unpickle`` is False and a column is pickled (only checked). Raises
    ``CheckpointCorruptError`` naming ``path`` when the table is not a state table of this operator or a
    cell does not decode (a pickled column is never unpickled unless ``allow_pickle``)."""
    names = ["group", *(["slot"] if pending else []), *(f"k{i}" for i in range(n_keys)), "value"]
    if table.column_names != names:
        raise CheckpointCorruptError(f"state table of operator {operator!r} has columns {table.column_names}, "
                                     f"expected {names}", path=path)
    schema = table.schema
    if schema.field("group").type != pa.int32() or table.column("group").null_count:
        raise CheckpointCorruptError("state table column 'group' is not a non-null int32 column", path=path)
    slots = None
    if pending:
        if schema.field("slot").type != pa.int64() or table.column("slot").null_count:
            raise CheckpointCorruptError("state table column 'slot' is not a non-null int64 column", path=path)
        slots = table.column("slot").to_pylist()
    cols = []
    for name in names[1 + pending:]:
        cols.append(_decode(table.column(name), schema.field(name), allow_pickle=allow_pickle, unpickle=unpickle,
                            operator=operator, path=path))
    if any(c is None for c in cols):
        return None
    keys = cols[0] if n_keys == 1 else list(zip(*cols[:n_keys]))
    if n_keys > 1 and not table.num_rows:
        keys = []
    return slots, keys, cols[-1]
