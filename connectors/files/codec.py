"""The event codec of a file log's segments: format 1.x segments use the encodings' stream form; 2.x Arrow
segments are Arrow IPC files with ``_time``, ``_part`` and ``_seq`` columns (``eventlog.encoding.arrow_file``)."""

from __future__ import annotations

from eventlog.encoding import EventCodec, codec_for
from eventlog.header import StreamHeader


def file_codec(header: StreamHeader) -> EventCodec:
    """The codec of ``header``'s segments in a file log (SchemaMismatchError when the encoding cannot store
    the schema: call it before writing anything of a new stream)."""
    if header.version[0] >= 2 and header.encoding == "arrow":
        from eventlog.encoding.arrow_file import ArrowFileCodec

        return ArrowFileCodec(header)
    return codec_for(header)


__all__ = ["file_codec"]
