#!/usr/bin/env python3
"""Benchmark of the bundle codec against a plain copy and other serialisers, in one run.

    python tools/bench/bench_bundle.py                       # print the tables
    python tools/bench/bench_bundle.py --out tools/bench/bundle_results.md

Workloads: 10,000 x 100 B and 1,000 x 10 KiB payloads (random bytes).  For each, encode and decode
through: the native codec (from a list of bytes and from an Arrow binary array, and encode_into a reused
buffer), the pure-Python reference, pickle protocol 5 (a list of bytes), Arrow IPC (a record batch with
one binary column) and fastavro (schemaless, an array of bytes).  The baseline is a numpy copy of the same
payload bytes (one contiguous array, ``arr.copy()``) measured in the same run; "vs copy" is
baseline time / operation time (above 1 = faster than copying the payload bytes once).  A second
reference row, ``b"".join(list)``, is the least any encoder from a list of Python bytes objects must do
(visit every object and copy its bytes).

The machine may be shared and noisy: every number is the best of --repeat runs, each of enough
iterations to last --min-time seconds.
"""

from __future__ import annotations

import argparse
import datetime
import io
import os
import pickle
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from eventlog import bundle as B  # noqa: E402

try:
    import fastavro
except ImportError:  # the table says so
    fastavro = None


def best_time(fn: Callable[[], Any], repeat: int, min_time: float) -> float:
    """Best-of-``repeat`` seconds per call, each repeat running ``fn`` enough times to last min_time."""
    fn()  # warm up (allocator, caches)
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_time or number >= 1 << 20:
            break
        number = max(number * 2, int(number * min_time / max(dt, 1e-9)) + 1)
    best = dt / number
    for _ in range(repeat - 1):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


@dataclass
class Row:
    group: str
    name: str
    seconds: float
    payload_bytes: int
    messages: int

    def line(self, copy_seconds: float) -> str:
        gbps = self.payload_bytes / self.seconds / 1e9
        mmsg = self.messages / self.seconds / 1e6
        return (
            f"| {self.group} | {self.name} | {self.seconds * 1e6:,.1f} | {self.seconds * 1e9 / self.messages:,.1f} "
            f"| {gbps:,.2f} | {mmsg:,.2f} | {copy_seconds / self.seconds:,.2f}x |"
        )


HEADER = (
    "| | operation | µs per bundle | ns per message | payload GB/s | M msg/s | vs copy |\n"
    "|---|---|---:|---:|---:|---:|---:|"
)


def run_workload(count: int, size: int, repeat: int, min_time: float, slow_repeat: int) -> tuple[list[Row], float]:
    rng = np.random.default_rng(size)
    flat = rng.integers(0, 256, count * size, dtype=np.uint8)
    payloads = [flat[i * size : (i + 1) * size].tobytes() for i in range(count)]
    arr = pa.array(payloads, pa.binary())
    total = count * size
    assert B.native is not None, "the native codec is not built: pip install -e ."
    nat, ref = B.native, B.reference

    rows: list[Row] = []

    def add(group: str, name: str, fn: Callable[[], Any], slow: bool = False) -> None:
        t = best_time(fn, slow_repeat if slow else repeat, 0.0 if slow else min_time)
        rows.append(Row(group, name, t, total, count))

    # baseline
    add("baseline", "numpy copy of the payload bytes (`arr.copy()`)", flat.copy)
    dst_np = np.empty_like(flat)
    add("baseline", "numpy copy into a reused array (`np.copyto`)", lambda: np.copyto(dst_np, flat))
    add("baseline", "`b\"\".join(list)`: concatenating the list of bytes (no headers)", lambda: b"".join(payloads))

    # encode
    data = nat.encode(payloads, 1, bundle_ts=1)
    assert data == ref.encode(payloads, 1, bundle_ts=1) == nat.encode(arr, 1, bundle_ts=1)
    out = bytearray(len(data))
    add("encode", "**native** encode, list of bytes", lambda: nat.encode(payloads, 1, bundle_ts=1))
    add("encode", "**native** encode, Arrow binary array", lambda: nat.encode(arr, 1, bundle_ts=1))
    add("encode", "**native** encode_into a reused bytearray, list", lambda: nat.encode_into(out, payloads, 1, bundle_ts=1))
    add("encode", "reference (pure Python) encode, list", lambda: ref.encode(payloads, 1, bundle_ts=1), slow=True)
    add("encode", "pickle protocol 5, list of bytes", lambda: pickle.dumps(payloads, protocol=5))

    schema = pa.schema([("payload", pa.binary())])
    batch = pa.record_batch([arr], schema=schema)

    def ipc_from(batch_: pa.RecordBatch) -> pa.Buffer:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema) as w:
            w.write_batch(batch_)
        return sink.getvalue()

    add("encode", "Arrow IPC stream, from the Arrow array", lambda: ipc_from(batch))
    add("encode", "Arrow IPC stream, from the list (pa.array + IPC)",
        lambda: ipc_from(pa.record_batch([pa.array(payloads, pa.binary())], schema=schema)))
    if fastavro is not None:
        avro_schema = fastavro.parse_schema({"type": "array", "items": "bytes"})

        def avro_encode() -> bytes:
            bio = io.BytesIO()
            fastavro.schemaless_writer(bio, avro_schema, payloads)
            return bio.getvalue()

        add("encode", "fastavro schemaless, array of bytes", avro_encode)

    # decode
    pickled = pickle.dumps(payloads, protocol=5)
    ipc = ipc_from(batch)
    add("decode", "**native** decode (header + index arrays)", lambda: nat.decode(data))
    add("decode", "**native** decode + payloads() (binary_view)", lambda: nat.decode(data).payloads())

    def touch_all() -> None:
        b = nat.decode(data)
        for i in range(b.count):
            b.payload(i)

    add("decode", "**native** decode + payload(i) for every i (Python loop)", touch_all)
    add("decode", "reference (pure Python) decode", lambda: ref.decode(data), slow=True)
    add("decode", "pickle.loads", lambda: pickle.loads(pickled))
    add("decode", "Arrow IPC stream read (zero copy)", lambda: pa.ipc.open_stream(ipc).read_next_batch())
    if fastavro is not None:
        avro = avro_encode()
        add("decode", "fastavro schemaless_reader", lambda: fastavro.schemaless_reader(io.BytesIO(avro), avro_schema))
    return rows, rows[0].seconds


def decode_scaling(count: int, sizes: list[int], repeat: int, min_time: float) -> list[tuple[int, float, float]]:
    """(payload size, ns per message for decode, ns per message for decode + payloads()) at a fixed count."""
    assert B.native is not None
    out = []
    for size in sizes:
        data = B.native.encode([bytes(size)] * count, 1, bundle_ts=1)
        t = best_time(lambda: B.native.decode(data), repeat, min_time)
        tp = best_time(lambda: B.native.decode(data).payloads(), repeat, min_time)
        out.append((size, t * 1e9 / count, tp * 1e9 / count))
    return out


NOTES = """\
- Encode must interleave a 16-byte header before every payload, so it copies message by message; the
  baseline copies the payload bytes in one block.  With large payloads the per-message cost vanishes in
  the copy; with 100-byte payloads it dominates (a cache-resident 1 MB block copy runs at tens of GB/s).
- From a list of Python bytes, any encoder must visit every object: compare with the `b"".join(list)`
  row, which does only that and copies the bytes without headers.
- Arrow IPC from an existing Arrow array copies the values buffer in one block (no per-message
  headers), which is why it beats bundle encode at 100 B; it is not a per-message frame.
- Decode only reads the message headers and builds the index (16 bytes a message); payload bytes are
  never touched, so its cost follows the message count.  `payloads()` adds the 16-byte Arrow views.
"""


def versions() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    fa = fastavro.__version__ if fastavro is not None else "not installed"
    return (
        f"{platform.python_implementation()} {platform.python_version()}, pyarrow {pa.__version__}, "
        f"numpy {np.__version__}, fastavro {fa}; {platform.machine()} {cpu}, {os.cpu_count()} cores; "
        f"bundle implementation in use: {B.IMPLEMENTATION}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=15, help="best of N (default 15)")
    ap.add_argument("--min-time", type=float, default=0.02, help="seconds per repeat (default 0.02)")
    ap.add_argument("--out", type=Path, help="also write the report as markdown to this file")
    args = ap.parse_args(argv)

    lines = [f"Environment: {versions()}", f"Best of {args.repeat} repeats of >= {args.min_time * 1000:.0f} ms "
             f"(pure-Python reference: best of 3 single runs).", ""]
    checks: list[tuple[str, bool]] = []
    per_msg: dict[int, float] = {}
    for count, size in ((10_000, 100), (1_000, 10_240)):
        rows, copy_t = run_workload(count, size, args.repeat, args.min_time, slow_repeat=3)
        lines += [f"### {count:,} messages x {size:,} B ({count * size / 1e6:.2f} MB of payload)", "", HEADER]
        lines += [r.line(copy_t) for r in rows]
        lines.append("")
        by = {r.name: r for r in rows}
        for name in ("**native** encode, list of bytes", "**native** encode, Arrow binary array"):
            ratio = copy_t / by[name].seconds
            checks.append((f"{count}x{size} B: {name.replace('**', '')} at {ratio:.2f}x of the numpy copy (target >= 0.7x)",
                           ratio >= 0.7))
        dec = by["**native** decode (header + index arrays)"]
        per_msg[size] = dec.seconds * 1e9 / count
        if size == 100:
            rate = count / dec.seconds / 1e6
            checks.append((f"{count}x{size} B: native decode at {rate:.1f} M msg/s (target >= 20)", rate >= 20))

    ratio = per_msg[10_240] / per_msg[100]
    lines += ["### Decode time per message vs payload size", "",
              f"Across the two workloads: {per_msg[100]:.2f} ns/msg at 100 B (10,000 msgs) vs "
              f"{per_msg[10_240]:.2f} ns/msg at 10 KiB (1,000 msgs): ratio {ratio:.2f} (the fixed per-call "
              f"cost is spread over 10x fewer messages in the second).", "",
              "At a fixed count of 1,000 messages:", "",
              "| payload size | decode ns/msg | decode + payloads() ns/msg |", "|---:|---:|---:|"]
    scaling = decode_scaling(1_000, [100, 10_240, 102_400], args.repeat, args.min_time)
    lines += [f"| {s:,} B | {a:.2f} | {b:.2f} |" for s, a, b in scaling]
    growth = scaling[1][1] / scaling[0][1]
    checks.append((f"decode time per message, 10 KiB / 100 B at 1,000 messages: {growth:.2f}x (target: no growth "
                   f"with payload size, < 2x for 100x the bytes)", growth < 2))
    lines += ["", "### Targets", ""] + [f"- {'PASS' if ok else 'MISS'}: {text}" for text, ok in checks]
    lines += ["", "### Reading the numbers", "", NOTES]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        cmd = "python tools/bench/bench_bundle.py " + " ".join(argv if argv is not None else sys.argv[1:])
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        args.out.write_text(f"# Bundle codec benchmark\n\nCommand: `{cmd.strip()}` ({stamp})\n\n{report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
