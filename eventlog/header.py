"""The stream header: what every reader of a stream must know before its first event.

Stored once per stream (``header.json`` in the file log) and validated whenever a stream is opened.
"""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from .errors import (
    CorruptLogError,
    HeaderMismatchError,
    LimitError,
    LogLimitError,
    SchemaMismatchError,
    UnsupportedVersionError,
)
from .limits import MAX_HEADER_BYTES, MAX_PEERS, MAX_SCHEMA_DEPTH, MAX_SCHEMA_FIELDS, check_limit
from .time import TimeType

FORMAT_VERSION: tuple[int, int] = (1, 2)
"""The default version of a ``StreamHeader`` made in code and of the ``Log`` base class: ``(major, minor)``. No
log writes it for the streams it creates: each stores its own version (file and memory logs
``connectors.files.log.FILE_FORMAT_VERSION``, Kafka logs ``connectors.kafka.KAFKA_FORMAT_VERSION``, both 2.0).
See schemas/FORMAT.md, "Version rules"."""

READABLE_MAJORS: tuple[int, ...] = (1, 2)
"""The major versions a stream header may carry (each log kind says which of them its layout defines)."""

CHECKSUM_SINCE: tuple[int, int] = (1, 1)
"""Headers of this format version or newer must carry a ``checksum`` (FORMAT.md section 2)."""

ENCODINGS = ("arrow", "avro")
"""The event encodings a stream may use."""

COMPRESSIONS: dict[str, tuple[str, ...]] = {"arrow": ("zstd", "lz4", "none"), "avro": ("deflate", "zstandard", "null")}
"""The compressions a stream of each encoding may choose (FORMAT.md §13): Arrow IPC body compression (``zstd``, the
default; ``lz4``, LZ4 frames; ``none``), Avro container codecs (``deflate``, the file log's default; ``zstandard``;
``null``). The first of each is what a header without the field means for Arrow."""

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_VERSION_RE = re.compile(r"^(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})$")
_CHECKSUM_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


def check_stream_name(name: str) -> str:
    """Return ``name`` if it is a valid stream name (also a valid Kafka topic name), else raise ValueError."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        shown = name if not isinstance(name, str) or len(name) <= 210 else name[:200] + "..."
        raise ValueError(
            f"invalid stream name {shown!r}: use 1-200 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit"
        )
    return name


def _check_schema(schema: pa.Schema, stream: str) -> None:
    """Refuse duplicate top-level names, dictionary fields (SchemaMismatchError), and schemas deeper than
    MAX_SCHEMA_DEPTH or with more than MAX_SCHEMA_FIELDS fields at all levels (LimitError)."""
    names = schema.names
    if len(set(names)) != len(names):
        raise SchemaMismatchError(f"schema has duplicate field names: {names}", stream=stream)
    check_limit("number of top-level schema fields", len(names), MAX_SCHEMA_FIELDS, stream=stream)
    count = 0
    todo: list[tuple[pa.DataType, str, int]] = [(f.type, f.name, 1) for f in schema]
    while todo:
        t, path, depth = todo.pop()
        count += 1
        if count > MAX_SCHEMA_FIELDS:
            raise LimitError(f"schema has more than {MAX_SCHEMA_FIELDS} fields (counting nested fields), the "
                             f"format's limit", stream=stream)
        if depth > MAX_SCHEMA_DEPTH:
            raise LimitError(f"field {path[:200]!r} is nested {depth} deep, over the format's limit of "
                             f"{MAX_SCHEMA_DEPTH}", stream=stream)
        if pa.types.is_dictionary(t):
            raise SchemaMismatchError(
                f"field {path!r} is dictionary-encoded; cast it to its value type before capture", stream=stream
            )
        for i in range(t.num_fields):
            todo.append((t.field(i).type, f"{path}.{t.field(i).name}", depth + 1))


def canonical_json(doc: dict[str, Any]) -> bytes:
    """The canonical form of a header document that its checksum covers (FORMAT.md section 2): every field
    but ``checksum``, keys sorted, no whitespace, non-ASCII characters escaped, UTF-8."""
    rest = {k: v for k, v in doc.items() if k != "checksum"}
    return json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def header_checksum(doc: dict[str, Any]) -> str:
    """The ``checksum`` field of a header document: ``"sha256:"`` and the hex SHA-256 of its canonical JSON.
    Tools that edit a header on purpose set ``doc["checksum"] = header_checksum(doc)`` afterwards."""
    return "sha256:" + hashlib.sha256(canonical_json(doc)).hexdigest()


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k[:100]!r}")
        out[k] = v
    return out


def _bad_float(text: str) -> float:
    raise ValueError(f"a header holds no floating-point numbers, got {text[:40]}")


def _bad_constant(text: str) -> float:
    raise ValueError(f"not JSON: {text}")


@dataclass(frozen=True)
class StreamHeader:
    """Format version, stream name, peers (part count), time type, data schema, encoding and creation time.

    Creating one checks every field against the format, its limits included (``LimitError`` for too many
    peers, too high a time arity, too large a schema)."""

    stream: str
    peers: int
    schema: pa.Schema
    time_type: TimeType = field(default_factory=TimeType)
    encoding: str = "arrow"
    created: str = ""
    version: tuple[int, int] = FORMAT_VERSION
    compression: str | None = None
    """The codec the stream's writers compress events with (one of ``COMPRESSIONS[encoding]``), or None when the
    header does not record one: Arrow streams then use zstd, Avro ones the writing log's codec (``avro_codec``)."""

    def __post_init__(self) -> None:
        check_stream_name(self.stream)
        if isinstance(self.peers, bool) or not isinstance(self.peers, int) or self.peers < 1:
            raise ValueError(f"peers must be a positive int, got {self.peers!r}")
        check_limit("peers", self.peers, MAX_PEERS, stream=self.stream)
        if not isinstance(self.encoding, str) or self.encoding not in ENCODINGS:
            raise ValueError(f"unknown encoding {self.encoding!r}: expected one of {ENCODINGS}")
        if not isinstance(self.schema, pa.Schema):
            raise TypeError(f"schema must be a pyarrow.Schema, got {type(self.schema).__name__}")
        object.__setattr__(self, "time_type", TimeType.parse(self.time_type))
        _check_schema(self.schema, self.stream)
        if not isinstance(self.created, str):
            raise TypeError(f"created must be an ISO-8601 string, got {type(self.created).__name__}")
        if not self.created:
            now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
            object.__setattr__(self, "created", now.replace("+00:00", "Z"))
        elif len(self.created) > 64 or not _is_iso_time(self.created):
            raise ValueError(f"created must be an ISO-8601 time, got {self.created[:64]!r}")
        v = self.version
        if not (isinstance(v, tuple) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool)
                                                               and 0 <= x < 10**9 for x in v)):
            raise ValueError(f"version must be a (major, minor) tuple of ints, got {v!r}")
        if self.compression is not None and self.compression not in COMPRESSIONS[self.encoding]:
            raise ValueError(f"compression {self.compression!r} is not one of the {self.encoding} encoding's: "
                             f"{', '.join(COMPRESSIONS[self.encoding])}")

    @property
    def arrow_compression(self) -> str:
        """The Arrow IPC body compression writers of this Arrow stream use: ``zstd``, ``lz4`` or ``none``."""
        return self.compression or "zstd"

    # -- serialization -------------------------------------------------------------------------------

    def to_json(self) -> bytes:
        """The header as the JSON document stored in logs (see FORMAT.md), with its checksum; a header
        over MAX_HEADER_BYTES raises LimitError."""
        doc: dict[str, Any] = {
            "format": "eventlog",
            "version": f"{self.version[0]}.{self.version[1]}",
            "stream": self.stream,
            "peers": self.peers,
            "time": self.time_type.name,
            "encoding": self.encoding,
            "created": self.created,
            "schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode("ascii"),
            "fields": [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in self.schema],
        }
        if self.compression is not None:
            doc["compression"] = self.compression
        doc["checksum"] = header_checksum(doc)
        data = (json.dumps(doc, indent=1) + "\n").encode()
        check_limit("stream header size in bytes", len(data), MAX_HEADER_BYTES, stream=self.stream)
        return data

    @staticmethod
    def from_json(data: bytes, *, path: str | None = None) -> "StreamHeader":
        """Parse and check a stored header: a newer major version raises UnsupportedVersionError, a size over
        the limits LogLimitError, anything damaged or malformed (bad JSON, a field of the wrong type or out of
        range, a checksum mismatch, an undecodable schema) CorruptLogError."""
        return _parse(data, path)

    # -- validation ----------------------------------------------------------------------------------

    def check_same(self, other: "StreamHeader") -> None:
        """Raise HeaderMismatchError unless ``other`` describes the same stream (creation time aside)."""
        diffs = []
        if self.peers != other.peers:
            diffs.append(f"peers {other.peers} != {self.peers}")
        if self.time_type != other.time_type:
            diffs.append(f"time type {other.time_type} != {self.time_type}")
        if self.encoding != other.encoding:
            diffs.append(f"encoding {other.encoding!r} != {self.encoding!r}")
        if other.compression is not None and other.compression != self.compression and not (
                self.compression is None and self.encoding == "arrow" and other.compression == "zstd"):
            diffs.append(f"compression {other.compression!r} != {self.compression or 'the default'!r}")
        if not self.schema.equals(other.schema, check_metadata=False):
            diffs.append(f"schema\n{other.schema}\n!= stored schema\n{self.schema}")
        if diffs:
            raise HeaderMismatchError(
                "stream exists with another header: " + "; ".join(diffs), stream=self.stream
            )

    def check_writable(self, writes: tuple[int, int] = FORMAT_VERSION) -> None:
        """Raise UnsupportedVersionError if a writer of format ``writes`` may read but not append to the stream:
        an older major version (its writers kept other promises; ``replay copy`` upgrades it) or a newer one."""
        if self.version[0] < writes[0]:
            raise UnsupportedVersionError(
                f"stream was written with format {self.version[0]}.{self.version[1]}; this eventlog reads it but "
                f"appends only to format {writes[0]}.x streams here (upgrade a copy with `replay copy SRC DST {self.stream}`)",
                stream=self.stream,
            )
        if self.version > writes:
            raise UnsupportedVersionError(
                f"stream was written with format {self.version[0]}.{self.version[1]}; this eventlog writes "
                f"{writes[0]}.{writes[1]} here and may read it but not append to it",
                stream=self.stream,
            )


def _is_iso_time(text: str) -> bool:
    try:
        _dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        return False
    return True


def _parse(data: bytes, path: str | None) -> StreamHeader:  # noqa: C901 - one check per field
    where: dict[str, Any] = {"path": path}

    def corrupt(reason: str) -> CorruptLogError:
        return CorruptLogError(f"unreadable stream header: {reason}", **where)

    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"a stream header is bytes, got {type(data).__name__}")
    check_limit("stream header size in bytes", len(data), MAX_HEADER_BYTES, reading=True, **where)
    try:
        doc = json.loads(bytes(data).decode("utf-8"), object_pairs_hook=_no_duplicate_keys,
                         parse_float=_bad_float, parse_constant=_bad_constant)
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise corrupt(f"not a JSON document: {str(e)[:200]}") from None
    if not isinstance(doc, dict):
        raise corrupt(f"a JSON {type(doc).__name__}, not an object")
    if doc.get("format") != "eventlog":
        raise corrupt("not an eventlog header (field 'format' is not 'eventlog')")
    name = doc.get("stream")
    if isinstance(name, str) and _NAME_RE.fullmatch(name):
        where["stream"] = name
    version = doc.get("version")
    m = _VERSION_RE.fullmatch(version) if isinstance(version, str) else None
    if not m:
        raise corrupt(f"field 'version' is not a 'MAJOR.MINOR' string: {str(version)[:40]!r}")
    major, minor = int(m.group(1)), int(m.group(2))
    if major not in READABLE_MAJORS:
        readable = ", ".join(f"{m}.x" for m in READABLE_MAJORS)
        raise UnsupportedVersionError(
            f"stream header has format version {major}.{minor}; this eventlog reads {readable}", **where
        )
    checksum = doc.get("checksum")
    if checksum is None:
        if (major, minor) >= CHECKSUM_SINCE:
            raise corrupt(f"a version {major}.{minor} header must carry a checksum, this one has none")
    elif not isinstance(checksum, str) or not _CHECKSUM_RE.fullmatch(checksum):
        raise corrupt(f"field 'checksum' is not 'sha256:' and 64 hex digits: {str(checksum)[:80]!r}")
    elif checksum != header_checksum(doc):
        raise corrupt("header fails its checksum (it was damaged or edited)")
    for key in ("stream", "peers", "time", "encoding", "created", "schema"):
        if key not in doc:
            raise corrupt(f"field {key!r} is missing")
    if "stream" not in where:
        raise corrupt(f"field 'stream' is not a valid stream name: {str(name)[:210]!r}")
    peers = doc["peers"]
    if isinstance(peers, bool) or not isinstance(peers, int) or peers < 1:
        raise corrupt(f"field 'peers' is not a positive integer: {str(peers)[:40]!r}")
    check_limit("peers", peers, MAX_PEERS, reading=True, **where)
    for key in ("time", "encoding", "created", "schema"):
        if not isinstance(doc[key], str):
            raise corrupt(f"field {key!r} is a {type(doc[key]).__name__}, not a string")
    if not doc["created"] or len(doc["created"]) > 64 or not _is_iso_time(doc["created"]):
        raise corrupt(f"field 'created' is not an ISO-8601 time: {doc['created'][:64]!r}")
    if doc["encoding"] not in ENCODINGS:
        raise corrupt(f"unknown encoding {doc['encoding'][:40]!r}: expected one of {ENCODINGS}")
    compression = doc.get("compression")
    if compression is not None:
        if not isinstance(compression, str):
            raise corrupt(f"field 'compression' is a {type(compression).__name__}, not a string")
        if compression not in COMPRESSIONS[doc["encoding"]]:
            raise UnsupportedVersionError(
                f"stream is compressed with {compression[:40]!r}, which this eventlog does not read (the "
                f"{doc['encoding']} encoding: {', '.join(COMPRESSIONS[doc['encoding']])})", **where)
    if "fields" in doc and not isinstance(doc["fields"], list):
        raise corrupt(f"field 'fields' is a {type(doc['fields']).__name__}, not an array")
    try:
        time_type = TimeType.parse(doc["time"])
    except LimitError as e:
        raise LogLimitError(e.reason, **where) from None
    except ValueError as e:
        raise corrupt(f"field 'time': {e}") from None
    try:
        raw = base64.b64decode(doc["schema"], validate=True)
        schema = pa.ipc.read_schema(pa.py_buffer(raw))
    except (ValueError, pa.ArrowException, OSError) as e:  # binascii.Error is a ValueError
        raise corrupt(f"field 'schema' is not a base64 Arrow IPC schema: {type(e).__name__}: {str(e)[:200]}") from None
    try:
        return StreamHeader(
            stream=where["stream"], peers=peers, schema=schema, time_type=time_type, encoding=doc["encoding"],
            created=doc["created"], version=(major, minor), compression=compression,
        )
    except LimitError as e:
        raise LogLimitError(e.reason, **where) from None
    except (ValueError, TypeError) as e:  # SchemaMismatchError is a ValueError
        raise corrupt(str(e)[:300]) from None
