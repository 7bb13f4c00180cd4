#!/usr/bin/env python3
"""Benchmark of segment compaction (issue 32 §2, FORMAT.md §11) on a simulated day of one-second micro-batches.

    python tools/bench/bench_compact.py                              # 3,000 micro-batches, print the tables
    python tools/bench/bench_compact.py --batches 86400 --out tools/bench/compact_results.md   # a whole day

Workload: one part written as a Structured Streaming tap writes it: every micro-batch is a new writer incarnation
(a new segment) holding one Messages event of ``--rows`` records (an int64, a float64 and a short string) and one
Progress event. Measured in the same run, on the local disk:

* **files and read time before/after**: the part's file count, ``replay cat --format jsonl`` of the whole stream (a
  subprocess, output to /dev/null), the log's part reader (every event decoded) and a pyarrow dataset scan of the
  stream folder (what Spark's and DuckDB's file sources do), on the uncompacted and on the compacted part. Ratios are
  uncompacted time / compacted time (above 1: the compacted part reads faster).
* **compaction throughput** against the baseline of a plain pyarrow rewrite of the same rows: open every small IPC
  file, read its batches, write them all into one IPC file (``pyarrow.ipc.new_file``). "vs pyarrow" is baseline time /
  compaction time (above 1: compaction is faster; it copies each event's bytes and checks every checksum, footer and
  epoch, where the baseline decodes and re-encodes the records but checks nothing).

The machine may be shared and noisy: every number is the best of --repeat runs.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.ipc as ipc

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from connectors.files import FileLog  # noqa: E402
from eventlog.events import Messages, Progress  # noqa: E402
from eventlog.header import StreamHeader  # noqa: E402

SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.float64()), ("name", pa.string())])


def write_day(root: str, batches: int, rows: int) -> None:
    """``batches`` one-second micro-batches, each a writer incarnation sealing one segment."""
    log = FileLog(root, sync="flush")
    log.create_stream(StreamHeader("day", 1, SCHEMA, "int64", "arrow"))
    for t in range(batches):
        w = log.writer("day", 0)
        if t == 0:
            w.append(Progress(((0, -1), (1, 1))))
        t_first = t + 1
        ids = pa.array(range(t * rows, (t + 1) * rows), pa.int64())
        batch = pa.record_batch([ids, pa.array([i * 0.5 for i in range(rows)]), pa.array([f"n{t % 97}"] * rows)],
                                schema=SCHEMA)
        w.append(Messages(t_first, batch))
        w.append(Progress(((t_first, -1), (t_first + 1, 1))))
        w.close()


def best(fn, repeat: int) -> float:  # noqa: ANN001
    out = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - started)
    return out


def part_dir(root: str) -> str:
    return os.path.join(root, "day", "part=0")


def count_files(root: str) -> int:
    return len(os.listdir(part_dir(root)))


def read_part(root: str) -> int:
    log = FileLog(root)
    r = log.reader("day", 0)
    n = sum(1 for _ in r)
    r.close()
    return n


def cat(root: str) -> None:
    with open(os.devnull, "wb") as out:
        subprocess.run([sys.executable, "-m", "replay.cli", "cat", root, "day", "--format", "jsonl"], stdout=out,
                       check=True, cwd=str(ROOT))


def scan(root: str) -> int:
    return ds.dataset(os.path.join(root, "day"), format="arrow", partitioning="hive").to_table().num_rows


def pyarrow_rewrite(src: str, dst: str) -> None:
    """The baseline: every small IPC file's batches read, then written into one IPC file."""
    d = part_dir(src)
    files = sorted(n for n in os.listdir(d) if n.endswith(".arrow"))[:-1]  # as compaction: all but the newest
    schema = None
    writer = None
    with open(dst, "wb") as out:
        for name in files:
            with pa.memory_map(os.path.join(d, name)) as f:
                r = ipc.open_file(f)
                if writer is None:
                    schema = r.schema
                    writer = ipc.new_file(out, schema)
                for i in range(r.num_record_batches):
                    writer.write_batch(r.get_batch(i))
        if writer is not None:
            writer.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=3000, help="micro-batches (86400: a day of one-second batches)")
    ap.add_argument("--rows", type=int, default=100, help="records per micro-batch")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--target", type=int, default=64 << 20, help="compacted segment size (bytes)")
    ap.add_argument("--out", help="write the tables as Markdown here")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench-compact-")
    try:
        src = os.path.join(work, "src")
        started = time.perf_counter()
        write_day(src, args.batches, args.rows)
        written = time.perf_counter() - started
        events = read_part(src)
        size = sum(os.path.getsize(os.path.join(part_dir(src), n)) for n in os.listdir(part_dir(src)))
        files_before = count_files(src)

        def fresh() -> str:
            d = os.path.join(work, f"copy-{time.monotonic_ns()}")
            shutil.copytree(src, d)
            return d

        compact_times, copies = [], []
        for _ in range(args.repeat):
            d = fresh()
            copies.append(d)
            t0 = time.perf_counter()
            FileLog(d).compact("day", target_bytes=args.target)
            compact_times.append(time.perf_counter() - t0)
        compact_s = min(compact_times)
        done = copies[-1]
        for d in copies[:-1]:
            shutil.rmtree(d)
        rewrite_s = best(lambda: pyarrow_rewrite(src, os.path.join(work, "rewrite.arrow")), args.repeat)
        assert read_part(done) == events and scan(done) == scan(src)
        files_after = count_files(done)
        rows = [
            ("replay cat --format jsonl (subprocess)", best(lambda: cat(src), args.repeat),
             best(lambda: cat(done), args.repeat)),
            ("part reader, every event decoded", best(lambda: read_part(src), args.repeat),
             best(lambda: read_part(done), args.repeat)),
            ("pyarrow dataset scan (Spark/DuckDB-style)", best(lambda: scan(src), args.repeat),
             best(lambda: scan(done), args.repeat)),
        ]
        mb = size / 1e6
        lines = [
            f"# Compaction benchmark ({datetime.date.today()}, {platform.machine()}, {os.cpu_count()} cores, "
            f"python {platform.python_version()}, pyarrow {pa.__version__})",
            "",
            f"Workload: {args.batches} one-second micro-batches of {args.rows} records, one writer incarnation (one "
            f"segment) each: {events} events, {mb:.1f} MB in the part (written in {written:.1f} s). Best of "
            f"{args.repeat}; `python tools/bench/bench_compact.py --batches {args.batches}`.",
            "",
            "## Files and read time, uncompacted vs compacted",
            "",
            f"Files in the part folder: **{files_before}** before, **{files_after}** after (segments, indexes, lock).",
            "",
            "| read | uncompacted | compacted | speed-up |",
            "|---|---:|---:|---:|",
        ]
        lines += [f"| {name} | {a * 1000:.0f} ms | {b * 1000:.0f} ms | {a / b:.1f}x |" for name, a, b in rows]
        lines += [
            "",
            "## Compaction throughput vs a plain pyarrow rewrite of the same rows",
            "",
            "| operation | time | MB/s | events/s | vs pyarrow |",
            "|---|---:|---:|---:|---:|",
            f"| pyarrow: read {files_before // 2 - 1} IPC files, write one (baseline) | {rewrite_s * 1000:.0f} ms | "
            f"{mb / rewrite_s:.0f} | {events / rewrite_s:,.0f} | 1.00 |",
            f"| `FileLog.compact` (checks, copies, index, removes {files_before // 2 - 1} segments) | "
            f"{compact_s * 1000:.0f} ms | {mb / compact_s:.0f} | {events / compact_s:,.0f} | "
            f"{rewrite_s / compact_s:.2f} |",
            "",
        ]
        text = "\n".join(lines)
        print(text)
        if args.out:
            Path(args.out).write_text(text)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
