"""Child process of the crash test: captures forever, printing each acknowledged (seq, frontier)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa  # noqa: E402

from capture import Capture  # noqa: E402
from eventlog import open_log  # noqa: E402

SCHEMA = pa.schema([("x", pa.int64()), ("s", pa.string())])


def rows(t: int) -> list[dict]:
    """The records the child sends at time t (the parent checks them)."""
    return [{"x": t * 1000 + i, "s": "v" * (t % 50)} for i in range(t % 7 + 1)]


def main(root: str, encoding: str, segment_bytes: int) -> None:
    log = open_log(root, sync="fsync", segment_bytes=segment_bytes)
    cap = Capture(log, "crash", 0, 1, schema=SCHEMA, encoding=encoding)
    (t,) = cap.frontier
    print(f"start {cap.next_seq} {t}", flush=True)
    while True:
        cap.send(t, rows(t))
        cap.advance_to(t + 1)
        t += 1
        print(f"ack {cap.next_seq - 1} {t}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
