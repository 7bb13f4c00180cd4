"""The Avro block codecs of format 2.x file-log segments (``eventlog.encoding.avro_rows`` uses them), in a module
of their own so that a file log checks its ``avro_codec`` option without importing fastavro: reading and writing
Arrow streams never imports it."""

from __future__ import annotations

AVRO_CODECS = ("deflate", "zstandard", "null")
"""The Avro block codecs of 2.x segments: every one is read; a log writes its ``avro_codec`` (FileLog)."""

DEFAULT_AVRO_CODEC = "deflate"
"""The codec new 2.x Avro segments use unless the log chooses another: one every Avro reader has."""


def check_avro_codec(name: str) -> str:
    """``name`` if it is one of :data:`AVRO_CODECS`, else ValueError saying which are."""
    if name not in AVRO_CODECS:
        raise ValueError(f"avro_codec must be one of {', '.join(AVRO_CODECS)}, not {name!r}")
    return name


__all__ = ["AVRO_CODECS", "DEFAULT_AVRO_CODEC", "check_avro_codec"]
