"""The bundle codec: the frame of every append on Kafka and in runtime channels.

A bundle is Ray Streaming's message bundle, little-endian with explicit widths (``schemas/BUNDLE.md``
is the byte-level spec)::

    bundle  = Magic u32 (0xCAFEBABA) | BundleTs u64 (ms) | LastMessageId u64 | MessageListSize u32
              | BundleType u32 | RawBundleSize u32 | message * MessageListSize        (32-byte header)
    message = PayloadSize u32 | MessageId u64 | MessageType u32 | payload            (16-byte header)

Ids: a BUNDLE (type 3) carries data messages with the contiguous ids ``last - count + 1 .. last`` (the
first id is at least 1).  An EMPTY bundle (type 1) has no messages and ``LastMessageId`` = the last data
id sent so far (0 before any).  A BARRIER bundle (type 2) carries one or more BARRIER messages that do
not advance the data id sequence: ``LastMessageId`` and every barrier message's ``MessageId`` are the
last data id sent so far.

Decoding is zero-copy: :class:`Bundle` indexes the input (ids, types, offsets, lengths as numpy arrays),
``Bundle.payload(i)`` is a memoryview into it and ``Bundle.payloads()`` an Arrow ``binary_view`` array
whose data buffer is the input.  Decode cost grows with the message count, not the payload bytes.

Two implementations with the same behaviour: the native C extension ``eventlog._bundle_native`` (built
by ``pip install``) and the pure-Python reference ``eventlog._bundle_ref``.  The native one is used when
it imports; the environment variable ``EVENTLOG_BUNDLE_IMPL=reference|native`` forces one.  Both are
available as :data:`reference` and :data:`native` (None when the extension is missing).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from eventlog import _bundle_ref
from eventlog._bundle_ref import (
    BUNDLE_HEADER_SIZE,
    DEFAULT_MAX_MESSAGES,
    MAGIC,
    MAX_RAW_SIZE,
    MAX_VIEW_OFFSET,
    MESSAGE_HEADER_SIZE,
    Bundle,
    BundleError,
    BundleType,
    MessageType,
    Payloads,
    _check_max_messages,
    _check_ts,
    _payload_source,
    _plan,
)

__all__ = [
    "BARRIER",
    "BUNDLE",
    "BUNDLE_HEADER_SIZE",
    "DEFAULT_MAX_MESSAGES",
    "EMPTY",
    "IMPLEMENTATION",
    "MAGIC",
    "MAX_RAW_SIZE",
    "MAX_VIEW_OFFSET",
    "MESSAGE_HEADER_SIZE",
    "MSG_BARRIER",
    "MSG_DATA",
    "MSG_EVENT_MESSAGES",
    "MSG_EVENT_PROGRESS",
    "MSG_STREAM_HEADER",
    "Bundle",
    "BundleError",
    "BundleType",
    "MessageType",
    "decode",
    "encode",
    "encode_into",
    "encoded_size",
    "iter_bundles",
    "native",
    "reference",
]

#: Bundle types (the BundleType header field).
EMPTY = BundleType.EMPTY
BARRIER = BundleType.BARRIER
BUNDLE = BundleType.BUNDLE

#: Message types (the MessageType field of each message).
MSG_BARRIER = MessageType.BARRIER
MSG_DATA = MessageType.DATA
MSG_EVENT_MESSAGES = MessageType.EVENT_MESSAGES
MSG_EVENT_PROGRESS = MessageType.EVENT_PROGRESS
MSG_STREAM_HEADER = MessageType.STREAM_HEADER

#: The pure-Python reference implementation (module with encode, encode_into, encoded_size, decode,
#: iter_bundles).
reference = _bundle_ref

try:
    from . import _bundle_native as _ext
except ImportError as exc:  # not built: pip install -e . (or python setup.py build_ext --inplace)
    _ext = None
    _ext_error: ImportError | None = exc
else:
    _ext_error = None


def _native_views(buffer: Any, base: int, count: int, offsets: np.ndarray, lengths: np.ndarray) -> bytes:
    assert _ext is not None
    return _ext.build_views(buffer, base, count, offsets, lengths)


def _native_bundle(buffer: Any, start: int, header: tuple[int, int, int, int, int, bytes]) -> Bundle:
    ts, last_id, count, btype, raw, arrays = header
    return Bundle(
        buffer,
        start,
        ts,
        last_id,
        count,
        btype,
        raw,
        np.frombuffer(arrays, np.int64, count, 0),
        np.frombuffer(arrays, np.uint32, count, 8 * count),
        np.frombuffer(arrays, np.uint32, count, 12 * count),
        _native_views,
    )


def _check_contiguous(buffer: Any) -> None:
    if not memoryview(buffer).c_contiguous:
        raise TypeError("decoding needs a C-contiguous buffer")


def _check_out(out: Any) -> None:
    mv = memoryview(out)
    if mv.readonly:
        raise TypeError("encode_into needs a writable buffer")
    if not mv.c_contiguous:
        raise TypeError("encode_into needs a C-contiguous buffer")


class _NativeCodec:
    """The native implementation, with the same five functions as the reference module."""

    @staticmethod
    def _encode(
        out: Any, payloads: Any, ids: Any, types: Any, bundle_ts: Any, bundle_type: Any, last_id: Any
    ) -> Any:
        assert _ext is not None
        src = _payload_source(payloads)
        n = len(src)
        btype, first, step, last, norm = _plan(n, ids, types, bundle_type, last_id)
        common = (out, first, step, _check_ts(bundle_ts), last, btype, norm)
        if not isinstance(src, pa.Array):
            return _ext.encode_seq(src, *common)
        if n == 0:
            return _ext.encode_seq((), *common)
        bufs = src.buffers()
        if src.type.id == _BINARY_VIEW_ID:
            return _ext.encode_views(n, src.offset, bufs[1], tuple(bufs[2:]), *common)
        width = 4 if src.type.id == _BINARY_ID else 8
        return _ext.encode_offsets(n, src.offset, bufs[1], width, b"" if bufs[2] is None else bufs[2], *common)

    def encode(
        self,
        payloads: Payloads,
        ids: int | Sequence[int] | np.ndarray | None = None,
        types: int | Sequence[int] | np.ndarray | None = None,
        *,
        bundle_ts: int,
        bundle_type: int = BundleType.BUNDLE,
        last_id: int | None = None,
    ) -> bytes:
        """Native ``encode`` (see ``eventlog.bundle.encode``)."""
        return self._encode(None, payloads, ids, types, bundle_ts, bundle_type, last_id)

    def encode_into(
        self,
        out: Any,
        payloads: Payloads,
        ids: int | Sequence[int] | np.ndarray | None = None,
        types: int | Sequence[int] | np.ndarray | None = None,
        *,
        bundle_ts: int,
        bundle_type: int = BundleType.BUNDLE,
        last_id: int | None = None,
    ) -> int:
        """Native ``encode_into`` (see ``eventlog.bundle.encode_into``)."""
        _check_out(out)
        return self._encode(out, payloads, ids, types, bundle_ts, bundle_type, last_id)

    @staticmethod
    def encoded_size(payloads: Payloads) -> int:
        """Native ``encoded_size`` (see ``eventlog.bundle.encoded_size``)."""
        assert _ext is not None
        src = _payload_source(payloads)
        n = len(src)
        if not isinstance(src, pa.Array):
            total = _ext.seq_nbytes(src)
        elif n == 0:
            total = 0
        elif src.type.id == _BINARY_VIEW_ID:
            views = np.frombuffer(src.buffers()[1], dtype="<i4")
            total = int(views[4 * src.offset : 4 * (src.offset + n) : 4].sum(dtype=np.int64))
        else:
            dtype = "<i4" if src.type.id == _BINARY_ID else "<i8"
            offs = np.frombuffer(src.buffers()[1], dtype=dtype)
            total = int(offs[src.offset + n]) - int(offs[src.offset])
        return BUNDLE_HEADER_SIZE + MESSAGE_HEADER_SIZE * n + total

    @staticmethod
    def decode(buffer: Any, *, max_messages: int = DEFAULT_MAX_MESSAGES) -> Bundle:
        """Native ``decode`` (see ``eventlog.bundle.decode``)."""
        assert _ext is not None
        limit = _check_max_messages(max_messages)
        try:
            header = _ext.decode(buffer, 0, limit, True)
        except (ValueError, BufferError):
            _check_contiguous(buffer)
            raise
        return _native_bundle(buffer, 0, header)

    @staticmethod
    def iter_bundles(buffer: Any, *, max_messages: int = DEFAULT_MAX_MESSAGES) -> Iterator[Bundle]:
        """Native ``iter_bundles`` (see ``eventlog.bundle.iter_bundles``)."""
        limit = _check_max_messages(max_messages)
        _check_contiguous(buffer)
        return _native_iter(buffer, limit)

    def __repr__(self) -> str:
        return "<eventlog.bundle native codec>"


def _native_iter(buffer: Any, limit: int) -> Iterator[Bundle]:
    assert _ext is not None
    total = memoryview(buffer).nbytes
    pos = 0
    while pos < total:
        b = _native_bundle(buffer, pos, _ext.decode(buffer, pos, limit, False))
        yield b
        pos += b.nbytes


_BINARY_ID = pa.binary().id
_BINARY_VIEW_ID = pa.binary_view().id

#: The native implementation (same functions as :data:`reference`), or None when the C extension is
#: not built.
native: _NativeCodec | None = _NativeCodec() if _ext is not None else None


def _select() -> tuple[Any, str]:
    choice = os.environ.get("EVENTLOG_BUNDLE_IMPL", "").strip().lower()
    if choice == "reference":
        return reference, "reference"
    if choice == "native":
        if native is None:
            raise ImportError(
                "EVENTLOG_BUNDLE_IMPL=native but the C extension eventlog._bundle_native is not built "
                f"({_ext_error}); run `pip install -e .` or `python setup.py build_ext --inplace`"
            )
        return native, "native"
    if choice in ("", "auto"):
        return (native, "native") if native is not None else (reference, "reference")
    raise ImportError(f"EVENTLOG_BUNDLE_IMPL must be 'reference' or 'native', not {choice!r}")


_impl, IMPLEMENTATION = _select()
IMPLEMENTATION: str
"""The implementation in use: "native" or "reference"."""


def encode(
    payloads: Payloads,
    ids: int | Sequence[int] | np.ndarray | None = None,
    types: int | Sequence[int] | np.ndarray | None = None,
    *,
    bundle_ts: int,
    bundle_type: int = BUNDLE,
    last_id: int | None = None,
) -> bytes:
    """Encodes one bundle and returns its bytes.

    ``payloads``: a list/tuple (or iterable) of bytes-like objects (bytes, bytearray, memoryview,
    C-contiguous numpy arrays: their raw bytes), or an Arrow ``binary``/``large_binary``/``binary_view``
    array without nulls.  ``bundle_ts``: milliseconds since the epoch (u64).

    By ``bundle_type``:

    - ``BUNDLE`` (default): at least one payload; ``ids`` is the first id (an int, message ``i`` gets
      ``ids + i``) or every id (a sequence, which must be contiguous); or give only ``last_id`` and the
      first id is ``last_id - n + 1``.  Ids start at 1.  ``types`` is one MessageType for all (default
      ``MSG_DATA``) or one per message, each >= 2.
    - ``BARRIER``: at least one payload (the barrier's own data, e.g. its checkpoint id); ``last_id`` (or
      ``ids``) is the last data id sent so far, which every barrier message carries; ``types`` must be
      ``MSG_BARRIER`` (the default).
    - ``EMPTY``: no payloads; ``last_id`` is the last data id sent so far (0 before any).

    Raises ValueError/TypeError for arguments that break these rules or a RawBundleSize over 2**32 - 1.
    """
    return _impl.encode(payloads, ids, types, bundle_ts=bundle_ts, bundle_type=bundle_type, last_id=last_id)


def encode_into(
    out: Any,
    payloads: Payloads,
    ids: int | Sequence[int] | np.ndarray | None = None,
    types: int | Sequence[int] | np.ndarray | None = None,
    *,
    bundle_ts: int,
    bundle_type: int = BUNDLE,
    last_id: int | None = None,
) -> int:
    """Encodes one bundle at the start of ``out`` (a writable C-contiguous buffer: bytearray, numpy
    array, memoryview slice of a larger buffer...) and returns the number of bytes written.

    Arguments as :func:`encode`.  If the bundle does not fit, raises ValueError and writes nothing; use
    :func:`encoded_size` to size the buffer.  ``out`` must not overlap the payloads.
    """
    return _impl.encode_into(
        out, payloads, ids, types, bundle_ts=bundle_ts, bundle_type=bundle_type, last_id=last_id
    )


def encoded_size(payloads: Payloads) -> int:
    """Size in bytes of the bundle holding ``payloads``: ``32 + 16 * len(payloads) + total payload bytes``."""
    return _impl.encoded_size(payloads)


def decode(buffer: Any, *, max_messages: int = DEFAULT_MAX_MESSAGES) -> Bundle:
    """Decodes the single bundle that fills ``buffer`` (any C-contiguous buffer: bytes, bytearray,
    memoryview, numpy array, ``pa.Buffer``), without copying payloads.

    Every rule of ``schemas/BUNDLE.md`` is checked before the result is returned; the first violation
    raises :class:`BundleError` whose ``offset`` is the byte offset of the offending field.  Trailing
    bytes after the bundle are an error (use :func:`iter_bundles` for concatenated bundles).
    ``max_messages`` bounds MessageListSize (a reader-side limit against hostile inputs).
    """
    return _impl.decode(buffer, max_messages=max_messages)


def iter_bundles(buffer: Any, *, max_messages: int = DEFAULT_MAX_MESSAGES) -> Iterator[Bundle]:
    """Iterates over the concatenated bundles that fill ``buffer``, in order, each decoded as by
    :func:`decode` (offsets are relative to ``buffer``).  Raises :class:`BundleError` at the first bad or
    truncated bundle, after yielding the good ones before it."""
    return _impl.iter_bundles(buffer, max_messages=max_messages)
