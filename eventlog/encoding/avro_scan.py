"""Checking an Avro event record's binary form before fastavro decodes it.

fastavro builds a Python object for every value it decodes (about 100 bytes each) and trusts the item
counts of arrays: 39 bytes can declare 2**40 records of a null schema. ``EventScanner`` walks the bytes of
one ``eventlog.Event`` record without building anything, checks its shape (kind, time, updates, records),
and counts its records, updates and values against the format's limits *before* anything is allocated for
them: a block's item count is checked before its items are walked. The values are counted as in
FORMAT.md "Limits" (the summed lengths of the Arrow arrays the event becomes), which the Avro encoder
counts on the Arrow side before writing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..errors import LogLimitError
from ..limits import MAX_AVRO_EVENT_VALUES, MAX_EVENT_RECORDS, MAX_EVENT_UPDATES

_Skip = Callable[[bytes, int], int]


def _read_long(buf: bytes, pos: int) -> tuple[int, int]:
    """The zigzag varint (Avro ``int``/``long``) at ``pos``: ``(value, next_pos)``; IndexError when
    truncated, ValueError when longer than 10 bytes."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    n = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return (n >> 1) ^ -(n & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("overlong varint")


def _skip_varint(buf: bytes, pos: int) -> int:
    end = pos + 10
    while buf[pos] & 0x80:
        pos += 1
        if pos >= end:
            raise ValueError("overlong varint")
    return pos + 1


def _skip_null(buf: bytes, pos: int) -> int:
    return pos


def _skip_boolean(buf: bytes, pos: int) -> int:
    if buf[pos] > 1:
        raise ValueError(f"boolean byte {buf[pos]} is neither 0 nor 1")
    return pos + 1


def _fixed(size: int) -> _Skip:
    def skip(buf: bytes, pos: int) -> int:
        pos += size
        if pos > len(buf):
            raise IndexError("value runs past the end of the event")
        return pos

    return skip


def _skip_sized(buf: bytes, pos: int) -> int:
    size, pos = _read_long(buf, pos)
    if size < 0:
        raise ValueError(f"negative string/bytes length {size}")
    pos += size
    if pos > len(buf):
        raise IndexError("value runs past the end of the event")
    return pos


class _Counter:
    """Values counted so far; refuses a block before walking it if the count would pass the limit."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values = 0

    def add(self, n: int) -> None:
        self.values += n
        if self.values > MAX_AVRO_EVENT_VALUES:
            raise LogLimitError(f"avro event holds more than {MAX_AVRO_EVENT_VALUES} values (records, fields "
                                f"and list items), over the format's limit")


def _array_blocks(buf: bytes, pos: int, on_block: Callable[[int], None], item: _Skip) -> int:
    """Walk an Avro array's blocks, calling ``on_block(count)`` before walking each block's items."""
    while True:
        count, pos = _read_long(buf, pos)
        if count == 0:
            return pos
        if count < 0:  # a negative count is followed by the block's size in bytes
            count = -count
            size, pos = _read_long(buf, pos)
            if size < 0:
                raise ValueError(f"negative array block size {size}")
            on_block(count)
            start = pos
            for _ in range(count):
                pos = item(buf, pos)
            if pos != start + size:
                raise ValueError(f"array block declares {size} bytes, its items take {pos - start}")
        else:
            on_block(count)
            for _ in range(count):
                pos = item(buf, pos)


class _Compiler:
    """Turns a (logical-type-free) Avro schema into skip functions and static value weights."""

    def __init__(self, counter: _Counter) -> None:
        self.counter = counter
        self.named: dict[str, tuple[_Skip, int, int]] = {}
        self.ratio = 0.0
        """The most values per byte any array item of the schema can encode (``inf``: items of 0 bytes)."""

    def item_ratio(self, weight: int, min_bytes: int) -> None:
        """Account for an array whose items weigh ``weight`` values and take at least ``min_bytes``."""
        self.ratio = max(self.ratio, weight / min_bytes if min_bytes else float("inf"))

    def compile(self, schema: Any) -> tuple[_Skip, int, int]:  # noqa: C901 - one branch per Avro type
        """``(skip, weight, min_bytes)``: ``weight`` is the number of values (Arrow array slots) one value of
        ``schema`` occupies, not counting list items (counted per block); ``min_bytes`` the fewest bytes
        one value of it takes."""
        if isinstance(schema, list):  # a union: this encoding writes ["null", T] only
            branches = [self.compile(s) for s in schema]
            weight = max((w for _, w, _ in branches), default=1)
            least = 1 + min((m for _, _, m in branches), default=0)

            def skip_union(buf: bytes, pos: int) -> int:
                index, pos = _read_long(buf, pos)
                if not 0 <= index < len(branches):
                    raise ValueError(f"union branch {index} out of range")
                return branches[index][0](buf, pos)

            return skip_union, weight, least
        if isinstance(schema, dict):
            kind = schema["type"]
            if kind == "record":
                out = self._record(schema)
            elif kind == "array":
                item, item_weight, item_min = self.compile(schema["items"])
                self.item_ratio(item_weight, item_min)
                counter = self.counter

                def on_block(count: int) -> None:
                    counter.add(count * item_weight)

                def skip_array(buf: bytes, pos: int) -> int:
                    return _array_blocks(buf, pos, on_block, item)

                out = (skip_array, 1, 1)
            elif kind == "fixed":
                size = int(schema["size"])
                out = (_fixed(size), 1, size)
            elif kind == "enum":
                n = len(schema["symbols"])

                def skip_enum(buf: bytes, pos: int) -> int:
                    index, pos = _read_long(buf, pos)
                    if not 0 <= index < n:
                        raise ValueError(f"enum index {index} out of range")
                    return pos

                out = (skip_enum, 1, 1)
            else:
                return self.compile(kind)
            if "name" in schema:
                self.named[schema["name"]] = out
            return out
        primitive = {
            "null": (_skip_null, 1, 0), "boolean": (_skip_boolean, 1, 1), "int": (_skip_varint, 1, 1),
            "long": (_skip_varint, 1, 1), "float": (_fixed(4), 1, 4), "double": (_fixed(8), 1, 8),
            "string": (_skip_sized, 1, 1), "bytes": (_skip_sized, 1, 1),
        }
        if schema in primitive:
            return primitive[schema]
        if schema in self.named:
            return self.named[schema]
        raise ValueError(f"avro type {schema!r} is not one this encoding writes")

    # A record's fields are walked by one generated function (no call per field): the scan runs once per
    # record of a large event, so this is its hot path. Arrays, enums and other unions stay closures.

    def _record(self, schema: dict[str, Any]) -> tuple[_Skip, int, int]:
        ns: dict[str, Any] = {"_read_long": _read_long}
        lines: list[str] = []
        weight, least = self._emit(schema, lines, "    ", ns)
        source = "def skip(buf, pos):\n" + "\n".join(lines) + "\n    return pos\n"
        exec(compile(source, f"<avro scanner of {schema.get('name', 'record')}>", "exec"), ns)  # noqa: S102
        return ns["skip"], weight, least

    def _call(self, skip: _Skip, lines: list[str], ind: str, ns: dict[str, Any]) -> None:
        name = f"_f{len(ns)}"
        ns[name] = skip
        lines.append(f"{ind}pos = {name}(buf, pos)")

    def _emit(self, schema: Any, lines: list[str], ind: str, ns: dict[str, Any]) -> tuple[int, int]:  # noqa: C901
        """Append the code that moves ``pos`` past one value of ``schema``; ``(weight, min_bytes)``."""
        if isinstance(schema, list) and len(schema) == 2 and schema[0] == "null":
            lines += [f"{ind}b = buf[pos]", f"{ind}pos += 1", f"{ind}if b == 2:"]
            inner: list[str] = []
            weight, _ = self._emit(schema[1], inner, ind + "    ", ns)
            lines += inner or [f"{ind}    pass"]
            lines += [f"{ind}elif b:", f"{ind}    raise ValueError('union branch out of range')"]
            return max(weight, 1), 1
        if isinstance(schema, dict) and schema["type"] == "record":
            weight, least = 1, 0
            for f in schema["fields"]:
                w, m = self._emit(f["type"], lines, ind, ns)
                weight, least = weight + w, least + m
            if "name" in schema:  # a later reference by name walks it through a closure
                self.named[schema["name"]] = (_RecordRef(self, schema), weight, least)
            return weight, least
        if isinstance(schema, dict) and schema["type"] == "array":
            k = len(ns)
            ns[f"_add{k}"] = self.counter.add
            item_lines: list[str] = []
            w, m = self._emit(schema["items"], item_lines, ind + "        ", ns)
            self.item_ratio(w, m)
            lines += [
                f"{ind}while True:",
                f"{ind}    count{k}, pos = _read_long(buf, pos)",
                f"{ind}    if count{k} == 0:",
                f"{ind}        break",
                f"{ind}    end{k} = -1",
                f"{ind}    if count{k} < 0:  # a negative count is followed by the block's size in bytes",
                f"{ind}        count{k} = -count{k}",
                f"{ind}        size{k}, pos = _read_long(buf, pos)",
                f"{ind}        if size{k} < 0:",
                f"{ind}            raise ValueError('negative array block size')",
                f"{ind}        end{k} = pos + size{k}",
                f"{ind}    _add{k}(count{k} * {w})  # refuses the block before its items are walked",
                f"{ind}    for _ in range(count{k}):",
            ]
            lines += item_lines or [f"{ind}        pass"]
            lines += [f"{ind}    if end{k} >= 0 and pos != end{k}:",
                      f"{ind}        raise ValueError('array block size does not match its items')"]
            return 1, 1
        if isinstance(schema, dict) and schema["type"] == "fixed":
            lines.append(f"{ind}pos += {int(schema['size'])}")
            return 1, int(schema["size"])
        if schema in ("int", "long"):
            lines += [f"{ind}while buf[pos] & 0x80:", f"{ind}    pos += 1", f"{ind}pos += 1"]
            return 1, 1
        if schema in ("float", "double"):
            lines.append(f"{ind}pos += {4 if schema == 'float' else 8}")
            return 1, 4 if schema == "float" else 8
        if schema == "boolean":
            lines += [f"{ind}if buf[pos] > 1:", f"{ind}    raise ValueError('boolean byte is neither 0 nor 1')",
                      f"{ind}pos += 1"]
            return 1, 1
        if schema == "null":
            return 1, 0
        if schema in ("string", "bytes"):
            lines += [
                f"{ind}b = buf[pos]",
                f"{ind}if b < 0x80:",
                f"{ind}    if b & 1:",
                f"{ind}        raise ValueError('negative length')",
                f"{ind}    pos += 1 + (b >> 1)",
                f"{ind}else:",
                f"{ind}    n, pos = _read_long(buf, pos)",
                f"{ind}    if n < 0:",
                f"{ind}        raise ValueError('negative length')",
                f"{ind}    pos += n",
            ]
            return 1, 1
        skip, weight, least = self.compile(schema)  # arrays, enums, other unions, named references
        self._call(skip, lines, ind, ns)
        return weight, least


class _RecordRef:
    """A named record type referenced after its definition: compiled on first use."""

    def __init__(self, compiler: _Compiler, schema: dict[str, Any]) -> None:
        self._compiler, self._schema, self._skip = compiler, schema, None

    def __call__(self, buf: bytes, pos: int) -> int:
        if self._skip is None:
            self._skip = self._compiler._record({k: v for k, v in self._schema.items() if k != "name"})[0]
        return self._skip(buf, pos)


def skip_time(buf: bytes, pos: int, arity: int) -> int:
    """Move past one time at ``pos``: a ``long`` (``arity`` 0) or an array of exactly ``arity`` longs, each
    array block's count checked before its items are walked."""
    if arity == 0:
        return _skip_varint(buf, pos)
    seen = 0

    def on_block(count: int) -> None:
        nonlocal seen
        seen += count
        if seen > arity:
            raise ValueError(f"product time has more than {arity} components")

    pos = _array_blocks(buf, pos, on_block, _skip_varint)
    if seen != arity:
        raise ValueError(f"product time has {seen} components, the stream's time type {arity}")
    return pos


class UpdatesWalk:
    """Walks a Progress event's array of ``(time, delta)`` updates, counting them against MAX_EVENT_UPDATES
    (each array block's count before its items) and checking each time's arity."""

    def __init__(self, arity: int) -> None:
        self._arity = arity
        self.updates = 0
        """Updates walked so far."""

    def _on_block(self, count: int) -> None:
        self.updates += count
        if self.updates > MAX_EVENT_UPDATES:
            raise LogLimitError(f"progress event holds more than {MAX_EVENT_UPDATES} updates, over the format's "
                                f"limit")

    def _update(self, buf: bytes, pos: int) -> int:
        return _skip_varint(buf, skip_time(buf, pos, self._arity))

    def __call__(self, buf: bytes, pos: int) -> int:
        """Move past the updates array at ``pos``."""
        return _array_blocks(buf, pos, self._on_block, self._update)


@dataclass(frozen=True)
class EventShape:
    """What the scan found: the event's kind (0 Messages, 1 Progress), and its counts."""

    kind: int
    records: int
    updates: int
    values: int


class EventScanner:
    """Checks one ``eventlog.Event`` record's bytes against its schema and the format's limits."""

    def __init__(self, record_schema: dict[str, Any], arity: int) -> None:
        """``record_schema``: the stream's Avro record type without logical types; ``arity``: 0 for int64
        times, K for ``product:K``."""
        self._counter = _Counter()
        compiler = _Compiler(self._counter)
        self._record, weight, row_bytes = compiler.compile(record_schema)
        self._row_weight = weight - 1  # the row itself is not an Arrow array
        compiler.item_ratio(max(self._row_weight, 1), row_bytes)  # a row costs memory even without values
        # an update: a (time, delta) pair of at least 2 (int64) or K + 3 (product:K) bytes, weighed as values
        update_bytes = 2 if arity == 0 else arity + 3
        compiler.item_ratio(2 + arity, update_bytes)
        self._arity = arity
        self.values_per_byte = compiler.ratio
        """The most values (records and updates included) one byte of this schema's events can hold: an
        event of ``n`` bytes holds at most ``n * values_per_byte`` values (``inf`` when items may take 0
        bytes, such as ``null`` columns)."""
        self._size_bound = int(min(
            MAX_AVRO_EVENT_VALUES / self.values_per_byte,
            MAX_EVENT_RECORDS * row_bytes,
            MAX_EVENT_UPDATES * update_bytes,
        ))

    def bounded_by_size(self, size: int) -> bool:
        """Whether every event record of ``size`` bytes is within the limits on records, updates and values
        whatever its content (so its scan may be skipped)."""
        return size <= self._size_bound

    def _time(self, buf: bytes, pos: int) -> int:
        return skip_time(buf, pos, self._arity)

    def scan(self, buf: bytes) -> EventShape:
        """Walk the whole record; raise LogLimitError over a limit (before walking what is over it),
        ValueError/IndexError when the bytes are not one Event record of this schema."""
        counter = self._counter
        counter.values = 0
        pos = _skip_varint(buf, 0)  # seq
        kind, pos = _read_long(buf, pos)
        if kind not in (0, 1):
            raise ValueError(f"event kind {kind} out of range")
        has_time, pos = _read_long(buf, pos)
        if has_time not in (0, 1):
            raise ValueError(f"time union branch {has_time} out of range")
        if has_time != (kind == 0):
            raise ValueError("a messages event has a time, a progress event none")
        if has_time:
            pos = self._time(buf, pos)
        walk = UpdatesWalk(self._arity)
        pos = walk(buf, pos)
        updates, records = walk.updates, 0

        def on_records(count: int) -> None:
            nonlocal records
            records += count
            if records > MAX_EVENT_RECORDS:
                raise LogLimitError(f"messages event holds more than {MAX_EVENT_RECORDS} records, over the "
                                    f"format's limit")
            counter.add(count * self._row_weight)

        pos = _array_blocks(buf, pos, on_records, self._record)
        if pos != len(buf):
            raise ValueError(f"event record ends at byte {pos} of {len(buf)}")
        if kind == 0 and (updates or not records):
            raise ValueError("a messages event has records and no updates")
        if kind == 1 and records:
            raise ValueError("a progress event has no records")
        return EventShape(kind, records, updates, counter.values)
