"""A write-only, non-seekable file that keeps what a library writes until drained: how the encodings cut a
standard writer's output (pyarrow's IPC stream writer, fastavro's container writer) into event bodies."""

from __future__ import annotations


class DrainSink:
    """Collects written bytes; ``drain()`` returns and forgets them."""

    closed = False

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def write(self, data) -> int:  # noqa: ANN001 - any buffer-protocol object
        self._chunks.append(bytes(data))
        return len(data)

    def seekable(self) -> bool:
        return False

    def flush(self) -> None:
        pass

    def drain(self) -> bytes:
        out = b"".join(self._chunks)
        self._chunks.clear()
        return out
