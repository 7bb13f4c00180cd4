"""Benchmark: capturing into / reading from the file log vs plain pyarrow.ipc and plain fastavro (issue 2, "Speed").

Data: ``--rows`` rows (default 10M) of ``{id: int64, s: string}``, the strings 32 random hex characters, cut
into record batches of ``--batch`` rows (default 10k); generated once, before anything is timed.

Each round runs every case once, interleaved (the order rotates between rounds; the machine is shared and
noisy), for ``--rounds`` rounds (default ``_common.ROUNDS``); a case is judged by the **median of its per-round
ratios** to the baseline of the same round (``_common.Samples.ratio``), with best and spread beside it and the
load average before and after (``_common.Load``). Before each timed case the page cache's dirty pages are
written back (``os.sync``, untimed) so a case does not pay for the previous one's writeback.

Cases, per encoding:

arrow write
  plain     ``pa.OSFile(path, "wb")`` + ``pa.ipc.new_file(f, schema, options=IpcWriteOptions(compression="zstd"))``,
            ``write_batch`` per batch, close (an IPC file with its footer, as format 2.0 segments are). No fsync.
  eventlog  ``open_log(dir, sync=MODE)`` + ``Capture(log, "bench", 0, 1, schema, encoding="arrow")``; per batch i:
            ``send(i, batch)`` then ``advance_to(i + 1)`` (a Progress event and a sync each); close.
            Information: the same at ``sync="none"`` with every event through pyarrow's IPC writer whole
            (``ArrowFileCodec.assemble = False``, the write path before issue 17), with its own HEADLINE ratio.
arrow read
  plain     ``pa.ipc.open_file(pa.OSFile(path))``, read every record batch.
  eventlog  ``open_log(dir).reader("bench", 0)``, iterate entries, take ``Messages.records`` (Progress events are
            decoded too: that is the log).
avro write
  plain     ``fastavro.writer(open(path, "wb"), schema, records, codec="zstandard")`` (default sync_interval) with
            ``records = chain.from_iterable(b.to_pylist() for b in batches)``, schema a flat record
            ``{id: long, s: string}``. Starts from the same Arrow batches as eventlog. No fsync.
  eventlog  as for arrow, with ``encoding="avro"`` and ``open_log(..., avro_codec="zstandard")``: the plain
            writer's codec (format 2.x Avro segments default to deflate, which every Avro reader has).
            Information: the same at ``sync="none"`` with the default deflate codec.
avro read
  plain     ``fastavro.reader(open(path, "rb"))``, rows grouped by ``--batch`` into
            ``pa.RecordBatch.from_pylist(rows, schema=schema)``.
  eventlog  as for arrow.

Eventlog writes with ``sync="none"`` (same durability as the plain writers: neither fsyncs) and with the default
``sync="fsync"`` (every ``advance_to`` fsyncs data and index). The headline (``HEADLINE file log arrow write
(sync=none) / plain pyarrow``, issue 17's target >= 0.9x) is judged on ``sync="none"``; reads and Avro are
reported against ``--target`` (0.8x, issue 2), the fsync row is information. Rates: rows/s, and MB/s of the data's in-memory Arrow size
(the sum of ``batch.nbytes``, the same numerator for every case, so MB/s ratios equal rows/s ratios); "on disk"
is the bytes the case wrote (eventlog: segments + index files).

Usage::

    PYTHONPATH=. .venv/bin/python tools/bench/bench_file_log.py [--rows N] [--batch N] [--rounds N]
        [--encodings arrow,avro] [--dir DIR] [--quick] [--target 0.8] [--profile arrow-write|arrow-read|avro-write|avro-read]

``--quick``: 1M rows, Arrow only (unless ``--encodings`` says otherwise), well under a minute.

Files go to a fresh folder inside ``--dir`` (default: the system temp dir), removed at the end. A missed target
shows in the table and the HEADLINE lines (the exit status is 0 unless the benchmark itself fails).
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import io
import itertools
import os
import platform
import pstats
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

try:
    import eventlog  # noqa: F401
except ImportError:  # not pip-installed: run from the work tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from capture import Capture  # noqa: E402
from eventlog import Messages, open_log  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROUNDS, Load, Samples, fmt_bytes, fmt_count_rate, fmt_mb_rate, format_table, headline, verdict  # noqa: E402

WRITE_TARGET = 0.9
"""Issue 17: the file log's Arrow write at ``sync="none"`` runs at >= 0.9x the plain pyarrow writer."""

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string(), nullable=False)])
AVRO_SCHEMA = fastavro.parse_schema(
    {"type": "record", "name": "Row", "fields": [{"name": "id", "type": "long"}, {"name": "s", "type": "string"}]}
)
STREAM = "bench"
STR_LEN = 32


# -- data ------------------------------------------------------------------------------------------------------


def make_batches(rows: int, batch: int, seed: int = 2) -> list[pa.RecordBatch]:
    """``rows`` rows in batches of ``batch``: random int64 ids, 32-character random hex strings. Each batch owns
    its buffers (no slices of one big array), full batches share one offsets buffer."""
    rng = np.random.default_rng(seed)
    hex_digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    full_offsets = pa.py_buffer((np.arange(batch + 1, dtype=np.int32) * STR_LEN).tobytes())
    out = []
    for start in range(0, rows, batch):
        n = min(batch, rows - start)
        ids = rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, size=n, dtype=np.int64, endpoint=True)
        chars = hex_digits[rng.integers(0, 16, size=n * STR_LEN, dtype=np.uint8)]
        offsets = full_offsets if n == batch else pa.py_buffer((np.arange(n + 1, dtype=np.int32) * STR_LEN).tobytes())
        strings = pa.Array.from_buffers(pa.string(), n, [None, offsets, pa.py_buffer(chars)])
        out.append(pa.RecordBatch.from_arrays([pa.array(ids), strings], schema=SCHEMA))
    return out


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.unlink(path)


# -- the cases ---------------------------------------------------------------------------------------------------


def plain_arrow_write(path: str, batches: list[pa.RecordBatch]) -> int:
    options = ipc.IpcWriteOptions(compression="zstd")
    with pa.OSFile(path, "wb") as f, ipc.new_file(f, SCHEMA, options=options) as w:
        for b in batches:
            w.write_batch(b)
    return os.path.getsize(path)


def plain_arrow_read(path: str, batch: int) -> int:
    rows = 0
    with pa.OSFile(path, "rb") as f:
        reader = ipc.open_file(f)
        for i in range(reader.num_record_batches):
            rows += reader.get_batch(i).num_rows
    return rows


def plain_avro_write(path: str, batches: list[pa.RecordBatch]) -> int:
    with open(path, "wb") as f:
        records = itertools.chain.from_iterable(b.to_pylist() for b in batches)
        fastavro.writer(f, AVRO_SCHEMA, records, codec="zstandard")
    return os.path.getsize(path)


def plain_avro_read(path: str, batch: int) -> int:
    rows = 0
    with open(path, "rb") as f:
        records = fastavro.reader(f)
        while True:
            chunk = list(itertools.islice(records, batch))
            if not chunk:
                break
            rows += pa.RecordBatch.from_pylist(chunk, schema=SCHEMA).num_rows
    return rows


def eventlog_write(encoding: str, sync: str, *, assemble: bool = True,
                   avro_codec: str = "zstandard") -> Callable[[str, list[pa.RecordBatch]], int]:
    """The eventlog write case; ``assemble=False`` writes every 2.x Arrow event through pyarrow's IPC writer
    whole (``ArrowFileCodec.assemble``, the path before issue 17: shows what assembling saves, same rounds).
    Avro segments use ``avro_codec``: zstandard, the plain writer's codec, unless a case says otherwise."""
    from eventlog.encoding.arrow_file import ArrowFileCodec

    def write(path: str, batches: list[pa.RecordBatch]) -> int:
        ArrowFileCodec.assemble = assemble
        try:
            log = open_log(path, sync=sync, avro_codec=avro_codec)
            with Capture(log, STREAM, worker=0, peers=1, schema=SCHEMA, encoding=encoding) as cap:
                for t, b in enumerate(batches):
                    cap.send(t, b)
                    cap.advance_to(t + 1)
        finally:
            ArrowFileCodec.assemble = True
        return dir_bytes(path)

    return write


def eventlog_read(path: str, batch: int) -> int:
    rows = 0
    log = open_log(path)
    with log.reader(STREAM, 0) as reader:
        for entry in reader:
            ev = entry.event
            if isinstance(ev, Messages):
                rows += ev.records.num_rows
    return rows


PLAIN = {"arrow": ("plain pyarrow.ipc", plain_arrow_write, plain_arrow_read),
         "avro": ("plain fastavro", plain_avro_write, plain_avro_read)}
SYNC_MODES = ("none", "fsync")
UNASSEMBLED = "eventlog sync=none, pyarrow writer"
"""Information (arrow): every event through pyarrow's IPC writer whole, as before issue 17."""
DEFLATE = "eventlog sync=none, deflate"
"""Information (avro): 2.x Avro segments with the log's default block codec (deflate) instead of zstandard."""
EXTRA = {"arrow": (UNASSEMBLED, {"assemble": False}), "avro": (DEFLATE, {"avro_codec": "deflate"})}
"""Each encoding's information case, written at ``sync="none"`` beside the judged one."""


def verify(path: str, encoding: str, batches: list[pa.RecordBatch]) -> None:
    """Untimed: the log holds exactly the batches, at times 0, 1, 2, … with a Progress event after each
    (compared while streaming, so the decoded copy is never held whole)."""
    n_events = n_msgs = 0
    with open_log(path).reader(STREAM, 0) as reader:
        for entry in reader:
            n_events += 1
            ev = entry.event
            if isinstance(ev, Messages):
                i = n_msgs
                assert i < len(batches) and ev.time == i and ev.records.equals(batches[i]), f"{encoding}: batch {i} differs"
                n_msgs += 1
    assert n_msgs == len(batches), f"{encoding}: {n_msgs} Messages events, wanted {len(batches)}"
    assert n_events == 2 * len(batches) + 1, f"{encoding}: {n_events} events, wanted {2 * len(batches) + 1}"


# -- running -----------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace, batches: list[pa.RecordBatch], root: str) -> tuple[list[list[object]], Samples]:
    samples = Samples()
    sizes: dict[str, int] = {}
    rows = sum(b.num_rows for b in batches)
    nbytes = sum(b.nbytes for b in batches)

    def case(name: str, fn: Callable[[], int], *, check_rows: bool = False) -> int:
        os.sync()  # untimed: start each case with no dirty pages of the previous one
        result = samples.run(name, fn)
        if check_rows and result != rows:
            raise AssertionError(f"{name}: read {result} rows, wanted {rows}")
        return result

    # untimed warm-up on two batches: first-use imports (pyarrow.fs, codecs) are not charged to the first rep
    warm = os.path.join(root, "warm-up")
    for encoding in args.encodings:
        _, plain_write, plain_read = PLAIN[encoding]
        plain_write(warm + ".plain", batches[:2])
        plain_read(warm + ".plain", args.batch)
        eventlog_write(encoding, "none")(warm, batches[:2])
        eventlog_read(warm, args.batch)
        remove(warm)
        remove(warm + ".plain")

    for rep in range(args.rounds):
        for encoding in args.encodings:
            label, plain_write, plain_read = PLAIN[encoding]
            plain_path = os.path.join(root, f"plain.{encoding}")
            log_path = {s: os.path.join(root, f"log-{encoding}-{s}") for s in SYNC_MODES}
            writes = [(f"{encoding}/write/{label}", plain_path, plain_write)] + [
                (f"{encoding}/write/eventlog sync={s}", log_path[s], eventlog_write(encoding, s)) for s in SYNC_MODES
            ]
            extra, options = EXTRA[encoding]
            writes.append((f"{encoding}/write/{extra}", log_path["none"] + "-extra", eventlog_write(encoding, "none",
                                                                                                **options)))
            k = rep % len(writes)
            for name, path, fn in writes[k:] + writes[:k]:  # rotate the order between repetitions
                remove(path)
                sizes[name] = case(name, lambda fn=fn, path=path: fn(path, batches))
            remove(log_path["fsync"])
            if rep == 0 and args.verify:
                verify(log_path["none"], encoding, batches)
                verify(log_path["none"] + "-extra", encoding, batches)
            remove(log_path["none"] + "-extra")
            reads = [(f"{encoding}/read/{label}", lambda: plain_read(plain_path, args.batch)),
                     (f"{encoding}/read/eventlog log.reader", lambda: eventlog_read(log_path["none"], args.batch))]
            if rep % 2:
                reads.reverse()
            for name, fn in reads:
                case(name, fn, check_rows=True)
            remove(plain_path)
            remove(log_path["none"])
        print(f"  round {rep + 1}/{args.rounds} done", file=sys.stderr, flush=True)

    table = []
    for encoding in args.encodings:
        label = PLAIN[encoding][0]
        writes = [f"eventlog sync={s}" for s in SYNC_MODES] + [EXTRA[encoding][0]]
        for op, ours in (("write", writes), ("read", ["eventlog log.reader"])):
            base = f"{encoding}/{op}/{label}"
            for who in [label, *ours]:
                name = f"{encoding}/{op}/{who}"
                best = samples.best(name)
                ratio = None if who == label else samples.ratio(name, base)
                judged = who in ("eventlog sync=none", "eventlog log.reader")
                target = WRITE_TARGET if (encoding, op) == ("arrow", "write") else args.target
                table.append([
                    encoding, op, who, f"{best:.3f}", f"{samples.median(name):.3f}",
                    f"{samples.spread(name) * 100:.0f}%", fmt_count_rate(rows, best), fmt_mb_rate(nbytes, best),
                    fmt_bytes(sizes[name]) if op == "write" else "",
                    "" if ratio is None else f"{ratio.median:.2f}x", "" if ratio is None else f"{ratio.best:.2f}x",
                    verdict(ratio.median, target) if judged and ratio else ("info" if ratio is not None else "baseline"),
                ])
    return table, samples


def profile(args: argparse.Namespace, batches: list[pa.RecordBatch], root: str) -> None:
    """Run one eventlog case once under cProfile; print the functions by own time and by cumulative time."""
    encoding, op = args.profile.split("-")
    path = os.path.join(root, f"profile-{encoding}")
    remove(path)
    write = eventlog_write(encoding, "none")
    prof = cProfile.Profile()
    if op == "write":
        prof.runcall(write, path, batches)
    else:
        write(path, batches)
        prof.runcall(eventlog_read, path, args.batch)
    remove(path)
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out).strip_dirs()
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(30)
    print(out.getvalue())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=None, help="rows to write (default 10,000,000; 1,000,000 with --quick)")
    p.add_argument("--batch", type=int, default=10_000, help="rows per record batch (default 10,000)")
    p.add_argument("--rounds", "--reps", type=int, default=ROUNDS,
                   help=f"interleaved rounds; per-round ratios, median reported (default {ROUNDS})")
    p.add_argument("--encodings", default=None, help="comma-separated: arrow,avro (default both; arrow with --quick)")
    p.add_argument("--dir", default=None, help="where to write (default: a temporary directory, removed after)")
    p.add_argument("--quick", action="store_true", help="1M rows, arrow only: the headline in well under a minute")
    p.add_argument("--target", type=float, default=0.8, help="pass when eventlog >= target x plain (default 0.8)")
    p.add_argument("--no-verify", dest="verify", action="store_false", help="skip the untimed content check")
    p.add_argument("--profile", choices=["arrow-write", "arrow-read", "avro-write", "avro-read"],
                   help="instead of the benchmark, profile one eventlog case (sync=none) with cProfile")
    args = p.parse_args(argv)
    args.rows = args.rows if args.rows is not None else (1_000_000 if args.quick else 10_000_000)
    args.encodings = [e.strip() for e in (args.encodings or ("arrow" if args.quick else "arrow,avro")).split(",")
                      if e.strip()]
    if not args.encodings or any(e not in PLAIN for e in args.encodings):
        p.error(f"--encodings takes a comma-separated subset of {sorted(PLAIN)}")
    if args.rows < 1 or args.batch < 1 or args.rounds < 1:
        p.error("--rows, --batch and --rounds must be positive")

    print(f"generating {args.rows:,} rows in batches of {args.batch:,} ...", file=sys.stderr, flush=True)
    batches = make_batches(args.rows, args.batch)
    nbytes = sum(b.nbytes for b in batches)

    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
    root = tempfile.mkdtemp(prefix="bench-file-log-", dir=args.dir)  # our own folder, removed after
    load = Load()
    try:
        if args.profile:
            profile(args, batches, root)
            return 0
        table, samples = run(args, batches, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(f"eventlog file log vs plain writers/readers  ({datetime.datetime.now():%Y-%m-%d %H:%M})")
    print(f"rows {args.rows:,} (int64 + {STR_LEN}-char string), batch {args.batch:,}, {len(batches):,} batches, "
          f"{nbytes / 1e6:.0f} MB in Arrow memory; {args.rounds} interleaved rounds, ratios are medians of per-round "
          f"ratios; target >= {WRITE_TARGET}x plain (arrow write), >= {args.target}x (the others)")
    print(f"python {platform.python_version()}, pyarrow {pa.__version__}, fastavro {fastavro.__version__}, "
          f"{os.cpu_count()} cpus, dir {args.dir or tempfile.gettempdir()}; {load}")
    print()
    print(format_table(["enc", "op", "case", "best s", "median s", "spread", "rows/s", "MB/s", "on disk",
                        "vs plain", "best", "target"], table))
    print()
    if "arrow" in args.encodings:
        print(headline("file log arrow write (sync=none) / plain pyarrow",
                       samples.ratio("arrow/write/eventlog sync=none", "arrow/write/plain pyarrow.ipc"), WRITE_TARGET,
                       load))
        print(headline("file log arrow write (sync=none), assembled / pyarrow writer",
                       samples.ratio("arrow/write/eventlog sync=none", f"arrow/write/{UNASSEMBLED}"), None, load))
        print(headline("file log arrow read / plain pyarrow",
                       samples.ratio("arrow/read/eventlog log.reader", "arrow/read/plain pyarrow.ipc"), None, load))
    failed = [r for r in table if r[-1] == "FAIL"]
    print()
    print(f"{len(failed)} target(s) missed" if failed else "all targets met")
    return 0  # a missed target is in the table and the HEADLINE lines (PASS/FAIL), as in the other benchmarks


if __name__ == "__main__":
    sys.exit(main())
