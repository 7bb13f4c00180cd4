"""Benchmark: the JVM batch reader (``connectors/spark/jvm/read.py``) against ``spark.read.parquet`` of the
same rows (issue 16: replay into a DataFrame <= 1.5x ``spark.read.parquet``; the Python data source took 2.47x).

The rows of ``bench_spark.py`` (``--rows``, default 5M: ``id, user, word, bytes, epoch``, generated in
``--partitions`` partitions, default 4, on ``local[2]``) are captured once by the JVM tap at ``time="epoch"``
(8 times per part, one part per partition), untimed. The replayed DataFrame (the stream's columns plus
``_time, _part, _seq``) is written once as Parquet (snappy, Spark's default), untimed. Then, interleaved in
each of ``--rounds`` rounds (rotating order), each case materialised in full with ``write.format("noop")``:

jvm read        ``read_log(spark, uri, engine="jvm")``: one Spark partition per part, read in the JVM.
parquet read    ``spark.read.parquet`` of the same rows and columns.
python read     ``spark.read.format("eventlog")`` (the Python data source; ``--no-python`` leaves it out).

``HEADLINE`` lines give per-round cost ratios (median, best, spread) and the load average; on a shared machine
read them as provisional. ``--quick`` (1M rows, 5 rounds) takes about a minute.

Usage::

    .venv/bin/python tools/bench/bench_jvm_read.py [--rows N] [--partitions N] [--rounds N] [--quick] [--no-python]
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

from _common import ROUNDS, Load, Samples, fmt_bytes, fmt_count_rate, format_table, headline  # noqa: E402
from bench_spark import dir_size, generate, session  # noqa: E402

TARGET = 1.5


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=5_000_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--rounds", type=int, default=ROUNDS)
    p.add_argument("--quick", action="store_true", help="1M rows (about a minute)")
    p.add_argument("--no-python", action="store_true", help="leave the Python data source's case out")
    p.add_argument("--dir", default=None, help="work directory (default: a temp dir, removed at the end)")
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    args = p.parse_args()
    if args.quick:
        args.rows = min(args.rows, 1_000_000)
    work = args.dir or tempfile.mkdtemp(prefix="bench-jvm-read-")
    os.makedirs(work, exist_ok=True)
    load = Load()

    from connectors.spark.jvm import jvm_tap, prepare
    from connectors.spark.jvm.read import read_log

    spark = session(args.partitions)
    prepare(spark)  # build (first run) and load the jar: not timed
    log_dir, parquet = os.path.join(work, "log"), os.path.join(work, "parquet")
    shutil.rmtree(log_dir, ignore_errors=True)
    jvm_tap(generate(spark, args.rows, args.partitions), log_dir, "rows", time="epoch") \
        .write.format("noop").mode("overwrite").save()
    uri = f"{log_dir}/rows"
    read_log(spark, uri, engine="jvm").write.mode("overwrite").parquet(parquet)
    assert read_log(spark, uri, engine="jvm").count() == args.rows
    assert spark.read.parquet(parquet).count() == args.rows

    def noop(df) -> None:
        df.write.format("noop").mode("overwrite").save()

    cases = {
        "jvm read": lambda: noop(read_log(spark, uri, engine="jvm")),
        "parquet read": lambda: noop(spark.read.parquet(parquet)),
    }
    if not args.no_python:
        cases["python read"] = lambda: noop(read_log(spark, uri, engine="python"))
    for fn in cases.values():  # warm up (JIT, class loading, Python workers): not timed
        fn()
    samples = Samples()
    for r in range(args.rounds):
        names = list(cases)
        names = names[r % len(names):] + names[:r % len(names)]
        for name in names:
            samples.run(name, cases[name])
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{n} {samples.best(n):.2f}s" for n in samples.names()), flush=True)

    print(f"\n{args.rows:,} rows, {args.partitions} parts (8 times each), local[2], {args.rounds} interleaved rounds; "
          f"{load}")
    print(f"sizes: log {fmt_bytes(dir_size(uri))}, parquet {fmt_bytes(dir_size(parquet))}\n")
    print(format_table(
        ["case", "best s", "median s", "spread", "rows/s"],
        [[n, f"{samples.best(n):.2f}", f"{samples.median(n):.2f}", f"{samples.spread(n) * 100:.0f}%",
          fmt_count_rate(args.rows, samples.best(n))] for n in samples.names()],
        markdown=args.markdown))
    print()
    print(headline("jvm read / parquet read", samples.ratio("jvm read", "parquet read", higher_is_better=False),
                   TARGET, load))
    if not args.no_python:
        print(headline("python read / parquet read",
                       samples.ratio("python read", "parquet read", higher_is_better=False), None, load))
        print(headline("jvm read / python read",
                       samples.ratio("jvm read", "python read", higher_is_better=False), None, load))
    spark.stop()
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
