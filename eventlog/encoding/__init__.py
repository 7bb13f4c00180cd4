"""Event encodings: how one event becomes bytes, and how a segment of such bytes is framed.

Every encoding splits a segment into a *prefix* (what a standard reader needs first: the Arrow IPC schema
message, the Avro container header), one *body* per event (an Arrow IPC record-batch message, an Avro
container block), and a *suffix* (the Arrow end-of-stream marker). Prefix + bodies + suffix is a standard
container that third-party readers open; prefix + any run of whole bodies is one too.
"""

from __future__ import annotations

from typing import Mapping, Protocol

import pyarrow as pa

from ..events import Event
from ..header import StreamHeader


class SegmentEncoder(Protocol):
    """Encodes the events of one segment."""

    prefix: bytes
    """Bytes that start the segment."""
    suffix: bytes
    """Bytes that end a segment that is closed cleanly (may be empty)."""

    def encode(self, seq: int, event: Event) -> bytes:
        """One event's body, carrying its sequence id; an event over the format's limits raises LimitError
        (and nothing is returned to write)."""
        ...


class SegmentDecoder(Protocol):
    """Decodes the bodies of one segment (made from that segment's prefix)."""

    def decode(self, body: memoryview | bytes) -> tuple[int, Event]:
        """``(seq, event)`` from one body; damaged bytes raise CorruptLogError, sizes over the format's limits
        LogLimitError (also a CorruptLogError), before anything is allocated for them (location filled by
        the caller). A Messages event's batch is validated: safe to read."""
        ...

    def decode_at(self, segment: "pa.Buffer", offset: int, length: int) -> tuple[int, Event]:
        """``(seq, event)`` from the body at ``offset`` of a segment buffer that starts with this decoder's
        prefix (lets an encoding keep one reader per segment instead of one per event)."""
        ...


class EventCodec(Protocol):
    """An encoding bound to one stream header."""

    file_suffix: str
    """File name extension of segments (``.arrows``, ``.avro``)."""

    def new_segment(self, metadata: "Mapping[str, bytes] | None" = None, *, part: int = 0) -> SegmentEncoder:
        """An encoder for a new segment of ``part`` whose prefix carries ``metadata`` (key/value pairs such as
        the writer's epoch, FORMAT.md §3) where the container keeps metadata."""
        ...

    def segment_metadata(self, prefix: memoryview | bytes) -> dict[bytes, bytes]:
        """The key/value metadata a segment's ``prefix`` carries; damage raises CorruptLogError."""
        ...

    def segment_decoder(self, prefix: memoryview | bytes, part: int | None = None) -> SegmentDecoder:
        """A decoder for a segment (of ``part``, when the encoding records it) that starts with ``prefix``; a
        prefix that does not match the header raises CorruptLogError."""
        ...

    def standalone_encoder(self) -> SegmentEncoder:
        """An encoder whose bodies decode without a stored prefix (``standalone_decoder`` rebuilds it
        from the header): for logs that frame bodies themselves, such as Kafka bundles."""
        ...

    def standalone_decoder(self) -> SegmentDecoder:
        """The decoder of ``standalone_encoder``'s bodies."""
        ...

    def record_encoder(self) -> SegmentEncoder:
        """An encoder of whole values a standard library decodes alone, one event each (Kafka records of
        format 2.0, FORMAT.md §9): an Arrow IPC stream of one batch, an Avro single-object encoding. Its
        ``prefix`` and ``suffix`` are empty."""
        ...

    def record_decoder(self) -> SegmentDecoder:
        """The decoder of ``record_encoder``'s values (it also reads values of the same form that another
        writer encoded differently but equivalently, such as another pyarrow's schema message)."""
        ...


def codec_for(header: StreamHeader) -> EventCodec:
    """The codec of ``header.encoding`` for this stream. Raises SchemaMismatchError if the encoding cannot
    store ``header.schema`` (the avro encoding: uint64, float16, maps, unions, ...): call it before writing
    anything of a new stream, so that a refused create leaves nothing behind."""
    if header.encoding == "arrow":
        from .arrow import ArrowCodec

        return ArrowCodec(header)
    if header.encoding == "avro":
        from .avro import AvroCodec

        return AvroCodec(header)
    raise ValueError(f"unknown encoding {header.encoding!r}")


__all__ = ["EventCodec", "SegmentDecoder", "SegmentEncoder", "codec_for"]
