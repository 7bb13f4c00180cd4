"""Replay of an 8-part Arrow file log by 3 workers vs plain pyarrow.ipc reading of the same segments.

    python tools/bench/bench_replay.py [--rows 10000000] [--reps 3]

A stream of 8 parts (int64 + 32-byte string rows, batches of 10k, one time per batch) is captured once
(sync="none"). Then, interleaved in each repetition:

* plain: every segment of every part opened with ``pyarrow.ipc.open_stream(pa.memory_map(path))`` and
  all its batches read (what a user would do without eventlog; no checksums, no progress tracking);
* assign: replay workers 0, 1, 2 of 3 (``Replayer(..., mode="assign")``), one after the other in this
  process, each iterating its events (checksums verified, frontiers tracked, parts merged);
* checksum + decode only: the file log's per-event work without the replayer (the floor under assign);
* repartition: the same with ``mode="repartition", key="id"`` — every worker reads all 8 parts and keeps
  a third of the rows, so it reads the data 3 times (reported, no target).

Rates are captured rows per second of wall time for the whole replay (all workers).
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.ipc as ipc  # noqa: E402
from _common import Samples, fmt_count_rate, format_table, verdict  # noqa: E402

from capture import Capture  # noqa: E402
from eventlog import Messages, open_log  # noqa: E402
from replay import Replayer  # noqa: E402

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string())])
PARTS, WORKERS = 8, 3


def capture(root: str, rows: int, batch: int) -> None:
    rng = np.random.default_rng(3)
    log = open_log(root, sync="none")
    per_part = rows // PARTS
    for p in range(PARTS):
        with Capture(log, "r", p, PARTS, schema=SCHEMA) as cap:
            for t, start in enumerate(range(0, per_part, batch)):
                n = min(batch, per_part - start)
                ids = np.arange(p * per_part + start, p * per_part + start + n)
                s = pa.array(np.char.mod("%032x", rng.integers(0, 2**62, n)).astype(object), pa.string())
                cap.send(t, pa.record_batch([pa.array(ids), s], schema=SCHEMA))
                cap.advance_to(t + 1)


def _segments(root: str) -> list[str]:
    """The stream's sealed Arrow segments (format 2.0: IPC files in part=N folders; 1.x: IPC streams)."""
    return sorted(glob.glob(os.path.join(root, "r", "part=*", "*.arrow"))) or sorted(
        glob.glob(os.path.join(root, "r", "part-*", "*.arrows")))


def plain(root: str) -> int:
    n = 0
    for path in _segments(root):
        if path.endswith(".arrow"):
            n += ipc.open_file(pa.memory_map(path)).read_all().num_rows
        else:
            for b in ipc.open_stream(pa.memory_map(path)):
                n += b.num_rows
    return n


def decode_only(root: str) -> int:
    """The floor under a replay: every event's checksum verified and its batch decoded in place, through
    the file log's own index and codec, with no merge or progress tracking."""
    from connectors.files import index as ix
    from connectors.files.codec import file_codec

    codec = file_codec(open_log(root).header("r"))
    n = 0
    for path in _segments(root):
        stem, name = os.path.split(os.path.splitext(path)[0])
        raw = open(os.path.join(stem, ("_" if path.endswith(".arrow") else "") + name + ".index"), "rb").read()
        entries = [ix.unpack_entry(raw, ix.HEADER_SIZE + i * ix.ENTRY_SIZE)
                   for i in range((len(raw) - ix.HEADER_SIZE) // ix.ENTRY_SIZE)]
        with pa.memory_map(path) as mm:
            buf = mm.read_buffer()
        dec = codec.segment_decoder(buf.slice(0, entries[0].offset))
        for e in entries:
            assert ix.checksum(buf.slice(e.offset, e.length)) == e.crc
            _, ev = dec.decode_at(buf, e.offset, e.length)
            n += ev.records.num_rows if isinstance(ev, Messages) else 0
    return n


def replay(root: str, mode: str) -> int:
    n = 0
    log = open_log(root)
    for j in range(WORKERS):
        r = Replayer(log, "r", j, WORKERS, mode=mode, key="id" if mode == "repartition" else None)
        n += sum(ev.records.num_rows for ev in r if isinstance(ev, Messages))
        assert r.frontier.is_empty()
    return n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--batch", type=int, default=10_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--dir", default=None)
    args = p.parse_args()
    root = args.dir or tempfile.mkdtemp(prefix="bench-replay-")
    try:
        capture(root, args.rows, args.batch)
        total = (args.rows // PARTS) * PARTS
        s = Samples()
        for _ in range(args.reps):
            assert s.run("plain pyarrow.ipc", lambda: plain(root)) == total
            assert s.run("checksum + decode only (no replayer)", lambda: decode_only(root)) == total
            assert s.run("replay assign (3 workers)", lambda: replay(root, "assign")) == total
            assert s.run("replay repartition (3 workers)", lambda: replay(root, "repartition")) == total
        base = s.best("plain pyarrow.ipc")
        rows = []
        for name in s.names():
            t = s.best(name)
            ratio = None if name.startswith("plain") else base / t
            rows.append([name, fmt_count_rate(total, t), f"{t:.2f}", f"{s.spread(name):.0%}",
                         f"{ratio:.2f}x" if ratio else "", verdict(ratio, 0.8) if "assign" in name else ""])
        print(f"{total} rows in {PARTS} parts, batches of {args.batch}, {WORKERS} replay workers, best of {args.reps}")
        print(format_table(["case", "rows/s", "best s", "spread", "vs plain", "≥0.8×"], rows, markdown=True))
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
