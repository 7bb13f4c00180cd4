"""Generates the golden bundle vectors of schemas/BUNDLE.md, by hand from the layout (plain ``struct``,
independent of eventlog's codec).

Each vector ``NAME`` is two files:

- ``NAME.hex``: the bytes as hex, 16 bytes a line, after ``#`` comment lines that describe them;
- ``NAME.json``: the expected decode: the header fields and every message (id, type, payload as hex), or,
  for an invalid vector, the expected error (byte offset and a fragment of the message).

Run ``python tests/golden/bundles/make_vectors.py`` to rewrite the files; tests/test_bundle.py checks that
the files match this script, that both codecs decode them to the JSON, and that both encode the valid ones
to exactly these bytes.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

MAGIC = 0xCAFEBABA
EMPTY, BARRIER, BUNDLE = 1, 2, 3  # BundleType
MSG_BARRIER, MSG_DATA, MSG_EVENT_MESSAGES, MSG_EVENT_PROGRESS, MSG_STREAM_HEADER = 1, 2, 3, 4, 5
TS = 1_700_000_000_123  # 2023-11-14T22:13:20.123Z, in ms


def message(payload: bytes, msg_id: int, msg_type: int) -> bytes:
    """PayloadSize u32 | MessageId u64 | MessageType u32 | payload."""
    return struct.pack("<IQI", len(payload), msg_id, msg_type) + payload


def bundle(ts: int, last_id: int, bundle_type: int, messages: list[bytes], *, count: int | None = None,
           raw: int | None = None, magic: int = MAGIC) -> bytes:
    """Magic u32 | BundleTs u64 | LastMessageId u64 | MessageListSize u32 | BundleType u32 |
    RawBundleSize u32 | messages.  ``count``/``raw``/``magic`` override the true values (bad vectors)."""
    body = b"".join(messages)
    n = len(messages) if count is None else count
    r = len(body) if raw is None else raw
    return struct.pack("<IQQIII", magic, ts, last_id, n, bundle_type, r) + body


def expect_valid(ts: int, last_id: int, bundle_type: int, msgs: list[tuple[int, int, bytes]]) -> dict[str, Any]:
    raw = sum(16 + len(p) for _, _, p in msgs)
    return {
        "valid": True,
        "bundles": [
            {
                "magic": MAGIC,
                "ts": ts,
                "last_id": last_id,
                "count": len(msgs),
                "type": bundle_type,
                "raw_size": raw,
                "nbytes": 32 + raw,
                "messages": [{"id": i, "type": t, "payload": p.hex()} for i, t, p in msgs],
            }
        ],
    }


def vectors() -> dict[str, tuple[str, bytes, dict[str, Any]]]:
    """name -> (description, bytes, expected decode)."""
    out: dict[str, tuple[str, bytes, dict[str, Any]]] = {}

    # EMPTY: no messages; LastMessageId = last data id sent so far.
    data = bundle(TS, 41, EMPTY, [])
    # The same bytes spelled field by field, as a check of this script against the spec table.
    literal = "babafeca" + "7b68e5cf8b010000" + "2900000000000000" + "00000000" + "01000000" + "00000000"
    assert data.hex() == literal, data.hex()
    out["empty"] = ("EMPTY bundle, ts 1700000000123, last data id 41", data, expect_valid(TS, 41, EMPTY, []))

    out["empty_initial"] = (
        "EMPTY bundle before any data: LastMessageId 0",
        bundle(0, 0, EMPTY, []),
        expect_valid(0, 0, EMPTY, []),
    )

    # BARRIER: one barrier message carrying the last data id (42); payload = checkpoint id 7 as u64.
    bar = struct.pack("<Q", 7)
    out["barrier"] = (
        "BARRIER bundle after data id 42: one BARRIER message with id 42, payload u64 checkpoint id 7",
        bundle(TS, 42, BARRIER, [message(bar, 42, MSG_BARRIER)]),
        expect_valid(TS, 42, BARRIER, [(42, MSG_BARRIER, bar)]),
    )

    # BARRIER with the runtime's payload since Ray compatibility (runtime/barrier.py): Ray Streaming's
    # StreamingBarrierHeader, u32 barrier type 0 (GlobalBarrier) then u64 barrier id 5, no carried data.
    ray = struct.pack("<IQ", 0, 5)
    assert ray.hex() == "00000000" + "0500000000000000"
    out["ray_barrier"] = (
        "BARRIER bundle after data id 1, payload in Ray's layout: u32 barrier type 0 (global), u64 barrier id 5",
        bundle(0, 1, BARRIER, [message(ray, 1, MSG_BARRIER)]),
        expect_valid(0, 1, BARRIER, [(1, MSG_BARRIER, ray)]),
    )

    # BUNDLE of three messages, ids 40..42, three types, an empty and a > 12-byte payload.
    msgs = [
        (40, MSG_DATA, b"alpha"),
        (41, MSG_EVENT_MESSAGES, b""),
        (42, MSG_EVENT_PROGRESS, b"a payload longer than twelve bytes"),
    ]
    three = bundle(TS, 42, BUNDLE, [message(p, i, t) for i, t, p in msgs])
    out["three_messages"] = (
        "BUNDLE, ids 40..42 (DATA 'alpha', EVENT_MESSAGES empty, EVENT_PROGRESS 34 bytes)",
        three,
        expect_valid(TS, 42, BUNDLE, msgs),
    )

    hdr = b'{"stream":"numbers","peers":5}'
    out["stream_header"] = (
        "BUNDLE with one STREAM_HEADER message, id 1 (the first id of a channel)",
        bundle(TS, 1, BUNDLE, [message(hdr, 1, MSG_STREAM_HEADER)]),
        expect_valid(TS, 1, BUNDLE, [(1, MSG_STREAM_HEADER, hdr)]),
    )

    # Concatenated bundles, as in a channel: data, barrier, empty.
    concat = three + out["barrier"][1] + out["empty"][1]
    out["concatenated"] = (
        "three_messages + barrier + empty, back to back (iter_bundles)",
        concat,
        {
            "valid": True,
            "bundles": expect_valid(TS, 42, BUNDLE, msgs)["bundles"]
            + expect_valid(TS, 42, BARRIER, [(42, MSG_BARRIER, bar)])["bundles"]
            + expect_valid(TS, 41, EMPTY, [])["bundles"],
        },
    )

    def bad(name: str, desc: str, data: bytes, offset: int, fragment: str) -> None:
        out[name] = (desc, data, {"valid": False, "error": {"offset": offset, "contains": fragment}})

    good = [message(b"x", 1, MSG_DATA), message(b"yz", 2, MSG_DATA)]
    bad("bad_magic", "magic 0xCAFEBABE instead of 0xCAFEBABA", bundle(TS, 2, BUNDLE, good, magic=0xCAFEBABE), 0,
        "bad magic 0xCAFEBABE")
    bad("truncated_header", "the first 20 bytes of a bundle header", bundle(TS, 2, BUNDLE, good)[:20], 0,
        "20 of the 32 header bytes")
    bad("truncated_payload", "a two-message bundle missing its last byte", bundle(TS, 2, BUNDLE, good)[:-1], 28,
        "RawBundleSize 35 exceeds the 34 bytes")
    bad("bad_bundle_type", "BundleType 4", bundle(TS, 2, 4, good), 24, "unknown BundleType 4")
    bad("count_exceeds_raw", "MessageListSize 3 but room for two message headers",
        bundle(TS, 3, BUNDLE, good, count=3), 20, "needs 48 bytes of message headers")
    bad("ids_not_contiguous", "ids 1, 3 with LastMessageId 3",
        bundle(TS, 3, BUNDLE, [message(b"x", 1, MSG_DATA), message(b"yz", 3, MSG_DATA)]), 32 + 4,
        "MessageId 1, expected 2")
    bad("raw_size_larger", "RawBundleSize 4 bytes larger than its messages (4 stray bytes at the end)",
        bundle(TS, 2, BUNDLE, good + [b"\0" * 4], count=2), 32 + 17 + 18, "larger than the 35 bytes of its 2 messages")
    bad("payload_overruns", "first PayloadSize 100 runs past the bundle",
        bundle(TS, 2, BUNDLE, [struct.pack("<IQI", 100, 1, MSG_DATA) + b"x", message(b"yz", 2, MSG_DATA)]), 32,
        "PayloadSize 100 exceeds the 19 bytes left")
    bad("barrier_in_data", "a BARRIER message inside a BUNDLE",
        bundle(TS, 2, BUNDLE, [message(b"x", 1, MSG_DATA), message(b"", 2, MSG_BARRIER)]), 32 + 17 + 12,
        "MessageType 1 is not allowed in a BUNDLE")
    bad("empty_with_messages", "an EMPTY bundle with one message",
        bundle(TS, 1, EMPTY, [message(b"x", 1, MSG_DATA)]), 20, "EMPTY bundle with MessageListSize 1")
    bad("first_id_zero", "a BUNDLE of 2 messages with LastMessageId 1 (first id would be 0)",
        bundle(TS, 1, BUNDLE, [message(b"x", 0, MSG_DATA), message(b"yz", 1, MSG_DATA)]), 12,
        "LastMessageId 1 is smaller than MessageListSize 2")
    bad("trailing_bytes", "a valid EMPTY bundle followed by 3 bytes (decode; iter_bundles fails at 32)",
        bundle(TS, 0, EMPTY, []) + b"abc", 32, "3 trailing bytes")
    return out


def render_hex(desc: str, data: bytes) -> str:
    lines = [f"# {desc}", f"# {len(data)} bytes; hex, 16 bytes a line; generated by make_vectors.py"]
    lines += [data[i : i + 16].hex(" ") for i in range(0, len(data), 16)]
    return "\n".join(lines) + "\n"


def parse_hex(text: str) -> bytes:
    """Bytes of a .hex file: comment lines start with '#', whitespace is ignored."""
    return bytes.fromhex("".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))


def files() -> dict[str, str]:
    """File name -> content, for every vector."""
    out: dict[str, str] = {}
    for name, (desc, data, expected) in vectors().items():
        out[f"{name}.hex"] = render_hex(desc, data)
        out[f"{name}.json"] = json.dumps({"description": desc, **expected}, indent=2) + "\n"
    return out


def main() -> int:
    for fname, text in files().items():
        (HERE / fname).write_text(text)
    print(f"wrote {len(files())} files to {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
