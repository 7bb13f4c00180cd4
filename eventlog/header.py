"""The stream header: what every reader of a stream must know before its first event.

Stored once per stream (``header.json`` in the file log) and validated whenever a stream is opened.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import re
from dataclasses import dataclass, field

import pyarrow as pa

from .errors import CorruptLogError, HeaderMismatchError, SchemaMismatchError, UnsupportedVersionError
from .time import TimeType

FORMAT_VERSION: tuple[int, int] = (1, 0)
"""The format version this code writes: ``(major, minor)``. See schemas/FORMAT.md, "Version rules"."""

ENCODINGS = ("arrow", "avro")
"""The event encodings a stream may use."""

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


def check_stream_name(name: str) -> str:
    """Return ``name`` if it is a valid stream name (also a valid Kafka topic name), else raise ValueError."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(
            f"invalid stream name {name!r}: use 1-200 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit"
        )
    return name


def _check_schema(schema: pa.Schema, stream: str) -> None:
    names = schema.names
    if len(set(names)) != len(names):
        raise SchemaMismatchError(f"schema has duplicate field names: {names}", stream=stream)

    def walk(t: pa.DataType, path: str) -> None:
        if pa.types.is_dictionary(t):
            raise SchemaMismatchError(
                f"field {path!r} is dictionary-encoded; cast it to its value type before capture", stream=stream
            )
        for i in range(t.num_fields):
            walk(t.field(i).type, f"{path}.{t.field(i).name}")

    for f in schema:
        walk(f.type, f.name)


@dataclass(frozen=True)
class StreamHeader:
    """Format version, stream name, peers (part count), time type, data schema, encoding and creation time."""

    stream: str
    peers: int
    schema: pa.Schema
    time_type: TimeType = field(default_factory=TimeType)
    encoding: str = "arrow"
    created: str = ""
    version: tuple[int, int] = FORMAT_VERSION

    def __post_init__(self) -> None:
        check_stream_name(self.stream)
        if isinstance(self.peers, bool) or not isinstance(self.peers, int) or self.peers < 1:
            raise ValueError(f"peers must be a positive int, got {self.peers!r}")
        if self.encoding not in ENCODINGS:
            raise ValueError(f"unknown encoding {self.encoding!r}: expected one of {ENCODINGS}")
        if not isinstance(self.schema, pa.Schema):
            raise TypeError(f"schema must be a pyarrow.Schema, got {type(self.schema).__name__}")
        object.__setattr__(self, "time_type", TimeType.parse(self.time_type))
        _check_schema(self.schema, self.stream)
        if not self.created:
            now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
            object.__setattr__(self, "created", now.replace("+00:00", "Z"))

    # -- serialization -------------------------------------------------------------------------------

    def to_json(self) -> bytes:
        """The header as the JSON document stored in logs (see FORMAT.md)."""
        doc = {
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
        return (json.dumps(doc, indent=1) + "\n").encode()

    @staticmethod
    def from_json(data: bytes, *, path: str | None = None) -> "StreamHeader":
        """Parse a stored header; a newer major version raises UnsupportedVersionError, damage CorruptLogError."""
        try:
            doc = json.loads(data)
            if doc.get("format") != "eventlog":
                raise ValueError("not an eventlog header (field 'format' is not 'eventlog')")
            major, minor = (int(x) for x in str(doc["version"]).split("."))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptLogError(f"unreadable stream header: {e}", path=path) from None
        if major != FORMAT_VERSION[0]:
            raise UnsupportedVersionError(
                f"stream header has format version {major}.{minor}; this eventlog reads {FORMAT_VERSION[0]}.x",
                stream=doc.get("stream"),
                path=path,
            )
        try:
            schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(doc["schema"], validate=True)))
            return StreamHeader(
                stream=doc["stream"],
                peers=doc["peers"],
                schema=schema,
                time_type=TimeType.parse(doc["time"]),
                encoding=doc["encoding"],
                created=doc["created"],
                version=(major, minor),
            )
        except (ValueError, KeyError, TypeError, pa.ArrowException) as e:
            raise CorruptLogError(f"unreadable stream header: {e}", stream=doc.get("stream"), path=path) from None

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
        if not self.schema.equals(other.schema, check_metadata=False):
            diffs.append(f"schema\n{other.schema}\n!= stored schema\n{self.schema}")
        if diffs:
            raise HeaderMismatchError(
                "stream exists with another header: " + "; ".join(diffs), stream=self.stream
            )

    def check_writable(self) -> None:
        """Raise UnsupportedVersionError if this code may read but not append to the stream (newer minor)."""
        if self.version > FORMAT_VERSION:
            raise UnsupportedVersionError(
                f"stream was written with format {self.version[0]}.{self.version[1]}; this eventlog writes "
                f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]} and may read it but not append to it",
                stream=self.stream,
            )
