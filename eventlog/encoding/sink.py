"""A write-only, non-seekable file that keeps what a library writes until drained: how the encodings cut a
standard writer's output (pyarrow's IPC stream writer, fastavro's container writer) into event bodies."""

from __future__ import annotations

import pyarrow as pa


class DrainSink:
    """Collects written bytes; ``drain()`` returns and forgets them.

    ``bytes`` and ``pyarrow.Buffer`` objects (immutable: pyarrow hands its IPC writer's body buffers over as
    Buffers) are kept as they are, anything else is copied; ``drain_chunks()`` hands the pieces over unjoined,
    so that a caller that joins them with more bytes copies the body once."""

    closed = False

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def write(self, data) -> int:  # noqa: ANN001 - any buffer-protocol object
        chunk = data if type(data) is bytes or type(data) is pa.Buffer else bytes(data)
        self._chunks.append(chunk)
        return len(chunk)

    def seekable(self) -> bool:
        return False

    def flush(self) -> None:
        pass

    def drain(self) -> bytes:
        out = b"".join(self._chunks)
        self._chunks.clear()
        return out

    def drain_chunks(self) -> "list[bytes | pa.Buffer]":
        """The pieces written since the last drain, in order (and forgets them)."""
        out = self._chunks
        self._chunks = []
        return out
