"""The checksummed JSON documents a 2.1 stream keeps beside its header: its retention mark (``retention``) and its
schema history (``schema_history``). Both are stored and checked the same way, written once here.

A document is a JSON object with ``format`` (its kind), ``version`` (``"2.1"``), ``stream``, ``header`` (the
creation of the stream it belongs to, so a stream deleted and created again under its name inherits nothing),
its own fields, and ``checksum`` (as the stream header's, FORMAT.md §2).
"""

from __future__ import annotations

import json
from typing import Any, Callable

from .errors import CorruptLogError
from .header import StreamHeader, header_checksum
from .limits import check_limit

DOC_VERSION = "2.1"
"""The format version of the documents (FORMAT.md §6)."""


def identity(header: StreamHeader) -> str:
    """What ties a document to one creation of its stream (a stream created again has another creation time)."""
    return f"{header.created} peers={header.peers} time={header.time_type.name} encoding={header.encoding}"


def dump_doc(kind: str, header: StreamHeader, fields: dict[str, Any], *, what: str, limit: int) -> bytes:
    """The stored form of a document of ``kind`` (``eventlog-retention``, ``eventlog-schemas``) with ``fields``;
    ``LimitError`` naming ``what`` when it is larger than ``limit`` bytes."""
    doc: dict[str, Any] = {"format": kind, "version": DOC_VERSION, "stream": header.stream,
                           "header": identity(header), **fields}
    doc["checksum"] = header_checksum(doc)
    data = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    check_limit(f"{what} size in bytes", len(data), limit, stream=header.stream)
    return data


def load_doc(data: bytes, kind: str, header: StreamHeader, *, what: str, limit: int,
             path: str | None) -> tuple[dict[str, Any], Callable[[str], CorruptLogError]]:
    """A stored document of ``kind`` checked against the stream's ``header`` — size, JSON, kind, checksum, stream
    and creation — and the function that makes the ``CorruptLogError`` (naming ``what``, the stream and ``path``)
    its caller raises for the fields it checks next."""
    where = {"stream": header.stream, "path": path}

    def corrupt(reason: str) -> CorruptLogError:
        return CorruptLogError(f"unreadable {what}: {reason}", **where)

    check_limit(f"{what} size in bytes", len(data), limit, reading=True, **where)
    try:
        doc = json.loads(bytes(data).decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise corrupt(f"not a JSON document: {str(e)[:200]}") from None
    if not isinstance(doc, dict) or doc.get("format") != kind:
        raise corrupt(f"not a {what}")
    if doc.get("checksum") != header_checksum({k: v for k, v in doc.items() if k != "checksum"}):
        raise corrupt("checksum mismatch")
    if doc.get("stream") != header.stream:
        raise corrupt(f"it names stream {str(doc.get('stream'))[:200]!r}")
    if doc.get("header") != identity(header):
        raise corrupt("it was written for another creation of this stream")
    return doc, corrupt


__all__ = ["DOC_VERSION", "dump_doc", "identity", "load_doc"]
