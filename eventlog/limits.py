"""The format's limits: the largest values a writer may produce and a reader accepts (schemas/FORMAT.md,
"Limits"). Changing one is a format change.

Writers refuse larger values with ``LimitError`` before writing anything; readers refuse them with
``LogLimitError`` (a ``CorruptLogError`` too) *before* allocating for them, so no stream header, event body
or Kafka record, however damaged or hostile, makes a reader allocate or loop without bound.
"""

from __future__ import annotations

from typing import Any

from .errors import LimitError, LogLimitError

MAX_PEERS = 1 << 16
"""Parts of one stream (65 536). Part folders are named with 5 digits (``part-00000`` …), every reader
keeps state per part and ``ls``/``verify`` visit every part; Kafka advises a few thousand partitions a
broker, so no deployment comes near."""

MAX_TIME_ARITY = 64
"""Components of a product time (``product:K``, K ≤ 64): timely's nested scopes are a handful deep."""

MAX_EVENT_RECORDS = 1 << 20
"""Records in one Messages event (1 048 576); Spark's Arrow batches hold 10 000 rows by default. Send
larger batches as several events."""

MAX_EVENT_VALUES = 1 << 24
"""Values in one arrow event (16 777 216): the summed lengths of all its arrays, every column once per row,
every struct field once per row of its struct, every list item with its own fields (exactly the sum of the
``FieldNode`` lengths of its IPC message). Bounds arrays that need no buffers (``null`` columns, lists of
nulls) and what a consumer builds from them."""

MAX_AVRO_EVENT_VALUES = 1 << 21
"""Values (counted as for ``MAX_EVENT_VALUES``) in one avro event (2 097 152): the Avro decoder builds a
Python object per value (up to ~200 bytes with its row), so memory is bounded by this count, not by bytes."""

MAX_EVENT_UPDATES = 1 << 20
"""``(time, delta)`` updates in one Progress event."""

MAX_EVENT_BYTES = 1 << 30
"""Bytes of one stored (compressed) event body: 1 GiB."""

MAX_EVENT_DECODED_BYTES = 1 << 30
"""Bytes of one event once decompressed (an Arrow message's buffers, an Avro block's data): 1 GiB."""

MAX_EXPANSION_RATIO = 1 << 16
"""Largest ratio of an event's decompressed size to its stored size. Zstandard cannot exceed about 32 768
(a 4-byte RLE block per 128 KiB block), so no honest writer reaches it; it stops a few bytes from declaring
gigabytes that a decoder would allocate."""

MAX_EVENT_METADATA_BYTES = 16 << 20
"""Bytes of one arrow event's IPC message metadata (the flatbuffer holding the JSON time or updates)."""

MAX_SCHEMA_DEPTH = 32
"""Nesting depth of a stream schema: a top-level field has depth 1, a struct field or list item one more
than its parent."""

MAX_SCHEMA_FIELDS = 10_000
"""Fields of a stream schema, counting every nested field (struct fields, list items, map keys/values)."""

MAX_HEADER_BYTES = 4 << 20
"""Bytes of a stream header's JSON document (4 MiB): room for a schema at MAX_SCHEMA_FIELDS."""

MAX_SEQ = (1 << 63) - 1
"""Largest sequence id (a positive int64)."""


def decoded_bytes_bound(stored: int) -> int:
    """The most bytes an event of ``stored`` bytes may decompress to (MAX_EXPANSION_RATIO, capped by
    MAX_EVENT_DECODED_BYTES)."""
    return min(MAX_EVENT_DECODED_BYTES, MAX_EXPANSION_RATIO * max(stored, 1))


def check_limit(what: str, value: int, limit: int, *, reading: bool = False, **where: Any) -> int:
    """Return ``value`` if it is at most ``limit``; else raise LimitError (writing) or LogLimitError
    (``reading=True``), naming ``what`` and the location fields in ``where`` (stream, part, seq, offset, path)."""
    if value > limit:
        cls = LogLimitError if reading else LimitError
        raise cls(f"{what} is {value}, over the format's limit of {limit}", **where)
    return value


def describe() -> dict[str, int]:
    """The limits by name (for ``replay info``, documentation and tests)."""
    return {k: v for k, v in globals().items() if k.startswith("MAX_") and isinstance(v, int)}
