"""The event codec of a file log's segments: format 1.x segments use the encodings' stream form; 2.x Arrow
segments are Arrow IPC files with ``_time`` and ``_seq`` columns (``eventlog.encoding.arrow_file``), 2.x Avro
segments container files of flat rows with ``_time``, ``_seq``, ``_ts`` and ``_updates``
(``eventlog.encoding.avro_rows``)."""

from __future__ import annotations

import functools

from eventlog.encoding import EventCodec, codec_for
from eventlog.encoding.arrow_file import ArrowFileCodec
from eventlog.header import StreamHeader

# Arrow, the default encoding, is imported with the file log (a first replay imports nothing); the Avro codec, and
# fastavro with it, only for an Avro stream (issue 35: `replay cat` of an Arrow stream starts without it)


def file_codec(header: StreamHeader, *, avro_codec: str | None = None) -> EventCodec:
    """The codec of ``header``'s segments in a file log (SchemaMismatchError when the encoding cannot store
    the schema: call it before writing anything of a new stream). ``avro_codec`` is the block codec of the 2.x
    Avro segments it creates (``deflate`` when None; every codec is read)."""
    if header.version[0] >= 2 and header.encoding == "arrow":
        hit = _BY_HEADER.get(id(header))
        if hit is not None and hit[0] is header:  # the header object seen before (a log hands out one per stream)
            return hit[1]
        # the schema's bytes in the key: headers compare schemas without their (and their fields') metadata,
        # which the codec writes and gives back with the records
        codec = _arrow_codec(header, header.schema.serialize().to_pybytes())
        if len(_BY_HEADER) >= _KEEP:
            _BY_HEADER.clear()
        _BY_HEADER[id(header)] = (header, codec)  # the header held: its id names no other object meanwhile
        return codec
    if header.version[0] >= 2 and header.encoding == "avro":
        from eventlog.encoding.avro_rows import AvroRowsCodec

        return AvroRowsCodec(header, block_codec=avro_codec)  # type: ignore[return-value]
    return codec_for(header)


_KEEP = 64
_BY_HEADER: dict[int, tuple[StreamHeader, ArrowFileCodec]] = {}
"""The codec of each header object lately asked for: serializing the schema for ``_arrow_codec``'s key cost a
replay ~70 µs per part it opened, and pyarrow lets the GIL go to do it (the replaying thread then waits behind
the threads decoding ahead to get it back)."""


@functools.lru_cache(maxsize=_KEEP)
def _arrow_codec(header: StreamHeader, _schema: bytes) -> ArrowFileCodec:
    """The 2.x Arrow codec of ``header``, one shared by every reader and writer of an equal header: it holds no
    state of a segment (its encoders and decoders do), and building it (the schema serialized, an empty batch)
    cost a replay ~0.1 ms per part it opened."""
    return ArrowFileCodec(header)


__all__ = ["file_codec"]
