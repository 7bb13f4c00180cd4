"""Checkpoint files that execute nothing when read: a checksummed binary container for task snapshots and
checksummed JSON documents for manifests, job counters and sink cursors.

**Task snapshot** (``chk-<id>/<op>-<instance>.state``), little-endian::

    offset  size  field
    0       8     magic b"ELRTSNAP"
    8       2     version (1)
    10      2     kind (1: task snapshot)
    12      4     D: length of the document (UTF-8 JSON)
    16      8     L: length of the whole file, header and trailer included
    24      4     B: number of Arrow blobs
    28      4     reserved (0)
    32      D     the document: tagged JSON (below)
    32+D    …     B blobs, each ``length u64 | Arrow IPC stream`` (one table: keyed state, key types)
    L-4     4     CRC-32 (zlib) of bytes [0, L-4)

A reader checks the magic, version and kind, that ``L`` is the file's size (truncation), the CRC, and every
length against what is left of the file before it slices anything; the file's size is bounded by
``MAX_STATE_BYTES`` before it is read (a local file's from ``fstat``, an S3 object's from its size:
``runtime.checkpoints.storage``, the ``fs=`` of the readers). Arrow blobs are fully validated
(``Table.validate(full=True)``) and must not use IPC body compression.

**Tagged JSON** is JSON that says exactly which Python value it stands for, so state round-trips without
pickle: ``null``, booleans, integers (any size), finite floats, strings, lists and string-keyed dicts are
themselves; a single-key object whose key starts with ``$`` is a tag: ``{"$t": [...]}`` a tuple,
``{"$m": [[k, v], ...]}`` a dict whose keys are not all strings (or one starts with ``$``), ``{"$b": base64}``
bytes, ``{"$f": "nan" | "inf" | "-inf"}`` a non-finite float, ``{"$arrow": i}`` the ``i``-th Arrow blob
(a ``pa.Table``; task snapshots only). Any other value cannot be stored (``StateTypeError``).

**JSON documents** (``_COMPLETE``, ``LATEST``, ``master.json``, sink ``cursor`` files) stay readable JSON::

    {"format": "eventlog-runtime", "kind": "manifest", "version": 1, "length": N, "crc32": C, "body": {...}}

where ``N`` and ``C`` are the length and CRC-32 of the body's canonical form (keys sorted, no whitespace,
ASCII). The document itself is written the same way, with no trailing newline, so any truncation breaks
it. The body is plain JSON. Documents are bounded by ``MAX_DOCUMENT_BYTES``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
import zlib
from typing import Any

import pyarrow as pa

from ..errors import CheckpointCorruptError
from .storage import LOCAL, StateFs

MAGIC = b"ELRTSNAP"
"""The first 8 bytes of a task snapshot file."""

VERSION = 1
"""The version of the snapshot container and of the JSON documents this code writes and reads."""

KIND_TASK = 1
"""The container kind of a task snapshot."""

FORMAT = "eventlog-runtime"
"""The ``format`` field of every checkpoint JSON document."""

MAX_STATE_BYTES = 1 << 34
"""The largest task snapshot file read (16 GiB): a larger file is refused before anything is allocated."""

MAX_DOCUMENT_BYTES = 64 << 20
"""The largest checkpoint JSON document read (64 MiB)."""

MAX_BLOBS = 1 << 16
"""The most Arrow blobs one snapshot holds."""

_HEAD = struct.Struct("<8sHHIQII")
_BLOB_LEN = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_MIN_SIZE = _HEAD.size + _CRC.size


class StateTypeError(TypeError):
    """A value of a type tagged JSON cannot store; ``where`` is its place in the state (``state.keyed[3]``)."""

    def __init__(self, value: Any, where: str) -> None:
        self.type_name = f"{type(value).__module__}.{type(value).__qualname__}".removeprefix("builtins.")
        self.where = where
        super().__init__(f"a value of type {self.type_name} at {where} has no exact JSON or Arrow form")


# -- tagged JSON -----------------------------------------------------------------------------------------


def _tag(value: Any, blobs: list[pa.Table] | None, where: str) -> Any:
    t = type(value)
    if value is None or t is bool or t is int or t is str:
        return value
    if t is float:
        if math.isfinite(value):
            return value
        return {"$f": "nan" if value != value else ("inf" if value > 0 else "-inf")}
    if t is list:
        return [_tag(v, blobs, f"{where}[{i}]") for i, v in enumerate(value)]
    if t is tuple:
        return {"$t": [_tag(v, blobs, f"{where}[{i}]") for i, v in enumerate(value)]}
    if t is dict:
        if all(type(k) is str and not k.startswith("$") for k in value):
            return {k: _tag(v, blobs, f"{where}.{k}") for k, v in value.items()}
        return {"$m": [[_tag(k, blobs, f"{where}<key>"), _tag(v, blobs, f"{where}[{k!r}]")]
                       for k, v in value.items()]}
    if t is bytes or t is bytearray:
        return {"$b": base64.b64encode(value).decode("ascii")}
    if blobs is not None and isinstance(value, (pa.Table, pa.RecordBatch)):
        blobs.append(value if isinstance(value, pa.Table) else pa.Table.from_batches([value]))
        return {"$arrow": len(blobs) - 1}
    raise StateTypeError(value, where)


class _Bad(ValueError):
    """Tagged JSON that does not decode (turned into CheckpointCorruptError by the caller)."""


def _untag(doc: Any, blobs: list[pa.Table] | None) -> Any:
    t = type(doc)
    if t is list:
        return [_untag(v, blobs) for v in doc]
    if t is not dict:
        return doc
    tags = [k for k in doc if k.startswith("$")]
    if not tags:
        return {k: _untag(v, blobs) for k, v in doc.items()}
    if len(doc) != 1:
        raise _Bad(f"an object mixes the tag {tags[0]!r} with other keys")
    tag, body = next(iter(doc.items()))
    if tag == "$t" and type(body) is list:
        return tuple(_untag(v, blobs) for v in body)
    if tag == "$m" and type(body) is list:
        out = {}
        for pair in body:
            if type(pair) is not list or len(pair) != 2:
                raise _Bad("a $m entry is not a [key, value] pair")
            k = _untag(pair[0], blobs)
            try:
                out[k] = _untag(pair[1], blobs)
            except TypeError:
                raise _Bad(f"a $m key of type {type(k).__name__} is not hashable") from None
        return out
    if tag == "$b" and type(body) is str:
        try:
            return base64.b64decode(body.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise _Bad("a $b value is not base64") from None
    if tag == "$f" and body in ("nan", "inf", "-inf"):
        return float(body)
    if tag == "$arrow" and blobs is not None and type(body) is int and 0 <= body < len(blobs):
        return blobs[body]
    raise _Bad(f"unknown or malformed tag {tag!r}")


def to_tagged_json(value: Any) -> str:
    """``value`` as tagged JSON text (no Arrow tables); raises ``StateTypeError`` for unsupported types."""
    try:
        return json.dumps(_tag(value, None, "value"), separators=(",", ":"), allow_nan=False)
    except RecursionError:
        raise StateTypeError(value, "value (nested too deeply)") from None


def from_tagged_json(text: str | bytes) -> Any:
    """The value of tagged JSON text; raises ``ValueError`` when it is not valid tagged JSON."""
    try:
        return _untag(json.loads(text), None)
    except RecursionError:
        raise ValueError("tagged JSON nested too deeply") from None


# -- the snapshot container ------------------------------------------------------------------------------


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def encode_snapshot(doc: Any) -> bytes:
    """The bytes of a task snapshot file holding ``doc`` (tagged JSON; ``pa.Table`` values become Arrow
    blobs). Raises ``StateTypeError`` for a value tagged JSON cannot store."""
    blobs: list[pa.Table] = []
    try:
        text = json.dumps(_tag(doc, blobs, "snapshot"), separators=(",", ":"), allow_nan=False).encode()
    except RecursionError:
        raise StateTypeError(doc, "snapshot (nested too deeply)") from None
    parts = [b"", text]
    total = _MIN_SIZE + len(text)
    for t in blobs:
        data = _ipc(t)
        parts += [_BLOB_LEN.pack(len(data)), data]
        total += _BLOB_LEN.size + len(data)
    parts[0] = _HEAD.pack(MAGIC, VERSION, KIND_TASK, len(text), total, len(blobs), 0)
    body = b"".join(parts)
    return body + _CRC.pack(zlib.crc32(body))


def _read_table(blob: memoryview, path: str, offset: int) -> pa.Table:
    try:
        if _compressed(blob):   # before decoding: a compressed body declares its own (unbounded) size
            raise CheckpointCorruptError("an Arrow blob uses IPC body compression, which snapshots never use",
                                         path=path, offset=offset)
        table = pa.ipc.open_stream(pa.py_buffer(blob)).read_all()
        table.validate(full=True)
    except CheckpointCorruptError:
        raise
    except (pa.ArrowException, ValueError, TypeError, OverflowError, MemoryError) as e:
        raise CheckpointCorruptError(f"an Arrow blob of the snapshot does not decode: {e}", path=path,
                                     offset=offset) from None
    return table


def _compressed(blob: memoryview) -> bool:
    """True when any record batch or dictionary batch message of the IPC stream declares body compression."""
    reader = pa.ipc.MessageReader.open_stream(pa.py_buffer(blob))
    while True:
        try:
            msg = reader.read_next_message()
        except StopIteration:
            return False
        if msg.type in ("record batch", "dictionary") and _batch_compression(
                msg.metadata.to_pybytes(), dictionary=msg.type == "dictionary"):
            return True


def _field(buf: bytes, table: int, field_id: int) -> int:
    """The position of field ``field_id`` of the flatbuffer table at ``table`` (0: absent)."""
    vt = table - struct.unpack_from("<i", buf, table)[0]
    if vt < 0:
        raise struct.error("vtable out of range")
    slot = 4 + 2 * field_id
    if struct.unpack_from("<H", buf, vt)[0] <= slot:
        return 0
    off = struct.unpack_from("<H", buf, vt + slot)[0]
    return table + off if off else 0


def _table_at(buf: bytes, pos: int) -> int:
    """The table an offset field at ``pos`` points to."""
    return pos + struct.unpack_from("<I", buf, pos)[0]


def _batch_compression(meta: bytes, dictionary: bool = False) -> bool:
    """Whether a (dictionary) batch message's flatbuffer sets ``compression`` (Message.fbs: Message{version,
    header_type, header, …}; DictionaryBatch{id, data: RecordBatch, …}; RecordBatch{length, nodes, buffers,
    compression, …}). Metadata that does not parse counts as compressed (refused)."""
    try:
        header = _field(meta, _table_at(meta, 0), 2)
        if not header:
            return False
        batch = _table_at(meta, header)
        if dictionary:
            data = _field(meta, batch, 1)
            if not data:
                return False
            batch = _table_at(meta, data)
        return _field(meta, batch, 3) != 0
    except struct.error:
        return True


def decode_snapshot(data: bytes | memoryview, path: str) -> Any:
    """The document of a task snapshot file's bytes (see the module doc); raises ``CheckpointCorruptError``
    naming ``path`` for anything but a whole, undamaged snapshot."""
    view = memoryview(data)
    size = view.nbytes
    if size < _MIN_SIZE:
        raise CheckpointCorruptError(f"snapshot file is truncated ({size} bytes, a snapshot has at least "
                                     f"{_MIN_SIZE})", path=path, offset=size)
    magic, version, kind, doc_len, total, n_blobs, _reserved = _HEAD.unpack_from(view, 0)
    if magic != MAGIC:
        raise CheckpointCorruptError(f"not a runtime snapshot file (magic {bytes(magic)!r}, expected {MAGIC!r})",
                                     path=path, offset=0)
    if version != VERSION:
        raise CheckpointCorruptError(f"snapshot format version {version} is not supported (this runtime reads "
                                     f"version {VERSION})", path=path, offset=8)
    if kind != KIND_TASK:
        raise CheckpointCorruptError(f"snapshot kind {kind} is not a task snapshot", path=path, offset=10)
    if total != size:
        what = "truncated" if total > size else "longer than it says"
        raise CheckpointCorruptError(f"snapshot file is {what}: {size} bytes, its header says {total}", path=path,
                                     offset=min(size, total))
    crc = _CRC.unpack_from(view, size - 4)[0]
    if zlib.crc32(view[:size - 4]) != crc:
        raise CheckpointCorruptError("snapshot file fails its checksum (it was damaged or edited)", path=path)
    end = size - 4
    if doc_len > end - _HEAD.size or n_blobs > MAX_BLOBS:
        raise CheckpointCorruptError(f"snapshot header declares {doc_len} document bytes and {n_blobs} blobs, "
                                     f"more than the file holds", path=path, offset=12)
    pos = _HEAD.size
    text = view[pos:pos + doc_len]
    pos += doc_len
    blobs: list[pa.Table] = []
    for _ in range(n_blobs):
        if end - pos < _BLOB_LEN.size:
            raise CheckpointCorruptError("snapshot blob header runs past the end of the file", path=path, offset=pos)
        n = _BLOB_LEN.unpack_from(view, pos)[0]
        if n > end - pos - _BLOB_LEN.size:
            raise CheckpointCorruptError(f"snapshot blob of {n} bytes runs past the end of the file", path=path,
                                         offset=pos)
        blobs.append(_read_table(view[pos + 8:pos + 8 + n], path, pos))
        pos += _BLOB_LEN.size + n
    if pos != end:
        raise CheckpointCorruptError(f"snapshot file has {end - pos} unexplained bytes before its checksum",
                                     path=path, offset=pos)
    try:
        return _untag(json.loads(bytes(text)), blobs)
    except (ValueError, _Bad, RecursionError) as e:
        raise CheckpointCorruptError(f"snapshot document is not valid tagged JSON: {e}", path=path,
                                     offset=_HEAD.size) from None


def read_snapshot(path: str, *, limit: int = MAX_STATE_BYTES, fs: StateFs = LOCAL) -> Any:
    """The document of the task snapshot file at ``path`` (``decode_snapshot``), on the local disk or on ``fs``
    (``runtime.checkpoints.storage``; errors name ``fs.display(path)``)."""
    return decode_snapshot(fs.read(path, limit), fs.display(path))


# -- JSON documents --------------------------------------------------------------------------------------


def _canonical(body: Any) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def encode_document(kind: str, body: dict[str, Any]) -> bytes:
    """The bytes of a checkpoint JSON document of ``kind`` with ``body`` (plain JSON; see the module doc)."""
    canon = _canonical(body)
    doc = {"format": FORMAT, "kind": kind, "version": VERSION, "length": len(canon), "crc32": zlib.crc32(canon),
           "body": body}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def decode_document(data: bytes, kind: str, path: str) -> dict[str, Any]:
    """The body of a checkpoint JSON document of ``kind``; raises ``CheckpointCorruptError`` naming ``path``
    when it is not valid JSON, not such a document, or fails its length or checksum."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise CheckpointCorruptError(f"checkpoint document is not valid JSON: {e}", path=path) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CheckpointCorruptError(f"not a runtime checkpoint document (format should be {FORMAT!r})", path=path)
    if doc.get("kind") != kind:
        raise CheckpointCorruptError(f"checkpoint document of kind {doc.get('kind')!r}, expected {kind!r}",
                                     path=path)
    if doc.get("version") != VERSION:
        raise CheckpointCorruptError(f"checkpoint document version {doc.get('version')!r} is not supported (this "
                                     f"runtime reads version {VERSION})", path=path)
    body = doc.get("body")
    if not isinstance(body, dict) or set(doc) != {"format", "kind", "version", "length", "crc32", "body"}:
        raise CheckpointCorruptError("checkpoint document does not have exactly the fields format, kind, version, "
                                     "length, crc32 and a body object", path=path)
    try:
        canon = _canonical(body)
    except (ValueError, RecursionError):
        raise CheckpointCorruptError("checkpoint document body is not plain JSON", path=path) from None
    if doc.get("length") != len(canon) or doc.get("crc32") != zlib.crc32(canon):
        raise CheckpointCorruptError("checkpoint document fails its length or checksum (it was damaged or edited)",
                                     path=path)
    return body


def read_document(path: str, kind: str, *, limit: int = MAX_DOCUMENT_BYTES, fs: StateFs = LOCAL) -> dict[str, Any]:
    """The body of the checkpoint JSON document of ``kind`` at ``path`` (``decode_document``), on the local
    disk or on ``fs`` (``read_snapshot``)."""
    return decode_document(fs.read(path, limit), kind, fs.display(path))
