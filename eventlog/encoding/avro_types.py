"""Mapping a stream's Arrow schema to the Avro record schema of the Avro encoding.

Temporal types get Avro logical types (so third-party readers see dates and timestamps) while eventlog
itself reads and writes their integer storage values (a "raw" schema without logical types): exact for
every unit, and no datetime objects on the hot path. Decimals (32, 64, 128 and 256 bits) use Avro's
``decimal`` logical type on a ``fixed`` of the Arrow type's byte width, read and written as exact
``decimal.Decimal`` values. Arrow types Avro cannot hold exactly (uint64, float16, decimals with a negative
scale, maps, unions, dictionaries) are refused with SchemaMismatchError.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from ..errors import SchemaMismatchError

_AVRO_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_TIMESTAMP_LOGICAL = {"ms": "timestamp-millis", "us": "timestamp-micros", "ns": "timestamp-nanos"}
_TIME_LOGICAL = {"ms": "time-millis", "us": "time-micros"}


class _Mapper:
    def __init__(self, stream: str) -> None:
        self.stream = stream

    def fail(self, path: str, t: pa.DataType) -> SchemaMismatchError:
        return SchemaMismatchError(
            f"field {path!r} of type {t} cannot be stored in the avro encoding (use encoding='arrow')",
            stream=self.stream,
        )

    def field(self, f: pa.Field, path: str, tag: str) -> tuple[dict[str, Any], pa.Field]:
        if not _AVRO_NAME.match(f.name):
            raise SchemaMismatchError(
                f"field name {f.name!r} at {path!r} is not a valid Avro name ([A-Za-z_][A-Za-z0-9_]*)",
                stream=self.stream,
            )
        avro, raw = self.type(f.type, path, tag)
        if f.nullable and avro != "null":
            avro = ["null", avro]
        return {"name": f.name, "type": avro}, pa.field(f.name, raw, f.nullable)

    def type(self, t: pa.DataType, path: str, tag: str) -> tuple[Any, pa.DataType]:  # noqa: C901
        T = pa.types
        if T.is_null(t):
            return "null", t
        if T.is_boolean(t):
            return "boolean", t
        if T.is_int8(t) or T.is_int16(t) or T.is_int32(t) or T.is_uint8(t) or T.is_uint16(t):
            return "int", t
        if T.is_int64(t) or T.is_uint32(t):
            return "long", t
        if T.is_float32(t):
            return "float", t
        if T.is_float64(t):
            return "double", t
        if T.is_string(t) or T.is_large_string(t) or T.is_string_view(t):
            return "string", t
        if T.is_binary(t) or T.is_large_binary(t) or T.is_binary_view(t):
            return "bytes", t
        if T.is_fixed_size_binary(t):
            return {"type": "fixed", "name": f"Fixed{tag}", "size": t.byte_width}, t
        if T.is_decimal(t):
            if not 0 <= t.scale <= t.precision:
                raise SchemaMismatchError(
                    f"field {path!r} of type {t} has a scale outside 0..precision, which Avro's decimal cannot "
                    "store (use encoding='arrow')",
                    stream=self.stream,
                )
            return {"type": "fixed", "name": f"Decimal{tag}", "size": t.byte_width, "logicalType": "decimal",
                    "precision": t.precision, "scale": t.scale}, t
        if T.is_date32(t):
            return {"type": "int", "logicalType": "date"}, pa.int32()
        if T.is_date64(t):
            return {"type": "long", "arrow.type": "date64"}, pa.int64()
        if T.is_time32(t):
            avro = {"type": "int", "arrow.type": str(t)}
            if t.unit in _TIME_LOGICAL:
                avro["logicalType"] = _TIME_LOGICAL[t.unit]
            return avro, pa.int32()
        if T.is_time64(t):
            avro = {"type": "long", "arrow.type": str(t)}
            if t.unit in _TIME_LOGICAL:
                avro["logicalType"] = _TIME_LOGICAL[t.unit]
            return avro, pa.int64()
        if T.is_timestamp(t):
            avro = {"type": "long", "arrow.type": str(t)}
            if t.unit in _TIMESTAMP_LOGICAL:
                logical = _TIMESTAMP_LOGICAL[t.unit]
                avro["logicalType"] = logical if t.tz is not None else "local-" + logical
            return avro, pa.int64()
        if T.is_duration(t):
            return {"type": "long", "arrow.type": str(t)}, pa.int64()
        if T.is_struct(t):
            names = [t.field(i).name for i in range(t.num_fields)]
            if len(set(names)) != len(names):
                raise SchemaMismatchError(
                    f"struct field {path!r} has duplicate field names {names}, which an Avro record cannot hold "
                    "(use encoding='arrow')",
                    stream=self.stream,
                )
            fields, raws = [], []
            for i in range(t.num_fields):
                avro_f, raw_f = self.field(t.field(i), f"{path}.{t.field(i).name}", f"{tag}_{i}")
                fields.append(avro_f)
                raws.append(raw_f)
            return {"type": "record", "name": f"Record{tag}", "fields": fields}, pa.struct(raws)
        if T.is_list(t) or T.is_large_list(t) or T.is_fixed_size_list(t) or T.is_list_view(t):
            item = t.value_field
            avro_item, raw_item = self.type(item.type, f"{path}[]", f"{tag}_0")
            if item.nullable and avro_item != "null":
                avro_item = ["null", avro_item]
            raw_f = pa.field(item.name, raw_item, item.nullable)
            if T.is_large_list(t):
                raw = pa.large_list(raw_f)
            elif T.is_fixed_size_list(t):
                raw = pa.list_(raw_f, t.list_size)
            else:
                raw = pa.list_(raw_f)
            return {"type": "array", "items": avro_item}, raw
        raise self.fail(path, t)


def avro_record_schema(schema: pa.Schema, stream: str) -> tuple[dict[str, Any], pa.Schema]:
    """``(avro_record, raw_arrow_schema)``: the Avro record type named ``Record`` for the stream's records,
    and the Arrow schema of the integer storage values eventlog writes and reads."""
    m = _Mapper(stream)
    fields, raws = [], []
    for i, f in enumerate(schema):
        avro_f, raw_f = m.field(f, f.name, f"_{i}")
        fields.append(avro_f)
        raws.append(raw_f)
    return {"type": "record", "name": "Record", "fields": fields}, pa.schema(raws)


def strip_logical(avro: Any) -> Any:
    """The same Avro schema without its temporal logical types (identical binary encoding, integer values);
    ``decimal`` stays, so decimals are read as exact ``decimal.Decimal`` values."""
    if isinstance(avro, list):
        return [strip_logical(x) for x in avro]
    if isinstance(avro, dict):
        out = {k: strip_logical(v) for k, v in avro.items() if k != "logicalType" or v == "decimal"}
        if set(out) == {"type"} or (set(out) <= {"type", "arrow.type"} and isinstance(out["type"], str)):
            if out["type"] in ("int", "long"):
                return out["type"]
        return out
    return avro
