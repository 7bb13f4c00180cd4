"""Benchmark: Structured Streaming micro-batches appended by the JVM tap against the Python writer (issue 16).

``tap_batches(log, stream, engine=…)`` is the ``foreachBatch`` function that appends each micro-batch to an open
stream. Here each round hands both engines the same batch DataFrame (``--rows`` rows, default 2M, of
``bench_spark.generate`` in ``--partitions`` partitions on ``local[2]``), as micro-batch ``round``:

micro-batch (python)  ``engine="python"``: ``write.format("eventlog").option("batchId", …)``; Python workers turn
                      the rows into Arrow and stage them; the driver appends the staged parts.
micro-batch (jvm)     ``engine="jvm"``: the tasks stage their partitions inside the JVM (``PartStage``); the
                      driver appends the staged parts the same way.

The driver's append (reading the staged parts, one Messages event per part, the Progress) is the same code in
both; the difference is the tasks'. Rounds interleave both engines (rotating order); best, median, spread and
the load are printed.

Usage::

    .venv/bin/python tools/bench/bench_jvm_batches.py [--rows N] [--partitions N] [--reps N] [--quick]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import ROUNDS, Load, Samples, fmt_count_rate, format_table, headline  # noqa: E402
from bench_spark import generate, session  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=None, help="rows per micro-batch (default 2M; --quick 500k)")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--reps", "--rounds", dest="reps", type=int, default=ROUNDS, help=f"rounds (default {ROUNDS})")
    p.add_argument("--quick", action="store_true", help="500k rows a batch")
    args = p.parse_args()
    args.rows = args.rows or (500_000 if args.quick else 2_000_000)
    work = tempfile.mkdtemp(prefix="bench-jvm-batches-")
    load = Load()

    from capture import tap_batches
    from connectors.spark.jvm import prepare
    from eventlog import open_log

    spark = session(args.partitions)
    prepare(spark)  # build (first run) and load the jar: not timed
    log_dir = os.path.join(work, "log")
    runs = {f"micro-batch ({e})": tap_batches(log_dir, e, engine=e, peers=args.partitions) for e in ("python", "jvm")}
    for run in runs.values():  # warm-up: batch 0 of each stream, untimed
        run(generate(spark, 1000, args.partitions), 0)
    samples = Samples()
    for rep in range(args.reps):
        names = list(runs)
        names = names[rep % len(names):] + names[:rep % len(names)]
        for name in names:
            samples.run(name, lambda: runs[name](generate(spark, args.rows, args.partitions), rep + 1))
        print(f"round {rep + 1}/{args.reps}: " + ", ".join(f"{n} {samples.best(n):.2f}s" for n in samples.names()),
              flush=True)
    log = open_log(log_dir)
    for e in ("python", "jvm"):  # both streams hold every row of every batch, at the batch's time
        total = sum(log.part_stats(e, q).next_seq for q in range(log.header(e).peers))
        assert total > args.reps * args.partitions, f"stream {e} is missing events"
    table = [[n, f"{samples.best(n):.2f}", f"{samples.median(n):.2f}", f"{samples.spread(n) * 100:.0f}%",
              fmt_count_rate(args.rows, samples.best(n))] for n in samples.names()]
    print(f"\n{args.rows:,} rows a micro-batch, {args.partitions} partitions, local[2], {args.reps} interleaved "
          f"rounds; {load}\n")
    print(format_table(["case", "best s", "median s", "spread", "rows/s"], table))
    print()
    print(headline("micro-batch append, JVM tap / Python writer", samples.ratio(
        "micro-batch (jvm)", "micro-batch (python)", higher_is_better=False), None, load))
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
