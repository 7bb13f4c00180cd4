"""A stream's schema history: the schemas its writers used, in order, and where each part switched.

A stream's header holds the schema it was created with, and never changes. A writer may open the stream with a
*compatible* change of the current schema (Avro's, Delta's and Iceberg's evolutions: add a nullable column, drop
a column, widen a type — int8→int16→int32→int64, uint8→…→uint64 and to a wider signed int, float16→float32→float64,
an int to a float, decimal(p,s)→decimal(p',s') with p'-s' ≥ p-s and s' ≥ s —, make a column nullable); the log
records the new version and, per part, the sequence id from which that part's events use it. An incompatible
change (a type narrowed or changed, a non-null column added, a column made non-null) is refused with
``SchemaEvolutionError`` naming the column, before anything is written.

Every reader decodes each event with the schema it was written with and hands out records of the *current*
schema (the last version): a column it lacks is null, a widened one converted, a dropped one left out
(``conform``). FORMAT.md §12 gives the stored form.
"""

from __future__ import annotations

import base64
import bisect
import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from .errors import HeaderMismatchError, SchemaMismatchError
from .header import StreamHeader
from .stream_doc import dump_doc, load_doc

MAX_HISTORY_BYTES = 64 << 20
"""The largest schema history a reader accepts."""


class SchemaEvolutionError(HeaderMismatchError, SchemaMismatchError):
    """A writer's schema is not a compatible change of the stream's current schema: the message names the
    column and what changed (Avro's, Delta's and Iceberg's rules, module doc). A ``HeaderMismatchError`` (the
    stream exists with another header) and a ``SchemaMismatchError``."""

    _PREFIX = "the stream's schema cannot change this way: "

    def __init__(self, message: str, **where: Any) -> None:
        super().__init__(message if message.startswith(self._PREFIX) else self._PREFIX + message, **where)


def fingerprint(schema: pa.Schema) -> str:
    """A schema's identity in the history: the hex SHA-256 of its serialized form, metadata left out."""
    return hashlib.sha256(schema.remove_metadata().serialize().to_pybytes()).hexdigest()


_INT_ORDER = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_UINT_ORDER = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
_FLOAT_ORDER = [pa.float16(), pa.float32(), pa.float64()]


def _widens(old: pa.DataType, new: pa.DataType) -> bool:
    """True when every value of ``old`` is a value of ``new`` (a widening Avro, Delta and Iceberg allow)."""
    if old.equals(new):
        return True
    for order in (_INT_ORDER, _UINT_ORDER, _FLOAT_ORDER):
        if old in order and new in order:
            return order.index(new) > order.index(old)
    if old in _UINT_ORDER and new in _INT_ORDER:
        return _UINT_ORDER.index(old) < _INT_ORDER.index(new)
    if (pa.types.is_integer(old) and pa.types.is_floating(new)) and old.bit_width <= 32 and new.bit_width == 64:
        return True  # int8..int32 and uint8..uint32 fit a float64 exactly (Avro: int → double)
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
    if pa.types.is_string(old) and pa.types.is_large_string(new) or pa.types.is_binary(old) and pa.types.is_large_binary(new):
        return True
    return False


def check_evolution(current: pa.Schema, new: pa.Schema, *, stream: str | None = None) -> list[str]:
    """The changes from ``current`` to ``new`` as text, one per column (``[]``: the same schema); raises
    ``SchemaEvolutionError`` naming the first column changed in a way readers could not convert."""
    changes: list[str] = []
    old_fields = {f.name: f for f in current}
    if current.names and not any(name in old_fields for name in new.names):
        raise SchemaEvolutionError(f"the schema shares no column with the stream's ({', '.join(current.names[:8])}): "
                                   "another stream's records, not a change of this one's", stream=stream)
    for f in new:
        old = old_fields.get(f.name)
        if old is None:
            if not f.nullable:
                raise SchemaEvolutionError(f"column {f.name!r} is new and not nullable: earlier records have no "
                                           "value for it (add it as nullable)", stream=stream)
            changes.append(f"added {f.name!r} {f.type}")
            continue
        if not old.type.equals(f.type):
            if not _widens(old.type, f.type):
                raise SchemaEvolutionError(f"column {f.name!r} changes type from {old.type} to {f.type}: only "
                                           "widenings are allowed (int32 → int64, float32 → float64, decimal(p,s) "
                                           "→ a wider one)", stream=stream)
            changes.append(f"widened {f.name!r} {old.type} → {f.type}")
        if old.nullable and not f.nullable:
            raise SchemaEvolutionError(f"column {f.name!r} becomes non-nullable: earlier records may hold nulls",
                                       stream=stream)
        if f.nullable and not old.nullable:
            changes.append(f"{f.name!r} made nullable")
    new_names = set(new.names)
    changes += [f"dropped {name!r}" for name in current.names if name not in new_names]
    return changes


def evolution_of(current: StreamHeader, wanted: StreamHeader) -> list[str]:
    """What a writer that asks for ``wanted`` changes of the existing stream ``current`` (its current header): ``[]``
    when the schemas are the same; else the changes (``check_evolution``), for a stream that can evolve (format
    2.x). ``HeaderMismatchError`` when anything but the schema differs or the stream is of format 1.x,
    ``SchemaEvolutionError`` for an incompatible change."""
    if wanted.schema.equals(current.schema):
        current.check_same(wanted)
        return []
    if current.version[0] < 2:
        try:
            current.check_same(wanted)
        except HeaderMismatchError as e:
            raise HeaderMismatchError(
                f"{e.reason}; a format {current.version[0]}.{current.version[1]} stream cannot change its schema "
                "(`replay copy` writes a format 2 copy, which can)", stream=current.stream) from None
        return []
    current.check_same(dataclasses.replace(wanted, schema=current.schema))  # all but the schema agree
    return check_evolution(current.schema, wanted.schema, stream=current.stream)


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` (written with an earlier schema of the stream) as a batch of ``schema``: columns it lacks are
    null, widened ones cast (safely: a value that does not fit raises), dropped ones left out, in ``schema``'s
    order and with its metadata."""
    if batch.schema.equals(schema, check_metadata=False):
        return batch if batch.schema.metadata == schema.metadata else batch.replace_schema_metadata(schema.metadata)
    columns = []
    for f in schema:
        i = batch.schema.get_field_index(f.name)
        if i < 0:
            columns.append(pa.nulls(batch.num_rows, type=f.type))
            continue
        col = batch.column(i)
        columns.append(col if col.type.equals(f.type) else col.cast(f.type, safe=True))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


@dataclass(frozen=True)
class SchemaHistory:
    """A stream's schemas, oldest first (``versions[0]`` is the header's), and per part the switches
    ``(first seq, version index)`` in sequence order."""

    stream: str
    versions: tuple[pa.Schema, ...]
    switches: dict[int, tuple[tuple[int, int], ...]] = field(default_factory=dict)

    @property
    def current(self) -> pa.Schema:
        """The schema readers hand out: the last version."""
        return self.versions[-1]

    def version_of(self, schema: pa.Schema) -> int | None:
        """The index of ``schema`` among the versions (metadata ignored), None when it is not one."""
        fp = fingerprint(schema)
        for i, s in enumerate(self.versions):
            if fingerprint(s) == fp:
                return i
        return None

    def version_at(self, part: int, seq: int) -> int:
        """The version the event ``seq`` of ``part`` was written with."""
        runs = self.switches.get(part, ())
        i = bisect.bisect_right([s for s, _ in runs], seq) - 1
        return runs[i][1] if i >= 0 else 0

    def header_at(self, header: StreamHeader, part: int, seq: int) -> StreamHeader:
        """``header`` (the stream's) with the schema event ``seq`` of ``part`` was written with."""
        return self.header_of(header, self.version_at(part, seq))

    def header_of(self, header: StreamHeader, version: int) -> StreamHeader:
        """``header`` with the schema of ``version``."""
        schema = self.versions[version]
        return header if schema.equals(header.schema) else dataclasses.replace(header, schema=schema)

    def with_version(self, schema: pa.Schema) -> tuple["SchemaHistory", int]:
        """This history with ``schema`` as the current version (appended unless it is the current one already),
        and its index."""
        if fingerprint(schema) == fingerprint(self.current):
            return self, len(self.versions) - 1
        return dataclasses.replace(self, versions=(*self.versions, schema)), len(self.versions)

    def with_switch(self, part: int, seq: int, version: int) -> "SchemaHistory":
        """This history with ``part`` using ``version`` from ``seq`` on (a no-op when it already does)."""
        if self.version_at(part, seq) == version and (part in self.switches or version == 0):
            return self
        runs = [r for r in self.switches.get(part, ()) if r[0] < seq] + [(seq, version)]
        return dataclasses.replace(self, switches={**self.switches, part: tuple(runs)})

    def switch_for(self, part: int, seq: int, schema: pa.Schema) -> int | None:
        """The version a writer of ``part`` that writes ``schema`` from ``seq`` on must record a switch to, or
        None when the history already says so (or ``schema`` is no version of it)."""
        version = self.version_of(schema)
        if version is None or (self.version_at(part, seq) == version and (part in self.switches or version == 0)):
            return None
        return version

    # -- stored form ---------------------------------------------------------------------------------------

    def to_json(self, header: StreamHeader) -> bytes:
        """The history as stored (FORMAT.md §12; ``stream_doc``)."""
        return dump_doc("eventlog-schemas", header, {
            "schemas": [base64.b64encode(s.serialize().to_pybytes()).decode() for s in self.versions],
            "parts": {str(p): [[s, v] for s, v in runs] for p, runs in sorted(self.switches.items())},
        }, what="schema history", limit=MAX_HISTORY_BYTES)

    @staticmethod
    def from_json(data: bytes, header: StreamHeader, *, path: str | None = None) -> "SchemaHistory":
        """Parse and check a stored history against the stream's ``header``; ``CorruptLogError`` naming the
        stream and ``path`` when it is damaged or belongs to another stream or creation."""
        doc, corrupt = load_doc(data, "eventlog-schemas", header, what="schema history", limit=MAX_HISTORY_BYTES,
                                path=path)
        try:
            versions = tuple(pa.ipc.read_schema(pa.py_buffer(base64.b64decode(s, validate=True)))
                             for s in doc["schemas"])
            switches: dict[int, tuple[tuple[int, int], ...]] = {}
            for p, runs in doc["parts"].items():
                part = int(p)
                if not 0 <= part < header.peers:
                    raise ValueError(f"part {p}")
                checked = []
                for s, v in runs:
                    if isinstance(s, bool) or not isinstance(s, int) or s < 1 or not isinstance(v, int) \
                            or not 0 <= v < len(versions):
                        raise ValueError(f"switch {[s, v]}")
                    checked.append((s, v))
                if [s for s, _ in checked] != sorted({s for s, _ in checked}):
                    raise ValueError(f"switches of part {p} out of order")
                switches[part] = tuple(checked)
        except (KeyError, TypeError, ValueError, pa.ArrowInvalid) as e:
            raise corrupt(f"a field is out of range ({str(e)[:200]})") from None
        if not versions or fingerprint(versions[0]) != fingerprint(header.schema):
            raise corrupt("its first schema is not the header's")
        return SchemaHistory(header.stream, versions, switches)


def merge_histories(a: "SchemaHistory | None", b: SchemaHistory) -> SchemaHistory:
    """The union of two snapshots of one stream's history (Kafka keeps every snapshot a writer appended): the
    versions of ``a`` then those only ``b`` has, and every part's switches of both (renumbered), in seq order."""
    if a is None:
        return b
    versions = list(a.versions)
    fps = [fingerprint(v) for v in versions]
    index = {}
    for i, v in enumerate(b.versions):
        fp = fingerprint(v)
        if fp not in fps:
            versions.append(v)
            fps.append(fp)
        index[i] = fps.index(fp)
    switches = {p: dict(runs) for p, runs in a.switches.items()}
    for p, runs in b.switches.items():
        for seq, v in runs:
            switches.setdefault(p, {})[seq] = index[v]
    return SchemaHistory(a.stream, tuple(versions), {p: tuple(sorted(r.items())) for p, r in switches.items()})


__all__ = ["MAX_HISTORY_BYTES", "SchemaEvolutionError", "SchemaHistory", "check_evolution", "conform", "evolution_of",
           "fingerprint", "merge_histories"]
