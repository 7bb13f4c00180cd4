"""The payload of a runtime barrier message, in Ray Streaming's layout (schemas/BUNDLE.md, "Ray Streaming
compatibility"): ``BarrierType u32 | BarrierId u64 | data``, little-endian. The runtime writes global
barriers (type 0) whose id is the checkpoint id, with no data. Payloads of exactly 8 bytes (a bare checkpoint
id: channels written before this layout) are still read."""

from __future__ import annotations

import struct

from ..errors import ChannelError

GLOBAL_BARRIER = 0
"""Ray's ``StreamingBarrierType::GlobalBarrier``: a checkpoint barrier every channel of the job carries."""
_HEADER = struct.Struct("<IQ")
HEADER_SIZE = _HEADER.size  # 12: Ray's kBarrierHeaderSize (u32 type + u64 id)
MAX_BUNDLE_MESSAGES = 2048
"""The most messages a runtime bundle holds: what Ray Streaming's reader accepts in one bundle."""


def encode_barrier(checkpoint: int, data: bytes = b"") -> bytes:
    """The payload of the global barrier of ``checkpoint``."""
    return _HEADER.pack(GLOBAL_BARRIER, checkpoint) + data


def decode_barrier(payload: "bytes | memoryview", *, channel: str = "?") -> int:
    """The checkpoint id of a barrier payload (Ray's layout, or a legacy bare 8-byte id). Anything else, or a
    barrier type the runtime does not write, raises ChannelError naming the channel."""
    view = memoryview(payload)
    if len(view) == 8:
        return int.from_bytes(view, "little")
    if len(view) < HEADER_SIZE:
        raise ChannelError(f"barrier payload of {len(view)} bytes in channel {channel!r}: Ray's layout needs "
                           f"{HEADER_SIZE} (u32 type, u64 id)")
    kind, checkpoint = _HEADER.unpack_from(view)
    if kind != GLOBAL_BARRIER:
        raise ChannelError(f"barrier of type {kind} in channel {channel!r}: the runtime reads global barriers (0) only")
    return checkpoint


__all__ = ["GLOBAL_BARRIER", "HEADER_SIZE", "MAX_BUNDLE_MESSAGES", "decode_barrier", "encode_barrier"]
